"""CancelFlow: the user stops the active workflow ("never mind", "cancel that").  Its frame leaves the
stack; what was interrupted below stays resumable (it is not resumed unasked)."""

from __future__ import annotations

from typing import Literal

from ..frames import Frame
from .base import ApplyEnv, Command


class CancelFlow(Command):
    command: Literal["cancel_flow"] = "cancel_flow"
    workflow: str

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        if not stack or stack[-1].get("workflow") != self.workflow:
            return stack
        return stack[:-1]
