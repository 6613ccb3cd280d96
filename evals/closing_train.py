"""``flowdesk train closing``: fit the closing detector (``dialogue.understanding.closing``) on SGD train.

Rows: every scored user turn of SGD train with a workflow active (the previous gold, as the
teacher-forced protocol has it) that makes no request and answers nothing pending — the turns the detector
is asked about (a request, a cue or an accepted offer goes on to the switch decision; "I don't know" is
the pending question's answer, ``policy_offline.answers_pending``).  Label: the gold says the turn has no task
(the user ends it).  The turn is read by the same ``lexical_features`` the detector reads.

Terms (the words and word pairs of the user's turn and of the agent's turn before it) are kept when the
training dialogues use them with at least ``MIN_SERVICE_SHARE`` of the services, so no service's own
words enter the model.  A logistic regression (scikit-learn) over the numeric features and the kept
terms; its regularisation (``C_GRID``) and threshold maximise, on out-of-fold predictions over train
(five folds by dialogue), the endings found minus the turns wrongly ended.  SGD dev is reported beside the hand-written markers it
replaces, never fitted.

Writes the model (weights by hash bucket, counts; no data text) and ``report.md``, ``metrics.json`` and
``closing.png`` in ``--report``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from .datasets import default_data_dir, load_switch_dataset

THRESHOLDS = tuple(round(0.2 + 0.05 * i, 2) for i in range(13))  # 0.2 .. 0.8
C_GRID = (1.0, 3.0, 10.0, 30.0, 100.0)  # inverse regularisation strengths tried
MIN_COUNT = 5  # a kept term occurs in at least this many training rows


def closing_rows(split: str, data: Path, cache: Path, progress=None) -> list[dict]:
    """The rows of one SGD split (see the module docstring), each with its reading, label and dialogue."""
    from dialogue.understanding.closing import numeric_features, term_values, terms
    from dialogue.understanding.features import asks_for_something, lexical_features, markers_end_task
    from dialogue.understanding.policy_offline import answers_pending
    from workflows.library import load_library

    dialogues, lib_dir = load_switch_dataset("sgd", data, split, None, cache)
    workflows = load_library(lib_dir).workflows
    rows = []
    for dlg in dialogues:
        agent = ""
        for t in dlg.turns:
            if t.speaker != "user":
                agent = t.text
                continue
            wf = workflows.get(t.prev_gold) if t.prev_gold else None
            if not t.scored or wf is None:
                continue
            feats = lexical_features(t.text, agent, wf, None)
            if asks_for_something(feats) or answers_pending(t.text, None):
                continue
            rows.append({"x": numeric_features(t.text, agent, wf, feats), "terms": terms(t.text, "u") + terms(agent, "a"),
                         "values": term_values(t.text, agent),
                         "y": int(t.gold is None), "service": wf.domain, "dialogue": dlg.id,
                         "markers": markers_end_task(feats)})
        if progress:
            progress()
    return rows


def _counts(pred, y) -> dict:
    y = [int(v) for v in y]
    tp = sum(1 for p, l in zip(pred, y) if p and l)
    fp = sum(1 for p, l in zip(pred, y) if p and not l)
    fn = sum(1 for p, l in zip(pred, y) if not p and l)
    return {"endings": int(sum(y)), "found": tp, "wrongly_ended": fp, "missed": fn, "net": tp - fp,
            "precision": round(tp / max(1, tp + fp), 4), "recall": round(tp / max(1, tp + fn), 4)}


def train_closing(data: Path, out: Path, report: Path, cache: Path, show_progress: bool = True) -> dict:
    import numpy as np
    from rich.progress import Progress
    from scipy.sparse import csr_matrix, hstack
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold, cross_val_predict

    from dialogue.understanding.closing import FEATURES, MIN_SERVICE_SHARE, ClosingModel, bucket

    started = time.perf_counter()
    with Progress(disable=not show_progress) as prog:
        rows = {}
        for split in ("train", "dev"):
            task = prog.add_task(f"sgd {split}", total=None)
            rows[split] = closing_rows(split, data, cache, lambda: prog.advance(task))
    train = rows["train"]
    services = sorted({r["service"] for r in train})
    seen: dict[str, set] = {}
    count: dict[str, int] = {}
    for r in train:
        for t in set(r["terms"]):
            seen.setdefault(t, set()).add(r["service"])
            count[t] = count.get(t, 0) + 1
    kept = sorted({bucket(t) for t, s in seen.items()
                   if len(s) >= MIN_SERVICE_SHARE * len(services) and count[t] >= MIN_COUNT})
    column = {b: i for i, b in enumerate(kept)}

    def matrix(rs):
        num = csr_matrix(np.array([r["x"] for r in rs], dtype=float))
        ind, val, ptr = [], [], [0]
        for r in rs:
            cells = sorted((column[b], v) for b, v in r["values"].items() if b in column)
            ind += [c for c, _ in cells]
            val += [v for _, v in cells]
            ptr.append(len(ind))
        words = csr_matrix((val, ind, ptr), shape=(len(rs), len(kept)))
        return hstack([num, words]).tocsr()

    X, y = matrix(train), np.array([r["y"] for r in train])
    folds = list(GroupKFold(5).split(X, y, groups=[r["dialogue"] for r in train]))
    best = None  # (net, -|threshold - 0.5|), C, threshold, out-of-fold probabilities
    net_by = {}
    for c in C_GRID:
        oof = cross_val_predict(LogisticRegression(C=c, max_iter=5000), X, y, cv=folds, method="predict_proba")[:, 1]
        for th in THRESHOLDS:
            net_by[f"C={c} threshold={th}"] = net = _counts(oof > th, y)["net"]
            if best is None or (net, -abs(th - 0.5)) > best[0]:
                best = ((net, -abs(th - 0.5)), c, th, oof)
    _, c, threshold, oof = best
    lr = LogisticRegression(C=c, max_iter=5000).fit(X, y)
    coef = lr.coef_[0]
    model = ClosingModel(features=list(FEATURES), coef=[round(float(c), 6) for c in coef[:len(FEATURES)]],
                         buckets={b: round(float(w), 6) for b, w in zip(kept, coef[len(FEATURES):]) if abs(w) > 1e-6},
                         intercept=round(float(lr.intercept_[0]), 6), threshold=threshold,
                         provenance={"trained_on": "sgd train", "rows": len(train), "endings": int(y.sum()),
                                     "services": len(services), "terms_kept": len(kept), "C": c,
                                     "min_service_share": MIN_SERVICE_SHARE})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(model.model_dump_json(indent=1) + "\n", encoding="utf-8")

    dev = rows["dev"]
    p_dev = np.array([model.probability_of(r["x"], r["values"]) for r in dev])
    y_dev = [r["y"] for r in dev]
    metrics = {
        "summary": {"sgd-dev": {"detector": _counts(p_dev > threshold, y_dev),
                                "markers": _counts([r["markers"] for r in dev], y_dev)}},
        "train": {"detector_out_of_fold": _counts(oof > threshold, y),
                  "markers": _counts([r["markers"] for r in train], y), "net_out_of_fold": net_by},
        "model": {"threshold": threshold, **model.provenance}, "seconds": round(time.perf_counter() - started, 1)}
    _write_report(report, metrics, p_dev, y_dev, threshold)
    return metrics


def _write_report(report: Path, metrics: dict, p_dev, y_dev, threshold: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report.mkdir(parents=True, exist_ok=True)
    (report / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    m = metrics["model"]
    lines = ["# Closing detector (`flowdesk train closing`)", "",
             "Does a turn end the active task (\"No, thanks!\" to \"anything else?\", \"Maybe another time.\" to an "
             "offer)? Rows: SGD turns with a workflow active (the previous gold) that ask for nothing; label: the gold "
             f"has no task. Fitted on SGD train ({m['rows']} rows, {m['endings']} endings, {m['terms_kept']} terms kept, "
             f"each used with at least {m['min_service_share']:.0%} of the {m['services']} services); the threshold "
             f"{threshold} and C {m['C']} maximise endings found minus turns wrongly ended on out-of-fold predictions over train. "
             "`markers`: the hand-written closing markers the detector replaces. Dev is reported, never fitted.", "",
             "| split | reader | endings | found | wrongly ended | missed | net (found - wrongly ended) |",
             "|---|---|---|---|---|---|---|"]
    for split, block in (("sgd-train (out of fold)", {"detector": metrics["train"]["detector_out_of_fold"],
                                                      "markers": metrics["train"]["markers"]}),
                         ("sgd-dev", metrics["summary"]["sgd-dev"])):
        for reader, c in block.items():
            lines.append(f"| {split} | {reader} | {c['endings']} | {c['found']} | {c['wrongly_ended']} | "
                         f"{c['missed']} | {c['net']} |")
    (report / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, color in ((1, "tab:red"), (0, "tab:blue")):
        ax.hist([p for p, l in zip(p_dev, y_dev) if l == label], bins=40, alpha=0.6, color=color, log=True,
                label="ends the task" if label else "stays in it")
    ax.axvline(threshold, color="k", linestyle="--", label=f"threshold {threshold}")
    ax.set_xlabel("P(the turn ends the task), SGD dev")
    ax.set_ylabel("turns")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(report / "closing.png", dpi=120)
    plt.close(fig)


def train_command(
    data: Path = typer.Option(None, help="Directory holding the datasets (default ../shared/data)."),
    out: Path = typer.Option(None, help="Model file (default: the bundled dialogue/understanding/closing_model.json)."),
    report: Path = typer.Option(Path("reports/closing-train"), help="Report directory."),
    cache: Path = typer.Option(Path(".flowdesk/eval"), help="Imported libraries and their indexes."),
) -> None:
    """Fit the closing detector: which turns end the active task."""
    from dialogue.understanding.closing import MODEL_PATH

    metrics = train_closing(Path(data) if data else default_data_dir(), Path(out) if out else MODEL_PATH, report, cache)
    for reader, c in metrics["summary"]["sgd-dev"].items():
        typer.echo(f"sgd dev, {reader}: {c['found']} of {c['endings']} endings found, {c['wrongly_ended']} turns "
                   f"wrongly ended (net {c['net']})")
    typer.echo(f"model: {out or MODEL_PATH}; report: {report / 'report.md'}")
