"""The Chroma server goes away mid-session (pytest -m faults, server): a real ``chroma run`` process
is SIGKILLed while a conversation runs.

- conversations already running go on (matrices already read stay in memory; the query embedding
  is local);
- a read the server must answer (a representation not read yet, a new process) gets the named
  error (``StoreUnavailableError``: the URL and what to do) in the log — after retries at start-up —
  and search falls back to BM25 over the library files: the conversation still starts the right
  workflow;
- once the server is back on its port, the next search after ``RETRY_SECONDS`` returns to it;
- at the CLI, a command that must write to the server exits 2 with the named error, no traceback.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from langchain_core.messages import HumanMessage

from conftest import copy_store
from test_scaleout import _stop, start_chroma

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.faults, pytest.mark.server]


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()  # SIGKILL, this process only: no clean shutdown of the server
    proc.wait(timeout=30)


def test_chroma_server_lost_mid_session(agent_context, tmp_path, checkpointer, caplog):
    from graph.agent import build_agent
    from graph.context import Context
    from graph.resources import clear_resources, get_resources
    from memory.retrieval import clear_cache

    log = open(tmp_path / "chroma.log", "w+")
    proc, url = start_chroma(tmp_path / "chroma", log)
    again = None
    try:
        store = copy_store(agent_context, tmp_path / "store")  # its embedding cache: no re-embedding
        ctx = Context(chroma_url=url, store_dir=store, db_path=str(tmp_path / "demo.sqlite"))
        agent = build_agent(ctx, checkpointer=checkpointer)
        config = {"configurable": {"thread_id": "chroma-lost"}}
        out = agent.invoke({"messages": [HumanMessage("Where is my order ORD-7003?")]}, config)
        assert out["stack"][-1]["workflow"] == "track_order"
        running = get_resources(ctx).retriever
        assert running.dense and not running.degraded

        _kill(proc)  # the server is gone mid-session

        # the running conversation goes on, a search for another workflow included
        out = agent.invoke({"messages": [HumanMessage("Book a table at Casa Fiorella for 2 on 2027-03-09 at 19:00")]},
                           config)
        assert out["stack"][-1]["workflow"] == "book_table" and out["messages"][-1].content.strip()
        # a read only the server can answer: the named error in the log, then BM25 over the library files
        with caplog.at_level(logging.WARNING, logger="memory.retrieval"):
            hits = running.search("cancel my hotel booking", representation="code", retriever="dense", top_k=3)
        assert hits and {h["retriever"] for h in hits} == {"bm25"}
        assert f"chroma_url {url}: the Chroma server is not answering" in running.degraded
        assert any("BM25 over the library files" in r.message and url in r.message for r in caplog.records)

        # a new process (fresh resources): retries, the same named error, BM25 — and the agent still works
        clear_cache()
        clear_resources()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="memory.retrieval"):
            fresh = build_agent(ctx, checkpointer=checkpointer)
            out = fresh.invoke({"messages": [HumanMessage("I'd like to book a table at Casa Fiorella for 2")]},
                               {"configurable": {"thread_id": "chroma-down"}})
        assert out["stack"][-1]["workflow"] == "book_table"
        assert out["candidates"] and out["candidates"][0]["retriever"] == "bm25"
        retr = get_resources(ctx).retriever
        assert not retr.dense and "the Chroma server is not answering" in retr.degraded
        assert sum("the Chroma server is not answering" in r.message for r in caplog.records) == 1  # said once

        # a command that must write to the server: exit 2, the named error, no traceback
        index = subprocess.run([sys.executable, "-m", "graph.cli", "index", str(ROOT / "workflows" / "library")],
                               cwd=tmp_path, capture_output=True, text=True, timeout=300,
                               env={**os.environ, "PYTHONPATH": str(ROOT), "FLOWDESK_CHROMA_URL": url,
                                    "FLOWDESK_STORE_DIR": store})
        assert index.returncode == 2 and "the Chroma server is not answering" in index.stderr, index.stderr[-2000:]
        assert "Traceback" not in index.stderr

        # the server comes back on its port: within RETRY_SECONDS the retriever is back on it
        again, _ = start_chroma(tmp_path / "chroma", log, port=urlsplit(url).port)
        # (RETRY_SECONDS is a wall-clock wait; the test moves the retriever's clock instead of sleeping)
        retr._retry_at = time.monotonic() + 60  # not yet due: still BM25, the server is not asked
        assert retr.search("book a table", retriever="dense", top_k=1)[0]["retriever"] == "bm25"
        retr._retry_at = 0.0  # due
        hits = retr.search("book a table", retriever="dense", top_k=1)
        assert retr.dense and not retr.degraded and hits[0]["retriever"] == "dense"
    finally:
        for p in (proc, again):
            if p is not None:
                _stop(p)
        log.close()
        clear_cache()
        clear_resources()
