"""``flowdesk train spans``: fit the free-text span reader (``dialogue.understanding.spans``) on SGD and STAR train.

Rows: every user turn, with the free-text slots (``slots.slot_kind`` string or person) of its service or
task that it may fill — those without a value yet, and those it gives — as ``spans.Target``s (asked: the
agent's previous turn requested the slot).
- SGD marks each free-text value's characters in the user's turn (``frames[].slots``): that span is the
  slot's, every other candidate span is not.
- STAR marks none; the wizard's queries name the values (``Constraints``): a constrained free-text value is
  the slot's in the last user message before the query that says it as a candidate span (weak labels: a
  value the wizard never queried counts as no value).
Every candidate span x target pair is a row (``spans.design``), negatives subsampled (``NEG_KEEP``,
weighted back).  A logistic regression (scikit-learn, ``C``) over the hashed features; weights under
``PRUNE`` are dropped.  The threshold maximises values right minus ``FP_COST`` x values wrong on out-of-fold
reads over train (two folds by dialogue): a wrong value is acted on, a missing one is asked for.

Dev is reported, never fitted: SGD dev (whose services are partly new), STAR dev, and STAR's zero-shot tasks
read by a model fitted without them (``evals.next_action.ZERO_SHOT_TASKS``).  Writes the model (weights by
hash bucket, counts; no text) and ``report.md``, ``metrics.json`` and ``spans.png`` in ``--report``.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from .datasets import default_data_dir

C = 1.0
NEG_KEEP = 0.3  # the share of negative rows kept (each weighted 1 / NEG_KEEP)
PRUNE = 0.02  # smaller weights are not stored
FP_COST = 2.0
THRESHOLDS = tuple(round(0.3 + 0.05 * i, 2) for i in range(12))  # 0.3 .. 0.85


@dataclass
class Row:
    """One user turn: its text, the slots it may fill and the gold spans (slot -> characters)."""

    source: str  # sgd | star
    dialogue: str
    task: str
    text: str
    targets: list
    gold: dict[str, tuple[int, int]]


def _norm(value: Any) -> str:
    return re.sub(r"[^\w]+", " ", str(value).lower()).strip()


def _free_slots(slots) -> dict[str, tuple[tuple[str, ...], str]]:
    from dialogue.understanding.slots import slot_kind
    from dialogue.understanding.spans import slot_words

    return {s.name: (slot_words(s.name, s.description), k) for s in slots
            if (k := slot_kind(s)) in ("string", "person")}


def sgd_rows(data: Path, split: str, cache: Path, every: int = 1) -> list[Row]:
    from dialogue.understanding.spans import Target
    from workflows.library import load_library

    from .datasets.sgd import every_dialogue, library, user_turns

    lib = load_library(library(data, cache / f"sgd-{split}", split))
    by_service: dict[str, dict] = defaultdict(dict)
    for wf in lib.workflows.values():
        service = next((t.split(":", 1)[1] for t in wf.tags if t.startswith("service:")), "")
        by_service[service].update(_free_slots(wf.slots))
    out: list[Row] = []
    for raw in every_dialogue(data, split, every):
        state: dict[str, dict] = defaultdict(dict)
        for turn, asked in user_turns(raw):
            for f in turn.get("frames", []):
                slots = by_service.get(f["service"], {})
                gold = {s["slot"]: (s["start"], s["exclusive_end"]) for s in f.get("slots", []) if s["slot"] in slots}
                before, state[f["service"]] = state[f["service"]], dict(f.get("state", {}).get("slot_values", {}))
                targets = [Target(n, w, kind, n in asked[f["service"]]) for n, (w, kind) in slots.items()
                           if n not in before or n in gold]
                if targets:
                    out.append(Row("sgd", str(raw["dialogue_id"]), f["service"], turn["utterance"], targets, gold))
    return out


def star_rows(data: Path, split: str, every: int = 1) -> list[Row]:
    from dialogue.execution.interpreter import Interpreter
    from dialogue.understanding.spans import Target, candidate_spans
    from workflows.extraction.star import constraints, iter_dialogues, star_dir
    from workflows.library import load_library

    from .datasets.star_actions import answer_name
    from .train_executor import star_library_dir

    lib = load_library(star_library_dir(data))
    interps: dict[str, Interpreter] = {}
    free = {name: _free_slots(wf.slots) for name, wf in lib.workflows.items()}
    out: list[Row] = []
    for d in iter_dialogues(star_dir(data) / "dialogues.jsonl.gz", split, 0, every):
        caps = [c["Task"] for c in d["Scenario"].get("WizardCapabilities") or []]
        active = caps[0] if len(caps) == 1 else None
        said: list[tuple[str, str, list[str]]] = []  # (task, text, asked) per user message
        queries: list[tuple[int, str, dict]] = []  # (messages before it, task, constraints)
        asked: list[str] = []
        for e in d["Events"]:
            agent, action = e.get("Agent"), e.get("Action")
            if agent == "Wizard" and action == "select_task":
                active = e.get("Task")
                continue
            wf = lib.workflows.get(active) if active else None
            if wf is None:
                continue
            if agent == "User" and action == "utter":
                said.append((active, e.get("Text") or "", asked))
            elif agent == "Wizard" and action == "query":
                queries.append((len(said), active, constraints(e)))
            elif agent == "Wizard":
                label = e.get("ActionLabel") if action in ("pick_suggestion", "utter") else None
                asked = []
                if label and label != "custom":
                    interp = interps.setdefault(active, Interpreter(wf))
                    asked = list(interp.implied_targets(answer_name(wf, label)))
        gold: dict[int, dict] = defaultdict(dict)
        for upto, task, args in queries:
            for slot, value in args.items():
                if slot not in free[task] or value in (None, ""):
                    continue
                for i in range(upto - 1, -1, -1):  # the value's last mention before the query
                    t, text, _ = said[i]
                    spans = [s for s in candidate_spans(text) if t == task and _norm(text[s.start:s.end]) == _norm(value)]
                    if spans:
                        gold[i][slot] = (spans[0].start, spans[0].end)
                        break
        given: dict[str, set] = defaultdict(set)
        for i, (task, text, ask) in enumerate(said):
            targets = [Target(n, w, kind, n in ask) for n, (w, kind) in free[task].items()
                       if n not in given[task] or n in gold[i]]
            given[task].update(gold[i])
            if targets:
                out.append(Row("star", str(d["DialogueID"]), task, text, targets, dict(gold[i])))
    return out


def matrix(rows: list[Row], neg_keep: float = NEG_KEEP, seed: int = 0):
    """The rows' pairs as a sparse matrix over hash buckets, labels and weights (negatives subsampled)."""
    import numpy as np
    from scipy.sparse import csr_matrix

    from dialogue.understanding.spans import DIM, design

    rng = np.random.default_rng(seed)
    idx: list[int] = []
    ptr, y, w = [0], [], []
    for r in rows:
        spans, pairs = design(r.text, r.targets)
        gold = {n: _norm(r.text[a:b]) for n, (a, b) in r.gold.items()}
        for si, ti, buckets in pairs:
            s, name = spans[si], r.targets[ti].name
            label = name in gold and _norm(r.text[s.start:s.end]) == gold[name]
            if not label and rng.random() > neg_keep:
                continue
            idx.extend(buckets)
            ptr.append(len(idx))
            y.append(label)
            w.append(1.0 if label else 1.0 / neg_keep)
    X = csr_matrix((np.ones(len(idx), dtype=np.float32), np.asarray(idx), np.asarray(ptr)), shape=(len(y), DIM))
    X.sum_duplicates()
    X.data[:] = 1.0
    return X, np.asarray(y), np.asarray(w)


def fit(rows: list[Row], threshold: float = 0.5, provenance: dict | None = None):
    """A ``SpanModel`` fitted on ``rows``."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from dialogue.understanding.spans import SpanModel

    X, y, w = matrix(rows)
    cols = np.unique(X.indices)
    lr = LogisticRegression(C=C, solver="liblinear", max_iter=300, random_state=0).fit(X[:, cols], y, sample_weight=w)
    coef = lr.coef_[0]
    keep = np.abs(coef) >= PRUNE
    return SpanModel(buckets={int(b): round(float(c), 3) for b, c in zip(cols[keep], coef[keep])},
                     intercept=round(float(lr.intercept_[0]), 4), threshold=threshold,
                     provenance={**(provenance or {}), "rows": int(len(y)), "positives": int(y.sum()),
                                 "weights_kept": int(keep.sum()), "C": C, "neg_keep": NEG_KEEP})


def counts(model, rows: list[Row], thresholds) -> dict[float, dict]:
    """Per threshold, the values right / wrong of the slots not just asked (the ones the reader fills), and
    the gold values.  One read at the lowest threshold serves them all: ``read`` places spans best first and
    stops below its threshold, so a higher threshold only cuts the tail of the same placements."""
    m = model.model_copy(update={"threshold": min(thresholds)})
    placed: list[tuple[float, bool]] = []  # (probability, right) of every value placed
    gold_n = 0
    for r in rows:
        targets = [t for t in r.targets if not t.pending]
        names = {t.name for t in targets}
        gold = {n: _norm(r.text[a:b]) for n, (a, b) in r.gold.items() if n in names}
        gold_n += len(gold)
        placed += [(p.probability, gold.get(n) == _norm(p.value)) for n, p in m.read(r.text, targets).items()]
    out = {}
    for th in thresholds:
        right = sum(ok for p, ok in placed if p >= th)
        wrong = sum(not ok for p, ok in placed if p >= th)
        out[th] = {"gold": gold_n, "right": right, "wrong": wrong, "precision": right / max(1, right + wrong),
                   "recall": right / max(1, gold_n), "net": right - FP_COST * wrong}
    return out


def train_spans(data: Path, out: Path, report: Path, cache: Path, sgd_every: int = 2, show_progress: bool = True) -> dict:
    from rich.progress import Progress

    from .next_action import ZERO_SHOT_TASKS

    started = time.perf_counter()
    with Progress(disable=not show_progress) as prog:
        step = prog.add_task("reading SGD and STAR", total=8)
        train = sgd_rows(data, "train", cache, sgd_every)
        prog.advance(step)
        train += star_rows(data, "train")
        prog.advance(step)
        dev = {"sgd-dev": sgd_rows(data, "dev", cache), "star-dev": star_rows(data, "dev")}
        prog.advance(step)
        # the threshold: on out-of-fold reads over train (two folds by dialogue)
        fold = {key: i % 2 for i, key in enumerate(sorted({(r.source, r.dialogue) for r in train}))}
        net = defaultdict(float)
        oof_counts: dict[float, list[dict]] = defaultdict(list)
        for k in (0, 1):
            part = fit([r for r in train if fold[(r.source, r.dialogue)] != k])
            held = [r for r in train if fold[(r.source, r.dialogue)] == k]
            for th, c in counts(part, held, THRESHOLDS).items():
                net[th] += c["net"]
                oof_counts[th].append(c)
            prog.advance(step)
        threshold = max(THRESHOLDS, key=lambda th: (net[th], -abs(th - 0.5)))
        model = fit(train, threshold, {"trained_on": f"sgd train (1 in {sgd_every} dialogues) + star train",
                                       "sgd_rows": sum(r.source == "sgd" for r in train),
                                       "star_rows": sum(r.source == "star" for r in train)})
        prog.advance(step)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(model.model_dump_json() + "\n", encoding="utf-8")
        # never-seen tasks: STAR's zero-shot tasks read by a model fitted without them
        unseen = fit([r for r in train if not (r.source == "star" and r.task in ZERO_SHOT_TASKS)], threshold)
        prog.advance(step)
        zero_shot = [r for r in dev["star-dev"] if r.task in ZERO_SHOT_TASKS]
        curve = {name: counts(model, rows, THRESHOLDS) for name, rows in dev.items()}
        summary = {name: cs[threshold] for name, cs in curve.items()}
        summary["star-dev zero-shot tasks (model without them)"] = counts(unseen, zero_shot, [threshold])[threshold]
        summary["star-dev zero-shot tasks (this model)"] = counts(model, zero_shot, [threshold])[threshold]
        prog.advance(step)
    oof = {str(th): {"right": sum(c["right"] for c in cs), "wrong": sum(c["wrong"] for c in cs),
                     "gold": sum(c["gold"] for c in cs), "net": net[th]} for th, cs in oof_counts.items()}
    metrics = {"summary": summary, "train_out_of_fold": oof,
               "model": {"threshold": threshold, **model.provenance},
               "curve": {name: {str(th): c for th, c in cs.items()} for name, cs in curve.items()},
               "seconds": round(time.perf_counter() - started, 1)}
    _write_report(report, metrics, curve)
    return metrics


def _write_report(report: Path, metrics: dict, curve: dict) -> None:
    from .report import Report

    m = metrics["model"]
    rep = Report(report, "Free-text span reader (`flowdesk train spans`)")
    rep.text("Which words of a user's message are the value of which free-text slot, for the values the rules "
             "do not place (`dialogue/understanding/spans.py`; `slots.fill_slots` asks it for the empty "
             "free-text slots that were not just asked). Rows: every candidate span x free-text slot of a user "
             f"turn; fitted on {m['trained_on']} ({m['sgd_rows']} SGD and {m['star_rows']} STAR turns, "
             f"{m['rows']} pairs, {m['positives']} values, {m['weights_kept']} weights kept). The threshold "
             f"{m['threshold']} maximises values right minus {FP_COST:g} x values wrong on out-of-fold reads over "
             "train. Scored here on the slots that were not just asked (the ones the reader fills). SGD marks "
             "every value's characters; STAR's labels are the wizard's query constraints found in the user's "
             "words, so a value said but never queried counts as wrong: STAR precision is a lower bound.")
    rep.table("Dev (never fitted)", ["split", "values", "right", "wrong", "precision", "recall"],
              [(name, c["gold"], c["right"], c["wrong"], c["precision"], c["recall"])
               for name, c in metrics["summary"].items()])
    ths = [float(t) for t in next(iter(metrics["curve"].values()))]
    series = {}
    for name, cs in curve.items():
        series[f"{name} precision"] = [c["precision"] for c in cs.values()]
        series[f"{name} recall"] = [c["recall"] for c in cs.values()]
    rep.line_plot("spans", ths, series, "threshold", "share", "Span reader on dev by threshold")
    rep.write(metrics)


def train_command(
    data: Path = typer.Option(None, help="Directory holding the datasets (default ../shared/data)."),
    out: Path = typer.Option(None, help="Model file (default: the bundled dialogue/understanding/spans_model.json)."),
    report: Path = typer.Option(Path("reports/spans-train"), help="Report directory."),
    cache: Path = typer.Option(Path(".flowdesk/eval"), help="Imported libraries."),
    sgd_every: int = typer.Option(2, "--sgd-every", min=1, help="Read every n-th SGD train dialogue."),
) -> None:
    """Fit the free-text span reader: which words of a message are which slot's value."""
    from dialogue.understanding.spans import MODEL_PATH

    metrics = train_spans(Path(data) if data else default_data_dir(), Path(out) if out else MODEL_PATH, report,
                          cache, sgd_every)
    for name, c in metrics["summary"].items():
        typer.echo(f"{name}: precision {c['precision']:.3f}, recall {c['recall']:.3f} ({c['right']} right, "
                   f"{c['wrong']} wrong of {c['gold']})")
    typer.echo(f"model: {out or MODEL_PATH} (threshold {metrics['model']['threshold']}); report: {report / 'report.md'}")
