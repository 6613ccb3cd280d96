"""SetSlot: the user gave a value for a slot of the active workflow that had none."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from ..frames import Frame, top
from .base import ApplyEnv, Command, replace_top


class SetSlot(Command):
    command: Literal["set_slot"] = "set_slot"
    kind: ClassVar[str] = "set_slot"
    slot: str
    value: Any
    confidence: float = 1.0

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        frame = top(stack)
        if frame is None:
            return stack
        slots = {**(frame.get("slots") or {}), self.slot: self.value}
        # new information: an API that ran without it is stale
        executed = env.invalidate(frame, {self.slot: self.value})
        update = {"slots": slots} if executed is None else {"slots": slots, "executed": executed, "status": "active"}
        return replace_top(stack, Frame(**{**frame, **update}))
