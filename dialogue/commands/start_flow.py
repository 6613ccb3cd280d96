"""StartFlow: the user wants a task done.  With ``workflow`` unset it asks the retriever to find the
workflow for ``query`` (the detector's SEARCH); with it set, that workflow becomes active — an
interrupted instance of it is taken back with its progress, the previous active one is interrupted."""

from __future__ import annotations

from typing import Literal

from ..frames import Frame, new_frame
from .base import ApplyEnv, Command, activate


class StartFlow(Command):
    command: Literal["start_flow"] = "start_flow"
    workflow: str | None = None  # None: to be found by retrieval
    query: str = ""  # the self-generated query that found it
    confidence: float = 1.0
    source: str = "detector"  # detector | retriever | clarify | llm

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        if not self.workflow or not env.has_workflow(self.workflow):
            return stack
        return activate(stack, self.workflow, env, lambda: new_frame(self.workflow, env.turn))
