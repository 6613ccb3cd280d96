"""ReviseFlow and VerifyFlow: later evidence re-examines the workflow picked earlier.

``ReviseFlow(workflow, previous)``: the pick was wrong — the active ``previous`` frame is replaced by a
new frame of ``workflow`` (same start turn, the belief kept), carrying over the slot values whose names
the new workflow also has; nothing it ran is carried (its calls belonged to the wrong workflow).
``VerifyFlow(workflow)``: the pick holds — only the frame's belief is updated
(``dialogue.understanding.belief``).
"""

from __future__ import annotations

from typing import Literal

from ..frames import Frame, new_frame
from .base import ApplyEnv, Command, replace_top


def _on_top(stack: list[Frame], workflow: str) -> Frame | None:
    frame = stack[-1] if stack else None
    return frame if frame is not None and frame.get("workflow") == workflow and frame.get("status") == "active" \
        else None


class ReviseFlow(Command):
    command: Literal["revise_flow"] = "revise_flow"
    workflow: str
    previous: str
    belief: dict[str, float] = {}
    reason: str = ""

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        frame = _on_top(stack, self.previous)
        if frame is None or not env.has_workflow(self.workflow):
            return stack
        fits = env.slots_of(self.workflow)
        slots = {k: v for k, v in (frame.get("slots") or {}).items() if k in fits}
        new = new_frame(self.workflow, int(frame.get("started") or env.turn), slots)
        new["belief"] = dict(self.belief or frame.get("belief") or {})
        # An interrupted instance of the same workflow below is superseded by the revised frame.
        rest = [f for f in stack[:-1] if not (f.get("workflow") == self.workflow and f.get("status") == "interrupted")]
        return [*rest, new]


class VerifyFlow(Command):
    command: Literal["verify_flow"] = "verify_flow"
    workflow: str
    belief: dict[str, float] = {}

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        frame = _on_top(stack, self.workflow)
        if frame is None:
            return stack
        return replace_top(stack, Frame(**{**frame, "belief": dict(self.belief)}))
