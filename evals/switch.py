"""``flowdesk eval switch``: FlowSwitch turn-level evaluation of switch detection + workflow retrieval.

Protocol (the paper's): at every scored user turn the active workflow is the previous turn's gold.
The detector (``dialogue.understanding.policy_llm.decide``, offline policy unless ``--detector-mode`` says otherwise)
says STAY or SEARCH; on SEARCH the retriever ranks the library with the configured query input and
the top 5 are the prediction; on STAY the prediction is ``[active]`` (``[]`` when out of scope or no
workflow is active).  "detector off" retrieves on every turn.

A configuration is ``retriever/strategy/representation/query/detector`` (e.g.
``hybrid/flat/text/SelfGen/on``).  A query input ending in ``+ctx`` re-ranks the retriever's top 30 with
the conversation's context (``dialogue.understanding.prior.context_rerank``: the active workflow's service/role,
roles used earlier — the previous turns' golds under this protocol, i.e. the workflows the agent ran —,
the intent verb and enum values in the turn or the offer it accepts).  ``--configs`` takes ``default``
(BM25, every query input, detector on/off: the full SGD dev run fits in minutes), ``dense``
(dense/hybrid retrievers and hierarchical strategies — run on a sample with ``--every``), ``all``, or a comma-separated list of such specs where
any field may be ``*``.  Detector verdicts do not depend on the retrieval
configuration, so they are computed once per turn; query embeddings are computed in batches up
front (the store's embedding cache then serves every search) and each (query, configuration) search
runs once.

``--tune`` (train splits only) grid-searches the offline detector's weights on the cached features
and writes ``tuning.json``; the chosen values are the defaults in ``nodes/detector.py``.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from .datasets import DATASETS, Dialogue, default_data_dir, eval_today, load_switch_dataset
from .switch_metrics import TurnRecord, compute

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# ``hybrid`` fuses BM25 and dense by reciprocal rank; ``hybrid-score`` by min-max normalised scores.
RETRIEVERS = ("bm25", "dense", "hybrid", "hybrid-score")
STRATEGIES = ("flat", "D>W", "R>W", "D>R>W")
# ``<kind>+ctx``: the same query, the ranking re-scored with the conversation's context
# (``dialogue.understanding.prior.context_rerank``: roles/services used so far, intent verb, enum values).
QUERIES = ("Full", "Last3", "Last2", "Last1", "SelfGen", "Last2+ctx", "Last1+ctx", "SelfGen+ctx")
REPRESENTATIONS = ("text", "code", "flowchart", "summary")
BASELINE = "bm25/flat/text/Last1/off"
# Sparse-only by default: on the 2-core build machine the numpy MiniLM pass embeds ~10-15 queries/s
# when other jobs share the CPU, so dense configurations over every SGD dev turn would take hours.
# ``*`` expands to every query input, the context-reranked ``+ctx`` ones included.
DEFAULT_CONFIGS = [BASELINE, "bm25/flat/text/Full/off", "bm25/flat/text/*/on"]
# ``--configs dense``: dense/hybrid retrievers and the hierarchical strategies (run them on a sample).
DENSE_CONFIGS = [
    "hybrid/flat/text/Last1/off",
    "dense/flat/text/SelfGen/on", "dense/flat/text/Last1/on", "dense/flat/text/Last2/on",
    "hybrid/flat/text/SelfGen/on", "hybrid/flat/text/Last1/on", "hybrid/flat/text/Last2/on",
    "hybrid/D>W/text/SelfGen/on", "hybrid/R>W/text/SelfGen/on", "hybrid/D>R>W/text/SelfGen/on",
    "dense/flat/text/Last1+ctx/on", "dense/flat/text/SelfGen+ctx/on", "bm25/flat/text/Last1+ctx/on",
    "hybrid/flat/text/Last1+ctx/on", "hybrid-score/flat/text/Last1/on", "hybrid-score/flat/text/Last1+ctx/on",
    "bm25/flat/text/SelfGen/on", BASELINE,
]
# Libraries imported from FlowBench carry four real representations; compare them there.
MULTI_REP_CONFIGS = ["bm25/flat/*/SelfGen/on", "hybrid/flat/*/SelfGen/on", "dense/R>W/*/SelfGen/on"]


@dataclass(frozen=True)
class Config:
    retriever: str
    strategy: str
    representation: str
    query: str
    detector: bool

    @property
    def name(self) -> str:
        return f"{self.retriever}/{self.strategy}/{self.representation}/{self.query}/{'on' if self.detector else 'off'}"


def parse_configs(spec: str, multi_rep: bool = False) -> list[Config]:
    """Expand ``default`` / ``dense`` / ``all`` / comma-separated ``r/s/rep/q/det`` specs (``*`` = every value)."""
    spec = (spec or "default").strip()
    if spec == "default":
        parts = DEFAULT_CONFIGS + (MULTI_REP_CONFIGS if multi_rep else [])
    elif spec == "dense":
        parts = DENSE_CONFIGS + (MULTI_REP_CONFIGS if multi_rep else [])
    elif spec == "all":
        parts = ["*/*/*/*/*" if multi_rep else "*/*/text/*/*"]
    else:
        parts = [p.strip() for p in spec.split(",") if p.strip()]
    choices = (RETRIEVERS, STRATEGIES, REPRESENTATIONS, QUERIES, ("on", "off"))
    out: list[Config] = []
    for part in parts:
        fields = part.split("/")
        if len(fields) != 5:
            raise typer.BadParameter(f"config {part!r}: expected retriever/strategy/representation/query/on|off")
        options = []
        for value, allowed in zip(fields, choices):
            if value == "*":
                options.append(allowed)
            elif value in allowed:
                options.append((value,))
            else:
                raise typer.BadParameter(f"config {part!r}: {value!r} is not one of {', '.join(allowed)}")
        for r, s, rep, q, d in itertools.product(*options):
            cfg = Config(r, s, rep, q, d == "on")
            if cfg not in out:
                out.append(cfg)
    return out


# --- per-turn preparation ----------------------------------------------------------------------------

@dataclass
class PreparedTurn:
    dialogue: str
    index: int  # position in the dialogue's turns
    gold: str | None
    prev_gold: str | None
    verdict: Any  # dialogue.understanding.policy_offline.Verdict
    detector_ms: float
    queries: dict[str, str]  # by base query kind (no "+ctx")
    seen: tuple[str, ...] = ()  # workflows of earlier user turns (the conversation's context)
    ctx_text: str = ""  # the turn (+ the offer it accepts) for the context prior


def base_kind(query: str) -> str:
    return query.split("+", 1)[0]


def _messages(dlg: Dialogue):
    from langchain_core.messages import AIMessage, HumanMessage

    return [HumanMessage(t.text) if t.speaker == "user" else AIMessage(t.text) for t in dlg.turns]


def prepare(dialogues: list[Dialogue], library, retriever, kinds: set[str], detector_mode: str = "offline",
            model=None, params=None, progress=None) -> list[PreparedTurn]:
    from memory.queries import build_query
    from dialogue.understanding.policy_llm import decide
    from dialogue.understanding.policy_offline import DEFAULT_PARAMS
    from dialogue.understanding.prior import rerank_text
    from nodes.detector import retriever_scorer

    score = retriever_scorer(retriever)
    bases = {base_kind(k) for k in kinds}
    out: list[PreparedTurn] = []
    for dlg in dialogues:
        msgs = _messages(dlg)
        seen: list[str] = []
        for i, turn in enumerate(dlg.turns):
            if turn.speaker != "user":
                continue
            if not turn.scored:
                if turn.gold and turn.gold not in seen:
                    seen.append(turn.gold)
                continue
            history = msgs[: i + 1]
            active = turn.prev_gold
            wf = library.workflows.get(active) if active else None
            t0 = time.perf_counter()
            v = decide(history, active, wf, score, None, detector_mode, model, params or DEFAULT_PARAMS)
            ms = (time.perf_counter() - t0) * 1000
            queries = {k: build_query(k, history, v.search_query or v.self_query or None) for k in bases}
            ctx_text = rerank_text(history) if any(k.endswith("+ctx") for k in kinds) else ""
            # The context is what the agent knows: workflows run before this turn (their golds here).
            out.append(PreparedTurn(dlg.id, i, turn.gold, turn.prev_gold, v, ms, queries, tuple(seen), ctx_text))
            if turn.gold and turn.gold not in seen:
                seen.append(turn.gold)
        if progress:
            progress()
    return out


def warm_embeddings(retriever, texts: list[str], batch: int = 256, progress=None) -> None:
    """Embed every distinct query once, in batches; the store's cache serves the searches after."""
    # Sorted by length so batches pad little (the forward pass is quadratic in padded length).
    todo = sorted(dict.fromkeys(t for t in texts if t), key=len)
    for s in range(0, len(todo), batch):
        retriever.store.embedder.embed(todo[s:s + batch])
        if progress:
            progress(min(batch, len(todo) - s))


def run_config(cfg: Config, turns: list[PreparedTurn], retriever, cache: dict, top_k: int = 5,
               oos_labels: bool = True, prior=None) -> list[TurnRecord]:
    """Per-turn records of one configuration.  ``oos_labels=False`` (STAR: no "no task" gold) reads an
    out-of-scope verdict as what the agent does with it — keep the active workflow."""
    from dialogue.understanding.prior import DEFAULT_PRIOR, context_rerank

    prior = prior or DEFAULT_PRIOR
    with_ctx = cfg.query.endswith("+ctx")
    depth = max(top_k, prior.depth) if with_ctx else top_k
    records = []
    for t in turns:
        v = t.verdict
        search = (not cfg.detector) or v.action == "SEARCH"
        ms = t.detector_ms if cfg.detector else 0.0
        if search:
            q = t.queries[base_kind(cfg.query)]
            key = (q, cfg.retriever, cfg.strategy, cfg.representation, depth)
            hit = cache.get(key)
            if hit is None:
                s0 = time.perf_counter()
                name, fusion = ("hybrid", "score") if cfg.retriever == "hybrid-score" else (cfg.retriever, "rrf")
                cands = retriever.search(q, retriever=name, strategy=cfg.strategy, fusion=fusion,
                                         representation=cfg.representation, top_k=depth)
                hit = cache[key] = ([(c["workflow"], c["score"]) for c in cands], (time.perf_counter() - s0) * 1000)
            ranking, search_ms = hit
            if with_ctx:
                s0 = time.perf_counter()
                ranking = context_rerank(ranking, retriever.library, t.prev_gold, t.seen, t.ctx_text, prior)
                search_ms += (time.perf_counter() - s0) * 1000
            predicted = [n for n, _ in ranking[:top_k]]
            ms += search_ms
        else:
            predicted = [] if (v.out_of_scope and oos_labels) or not t.prev_gold else [t.prev_gold]
        records.append(TurnRecord(t.gold, t.prev_gold, list(predicted), "SEARCH" if search else "STAY",
                                  bool(cfg.detector and v.out_of_scope and oos_labels), t.prev_gold, search, ms))
    return records


# --- tuning ------------------------------------------------------------------------------------------

TUNE_GRID = {
    "threshold": [0.0, 0.5, 1.0, 1.5, 2.0, 2.5],
    "w_answer": [0.5, 1.0, 1.5, 2.0, 3.0],
    "w_retrieval": [0.5, 1.0, 1.5],
    "w_request": [0.5, 1.0, 1.5],
    "w_cue": [0.5, 1.0, 1.5],
    "w_verb": [0.0, 0.5, 1.0, 1.5],
    "w_done": [0.0, 0.5, 1.0],
}
TUNE_TOP1_CANDIDATES = 25  # top-1 (a full retrieval pass) only for the most accurate settings
# Plain accuracy trades switch recall away (missing a switch costs one turn, a needless search often
# costs nothing once the context prior keeps the active service on top); the agent needs the switches.
TUNE_RECALL_FLOOR = 0.85


def tune(turns: list[PreparedTurn], retriever=None, objective_config: str = "bm25/flat/text/Last1+ctx/on",
         oos_labels: bool = True) -> dict:
    """Grid search of the linear part of the offline detector (rule-decided turns are fixed).
    Objective: detector accuracy (ties: top-1 of ``objective_config``, computed when a retriever is
    given; the setting with the best top-1 is reported too)."""
    import copy

    import numpy as np

    from dialogue.understanding.policy_offline import DEFAULT_PARAMS

    def flagged(t):
        return t.verdict.action == "SEARCH" or (t.verdict.out_of_scope and t.prev_gold is not None)

    scored = [t for t in turns if "score" in t.verdict.features]
    fixed = [t for t in turns if "score" not in t.verdict.features]
    fixed_ok = sum(flagged(t) == (t.gold != t.prev_gold) for t in fixed)
    fixed_caught = sum(flagged(t) and t.gold != t.prev_gold for t in fixed)
    changes = sum(t.gold != t.prev_gold for t in turns)
    f = {k: np.array([t.verdict.features.get(k, 0.0) for t in scored])
         for k in ("request", "cue", "accepts_offer", "retrieval", "answer", "verb_shift", "done")}
    y = np.array([t.gold != t.prev_gold for t in scored], dtype=bool)
    cfg = parse_configs(objective_config)[0]
    shadow = [copy.copy(t) for t in scored]
    for t in shadow:
        t.verdict = copy.copy(t.verdict)
    cache: dict = {}
    candidates = []
    keys = list(TUNE_GRID)
    for values in itertools.product(*(TUNE_GRID[k] for k in keys)):
        p = dict(zip(keys, values))
        s = (p["w_request"] * f["request"] + p["w_cue"] * f["cue"] + p["w_verb"] * f["verb_shift"]
             + p["w_done"] * f["done"]
             + DEFAULT_PARAMS.w_offer * f["accepts_offer"] * np.maximum(0, f["retrieval"])
             + p["w_retrieval"] * f["retrieval"] - p["w_answer"] * f["answer"] + DEFAULT_PARAMS.bias)
        pred = s > p["threshold"]
        cand = {"params": p, "accuracy": (int((pred == y).sum()) + fixed_ok) / max(1, len(turns)),
                "switch_recall": (int((pred & y).sum()) + fixed_caught) / max(1, changes),
                "search_rate_scored": float(pred.mean()) if len(pred) else float("nan"), "_pred": pred}
        candidates.append(cand)
    # Settings meeting the recall floor first, then the most accurate; top-1 decides among the leaders.
    candidates.sort(key=lambda c: (c["switch_recall"] < TUNE_RECALL_FLOOR, -c["accuracy"]))
    for rank, cand in enumerate(candidates):
        pred = cand.pop("_pred")
        if retriever is not None and rank < TUNE_TOP1_CANDIDATES:
            for t, flag in zip(shadow, pred):
                t.verdict.action = "SEARCH" if flag else "STAY"
            recs = run_config(cfg, shadow + fixed, retriever, cache, oos_labels=oos_labels)
            cand["top1"] = compute(recs)["top1"]
    # Chosen by top-1 among the most accurate settings with switch recall >= TUNE_RECALL_FLOOR: top-1
    # alone degenerates to "never search" when retrieval is weak (near-duplicate services).
    leaders = candidates[:TUNE_TOP1_CANDIDATES] if retriever is not None else candidates[:1]
    best = max(leaders, key=lambda c: (c["switch_recall"] >= TUNE_RECALL_FLOOR, c.get("top1", 0.0), c["accuracy"]))
    return {**best, "objective": f"top-1 among the most accurate settings with switch recall >= {TUNE_RECALL_FLOOR}",
            "best_top1": max(candidates, key=lambda c: (c.get("top1", 0.0), c["accuracy"])),
            "turns": len(turns), "rule_decided_turns": len(fixed)}


# --- the command -------------------------------------------------------------------------------------

def _rich_progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())


def evaluate(dataset: str, split: str, data: Path, out: Path, limit: int | None, configs: str,
             detector_mode: str = "offline", detector_model: str = "offline", single_task: bool = False,
             cache_dir: Path | None = None, do_tune: bool = False, show_progress: bool = True,
             every: int = 1, loop: str = "closed", predictions: Path | None = None) -> dict:
    from graph.context import Context
    from graph.models import chat_model
    from memory.retrieval import build_retriever
    from workflows.library import load_library

    started = time.perf_counter()
    cache_dir = Path(cache_dir or os.environ.get("FLOWDESK_EVAL_CACHE", ".flowdesk/eval"))
    dialogues, lib_dir = load_switch_dataset(dataset, data, split, limit, cache_dir, single_task, every)
    library = load_library(lib_dir)
    if dataset == "flowbench-samples":
        from .datasets.flowbench import load as load_fb, uuid_names

        dialogues = load_fb(Path(data), limit, uuid_names(library))
    sample = (f"every {every}th dialogue" if every > 1 else "") + (f", first {limit}" if limit else "")
    if loop == "closed":
        from .switch_loop import evaluate_closed

        return evaluate_closed(dataset, split, dialogues, lib_dir, cache_dir, Path(out), sample.strip(", "),
                               show_progress, predictions)
    multi_rep = dataset == "flowbench-samples"
    cfgs = parse_configs(configs, multi_rep)
    ctx = Context(library=str(lib_dir), store_dir=str(cache_dir / f"store-{dataset}-{split}"),
                  detector_mode=detector_mode, detector_model=detector_model, today=eval_today())
    model = chat_model(detector_model, ctx.base_url, field="detector_model") if detector_mode != "offline" else None
    prog = _rich_progress() if show_progress else None
    if prog:
        prog.start()
    try:
        task = prog.add_task("index library", total=None) if prog else None
        # Index only the representations the configurations search (and their domains/roles).
        retriever = build_retriever(library, ctx, formats=sorted({c.representation for c in cfgs}))
        if prog:
            prog.update(task, total=1, completed=1)
        kinds = {c.query for c in cfgs}
        task = prog.add_task("detector", total=len(dialogues)) if prog else None
        turns = prepare(dialogues, library, retriever, kinds, detector_mode, model,
                        progress=(lambda: prog.advance(task)) if prog else None)
        # Batch-embed every query a dense/hybrid configuration (or a dense router) will search with.
        dense_texts = [t.queries[base_kind(c.query)] for c in cfgs for t in turns
                       if (c.retriever != "bm25" or c.strategy != "flat")
                       and ((not c.detector) or t.verdict.action == "SEARCH")]
        distinct = len(set(dense_texts))
        task = prog.add_task("embed queries", total=distinct) if prog else None
        warm_embeddings(retriever, dense_texts, progress=(lambda n: prog.advance(task, n)) if prog else None)
        cache: dict = {}
        results: dict[str, dict] = {}
        task = prog.add_task("configurations", total=len(cfgs)) if prog else None
        for cfg in cfgs:
            results[cfg.name] = compute(run_config(cfg, turns, retriever, cache, oos_labels=dataset != "star"))
            if prog:
                prog.advance(task)
    finally:
        if prog:
            prog.stop()
    tuning = tune(turns, retriever, oos_labels=dataset != "star") if do_tune else None
    metrics = write_report(out, dataset, split, len(dialogues), cfgs, results, turns, detector_mode,
                           time.perf_counter() - started, tuning,
                           limit if every == 1 else f"every {every}th dialogue" + (f", first {limit}" if limit else ""))
    return metrics


def _best(results: dict[str, dict], names: list[str]) -> str | None:
    pool = [n for n in names if n in results]
    return max(pool, key=lambda n: (results[n]["top1"], results[n]["map"]), default=None)


def write_report(out: Path, dataset: str, split: str, n_dialogues: int, cfgs: list[Config],
                 results: dict[str, dict], turns: list[PreparedTurn], detector_mode: str, seconds: float,
                 tuning: dict | None, limit: int | None) -> dict:
    from .report import Report

    split = "10 samples" if dataset == "flowbench-samples" else split
    rep = Report(out, f"Switch detection + workflow retrieval, teacher-forced (FlowSwitch protocol) — {dataset} ({split})")
    n_turns = len(turns)
    changes = sum(t.gold != t.prev_gold for t in turns)
    oos = sum(t.gold is None for t in turns)
    offline_names = [c.name for c in cfgs]
    best = _best(results, offline_names)
    rep.text(f"{n_dialogues} dialogues, {n_turns} scored user turns, {changes} gold changes, {oos} out-of-scope "
             f"golds{f' (sample: {limit})' if limit else ''}. Detector policy: {detector_mode}. "
             f"Protocol: the active workflow is the previous turn's gold (FlowSwitch turn-level). "
             f"Detector weights and the context prior (``+ctx`` queries) were tuned on training splits only "
             f"(SGD train, STAR DialogueID%5 in {{1,2}}); dev was not used for tuning. "
             f"Run time {seconds:.0f} s.")
    if dataset == "sgd":
        rep.text("Targets (SGD dev): top-1 ≥ 0.90, MAP ≥ 0.92, switch recall ≥ 0.90, searches on ≤ 40% of turns.")
    headers = ["configuration", "top-1", "top-3", "top-5", "MAP@5", "top-1 stay", "top-1 switch", "det. acc",
               "switch R", "switch P", "searches/turn", "p50 ms", "p95 ms"]
    rows = []
    for name, m in results.items():
        label = name + (" (naive baseline)" if name == BASELINE else "") + (" **best**" if name == best else "")
        rows.append([label, m["top1"], m["top3"], m["top5"], m["map"], m["top1_stay_turns"],
                     m["top1_switch_turns"], m["detector_accuracy"], m["switch_recall"], m["switch_precision"],
                     m["searches_per_turn"], m["latency_p50_ms"], m["latency_p95_ms"]])
    rep.table("Results by configuration (retriever/strategy/representation/query/detector)", headers, rows)
    policies: dict[str, int] = {}
    for t in turns:
        key = ("out of scope" if t.verdict.out_of_scope else t.verdict.action) + f" ({t.verdict.policy})"
        policies[key] = policies.get(key, 0) + 1
    rep.table("Detector verdicts", ["verdict", "turns"], sorted(policies.items()))
    if tuning:
        rep.table("Detector tuning (grid search on this split)", ["parameter", "value"],
                  [(k, v) for k, v in tuning["params"].items()] + [("accuracy", tuning["accuracy"])])
    names = list(results)
    rep.bar_plot("top1_map", names, {"top-1": [results[n]["top1"] for n in names],
                                     "MAP@5": [results[n]["map"] for n in names]}, "score",
                 "Top-1 accuracy and MAP@5 by configuration")
    rep.bar_plot("switch", names, {"switch recall": [results[n]["switch_recall"] for n in names],
                                   "searches/turn": [results[n]["searches_per_turn"] for n in names]},
                 "rate", "Switch recall and search rate by configuration")
    metrics = {"loop": "teacher", "summary": {"config": best, **(results.get(best) or {})} if best else {},
               "dataset": dataset, "split": split, "dialogues": n_dialogues, "turns": n_turns,
               "gold_changes": changes, "out_of_scope_golds": oos, "detector_mode": detector_mode,
               "seconds": seconds, "configs": results, "limit": limit,
               "best": {"config": best, **(results.get(best) or {})} if best else None,
               "baseline": {"config": BASELINE, **results[BASELINE]} if BASELINE in results else None}
    if tuning:
        metrics["tuning"] = tuning
        (Path(out) / "tuning.json").write_text(json.dumps(tuning, indent=2))
    rep.write(metrics)
    return metrics


def switch_command(
    dataset: str = typer.Option("sgd", help=f"One of: {', '.join(DATASETS)}."),
    split: str = typer.Option("dev", help="sgd: dev|train; star: dev (ID%5 in 3,4) | train (ID%5 in 1,2)."),
    data: Path = typer.Option(None, help="Data directory (default $FLOWDESK_DATA or ../shared/data)."),
    out: Path = typer.Option(None, help="Output folder (default reports/switch-<dataset>)."),
    limit: int = typer.Option(None, help="Only the first N dialogues (quick runs)."),
    every: int = typer.Option(1, help="Keep every k-th dialogue (a sample over the whole split), then --limit."),
    configs: str = typer.Option("default", help="default (BM25) | dense | all | comma-separated retriever/strategy/"
                                "representation/query/on|off specs; '*' expands a field."),
    detector_mode: str = typer.Option("offline", help="offline | llm | cascade."),
    detector_model: str = typer.Option("offline", help="provider:model for the llm/cascade detector."),
    single_task: bool = typer.Option(False, help="STAR: include single-task dialogues too."),
    tune_detector: bool = typer.Option(False, "--tune", help="Grid-search the offline detector (train splits)."),
    loop: str = typer.Option("closed", help="closed: the agent's own decisions feed later turns (what users meet); "
                             "teacher: FlowSwitch's turn-level protocol (the previous gold is active)."),
    predictions: Path = typer.Option(None, help="Closed loop: write every run's scored turns (default, before, "
                                     "teacher-forced, ...) as JSON lines — dialogue id, turn, gold, prediction, "
                                     "verdict, error category, relation to the gold; no dialogue text."),
) -> None:
    """FlowSwitch switch detection + retrieval evaluation; writes report.md, metrics.json and plots."""
    if dataset not in DATASETS:
        raise typer.BadParameter(f"--dataset must be one of {', '.join(DATASETS)}")
    data = Path(data) if data else default_data_dir()
    if not data.is_dir():
        raise typer.BadParameter(f"data directory {data} does not exist (set --data or FLOWDESK_DATA)")
    if tune_detector and split != "train":
        raise typer.BadParameter("--tune only runs on a train split (dev stays untouched)")
    if loop not in ("closed", "teacher"):
        raise typer.BadParameter("--loop must be closed or teacher")
    if tune_detector:
        loop = "teacher"  # the grid search replays the teacher-forced protocol
    if predictions is not None and loop != "closed":
        raise typer.BadParameter("--predictions needs --loop closed (its report has a teacher-forced run too)")
    out = Path(out) if out else Path("reports") / (f"switch-{dataset}" + ("-teacher" if loop == "teacher" else ""))
    m = evaluate(dataset, split, data, out, limit, configs, detector_mode, detector_model, single_task,
                 do_tune=tune_detector, every=every, loop=loop, predictions=predictions)
    if loop == "closed":
        d = m["default"]
        typer.echo(f"{m['turns']} turns, closed loop, default: top-1 {d['top1']:.3f} MAP {d['map']:.3f} "
                   f"searches/turn {d['searches_per_turn']:.3f}; always STAY {m['always_stay']['top1']:.3f} "
                   f"→ {out / 'report.md'}")
        return
    best = m.get("best") or {}
    typer.echo(f"{m['turns']} turns; best {best.get('config')}: top-1 {best.get('top1', float('nan')):.3f} "
               f"MAP {best.get('map', float('nan')):.3f} switch recall {best.get('switch_recall', float('nan')):.3f} "
               f"searches/turn {best.get('searches_per_turn', float('nan')):.3f} → {out / 'report.md'}")
