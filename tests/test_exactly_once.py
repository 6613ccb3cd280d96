"""Exactly-once side effects (memory/effects.py, nodes/tools.py, nodes/recover.py): idempotent demo
writes, the ledger around every call, replay and reconciliation, and the report of a turn a crash
cut short.  Crashes are staged here by writing what a dying process leaves behind (a ledger record
without its checkpoint); tests/test_faults_kill.py kills real processes."""

from __future__ import annotations

import sqlite3

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Command

from memory.effects import UNKNOWN_OUTCOME, key_for, run_once, unreported
from memory.ledger import open_ledger
from workflows.bindings import ToolRunner

BOOK = "Book a table at Casa Fiorella for 2 on 2026-12-23 at 19:00"


def bookings(db_path: str, guest: str) -> list[tuple]:
    with sqlite3.connect(db_path) as conn:
        return conn.execute("SELECT id, date, time FROM bookings WHERE guest_name=?", (guest,)).fetchall()


def test_demo_write_with_the_same_key_returns_the_first_result(agent_context):
    from workflows.demo import tools

    args = dict(restaurant="Casa Fiorella", party_size=2, date="2027-02-03", time="19:00", guest_name="Ida Key")
    first = tools.book_table(**args, context=agent_context, idempotency_key="k-1")
    again = tools.book_table(**args, context=agent_context, idempotency_key="k-1")
    other = tools.book_table(**args, context=agent_context, idempotency_key="k-2")
    assert first == again and first["booking_id"].startswith("B-")
    assert other["booking_id"] != first["booking_id"]  # a new key is a new booking
    assert len(bookings(agent_context.db_path, "Ida Key")) == 2
    # a refused write records nothing: the same key may succeed later
    bad = tools.book_table(**{**args, "date": "yesterday"}, context=agent_context, idempotency_key="k-3")
    assert "error" in bad


def test_run_once_replays_and_reconciles(agent_context):
    from graph.resources import get_resources

    res = get_resources(agent_context)
    wf = res.library.workflows["book_table"]
    runner = ToolRunner(agent_context)
    args = dict(restaurant="Casa Fiorella", party_size=2, date="2027-02-04", time="19:00", guest_name="Una Once")
    with open_ledger(":memory:") as ledger:
        key = key_for("t-once", 3, "book", args, 0)
        first = run_once(ledger, runner, wf, "book", args, key, thread="t-once")
        assert first.result.ok and not first.replayed
        replay = run_once(ledger, runner, wf, "book", args, key, thread="t-once")
        assert replay.replayed and replay.result.data == first.result.data
        assert len(bookings(agent_context.db_path, "Una Once")) == 1

        # begun and never completed (the process died after the tool committed): reconciled with the
        # same key, the tool answers with the booking it made instead of making a second one
        key2 = key_for("t-once", 4, "book", {**args, "guest_name": "Una Twice"}, 0)
        ledger.begin(key2, "book_table/book", {**args, "guest_name": "Una Twice"}, thread="t-once")
        made = runner.run(wf, "book", {**args, "guest_name": "Una Twice"}, idempotency_key=key2)
        assert ledger.pending("t-once")
        settled = run_once(ledger, runner, wf, "book", {**args, "guest_name": "Una Twice"}, key2, thread="t-once")
        assert settled.reconciled and settled.result.data == made.data
        assert len(bookings(agent_context.db_path, "Una Twice")) == 1 and not ledger.pending("t-once")
        assert [r.key for r in unreported(ledger, "t-once", 4, known=[key])] == [key2]


def test_a_tool_that_cannot_take_the_key_is_not_repeated(agent_context, tmp_path, monkeypatch):
    """Unknown outcome + a tool without idempotency_key: recorded as failed, never called again."""
    from workflows.library import load_library

    lib = load_library(agent_context.library)
    wf = lib.workflows["book_table"]
    api = wf.api("book")
    calls = []

    class Runner(ToolRunner):
        def run(self, *a, **k):  # counts calls; the binding check says "no key"
            calls.append(a)
            return super().run(*a, **k)

    runner = Runner(agent_context)
    monkeypatch.setattr("memory.effects.carries_key", lambda r, a: False)
    with open_ledger(":memory:") as ledger:
        key = key_for("t-nokey", 1, "book", {}, 0)
        ledger.begin(key, "book_table/book", {}, thread="t-nokey")
        out = run_once(ledger, runner, wf, api.name, {}, key, thread="t-nokey")
    assert calls == [] and not out.result.ok and UNKNOWN_OUTCOME in out.result.error


def _thread_at_confirmation(agent, agent_context, thread: str, guest: str, date: str) -> dict:
    config = {"configurable": {"thread_id": thread}}
    agent.invoke({"messages": [HumanMessage(BOOK.replace("2026-12-23", date))]}, config, context=agent_context)
    out = agent.invoke({"messages": [HumanMessage(guest)]}, config, context=agent_context)
    assert "__interrupt__" in out, out["messages"][-1].content
    return config


def test_resuming_a_replayed_turn_books_once(agent, agent_context, checkpointer):
    """The turn's tool ran and the process died before the checkpoint: answering "yes" again (what
    `flowdesk chat` asks) replays the tools node, which takes the recorded outcome."""
    from graph.checkpoint import ledger_for

    config = _thread_at_confirmation(agent, agent_context, "t-replay", "Rae Replay", "2027-02-05")
    state = agent.get_state(config)
    action = state.values["action"]
    key = key_for("t-replay", state.values["turn"], action["name"], action["args"], 0)
    ledger = open_ledger(ledger_for(checkpointer))
    from graph.resources import get_resources

    wf = get_resources(agent_context).library.workflows["book_table"]
    run_once(ledger, ToolRunner(agent_context), wf, action["name"], action["args"], key, thread="t-replay")
    assert len(bookings(agent_context.db_path, "Rae Replay")) == 1
    out = agent.invoke(Command(resume="yes"), config, context=agent_context)
    assert len(bookings(agent_context.db_path, "Rae Replay")) == 1
    assert "B-" in out["messages"][-1].content
    events = [e for e in agent.get_state(config).values["trace"] if e.get("event") == "environment"]
    assert events[-1]["replayed"] and events[-1]["key"] == key


def test_the_next_message_reports_a_call_the_state_lost(agent, agent_context, checkpointer):
    """The booking went through, then the process died before anything was checkpointed; the user
    writes again: the reply first reports the booking, once, and nothing is booked again."""
    from graph.checkpoint import ledger_for
    from graph.resources import get_resources

    config = _thread_at_confirmation(agent, agent_context, "t-lost", "Lou Lost", "2027-02-06")
    state = agent.get_state(config)
    action, turn = state.values["action"], state.values["turn"]
    key = key_for("t-lost", turn, action["name"], action["args"], 0)
    ledger = open_ledger(ledger_for(checkpointer))
    wf = get_resources(agent_context).library.workflows["book_table"]
    ledger.begin(key, "book_table/book", action["args"], thread="t-lost")
    booked = ToolRunner(agent_context).run(wf, action["name"], action["args"], idempotency_key=key)  # ... then died
    ref = booked.data["booking_id"]

    out = agent.invoke({"messages": [HumanMessage("hello? are you still there?")]}, config, context=agent_context)
    reply = out["messages"][-1].content
    assert "went through" in reply and "cut off" in reply and reply.count(ref) == 1
    assert len(bookings(agent_context.db_path, "Lou Lost")) == 1 and not ledger.pending("t-lost")
    out = agent.invoke({"messages": [HumanMessage("thanks")]}, config, context=agent_context)
    told = sum((m.content or "").count(ref) for m in out["messages"] if isinstance(m, AIMessage))
    assert told == 1  # told once
    assert len(bookings(agent_context.db_path, "Lou Lost")) == 1


def test_an_unknown_outcome_is_settled_before_the_next_message(agent, agent_context, checkpointer):
    """Begun, never completed, and the state lost it: the next message reconciles it (the demo tool
    takes the key, so asking again makes the booking the user confirmed, exactly once)."""
    from graph.checkpoint import ledger_for

    config = _thread_at_confirmation(agent, agent_context, "t-unknown", "Uma Unknown", "2027-02-07")
    state = agent.get_state(config)
    action, turn = state.values["action"], state.values["turn"]
    key = key_for("t-unknown", turn, action["name"], action["args"], 0)
    ledger = open_ledger(ledger_for(checkpointer))
    ledger.begin(key, "book_table/book", action["args"], thread="t-unknown")  # died before the tool ran
    out = agent.invoke({"messages": [HumanMessage("hello?")]}, config, context=agent_context)
    reply = out["messages"][-1].content
    assert "cut off" in reply and "went through" in reply
    rows = bookings(agent_context.db_path, "Uma Unknown")
    assert len(rows) == 1 and reply.count(f"B-{rows[0][0]}") == 1
    assert ledger.get(key).status == "done"


def test_ledger_location_follows_the_checkpointer(tmp_path):
    from langgraph.checkpoint.memory import InMemorySaver

    from graph.checkpoint import ledger_for, open_checkpointer

    with open_checkpointer(tmp_path / "cp" / "checkpoints.sqlite") as saver:
        assert ledger_for(saver) == str(tmp_path / "cp" / "ledger.sqlite")
    a, b = InMemorySaver(), InMemorySaver()
    assert ledger_for(a).startswith("memory:") and ledger_for(a) == ledger_for(a) != ledger_for(b)
    assert ledger_for(None) == ""


def test_ledger_setting_is_validated_and_server_side():
    from graph.context import Context, ContextError, client_context

    assert Context(ledger="postgresql://u@h/db").ledger.startswith("postgresql://")
    with pytest.raises(ContextError, match="^ledger: "):
        Context(ledger="s3://bucket/x")
    with pytest.raises(ContextError, match="server-side"):
        client_context({"ledger": "/tmp/elsewhere.sqlite"}, allowed=set())


# --- text at the graph boundary (normalised) and input that is no language ------------------------

@pytest.mark.parametrize("text", ["a" * 20_000, "\x00", '{"restaurant": "Casa Fiorella", "party_size": 2, '
                                  '"date": "2026-12-23", "account": "checking", "amount": 50}', "%%%% $$$ !!!",
                                  "qwzx vbnmq rtzpl"])
def test_no_language_starts_no_workflow(agent, agent_context, text):
    config = {"configurable": {"thread_id": f"nl-{abs(hash(text)) % 10**8}"}}
    out = agent.invoke({"messages": [HumanMessage(text)]}, config, context=agent_context)
    reply = out["messages"][-1].content
    assert reply.startswith("Sorry, I couldn't make sense of that message") and len(reply) < 120
    assert out.get("stack") in (None, [])  # nothing started
    out = agent.invoke({"messages": [HumanMessage(BOOK)]}, config, context=agent_context)
    assert [f["workflow"] for f in out["stack"]] == ["book_table"]  # the next real request is served


def test_no_language_inside_a_workflow_asks_its_question_again(agent, agent_context):
    config = {"configurable": {"thread_id": "nl-inside"}}
    first = agent.invoke({"messages": [HumanMessage(BOOK)]}, config, context=agent_context)
    question = first["messages"][-1].content
    out = agent.invoke({"messages": [HumanMessage('{"x": [1, 2, 3]}')]}, config, context=agent_context)
    reply = out["messages"][-1].content
    assert reply.startswith("Sorry, I couldn't make sense of that message.") and question in reply
    assert out["stack"][-1]["slots"].get("guest_name") in (None, "")  # the blob filled nothing


def test_the_stored_message_is_the_normalised_one(agent, agent_context):
    config = {"configurable": {"thread_id": "norm"}}
    raw = "Where is my order ORD-7003?\x07\ud800\x1b[31m"
    agent.invoke({"messages": [HumanMessage(raw)]}, config, context=agent_context)
    stored = [m for m in agent.get_state(config).values["messages"] if isinstance(m, HumanMessage)]
    assert len(stored) == 1 and stored[0].content == "Where is my order ORD-7003?\ufffd[31m"


def test_reads_as_language_is_generic():
    from workflows.text import reads_as_language

    known = {"where", "is", "my", "order", "book", "table"}.__contains__
    assert reads_as_language("Where is my order?", known)
    assert reads_as_language("ORD-7003", known) and reads_as_language("19:00", known)
    assert reads_as_language("Zyx Qwv", known, expecting_value=True)  # a name the vocabulary cannot know
    assert not reads_as_language("Zyx Qwv", known)
    assert not reads_as_language("", known) and not reads_as_language("?!?!", known)
    assert not reads_as_language('[{"a": 1}]', known, expecting_value=True)
    assert not reads_as_language("b" * 41, known, expecting_value=True)
