"""CorrectSlot: the user changed a value they gave before ("make it 8 people").  The calls that used
the old value, and everything after them, run again (FlowAgent's going back)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from ..frames import Frame, top
from .base import ApplyEnv, Command, replace_top


class CorrectSlot(Command):
    command: Literal["correct_slot"] = "correct_slot"
    kind: ClassVar[str] = "correct_slot"
    slot: str
    value: Any
    previous: Any = None
    confidence: float = 1.0

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        frame = top(stack)
        if frame is None:
            return stack
        slots = {**(frame.get("slots") or {}), self.slot: self.value}
        executed = env.invalidate(frame, {self.slot: self.value})
        update = {"slots": slots} if executed is None else {"slots": slots, "executed": executed, "status": "active"}
        return replace_top(stack, Frame(**{**frame, **update}))
