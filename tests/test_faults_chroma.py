"""The Chroma server goes away mid-session (pytest -m faults, server): conversations already running go
on — the index is held in memory once loaded, and the query embedding is local — while anything that
needs the server afterwards gets a named error (``StoreUnavailableError``: the URL and what to do),
at the CLI an exit 2 without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from conftest import copy_store
from test_scaleout import _stop, start_chroma

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.faults, pytest.mark.server]


def test_chroma_server_lost_mid_session(agent_context, tmp_path, checkpointer):
    from graph.agent import build_agent
    from graph.context import Context
    from graph.resources import clear_resources, get_resources
    from memory.retrieval import clear_cache
    from memory.store import StoreUnavailableError

    log = open(tmp_path / "chroma.log", "w+")
    proc, url = start_chroma(tmp_path / "chroma", log)
    try:
        store = copy_store(agent_context, tmp_path / "store")  # its embedding cache: no re-embedding
        ctx = Context(chroma_url=url, store_dir=store, db_path=str(tmp_path / "demo.sqlite"))
        agent = build_agent(ctx, checkpointer=checkpointer)
        config = {"configurable": {"thread_id": "chroma-lost"}}
        out = agent.invoke({"messages": [HumanMessage("Where is my order ORD-7003?")]}, config)
        assert out["stack"][-1]["workflow"] == "track_order"
    finally:
        _stop(proc)  # the server is gone
        log.close()
    # the running conversation goes on, a search for another workflow included
    out = agent.invoke({"messages": [HumanMessage("Book a table at Casa Fiorella for 2 on 2027-03-09 at 19:00")]},
                       config)
    assert out["stack"][-1]["workflow"] == "book_table" and out["messages"][-1].content.strip()
    # a configuration that must reach the server now: a named error, not a connection traceback
    clear_cache()
    clear_resources()
    with pytest.raises(StoreUnavailableError, match=f"chroma_url {url}: the Chroma server is not answering"):
        get_resources(ctx).retriever  # noqa: B018
    index = subprocess.run([sys.executable, "-m", "graph.cli", "index", str(ROOT / "workflows" / "library")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": str(ROOT), "FLOWDESK_CHROMA_URL": url,
                                "FLOWDESK_STORE_DIR": store})
    assert index.returncode == 2 and "the Chroma server is not answering" in index.stderr, index.stderr[-2000:]
    assert "Traceback" not in index.stderr
