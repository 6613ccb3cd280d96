"""SIGKILL at every node boundary of a turn with an irreversible tool (pytest -m faults).

Runs tests/fault_kill_server.py: real processes run the booking conversation on a SQLite checkpointer
and die by SIGKILL at each boundary of the booking turn (every node update and checkpoint, across the
turn and its confirmation), inside the tool before and after it commits, and at random moments; each
is recovered as the README says (or by the next message alone).  Exactly one booking per trial, the
user told once (one mention of its reference), no booking made twice.

CI variant: every boundary + the tool points + a few random moments (about 40 kills); the ``slow``
variant delivers at least 100.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_store

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.faults


def run_kills(agent_context, tmp_path: Path, kills: int, timeout: int) -> dict:
    store = copy_store(agent_context, tmp_path / "store")
    out = tmp_path / "kills.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "fault_kill_server.py"), "--dir",
                           str(tmp_path / "work"), "--store", store, "--kills", str(kills), "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    print("kill suite:", json.dumps(report["summary"]))
    bad = [r for r in report["results"] if not r.get("recovery_ok")]
    assert not bad, bad[:3]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return report["summary"]


def check(summary: dict, kills: int) -> None:
    assert summary["kills"] >= kills
    assert summary["boundaries"] >= 20  # the booking turn and its confirmation
    assert summary["duplicate_side_effects"] == 0
    assert summary["missing_side_effects"] == 0
    assert summary["told_wrong"] == 0
    assert summary["reported_by_next_message"] >= 1  # the report of a call the state lost was exercised
    assert summary["failures"] == 0


def test_kill_at_every_boundary_books_once(agent_context, tmp_path):
    summary = run_kills(agent_context, tmp_path, kills=40, timeout=600)
    check(summary, 40)


@pytest.mark.slow
def test_kill_100_times_books_once(agent_context, tmp_path):
    summary = run_kills(agent_context, tmp_path, kills=100, timeout=1200)
    check(summary, 100)
