"""The ``tools`` node: runs the accepted tool proposal through the workflow's binding.

Irreversible APIs (``api.irreversible`` with ``context.confirm_irreversible``) first ask the user
through a LangGraph ``interrupt``; a "no" cancels that call (recorded, never run).  The outcome —
success, tool error or cancellation — is written to ``progress`` (executed only on success),
to ``messages`` (an AIMessage carrying the tool call + its ToolMessage) and to ``trace`` as an
environment event.  Tool errors never crash the graph.
"""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from graph.context import Context
from graph.resources import get_resources
from graph.state import State
from workflows.pdl import Api

_YES = {"yes", "y", "yeah", "yep", "sure", "ok", "okay", "confirm", "confirmed", "go", "proceed", "please",
        "correct", "absolutely", "definitely", "do"}
_NO = {"no", "n", "nope", "don't", "dont", "not", "cancel", "stop", "wait", "never", "abort"}


def confirmed(answer: Any) -> bool:
    """Read the user's answer to a confirmation: bool, {"confirm": bool} or text. Unclear means no."""
    if isinstance(answer, bool):
        return answer
    if isinstance(answer, dict):
        for key in ("confirm", "confirmed", "approved", "answer", "text"):
            if key in answer:
                return confirmed(answer[key])
        return False
    words = set(re.findall(r"[a-z']+", str(answer or "").lower()))
    return bool(words & _YES) and not (words & _NO)


def confirmation_question(api: Api, args: dict) -> str:
    details = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in args.items())
    return (f"Please confirm before I {api.name.replace('_', ' ')} ({details}). "
            "This cannot be undone — shall I go ahead? (yes/no)")


def tools(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    proposal = dict(state.get("proposal") or {})
    if proposal.get("kind") != "tool":
        return {}
    name, args = proposal.get("name", ""), dict(proposal.get("args") or {})
    call_id = proposal.get("call_id") or f"call-{name}"
    wf_name = state.get("active_workflow") or ""
    res = get_resources(ctx)
    wf = res.library.workflows.get(wf_name)
    all_progress = dict(state.get("progress") or {})
    progress = dict(all_progress.get(wf_name) or {})
    turn = state.get("turn") or 0
    api = wf.api(name) if wf else None

    status, data, error, elapsed = "ok", {}, None, 0.0
    if api is not None and api.irreversible and ctx.confirm_irreversible:
        answer = interrupt({"kind": "confirm", "workflow": wf_name, "api": name, "args": args,
                            "question": confirmation_question(api, args)})
        if not confirmed(answer):
            status, error = "cancelled", f"{name}: cancelled — the user declined to go ahead"
    if status == "ok":
        if wf is None:
            result_ok, data, error = False, {}, f"{name}: no active workflow to run it in"
        else:
            result = res.tools.run(wf, name, args)
            result_ok, data, error, elapsed = result.ok, result.data, result.error, result.elapsed_ms
        status = "ok" if result_ok else "error"

    calls = dict(progress.get("calls") or {})
    call_args = list(progress.get("call_args") or [])
    call_args.append({"api": name, "args": args, "status": status, "turn": turn})
    if status != "cancelled":
        calls[name] = calls.get(name, 0) + 1
    if status == "ok":
        progress["executed"] = list(progress.get("executed") or []) + [name]
        results = dict(progress.get("results") or {})
        results.update(data)  # returned values by name, latest wins (templates and conditions read these)
        progress["results"] = results
    progress.update(calls=calls, call_args=call_args)
    all_progress[wf_name] = progress

    content = json.dumps(data if status == "ok" else {"error": error, **{k: v for k, v in data.items() if k != "error"}},
                         default=str, ensure_ascii=False)
    messages = [
        AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]),
        ToolMessage(content=content, tool_call_id=call_id, name=name, status="success" if status == "ok" else "error"),
    ]
    event = {"event": "environment", "workflow": wf_name, "api": name, "args": args, "ok": status == "ok",
             "status": status, "result": data, "error": error, "elapsed_ms": round(elapsed, 2), "turn": turn}
    return {"progress": all_progress, "messages": messages, "trace": [event]}
