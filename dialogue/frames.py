"""The dialogue stack: typed frames (one per workflow instance) and the one reducer that merges changes.

A ``Frame`` is everything one workflow instance knows: the user's slot values (user data only —
control data has typed fields of its own), the values its APIs returned, the nodes it executed, every
call it made, the question it is waiting on and the user's answers to its natural-language
conditions.  The stack's last frame is the active workflow; the frames below it were interrupted and
can be resumed.

Nodes never copy and rewrite the stack: they return *operations* and ``merge_stack`` (the state's
reducer) applies them —

- ``{"op": "replace", "stack": [...]}``: the frame lifecycle after the turn's commands
  (``apply_commands`` only);
- ``{"op": "call", "frame": id, "call": CallRecord, "result": {...}, "slots": {...}}``: a tool call's outcome
  (``tools``), with the slot values the turn's message pointed at in it (``slots``, optional) and, for a
  declined confirmation whose answer is read as the next turn, the slots it listed (``asked``, optional);
- ``{"op": "answer", "frame": id, "answer": name, "asked": [...], "done": bool}``: a reply sent (``respond``);
- ``{"op": "start", "frame": id}``: a queued frame (``Frame.queued``) becomes the active one when the one
  above it is finished (``respond``); the finished frame above it is dropped.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterable, Literal, TypedDict

from workflows.semantics import Scope

Status = Literal["active", "interrupted", "done"]


class CallRecord(TypedDict, total=False):
    """One tool call of a workflow instance."""

    api: str
    args: dict[str, Any]
    status: Literal["ok", "error", "cancelled"]
    turn: int
    key: str  # idempotency key (thread, turn, call id)
    # declined with an answer read as the user's next turn (a correction, a question): the call is not
    # proposed again in that turn; the agent asks before it runs
    reread: bool


class Frame(TypedDict, total=False):
    """One workflow instance on the dialogue stack."""

    id: str  # unique per instance
    workflow: str  # workflow name in the library
    status: Status  # active (top), interrupted (waiting to be resumed), done (the procedure completed)
    slots: dict[str, Any]  # the user's slot values — user data only
    results: dict[str, Any]  # values returned by APIs, latest wins
    executed: list[str]  # completed nodes (API and ANSWER names) in order
    calls: list[CallRecord]  # every call made, in order (cancelled ones included)
    asked: list[str]  # what the last question asked for: slot names or condition keys
    conditions: dict[str, bool]  # the user's answers to natural-language conditions (condition_key -> bool)
    declined: list[str]  # asked slots the user said they cannot give ("I don't have it", a bare "no"): not asked again
    started: int  # the turn the instance started in
    belief: dict[str, float]  # the pick's alternatives and their log-probabilities (understanding.belief)
    queued: bool  # asked for in the same message as the frame above it: starts when that one is finished


def new_frame(workflow: str, turn: int, slots: dict[str, Any] | None = None) -> Frame:
    return Frame(id=uuid.uuid4().hex[:10], workflow=workflow, status="active", slots=dict(slots or {}), results={},
                 executed=[], calls=[], asked=[], conditions={}, started=turn)


def top(stack: list[Frame] | None) -> Frame | None:
    """The active frame: the stack's last, unless it was interrupted (then no workflow is active).  A
    done frame stays on top until another workflow starts: the user may still ask about it."""
    if stack and stack[-1].get("status") in ("active", "done"):
        return stack[-1]
    return None


def interrupted(stack: list[Frame] | None) -> list[Frame]:
    """Frames that can be resumed, oldest first: those below the top, and the last frame itself when
    the active workflow above it was cancelled (then nothing is active and it still waits)."""
    return [f for f in stack or [] if f.get("status") == "interrupted"]


def find(stack: list[Frame] | None, workflow: str) -> Frame | None:
    return next((f for f in reversed(stack or []) if f.get("workflow") == workflow), None)


def scope_of(frame: Frame | None, reading: dict | None = None) -> Scope:
    """The values view of a frame plus the turn's reading (see ``workflows.semantics.Scope``)."""
    frame = frame or {}
    reading = reading or {}
    calls = [c for c in frame.get("calls") or [] if c.get("status") != "cancelled"]
    return Scope(slots=frame.get("slots") or {}, results=frame.get("results") or {},
                 conditions=frame.get("conditions") or {}, yesno=reading.get("yesno"),
                 info_missing=bool(reading.get("info_missing")), last_message=reading.get("text") or "",
                 result_ok=(calls[-1].get("status") == "ok") if calls else None)


def successful_calls(frame: Frame | None, api: str | None = None) -> list[CallRecord]:
    return [c for c in (frame or {}).get("calls") or []
            if c.get("status") == "ok" and (api is None or c.get("api") == api)]


def irreversible_made(frame: Frame | None, workflow: Any) -> bool:
    """Did one of the frame's irreversible calls go through (a booking made, money sent)?  ``workflow``:
    the frame's ``Workflow`` (its ``api(name)`` says which calls are irreversible)."""
    if not frame or workflow is None:
        return False
    return any((api := workflow.api(c.get("api") or "")) is not None and api.irreversible
               for c in successful_calls(frame))


def declined_required(frame: Frame, workflow: Any) -> list[str]:
    """The values a call still ahead requires that the user said they cannot give (``Frame.declined``): the
    task cannot go on without them, so the user hears that instead of the question again (the executor's
    ``pattern_cannot_continue``).  ``workflow``: the frame's ``Workflow``."""
    declined = set(frame.get("declined") or ())
    if not declined:
        return []
    slots, executed = frame.get("slots") or {}, set(frame.get("executed") or [])
    return list(dict.fromkeys(p for api in workflow.apis if api.name not in executed for p in api.required_params
                              if p in declined and slots.get(p) in (None, "")))


def fingerprint(frame: Frame | None) -> str:
    """What a controller's verdict depended on: nodes run, slot values, results and calls made."""
    frame = frame or {}
    return json.dumps([frame.get("executed") or [], frame.get("slots") or {},
                       sorted((frame.get("results") or {}).items(), key=lambda kv: kv[0]),
                       len(frame.get("calls") or [])], sort_keys=True, default=str)


# --- the reducer ------------------------------------------------------------------------------------

def _apply_call(frame: Frame, op: dict) -> Frame:
    frame = Frame(**frame)
    call: CallRecord = dict(op["call"])  # type: ignore[assignment]
    frame["calls"] = [*(frame.get("calls") or []), call]
    if call.get("status") == "ok":
        frame["executed"] = [*(frame.get("executed") or []), call["api"]]
        frame["results"] = {**(frame.get("results") or {}), **(op.get("result") or {})}
        if op.get("slots"):
            frame["slots"] = {**(frame.get("slots") or {}), **op["slots"]}
    if "asked" in op:  # a declined confirmation asked about the values it listed
        frame["asked"] = list(op["asked"])
    return frame


def _apply_answer(frame: Frame, op: dict) -> Frame:
    frame = Frame(**frame)
    if op.get("answer"):
        frame["executed"] = [*(frame.get("executed") or []), op["answer"]]
    frame["asked"] = list(op.get("asked") or [])
    if op.get("done"):
        frame["status"] = "done"
    return frame


def merge_stack(current: list[Frame] | None, update: Iterable[dict] | dict | None) -> list[Frame]:
    """The ``stack`` reducer: apply the operations a node returned (see the module docstring)."""
    stack = list(current or [])
    if update is None:
        return stack
    ops = [update] if isinstance(update, dict) else list(update)
    for op in ops:
        kind = op.get("op")
        if kind == "replace":
            stack = [Frame(**f) for f in op.get("stack") or []]
        elif kind == "start":
            at = next((i for i, f in enumerate(stack) if f.get("id") == op.get("frame")), None)
            if at is not None:
                started = Frame(**{**stack[at], "status": "active", "queued": False})
                stack = [*stack[:at], started]
        elif kind in ("call", "answer"):
            for i, f in enumerate(stack):
                if f.get("id") == op.get("frame"):
                    stack[i] = _apply_call(f, op) if kind == "call" else _apply_answer(f, op)
                    break
        else:
            raise ValueError(f"stack: unknown operation {kind!r}")
    return stack


def this_turn(current: list[dict] | None, update: list[dict] | None) -> list[dict]:
    """Reducer for per-turn lists (commands, violations): items carry ``turn``; only the newest turn's stay."""
    items = list(current or []) + list(update or [])
    if not items:
        return []
    newest = max(int(i.get("turn") or 0) for i in items)
    return [i for i in items if int(i.get("turn") or 0) == newest]


TRACE_LIMIT = 200  # events kept in the thread state; the full history belongs in the event log


def bounded_trace(current: list[dict] | None, update: list[dict] | None) -> list[dict]:
    """Reducer for ``trace``: append, keep the latest ``TRACE_LIMIT`` events."""
    return (list(current or []) + list(update or []))[-TRACE_LIMIT:]
