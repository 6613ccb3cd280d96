"""The ``recover`` node: first node of every new message; settles a turn a crash cut short.

A process can die after a tool ran and before the checkpoint recording it was written.  The
conversation state then does not know the call happened (a new message starts a new turn) — the
tool-call ledger does.  Before the message is read, this node takes the thread's calls the state does
not record (``memory.effects.unreported``), settles any whose outcome is unknown
(``memory.effects.reconcile``: asked again with the same key, never blindly repeated), records each
outcome on its workflow's frame (a ``call`` stack operation; a successful irreversible call also
finishes the frame — the report replaces the reply that would have confirmed it) and writes
``recovered``, which the executor turns into the ``pattern_interrupted_turn`` repair pattern at the
head of this turn's reply ("Your request to book a table went through before we were cut off
(booking id B-1012, ...)").  Without a ledger or a thread it does nothing.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dialogue.frames import find
from graph.context import Context
from graph.resources import get_resources, ledger_of, thread_of_run
from graph.state import State
from memory.effects import UNKNOWN_OUTCOME, key_turn, reconcile, recorded, split_tool, unreported


def recover(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    res = get_resources(runtime.context)
    ledger, thread = ledger_of(runtime.context), thread_of_run()
    stack = state.get("stack") or []
    known = [c.get("key") for f in stack for c in f.get("calls") or []]
    records = unreported(ledger, thread, int(state.get("turn") or 0), known)
    if not records:
        return {}
    turn = int(state.get("turn") or 0) + 1  # the turn this message opens (the detector numbers it next)
    ops: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for rec in records:
        wf_name, api_name = split_tool(rec.tool)
        wf = res.workflow(wf_name)
        result = reconcile(ledger, res.tools, wf, rec).result if rec.status == "pending" else recorded(rec)
        unknown = not result.ok and UNKNOWN_OUTCOME in (result.error or "")
        frame = find(stack, wf_name)
        if frame is not None and frame.get("status") != "done":
            ops.append({"op": "call", "frame": frame["id"], "result": result.data if result.ok else {},
                        "call": {"api": api_name, "args": rec.args, "status": "ok" if result.ok else "error",
                                 "turn": key_turn(rec.key), "key": rec.key}})
            api = wf.api(api_name) if wf is not None else None
            if result.ok and api is not None and api.irreversible:
                ops.append({"op": "answer", "frame": frame["id"], "answer": "", "asked": [], "done": True})
        notes.append({"turn": turn, "key": rec.key, "workflow": wf_name, "api": api_name,
                      "outcome": "done" if result.ok else "unknown" if unknown else "failed",
                      "data": result.data, "error": result.error})
    update: dict[str, Any] = {"recovered": notes,
                              "trace": [{"event": "recovered", "turn": turn, "calls": [n["key"] for n in notes],
                                         "outcomes": [n["outcome"] for n in notes]}]}
    if ops:
        update["stack"] = ops
    return update
