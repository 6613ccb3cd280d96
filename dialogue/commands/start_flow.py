"""StartFlow: the user wants a task done.  With ``workflow`` unset it asks the retriever to find the
workflow for ``query`` (the detector's SEARCH); with it set, that workflow becomes active — an
interrupted instance of it is taken back with its progress, the previous active one is interrupted.
``queued``: a second request of the same message (``dialogue.understanding.requests``) — its frame waits
just below the active one (interrupted, ``Frame.queued``) and starts when the active one is finished."""

from __future__ import annotations

import re
from typing import Literal

from ..frames import Frame, new_frame
from .base import ApplyEnv, Command, activate


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
            frame = new_frame(self.workflow, env.turn, carried(stack, self.workflow, env, self.query))
            if self.belief:
                frame["belief"] = dict(self.belief)
            return frame

        out = activate(stack, self.workflow, env, new)
        if self.belief and out and out[-1].get("workflow") == self.workflow and out[-1].get("belief") != self.belief:
            # Searched again and found the same workflow (or took it back): the new pick's belief holds.
            out = [*out[:-1], Frame(**{**out[-1], "belief": dict(self.belief)})]
        return out


# "where is my other order?": the request is about another thing than the one an earlier task held
_ANOTHER = re.compile(r"\b(?:other|another|different|second|separate)\b", re.I)


def carried(stack: list[Frame], workflow: str, env: ApplyEnv, request: str = "") -> dict:
    """The values a new instance of ``workflow`` starts with: for each slot that carries (``ApplyEnv.carries``:
    who the user is, what they refer to), the latest value an earlier task of the conversation holds under
    that name, given or returned ("cancel B-1008" — "no, leave it" — "push it to 9.30pm instead": the change is
    of B-1008).  None when the request says it is about another one ("where is my other order?")."""
    out: dict = {}
    if _ANOTHER.search(request or ""):
        return out
    for name in env.slots_of(workflow):
        if not env.carries(workflow, name):
            continue
        # what the user gave, or what an earlier task returned for it ("book ... " — "plans changed, cancel that
        # please": the booking just made)
        value = next((v for f in reversed(stack) for v in ((f.get("slots") or {}).get(name),
                                                            (f.get("results") or {}).get(name)) if v not in (None, "")),
                     None)
        if value is not None and env.takes(workflow, name, value):
            out[name] = value
    return out
