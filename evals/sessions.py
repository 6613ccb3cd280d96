"""``flowdesk eval sessions``: whole sessions between the agent and a goal-driven simulated user.

Goals come from the library and its tools' database (``evals.session_goals``: one per workflow and
branch); each goal is played under every out-of-workflow category (``evals.simulated_user``) with
``--seeds`` seeds (the seed changes the wording, what is said early and where the move is injected, never
the goal), through the real graph with a fresh thread and a fresh copy of the database per session.

Metrics per session (then averaged overall and per category):

- **success** — judged by the environment: the database change equals the gold change (the goal's
  procedure followed exactly; for a refused confirmation the change up to that action; for a
  cancellation none) and every value the user had to receive appears in the agent's replies;
- **progress** (FlowBench task progress) — the share of the gold milestones reached: the gold API calls
  (name and stable arguments) and the gold terminal ANSWER;
- **tool P/R/F1** and **parameter F1** (FlowBench's definitions applied to the session's calls: the
  agent's successful calls matched to the gold calls by name, in order; parameter F1 over the matched
  calls' (argument, value) pairs);
- **F_beta** (β = 5) over milestones, **MMR** (missed-milestone ratio = 1 − milestone recall) and
  **TE-ratio** (tool executions / gold tool calls; 1.0 = no wasted call) — WISE-Flow;
- **pass^k** (τ-bench) for k = 1..seeds over the tasks (goal × category): the chance that k runs with
  different seeds all succeed, estimated as C(c, k) / C(n, k) from c successes in n runs.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer

from convtests.runner import same as _same

from .session_goals import Goal, db_diff, generate_goals, snapshot
from .simulated_user import CATEGORIES, SimulatedUser

BETA = 5.0
RECURSION_LIMIT = 80


def _f1(p: float, r: float, beta: float = 1.0) -> float:
    return 0.0 if p + r == 0 else (1 + beta ** 2) * p * r / (beta ** 2 * p + r)


def match_calls(gold: list[tuple[str, dict]], made: list[tuple[str, dict]]) -> list[tuple[int, int]]:
    """Gold/made call pairs aligned by name in order (longest common subsequence)."""
    n, m = len(gold), len(made)
    dp = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            dp[i][j] = dp[i + 1][j + 1] + 1 if gold[i][0] == made[j][0] else max(dp[i + 1][j], dp[i][j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if gold[i][0] == made[j][0]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif dp[i + 1][j] >= dp[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def expected_for(goal: Goal, category: str, second: Goal | None):
    """(gold calls, gold terminal answers, expected db diff, info to receive) for a goal under a category."""
    if category == "cancellation":
        return [], [], {}, []
    if category == "refuse_confirmation" and goal.declined is not None:
        g = goal.declined
        return list(g.calls), [], g.diff, []
    calls, terms, diff, info = list(goal.gold.calls), [goal.gold.terminal], dict(goal.gold.diff), list(goal.gold.info)
    if category == "intent_switch" and second is not None:
        calls = list(second.gold.calls) + calls
        terms = [second.gold.terminal] + terms
        info = info + list(second.gold.info)
        for t, rows in second.gold.diff.items():
            diff[t] = sorted(diff.get(t, []) + rows)
    return calls, terms, diff, info


def score(goal: Goal, category: str, second: Goal | None, made: list[tuple[str, dict]], executions: int,
          answers: list[str], replies: list[str], diff: dict[str, list[str]], volatile: set[str]) -> dict[str, Any]:
    calls, terms, want_diff, info = expected_for(goal, category, second)
    terminals = set(goal.terminals) | set(second.terminals if second else ())
    got_diff = {t: rows for t, rows in diff.items() if t not in volatile}
    text = " ".join(replies).casefold()
    missing_info = [v for v in info if v.casefold() not in text]
    pairs = match_calls(calls, made)
    exact_pairs = [(gi, mi) for gi, mi in pairs if all(k in made[mi][1] and _same(v, made[mi][1][k])
                                                      for k, v in calls[gi][1].items())]
    # when neither the database nor a returned value can tell (a negative answer: "no hotel is free"), the
    # environment must at least have been asked what the gold asked it
    unasked = len(exact_pairs) < len(calls) if not want_diff and not info else False
    # a branch the user's answers chose (natural-language conditions) shows only in the reply it ends with
    unreached = [t for t in terms if t not in answers] if goal.conditions and not want_diff and not info else []
    success = got_diff == want_diff and not missing_info and not unasked and not unreached
    arg_tp = arg_gold = arg_made = 0
    for gi, mi in pairs:
        g, m = calls[gi][1], made[mi][1]
        arg_gold += len(g)
        arg_made += sum(1 for k in m if k in g)  # arguments the gold call pins (volatile ones are dropped)
        arg_tp += sum(1 for k, v in g.items() if k in m and _same(v, m[k]))
    exact = len(exact_pairs)
    tool_p = len(pairs) / len(made) if made else (1.0 if not calls else 0.0)
    tool_r = len(pairs) / len(calls) if calls else 1.0
    param_p = arg_tp / arg_made if arg_made else (1.0 if not arg_gold else 0.0)
    param_r = arg_tp / arg_gold if arg_gold else 1.0
    reached_terms = [t for t in terms if t in answers]
    milestones = len(calls) + len(terms)
    reached = exact + len(reached_terms)
    recall = reached / milestones if milestones else 1.0
    acted = len(made) + len([a for a in answers if a in terminals])  # calls and outcome replies
    precision = (exact + len(reached_terms)) / acted if acted else (1.0 if not milestones else 0.0)
    return {"success": success, "progress": recall, "tool_p": tool_p, "tool_r": tool_r,
            "tool_f1": _f1(tool_p, tool_r), "param_f1": _f1(param_p, param_r) if pairs or calls else 1.0,
            "f_beta": _f1(min(precision, 1.0), recall, BETA), "mmr": 1.0 - recall,
            "te_ratio": executions / len(calls) if calls else (0.0 if not executions else float(executions)),
            "why": ([f"db: {sorted(set(got_diff) ^ set(want_diff)) or 'rows differ'}"] if got_diff != want_diff else [])
            + [f"not told: {v}" for v in missing_info] + (["the gold calls were not all made"] if unasked else [])
            + [f"did not reach {t}" for t in unreached]}


def run_session(graph, context, goal: Goal, category: str, seed: int, second: Goal | None, pristine: Path,
                volatile: set[str], user_model=None) -> dict[str, Any]:
    from graph.chat import interrupt_question, run_turn
    from workflows.demo.db import restore_db

    restore_db(pristine, context.db_path)
    before = snapshot(context.db_path)
    user = SimulatedUser(goal, seed, category, second, model=user_model)
    thread = f"sim-{uuid.uuid4().hex[:10]}"
    made: list[tuple[str, dict]] = []
    answers: list[str] = []
    replies: list[str] = []
    executions = 0
    transcript: list[str] = []
    error = None

    def on_update(node: str, update: dict) -> None:
        nonlocal executions
        for ev in update.get("trace") or []:
            if ev.get("event") == "environment" and ev.get("status") != "cancelled":
                executions += 1
                if ev.get("ok"):
                    made.append((ev.get("api"), dict(ev.get("args") or {})))
            elif ev.get("event") == "assistant" and ev.get("answer"):
                answers.append(ev.get("answer"))

    def on_interrupt(payload: Any) -> Any:
        question = interrupt_question(payload)[0]
        transcript.append(f"A? {question}")
        answer = user.confirm(question) if isinstance(payload, dict) and payload.get("kind") == "confirm" \
            else (user.reply(question) or "no")
        transcript.append(f"U: {answer}")
        return answer

    start = time.perf_counter()
    text = user.reply(None)
    while text:
        transcript.append(f"U: {text}")
        try:
            r = run_turn(graph, thread, text, context=context, on_update=on_update, on_interrupt=on_interrupt)
        except Exception as exc:  # noqa: BLE001 - a crashed session is a failed session, reported
            error = f"{type(exc).__name__}: {exc}"
            break
        replies += r.replies
        transcript += [f"A: {t}" for t in r.replies]
        text = user.reply(r.reply)
    diff = db_diff(before, snapshot(context.db_path))
    # a move the conversation left no room for (it ended first) is judged as a plain session
    applied = category if category == "none" or category in user.moves else "none"
    m = score(goal, applied, second, made, executions, answers, replies, diff, volatile)
    if applied == "cancellation":  # the agent must also have let go: no workflow active at the end
        from graph.state import active_workflow

        left = active_workflow(graph.get_state({"configurable": {"thread_id": thread}}).values)
        if left is not None:
            m["success"] = False
            m["why"].append(f"still in {left} after the user cancelled")
    if error:
        m["success"] = False
        m["why"].append(error)
    return {"task": f"{goal.id}|{category}", "workflow": goal.workflow, "branch": goal.branch, "category": category,
            "seed": seed, "second": second.id if second else None, "moves": user.moves,
            "move_made": category == "none" or category in user.moves, "turns": user.turns,
            "seconds": round(time.perf_counter() - start, 3), "transcript": transcript, **m}


def pass_k(results: list[dict], k: int) -> float:
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        by_task[r["task"]].append(bool(r["success"]))
    vals = [math.comb(sum(v), k) / math.comb(len(v), k) for v in by_task.values() if len(v) >= k]
    return round(sum(vals) / len(vals), 4) if vals else float("nan")


METRICS = ("success", "progress", "tool_f1", "param_f1", "f_beta", "mmr", "te_ratio")


def summarise(results: list[dict], seeds: int) -> dict[str, Any]:
    def block(rs: list[dict], moves: bool = True) -> dict[str, Any]:
        out = {k: round(sum(float(r[k]) for r in rs) / len(rs), 4) if rs else float("nan") for k in METRICS}
        out["pass_k"] = {str(k): pass_k(rs, k) for k in range(1, seeds + 1)}
        out["sessions"] = len(rs)
        if moves:  # the share of sessions where the category's move happened (the headline keeps its keys)
            out["move_made"] = round(sum(1 for r in rs if r.get("move_made")) / len(rs), 4) if rs else float("nan")
        return out

    return {"summary": block(results, moves=False),
            "by_category": {c: block([r for r in results if r["category"] == c]) for c in CATEGORIES
                            if any(r["category"] == c for r in results)},
            "by_workflow": {w: block([r for r in results if r["workflow"] == w])
                            for w in sorted({r["workflow"] for r in results})}}


def pick_second(goal: Goal, goals: list[Goal], rng_key: str) -> Goal | None:
    """The side request of an intent switch: a goal of another workflow that changes nothing in the database
    (a quick question in between), chosen deterministically."""
    import random

    pool = [g for g in goals if g.workflow != goal.workflow and not g.gold.diff and g.gold.info]
    return random.Random(rng_key).choice(pool) if pool else None


DATASETS = {"flowbench": "FlowBench's 51 workflows (imported flowcharts, simulated tools)"}


def dataset_library(dataset: str, data: str | Path, cache_dir: Path) -> Path:
    """The imported library of a dataset (imported once into ``cache_dir``)."""
    if dataset == "flowbench":
        from .datasets.flowbench import library as flowbench_library

        return flowbench_library(Path(data), cache_dir / "flowbench")
    raise ValueError(f"--dataset: {dataset!r} is not one of {sorted(DATASETS)}")


def run_eval(out: str | Path, *, library: str | None = None, seeds: int = 4, categories=None, workflows=None,
             context=None, user_model: str | None = None, progress=None, work_dir=None, dataset: str | None = None,
             data: str | Path | None = None, every: int = 1, cache_dir: str | Path | None = None,
             goal_source=None, title: str | None = None, transcripts: bool = True,
             about: str | None = None) -> dict[str, Any]:
    """``dataset`` ("flowbench", with ``data``): that dataset's imported library, with goals whose slots the
    database does not hold generated (its tools are simulated); ``every``: every N-th goal only.
    ``goal_source(library, pristine_db, workflows) -> goals`` replaces the generated goals (e.g. STAR
    dialogues' goals, ``evals.star_goals``); ``title`` heads the report, ``about`` says how goals and success
    are made (with ``goal_source``); ``transcripts=False`` keeps the sessions' words out of the report folder
    (goals holding a dataset's values)."""
    from langgraph.checkpoint.memory import InMemorySaver

    from graph.agent import build_agent
    from graph.context import Context
    from graph.resources import get_resources, model_for
    from workflows.demo.db import ensure_db

    from .datasets import eval_today

    base = context or Context()
    if not base.today:  # the goals' dates are the desk's (``evals.session_goals``): read the user's against it
        base = replace(base, today=eval_today())
    if dataset:
        cache = Path(cache_dir or os.environ.get("FLOWDESK_EVAL_CACHE", ".flowdesk/eval"))
        lib_dir = dataset_library(dataset, data or "/work/shared/data", cache)
        base = replace(base, library=str(lib_dir), store_dir=str(cache / f"store-{dataset}-sessions"))
    elif library:
        base = replace(base, library=library)
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="flowdesk-sessions-"))
    work.mkdir(parents=True, exist_ok=True)
    pristine = work / "pristine.sqlite"
    pristine.unlink(missing_ok=True)
    ensure_db(pristine)
    ctx = replace(base, db_path=str(work / "session.sqlite"))
    shutil.copy(pristine, ctx.db_path)
    lib = get_resources(ctx).library
    if goal_source is not None:
        goals = goal_source(lib, pristine, workflows)
    else:
        goal_db = pristine
        if dataset:  # a dataset's tools are simulated: its goals take no value from the demo desk's database
            import sqlite3

            goal_db = work / "empty.sqlite"
            sqlite3.connect(str(goal_db)).close()
        goals = generate_goals(lib, goal_db, workflows=workflows, free_text=bool(dataset))[::max(1, every)]
    umodel = model_for(replace(ctx, user_simulator_model=user_model), "user_simulator") if user_model else None
    graph = build_agent(ctx, checkpointer=InMemorySaver()).with_config(recursion_limit=RECURSION_LIMIT)
    cats = list(categories or CATEGORIES)
    volatile = _volatile_tables(goals)
    results = []
    for goal in goals:
        for cat in cats:
            if cat == "refuse_confirmation" and goal.declined is None:
                continue  # nothing to confirm on this branch
            second = pick_second(goal, goals, f"{goal.id}:{cat}") if cat == "intent_switch" else None
            for seed in range(seeds):
                results.append(run_session(graph, ctx, goal, cat, seed, second, pristine, volatile, umodel))
                if progress:
                    progress(results[-1])
    metrics = summarise(results, seeds)
    metrics["goals"] = {"count": len(goals), "branches": [g.id for g in goals],
                        "without_goal": _unreached(lib, goals, workflows)}
    metrics["dataset"] = dataset or "demo"
    write_report(Path(out), metrics, results, seeds, title, transcripts, about,
                 transcripts_dir=Path(ctx.library).parent if dataset else None)
    return metrics


def _volatile_tables(goals: list[Goal]) -> set[str]:
    """Tables whose change is session state (e.g. auth tokens), never compared."""
    return {t for g in goals for gold in (g.gold, g.declined) if gold for t in gold.volatile}


def _unreached(lib, goals: list[Goal], workflows) -> list[str]:
    from .session_goals import terminal_answers

    have = {g.id for g in goals}
    return sorted(f"{w}:{a}" for w in (workflows or lib.workflows) for a in terminal_answers(lib.workflows[w])
                  if f"{w}:{a}" not in have)


def write_report(out: Path, metrics: dict, results: list[dict], seeds: int, title: str | None = None,
                 transcripts: bool = True, about: str | None = None, transcripts_dir: Path | None = None) -> None:
    from .report import Report

    s = metrics["summary"]
    by_cat = metrics["by_category"]
    none = by_cat.get("none", {})
    # weak: below the overall success target, or not reliable across seeds (pass^k below its target)
    weak = [c for c, m in by_cat.items()
            if m["success"] < 0.85 or (m.get("pass_k") or {}).get(str(seeds), 1.0) < 0.80]
    targets = [("success, no out-of-workflow move ≥ 0.95", none.get("success", float("nan")), 0.95),
               ("success overall ≥ 0.85", s["success"], 0.85),
               (f"pass^{seeds} ≥ 0.80", s["pass_k"].get(str(seeds), float("nan")), 0.80)]
    missed = [t for t in targets if not (t[1] >= t[2])]
    desk = DATASETS.get(metrics.get("dataset", ""), "demo desk")
    rep = Report(out, title or f"Session-level evaluation with simulated users ({desk}, offline agent)")
    headline = (f"**Headline:** success {s['success']:.3f} overall over {s['sessions']} sessions, "
                f"{none.get('success', float('nan')):.3f} without out-of-workflow moves, pass^{seeds} "
                f"{s['pass_k'].get(str(seeds), float('nan')):.3f}. ")
    headline += ("Targets missed: " + "; ".join(f"{n} (measured {v:.3f})" for n, v, _ in missed) + ". "
                 if missed else "All targets met. ")
    if weak:
        headline += f"Weak categories (success < 0.85 or pass^{seeds} < 0.80): " + ", ".join(
            f"{c} {by_cat[c]['success']:.3f} (pass^{seeds} {(by_cat[c].get('pass_k') or {}).get(str(seeds), float('nan')):.3f})"
            for c in weak) + ". "
    weak_wf = sorted((m["success"], w) for w, m in metrics["by_workflow"].items() if m["success"] < 0.7)
    if weak_wf:
        headline += "Weakest workflows (success < 0.7): " + ", ".join(f"{w} {v:.3f}" for v, w in weak_wf) + "."
    rep.text(headline)
    rep.text(about or "A goal-driven simulated user (`evals/simulated_user.py`, offline, deterministic per seed) talks to "
             "the real agent graph (offline policies) with a fresh thread and a fresh copy of the demo database "
             "per session. Goals: one per workflow and branch, generated from the PDL and the database and "
             "played once by the offline PDL interpreter with the real tools to obtain the gold calls, the gold "
             "database change and the values the user must be told (`evals/session_goals.py`). Success is judged "
             "by the environment (database change + information received). Tool P/R/F1 and parameter F1 follow "
             "FlowBench's definitions applied to each session's calls (aligned to the gold calls by name, in "
             "order); F_beta (β=5), MMR and TE-ratio follow WISE-Flow over milestones (gold calls + terminal "
             "answers); TE-ratio = tool executions / gold calls. pass^k per τ-bench over seeds.")
    cols = ["success", "progress", "tool_f1", "param_f1", "f_beta", "mmr", "te_ratio"]
    rep.table("Overall and per out-of-workflow category", ["category", "what", "sessions", "move made", *cols,
                                                           *[f"pass^{k}" for k in range(1, seeds + 1)]],
              [["all", "", s["sessions"], "", *[s[c] for c in cols], *s["pass_k"].values()]]
              + [[c, CATEGORIES[c], m["sessions"], m["move_made"], *[m[k] for k in cols], *m["pass_k"].values()]
                 for c, m in by_cat.items()])
    rep.table("Per workflow", ["workflow", "sessions", *cols],
              [[w, m["sessions"], *[m[k] for k in cols]] for w, m in metrics["by_workflow"].items()])
    rep.line_plot("pass_k", list(range(1, seeds + 1)),
                  {"all": [s["pass_k"][str(k)] for k in range(1, seeds + 1)],
                   **{c: [m["pass_k"][str(k)] for k in range(1, seeds + 1)] for c, m in by_cat.items()}},
                  "k", "pass^k", "pass^k over seeds (τ-bench)")
    unreached = metrics["goals"]["without_goal"]
    rep.text(f"Goals: {metrics['goals']['count']} (workflow × branch). Branches for which the generator found no "
             f"goal in the database's values: {', '.join(unreached) or 'none'}.")
    failed = [r for r in results if not r["success"]][:30]
    # a dataset's workflows say the dataset's own texts: its transcripts stay out of the report folder
    # (committed), in the evaluation cache beside the imported library
    own = metrics.get("dataset", "demo") == "demo"
    if failed:
        rep.table("First failed sessions", ["task", "seed", "why", *(["last turns"] if own else [])],
                  [[r["task"], r["seed"], "; ".join(r["why"])[:160],
                    *([" / ".join(r["transcript"][-3:])[:300].replace("|", "/") if transcripts else "–"]
                      if own else [])] for r in failed])
    rep.write(metrics)
    log = out / "sessions.jsonl" if own else Path(transcripts_dir or out) / f"sessions-{metrics['dataset']}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        for r in results:
            f.write(json.dumps(r if transcripts else {k: v for k, v in r.items() if k != "transcript"},
                               default=str) + "\n")


def sessions_command(
    out: str = typer.Option("reports/sessions-demo", "--out", help="Output folder (report.md, metrics.json, PNG)."),
    library: Optional[str] = typer.Option(None, "--library", help="Workflow library (default: the bundled demo desk)."),
    seeds: int = typer.Option(4, "--seeds", min=1, help="Runs per task (pass^k for k = 1..seeds)."),
    category: Optional[list[str]] = typer.Option(None, "--category", help="Categories to run (repeatable)."),
    workflow: Optional[list[str]] = typer.Option(None, "--workflow", help="Workflows to run (repeatable)."),
    user_model: Optional[str] = typer.Option(None, "--user-model", help="provider:model for an LLM user."),
    store_dir: Optional[str] = typer.Option(None, "--store-dir", help="Retrieval store (default .flowdesk/store)."),
    dataset: str = typer.Option("demo", "--dataset", help="demo (goals generated from the library and its database) | "
                                "star (goals from STAR dev dialogues against the imported STAR workflows and KB tools) | "
                                "flowbench (FlowBench's 51 workflows, imported flowcharts, simulated tools)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Data directory for --dataset star|flowbench (default: "
                                        "$FLOWDESK_DATA or ../shared/data)."),
    per_task: int = typer.Option(2, "--per-task", min=1, help="--dataset star: dialogues sampled per task."),
    every: int = typer.Option(1, "--every", min=1, help="Every N-th goal only (a sample while developing)."),
) -> None:
    """Whole sessions with a goal-driven simulated user: success, progress, tool/param F1, F_beta, MMR,
    TE-ratio and pass^k, overall and per out-of-workflow category."""
    from graph.context import Context

    bad = [c for c in category or [] if c not in CATEGORIES]
    if bad:
        raise typer.BadParameter(f"--category: {bad} not in {list(CATEGORIES)}")
    if dataset not in ("demo", "star", *DATASETS):
        raise typer.BadParameter(f"one of demo, star, {', '.join(DATASETS)}", param_hint="--dataset")
    from .next_action import default_data_dir

    data = data or default_data_dir()
    if dataset != "demo" and not Path(data).is_dir():
        raise typer.BadParameter(f"{data} is not a folder", param_hint="--data")
    if dataset == "star":  # --- STAR goals (evals.star_goals) ---
        from .star_goals import import_gold_library, run_star_sessions

        lib = Path(library) if library else import_gold_library(data, Path(".flowdesk/eval/star-gold"))
        metrics = run_star_sessions(lib, data, out, per_task=per_task, seeds=seeds, categories=category,
                                    workflows=workflow, store_dir=store_dir or f".flowdesk/store-star-{lib.name}",
                                    progress=lambda r: typer.echo(f"{r['task']:<58} seed {r['seed']} "
                                                                  f"{'ok ' if r['success'] else 'FAIL'}", err=True))
        typer.echo(json.dumps(metrics["summary"], indent=2))
        typer.echo(f"report: {Path(out) / 'report.md'}")
        return
    ctx = Context(store_dir=store_dir) if store_dir else Context()
    metrics = run_eval(out, library=library, seeds=seeds, categories=category, workflows=workflow, context=ctx,
                       user_model=user_model, dataset=None if dataset == "demo" else dataset, data=data, every=every,
                       progress=lambda r: typer.echo(f"{r['task']:<58} seed {r['seed']} "
                                                     f"{'ok ' if r['success'] else 'FAIL'} {r['seconds']:.1f}s",
                                                     err=True))
    typer.echo(json.dumps(metrics["summary"], indent=2))
    typer.echo(f"report: {Path(out) / 'report.md'}")
