"""``flowdesk eval experience``: does induced experience repair an under-specified library?

A controlled experiment where the truth is known.  The demo desk's tools enforce real rules (an
``auth_token`` only ``verify_identity`` issues, a free slot to book, a refundable order to refund).  The
**under-specified library** is the demo desk with, in every workflow, the APIs' ``precondition`` lists
removed and the procedure steps removed whose result feeds another API's argument (the identity checks
issuing the token) — a PDL as a business user writes it.  The truth is the prerequisite closure the
complete PDL declares and the under-specified one lacks (API targets).

Protocol (goals from ``evals.session_goals``; the simulated user and scoring of ``evals.sessions``):

1. The goals are split per workflow into train and test (``--train-share``, seeded).
2. Train logs: the train goals are played under every out-of-workflow category on the complete library
   (sessions of a desk that knew the procedure) and on the under-specified one (its failures give the
   contrast), experience off, into one event log (``memory.events``).
3. Induction from the train log only (``memory.induce``, the same code as ``flowdesk induce``) into the
   under-specified library's experience store; time and peak memory are measured and reported per
   1,000 sessions.
4. The test goals are played on the under-specified library without and with experience, and on the
   complete library; each variant logs into its own event log, from which tool errors per session are
   counted: calls a tool failed plus tool calls a controller stopped because they could not run
   (``CANNOT_RUN``: a missing argument such as a token never obtained, an unmet precondition) — on the
   under-specified desk most such calls never reach the tool, the argument-schema check stops them.

Writes ``report.md``, ``metrics.json`` (``summary``: ``prereq_precision``, ``prereq_recall``,
``success_without``, ``success_with``, ``success_complete``, ``pass_k_with``,
``errors_per_session_without``, ``errors_per_session_with``) and ``experience.png``.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
import time
import tracemalloc
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
import yaml

VARIANTS = ("without", "with", "complete")


def _producers(doc: dict) -> set[str]:
    """APIs whose result feeds another API's argument and is no slot (the user cannot give it)."""
    slots = {s["name"] for s in doc.get("slots") or []}
    params = {p for a in doc.get("apis") or [] for p in (a.get("parameters") or {}).get("required") or []}
    return {a["name"] for a in doc.get("apis") or [] if set(a.get("returns") or []) & (params - slots)}


def underspecify(src: Path, dst: Path) -> Path:
    """Copy the library ``src`` to ``dst`` without API preconditions and without the producer steps."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("README.md", "__pycache__"))
    for path in sorted(dst.rglob("*.yaml")):
        if path.name.startswith("_"):
            continue
        doc = yaml.safe_load(path.read_text())
        drop = _producers(doc)
        for api in doc.get("apis") or []:
            api.pop("precondition", None)
        lines = [ln for ln in doc["procedure"].splitlines()
                 if not any(re.search(rf"\bAPI\.{re.escape(n)}\(", ln) for n in drop)]
        doc["procedure"] = "\n".join(lines) + "\n"
        path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120))
    return dst


def closure(library) -> set[tuple[str, str, str]]:
    """(workflow, API, node) for every node an API of the library needs first, transitively."""
    from dialogue.experience import declared

    return {(wf.name, api.name, d) for wf in library.workflows.values() for api in wf.apis for d in declared(wf, api.name)}


def split_goals(goals: list, share: float, seed: int) -> tuple[list, list]:
    """Per workflow, a seeded ``share`` of the goals for training, the rest for testing (a workflow with
    one goal trains only: nothing of it is tested that was learned from it)."""
    by: dict[str, list] = defaultdict(list)
    for g in goals:
        by[g.workflow].append(g)
    train, test = [], []
    for wf in sorted(by):
        gs = sorted(by[wf], key=lambda g: g.id)
        random.Random(f"{seed}:{wf}").shuffle(gs)
        n = max(1, min(len(gs) - 1, round(len(gs) * share))) if len(gs) > 1 else 1
        train += gs[:n]
        test += gs[n:]
    return train, test


# controllers that reject a tool call because it cannot run (a missing argument, an unmet precondition, no such
# node, a branch not taken) — not the guards against loops or long sessions (api_repetition, user_declined, ...)
CANNOT_RUN = ("argument_schema", "node_dependency", "experience_prerequisite", "unknown_node", "procedure_branch")


def tool_errors(log_path: Path) -> dict[str, Any]:
    """Tool errors from a variant's event log: calls the tool failed, and tool calls the controllers stopped
    because they could not run (``CANNOT_RUN``); ``by``: counts per "workflow / tool / kind", kind = ``error``
    (a first failure), ``repeat`` (the same call with the same arguments failed before in that workflow
    instance) or ``stopped: <controller>``."""
    from memory.events import iter_events

    failed = rejected = 0
    by: Counter = Counter()
    seen: set[tuple[str, str, str]] = set()
    for e in iter_events(log_path, ("tool_error", "verdict")) if log_path.exists() else ():
        if e.kind == "tool_error":
            failed += 1
            call = (e.frame, e.name, json.dumps(e.data.get("args") or {}, sort_keys=True, default=str))
            by[f"{e.workflow} / {e.name} / {'repeat' if call in seen else 'error'}"] += 1
            seen.add(call)
        elif e.data.get("proposal_kind") == "tool" and e.data.get("controller") in CANNOT_RUN:
            rejected += 1
            by[f"{e.workflow} / {e.name} / stopped: {e.data['controller']}"] += 1
    return {"failed": failed, "rejected": rejected, "total": failed + rejected,
            "by": dict(sorted(by.items(), key=lambda kv: (-kv[1], kv[0])))}


def prereq_scores(blocks, complete, under) -> dict[str, Any]:
    """Precision and recall of the induced prerequisites the under-specified PDL lacks, against the removed ones."""
    truth = closure(complete) - closure(under)
    have = closure(under)
    induced = {(b.workflow, b.action, p.requires) for b in blocks if b.kind == "action"
               for p in b.prerequisites if p.kind == "action"} - have
    tp = induced & truth
    return {"precision": round(len(tp) / len(induced), 4) if induced else 0.0,
            "recall": round(len(tp) / len(truth), 4) if truth else 1.0,
            "removed": len(truth), "induced": len(induced), "correct": len(tp),
            "false_positives": sorted("/".join(x) for x in induced - truth),
            "missed": sorted("/".join(x) for x in truth - induced)}


_REREAD = ("import json, sys\nfrom memory.store import WorkflowStore\n"
           "from memory.experience_store import ExperienceStore\n"
           "with WorkflowStore(sys.argv[1]) as ws:\n"
           "    blocks = ExperienceStore(ws.client, ws.embedder).blocks(sys.argv[2])\n"
           "    print(json.dumps([b.model_dump() for b in blocks]))")


def reread_in_new_process(store: Path, copy: Path, library: str, blocks: list) -> dict[str, Any]:
    """Experience survives a restart: a second Python process opens the store's persisted directory (a copy:
    a store directory belongs to one open process, this one) and reads the library's blocks back."""
    import subprocess
    import sys

    shutil.copytree(store, copy, ignore=shutil.ignore_patterns(".lock"), dirs_exist_ok=True)
    done = subprocess.run([sys.executable, "-c", _REREAD, str(copy), library], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[1])
    if done.returncode != 0:
        return {"ok": False, "error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    read = json.loads(done.stdout.strip().splitlines()[-1])
    wrote = sorted((b.model_dump() for b in blocks), key=lambda b: b["id"])
    return {"ok": read == wrote, "written": len(wrote), "read": len(read)}


def run_experience(out: str | Path, *, seeds: int = 2, categories=None, every: int = 1, train_share: float = 0.5,
                   seed: int = 0, work_dir: str | Path | None = None, progress=None) -> dict[str, Any]:
    from graph.context import Context
    from graph.resources import get_resources
    from memory.events import iter_events
    from memory.induce import KINDS, induce
    from workflows.demo.db import ensure_db
    from workflows.library import bundled_library_path, load_library

    from .session_goals import generate_goals
    from .sessions import run_eval

    out = Path(out)
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="flowdesk-experience-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    complete_dir = bundled_library_path()
    under_dir = underspecify(complete_dir, work / "library-under")
    complete, under = load_library(complete_dir), load_library(under_dir)
    pristine = ensure_db(work / "pristine.sqlite")
    goals = generate_goals(complete, pristine)[::max(1, every)]
    train, test = split_goals(goals, train_share, seed)
    setups = {"complete": (complete_dir, work / "complete", work / "store-complete"),
              "under": (under_dir, work / "under", work / "store-under")}

    def play(name: str, lib: str, goal_set: list, experience: bool) -> dict[str, Any]:
        lib_dir, wdir, store = setups[lib]
        ctx = Context(library=str(lib_dir), store_dir=str(store), experience=experience,
                      event_log=str(work / f"events-{name}.sqlite"))
        m = run_eval(work / "runs" / name, seeds=seeds, categories=categories, context=ctx, work_dir=wdir,
                     goal_source=lambda *_: goal_set, transcripts=False, progress=progress,
                     title=f"experience: {name}")
        return m

    runs = {"train-complete": play("train-complete", "complete", train, False),
            "train-under": play("train-under", "under", train, False)}
    train_sessions = sum(r["summary"]["sessions"] for r in runs.values())
    # induction from the train logs only (the code `flowdesk induce` runs), measured
    under_ctx = Context(library=str(under_dir), store_dir=str(setups["under"][2]),
                        db_path=str(setups["under"][1] / "session.sqlite"))
    res = get_resources(under_ctx)
    tracemalloc.start()
    t0 = time.perf_counter()
    # the train logs one after the other, streamed as `flowdesk induce` reads a log
    stream = (e for name in runs for e in iter_events(work / f"events-{name}.sqlite", KINDS))
    blocks, stats = induce(stream, res.library_key)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    upserted = res.experience.upsert(blocks)
    again = res.experience.upsert(blocks)  # incremental: inducing the same logs again changes nothing
    restart = reread_in_new_process(setups["under"][2], work / "store-restart", res.library_key, blocks)
    for name, lib, exp in (("without", "under", False), ("with", "under", True), ("complete", "complete", False)):
        runs[name] = play(name, lib, test, exp)
    errors = {v: tool_errors(work / f"events-{v}.sqlite") for v in VARIANTS}
    per = {v: round(errors[v]["total"] / max(1, runs[v]["summary"]["sessions"]), 4) for v in VARIANTS}
    scores = prereq_scores(blocks, complete, under)
    s = {v: runs[v]["summary"] for v in VARIANTS}
    summary = {"prereq_precision": scores["precision"], "prereq_recall": scores["recall"],
               "success_without": s["without"]["success"], "success_with": s["with"]["success"],
               "success_complete": s["complete"]["success"], "pass_k_with": s["with"]["pass_k"],
               "errors_per_session_without": per["without"], "errors_per_session_with": per["with"]}
    metrics = {
        "summary": summary,
        "variants": {v: {**{k: s[v][k] for k in ("success", "f_beta", "mmr", "te_ratio", "progress", "pass_k",
                                                  "sessions")}, "errors_per_session": per[v], "errors": errors[v],
                         "by_workflow": {w: b["success"] for w, b in runs[v]["by_workflow"].items()}}
                     for v in VARIANTS},
        "prerequisites": scores,
        "induction": {**stats, "blocks": len(blocks), "train_sessions": train_sessions,
                      "seconds": round(seconds, 3), "peak_mib": round(peak / 2 ** 20, 2),
                      "seconds_per_1000_sessions": round(seconds * 1000 / max(1, train_sessions), 3),
                      "peak_mib_per_1000_sessions": round(peak / 2 ** 20 * 1000 / max(1, train_sessions), 2),
                      "store_first": upserted, "store_again": again, "restart": restart},
        "setup": {"seeds": seeds, "every": every, "train_share": train_share, "seed": seed,
                  "categories": list(categories or []) or "all", "train_goals": [g.id for g in train],
                  "test_goals": [g.id for g in test]},
    }
    write_report(out, metrics)
    return metrics


def write_report(out: Path, metrics: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
    s, v, p, ind = metrics["summary"], metrics["variants"], metrics["prerequisites"], metrics["induction"]
    rows = "\n".join(f"| {name} | {v[name]['success']:.3f} | {v[name]['f_beta']:.3f} | {v[name]['mmr']:.3f} | "
                     f"{v[name]['te_ratio']:.3f} | {v[name]['errors_per_session']:.3f} | "
                     f"{', '.join(f'{k}: {x}' for k, x in v[name]['pass_k'].items())} | {v[name]['sessions']} |"
                     for name in VARIANTS)
    by = {n: v[n]["errors"].get("by", {}) for n in VARIANTS}
    kinds = sorted({k for n in VARIANTS for k in by[n]}, key=lambda k: (-by["with"].get(k, 0), -by["complete"].get(k, 0),
                                                                      -by["without"].get(k, 0), k))
    by_kind = "\n".join(f"| {k} | " + " | ".join(str(by[n].get(k, 0)) for n in VARIANTS) + " |" for k in kinds
                        if by["with"].get(k) or by["complete"].get(k) or by["without"].get(k, 0) >= 5)
    wfs = sorted(v["complete"]["by_workflow"])
    per_wf = "\n".join(f"| {w} | " + " | ".join(f"{v[n]['by_workflow'].get(w, float('nan')):.2f}" for n in VARIANTS)
                       + " |" for w in wfs)
    cut = 1 - s["errors_per_session_with"] / s["errors_per_session_without"] if s["errors_per_session_without"] else 0.0
    text = f"""# Experience (WISE-Flow): an under-specified library repaired by induced experience

Command: `flowdesk eval experience --out {out}` (seeds {metrics['setup']['seeds']}, every {metrics['setup']['every']},
train share {metrics['setup']['train_share']}).  The demo desk without API preconditions and without the steps
whose result feeds another API's argument; train goals played on the complete and the under-specified library
(experience off) give the logs; induction from those only; test goals played three ways.  Tool errors = calls the
tools failed + tool calls a controller stopped because they could not run (missing argument, unmet precondition).

## Induced prerequisites vs the removed ones

precision **{p['precision']:.3f}**, recall **{p['recall']:.3f}** ({p['correct']} correct of {p['induced']} induced,
{p['removed']} removed).  False positives: {', '.join(p['false_positives']) or 'none'}.
Missed: {', '.join(p['missed']) or 'none'}.

## Test sessions

| library | success | F_beta (β=5) | MMR | TE-ratio | tool errors / session | pass^k | sessions |
|---|---|---|---|---|---|---|---|
{rows}

Tool errors per session: {s['errors_per_session_without']:.3f} without experience → {s['errors_per_session_with']:.3f}
with it ({-cut:+.0%}); success with experience {s['success_with']:.3f} vs {s['success_complete']:.3f} on the complete
library (gap {s['success_complete'] - s['success_with']:+.3f}).  On this desk every tool call that precedes another in
the clean runs is a true dependency (the procedures are straight lines per branch), so precision is tested only
against orderings the logs happen to show; a library with independent steps would test it harder.

### Tool errors by workflow / tool / kind

``error``: a call that failed for the first time; ``repeat``: the same call with the same arguments failed
before in that workflow instance; ``stopped``: a controller stopped the call as unable to run.  Rows: every
kind left with experience or on the complete library, and the kinds without experience counted 5 or more times.

| workflow / tool / kind | without | with | complete |
|---|---|---|---|
{by_kind}

### Success per workflow (weak ones first to look at)

| workflow | without | with | complete |
|---|---|---|---|
{per_wf}

## Induction cost

{ind['trajectories']} trajectories ({ind['partition']}) from {ind['train_sessions']} train sessions
({ind['events']} events): {ind['seconds']} s, peak {ind['peak_mib']} MiB (Python allocations) — per 1,000 sessions
**{ind['seconds_per_1000_sessions']} s** and **{ind['peak_mib_per_1000_sessions']} MiB**.  {ind['candidates']}
candidate prerequisites scored, {ind['kept']} verified, {ind['blocks']} blocks stored (first upsert {ind['store_first']};
the same logs again: {ind['store_again']}).  Restart: a second process opened the persisted store and read
{ind['restart'].get('read', 0)} of {ind['restart'].get('written', 0)} blocks back
({'identical' if ind['restart'].get('ok') else 'NOT identical ' + str(ind['restart'].get('error', ''))}).
"""
    (out / "report.md").write_text(text)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
        ax[0].bar(VARIANTS, [v[n]["success"] for n in VARIANTS], color=["#c44", "#4a4", "#448"])
        ax[0].set_title("session success")
        ax[0].set_ylim(0, 1)
        ax[1].bar(VARIANTS, [v[n]["errors_per_session"] for n in VARIANTS], color=["#c44", "#4a4", "#448"])
        ax[1].set_title("tool errors per session")
        fig.tight_layout()
        fig.savefig(out / "experience.png", dpi=100)
        plt.close(fig)
    except ImportError:  # plots are optional
        pass


def experience_command(
    out: str = typer.Option("reports/experience", "--out", help="Output folder (report.md, metrics.json, PNG)."),
    seeds: int = typer.Option(2, "--seeds", min=1, help="Runs per task (pass^k for k = 1..seeds)."),
    every: int = typer.Option(1, "--every", min=1, help="Every N-th goal only (a sample while developing)."),
    category: list[str] = typer.Option(None, "--category", help="Out-of-workflow categories (repeatable; default all)."),
    train_share: float = typer.Option(0.5, "--train-share", min=0.1, max=0.9, help="Share of each workflow's goals for training."),
    seed: int = typer.Option(0, "--seed", help="Train/test split seed."),
    work_dir: str = typer.Option(None, "--work-dir", help="Where the libraries, stores and event logs go (default: a temp dir)."),
) -> None:
    """Induce experience from train sessions on an under-specified demo desk; test without/with it and
    against the complete library."""
    from .simulated_user import CATEGORIES

    bad = [c for c in category or [] if c not in CATEGORIES]
    if bad:
        raise typer.BadParameter(f"{bad} not in {list(CATEGORIES)}", param_hint="--category")
    metrics = run_experience(out, seeds=seeds, every=every, categories=category or None, train_share=train_share,
                             seed=seed, work_dir=work_dir,
                             progress=lambda r: typer.echo(f"{r['task']:<58} seed {r['seed']} "
                                                           f"{'ok ' if r['success'] else 'FAIL'}", err=True))
    typer.echo(json.dumps(metrics["summary"], indent=2))
    typer.echo(f"report: {Path(out) / 'report.md'}")
