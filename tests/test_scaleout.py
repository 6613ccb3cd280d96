"""The scale-out path against real servers started here: Chroma in client/server mode (``chroma run``
on 127.0.0.1) for the retrieval store, and a PostgreSQL server (Debian's binaries, ``initdb`` +
``pg_ctl``) for the checkpointer.  Each server gets a free port and a temp directory and is
stopped by its PID; the tests skip with a clear message when a binary is missing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from graph.context import Context
from pgcluster import PgCluster
from memory.retrieval import build_retriever, library_namespace
from memory.store import WorkflowStore, chroma_http_client
from workflows.library import load_library

LIB = Path(__file__).parent / "fixtures" / "retrieval_library"

pytestmark = pytest.mark.server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- Chroma server -------------------------------------------------------------------------------

def start_chroma(data: Path, log, port: int | None = None) -> tuple[subprocess.Popen, str]:
    """A real `chroma run` on 127.0.0.1 (a free port unless given), answering its heartbeat (skips when
    not installed)."""
    exe = Path(sys.executable).with_name("chroma")
    if not exe.exists():
        pytest.skip(f"no `chroma` executable next to {sys.executable}")
    port = port or _free_port()
    env = dict(os.environ, ANONYMIZED_TELEMETRY="False")
    proc = subprocess.Popen([str(exe), "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"chroma run exited with {proc.returncode}:\n{log.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            pass
        if time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"chroma run on {url} did not answer its heartbeat within 60 s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory):
    data = tmp_path_factory.mktemp("chroma-server")
    log = open(data.parent / "chroma-server.log", "w+")
    proc = None
    try:
        proc, url = start_chroma(data, log)
        yield {"url": url, "data": data}
    finally:
        if proc is not None:
            _stop(proc)
        log.close()


def test_context_reads_chroma_url_from_env(monkeypatch):
    monkeypatch.setenv("FLOWDESK_CHROMA_URL", "http://127.0.0.1:9")
    assert Context().chroma_url == "http://127.0.0.1:9"
    with pytest.raises(ValueError, match="expected http://host:port"):
        chroma_http_client("ftp://x")


def test_store_indexes_and_searches_through_a_chroma_server(chroma_server, tmp_path):
    url = chroma_server["url"]
    library = load_library(LIB)
    ctx = Context(library=str(LIB), store_dir=str(tmp_path / "local"), chroma_url=url, top_k_upper=1)
    retr = build_retriever(library, ctx)
    assert type(retr.store.client).__name__ != "PersistentClient"
    # The collections live in the server's directory; locally only the embedding cache, no lock.
    assert not (tmp_path / "local" / "chroma").exists() and not (tmp_path / "local" / ".lock").exists()
    assert (tmp_path / "local" / "embeddings.sqlite").exists()
    assert any(chroma_server["data"].iterdir())
    assert retr.store.count("workflows") == 40  # 10 workflows x 4 representations

    for query, gold in {"my card got stolen yesterday": "block_card",
                        "I need a plane ticket to Berlin next Friday": "book_flight",
                        "I forgot my password and can't log in": "reset_password"}.items():
        for retriever in ("dense", "hybrid"):
            got = retr.search(query, retriever=retriever, strategy="D>R>W")
            assert got[0]["workflow"] == gold, (query, retriever, [c["workflow"] for c in got])
    vec = retr.store.embedder.embed(["cancel my hotel room booking"])[0]
    hits = retr.store.chroma_query("workflows", vec, 3, where={"format": "text"})  # the server's HNSW index
    assert hits[0][0]["workflow"] == "cancel_hotel_reservation"

    # Scale-out: a second client (another worker, another store_dir) shares the same index while
    # the first is still open — no lock, and nothing is re-embedded into the server.
    with WorkflowStore(tmp_path / "other", namespace=library_namespace(library), chroma_url=url) as second:
        rep = second.sync(library)
        assert (rep.added, rep.updated, rep.removed, rep.unchanged) == (0, 0, 0, 47)
        assert second.matrix("workflows", "text").vectors.shape == (10, second.embedder.dim)


# --- PostgreSQL server ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def postgres_url():
    cluster = PgCluster.create()
    try:
        yield cluster.url
    finally:
        cluster.close()


def test_postgres_checkpointer_resumes_the_conversation(agent_context, postgres_url):
    """Two turns through a Postgres checkpointer, close, reopen with a new one: the same thread goes
    on with its active workflow, stack and slots intact."""
    from graph.checkpoint import open_checkpointer
    from test_persistence import check_resume_across_checkpointers

    with open_checkpointer(postgres_url) as saver:
        assert type(saver).__name__ == "PostgresSaver"
    check_resume_across_checkpointers(postgres_url, "pg-resume", "2026-12-23", agent_context)
