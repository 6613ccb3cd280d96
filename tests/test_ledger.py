"""The tool-call ledger (memory/ledger.py): begin/complete/pending semantics, redaction, location
beside the checkpoints, exactly one winner per key across two processes, a record that survives a
SIGKILL, and the same API on PostgreSQL (marker server)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memory.ledger import LedgerError, call_key, ledger_location, open_ledger
from workflows.sanitize import REDACTED, register_secret

ROOT = Path(__file__).resolve().parent.parent


def exercise(ledger) -> None:
    key = call_key("t1", 3, "call-1")
    assert key == "t1:3:call-1"
    assert ledger.begin(key, "book_table", {"restaurant": "Lumi", "party_size": 2}) is None  # new: run it
    again = ledger.begin(key, "book_table", {"restaurant": "Lumi", "party_size": 2})
    assert again is not None and again.status == "pending" and again.unknown_outcome and again.thread == "t1"
    assert [r.key for r in ledger.pending("t1")] == [key]
    ledger.complete(key, {"booking_id": "B-1012"})
    done = ledger.begin(key, "book_table", {})
    assert done.status == "done" and done.result == {"booking_id": "B-1012"} and done.finished_at >= done.started_at
    ledger.complete(key, {"booking_id": "B-9999"})  # the first outcome stays
    assert ledger.get(key).result == {"booking_id": "B-1012"}
    assert ledger.pending("t1") == []
    other = call_key("t1", 4, "call-2")
    assert ledger.begin(other, "refund", {"order": "ORD-7001"}) is None
    ledger.complete(other, {"error": "not refundable"}, ok=False)
    assert ledger.get(other).status == "failed"
    assert [r.tool for r in ledger.records("t1")] == ["book_table", "refund"]
    assert ledger.records("t2") == [] and ledger.get("nope") is None
    with pytest.raises(LedgerError, match="without begin"):
        ledger.complete("never:1:x", {})


def test_sqlite_ledger_api(tmp_path):
    with open_ledger(tmp_path / "ledger.sqlite") as ledger:
        exercise(ledger)
    with open_ledger(tmp_path / "ledger.sqlite") as reopened:  # durable
        assert reopened.get("t1:3:call-1").result == {"booking_id": "B-1012"}


def test_records_hold_redacted_args_and_results(tmp_path):
    register_secret("pw-5up3r-secret")
    with open_ledger(":memory:") as ledger:
        ledger.begin("t:1:c", "login", {"password": "hunter2", "note": "uses pw-5up3r-secret"})
        ledger.complete("t:1:c", {"token": "abc.def.ghi", "ok": True})
        rec = ledger.get("t:1:c")
    assert rec.args == {"password": REDACTED, "note": f"uses {REDACTED}"}
    assert rec.result == {"token": REDACTED, "ok": True}


def test_ledger_lives_beside_the_checkpoints(tmp_path, monkeypatch):
    monkeypatch.delenv("FLOWDESK_CHECKPOINT_URL", raising=False)
    assert ledger_location(tmp_path / "cp.sqlite") == str(tmp_path / "ledger.sqlite")
    assert ledger_location(None) == str(Path(".flowdesk") / "ledger.sqlite")
    assert ledger_location(":memory:") == ":memory:"
    assert ledger_location("postgresql://u@h/db") == "postgresql://u@h/db"
    with pytest.raises(LedgerError, match="is a directory"):
        open_ledger(tmp_path)
    with pytest.raises(LedgerError, match="use a file path or a postgres"):
        open_ledger("http://user:pw@example/x")


_RACER = textwrap.dedent("""
    import pathlib, sys, time
    from memory.ledger import open_ledger
    path, name, n, barrier = sys.argv[1], sys.argv[2], int(sys.argv[3]), pathlib.Path(sys.argv[4])
    led = open_ledger(path)
    (barrier / name).touch()  # both start inserting once both are ready, however slow the imports
    while not all((barrier / who).exists() for who in ("a", "b")):
        time.sleep(0.001)
    order = range(n) if name == "a" else range(n - 1, -1, -1)  # they meet in the middle, then collide
    won = []
    for k in order:
        if led.begin(f"race:{k}:c", "book", {"by": name}) is None:
            won.append(k)
        time.sleep(0.002)  # let the other writer in (SQLite's busy handler would otherwise starve it)
    for k in won:
        led.complete(f"race:{k}:c", {"by": name})
    print(",".join(map(str, won)))
""")


def _python(code: str, *args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def test_two_processes_never_both_win_a_key(tmp_path):
    path, n = str(tmp_path / "ledger.sqlite"), 200
    open_ledger(path).close()
    (tmp_path / "barrier").mkdir()
    procs = [_python(_RACER, path, name, str(n), str(tmp_path / "barrier")) for name in ("a", "b")]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append({int(k) for k in out.strip().split(",") if k})
    a, b = outs
    assert not (a & b) and (a | b) == set(range(n)), "every key won by exactly one process"
    assert a and b, "both processes took part"
    with open_ledger(path) as led:
        assert led.pending("race") == []
        assert all(r.result["by"] == r.args["by"] for r in led.records("race"))


_KILLED = textwrap.dedent("""
    import sys, time
    from memory.ledger import open_ledger
    led = open_ledger(sys.argv[1])
    led.begin("alice:7:call-9", "book_table", {"restaurant": "Lumi"})
    print("begun", flush=True)
    time.sleep(60)  # the tool "runs" here when the process is killed
""")


def test_a_call_killed_mid_way_is_pending_for_the_next_process(tmp_path):
    path = str(tmp_path / "ledger.sqlite")
    proc = _python(_KILLED, path)
    try:
        assert proc.stdout.readline().strip() == "begun"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    with open_ledger(path) as led:
        (rec,) = led.pending("alice")
        assert (rec.key, rec.tool, rec.status) == ("alice:7:call-9", "book_table", "pending")
        assert led.begin("alice:7:call-9", "book_table", {}).unknown_outcome  # a replay must not run it


from test_scaleout import postgres_url  # noqa: E402,F401  (module-scoped throw-away PostgreSQL)


@pytest.mark.server
def test_postgres_ledger_api_and_two_processes(postgres_url, tmp_path):  # noqa: F811
    with open_ledger(postgres_url) as ledger:
        ledger._execute("DELETE FROM flowdesk_ledger")
        exercise(ledger)
    (tmp_path / "barrier").mkdir()
    procs = [_python(_RACER, postgres_url, name, "100", str(tmp_path / "barrier")) for name in ("a", "b")]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append({int(k) for k in out.strip().split(",") if k})
    assert not (outs[0] & outs[1]) and (outs[0] | outs[1]) == set(range(100))
