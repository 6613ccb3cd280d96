"""The checkpoint store stops answering mid-session (pytest -m faults): a named error for the turn,
and the thread goes on once the store is back.

- SQLite: another connection holds the database's write lock past the busy timeout (a backup, a
  stuck writer) — the turn raises ``CheckpointUnavailableError`` naming the file; once the lock is
  released the same message goes through and the thread has each turn exactly once.
- PostgreSQL (marker server; skips when no server binaries): the server is stopped (``immediate``,
  as after a crash) mid-session and started again on the same port — the same saver, agent and
  ledger carry on (connection pool, ledger reconnect), the thread keeps its workflow.
- ``flowdesk chat`` prints the named error and keeps the conversation open.
"""

from __future__ import annotations

import sqlite3

import pytest

from graph.chat import run_turn
from graph.state import active_workflow

pytestmark = pytest.mark.faults


def _messages(agent, thread: str) -> list[tuple[str, str]]:
    values = agent.get_state({"configurable": {"thread_id": thread}}).values
    return [(m.type, m.content) for m in values.get("messages", [])]


def test_sqlite_checkpointer_locked_mid_session(agent_context, tmp_path):
    from graph.agent import build_agent
    from graph.checkpoint import CheckpointUnavailableError, open_checkpointer
    from graph.errors import named_errors

    path = tmp_path / "checkpoints.sqlite"
    with open_checkpointer(path) as saver:
        agent = build_agent(agent_context, checkpointer=saver)
        first = run_turn(agent, "locked", "Where is my order ORD-7003?", context=agent_context)
        assert first.active_workflow == "track_order"
        before = _messages(agent, "locked")

        holder = sqlite3.connect(path, timeout=0.1, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # the store is not writable for anyone else now
        try:
            with pytest.raises(CheckpointUnavailableError) as err:
                run_turn(agent, "locked", "it's ORD-7003", context=agent_context)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        text = str(err.value)
        assert str(path) in text and "database is locked" in text and "send the message again" in text
        assert isinstance(err.value, named_errors())  # flowdesk chat prints it and goes on
        assert _messages(agent, "locked") == before  # nothing half-written

        again = run_turn(agent, "locked", "it's ORD-7003", context=agent_context)
        assert again.replies and again.replies[-1].strip()
        after = _messages(agent, "locked")
        assert after[:len(before)] == before
        assert [c for t, c in after if t == "human"] == ["Where is my order ORD-7003?", "it's ORD-7003"]


@pytest.mark.server
def test_postgres_checkpointer_restarts_mid_session(agent_context, tmp_path):
    from graph.agent import build_agent
    from graph.checkpoint import CheckpointUnavailableError, ledger_for, open_checkpointer
    from memory.ledger import open_ledger
    from pgcluster import PgCluster

    cluster = PgCluster.create()
    try:
        with open_checkpointer(cluster.url) as saver:
            assert ledger_for(saver) == cluster.url  # tool calls recorded in the same database
            agent = build_agent(agent_context, checkpointer=saver)
            first = run_turn(agent, "pg-down", "Where is my order ORD-7003?", context=agent_context)
            assert first.active_workflow == "track_order"

            cluster.stop("immediate")  # gone, as after a crash
            with pytest.raises(CheckpointUnavailableError) as err:
                run_turn(agent, "pg-down", "Book a table at Casa Fiorella for 2 on 2027-03-09 at 19:00",
                         context=agent_context)
            assert f"checkpoint store {cluster.url}: not answering" in str(err.value)

            cluster.start()  # back on the same port and data: the same saver and agent go on
            again = run_turn(agent, "pg-down", "Book a table at Casa Fiorella for 2 on 2027-03-09 at 19:00",
                             context=agent_context)
            assert again.active_workflow == "book_table" and again.workflow_stack == ["track_order"]
            humans = [c for t, c in _messages(agent, "pg-down") if t == "human"]
            assert humans == ["Where is my order ORD-7003?", "Book a table at Casa Fiorella for 2 on 2027-03-09 at 19:00"]
            values = agent.get_state({"configurable": {"thread_id": "pg-down"}}).values
            assert active_workflow(values) == "book_table"

        # the ledger on the same server reconnects as well (one connection, dropped by the restart)
        with open_ledger(cluster.url) as ledger:
            cluster.stop("immediate")
            cluster.start()
            assert ledger.begin("pg-down:9:x", "book_table", {}) is None
            assert ledger.get("pg-down:9:x").status == "pending"
    finally:
        cluster.close()
