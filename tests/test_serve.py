"""``flowdesk serve`` (graph/serve.py): threads survive a SIGKILL of the server, a busy port is an
error (exit 2, no traceback, no silent move), SIGTERM stops the whole process group.

Starts the real LangGraph API server on a free 127.0.0.1 port, drives it with the SDK, and stops
only the processes it started, by PID / process group."""

from __future__ import annotations

from graph.state import active_workflow

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import copy_store

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(workdir: Path, port: int, env: dict, checkpoint: str) -> subprocess.Popen:
    # Its own session: the test can signal exactly this process group and nothing else.
    return subprocess.Popen([sys.executable, "-m", "graph.cli", "serve", "--port", str(port),
                             "--checkpoint", checkpoint],
                            cwd=workdir, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_ok(port: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    import urllib.request

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}: {proc.stdout.read()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ok", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"server on port {port} did not answer /ok within {timeout:.0f} s")


def _port_released(port: int, timeout: float = 10.0) -> bool:
    from graph.serve import port_free

    deadline = time.time() + timeout
    while time.time() < deadline:
        if port_free("127.0.0.1", port):
            return True
        time.sleep(0.2)
    return False


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


@pytest.fixture(params=["sqlite", "postgres"])
def checkpoint_store(request, tmp_path):
    """Where the served threads live: the default SQLite file, or a throw-away PostgreSQL server
    (skipped, with the reason, when no server binaries are installed)."""
    if request.param == "sqlite":
        yield str(tmp_path / "srv" / "checkpoints.sqlite")
        return
    from pgcluster import PgCluster

    cluster = PgCluster.create()
    try:
        yield cluster.url
    finally:
        cluster.close()


@pytest.fixture
def served(tmp_path, agent_context, checkpoint_store):
    workdir = tmp_path / "srv"
    workdir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLOWDESK_STORE_DIR": copy_store(agent_context, workdir / "store"),
           "FLOWDESK_DB_PATH": str(workdir / "demo.sqlite"), "LANGGRAPH_NO_VERSION_CHECK": "true"}
    env.pop("FLOWDESK_CHECKPOINT_URL", None)
    started: list[subprocess.Popen] = []

    def start(port: int) -> subprocess.Popen:
        proc = _start(workdir, port, env, checkpoint_store)
        started.append(proc)
        return proc

    yield workdir, start
    for proc in started:  # only what this test started
        if proc.poll() is None:
            _kill_group(proc, signal.SIGKILL)
            proc.wait(timeout=10)


def test_threads_survive_sigkill_and_the_port_is_never_moved(served):
    from langgraph_sdk import get_sync_client

    workdir, start = served
    port = _free_port()
    server = start(port)
    _wait_ok(port, server)
    client = get_sync_client(url=f"http://127.0.0.1:{port}")
    thread = client.threads.create()["thread_id"]
    out = client.runs.wait(thread, "agent", input={"messages": [{"role": "user", "content": "Where is my order ORD-7003?"}]})
    assert len(out["messages"]) == 2 and out["messages"][-1]["type"] == "ai"

    # A second server on the same port: a named error and exit 2, not another port, not a traceback.
    busy = subprocess.run([sys.executable, "-m", "graph.cli", "serve", "--port", str(port)], cwd=workdir,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert busy.returncode == 2, busy.stderr
    assert f"port {port} on 127.0.0.1 is in use" in busy.stderr and "Traceback" not in busy.stderr

    # No grace period: the kill lands right after the answer, and right after a second thread was
    # created (the runtime's own timer flush would have lost both; graph/served_threads.py writes through).
    last = client.threads.create()["thread_id"]
    client.runs.wait(last, "agent", input={"messages": [{"role": "user", "content": "I want to book a table"}]})
    fresh = client.threads.create(metadata={"who": "created just before the kill"})["thread_id"]
    _kill_group(server, signal.SIGKILL)  # the supervisor dies at once; its server child with it
    server.wait(timeout=10)
    assert _port_released(port), "a server process outlived `flowdesk serve` and still holds the port"

    again = start(port)
    _wait_ok(port, again)
    assert client.threads.get(fresh)["metadata"]["who"] == "created just before the kill"
    assert {thread, last, fresh} <= {t["thread_id"] for t in client.threads.search(limit=100)}
    assert client.threads.get(last)["status"] == "idle"  # its finished run is not replayed on restart
    assert [m["type"] for m in client.threads.get_state(last)["values"]["messages"]] == ["human", "ai"]
    state = client.threads.get_state(thread)
    assert [m["type"] for m in state["values"]["messages"]] == ["human", "ai"]
    assert active_workflow(state["values"]) == "track_order"
    # ... and the conversation goes on from there
    out = client.runs.wait(thread, "agent", input={"messages": [{"role": "user", "content": "it's for ORD-7003"}]})
    assert len(out["messages"]) >= 4

    _kill_group(again, signal.SIGTERM)  # SIGTERM: the whole group stops, cleanly
    assert again.wait(timeout=30) == 0
    assert _port_released(port)
