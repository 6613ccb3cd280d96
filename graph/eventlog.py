"""Wiring of the session event log (``memory.events``) into the agent graph.

``logged(name, fn, default_location)`` wraps a node: after the node returns its update, the events
that update stands for are appended to the run's log — the user's message and the detector's decision
and commands, the retriever's candidates, the injected experience, the executor's proposal, the
controller's rejections and safe replies, tool calls with their result, error or cancellation, the
confirmation asked through an ``interrupt`` and its answer, the agent's reply and a workflow
instance's outcome.  Every way into the graph (Python, ``flowdesk chat``, the dev server) runs these
nodes, so every way is logged.  The log's location: ``Context.event_log`` (``off`` disables it), else
beside the checkpoints (``build_agent`` passes ``default_location``).  Logging never breaks a turn: an
unavailable log is reported once per location on the ``flowdesk.events`` logger.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

from langgraph.config import get_config
from langgraph.errors import GraphInterrupt

from dialogue.frames import top
from memory.events import Event, EventLogError, shared_event_log

log = logging.getLogger("flowdesk.events")
_WARNED: set[str] = set()


def _run_ids() -> tuple[str, str]:
    try:
        conf = get_config().get("configurable") or {}
    except RuntimeError:
        return "", ""
    thread = str(conf.get("thread_id") or "")
    return thread, str(conf.get("session_id") or thread)


def events_of(node: str, state: dict, update: dict, api_irreversible: Callable[[str, str], bool]) -> list[dict]:
    """The events a node's update stands for, as ``Event`` fields without thread/session."""
    frame = top(state.get("stack")) or {}
    base = {"turn": int(update.get("turn") or state.get("turn") or 0), "workflow": frame.get("workflow") or "",
            "frame": frame.get("id") or ""}
    out: list[dict] = []
    for ev in update.get("trace") or []:
        kind = ev.get("event")
        wf = ev.get("workflow") if ev.get("workflow") is not None else base["workflow"]
        here = {**base, "workflow": wf or "", "frame": base["frame"] if wf == base["workflow"] else ""}
        if kind == "user":
            out.append({**here, "kind": "user", "data": {"text": ev.get("text", ""), **(
                {"answer": ev["answer"]} if "answer" in ev else {})}})
            if ev.get("decision"):
                out.append({**here, "kind": "decision", "data": {
                    "decision": ev.get("decision"), "query": update.get("search_query", ""),
                    "commands": [{k: v for k, v in c.items() if k != "turn"} for c in update.get("commands") or []]}})
        elif kind == "environment":
            api, status = ev.get("api", ""), ev.get("status")
            if api_irreversible(wf or "", api):
                out.append({**here, "kind": "interrupt_answer", "name": api,
                            "data": {"confirmed": status != "cancelled"}})
            out.append({**here, "kind": "tool_call", "name": api, "data": {"args": ev.get("args") or {}}})
            result_kind = {"ok": "tool_result", "cancelled": "tool_cancelled"}.get(status, "tool_error")
            out.append({**here, "kind": result_kind, "name": api, "data": {
                "args": ev.get("args") or {}, "result": ev.get("result") or {}, "error": ev.get("error"),
                "replayed": bool(ev.get("replayed"))}})
        elif kind == "assistant":
            out.append({**here, "kind": "reply", "name": ev.get("answer") or "",
                        "data": {"text": ev.get("text", ""), "asks": ev.get("asks") or []}})
        elif kind == "recovered":
            out.append({**here, "kind": "recovered", "data": {"calls": ev.get("calls") or []}})
    if node == "retriever" and update.get("candidates"):
        out.append({**base, "kind": "candidates", "data": {"candidates": [
            {k: c.get(k) for k in ("workflow", "score", "retriever", "level")} for c in update["candidates"][:5]]}})
    if node == "experience" and update.get("experience"):
        out.append({**base, "kind": "experience", "data": {
            "text": update["experience"], "prerequisites": update.get("prerequisites") or []}})
    if node == "executor" and update.get("proposal"):
        p = update["proposal"]
        out.append({**base, "kind": "proposal", "name": p.get("name") or "",
                    "data": {"proposal_kind": p.get("kind"), "args": p.get("args") or {}}})
    if node == "post_controller":
        for v in update.get("violations") or []:
            out.append({**base, "kind": "verdict", "name": (v.get("proposal") or {}).get("name") or "",
                        "data": {"controller": v.get("controller"), "reason": v.get("reason"), "ok": False,
                                 "proposal_kind": (v.get("proposal") or {}).get("kind"),
                                 "args": (v.get("proposal") or {}).get("args") or {}}})
        action = update.get("action")
        if action and update.get("violations"):
            out.append({**base, "kind": "verdict", "name": action.get("name") or "",
                        "data": {"controller": "safe_reply", "ok": True}})
    if node == "respond" and (update.get("stack") or [{}])[0].get("done"):
        out.append({**base, "kind": "outcome", "data": {"status": "completed"}})
    return out


def logged(name: str, fn: Callable, default_location: str) -> Callable:
    """``fn`` (a node taking ``(state, runtime)`` with a resolved ``Context``) that also logs its events."""

    @functools.wraps(fn)
    def node(state: dict, runtime) -> dict[str, Any]:
        ctx = runtime.context
        location = ctx.event_log or default_location
        if not location or location == "off":
            return fn(state, runtime)
        try:
            update = fn(state, runtime)
        except GraphInterrupt as exc:  # a question to the user (e.g. confirm an irreversible call)
            payload = [getattr(i, "value", None) for i in (exc.args[0] if exc.args else [])]
            frame = top(state.get("stack")) or {}
            _append(location, [{"kind": "interrupt", "turn": int(state.get("turn") or 0),
                                "workflow": frame.get("workflow") or "", "frame": frame.get("id") or "",
                                "name": str((payload[0] or {}).get("api", "")) if payload and isinstance(payload[0], dict)
                                else "", "data": {"payload": payload}}])
            raise
        if update:
            from .resources import get_resources

            def irreversible(wf: str, api: str) -> bool:
                w = get_resources(ctx).library.workflows.get(wf)
                a = w.api(api) if w is not None else None
                return bool(a is not None and a.irreversible and ctx.confirm_irreversible)

            _append(location, events_of(name, state, update, irreversible))
        return update

    return node


def _append(location: str, events: list[dict]) -> None:
    if not events:
        return
    thread, session = _run_ids()
    if not thread:  # no checkpointed thread (a bare graph run): nothing to key the events by
        return
    try:
        shared_event_log(location).append(Event(thread=thread, session=session, **e) for e in events)
    except (EventLogError, OSError) as exc:
        if location not in _WARNED:
            _WARNED.add(location)
            log.warning("event log unavailable, events are not recorded: %s", exc)
