"""The tools node (success, tool error, bad arguments, confirm/decline through an interrupt) and the
respond node, on the dialogue stack: each returns a stack operation for the active frame (``call`` /
``answer``), which the state's reducer (``merge_stack``) applies — the tests apply it the same way."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from dialogue.frames import merge_stack, new_frame, successful_calls
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
    monkeypatch.setenv("FLOWDESK_TOOL_MODULES", __name__)  # this module's tools, as an operator would allow
    lib = make_library(tmp_path / "lib", check=f"python: '{__name__}:check_fn'", book=f"python: '{__name__}:book_fn'")
    return Context(library=str(lib), store_dir=str(tmp_path / "store"))


def base_state(action, **frame) -> dict:
    """Turn 2 of a thread whose active frame (book_table) asked its first question; ``action`` is what
    the post-controller accepted."""
    return {"messages": [], "turn": 2, "action": action,
            "stack": [{**new_frame("book_table", 1), "executed": ["ask_details"], **frame}]}


def frame_after(state: dict, out: dict) -> dict:
    """The active frame once the node's stack operations are applied (the state's reducer)."""
    return merge_stack(state["stack"], out["stack"])[-1]


# --- tools -------------------------------------------------------------------------------------------

def test_tools_success_records_the_call_messages_and_trace(ctx):
    st = base_state({"kind": "tool", "name": "check_availability", "args": ARGS, "call_id": "c1"})
    out = tools(st, Runtime(context=ctx))
    assert [op["op"] for op in out["stack"]] == ["call"] and out["stack"][0]["frame"] == st["stack"][-1]["id"]
    fr = frame_after(st, out)
    assert fr["executed"] == ["ask_details", "check_availability"]
    assert fr["results"] == {"available": True, "alternatives": ["21:00"]}
    assert fr["calls"] == [{"api": "check_availability", "args": ARGS, "status": "ok", "turn": 2, "key": "c1"}]
    ai, tm = out["messages"]
    assert isinstance(ai, AIMessage) and ai.tool_calls[0]["id"] == "c1" and ai.tool_calls[0]["args"] == ARGS
    assert isinstance(tm, ToolMessage) and tm.tool_call_id == "c1" and json.loads(tm.content)["available"] is True
    ev = out["trace"][0]
    assert ev["event"] == "environment" and ev["ok"] and ev["api"] == "check_availability"


def test_tools_error_is_recorded_not_executed(ctx):
    st = base_state({"kind": "tool", "name": "check_availability", "args": {**ARGS, "restaurant": "Closed"},
                     "call_id": "c2"})
    out = tools(st, Runtime(context=ctx))
    fr = frame_after(st, out)
    assert fr["executed"] == ["ask_details"] and fr["results"] == {}
    assert [(c["api"], c["status"]) for c in fr["calls"]] == [("check_availability", "error")]
    assert successful_calls(fr, "check_availability") == []
    assert out["messages"][1].status == "error" and "closed" in json.loads(out["messages"][1].content)["error"]
    assert out["trace"][0]["ok"] is False and "Closed is closed" in out["trace"][0]["error"]


def test_tools_bad_args_never_crash(ctx):
    st = base_state({"kind": "tool", "name": "check_availability", "args": {"restaurant": 5}, "call_id": "c3"})
    out = tools(st, Runtime(context=ctx))
    assert "check_availability: field 'restaurant'" in out["trace"][0]["error"]
    assert frame_after(st, out)["calls"][-1]["status"] == "error"


def test_tools_only_runs_an_accepted_tool_action(ctx):
    # a rejected proposal (action None) or a reply never reaches a tool
    assert tools({**base_state(None), "proposal": {"kind": "tool", "name": "book", "args": BOOK}},
                 Runtime(context=ctx)) == {}
    assert tools(base_state({"kind": "reply", "name": "ask_details", "text": "?"}), Runtime(context=ctx)) == {}
    assert BOOKED == []


@pytest.mark.parametrize("answer,expected", [("yes", True), ("Yes please, go ahead", True), (True, True),
                                             ({"confirm": True}, True), ("no", False), ("no, don't", False),
                                             ("hmm", False), ({"confirm": "nope"}, False), (None, False),
                                             # a leading yes stands whatever restates the request after it
                                             ("yes, cancel it", True), ("yes, I never made those payments", True),
                                             ("yes, no problem", True), ("I confirm", True),
                                             # a hedge makes it no yes: the user changed or asked something
                                             ("yes but for 3 people", False), ("ok, how much is it per night?", False),
                                             ("sure, only the first one", False), ("yes - oh wait", False),
                                             ("actually no, keep it", False), ("I don't know", False)])
def test_confirmed(answer, expected):
    assert confirmed(answer) is expected


@pytest.mark.parametrize("answer,expected", [("no", False), ("no, don't", False), ("nope, cancel", False),
                                             ("yes please", False), ("yes, cancel it", False),
                                             ("wait no, it's the debit one, 6045", True),
                                             ("no, make it 4 people", True), ("how much is it?", True),
                                             # leaving things as they are is still only a no
                                             ("actually no, I changed my mind", False), ("hmm no, leave it", False),
                                             ("actually no, I'll keep it", False), ("no, keep it at 4 people", True)])
def test_an_answer_that_says_more_than_no_is_a_turn_of_its_own(answer, expected):
    from workflows.text import says_more

    assert says_more(answer) is expected


def _tools_graph():
    g = StateGraph(State, context_schema=Context)
    g.add_node("tools", tools)
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    return g.compile(checkpointer=InMemorySaver())


def as_input(state: dict) -> dict:
    """A state as graph input: the stack goes in as a ``replace`` operation (its reducer's input)."""
    return {**state, "stack": [{"op": "replace", "stack": state["stack"]}]}


@pytest.mark.parametrize("answer", ["yes", "no"])
def test_irreversible_api_asks_to_confirm(ctx, answer):
    graph = _tools_graph()
    cfg = {"configurable": {"thread_id": f"t-{answer}"}}
    st = base_state({"kind": "tool", "name": "book", "args": BOOK, "call_id": "c9"},
                    executed=["ask_details", "check_availability"])
    first = graph.invoke(as_input(st), cfg, context=ctx)
    payload = first["__interrupt__"][0].value
    assert payload["kind"] == "confirm" and payload["api"] == "book" and "cannot be undone" in payload["question"]
    assert payload["workflow"] == "book_table" and payload["args"] == BOOK
    assert BOOKED == []  # nothing runs before the answer
    out = graph.invoke(Command(resume=answer), cfg, context=ctx)
    fr = out["stack"][-1]
    if answer == "yes":
        assert BOOKED == [{"restaurant": "Luigi", "guest_name": "Ada"}]
        assert fr["executed"][-1] == "book" and fr["results"]["booking_id"] == "B-1"
        assert [c["status"] for c in successful_calls(fr, "book")] == ["ok"]
    else:
        assert BOOKED == []
        assert "book" not in fr["executed"] and fr["calls"][-1]["status"] == "cancelled"
        assert successful_calls(fr, "book") == []
        assert out["trace"][-1]["status"] == "cancelled"
        assert out["messages"][-1].status == "error" and "declined" in out["messages"][-1].content


def test_irreversible_runs_without_asking_when_confirmation_is_off(ctx):
    ctx = Context(library=ctx.library, store_dir=ctx.store_dir, confirm_irreversible=False)
    st = base_state({"kind": "tool", "name": "book", "args": BOOK, "call_id": "c9"},
                    executed=["ask_details", "check_availability"])
    out = tools(st, Runtime(context=ctx))
    assert frame_after(st, out)["results"]["booking_id"] == "B-1"


# --- respond -----------------------------------------------------------------------------------------

def test_respond_records_answer_and_asked_slots(ctx):
    st = base_state({"kind": "reply", "name": "ask_details", "text": "Which restaurant, for how many, and when?"},
                    executed=[], slots={"restaurant": "Luigi"})
    out = respond(st, Runtime(context=ctx))
    msg = out["messages"][0]
    assert isinstance(msg, AIMessage) and msg.content.startswith("Which restaurant")
    assert msg.response_metadata == {"answer": "ask_details", "workflow": "book_table"}
    assert [op["op"] for op in out["stack"]] == ["answer"]
    fr = frame_after(st, out)
    assert fr["executed"] == ["ask_details"] and fr["asked"] == ["party_size", "time"] and fr["status"] == "active"
    assert out["trace"][0] == {"event": "assistant", "workflow": "book_table", "answer": "ask_details",
                               "text": msg.content, "asks": ["party_size", "time"], "turn": 2}


def test_respond_request_information_and_statements(ctx):
    st = base_state({"kind": "reply", "name": "request_information", "text": "Your name?",
                     "args": {"slots": ["guest_name"]}})
    fr = frame_after(st, respond(st, Runtime(context=ctx)))
    assert fr["asked"] == ["guest_name"] and fr["executed"][-1] == "request_information"
    st = base_state({"kind": "reply", "name": "confirm_booking", "text": "Booked! Your reference is B-1."},
                    executed=["ask_details", "check_availability", "book"], asked=["guest_name"])
    fr = frame_after(st, respond(st, Runtime(context=ctx)))
    assert fr["asked"] == [] and fr["executed"][-1] == "confirm_booking"


def test_respond_a_completing_reply_finishes_the_frame(ctx):
    st = base_state({"kind": "reply", "name": "confirm_booking", "text": "Booked! Your reference is B-1.",
                     "completes": True}, executed=["ask_details", "check_availability", "book"])
    assert frame_after(st, respond(st, Runtime(context=ctx)))["status"] == "done"


def test_respond_safe_reply_is_not_a_workflow_node(ctx):
    st = base_state({"kind": "reply", "name": "safe_reply", "text": "Sorry."})
    out = respond(st, Runtime(context=ctx))
    assert frame_after(st, out)["executed"] == ["ask_details"]
    st["stack"] = []  # no workflow active
    out = respond(st, Runtime(context=ctx))
    assert "stack" not in out and out["messages"][0].content == "Sorry."


def test_the_confirmation_lists_the_users_values_never_a_token():
    from graph.resources import get_resources
    from nodes.tools import confirmation_question

    wf = get_resources(Context()).library.workflows["transfer_money"]
    q = confirmation_question(wf.api("transfer_funds"), {"auth_token": "AUTH-D5F452DBE75E", "from_account": "savings",
                                                          "amount": 250}, wf)
    assert "AUTH-" not in q and "token" not in q and "from account: savings" in q and "amount: 250" in q
