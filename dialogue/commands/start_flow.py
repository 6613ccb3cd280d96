"""StartFlow: the user wants a task done.  With ``workflow`` unset it asks the retriever to find the
workflow for ``query`` (the detector's SEARCH); with it set, that workflow becomes active — an
interrupted instance of it is taken back with its progress, the previous active one is interrupted.
``queued``: a second request of the same message (``dialogue.understanding.requests``) — its frame waits
just below the active one (interrupted, ``Frame.queued``) and starts when the active one is finished."""

from __future__ import annotations

from typing import Literal

from ..frames import Frame, new_frame
from .base import ApplyEnv, Command, activate, remembered


class StartFlow(Command):
    command: Literal["start_flow"] = "start_flow"
    workflow: str | None = None  # None: to be found by retrieval
    query: str = ""  # the self-generated query that found it
    confidence: float = 1.0
    source: str = "detector"  # detector | retriever | clarify | llm
    belief: dict[str, float] = {}  # the pick's log-probabilities over the runners-up (Frame.belief)
    queued: bool = False  # wait below the active workflow until it is finished

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        if not self.workflow or not env.has_workflow(self.workflow):
            return stack
        if self.queued and stack and stack[-1].get("workflow") != self.workflow:
            waiting = Frame(**{**new_frame(self.workflow, env.turn), "status": "interrupted", "queued": True})
            return [*stack[:-1], waiting, stack[-1]]

        def new() -> Frame:
            frame = new_frame(self.workflow, env.turn, remembered(stack, self.workflow, env, self.query))
            if self.belief:
                frame["belief"] = dict(self.belief)
            return frame

        out = activate(stack, self.workflow, env, new)
        if self.belief and out and out[-1].get("workflow") == self.workflow and out[-1].get("belief") != self.belief:
            # Searched again and found the same workflow (or took it back): the new pick's belief holds.
            out = [*out[:-1], Frame(**{**out[-1], "belief": dict(self.belief)})]
        return out

