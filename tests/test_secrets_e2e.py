"""No secret in a checkpoint, ledger, log or trace, end to end (pytest -m faults).

A copy of the demo library binds ``track_order`` to a local HTTP service with the key as a
``${env:...}`` reference in a header and in the URL's query.  The service answers one order with the
key echoed in its data and another with a 401 that repeats the key and the URL (as real providers do).
Both conversations run through the compiled graph on a SQLite checkpointer; afterwards the key's bytes
appear nowhere the agent wrote: the checkpoint database, the ledger and the event log beside it, the
turn traces, the replies and the log records.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from tests.local_http import JsonHandler, serving

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-live-7Hq2x9Lw4Zt8Rv1N"
pytestmark = pytest.mark.faults


class _Carrier(JsonHandler):
    def do_POST(self):  # noqa: N802
        body = self.body()
        key = self.headers.get("X-Api-Key")
        if body.get("order_id") == "ORD-7003":
            self.send_json(401, {"detail": f"invalid api key {key} for {self.path}"})
        else:
            self.send_json(200, {"status": "shipped", "carrier": f"Parcelo (account {key})",
                                 "tracking_number": "TRK-1", "estimated_delivery": "2026-12-01"})


@pytest.fixture
def carrier_port():
    with serving(_Carrier) as port:
        yield port


def test_an_api_key_never_reaches_checkpoints_ledger_logs_or_traces(tmp_path, carrier_port, monkeypatch, caplog):
    from graph.agent import build_agent
    from graph.chat import run_turn
    from graph.checkpoint import open_checkpointer
    from graph.context import Context
    from workflows.demo.db import ensure_db

    library = tmp_path / "library"
    shutil.copytree(ROOT / "workflows" / "library", library)
    spec = library / "retail" / "order_support" / "track_order.yaml"
    spec.write_text(spec.read_text().replace(
        'binding: {python: "workflows.demo.tools:track_order"}',
        f'binding: {{http: {{url: "http://127.0.0.1:{carrier_port}/track?api_key=${{env:CARRIER_KEY}}", '
        f'headers: {{X-Api-Key: "${{env:CARRIER_KEY}}"}}}}}}'))
    monkeypatch.setenv("CARRIER_KEY", KEY)
    monkeypatch.setenv("FLOWDESK_HTTP_HOSTS", f"127.0.0.1:{carrier_port}")
    ensure_db(tmp_path / "demo.sqlite")
    ctx = Context(library=str(library), store_dir=str(tmp_path / "store"), db_path=str(tmp_path / "demo.sqlite"))

    traces = []
    caplog.set_level(logging.DEBUG)
    with open_checkpointer(tmp_path / "ckpt" / "checkpoints.sqlite") as saver:
        agent = build_agent(ctx, checkpointer=saver)
        for thread, order in (("ok", "ORD-7001"), ("denied", "ORD-7003")):
            turn = run_turn(agent, thread, f"Where is my order {order}? My email is ann@example.com",
                            context=ctx, on_interrupt=lambda _p: "yes")
            traces.append(turn)
    ok, denied = traces
    assert ok.tool_calls and ok.tool_calls[0]["name"] == "track_order", ok
    assert "Parcelo" in ok.reply  # the service was reached and its data used
    assert denied.tool_calls and "401" in json.dumps(denied.tool_calls, default=str), denied

    written = {p: p.read_bytes() for p in (tmp_path / "ckpt").rglob("*") if p.is_file()}
    assert {"checkpoints.sqlite", "events.sqlite"} <= {p.name for p in written}, sorted(p.name for p in written)
    for path, data in written.items():
        assert KEY.encode() not in data, f"the key is in {path}"
    assert KEY not in json.dumps([t.__dict__ for t in traces], default=str)
    assert KEY not in caplog.text
