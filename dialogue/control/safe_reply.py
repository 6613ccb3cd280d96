"""The reply that is always allowed: after ``max_attempts`` rejections (or at once when the session is
too long) the rejected action is replaced by a clarification, an apology or an offer of a colleague —
chosen from the verdicts' structured data, never from their reason texts."""

from __future__ import annotations

import uuid
from typing import Any

from workflows.pdl import Workflow
from workflows.text import humanize

SAFE_REPLY = "safe_reply"


def safe_reply(rejections: list[dict[str, Any]], wf: Workflow | None, executed: list[str]) -> dict[str, Any]:
    kinds = {v["controller"] for v in rejections}
    last = rejections[-1]
    name = last.get("proposal", {}).get("name", "that")
    call_id = f"safe-{uuid.uuid4().hex[:8]}"
    if kinds & {"session_length", "turn_budget"}:
        text = ("We have been at this for a while, so I'd like to hand you over to a colleague who can "
                "finish it with you. Is that all right?")
    elif "user_declined" in kinds:
        text = f"Understood — I have not gone ahead with {humanize(name)}. What would you like to do instead?"
    elif "argument_schema" in kinds and wf is not None:
        fields = list(dict.fromkeys(f for v in rejections if v["controller"] == "argument_schema"
                                    for f in v.get("fields") or []))
        described = [(wf.slot(f).description or f) if wf.slot(f) else humanize(f) for f in fields]
        text = "Before I can continue, could you tell me " + (", ".join(described) or "a few more details") + "?"
        return {"kind": "reply", "name": "request_information", "args": {"slots": fields}, "text": text,
                "call_id": call_id}
    elif kinds & {"node_dependency", "procedure_branch", "reply_claim"}:
        # say what is missing in the user's words, not the controller's
        node = (wf.api(name) or wf.answer(name)) if wf is not None else None
        done = set(executed)
        missing = [d for d in (node.precondition if node else []) if d not in done]
        if not missing:
            missing = [m for v in rejections for m in v.get("missing") or [] if wf is not None and wf.api(m)]
        step = humanize(missing[0]) if missing else "an earlier step"
        text = (f"I'm sorry, I can't do that yet — {step} has to be done first. Shall we continue step by "
                "step, or would you like me to connect you with a colleague?")
    else:
        text = ("I'm sorry, something went wrong on my side and I could not complete that step. Could you "
                "rephrase what you need, or shall I connect you with a colleague?")
    return {"kind": "reply", "name": SAFE_REPLY, "args": {}, "text": text, "call_id": call_id}
