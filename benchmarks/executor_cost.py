"""The learned executor's per-turn cost as a ratio to the interpreter's, on STAR dev turns (issue 14's target: 2x).

Each turn is replayed as ``flowdesk eval next-action`` replays it (``evals.next_action.evaluate_dialogue``: the
interpreter's ``decide``, then the learned policy's ``choice`` from the same state; CPU time of the thread, so
waits for a shared core do not count) and the ratio is (interpreter + ranker) / interpreter, both measured in
the same run.  With ``--baseline DIR`` (another checkout, e.g. ``git archive main | tar -x -C DIR``) the same
sample is timed with that code too, the two runs alternating ``--rounds`` times, so a busy machine weighs on
both alike; the report gives each round's ratios and their medians.  No timing is asserted anywhere.

    .venv/bin/python benchmarks/executor_cost.py --data ../shared/data --every 10 [--baseline DIR --rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(data: str, every: int, model: str, code: Path = ROOT) -> dict:
    """One timed pass over the sample in this process (``code``'s checkout)."""
    import tempfile

    sys.path.insert(0, str(code))
    from dialogue.execution.policy_learned import load_policy
    from evals.next_action import evaluate_dialogue, iter_dialogues, star_dir
    from workflows.importers.star import import_star
    from workflows.library import load_library

    root = star_dir(Path(data))
    library_dir = Path(tempfile.mkdtemp(prefix="flowdesk-star-"))
    import_star(root, library_dir)
    library = load_library(library_dir)
    policy = load_policy(model)
    turns = []
    for d in iter_dialogues(root / "dialogues.jsonl.gz", "dev", 0, every):
        turns.extend(evaluate_dialogue(d, library, policy=policy))
    interp = sum(t["cost"] for t in turns) / len(turns)
    learned = sum(t["learned_cost"] for t in turns) / len(turns)
    return {"turns": len(turns), "interpreter_ms": round(1000 * interp, 4), "learned_ms": round(1000 * learned, 4),
            "ratio": round(learned / interp, 4)}


def run_in(code: Path, args: argparse.Namespace) -> dict:
    """``measure`` in a fresh process running ``code``'s checkout (this script's copy of ``measure``)."""
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, __file__, "--data", args.data, "--every", str(args.every),
                          "--model", args.model, "--code", str(code), "--one"],
                         env=env, cwd=code, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("FLOWDESK_DATA") or str(ROOT / ".." / "shared" / "data"))
    ap.add_argument("--every", type=int, default=10, help="every k-th dev dialogue (10: 2,538 turns)")
    ap.add_argument("--model", default="auto", help="executor policy spec (auto: the bundled model)")
    ap.add_argument("--baseline", default="", help="another checkout to time on the same sample")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--code", default="", help=argparse.SUPPRESS)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.data = str(Path(args.data).resolve())  # the children run in their checkout's directory
    if args.one:  # a child: the checkout ``--code`` on the path, one pass
        print(json.dumps(measure(args.data, args.every, args.model, Path(args.code or ROOT))))
        return
    runs: dict[str, list[dict]] = {"this": []}
    if args.baseline:
        runs["baseline"] = []
    for _ in range(args.rounds if args.baseline else 1):
        for name in runs:
            runs[name].append(run_in(ROOT if name == "this" else Path(args.baseline).resolve(), args))
            print(name, runs[name][-1], flush=True)
    print(json.dumps({name: {"median_ratio": statistics.median(r["ratio"] for r in rs), "runs": rs}
                      for name, rs in runs.items()}, indent=1))


if __name__ == "__main__":
    main()
