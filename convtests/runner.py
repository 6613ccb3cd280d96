"""Runs conversation test cases through the real agent graph and checks every step.

Each case gets a fresh thread (in-memory checkpointer) and fresh tool state (the tools' SQLite database
restored from a pristine copy before the case).  A ``user`` step sends a turn; the graph stops at an
interrupt (a confirmation of an irreversible tool, or a clarification) so the steps after it can check
the turn as it stands; ``confirm`` answers that confirmation, and a ``user`` step sent while an interrupt
is pending answers it with its text.  The check steps after a ``user`` step look at *that turn*:
everything the agent did since the user spoke, confirmations included.

What a turn did is read from the graph's stream and state, never from the agent's internals: replies
and pending questions, tool calls (from the tools node's environment events: run, failed, declined, or
awaiting confirmation), the turn's commands (cancel, hand-over), the replies that completed a workflow,
and afterwards the state views ``active_workflow`` / ``frame_for``.
"""

from __future__ import annotations

import re
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graph.chat import interrupt_question, run_turn
from graph.context import Context
from graph.state import active_workflow, frame_for, interrupted_workflows

from .format import Step, TestCase

AWAITING = "awaiting confirmation"
RECURSION_LIMIT = 80  # graph steps per turn: a runaway loop ends as a failed step, not a hang


@dataclass
class Turn:
    """What the agent did since the user last spoke."""

    user: str = ""
    replies: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "args", "status"}
    commands: list[dict[str, Any]] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)  # workflows whose procedure reached its end in the turn
    finished_before: set[str] = field(default_factory=set)  # frame ids already finished when the user spoke
    pending: Any = None  # an unanswered interrupt payload
    values: dict[str, Any] = field(default_factory=dict)  # the thread's state after the turn

    @property
    def text(self) -> str:
        """Everything the user saw: the replies and a pending question."""
        parts = list(self.replies)
        if self.pending is not None:
            parts.append(interrupt_question(self.pending)[0])
        return "\n".join(parts)

    def called(self) -> list[dict[str, Any]]:
        """Calls the agent made (run, failed or awaiting confirmation); a declined one did not happen."""
        return [c for c in self.calls if c["status"] != "cancelled"]


@dataclass
class StepResult:
    index: int
    step: Step
    ok: bool
    expected: str = ""
    got: str = ""


@dataclass
class CaseResult:
    case: TestCase
    steps: list[StepResult] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    transcript: list[str] = field(default_factory=list)
    exercised: dict[str, list[str]] = field(default_factory=dict)  # workflow -> nodes (API/ANSWER) run, in order

    @property
    def held(self) -> bool:
        """Every step behaved as the case says."""
        return self.error is None and all(s.ok for s in self.steps)

    @property
    def passed(self) -> bool:
        """The case does not fail the run: it held, or it is a known failure that still fails."""
        return self.held != bool(self.case.known_failure)

    @property
    def outcome(self) -> str:
        if self.case.known_failure:
            return "xfail" if not self.held else "XPASS"
        return "pass" if self.held else ("error" if self.error else "fail")

    def failures(self) -> list[StepResult]:
        return [s for s in self.steps if not s.ok]


# --- value matching ------------------------------------------------------------------------------------

def same(expected: Any, got: Any) -> bool:
    """Expected vs actual value: equal, equal as numbers, equal as trimmed case-folded text, or (dicts and
    lists) equal part by part — a test file's ``3`` matches a slot's ``"3"``."""
    if expected == got:
        return True
    if isinstance(expected, dict):
        return isinstance(got, dict) and subset(expected, got)
    if isinstance(expected, list):
        return isinstance(got, list) and len(expected) == len(got) and all(map(same, expected, got))
    if isinstance(expected, bool) or isinstance(got, bool):
        return str(expected).lower() == str(got).lower()
    try:
        return float(expected) == float(got)
    except (TypeError, ValueError):
        pass
    return str(expected).strip().casefold() == str(got).strip().casefold()


def subset(expected: dict[str, Any], got: dict[str, Any]) -> bool:
    return all(k in got and same(v, got[k]) for k, v in expected.items())


def _fmt_call(c: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in (c.get("args") or {}).items())
    status = "" if c["status"] == "ok" else f" [{c['status']}]"
    return f"{c['name']}({args}){status}"


# --- checks --------------------------------------------------------------------------------------------

def check(step: Step, turn: Turn) -> tuple[bool, str, str]:
    """(passed, expected, got) of one check step against the turn before it."""
    kind, value = step.kind, step.value
    values = turn.values
    active = active_workflow(values)
    if kind == "workflow":
        stack = interrupted_workflows(values)
        return active == value, f"active workflow {value!r}", \
            f"active workflow {active!r}" + (f" (interrupted: {stack})" if stack else "")
    if kind == "bot_contains":
        return value.casefold() in turn.text.casefold(), f"a reply containing {value!r}", _said(turn)
    if kind == "bot_matches":
        return re.search(value, turn.text) is not None, f"a reply matching /{value}/", _said(turn)
    if kind == "tool_called":
        calls = turn.called()
        ok = any(c["name"] == value.name and subset(value.args, c.get("args") or {}) for c in calls)
        want = _fmt_call({"name": value.name, "args": value.args, "status": "ok"}).replace(")", ", ...)") \
            if value.args else f"{value.name}(...)"
        return ok, f"a call {want}", "calls: " + ("; ".join(map(_fmt_call, turn.calls)) or "none")
    if kind == "tool_not_called":
        # the call did not happen: one still waiting for the user's yes has not run ("no wait, savings" at the
        # confirmation, and the corrected transfer asks again: nothing was transferred)
        made = [c for c in turn.called() if c["name"] == value and c["status"] != AWAITING]
        return not made, f"no call of {value}", "calls: " + ("; ".join(map(_fmt_call, turn.calls)) or "none")
    if kind == "slot":
        slots = (frame_for(values, active).get("slots") if active else None) or {}
        wrong = {k: slots.get(k) for k, v in value.items() if k not in slots or not same(v, slots[k])}
        return not wrong, f"slots of {active or 'the active workflow'} ⊇ {value}", \
            f"slots {slots}" if active else "no active workflow"
    if kind == "workflow_completed":
        return value in turn.completed, f"{value} completed in this turn", \
            f"completed: {turn.completed or 'none'}; active workflow {active!r}"
    if kind == "workflow_cancelled":
        cancelled = [c.get("workflow") for c in turn.commands if c.get("command") == "cancel_flow"]
        ok = value in cancelled and active != value
        return ok, f"{value} cancelled in this turn", \
            f"cancelled: {cancelled or 'none'}; active workflow {active!r}"
    if kind == "handoff":
        handed = any(c.get("command") == "human_handoff" for c in turn.commands)
        return handed == value, "a hand-over to a person" if value else "no hand-over", \
            "handed over" if handed else f"no hand-over; commands: {_kinds(turn)}"
    if kind == "no_workflow":
        return (active is None) == value, "no active workflow" if value else "an active workflow", \
            f"active workflow {active!r}; commands: {_kinds(turn)}"
    raise ValueError(f"unknown step kind {kind!r}")  # the format's validator makes this unreachable


def _said(turn: Turn) -> str:
    return "agent said: " + (" | ".join(t.replace("\n", " ") for t in turn.text.splitlines()) or "(nothing)")


def _kinds(turn: Turn) -> list[str]:
    return [c.get("command", "?") for c in turn.commands]


# --- running -------------------------------------------------------------------------------------------

class ConversationTester:
    """Runs cases on one compiled graph; every case starts from a fresh thread and fresh tool state."""

    def __init__(self, context: Context | None = None, work_dir: str | Path | None = None):
        from langgraph.checkpoint.memory import InMemorySaver

        from graph.agent import build_agent
        from workflows.demo.db import ensure_db

        base = context or Context()
        self.work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="flowdesk-test-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.pristine = self.work / "pristine.sqlite"
        # the tools' database the context names, copied once (cases never touch the original); the default
        # location is the one `flowdesk chat` writes to, so results would depend on earlier chats in the
        # directory: the default is seeded fresh instead
        source = Path(base.db_path)
        if source.exists() and base.db_path != Context.__dataclass_fields__["db_path"].default:
            from workflows.demo.db import restore_db

            self.pristine.touch()
            restore_db(source, self.pristine)
        else:
            ensure_db(self.pristine)
        from dataclasses import replace

        self.context = replace(base, db_path=str(self.work / "tools.sqlite"))
        self.graph = build_agent(self.context, checkpointer=InMemorySaver()).with_config(
            recursion_limit=RECURSION_LIMIT)

    def finished(self, values: dict[str, Any]) -> dict[str, str]:
        """Frame id -> workflow of every frame on the stack whose procedure has reached its end (the
        interpreter says nothing is left to do, or the frame was closed)."""
        from graph.resources import get_resources

        interps = get_resources(self.context).interpreters
        out = {}
        for f in values.get("stack") or []:
            interp = interps.get(f.get("workflow"))
            if f.get("status") == "done" or (interp is not None and interp.next_action(f).kind == "done"):
                out[f["id"]] = f["workflow"]
        return out

    def fresh_tools(self) -> None:
        from workflows.demo.db import restore_db

        Path(self.context.db_path).touch()
        restore_db(self.pristine, self.context.db_path)

    def run(self, case: TestCase) -> CaseResult:
        self.fresh_tools()
        thread = f"test-{uuid.uuid4().hex[:10]}"
        result = CaseResult(case=case)
        turn = Turn()
        start = time.perf_counter()
        for i, step in enumerate(case.steps):
            if step.kind in ("user", "confirm"):
                if step.kind == "confirm" and not _is_confirmation(turn.pending):
                    result.steps.append(StepResult(i, step, False, "a pending confirmation to answer",
                                                   "the agent asked nothing" if turn.pending is None else
                                                   f"the agent asks: {interrupt_question(turn.pending)[0]}"))
                    continue
                try:
                    turn = self._drive(thread, step, turn, result)
                except Exception as exc:  # noqa: BLE001 - a crashing turn fails the case, with its reason
                    result.error = f"step {i + 1} ({step.describe()}): {type(exc).__name__}: {exc}"
                    break
                continue
            ok, expected, got = check(step, turn)
            result.steps.append(StepResult(i, step, ok, expected, got))
        result.seconds = time.perf_counter() - start
        return result

    def _drive(self, thread: str, step: Step, previous: Turn, result: CaseResult) -> Turn:
        """Send a user turn (or the answer to the pending interrupt) and collect what the agent did.
        A ``confirm`` continues the same turn; a ``user`` step starts a new one."""
        text = step.user if step.kind == "user" else step.confirm
        resuming = previous.pending is not None
        turn = previous if step.kind == "confirm" else Turn(user=text, finished_before=set(self.finished(previous.values)))
        if resuming:  # the interrupted call gets its outcome from the tools node when it resumes
            turn.calls = [c for c in turn.calls if c["status"] != AWAITING]
            turn.pending = None
        result.transcript.append(f"{'user' if step.kind == 'user' else 'user (confirms)'}: {text}")

        def on_update(node: str, update: dict) -> None:
            for ev in update.get("trace") or []:
                wf = ev.get("workflow") or ""
                if ev.get("event") == "environment":
                    turn.calls.append({"name": ev.get("api"), "args": ev.get("args") or {}, "status": ev.get("status")})
                    result.transcript.append(f"  tool: {_fmt_call(turn.calls[-1])}")
                    if ev.get("ok") and wf:
                        result.exercised.setdefault(wf, []).append(ev.get("api"))
                elif ev.get("event") == "assistant" and wf and ev.get("answer"):
                    result.exercised.setdefault(wf, []).append(ev.get("answer"))
            if node == "respond" and any(op.get("done") for op in update.get("stack") or []):
                turn.completed += [ev.get("workflow") for ev in update.get("trace") or [] if ev.get("workflow")
                                   and ev.get("workflow") not in turn.completed]

        r = run_turn(self.graph, thread, text, context=self.context, on_update=on_update, pause=True,
                     resume=resuming)
        turn.replies += r.replies
        turn.commands += [c for c in r.commands if c not in turn.commands]
        result.transcript += [f"  agent: {t}" for t in r.replies]
        if r.pending is not None:
            turn.pending = r.pending
            if _is_confirmation(r.pending):
                turn.calls.append({"name": r.pending.get("api"), "args": r.pending.get("args") or {},
                                   "status": AWAITING})
            result.transcript.append(f"  agent asks: {interrupt_question(r.pending)[0]}")
        turn.values = self.graph.get_state({"configurable": {"thread_id": thread}}).values
        turn.completed += [wf for fid, wf in self.finished(turn.values).items()
                           if fid not in turn.finished_before and wf not in turn.completed]
        return turn


def _is_confirmation(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("kind") == "confirm"


def run_cases(cases: list[TestCase], context: Context | None = None, work_dir: str | Path | None = None,
              progress=None) -> list[CaseResult]:
    tester = ConversationTester(context, work_dir)
    out = []
    for case in cases:
        out.append(tester.run(case))
        if progress:
            progress(out[-1])
    return out
