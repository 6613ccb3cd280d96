"""The Studio/dev-server path: ``langgraph dev`` serves ``langgraph.json`` as is, the SDK drives it
(assistants, threads, wait, stream, state, interrupt + resume), and a clean restart keeps threads."""

from __future__ import annotations

from graph.state import active_workflow, interrupted_workflows

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LANGGRAPH = ROOT / ".venv" / "bin" / "langgraph"
pytestmark = pytest.mark.server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DevServer:
    """``langgraph dev`` in a temp directory (its ``.langgraph_api`` state lives there), stopped by PID."""

    def __init__(self, workdir: Path, env: dict):
        self.workdir, self.env, self.proc, self.port = workdir, env, None, None

    def start(self, timeout: float = 120) -> str:
        self.port = _free_port()
        log = open(self.workdir / f"server-{self.port}.log", "w")
        self.proc = subprocess.Popen(
            [str(LANGGRAPH), "dev", "--port", str(self.port), "--host", "127.0.0.1", "--no-browser",
             "--no-reload", "--config", str(self.workdir / "langgraph.json")],
            cwd=self.workdir, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"langgraph dev exited: {self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/ok", timeout=2) as resp:
                    if resp.status == 200:
                        return url
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"langgraph dev did not answer /ok in {timeout}s: {self.log()[-3000:]}")

    def log(self) -> str:
        return (self.workdir / f"server-{self.port}.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # clean shutdown writes .langgraph_api
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def server(tmp_path, agent_context):
    from conftest import copy_store

    config = json.loads((ROOT / "langgraph.json").read_text())
    # The repo's langgraph.json unchanged, but with absolute paths so the server can run elsewhere.
    config["dependencies"] = [str(ROOT)]
    config["graphs"] = {k: str(ROOT / v.lstrip("./")) if v.startswith("./") else v
                        for k, v in config["graphs"].items()}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    env = dict(os.environ, LANGGRAPH_CLI_NO_ANALYTICS="1", LANGGRAPH_NO_VERSION_CHECK="true",
               FLOWDESK_STORE_DIR=copy_store(agent_context, tmp_path / "store"),  # built once per session
               FLOWDESK_DB_PATH=str(tmp_path / "demo.sqlite"),
               ANONYMIZED_TELEMETRY="False", ORT_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE="1")
    srv = DevServer(tmp_path, env)
    yield srv
    srv.stop()


def _msg(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def _last_ai(values: dict) -> str:
    ai = [m for m in values["messages"] if m["type"] == "ai" and m.get("content")]
    return ai[-1]["content"] if ai else ""


def test_dev_server_end_to_end(server):
    from langgraph_sdk import get_sync_client

    url = server.start()
    client = get_sync_client(url=url)
    assistants = client.assistants.search(graph_id="agent")
    assert assistants and assistants[0]["graph_id"] == "agent"
    thread = client.threads.create()
    tid = thread["thread_id"]

    out = client.runs.wait(tid, "agent", input=_msg("Hi! Can you find me an Italian restaurant in the old town?"))
    assert active_workflow(out) == "search_restaurants" and "Trattoria Lumi" in _last_ai(out)

    events = list(client.runs.stream(
        tid, "agent", input=_msg("I want to reserve a table at Casa Fiorella for 2 people on 2026-12-10 at 19:00"),
        stream_mode="updates"))
    nodes = {k for e in events if e.event == "updates" for k in e.data}
    assert {"detector", "router", "retriever", "executor", "post_controller", "tools", "respond"} <= nodes
    assert active_workflow(client.threads.get_state(tid)["values"]) == "book_table"

    # Give the name: the agent reaches the irreversible booking and interrupts for confirmation.
    client.runs.wait(tid, "agent", input=_msg("Ada Lovelace"))
    state = client.threads.get_state(tid)
    assert state["next"] == ["tools"], state["next"]
    question = state["tasks"][0]["interrupts"][0]["value"]
    assert question["kind"] == "confirm" and question["api"] == "book"

    out = client.runs.wait(tid, "agent", command={"resume": "yes"})
    assert "book" in [c["name"] for m in out["messages"] if m["type"] == "ai" for c in m.get("tool_calls") or []]
    before = client.threads.get_state(tid)
    assert not before["next"]

    server.stop()  # SIGTERM: the dev server persists its threads on clean shutdown
    client = get_sync_client(url=server.start())
    after = client.threads.get_state(tid)
    assert active_workflow(after["values"]) == active_workflow(before["values"])
    assert len(after["values"]["messages"]) == len(before["values"]["messages"])
    out = client.runs.wait(tid, "agent", input=_msg("thanks!"))
    assert len(out["messages"]) > len(before["values"]["messages"])
