"""The tools node (success, tool error, confirm/decline through interrupt) and the respond node."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.context import Context
from graph.state import State
from nodes.respond import respond
from nodes.tools import confirmed, tools
from test_controllers import ARGS, BOOK, make_library

BOOKED: list[dict] = []


def check_fn(restaurant, party_size, time, *, context=None):
    if restaurant == "Closed":
        return {"error": f"{restaurant} is closed"}
    return {"available": party_size <= 4, "alternatives": ["21:00"]}


def book_fn(restaurant, party_size, time, guest_name):
    BOOKED.append({"restaurant": restaurant, "guest_name": guest_name})
    return {"booking_id": f"B-{len(BOOKED)}"}


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    BOOKED.clear()
    monkeypatch.setenv("FLOWDESK_TOOL_MODULES", "test_tools_respond")  # the operator allows this test's tools
    lib = make_library(tmp_path / "lib", check="python: 'test_tools_respond:check_fn'",
                       book="python: 'test_tools_respond:book_fn'")
    return Context(library=str(lib), store_dir=str(tmp_path / "store"))


def base_state(proposal, **progress):
    return {"messages": [], "active_workflow": "book_table", "turn": 2, "proposal": proposal,
            "progress": {"book_table": {"executed": ["ask_details"], **progress}}}


def test_tools_success_records_progress_messages_and_trace(ctx):
    st = base_state({"kind": "tool", "name": "check_availability", "args": ARGS, "call_id": "c1"})
    out = tools(st, Runtime(context=ctx))
    prog = out["progress"]["book_table"]
    assert prog["executed"] == ["ask_details", "check_availability"]
    assert prog["results"] == {"available": True, "alternatives": ["21:00"]}
    assert prog["calls"] == {"check_availability": 1}
    assert prog["call_args"] == [{"api": "check_availability", "args": ARGS, "status": "ok", "turn": 2}]
    ai, tm = out["messages"]
    assert isinstance(ai, AIMessage) and ai.tool_calls[0]["id"] == "c1" and ai.tool_calls[0]["args"] == ARGS
    assert isinstance(tm, ToolMessage) and tm.tool_call_id == "c1" and json.loads(tm.content)["available"] is True
    ev = out["trace"][0]
    assert ev["event"] == "environment" and ev["ok"] and ev["api"] == "check_availability"


def test_tools_error_is_recorded_not_executed(ctx):
    st = base_state({"kind": "tool", "name": "check_availability", "args": {**ARGS, "restaurant": "Closed"},
                     "call_id": "c2"})
    out = tools(st, Runtime(context=ctx))
    prog = out["progress"]["book_table"]
    assert prog["executed"] == ["ask_details"] and prog["calls"] == {"check_availability": 1}
    assert prog["call_args"][0]["status"] == "error"
    assert out["messages"][1].status == "error" and "closed" in json.loads(out["messages"][1].content)["error"]
    assert out["trace"][0]["ok"] is False and "Closed is closed" in out["trace"][0]["error"]


def test_tools_bad_args_never_crash(ctx):
    st = base_state({"kind": "tool", "name": "check_availability", "args": {"restaurant": 5}, "call_id": "c3"})
    out = tools(st, Runtime(context=ctx))
    assert "check_availability: field 'restaurant'" in out["trace"][0]["error"]


@pytest.mark.parametrize("answer,expected", [("yes", True), ("Yes please, go ahead", True), (True, True),
                                             ({"confirm": True}, True), ("no", False), ("no, don't", False),
                                             ("hmm", False), ({"confirm": "nope"}, False), (None, False)])
def test_confirmed(answer, expected):
    assert confirmed(answer) is expected


def _tools_graph(ctx):
    g = StateGraph(State, context_schema=Context)
    g.add_node("tools", tools)
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    return g.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("answer", ["yes", "no"])
def test_irreversible_api_asks_to_confirm(ctx, answer):
    graph = _tools_graph(ctx)
    cfg = {"configurable": {"thread_id": f"t-{answer}"}}
    st = base_state({"kind": "tool", "name": "book", "args": BOOK, "call_id": "c9"},
                    executed=["ask_details", "check_availability"])
    first = graph.invoke(st, cfg, context=ctx)
    payload = first["__interrupt__"][0].value
    assert payload["kind"] == "confirm" and payload["api"] == "book" and "cannot be undone" in payload["question"]
    assert BOOKED == []  # nothing runs before the answer
    out = graph.invoke(Command(resume=answer), cfg, context=ctx)
    prog = out["progress"]["book_table"]
    if answer == "yes":
        assert BOOKED == [{"restaurant": "Luigi", "guest_name": "Ada"}]
        assert prog["executed"][-1] == "book" and prog["results"]["booking_id"] == "B-1"
    else:
        assert BOOKED == []
        assert "book" not in prog["executed"] and prog["call_args"][-1]["status"] == "cancelled"
        assert prog.get("calls", {}).get("book") is None
        assert out["trace"][-1]["status"] == "cancelled"


def test_irreversible_runs_without_asking_when_confirmation_is_off(ctx):
    ctx.confirm_irreversible = False
    st = base_state({"kind": "tool", "name": "book", "args": BOOK, "call_id": "c9"},
                    executed=["ask_details", "check_availability"])
    out = tools(st, Runtime(context=ctx))
    assert out["progress"]["book_table"]["results"]["booking_id"] == "B-1"


def test_respond_records_answer_and_pending_slots(ctx):
    st = base_state({"kind": "reply", "name": "ask_details", "text": "Which restaurant, for how many, and when?"},
                    executed=[], slots={"restaurant": "Luigi"})
    out = respond(st, Runtime(context=ctx))
    msg = out["messages"][0]
    assert isinstance(msg, AIMessage) and msg.content.startswith("Which restaurant")
    assert msg.response_metadata["answer"] == "ask_details"
    prog = out["progress"]["book_table"]
    assert prog["executed"] == ["ask_details"] and prog["pending"] == "party_size,time"
    assert out["trace"][0] == {"event": "assistant", "workflow": "book_table", "answer": "ask_details",
                               "text": msg.content, "asks": ["party_size", "time"], "turn": 2}


def test_respond_request_information_and_statements(ctx):
    st = base_state({"kind": "reply", "name": "request_information", "text": "Your name?",
                     "args": {"slots": ["guest_name"]}})
    prog = respond(st, Runtime(context=ctx))["progress"]["book_table"]
    assert prog["pending"] == "guest_name" and prog["executed"][-1] == "request_information"
    st = base_state({"kind": "reply", "name": "confirm_booking", "text": "Booked! Your reference is B-1."},
                    executed=["ask_details", "check_availability", "book"], pending="guest_name")
    prog = respond(st, Runtime(context=ctx))["progress"]["book_table"]
    assert prog["pending"] is None and prog["executed"][-1] == "confirm_booking"


def test_respond_safe_reply_is_not_a_workflow_node(ctx):
    st = base_state({"kind": "reply", "name": "safe_reply", "text": "Sorry."})
    out = respond(st, Runtime(context=ctx))
    assert out["progress"]["book_table"]["executed"] == ["ask_details"]
    st["active_workflow"] = None
    out = respond(st, Runtime(context=ctx))
    assert "progress" not in out and out["messages"][0].content == "Sorry."
