"""The ``tools`` node: runs the accepted tool proposal through the workflow's binding.

Irreversible APIs (``api.irreversible`` with ``context.confirm_irreversible``) first ask the user
through a LangGraph ``interrupt``; a "no" cancels that call (recorded, never run).  An answer that says
more than no (a correction, a question: ``workflows.text.says_more``) also cancels it and is added to
``messages`` as the user's next turn, which ``graph.agent.after_tools`` routes to the detector.  The outcome —
success, tool error or cancellation — goes to the active frame as a ``call`` stack operation
(executed and results only on success), to ``messages`` (an AIMessage carrying the tool call + its
ToolMessage) and to ``trace`` as an environment event.  Tool errors never crash the graph.

Exactly once (``memory.effects``): every call runs under an idempotency key — the run's thread id,
the turn and a call id a replay of this step computes again — recorded in the ledger beside the
checkpoints before the call and completed after it.  A replayed step gets the recorded outcome
without calling the tool again; a call whose outcome is unknown (the process died during it) is
reconciled, never blindly repeated.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from graph.context import Context
from graph.resources import get_resources, ledger_of, thread_of_run
from dialogue.commands import SetSlot, dump
from dialogue.frames import top
from dialogue.understanding.slots import referents, referred_values
from graph.state import State
from memory.effects import key_for, run_once
from workflows.sanitize import MAX_MESSAGE_CHARS, normalize_text, redact_data, user_args
from workflows.text import confirms, message_text, role_of, says_more
from workflows.pdl import Api, Workflow



def confirmed(answer: Any) -> bool:
    """Read the user's answer to a confirmation: bool, {"confirm": bool} or text (``workflows.text.confirms``:
    a yes with a change or a question in it is no yes). Unclear means no."""
    if isinstance(answer, bool):
        return answer
    if isinstance(answer, dict):
        for key in ("confirm", "confirmed", "approved", "answer", "text"):
            if key in answer:
                return confirmed(answer[key])
        return False
    return confirms(str(answer or ""))


def confirmation_question(api: Api, args: dict, wf: Workflow | None = None) -> str:
    """The yes/no question before an irreversible call: it lists what the user gave (the workflow's slots),
    never a value another call returned for the tools (an auth token) nor anything named like a secret."""
    shown = user_args(args, {s.name for s in wf.slots} if wf is not None else set())
    details = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in shown.items())
    return (f"Please confirm before I {api.name.replace('_', ' ')} ({details}). "
            "This cannot be undone — shall I go ahead? (yes/no)")


def earlier_calls(state: State, turn: int, name: str, args: dict) -> int:
    """Identical calls the stack already records for this turn (part of the call's key)."""
    return sum(1 for f in state.get("stack") or [] for c in f.get("calls") or []
               if c.get("turn") == turn and c.get("api") == name and c.get("args") == args)


def referred_now(state: State, wf, frame: dict, data: dict) -> dict[str, Any]:
    """Values of the frame's slots that the user's words point at in what a call just returned
    (``dialogue.understanding.slots.referred_values``): this turn's message (read before the lookup), then the
    frame's earlier messages by an item's name — said before the list existed ("I want to return the ceramic
    vase" before the order's items were looked up).  A slot whose value names none of the listed items (a
    free-text answer that was about something else: "it arrived cracked") is open to them too."""
    slots = frame.get("slots") or {}
    values = {**(frame.get("results") or {}), **data}
    open_slots = [s.name for s in wf.slots if set(referents(s.name)) & set(data) and (
        slots.get(s.name) in (None, "")
        or isinstance(slots[s.name], str) and not referred_values(slots[s.name], wf, values, [s.name], named_only=True))]
    if not open_slots:
        return {}
    users = [t for m in state.get("messages") or [] if role_of(m) == "user" and (t := message_text(m).strip())]
    earlier = users[max(int(frame.get("started") or 1) - 1, 0):-1]  # the frame's messages before this turn's
    text = (state.get("reading") or {}).get("text") or ""
    out: dict[str, Any] = {}
    for said, named_only in [(text, False), *((t, True) for t in reversed(earlier))]:
        rest = [n for n in open_slots if n not in out]
        if not rest:
            break
        out.update(referred_values(said, wf, values, rest, named_only=named_only) if said else {})
    return out


def tools(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    action = dict(state.get("action") or {})
    if action.get("kind") != "tool":
        return {}
    name, args = action.get("name", ""), dict(action.get("args") or {})
    call_id = action.get("call_id") or f"call-{name}"
    res = get_resources(ctx)
    frame = top(state.get("stack"))
    wf = res.library.workflows.get(frame["workflow"]) if frame else None
    wf_name = wf.name if wf is not None else ""
    turn = int(state.get("turn") or 0)
    api = wf.api(name) if wf else None

    status, data, error, elapsed, reread = "ok", {}, None, 0.0, ""
    thread = thread_of_run()
    key = key_for(thread, turn, name, args, earlier_calls(state, turn, name, args))
    replayed = reconciled = False
    if api is not None and api.irreversible and ctx.confirm_irreversible:
        answer = interrupt({"kind": "confirm", "workflow": wf_name, "api": name, "args": redact_data(args),
                            "question": confirmation_question(api, args, wf)})
        if not confirmed(answer):
            status, error = "cancelled", f"{name}: cancelled — the user declined to go ahead"
            reply = normalize_text(answer).strip() if isinstance(answer, str) else ""
            # "wait no, it's the debit one, 6045": the call is off, and the words are read as the user's next
            # turn (``graph.agent.after_tools``), so the correction reaches the frame before anything runs
            reread = reply if says_more(reply) and len(reply) <= MAX_MESSAGE_CHARS else ""
    if status == "ok":
        if wf is None:
            result_ok, data, error = False, {}, f"{name}: no active workflow to run it in"
        else:
            outcome = run_once(ledger_of(ctx), res.tools, wf, name, args, key, thread=thread)
            result = outcome.result
            result_ok, data, error, elapsed = result.ok, result.data, result.error, result.elapsed_ms
            replayed, reconciled = outcome.replayed, outcome.reconciled
        status = "ok" if result_ok else "error"

    update: dict[str, Any] = {}
    if frame is not None:
        update["stack"] = [{"op": "call", "frame": frame["id"], "result": data if status == "ok" else {},
                            "call": {"api": name, "args": args, "status": status, "turn": turn, "key": key or call_id,
                                     **({"reread": True} if reread else {})}}]
        if reread and wf is not None:  # the confirmation asked about the values it listed: a bare "6045" is one
            update["stack"][0]["asked"] = list(user_args(args, {s.name for s in wf.slots}))
        referred = referred_now(state, wf, frame, data) if status == "ok" else {}
        if referred:  # the user's words point into what the call returned ("send back the table runner")
            update["stack"][0]["slots"] = referred
            update["commands"] = dump(SetSlot(slot=k, value=v, confidence=0.8, turn=turn) for k, v in referred.items())
    content = json.dumps(data if status == "ok" else {"error": error, **{k: v for k, v in data.items() if k != "error"}},
                         default=str, ensure_ascii=False)
    update["messages"] = [
        AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]),
        ToolMessage(content=content, tool_call_id=call_id, name=name, status="success" if status == "ok" else "error"),
        *([HumanMessage(reread)] if reread else []),
    ]
    # the event log is not the workflow's memory: credentials in it are redacted by name as well
    update["trace"] = [{"event": "environment", "workflow": wf_name, "api": name, "args": redact_data(args),
                        "ok": status == "ok", "status": status, "result": redact_data(data), "error": error,
                        "elapsed_ms": round(elapsed, 2), "turn": turn, "key": key, "replayed": replayed,
                        "reconciled": reconciled}]
    return update
