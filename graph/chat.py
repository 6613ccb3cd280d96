"""Terminal chat with the agent (``flowdesk chat``) and the turn runner the demo shares.

``run_turn`` sends one user message through the compiled graph on a thread, streams the node
updates (printing the reply as soon as ``respond`` writes it), answers interrupts through a
callback (irreversible tools: yes/no; clarification: pick an option) with ``Command(resume=...)``
and returns what happened in the turn — the decision, candidates, controller verdicts, tool calls,
replies and the latency — for ``--trace``, the demo's checks and the latency statistics.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from .agent import MAX_MESSAGE_CHARS, check_context
from workflows.text import message_text, yes_no

from .context import Context
from .state import active_workflow, decision, interrupted_workflows


@dataclass
class TurnResult:
    user: str
    replies: list[str] = field(default_factory=list)
    decision: str | None = None
    search_query: str = ""
    candidates: list[dict] = field(default_factory=list)
    clarify: list[str] = field(default_factory=list)
    violations: list[dict] = field(default_factory=list)
    commands: list[dict] = field(default_factory=list)  # the turn's commands (dialogue.commands)
    tool_calls: list[dict] = field(default_factory=list)  # {"name", "args", "result"}
    interrupts: list[tuple[Any, Any]] = field(default_factory=list)  # (payload, answer)
    active_workflow: str | None = None
    workflow_stack: list[str] = field(default_factory=list)
    latency_ms: float = 0.0
    pending: Any = None  # the interrupt left unanswered (``run_turn(..., pause=True)``)

    @property
    def reply(self) -> str:
        return "\n".join(self.replies)


def interrupt_question(payload: Any) -> tuple[str, list[str]]:
    """The question and options of an interrupt payload, whatever node raised it."""
    if isinstance(payload, dict):
        question = payload.get("question") or payload.get("message") or payload.get("text") or str(payload)
        return str(question), list(payload.get("options") or [])
    return str(payload), []


def _collect(result: TurnResult, node: str, update: dict | None, on_reply: Callable[[str], None] | None) -> None:
    if not update:
        return
    if node == "detector":
        result.decision = decision(update.get("commands"))
        result.search_query = update.get("search_query", result.search_query) or ""
    result.commands += [c for c in update.get("commands") or [] if c not in result.commands]
    if "candidates" in update:
        result.candidates = list(update.get("candidates") or [])
    for c in update.get("commands") or []:
        if c.get("command") == "clarify":
            result.clarify = list(c.get("options") or [])
    if node == "post_controller":
        for v in update.get("violations") or []:
            if v not in result.violations:
                result.violations.append(v)
    for msg in update.get("messages") or []:
        if isinstance(msg, AIMessage) and msg.tool_calls:
            for call in msg.tool_calls:
                result.tool_calls.append({"name": call["name"], "args": call.get("args", {}), "id": call.get("id"),
                                          "result": None})
        elif isinstance(msg, ToolMessage):
            for call in result.tool_calls:
                if call.get("id") == msg.tool_call_id:
                    call["result"] = msg.content
        elif isinstance(msg, AIMessage) and msg.content:
            text = message_text(msg)
            result.replies.append(text)
            if on_reply:
                on_reply(text)


def run_turn(graph, thread_id: str, text: str, *, context: Context | None = None,
             on_interrupt: Callable[[Any], Any] | None = None,
             on_reply: Callable[[str], None] | None = None,
             on_update: Callable[[str, dict], None] | None = None,
             pause: bool = False, resume: bool = False) -> TurnResult:
    """One user turn, interrupts included.  Without ``on_interrupt`` an interrupt is answered "no".

    ``pause=True`` stops at an interrupt instead and leaves it pending (``TurnResult.pending``); a later
    call with ``resume=True`` sends ``text`` as the answer to it (conversation tests check a turn
    before the user confirms)."""
    from .checkpoint import store_errors, unavailable

    try:
        return _run_turn(graph, thread_id, text, context=context, on_interrupt=on_interrupt, on_reply=on_reply,
                         on_update=on_update, pause=pause, resume=resume)
    except store_errors() as exc:  # the checkpoint store stopped answering: named, the thread kept
        raise unavailable(getattr(graph, "checkpointer", None), exc) from None


def _run_turn(graph, thread_id: str, text: str, *, context, on_interrupt, on_reply, on_update, pause,
              resume) -> TurnResult:
    config = {"configurable": {"thread_id": thread_id}}
    result = TurnResult(user=text)
    payload: Any = Command(resume=text) if resume else {"messages": [HumanMessage(text)]}
    start = time.perf_counter()
    while True:
        pending = None
        # durability="sync": each step's checkpoint is committed before the next step starts, so a
        # process killed mid-turn loses only the step in flight (the thread resumes from there).
        for chunk in graph.stream(payload, config, context=context, stream_mode="updates", durability="sync"):
            for node, update in chunk.items():
                if node == "__interrupt__":
                    pending = update[0].value if update else None
                    continue
                _collect(result, node, update, on_reply)
                if on_update:
                    on_update(node, update or {})
        if pending is None:
            break
        if pause:
            result.pending = pending
            break
        answer = on_interrupt(pending) if on_interrupt else "no"
        result.interrupts.append((pending, answer))
        payload = Command(resume=answer)
    result.latency_ms = (time.perf_counter() - start) * 1000
    values = graph.get_state(config).values
    result.active_workflow = active_workflow(values)
    result.workflow_stack = interrupted_workflows(values)
    return result


def print_trace(console: Console, r: TurnResult) -> None:
    """The turn's decision, candidates, controller verdicts and tool calls."""
    t = Table(show_header=False, box=None, padding=(0, 1), style="dim")
    t.add_row("decision", f"{r.decision or '-'}" + (f"  query: {r.search_query[:120]}" if r.decision == "SEARCH" else ""))
    if r.candidates:
        t.add_row("candidates", ", ".join(f"{c.get('workflow')} ({c.get('score', 0):.3f})" for c in r.candidates[:5]))
    if r.clarify:
        t.add_row("clarify", ", ".join(r.clarify))
    for v in r.violations:
        t.add_row("controller", f"{v.get('controller', '?')}: {'ok' if v.get('ok') else 'REJECTED'} — {v.get('reason', '')}")
    for c in r.tool_calls:
        t.add_row("tool", f"{c['name']}({c['args']}) → {str(c['result'])[:160]}")
    for payload, answer in r.interrupts:
        t.add_row("interrupt", f"{interrupt_question(payload)[0][:100]} → {answer}")
    t.add_row("workflow", f"{r.active_workflow or '-'}  stack: {r.workflow_stack or '[]'}  {r.latency_ms:.0f} ms")
    console.print(t)


def ask_interrupt(console: Console, payload: Any) -> Any:
    """The user's answer to an interrupt; end of input declines (an irreversible tool never runs on EOF)."""
    from workflows.sanitize import normalize_text

    def ask(prompt: str) -> str | None:
        try:
            return normalize_text(console.input(prompt)).strip()
        except EOFError:
            return None

    question, options = interrupt_question(payload)
    console.print(Panel(question, title="the agent asks", border_style="yellow"))
    if options:
        return ask("[yellow]your choice (number or words)[/] > ") or ""
    while True:
        answer = ask("[yellow]yes / no[/] > ")
        if answer is None or answer in ("/quit", "/exit"):
            return "no"
        # y/n as the usual shorthand; any other reply that reads as a yes or a no goes to the agent as said,
        # which reads it (a yes with a change in it, "yes but for 3 people", is no yes there)
        short = {"y": "yes", "n": "no"}.get(answer.lower())
        if short or yes_no(answer) is not None:
            return short or answer
        console.print("[dim]please answer yes or no (end of input answers no)[/]")


def _tolerant_stdin() -> None:
    """Undecodable bytes on stdin become U+FFFD later (``normalize_text``) instead of ending the chat."""
    import sys

    reconfigure = getattr(sys.stdin, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(errors="surrogateescape")
        except (ValueError, OSError):  # detached or not a text stream: the loop still catches decode errors
            pass


def chat(thread: str | None = None, library: str | None = None, trace: bool = False,
         checkpoint: str | None = None, console: Console | None = None) -> None:
    """Interactive loop; ``/quit`` or Ctrl-D ends it, the thread can be resumed with ``--thread``.

    Every known error (a broken library, a bad setting, a checkpoint location) is printed as its named
    message and exits 2 before the loop starts; inside the loop such an error is printed and the chat
    goes on."""
    from workflows.sanitize import normalize_text

    from .agent import build_agent
    from .checkpoint import open_checkpointer
    from .errors import describe, named_errors
    from .resources import get_resources

    console = console or Console()
    try:
        context = Context(library=library) if library else Context()
        thread = normalize_text(thread) if thread else uuid.uuid4().hex[:8]
        check_context(context)
        get_resources(context).library  # load (and validate) it now: every problem listed, no traceback
        with open_checkpointer(checkpoint):
            pass
    except named_errors() as exc:
        console.print(f"flowdesk chat: {describe(exc)}", style="red", markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(2) from None
    _tolerant_stdin()
    with open_checkpointer(checkpoint) as saver:
        graph = build_agent(context, checkpointer=saver)
        config = {"configurable": {"thread_id": thread}}
        values = graph.get_state(config).values
        resumed = bool(values.get("messages"))
        console.print(Panel(f"thread [bold]{thread}[/] ({'resumed, ' + str(len(values['messages'])) + ' messages' if resumed else 'new'})"
                            f" — library {context.library}\n/quit to leave; come back with --thread {thread}",
                            title="flowdesk chat", border_style="cyan"))
        if resumed and active_workflow(values):
            console.print(f"[dim]active workflow: {active_workflow(values)}  stack: {interrupted_workflows(values)}[/]")
        while True:
            try:
                text = console.input("[bold green]you[/] > ")
            except (EOFError, KeyboardInterrupt):
                break
            except UnicodeDecodeError:
                console.print("[red]that line was not valid text (UTF-8); please type it again[/]")
                continue
            text = normalize_text(text)
            if text.strip() in ("/quit", "/exit"):
                break
            if text.strip() == "/help":
                console.print("[dim]Type what you need in your own words (ask the agent \"what can you help me "
                              f"with?\"); /quit leaves, and flowdesk chat --thread {thread} comes back.[/]")
                continue
            if re.fullmatch(r"/\w+", text.strip()):  # a mistyped command is not a message to the agent
                console.print(f"[red]unknown command {text.strip()}[/] — /help, /quit (or /exit)")
                continue
            if not text.strip():
                continue
            if len(text) > MAX_MESSAGE_CHARS:
                console.print(f"[red]message too long ({len(text)} characters, limit {MAX_MESSAGE_CHARS})[/]")
                continue
            try:
                r = run_turn(graph, thread, text, context=context,
                             on_interrupt=lambda p: ask_interrupt(console, p),
                             on_reply=lambda s: console.print(f"[bold cyan]agent[/] > {s}"))
            except named_errors() as exc:
                console.print(describe(exc), style="red", markup=False, highlight=False, soft_wrap=True)
                continue
            if trace:
                print_trace(console, r)
        console.print(f"[dim]bye — resume with: flowdesk chat --thread {thread}[/]")
