"""ResumeFlow: the user goes back to an interrupted workflow ("back to the booking").  It becomes
active with its saved progress; the workflow it interrupts is kept below when unfinished."""

from __future__ import annotations

from typing import Literal

from ..frames import Frame
from .base import ApplyEnv, Command, activate


class ResumeFlow(Command):
    command: Literal["resume_flow"] = "resume_flow"
    workflow: str

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        if not any(f.get("workflow") == self.workflow and f.get("status") == "interrupted" for f in stack):
            return stack
        return activate(stack, self.workflow, env, lambda: {})  # type: ignore[arg-type,return-value]
