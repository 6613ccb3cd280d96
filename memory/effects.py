"""Exactly-once tool calls: the ledger's rule (``memory.ledger``) applied around a ``ToolRunner``.

Owns how one tool call of a conversation becomes at most one side effect, whatever crashes:

- ``call_id(api, args, earlier)`` — the call's part of the idempotency key.  It is computed from what
  a replay of the same step sees again (the API, its arguments, how many identical calls the turn
  already recorded), never from a random id, so a step replayed after a crash gets the *same* key.
- ``run_once(ledger, runner, workflow, api, args, key)`` — ``begin`` before the call, ``complete``
  after it; a key completed earlier returns the recorded outcome without calling the tool; a key
  whose outcome is unknown (begun, never completed: the process died during the call) is reconciled.
- ``reconcile(...)`` — an unknown outcome is settled by asking the tool again *with the same key* when
  the binding carries it (python tools that take ``idempotency_key``, http tools through the
  ``Idempotency-Key`` header, simulated tools which change nothing); any other tool is not called
  again: the call is recorded as failed with an "outcome unknown" error, so nobody repeats it blindly.
- ``unreported(ledger, thread, turn, known)`` — calls the conversation state does not know about
  (their step's checkpoint was lost): what the next message must report first.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable

from workflows.bindings import ToolResult, ToolRunner
from workflows.pdl import Api, Workflow

from .ledger import Ledger, LedgerRecord, call_key

UNKNOWN_OUTCOME = ("the call was interrupted (the process stopped) and this tool cannot be asked about it "
                   "safely, so it was not repeated; check whether it went through before trying again")


@dataclass(frozen=True)
class Outcome:
    result: ToolResult
    key: str | None
    replayed: bool = False  # the recorded outcome of an earlier attempt; the tool was not called
    reconciled: bool = False  # an unknown outcome settled now (see ``reconcile``)


def call_id(api: str, args: dict[str, Any], earlier: int) -> str:
    """The call's part of the idempotency key: API, a digest of the arguments and the number of
    identical calls the turn already recorded.  No ``:`` (keys are ``thread:turn:call_id``)."""
    digest = hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{api.replace(':', '_')}-{digest}-{earlier}"


def key_for(thread: str | None, turn: int, api: str, args: dict[str, Any], earlier: int) -> str | None:
    """The idempotency key, or None when the run has no thread (nothing can replay it)."""
    return call_key(thread, turn, call_id(api, args, earlier)) if thread else None


def key_turn(key: str) -> int:
    """The turn a key was issued in (``thread:turn:call_id``; the thread may itself hold ``:``)."""
    try:
        return int(key.rsplit(":", 2)[-2])
    except (IndexError, ValueError):
        return -1


def tool_name(workflow: str, api: str) -> str:
    """What the ledger's ``tool`` column holds: ``workflow/api`` (recovery needs both)."""
    return f"{workflow}/{api}"


def split_tool(tool: str) -> tuple[str, str]:
    workflow, _, api = tool.rpartition("/")
    return workflow, api


def carries_key(runner: ToolRunner, api: Api) -> bool:
    """Can the tool be asked again with the same key and answer with its first outcome?"""
    kind = api.binding.kind
    if kind == "http":
        return True  # the Idempotency-Key header
    if kind == "python":
        try:
            return runner.resolve(api.binding.python).takes_idempotency_key
        except Exception:  # noqa: BLE001 - a refused or missing binding: the run itself reports it
            return False
    return True  # simulate: deterministic, no side effect


def _stored(result: ToolResult) -> dict[str, Any]:
    return {"data": result.data, "error": result.error}


def recorded(rec: LedgerRecord) -> ToolResult:
    """The outcome a completed record holds, as the ``ToolResult`` the first call returned."""
    stored = rec.result or {}
    return ToolResult(ok=rec.status == "done", data=dict(stored.get("data") or {}), error=stored.get("error"))


def run_once(ledger: Ledger | None, runner: ToolRunner, workflow: Workflow, api_name: str, args: dict[str, Any],
             key: str | None, *, thread: str | None = None) -> Outcome:
    """Run ``api_name`` at most once under ``key`` (see the module docstring).  Without a ledger or
    a key (no checkpointer, no thread) the tool simply runs."""
    if ledger is None or key is None:
        return Outcome(runner.run(workflow, api_name, args), key)
    rec = ledger.begin(key, tool_name(workflow.name, api_name), args, thread=thread)
    if rec is None:
        result = runner.run(workflow, api_name, args, idempotency_key=key)
        ledger.complete(key, _stored(result), ok=result.ok)
        return Outcome(result, key)
    if rec.status != "pending":
        return Outcome(recorded(rec), key, replayed=True)
    return reconcile(ledger, runner, workflow, rec, args)


def reconcile(ledger: Ledger, runner: ToolRunner, workflow: Workflow | None, rec: LedgerRecord,
              args: dict[str, Any] | None = None) -> Outcome:
    """Settle a call whose outcome is unknown, then ``complete`` it (see the module docstring).
    ``args``: the call's real arguments when the caller still has them (the ledger's are redacted)."""
    _, api_name = split_tool(rec.tool)
    api = workflow.api(api_name) if workflow is not None else None
    if api is not None and carries_key(runner, api):
        result = runner.run(workflow, api_name, dict(args if args is not None else rec.args), idempotency_key=rec.key)
    else:
        result = ToolResult(ok=False, data={}, error=f"{api_name}: {UNKNOWN_OUTCOME}")
    ledger.complete(rec.key, _stored(result), ok=result.ok)
    done = ledger.get(rec.key)
    # Another worker may have completed the key between our read and our complete: its outcome stays.
    return Outcome(recorded(done) if done is not None else result, rec.key, reconciled=True)


def unreported(ledger: Ledger | None, thread: str | None, turn: int, known: Iterable[str]) -> list[LedgerRecord]:
    """Calls of ``thread`` the conversation state does not record: issued in turn ``turn`` (the state's
    latest) or later, or still of unknown outcome, and whose key is not in ``known``."""
    if ledger is None or not thread:
        return []
    seen = set(known)
    return [r for r in ledger.records(thread)
            if r.key not in seen and (r.status == "pending" or key_turn(r.key) >= turn)]
