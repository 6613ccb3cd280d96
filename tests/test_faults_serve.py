"""50 concurrent threads on `flowdesk serve` (pytest -m faults): no cross-thread data, no errors, p95
per turn printed beside the single-thread figure.  Runs benchmarks/serve_concurrency.py, which starts
the server on a free 127.0.0.1 port and stops only the process group it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_store

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.faults, pytest.mark.server]


def test_50_concurrent_threads_do_not_leak(agent_context, tmp_path):
    store = copy_store(agent_context, tmp_path / "store")
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serve_concurrency.py"), "--threads", "50",
                           "--single", "3", "--store", store, "--out", str(out)],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=900)
    assert (out / "metrics.json").exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
    summary = json.loads((out / "metrics.json").read_text())["summary"]
    print("serve concurrency:", json.dumps(summary))
    assert summary["cross_thread_leaks"] == 0
    assert summary["errors"] == 0 and summary["booked"] == "50/50"
    assert summary["p95_ms_single"] > 0 and summary["p95_ms_50_threads"] > 0
    assert (out / "report.md").exists() and (out / "latency.png").exists()
