"""Conversation persistence: the checkpointer factory, resume after closing, and a process killed
in the middle of a turn (it loses at most that turn; the thread continues)."""

from __future__ import annotations

from graph.state import active_workflow, frame_for, interrupted_workflows

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from typing_extensions import TypedDict

from graph.checkpoint import CheckpointConfigError, open_checkpointer

ROOT = Path(__file__).resolve().parents[1]


class _S(TypedDict):
    n: int


def _counter(saver):
    g = StateGraph(_S)
    g.add_node("inc", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "inc")
    g.add_edge("inc", END)
    return g.compile(checkpointer=saver)


def test_sqlite_checkpointer_survives_reopen(tmp_path):
    path = tmp_path / "sub" / "cp.sqlite"  # parent folders are created
    cfg = {"configurable": {"thread_id": "t1"}}
    with open_checkpointer(path) as saver:
        assert _counter(saver).invoke({"n": 1}, cfg)["n"] == 2
    assert path.exists()
    with open_checkpointer(path) as saver:
        graph = _counter(saver)
        assert graph.get_state(cfg).values["n"] == 2
        assert graph.get_state({"configurable": {"thread_id": "other"}}).values == {}


def test_env_url_and_bad_locations(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWDESK_CHECKPOINT_URL", str(tmp_path / "env.sqlite"))
    with open_checkpointer() as saver:
        _counter(saver).invoke({"n": 0}, {"configurable": {"thread_id": "x"}})
    assert (tmp_path / "env.sqlite").exists()
    with pytest.raises(CheckpointConfigError, match="is a directory"):
        with open_checkpointer(tmp_path):
            pass
    with pytest.raises(CheckpointConfigError, match="postgres:// URL"):
        with open_checkpointer("mysql://db/x"):
            pass


# --- the real agent ------------------------------------------------------------------------------

def booking(date: str) -> list[str]:
    return ["Hello, I need some help please",
            f"I want to reserve a table at Casa Fiorella for 2 people on {date} at 19:00"]


def check_resume_across_checkpointers(target, thread: str, date: str, agent_context) -> None:
    """Two turns, close the checkpointer and the graph, reopen ``target`` (a SQLite path or a Postgres
    URL): active workflow, stack and slots are intact and the conversation goes on from where it was."""
    from graph.agent import build_agent
    from graph.chat import run_turn
    from graph.checkpoint import open_checkpointer

    cfg = {"configurable": {"thread_id": thread}}
    with open_checkpointer(target) as saver:
        graph = build_agent(agent_context, checkpointer=saver)
        for text in booking(date):
            run_turn(graph, thread, text, context=agent_context)
        before = graph.get_state(cfg).values
    assert active_workflow(before) == "book_table"
    assert frame_for(before, "book_table")["slots"]["restaurant"] == "Casa Fiorella"
    with open_checkpointer(target) as saver:
        graph = build_agent(agent_context, checkpointer=saver)
        after = graph.get_state(cfg).values
        for key in ("stack", "turn", "version"):
            assert after.get(key) == before.get(key), key
        assert len(after["messages"]) == len(before["messages"])
        assert graph.get_state({"configurable": {"thread_id": "never-used"}}).values == {}
        r = run_turn(graph, thread, "Anna Smith", context=agent_context, on_interrupt=lambda p: "yes")
        assert [c["name"] for c in r.tool_calls] == ["book"]  # the conversation goes on from where it was
        assert "Anna Smith" in r.reply
        assert graph.get_state(cfg).values["turn"] == before["turn"] + 1


def test_resume_after_closing(agent_context, tmp_path):
    """Close the checkpointer and the graph, reopen: active workflow, stack and slots are intact."""
    check_resume_across_checkpointers(tmp_path / "cp.sqlite", "resume", "2026-12-14", agent_context)


_CHILD = textwrap.dedent("""
    import json, sys, time
    from graph.context import Context
    import nodes.executor as ex
    real = ex.executor
    def slow(state, runtime):
        if state.get("turn", 0) >= 3:
            print("IN_TURN", flush=True)
            time.sleep(120)
        return real(state, runtime)
    ex.executor = slow
    from graph.agent import build_agent
    from graph.chat import run_turn
    from graph.checkpoint import open_checkpointer
    ctx = Context(**json.loads(sys.argv[2]))
    with open_checkpointer(sys.argv[1]) as saver:
        g = build_agent(ctx, checkpointer=saver)
        for text in json.loads(sys.argv[3]):
            run_turn(g, "killed", text, context=ctx)
        print("DONE_TURNS", flush=True)
        run_turn(g, "killed", "Anna Smith", context=ctx)
""")


def test_killed_mid_turn_loses_at_most_that_turn(agent_context, tmp_path):
    path = tmp_path / "cp.sqlite"
    from conftest import copy_store

    ctx = {"store_dir": copy_store(agent_context, tmp_path / "store"), "db_path": agent_context.db_path}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), json.dumps(ctx), json.dumps(booking("2026-12-15"))],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        seen = []
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line.strip())
            if line.strip() == "IN_TURN":
                break
        assert "IN_TURN" in seen, f"child never reached turn 3: {seen} {proc.stderr.read() if proc.poll() is not None else ''}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    from graph.agent import build_agent

    cfg = {"configurable": {"thread_id": "killed"}}
    with open_checkpointer(path) as saver:
        graph = build_agent(agent_context, checkpointer=saver)
        state = graph.get_state(cfg)
        # The turn in flight was checkpointed up to the executor, and nothing after it.
        assert state.next == ("executor",)
        assert state.values["turn"] == 3
        completed = next(s for s in graph.get_state_history(cfg) if not s.next and s.values.get("turn") == 2)
        assert active_workflow(completed.values) == active_workflow(state.values)
        # the in-flight turn already read its message into the frame (apply_commands ran before the kill)
        assert [f["workflow"] for f in completed.values["stack"]] == [f["workflow"] for f in state.values["stack"]]
        # Durable execution: the interrupted turn finishes from its last checkpoint (the executor
        # re-runs, proposes the booking, the tools node asks for confirmation).
        out = graph.invoke(None, cfg, context=agent_context)
        assert out["__interrupt__"][0].value["api"] == "book"
        graph.invoke(Command(resume="yes"), cfg, context=agent_context)
        final = graph.get_state(cfg)
        assert not final.next and final.values["turn"] == 3
        assert "Anna Smith" in final.values["messages"][-1].content


def test_chat_cli_resumes_the_thread(agent_context, tmp_path, monkeypatch):
    """``flowdesk chat``: a session, /quit, a new session on the same thread continues it."""
    import io

    from rich.console import Console

    from graph.chat import chat

    monkeypatch.setenv("FLOWDESK_STORE_DIR", agent_context.store_dir)
    monkeypatch.setenv("FLOWDESK_DB_PATH", agent_context.db_path)

    def session(lines: list[str]) -> str:
        out = io.StringIO()
        console = Console(file=out, width=120, color_system=None)
        feed = iter(lines)
        console.input = lambda prompt="": (console.print(prompt, end=""), next(feed))[1]
        chat(thread="cli", trace=True, checkpoint=str(tmp_path / "chat.sqlite"), console=console)
        return out.getvalue()

    first = session(["I'd like to book a restaurant table at Trattoria Lumi for 2 people", "/quit"])
    assert "thread cli (new)" in first and "decision" in first and "book_table" in first
    second = session(["On 2026-12-24 at 18:00", "Hedy Lamarr", "yes", "/quit"])
    assert "resumed" in second and "active workflow: book_table" in second
    assert "check_availability" in second and "shall I go ahead" in second and "Hedy Lamarr" in second
