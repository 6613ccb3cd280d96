"""FlowAgent's controllers as two nodes: soft hints before the executor decides, hard checks after.

``pre_controller`` writes ``hints`` (``dialogue.control.hints``).  ``post_controller`` runs the
enabled checks of ``dialogue.control.checks`` on the executor's ``proposal``: an accepted proposal
becomes the turn's ``action``; rejections are appended to ``violations`` (stamped with the frame they
were judged against) and the executor retries; after ``context.max_attempts`` rejected proposals in a
turn (or at once when the session is too long) a safe reply is the ``action`` — the invalid action
itself never reaches a tool or the user.  ``route_after_post`` is the edge that follows.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from langgraph.runtime import Runtime

from dialogue.control.checks import CheckEnv, done_key, run_checks
from dialogue.control.hints import hints_for
from dialogue.control.safe_reply import safe_reply
from dialogue.execution.replies import answer_text
from dialogue.frames import fingerprint, scope_of, top
from graph.context import Context
from graph.resources import get_resources
from graph.state import State, given_slots, turn_commands
from workflows.sanitize import user_args


def _active(state: State, ctx: Context):
    res = get_resources(ctx)
    frame = top(state.get("stack")) or {}
    wf = res.library.workflows.get(frame.get("workflow") or "")
    interp = res.interpreters.get(wf.name) if wf is not None else None
    env = CheckEnv(turn=int(state.get("turn") or 0), max_turns=ctx.max_turns, max_api_repeats=ctx.max_api_repeats,
                   scope=scope_of(frame, state.get("reading")), procedure=interp.procedure if interp else None,
                   prerequisites=tuple(state.get("prerequisites") or ()) if ctx.experience else (),
                   given=tuple(given_slots(turn_commands(state))), done_before=_done_before(state, res, wf))
    return wf, frame, env


def _done_before(state: State, res, wf) -> tuple:
    """The irreversible calls of the workflow that succeeded earlier in the conversation, in any task
    (``CheckEnv.done_before``), read from the event log the tools node writes (a finished task may have left
    the stack); by the values the user gave (the log redacts credentials)."""
    if wf is None:
        return ()
    slots = {s.name for s in wf.slots}
    out = []
    for e in state.get("trace") or []:
        api = wf.api(e.get("api") or "") if e.get("event") == "environment" and e.get("ok") else None
        if api is not None and api.irreversible and e.get("workflow") == wf.name:
            out.append(done_key(api.name, user_args(e.get("args") or {}, slots)))
    return tuple(out)


def pre_controller(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    wf, frame, env = _active(state, runtime.context)
    return {"hints": hints_for(wf, frame, env, env.procedure)}


def post_controller(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    wf, frame, env = _active(state, ctx)
    proposal = dict(state.get("proposal") or {}) or {"kind": "reply", "name": "", "text": ""}
    if proposal.get("kind") == "reply" and not (proposal.get("text") or "").strip() and wf is not None \
            and wf.answer(proposal.get("name", "")):  # a name alone: fill its template
        proposal["text"] = answer_text(wf, proposal["name"], env.scope.values)
    if proposal.get("kind") == "tool" and not proposal.get("call_id"):
        proposal["call_id"] = f"call-{uuid.uuid4().hex[:8]}"
    rejections = [v for v in run_checks(proposal, wf, frame, env, ctx.disabled_check_names) if not v["ok"]]
    if not rejections:
        return {"action": proposal}
    earlier = [v for v in state.get("violations") or [] if v.get("turn") == env.turn]
    attempt = len({v.get("attempt") for v in earlier}) + 1
    at = fingerprint(frame)
    stamped = [{**v, "turn": env.turn, "attempt": attempt, "at": at} for v in rejections]
    over_length = any(v["controller"] in ("session_length", "turn_budget") for v in rejections)
    action = safe_reply(rejections, wf, frame.get("executed") or []) if attempt >= ctx.max_attempts or over_length \
        else None
    return {"violations": stamped, "action": action}


def route_after_post(state: State) -> Literal["executor", "tools", "respond"]:
    """post_controller → executor (rejected, retry) | tools (tool call) | respond (reply)."""
    action = state.get("action")
    if not action:
        return "executor"
    return "tools" if action.get("kind") == "tool" else "respond"
