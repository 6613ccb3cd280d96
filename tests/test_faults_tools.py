"""Tool faults through the whole graph (pytest -m faults): a tool that times out, raises or returns a
malformed result gives a named, failed call (ToolMessage status error, trace event, ledger record
"failed") and the thread stays usable — the next message is answered, and nothing is retried blindly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.faults


def faulty_library(tmp_path: Path, function: str) -> str:
    lib = tmp_path / "library"  # the dining domain only: a small index to build
    shutil.copytree(ROOT / "workflows" / "library" / "dining", lib / "dining")
    wf = lib / "dining" / "restaurant_host" / "book_table.yaml"
    wf.write_text(wf.read_text().replace('binding: {python: "workflows.demo.tools:book_table"}',
                                         f'binding: {{python: "fault_tools:{function}"}}'))
    return str(lib)


@pytest.mark.parametrize("function, named", [("book_slow", "book: timed out after 0.5s"),
                                             ("book_raises", "book: ConnectionError: reservation service"),
                                             ("book_malformed", "book: malformed result: ")])
def test_tool_faults_are_named_and_the_thread_stays_usable(agent_context, checkpointer, tmp_path, monkeypatch,
                                                           function, named):
    from dataclasses import replace

    from graph.agent import build_agent
    from graph.checkpoint import ledger_for
    from memory.ledger import open_ledger

    monkeypatch.setenv("FLOWDESK_TOOL_MODULES", "fault_tools")
    ctx = replace(agent_context, library=faulty_library(tmp_path, function), tool_timeout=0.5)
    agent = build_agent(ctx, checkpointer=checkpointer)
    config = {"configurable": {"thread_id": f"fault-{function}"}}
    agent.invoke({"messages": [HumanMessage("Book a table at Casa Fiorella for 2 on 2027-03-03 at 19:00")]}, config)
    out = agent.invoke({"messages": [HumanMessage("Tess Fault")]}, config)
    assert "__interrupt__" in out
    out = agent.invoke(Command(resume="yes"), config)
    failed = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "book"]
    assert failed and failed[-1].status == "error" and named in failed[-1].content
    assert "Traceback" not in failed[-1].content
    event = [e for e in agent.get_state(config).values["trace"] if e.get("api") == "book"][-1]
    assert event["status"] == "error" and named in event["error"]
    assert open_ledger(ledger_for(checkpointer)).get(event["key"]).status == "failed"
    reply = out["messages"][-1].content
    assert reply.strip()  # the user got an answer, not a crash
    out = agent.invoke({"messages": [HumanMessage("Where is my order ORD-7003?")]}, config)
    assert out["messages"][-1].content.strip() and agent.get_state(config).next == ()
