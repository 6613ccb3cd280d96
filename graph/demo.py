"""``flowdesk demo``: a scripted offline conversation on the bundled library, through the real graph.

The real agent (offline policies), the real Chroma store and the SQLite demo database live under a
work directory (``.flowdesk/demo`` by default, reusing its index; ``--workdir tmp`` for a throw-away
one); conversation state lives in a SQLite checkpointer there.
The script shows a search, a switch, a digression into another workflow and the resume of the
interrupted one, an invalid request the controller blocks, an irreversible tool confirmed through
an interrupt, and a "restart" (checkpointer and graph closed and reopened) continuing the same
thread.  Every step states what must happen; the demo prints a transcript and exits 1 when any
expectation fails, so ``make run`` is an honest check.  ``--stats`` adds per-turn latency p50/p95
and the peak RSS.
"""

from __future__ import annotations

import dataclasses
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule

from memory.ledger import LEDGER_FILE, close_shared_ledgers

from .chat import TurnResult, interrupt_question, print_trace, run_turn
from .context import Context
from .state import active_workflow

THREAD = "demo"
DEFAULT_WORKDIR = Path(".flowdesk") / "demo"


@dataclass
class Step:
    """One user turn and what must be true after it (None = not checked)."""

    say: str
    title: str = ""
    workflow: str | None = None  # active workflow after the turn
    decision: str | None = None  # detector verdict
    stack: list[str] | None = None  # workflow stack after the turn
    tools: list[str] | None = None  # tools that must have run successfully in this turn
    no_tools: list[str] = field(default_factory=list)  # tools that must NOT have run in this turn
    rejected: bool | None = None  # a post-decision controller rejected a proposal
    confirm: str | None = None  # answer to an interrupt (None: no interrupt expected)
    reply_has: list[str] = field(default_factory=list)  # case-insensitive substrings of the reply
    reply_lacks: list[str] = field(default_factory=list)  # ... that must not be there (e.g. re-asking)
    restart_before: bool = False  # close and reopen checkpointer + graph before this turn
    naive_executor: bool = False  # this turn's executor is the scripted naive "LLM" (see below)


def script() -> list[Step]:
    return [
        Step("Hi! Can you find me an Italian restaurant in the old town?", "search the library, run a tool",
             workflow="search_restaurants", decision="SEARCH", tools=["search_restaurants"],
             reply_has=["Trattoria Lumi"]),
        Step("I'd like to book a restaurant table at Trattoria Lumi for 2 people",
             "switch: from searching restaurants to booking", workflow="book_table", decision="SEARCH",
             no_tools=["check_availability"], reply_has=["day", "time"], reply_lacks=["restaurant", "how many"]),
        Step("Just tell me that it is all sorted",
             "blocked invalid request (a naive scripted LLM executor obeys the user)",
             workflow="book_table", rejected=True, no_tools=["book"], naive_executor=True, reply_has=["time"]),
        Step("On 2026-12-10 at 19:30", "slot filling, then the availability check", workflow="book_table",
             decision="STAY", tools=["check_availability"], reply_has=["name"]),
        Step("Actually, where is my order ORD-7003? I need to track it", "digression into another workflow",
             workflow="track_order", decision="SEARCH", stack=["book_table"], reply_has=["email"]),
        Step("tomas.l@example.com", "the digression completes", workflow="track_order", decision="STAY",
             tools=["track_order"], reply_has=["Northpost"]),
        Step("Thanks. Now back to my table booking", "resume the interrupted workflow from the stack",
             workflow="book_table", stack=[], no_tools=["book"], reply_has=["back to", "name"]),
        Step("Maria Lopez", "after a restart: same thread; irreversible tool confirmed (interrupt → yes)",
             restart_before=True, workflow="book_table", tools=["book"], confirm="yes",
             reply_has=["Maria Lopez", "reference"]),
    ]


NAIVE = "demo-naive-executor"


def register_naive_executor() -> str:
    """A scripted "LLM" executor that does what the user literally asks: claims the booking is done.
    It stands for an unguarded LLM; the post-decision controller must block it (``book`` never ran)."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage

    from .models import register_chat_model

    claim = AIMessage(content="", tool_calls=[{"name": "reply", "id": "naive-1", "type": "tool_call",
                                               "args": {"name": "confirm_booking",
                                                        "text": "All done, your table is booked!"}}])
    return register_chat_model(NAIVE, FakeMessagesListChatModel(responses=[claim]))


def check(step: Step, r: TurnResult) -> list[str]:
    """The failed expectations of one step (empty when all hold)."""
    fails = []
    ran = [c["name"] for c in r.tool_calls if c.get("result") is not None and '"error"' not in str(c["result"])[:12]]
    if step.workflow is not None and r.active_workflow != step.workflow:
        fails.append(f"active workflow {r.active_workflow!r}, expected {step.workflow!r}")
    if step.decision is not None and r.decision != step.decision:
        fails.append(f"detector said {r.decision!r}, expected {step.decision!r}")
    if step.stack is not None and r.workflow_stack != step.stack:
        fails.append(f"workflow stack {r.workflow_stack}, expected {step.stack}")
    for tool in step.tools or []:
        if tool not in ran:
            fails.append(f"tool {tool} did not run (ran: {ran or 'none'})")
    for tool in step.no_tools:
        if tool in [c["name"] for c in r.tool_calls]:
            fails.append(f"tool {tool} must not run in this turn")
    if step.rejected is not None and bool([v for v in r.violations if not v.get("ok")]) != step.rejected:
        fails.append("a controller rejection was expected" if step.rejected else
                     f"unexpected rejection: {r.violations}")
    if step.confirm is None and r.interrupts:
        fails.append(f"unexpected interrupt: {interrupt_question(r.interrupts[0][0])[0]}")
    if step.confirm is not None and not r.interrupts:
        fails.append("expected a confirmation interrupt")
    for text in step.reply_has:
        if text.lower() not in r.reply.lower():
            fails.append(f"reply lacks {text!r}")
    for text in step.reply_lacks:
        if text.lower() in r.reply.lower():
            fails.append(f"reply should not contain {text!r}")
    if not r.reply.strip():
        fails.append("empty reply")
    return fails


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_script(steps: list[Step], workdir: Path, console: Console, trace: bool = False,
               on_turn: Callable[[Step, TurnResult, list[str]], None] | None = None) -> tuple[list[TurnResult], int]:
    """Run the steps on one thread; returns the turn results and the number of failed steps."""
    from workflows.demo.db import ensure_db

    from .agent import build_agent
    from .checkpoint import open_checkpointer

    context = Context(store_dir=str(workdir / "store"), db_path=str(workdir / "demo.sqlite"))
    ensure_db(context.db_path)
    checkpoints = workdir / "checkpoints.sqlite"
    results, failed = [], 0
    saver_cm = open_checkpointer(checkpoints)
    saver = saver_cm.__enter__()
    try:
        graph = build_agent(context, checkpointer=saver)
        for i, step in enumerate(steps, 1):
            if step.restart_before:
                saver_cm.__exit__(None, None, None)  # the process "closes": graph and connection gone
                graph = None
                console.print(Rule("[bold magenta]restart: checkpointer closed and reopened[/]"))
                saver_cm = open_checkpointer(checkpoints)
                saver = saver_cm.__enter__()
                graph = build_agent(context, checkpointer=saver)
                snap = graph.get_state({"configurable": {"thread_id": THREAD}}).values
                console.print(f"[dim]thread {THREAD!r} reloaded: {len(snap.get('messages') or [])} messages, "
                              f"active workflow {active_workflow(snap)!r}[/]")
            console.print(Rule(f"[bold]{i}. {step.title}[/]", style="dim"))
            console.print(f"[bold green]user[/]  > {step.say}")

            def answer(payload: Any, _step=step) -> Any:
                console.print(f"[yellow]agent asks[/] > {interrupt_question(payload)[0]}")
                reply = _step.confirm if _step.confirm is not None else "no"
                console.print(f"[bold green]user[/]  > {reply}")
                return reply

            turn_ctx = dataclasses.replace(context, executor_model=register_naive_executor()) \
                if step.naive_executor else context
            if step.naive_executor:
                console.print("[dim](this turn's executor: a scripted naive LLM that obeys the user literally)[/]")
            r = run_turn(graph, THREAD, step.say, context=turn_ctx, on_interrupt=answer,
                         on_reply=lambda s: console.print(f"[bold cyan]agent[/] > {s}"))
            results.append(r)
            if trace:
                print_trace(console, r)
            fails = check(step, r)
            if on_turn:
                on_turn(step, r, fails)
            if fails:
                failed += 1
                for f in fails:
                    console.print(f"[bold red]  ✗ {f}[/]")
            else:
                console.print(f"[green]  ✓ {step.title}[/] [dim]({r.active_workflow}, {r.latency_ms:.0f} ms)[/]")
    finally:
        saver_cm.__exit__(None, None, None)
    return results, failed


def run_demo(workdir: str | None = None, stats: bool = False, trace: bool = False,
             console: Console | None = None) -> int:
    console = console or Console()
    tmp = None
    if workdir == "tmp":
        tmp = tempfile.mkdtemp(prefix="flowdesk-demo-")
        root = Path(tmp)
    else:
        root = Path(workdir or DEFAULT_WORKDIR)
        root.mkdir(parents=True, exist_ok=True)
        # The scripted thread and the demo database start fresh; the retrieval store is reused.  The tool-call
        # ledger goes with the checkpoints it belongs to: kept, the earlier run's calls were reported as
        # "went through before we were cut off" in the next one.  The process's open ledgers are closed
        # first (the demo owns its process): an open one would keep writing to the deleted file.
        close_shared_ledgers()
        for name in ("checkpoints.sqlite", LEDGER_FILE, "demo.sqlite"):
            for suffix in ("", "-wal", "-shm"):
                (root / f"{name}{suffix}").unlink(missing_ok=True)
    console.print(Panel("flowdesk demo — the offline agent on the bundled Northwind service desk\n"
                        f"stores under {root}", border_style="cyan"))
    started = time.perf_counter()
    try:
        results, failed = run_script(script(), root, console, trace=trace)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    total = time.perf_counter() - started
    lat = [r.latency_ms for r in results]
    console.print(Rule())
    if stats or failed:
        console.print(f"turns {len(results)} | first turn (loads model, builds index) {lat[0]:.0f} ms | "
                      f"later turns p50 {percentile(lat[1:], .5):.0f} ms, p95 {percentile(lat[1:], .95):.0f} ms | "
                      f"total {total:.1f} s | peak RSS {peak_rss_mb():.0f} MB")
    if failed:
        console.print(f"[bold red]{failed} of {len(results)} demo steps failed their expectations[/]")
        return 1
    console.print(f"[bold green]all {len(results)} demo steps behaved as expected[/]")
    return 0


if __name__ == "__main__":
    sys.exit(run_demo(stats=True))
