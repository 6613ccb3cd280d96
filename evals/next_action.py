"""``flowdesk eval next-action --dataset star``: turn-level next-action prediction on STAR.

For every wizard action in a dialogue (``pick_suggestion``/``utter`` with an ``ActionLabel``, or a
``query`` with ``APIName`` + ``Constraints``) the executor gets the *gold* history — the user's
messages, the wizard's earlier actions as executed nodes, the queries as API calls with their
knowledge-base results — and the task's PDL (imported by ``workflows.importers.star.import_star``;
ANSWER names come from STAR labels by ``star_label_to_answer``).  Its proposal is compared with
the wizard's action: a reply by its STAR label, a query as ``query`` / ``query_check`` /
``query_book`` (by ``RequestType``) plus the set of constrained slots.

Task of a turn: the single ``WizardCapabilities`` task, or the latest ``select_task`` in multi-task
dialogues (turns before any selection are skipped).  Splits by ``DialogueID % 5``: train = {1, 2}
(the only split used for tuning), dev = {3, 4} (reported), all = {1..4}; 0 is a private holdout.
Zero-shot tasks (``ZERO_SHOT_TASKS``) were fixed before development and never looked at while
tuning.  Baseline: always the task's most frequent wizard label in the train split.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Optional

import typer

from evals.datasets.star_actions import candidate_label, label_of, query_slots, replay
from evals.report import Report
# The STAR dialogue facts (splits, query names, constraint values) have one owner, shared with extraction.
from workflows.extraction.star import SPLITS, iter_dialogues, query_label, star_dir  # noqa: F401
from workflows.extraction.star import literal as _literal  # noqa: F401

# Fixed up front (one per domain family, mixed sizes); never used for tuning.
ZERO_SHOT_TASKS = ("apartment_schedule", "bank_fraud_report", "doctor_followup", "party_rsvp", "ride_change",
                   "spaceship_life_support")
# Published STAR next-action results (weighted F1 unless noted), quoted with their setting in the report.
PUBLISHED = [
    ("Mehri & Eskenazi 2021 (SAM)", "zero-shot task transfer (train on 23 tasks, test on the unseen one)",
     "+22 F1 over prior work (abstract); table values not available offline"),
]


def default_data_dir() -> Path:
    import os

    return Path(os.environ.get("FLOWDESK_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")


class Turn(dict):
    """One scored wizard action: gold, pred, baseline, task, dialogue, gold_slots, pred_slots."""


def evaluate_dialogue(d: dict, library, predict: bool = True, policy: Any = None, unseen: Any = None) -> list[Turn]:
    """Gold-history replay of one dialogue (``evals.datasets.star_actions.replay``: the user's messages
    read into the frame by ``dialogue.turn.read_turn``); a prediction at every labelled wizard action by
    the offline executor's ``decide`` — the code the graph's ``apply_commands`` and ``executor`` nodes
    run — and, given a learned ``policy``, its choice from the same state (the executor node's hook); on
    the zero-shot tasks also the choice of ``unseen``, a model trained without them (``unseen`` key)."""
    from dialogue.execution.policy_learned import candidates
    from dialogue.execution.policy_offline import decide

    turns: list[Turn] = []
    for s in replay(d, library):
        t = Turn(gold=s.gold, pred="", task=s.task, dialogue=s.dialogue, gold_slots=s.gold_slots, pred_slots=[])
        if predict:
            # cost as the thread's CPU time: the machine is shared, and wall time would count the waits
            # for a core as the executor's (both policies are timed the same way, in the same run)
            t0 = time.thread_time()
            proposal = decide(s.wf, s.interp, s.frame, s.reading, s.messages, [])
            t["cost"] = time.thread_time() - t0
            t["pred"], t["pred_slots"] = label_of(proposal), query_slots(proposal)
            if policy is not None:
                # the ceiling of any ranker: is the wizard's action among the candidates at all (``oracle``:
                # the gold label when it is, else the rules' own)
                labels = {candidate_label(c) for c in candidates(s.wf, s.interp, s.frame, proposal, s.messages)}
                t["oracle"] = s.gold if s.gold in labels else t["pred"]
                t0 = time.thread_time()
                chosen, vetoed = policy.choice(s.wf, s.interp, s.frame, s.reading, s.messages, proposal, [])
                t["learned_cost"] = t["cost"] + time.thread_time() - t0
                t["learned"], t["learned_slots"] = label_of(chosen), query_slots(chosen)
                t["vetoed"] = vetoed
                if policy.model.gate is not None:  # the ranker's own ranking, without its Gate
                    chosen, _ = policy.ungated().choice(s.wf, s.interp, s.frame, s.reading, s.messages, proposal, [])
                    t["ungated"] = label_of(chosen)
            if unseen is not None and s.task in ZERO_SHOT_TASKS:
                chosen, _ = unseen.choice(s.wf, s.interp, s.frame, s.reading, s.messages, proposal, [])
                t["unseen"], t["unseen_slots"] = label_of(chosen), query_slots(chosen)
        turns.append(t)
    return turns


def prf(gold: list[str], pred: list[str]) -> dict[str, float]:
    """Accuracy, macro F1 (over the labels of gold and predictions, as sklearn) and support-weighted F1."""
    n = len(gold)
    if not n:
        return {"n": 0, "accuracy": float("nan"), "macro_f1": float("nan"), "weighted_f1": float("nan")}
    tp, fp, fn = Counter(), Counter(), Counter()
    for g, p in zip(gold, pred):
        if g == p:
            tp[g] += 1
        else:
            fp[p] += 1
            fn[g] += 1
    support = Counter(gold)
    f1 = {}
    for lab in set(gold) | set(pred):
        prec = tp[lab] / (tp[lab] + fp[lab]) if tp[lab] + fp[lab] else 0.0
        rec = tp[lab] / (tp[lab] + fn[lab]) if tp[lab] + fn[lab] else 0.0
        f1[lab] = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"n": n, "accuracy": sum(tp.values()) / n, "macro_f1": sum(f1.values()) / len(f1),
            "weighted_f1": sum(f1[lab] * support[lab] for lab in support) / n}


def majority_labels(path: Path, library, limit: int = 0) -> dict[str, str]:
    """Most frequent wizard label per task on the train split (the baseline never sees dev)."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for d in iter_dialogues(path, "train", limit):
        for t in evaluate_dialogue(d, library, predict=False):
            counts[t["task"]][t["gold"]] += 1
    return {task: c.most_common(1)[0][0] for task, c in counts.items()}


_LIB = None
_POLICY = None
_UNSEEN = None


def _init_worker(library_dir: str, policy_spec: str = "", unseen_spec: str = "") -> None:
    global _LIB, _POLICY, _UNSEEN
    from dialogue.execution.policy_learned import load_policy
    from workflows.library import load_library

    _LIB = load_library(library_dir)
    _POLICY = load_policy(policy_spec) if policy_spec else None
    _UNSEEN = load_policy(unseen_spec) if unseen_spec else None


def _worker(d: dict) -> list[Turn]:
    return evaluate_dialogue(d, _LIB, policy=_POLICY, unseen=_UNSEEN)


def text_classifier_labels(path: Path, library, dev_dialogues: list[dict], limit: int = 0) -> list[str]:
    """The plain text classifier (``evals.text_baseline``) fitted on the train split's replayed steps and
    applied to ``dev_dialogues``' steps, in replay order (the same turns the executors are scored on)."""
    from evals.text_baseline import TextClassifier, text_inputs

    xs, ys = [], []
    for d in iter_dialogues(path, "train", limit):
        for s in replay(d, library):
            xs.append(text_inputs(s))
            ys.append(s.gold)
    clf = TextClassifier().fit(xs, ys)
    return clf.predict([text_inputs(s) for d in dev_dialogues for s in replay(d, library)])


def run(data: Path, split: str = "dev", limit: int = 0, library_dir: Path | None = None,
        workers: int = 2, policy: str = "", text: bool = False, unseen: str = "", every: int = 1,
        predictions: Path | None = None) -> dict[str, Any]:
    """The interpreter's (``offline``) and the majority baseline's scores; with ``policy`` (``auto`` or
    ``learned:PATH``) the learned policy's beside them (``learned``), with ``text`` the text classifier's,
    with ``unseen`` (``learned:PATH`` of a model trained without the zero-shot tasks) that model's on the
    zero-shot tasks (``learned_unseen``: tasks it never saw).  ``every`` > 1 scores every k-th dialogue of
    ``split`` (a sample for development; the train-side fits are unchanged).  ``predictions``: a JSONL file
    with every scored turn's labels (``write_predictions``)."""
    from dialogue.execution.policy_learned import load_policy
    from workflows.importers.star import import_star
    from workflows.library import load_library

    root = star_dir(data)
    if library_dir is None:
        library_dir = Path(tempfile.mkdtemp(prefix="flowdesk-star-"))
        import_star(root, library_dir)
    library = load_library(library_dir)
    learned = load_policy(policy) if policy else None  # a clear error before any work
    unseen_policy = load_policy(unseen) if unseen else None
    t0 = time.perf_counter()
    turns: list[Turn] = []
    dialogues = list(iter_dialogues(root / "dialogues.jsonl.gz", split, limit, every))
    if workers > 1 and len(dialogues) > 50:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(workers, initializer=_init_worker, initargs=(str(library_dir), policy, unseen)) as pool:
            for part in pool.imap(_worker, dialogues, chunksize=20):
                turns.extend(part)
    else:
        for d in dialogues:
            turns.extend(evaluate_dialogue(d, library, policy=learned, unseen=unseen_policy))
    if text:
        for t, label in zip(turns, text_classifier_labels(root / "dialogues.jsonl.gz", library, dialogues, limit)):
            t["text"] = label
    dialogues = len(dialogues)
    elapsed = time.perf_counter() - t0
    if predictions is not None:
        write_predictions(turns, predictions)
    majority = majority_labels(root / "dialogues.jsonl.gz", library, limit)
    for t in turns:
        t["baseline"] = majority.get(t["task"], "hello")

    def slots_exact(sel: list[Turn], key: str) -> float:
        queries = [t for t in sel if t["gold"].startswith("query") and t[key] == t["gold"]]
        return (sum(t["gold_slots"] == t[f"{key}_slots"] for t in queries) / len(queries)) if queries else float("nan")

    def block(sel: list[Turn]) -> dict[str, Any]:
        out = {"offline": prf([t["gold"] for t in sel], [t["pred"] for t in sel]),
               "baseline": prf([t["gold"] for t in sel], [t["baseline"] for t in sel]),
               "query_slots_exact": slots_exact(sel, "pred")}
        if learned is not None:
            out["learned"] = prf([t["gold"] for t in sel], [t["learned"] for t in sel])
            out["learned_query_slots_exact"] = slots_exact(sel, "learned")
            out["oracle"] = prf([t["gold"] for t in sel], [t["oracle"] for t in sel])
            # better-ranked learned choices the controllers' proposal checks turned down
            out["learned_vetoed_share"] = (sum(t["vetoed"] > 0 for t in sel) / len(sel)) if sel else float("nan")
            if sel and "ungated" in sel[0]:
                out["learned_ungated"] = prf([t["gold"] for t in sel], [t["ungated"] for t in sel])
                out["learned_override_share"] = sum(t["learned"] != t["pred"] for t in sel) / len(sel)
        if text:
            out["text"] = prf([t["gold"] for t in sel], [t["text"] for t in sel])
        tried = [t for t in sel if "unseen" in t]
        if tried:
            out["learned_unseen"] = prf([t["gold"] for t in tried], [t["unseen"] for t in tried])
        return out

    tasks = sorted({t["task"] for t in turns})
    confusions = Counter((t["gold"], t["pred"]) for t in turns if t["gold"] != t["pred"]
                         and t["task"] not in ZERO_SHOT_TASKS)
    # the wizard's actions no candidate stands for (what bounds the ``oracle`` row)
    missing = Counter(t["gold"] for t in turns if "oracle" in t and t["oracle"] != t["gold"])
    costs = {k: sum(t.get(k, 0.0) for t in turns) / len(turns) if turns else 0.0 for k in ("cost", "learned_cost")}
    return {
        "split": split, "every": every, "dialogues": dialogues, "turns": len(turns), "seconds": round(elapsed, 1),
        "policy": policy or "interpreter", "unseen_policy": unseen, "text_classifier": text,
        "ms_per_turn": {"interpreter": round(1000 * costs["cost"], 3),
                        **({"learned": round(1000 * costs["learned_cost"], 3)} if learned is not None else {})},
        "overall": block(turns),
        "seen": block([t for t in turns if t["task"] not in ZERO_SHOT_TASKS]),
        "zero_shot": block([t for t in turns if t["task"] in ZERO_SHOT_TASKS]),
        "per_task": {task: block([t for t in turns if t["task"] == task]) for task in tasks},
        "zero_shot_tasks": list(ZERO_SHOT_TASKS),
        "top_confusions_seen": [[g, p, n] for (g, p), n in confusions.most_common(15)],
        "missing_from_candidates": [[g, n, sum(t["gold"] == g for t in turns)] for g, n in missing.most_common(15)],
        "published": [{"source": a, "setting": b, "figure": c} for a, b, c in PUBLISHED],
    }


PREDICTION_KEYS = ("dialogue", "task", "gold", "pred", "pred_slots", "learned", "learned_slots", "vetoed", "ungated",
                   "oracle", "unseen", "unseen_slots", "text")


def write_predictions(turns: list[Turn], path: Path) -> Path:
    """One JSON line per scored turn, in replay order: its dialogue id, task and the labels (no dialogue text),
    so two versions of a policy can be compared turn by turn (``cmp`` of the files: the same decisions)."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for t in turns:
            f.write(json.dumps({k: t[k] for k in PREDICTION_KEYS if k in t}) + "\n")
    return path


def summary_of(metrics: dict[str, Any]) -> dict[str, float]:
    """The headline figures (offline executor vs the majority baseline)."""
    o, ms = metrics["overall"], metrics["ms_per_turn"]
    return {"weighted_f1": o["offline"]["weighted_f1"], "accuracy": o["offline"]["accuracy"],
            "macro_f1": o["offline"]["macro_f1"], "baseline_weighted_f1": o["baseline"]["weighted_f1"],
            "baseline_accuracy": o["baseline"]["accuracy"],
            "seen_weighted_f1": metrics["seen"]["offline"]["weighted_f1"],
            "zero_shot_weighted_f1": metrics["zero_shot"]["offline"]["weighted_f1"], "turns": metrics["turns"],
            # the other policies beside the interpreter, when they were evaluated
            **{f"{k}_{part}weighted_f1": metrics[p][k]["weighted_f1"]
               for k in ("learned", "learned_ungated", "oracle", "text") if k in o
               for part, p in (("", "overall"), ("seen_", "seen"), ("zero_shot_", "zero_shot"))},
            **({"learned_unseen_zero_shot_weighted_f1": metrics["zero_shot"]["learned_unseen"]["weighted_f1"]}
               if "learned_unseen" in metrics["zero_shot"] else {}),
            **({"learned_cost_ratio": ms["learned"] / max(ms["interpreter"], 1e-9)} if "learned" in ms else {}),
            **({"learned_vetoed_share": o["learned_vetoed_share"],
                "learned_query_slots_exact": o["learned_query_slots_exact"]} if "learned" in o else {})}


def write_report(metrics: dict[str, Any], out: Path) -> Path:
    metrics["summary"] = summary_of(metrics)
    rep = Report(out, f"Next-action prediction on STAR ({metrics['split']} split)")
    rep.text(
        f"{metrics['dialogues']} dialogues"
        + (f" (a sample: 1 in {metrics['every']} of the split)" if metrics.get("every", 1) > 1 else "")
        + f", {metrics['turns']} wizard actions scored "
        f"({metrics['seconds']} s). Gold history, the task's imported PDL, the offline executor (no LLM). "
        "A query counts by its label (query / query_check / query_book); `query slots exact` is the share of "
        "correctly predicted queries whose constrained slots equal the wizard's. Baseline: the task's most "
        "frequent wizard label on the train split. Zero-shot tasks (fixed before development, never tuned on): "
        + ", ".join(metrics["zero_shot_tasks"]) + ".")
    rows = []
    for part in ("overall", "seen", "zero_shot"):
        for policy in ("offline", "learned", "learned_ungated", "learned_unseen", "oracle", "text", "baseline"):
            if policy not in metrics[part] or policy == "learned_unseen" and part != "zero_shot":
                continue
            m = metrics[part][policy]
            rows.append([part, policy, m["n"], m["accuracy"], m["macro_f1"], m["weighted_f1"]])
    rep.table("Summary", ["tasks", "policy", "turns", "accuracy", "macro F1", "weighted F1"], rows)
    nan = float("nan")
    if "learned" in metrics["overall"]:
        o = metrics["overall"]
        rep.text(f"`learned`: the learned executor policy ({metrics['policy']}) choosing from the same states; "
                 f"share of turns where the controllers' proposal checks vetoed a better-ranked choice "
                 f"{o['learned_vetoed_share']:.3f}; query slots exact {o['learned_query_slots_exact']:.3f}; "
                 f"CPU ms per turn {metrics['ms_per_turn']} (interpreter vs interpreter + ranker; "
                 f"{metrics['summary'].get('learned_cost_ratio', nan):.2f}x). `text`: the plain "
                 "text classifier (evals/text_baseline.py, fitted on the train split), when evaluated. "
                 "`learned_ungated`: the same ranker without its gate (the best-ranked allowed action always "
                 "wins; the default before the gate); the gated default changes the interpreter's label in "
                 f"{o.get('learned_override_share', float('nan')):.3f} of the turns. "
                 "`learned_unseen`: a model trained without the zero-shot tasks "
                 f"({metrics.get('unseen_policy') or 'not evaluated'}), scored on them only. "
                 "`oracle`: the best any ranker over the same candidates could do (the wizard's action when a "
                 "candidate stands for it, else the rules' proposal).")
        rep.table("Wizard actions no candidate stands for (most frequent)", ["gold", "missing", "of"],
                  metrics.get("missing_from_candidates", []))
    rep.table("Per task", ["task", "zero-shot", "turns", "accuracy", "macro F1", "weighted F1", "baseline wF1",
                           "query slots exact", "learned wF1", "learned (unseen) wF1", "learned query slots exact",
                           "text wF1"],
              [[t, "yes" if t in ZERO_SHOT_TASKS else "", b["offline"]["n"], b["offline"]["accuracy"],
                b["offline"]["macro_f1"], b["offline"]["weighted_f1"], b["baseline"]["weighted_f1"],
                b["query_slots_exact"], b.get("learned", {}).get("weighted_f1", nan),
                b.get("learned_unseen", {}).get("weighted_f1", nan), b.get("learned_query_slots_exact", nan),
                b.get("text", {}).get("weighted_f1", nan)] for t, b in metrics["per_task"].items()])
    rep.table("Most frequent errors (seen tasks)", ["gold", "predicted", "count"], metrics["top_confusions_seen"])
    rep.text(PUBLISHED_TEXT)
    tasks = list(metrics["per_task"])
    rep.bar_plot("per_task_weighted_f1", tasks,
                 {"offline executor": [metrics["per_task"][t]["offline"]["weighted_f1"] for t in tasks],
                  **({"learned policy": [metrics["per_task"][t]["learned"]["weighted_f1"] for t in tasks]}
                     if "learned" in metrics["overall"] else {}),
                  "majority baseline": [metrics["per_task"][t]["baseline"]["weighted_f1"] for t in tasks]},
                 "weighted F1", "Next-action weighted F1 per STAR task")
    return rep.write(metrics)


PUBLISHED_TEXT = """## Published figures (context, not a like-for-like comparison)

STAR's models (Mosig et al. 2020, arXiv 2010.11853) and SAM (Mehri & Eskenazi 2021, SIGDIAL,
arXiv 2106.07056) are trained classifiers over the 150+ STAR action labels, evaluated on their own
random split of all 6,652 dialogues, in a *standard* setting (train and test on the same tasks) and in
*zero-shot task/domain transfer* (leave one task/domain out). The sources reachable from this machine give
SAM's headline only — "+22 F1 over prior work in zero-shot settings" (weighted F1, task transfer) — not
the table values, so no number is quoted here as theirs. Differences to keep in mind: our policy is not
trained at all (every task is zero-shot for it; the "seen" tasks only differ in that we read their
errors on the train split while writing the interpreter), it predicts one of the task's labels or a query,
and our split is DialogueID % 5 in {3, 4} of the 5,322 public dialogues."""


def checked_star_args(dataset: str, split: str, data: str | None) -> str:
    """The data directory for a STAR command, or a typer error naming the option that is wrong."""
    if dataset != "star":
        raise typer.BadParameter("only --dataset star is supported", param_hint="--dataset")
    if split not in SPLITS:
        raise typer.BadParameter(f"one of {sorted(SPLITS)}", param_hint="--split")
    data = data or default_data_dir()
    if not (star_dir(data) / "dialogues.jsonl.gz").exists():
        raise typer.BadParameter(f"{data}: no star/dialogues.jsonl.gz here", param_hint="--data")
    return data


def next_action_command(
    dataset: str = typer.Option("star", "--dataset", help="Dataset (only star)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Data directory (default: $FLOWDESK_DATA or ../shared/data)."),
    split: str = typer.Option("dev", "--split", help="train | dev | all (DialogueID % 5: train 1,2; dev 3,4)."),
    out: Path = typer.Option(Path("reports/next-action-star"), "--out", help="Report directory."),
    limit: int = typer.Option(0, "--limit", help="At most this many dialogues (0 = all)."),
    every: int = typer.Option(1, "--every", min=1, help="Score every n-th dialogue of the split (a sample)."),
    model: str = typer.Option("auto", "--model", help="Also score a learned executor policy: auto (the bundled "
                                                      "model, the default executor policy), learned:PATH (from "
                                                      "`flowdesk train executor`) or none."),
    unseen_model: str = typer.Option("", "--unseen-model", help="learned:PATH of a model trained without the "
                                                                "zero-shot tasks (`flowdesk train executor "
                                                                "--exclude zero-shot`), scored on those tasks."),
    predictions: Optional[Path] = typer.Option(None, "--predictions", help="Also write every scored turn's "
                                               "labels to this JSONL file (to compare two versions turn by turn)."),
    text: bool = typer.Option(False, "--text/--no-text", help="Also score the plain text classifier baseline "
                                                              "(fitted on the train split)."),
) -> None:
    """Turn-level next-action prediction of the offline PDL executor on STAR."""
    data = checked_star_args(dataset, split, data)
    from dialogue.execution.policy_learned import PolicyError

    try:
        metrics = run(data, split, limit, policy="" if model == "none" else model, text=text, unseen=unseen_model,
                      every=every, predictions=predictions)
    except PolicyError as e:
        raise typer.BadParameter(str(e), param_hint="--model") from None
    path = write_report(metrics, out)
    o = metrics["overall"]["offline"]
    typer.echo(f"{path}: {metrics['turns']} turns; accuracy {o['accuracy']:.3f}, macro F1 {o['macro_f1']:.3f}, "
               f"weighted F1 {o['weighted_f1']:.3f} (baseline wF1 {metrics['overall']['baseline']['weighted_f1']:.3f}); "
               f"zero-shot wF1 {metrics['zero_shot']['offline']['weighted_f1']:.3f}")
