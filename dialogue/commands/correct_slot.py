"""CorrectSlot: the user changed a value they gave before ("make it 8 people").  The calls that used
the old value, and everything after them, run again (FlowAgent's going back)."""

from __future__ import annotations

from typing import Any, Literal

from ..frames import Frame
from .base import ApplyEnv, Command, set_on_top


class CorrectSlot(Command):
    command: Literal["correct_slot"] = "correct_slot"
    slot: str
    value: Any
    previous: Any = None
    confidence: float = 1.0

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        return set_on_top(stack, self.slot, self.value, env)
