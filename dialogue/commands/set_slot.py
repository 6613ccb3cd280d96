"""SetSlot: the user gave a value for a slot of the active workflow that had none."""

from __future__ import annotations

from typing import Any, Literal

from ..frames import Frame
from .base import ApplyEnv, Command, set_on_top


class SetSlot(Command):
    command: Literal["set_slot"] = "set_slot"
    slot: str
    value: Any
    confidence: float = 1.0

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        return set_on_top(stack, self.slot, self.value, env)
