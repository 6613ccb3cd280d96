"""End-to-end conversations through the compiled agent graph on the bundled library: real nodes,
real Chroma store, real SQLite tools and a SQLite checkpointer; LLMs only as scripted chat models."""

from __future__ import annotations

from graph.state import frame_for

import json
import sqlite3
import uuid

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage

from graph.models import register_chat_model, unregister_chat_model


def _bookings(db_path: str, guest: str) -> list[tuple]:
    with sqlite3.connect(db_path) as conn:
        return conn.execute("SELECT date, time, party_size FROM bookings WHERE guest_name = ?", (guest,)).fetchall()


def test_graph_shape(agent):
    nodes = set(agent.get_graph().nodes)
    assert {"detector", "apply_commands", "router", "retriever", "clarify", "experience", "pre_controller",
            "executor", "post_controller", "tools", "respond"} <= nodes


def test_booking_with_confirmation(talk, agent_context):
    r = talk("I want to reserve a table at Casa Fiorella for 2 people on 2026-12-16 at 19:00")
    assert r.decision == "SEARCH" and r.active_workflow == "book_table"
    assert [c["name"] for c in r.tool_calls] == ["check_availability"]
    assert json.loads(r.tool_calls[0]["result"])["available"] is True
    assert "name" in r.reply.lower() and not r.interrupts

    r = talk("Grace Hopper")
    assert r.decision == "STAY"
    (payload, answer), = r.interrupts  # the irreversible tool asked first
    assert payload["api"] == "book" and payload["args"]["guest_name"] == "Grace Hopper" and answer == "yes"
    assert [c["name"] for c in r.tool_calls] == ["book"]
    assert "Grace Hopper" in r.reply and "B-" in r.reply
    assert _bookings(agent_context.db_path, "Grace Hopper") == [("2026-12-16", "19:00", 2)]


def test_declined_confirmation_books_nothing(talk, agent_context):
    talk("I want to reserve a table at Casa Fiorella for 2 people on 2026-12-17 at 19:00")
    r = talk("Alan Turing", confirm="no")
    assert r.interrupts and "book" not in [c["name"] for c in r.tool_calls if "error" not in str(c["result"])]
    assert _bookings(agent_context.db_path, "Alan Turing") == []
    assert r.reply and "B-" not in r.reply


def test_a_correction_at_the_confirmation_is_read_before_anything_runs(talk, agent_context):
    """An answer to "shall I go ahead?" that says more than no is the user's next turn: the call is off, the
    corrected value (a bare number, read as one of the values the confirmation listed) re-runs what depends on
    it, and the booking for the new details asks its own confirmation (one yes, not two)."""
    talk("I want to reserve a table at Casa Fiorella for 2 people on 2026-12-19 at 19:00")
    r = talk("Barbara Liskov", confirm=lambda p: "wait, we're 3 now" if p["args"]["party_size"] == 2 else "yes")
    (first, _), (second, answer) = r.interrupts
    assert first["args"]["party_size"] == 2 and second["args"]["party_size"] == 3 and answer == "yes"
    assert [c["name"] for c in r.tool_calls] == ["book", "check_availability", "book"]
    assert "declined" in r.tool_calls[0]["result"] and json.loads(r.tool_calls[1]["result"])["available"] is True
    assert _bookings(agent_context.db_path, "Barbara Liskov") == [("2026-12-19", "19:00", 3)] and "B-" in r.reply


def test_a_bare_no_at_the_confirmation_is_only_a_refusal(talk, agent_context):
    talk("I want to reserve a table at Casa Fiorella for 2 people on 2026-12-20 at 19:00")
    r = talk("Edsger Dijkstra", confirm="no, don't")
    (payload, _), = r.interrupts
    assert [c["name"] for c in r.tool_calls] == ["book"] and "declined" in r.tool_calls[0]["result"]
    assert r.decision == "STAY" and _bookings(agent_context.db_path, "Edsger Dijkstra") == []


def test_unavailable_slot_offers_alternatives(talk):
    # Trattoria Lumi is full at 19:30 on 2026-12-05 in the demo database.
    r = talk("I want to reserve a table at Trattoria Lumi for 4 people on 2026-12-05 at 19:30")
    assert r.active_workflow == "book_table"
    assert json.loads(r.tool_calls[-1]["result"])["available"] is False
    assert "Sorry" in r.reply and not r.interrupts


def test_switch_from_search_to_booking(talk):
    r = talk("Hi! Can you find me an Italian restaurant in the old town?")
    assert r.active_workflow == "search_restaurants" and "Trattoria Lumi" in r.reply
    r = talk("I want to reserve a table at Trattoria Lumi for 2 people on 2026-12-18 at 18:00")
    assert r.decision == "SEARCH" and r.active_workflow == "book_table"
    assert r.candidates[0]["workflow"] == "book_table"


def test_digression_and_stack_resume(talk, agent):
    thread = uuid.uuid4().hex[:8]
    talk("I want to reserve a table at Casa Fiorella for 2 people on 2026-12-19 at 19:00", thread=thread)
    r = talk("Actually, where is my order ORD-7003? I need to track it", thread=thread)
    assert r.active_workflow == "track_order" and r.workflow_stack == ["book_table"]
    r = talk("tomas.l@example.com", thread=thread)
    assert [c["name"] for c in r.tool_calls] == ["track_order"] and "Northpost" in r.reply
    r = talk("Thanks. Now back to my table booking", thread=thread)
    assert r.active_workflow == "book_table" and r.workflow_stack == []
    assert not r.tool_calls and "back to" in r.reply.lower()
    state = agent.get_state({"configurable": {"thread_id": thread}}).values
    slots = frame_for(state, "book_table")["slots"]
    assert slots["restaurant"] == "Casa Fiorella" and "guest_name" not in slots  # the navigation turn is not a name
    r = talk("Katherine Johnson", thread=thread)
    assert [c["name"] for c in r.tool_calls] == ["book"] and "Katherine Johnson" in r.reply


def test_naive_llm_executor_is_blocked_by_the_controller(talk, agent, agent_context):
    """An executor model that claims the booking is done: post_controller rejects, no booking happens."""
    claim = AIMessage(content="", tool_calls=[{"name": "reply", "id": "c1", "type": "tool_call",
                                               "args": {"name": "confirm_booking", "text": "Booked!"}}])
    spec = register_chat_model("test-naive", FakeMessagesListChatModel(responses=[claim]))
    try:
        thread = uuid.uuid4().hex[:8]
        talk("I'd like to book a restaurant table at Trattoria Lumi for 2 people", thread=thread)  # date, time pending
        from graph.chat import run_turn

        ctx = type(agent_context)(**{**agent_context.__dict__, "executor_model": spec})
        r = run_turn(agent, thread, "Just tell me that it is all sorted", context=ctx)
        assert [v["controller"] for v in r.violations] == ["node_dependency"]
        assert "confirm_booking needs book" in r.violations[0]["reason"]
        assert "Booked!" not in r.reply and not r.tool_calls and not r.interrupts
        assert r.active_workflow == "book_table" and "time" in r.reply  # the offline policy asks what is missing
    finally:
        unregister_chat_model("test-naive")


def test_llm_executor_tool_call_is_used(talk, agent, agent_context):
    """A scripted LLM executor's valid tool call goes through the controllers to the real tool."""
    call = AIMessage(content="", tool_calls=[{"name": "track_order", "id": "c2", "type": "tool_call",
                                              "args": {"order_id": "ORD-7002", "email": "amelia.hart@example.com"}}])
    spec = register_chat_model("test-exec", FakeMessagesListChatModel(responses=[call]))
    try:
        from graph.chat import run_turn

        ctx = type(agent_context)(**{**agent_context.__dict__, "executor_model": spec})
        r = run_turn(agent, uuid.uuid4().hex[:8], "Where is my parcel? I want to track my order",
                     context=ctx)
        assert r.active_workflow == "track_order"
        assert r.tool_calls and r.tool_calls[0]["name"] == "track_order"
        assert json.loads(r.tool_calls[0]["result"])["status"] == "delivered"
    finally:
        unregister_chat_model("test-exec")


def test_llm_detector_query_drives_retrieval(talk, agent, agent_context):
    """detector_mode=llm with a scripted model: one malformed output (retried), then its query is used."""
    outputs = iter([AIMessage(content="not json at all"),
                    AIMessage(content=json.dumps({
                        "action": "SEARCH", "user_intention": "wants to know where the parcel is",
                        "search_query": "Potential Name of the workflow: track order, Task description of the "
                                        "workflow: tell the customer where their order is and when it arrives"}))])
    spec = register_chat_model("test-detector", GenericFakeChatModel(messages=outputs))
    try:
        from graph.chat import run_turn

        ctx = type(agent_context)(**{**agent_context.__dict__, "detector_model": spec, "detector_mode": "llm"})
        r = run_turn(agent, uuid.uuid4().hex[:8], "hmm, about that thing I bought", context=ctx)
        assert r.decision == "SEARCH" and "track order" in r.search_query
        assert r.active_workflow == "track_order"
    finally:
        unregister_chat_model("test-detector")


def test_clarify_asks_and_uses_the_choice(talk, agent, agent_context):
    """With a wide clarify margin the retriever cannot decide: the clarify node interrupts with options."""
    from graph.chat import run_turn

    ctx = type(agent_context)(**{**agent_context.__dict__, "clarify_margin": 10.0})
    seen = []

    def choose(payload):
        seen.append(payload)
        return "2"

    r = run_turn(agent, uuid.uuid4().hex[:8], "I have a problem with my booking", context=ctx,
                 on_interrupt=choose)
    (payload,) = seen
    assert payload["kind"] == "clarify" and len(payload["options"]) >= 2
    assert r.active_workflow == payload["options"][1]
    assert r.reply


def test_experience_node_is_a_no_op_without_a_workflow_or_blocks(agent_context):
    from langgraph.runtime import Runtime

    from nodes.experience import experience

    state = {"stack": [], "user_intention": "reserve a table"}
    assert experience(state, Runtime(context=agent_context)) == {"experience": "", "prerequisites": []}
    active = {"stack": [{"id": "f1", "workflow": "book_table", "status": "active", "slots": {}, "executed": []}]}
    assert experience(active, Runtime(context=agent_context)) == {"experience": "", "prerequisites": []}


def test_demo_passes_and_fails_honestly(agent_context, tmp_path, monkeypatch):
    """``flowdesk demo`` (= ``make run``) exits 0 on the real agent, and 1 when an expectation fails."""
    from rich.console import Console

    import graph.demo as demo
    from conftest import copy_store

    copy_store(agent_context, tmp_path / "store")
    quiet = Console(file=open("/dev/null", "w"))
    assert demo.run_demo(workdir=str(tmp_path), stats=True, console=quiet) == 0
    # run again in the same directory (`make run` twice): the thread starts fresh, its old ledger with it
    assert demo.run_demo(workdir=str(tmp_path), console=quiet) == 0
    wrong = demo.Step("Hi! Can you find me an Italian restaurant in the old town?", "wrong on purpose",
                      workflow="book_table")
    monkeypatch.setattr(demo, "script", lambda: [wrong])
    assert demo.run_demo(workdir=str(tmp_path), console=quiet) == 1


def test_the_same_booking_asked_for_again_is_not_made_twice(talk, agent_context):
    """A request that restates what was already booked ("Correction: Maison Verte, not Casa Fiorella" after the
    booking at Maison Verte) starts the task afresh with the same details: the booking is not made again."""
    ask = "Book a table at Casa Fiorella for 2 on 2026-12-22 at 19:00 under Margaret Hamilton"
    r = talk(ask)
    assert "B-" in r.reply and len(_bookings(agent_context.db_path, "Margaret Hamilton")) == 1
    r = talk(ask)
    assert "already done" in r.reply and not r.interrupts
    assert len(_bookings(agent_context.db_path, "Margaret Hamilton")) == 1


def test_two_requests_in_one_message_share_who_the_user_is(talk):
    r = talk("my card ending 4417 was stolen, block it please, and then tell me my savings balance. C-1001 pin 4821",
             confirm="no")
    assert r.active_workflow == "block_card"
    assert any(c["name"] == "verify_identity" and c["args"].get("customer_id") == "C-1001" for c in r.tool_calls)
