"""Per-turn latency (p50/p95) and peak RSS of the offline agent, end to end through the graph.

Two workloads, both through ``graph.agent.build_agent`` with a SQLite checkpointer:
  * ``demo`` — the scripted ``flowdesk demo`` conversation on the bundled library (repeated ``--repeat`` times
    on fresh threads after a warm-up run that builds the index);
  * ``sgd`` — the user turns of the first ``--sgd N`` SGD dev dialogues (data from ``--data`` /
    FLOWDESK_DATA) replayed on the SGD dev library imported to PDL (simulated tools; interrupts answered
    "yes").  The agent's replies differ from SGD's system turns, so this measures cost, not quality.

    .venv/bin/python benchmarks/agent_latency.py --repeat 3 [--sgd 200 --data ../shared/data] [--json out.json]

Index building is reported separately (first turn); latency percentiles are over the later turns.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

for _k, _v in (("ANONYMIZED_TELEMETRY", "False"), ("ORT_DISABLE_TELEMETRY", "1"), ("HF_HUB_OFFLINE", "1"),
               ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_k, _v)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402

from graph.agent import build_agent  # noqa: E402
from graph.chat import run_turn  # noqa: E402
from graph.checkpoint import open_checkpointer  # noqa: E402
from graph.context import Context  # noqa: E402
from graph.demo import peak_rss_mb, percentile, run_script, script  # noqa: E402


def summary(name: str, lat: list[float], extra: dict | None = None) -> dict:
    return {"workload": name, "turns": len(lat), "p50_ms": round(percentile(lat, .5), 1),
            "p95_ms": round(percentile(lat, .95), 1), "mean_ms": round(sum(lat) / max(len(lat), 1), 1),
            **(extra or {})}


def bench_demo(root: Path, repeat: int) -> dict:
    quiet = Console(file=open(os.devnull, "w"))
    t0 = time.perf_counter()
    results, failed = run_script(script(), root / "warm", quiet)  # builds the index
    warm_first = results[0].latency_ms
    lat: list[float] = []
    for i in range(repeat):
        run_dir = root / f"run{i}"
        run_dir.mkdir()
        # reuse the built store: a copy per run, since the demo database must start fresh
        import shutil

        shutil.copytree(root / "warm" / "store", run_dir / "store", ignore=shutil.ignore_patterns(".lock"))
        from memory.retrieval import clear_cache

        clear_cache()
        res, f = run_script(script(), run_dir, quiet)
        failed += f
        lat += [r.latency_ms for r in res[1:]]  # the first turn of each run re-opens the store
    return summary("demo", lat, {"first_turn_with_index_build_ms": round(warm_first, 1), "failed_steps": failed,
                                 "wall_s": round(time.perf_counter() - t0, 1)})


def bench_sgd(root: Path, data: Path, n: int) -> dict:
    from evals.datasets import sgd

    lib = sgd.library(data, root / "sgd_library", "dev")
    dialogues = sgd.load(data, "dev", limit=n)
    ctx = Context(library=str(lib), store_dir=str(root / "sgd_store"), db_path=str(root / "sgd.sqlite"))
    from workflows.library import load_library

    n_workflows = len(load_library(lib))
    t0 = time.perf_counter()
    lat: list[float] = []
    first = None
    with open_checkpointer(root / "sgd_checkpoints.sqlite") as saver:
        graph = build_agent(ctx, checkpointer=saver)
        for dlg in dialogues:
            thread = f"sgd-{dlg.id}-{uuid.uuid4().hex[:4]}"
            for turn in dlg.user_turns:
                if not turn.text.strip():
                    continue
                r = run_turn(graph, thread, turn.text, context=ctx, on_interrupt=lambda p: "yes")
                if first is None:
                    first = r.latency_ms
                else:
                    lat.append(r.latency_ms)
    return summary("sgd-dev", lat, {"dialogues": len(dialogues), "first_turn_with_index_build_ms": round(first or 0, 1),
                                    "workflows": n_workflows, "wall_s": round(time.perf_counter() - t0, 1)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sgd", type=int, default=0, help="replay this many SGD dev dialogues (0 = skip)")
    ap.add_argument("--data", default=os.environ.get("FLOWDESK_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")))
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    out = []
    with tempfile.TemporaryDirectory(prefix="flowdesk-bench-") as tmp:
        root = Path(tmp)
        out.append(bench_demo(root, args.repeat))
        print(json.dumps(out[-1]), flush=True)
        if args.sgd:
            if not (Path(args.data) / "sgd").is_dir():
                print(f"SGD data not found under {args.data}/sgd; skipping the SGD replay", file=sys.stderr)
            else:
                out.append(bench_sgd(root, Path(args.data), args.sgd))
                print(json.dumps(out[-1]), flush=True)
    report = {"results": out, "peak_rss_mb": round(peak_rss_mb(), 1)}
    print(json.dumps({"peak_rss_mb": report["peak_rss_mb"]}))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 1 if out[0]["failed_steps"] else 0


if __name__ == "__main__":
    sys.exit(main())
