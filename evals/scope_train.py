"""``flowdesk train scope``: fit the scope gate (``dialogue.understanding.scope``) on the training splits.

Rows: the first user turn with a gold workflow of every sampled SGD train and STAR train dialogue, read
as the retriever node reads a turn with no active workflow (dense search of the turn over the whole
library, the nearest workflow's vocabulary, the library's vocabulary).  Each turn gives two rows: against its own library (label
1: the desk has its workflow) and against the library without the gold's whole domain (label 0: a real
request the desk has no workflow for).  A logistic regression (scikit-learn) over the gate's
features; the threshold keeps ``KEEP`` of the in-scope rows on train.  The same rows on SGD dev and
STAR dev are reported (kept in scope / turned away), never used for fitting.

Writes the model (coefficients, threshold, counts; no data text) and ``report.md``, ``metrics.json``
and ``scope.png`` in ``--report``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from .datasets import default_data_dir, load_switch_dataset

KEEP = 0.99  # share of train's in-scope first requests the threshold keeps
SAMPLES = (("sgd", "train", 10), ("star", "train", 5))
DEV = (("sgd", "dev", 10), ("star", "dev", 5))


def scope_rows(dataset: str, split: str, every: int, data: Path, cache: Path, progress=None
               ) -> tuple[list[tuple[float, ...]], list[int]]:
    from dialogue.execution.interpreter import Interpreter, message_words
    from dialogue.understanding.scope import scope_features
    from graph.context import Context
    from memory.retrieval import build_retriever
    from workflows.library import load_library

    dialogues, lib_dir = load_switch_dataset(dataset, data, split, None, cache, False, every)
    library = load_library(lib_dir)
    retriever = build_retriever(library, Context(library=str(lib_dir), store_dir=str(cache / f"store-{dataset}-{split}")),
                                formats=["text"])
    vocab = {n: Interpreter(w).vocabulary for n, w in library.workflows.items()}
    X: list[tuple[float, ...]] = []
    y: list[int] = []
    for dlg in dialogues:
        turn = next((t for t in dlg.user_turns if t.gold), None)
        if progress:
            progress()
        if turn is None:
            continue
        dense = [(c["workflow"], float(c["score"])) for c in
                 retriever.search(turn.text, retriever="dense", strategy="flat", top_k=len(library.workflows))]
        domain = library.workflows[turn.gold].domain
        elsewhere = [(n, s) for n, s in dense if library.workflows[n].domain != domain]
        for ranking, label in ((dense, 1), (elsewhere, 0)):
            words = frozenset().union(*(vocab[n] for n, _ in ranking)) if ranking else frozenset()
            f = scope_features(turn.text, ranking, message_words, vocab.__getitem__, words)
            if f is not None:
                X.append(f), y.append(label)
    return X, y


def _rates(gate, X, y) -> dict:
    kept = [gate.in_scope(x) for x in X]
    pos = [k for k, l in zip(kept, y) if l == 1]
    neg = [not k for k, l in zip(kept, y) if l == 0]
    return {"in_scope_kept": round(sum(pos) / max(1, len(pos)), 4),
            "out_of_scope_turned_away": round(sum(neg) / max(1, len(neg)), 4), "rows": len(y)}


def train_scope(data: Path, out: Path, report: Path, cache: Path, keep: float = KEEP, show_progress: bool = True) -> dict:
    import numpy as np
    from rich.progress import Progress
    from sklearn.linear_model import LogisticRegression

    from dialogue.understanding.scope import FEATURES, ScopeGate

    started = time.perf_counter()
    rows: dict[str, tuple[list, list]] = {}
    with Progress(disable=not show_progress) as prog:
        for ds, split, every in (*SAMPLES, *DEV):
            task = prog.add_task(f"{ds} {split}", total=None)
            rows[f"{ds}-{split}"] = scope_rows(ds, split, every, data, cache, lambda: prog.advance(task))
    X = np.array([x for ds, split, _ in SAMPLES for x in rows[f"{ds}-{split}"][0]])
    y = np.array([v for ds, split, _ in SAMPLES for v in rows[f"{ds}-{split}"][1]])
    model = LogisticRegression(max_iter=1000).fit(X, y)
    threshold = float(np.quantile(model.predict_proba(X)[:, 1][y == 1], 1 - keep))
    gate = ScopeGate(tuple(float(c) for c in model.coef_[0]), float(model.intercept_[0]), threshold)
    evaluation = {name: _rates(gate, *rows[name]) for name in rows}
    doc = {"features": list(FEATURES), "coef": list(gate.coef), "intercept": gate.intercept,
           "threshold": round(threshold, 6), "keep": keep, "train_rows": int(len(y)),
           "trained_on": [f"{ds} {split} every {every}th dialogue" for ds, split, every in SAMPLES]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    metrics = {"summary": {name: evaluation[name] for name in ("sgd-dev", "star-dev")},
               "train": {name: evaluation[name] for name in ("sgd-train", "star-train")}, "model": doc,
               "seconds": round(time.perf_counter() - started, 1)}
    _write_report(report, metrics, rows, gate)
    return metrics


def _write_report(report: Path, metrics: dict, rows: dict, gate) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report.mkdir(parents=True, exist_ok=True)
    (report / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    lines = ["# Scope gate (`flowdesk train scope`)", "",
             "A turn with no active workflow starts a search only when the library serves it. Rows: each sampled "
             "dialogue's first request, against its own library (in scope) and against the library without the "
             "request's domain (out of scope). Fitted on train; the threshold keeps "
             f"{metrics['model']['keep']:.0%} of train's in-scope requests. Dev is reported, never fitted.", "",
             "| split | rows | in-scope requests kept | out-of-scope requests turned away |", "|---|---|---|---|"]
    for name in ("sgd-train", "star-train", "sgd-dev", "star-dev"):
        r = metrics["summary"].get(name) or metrics["train"].get(name)
        lines.append(f"| {name} | {r['rows']} | {r['in_scope_kept']:.3f} | {r['out_of_scope_turned_away']:.3f} |")
    m = metrics["model"]
    terms = " + ".join(f"{c:.3f}·{n}" for c, n in zip(m["coef"], m["features"]))
    lines += ["", f"Model: P(in scope) = σ({m['intercept']:.3f} + {terms}), threshold {m['threshold']:.4f}.",
              "The out-of-scope rows are hard: a request whose domain is gone still meets its neighbours "
              "(a flight against hotels and trains), so few are turned away; requests far from every workflow "
              "(small talk, jokes, the weather at a bank) are the ones the gate is for.", ""]
    (report / "report.md").write_text("\n".join(lines), encoding="utf-8")
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, color in (("sgd-dev", "tab:blue"), ("star-dev", "tab:orange")):
        X, y = rows[name]
        for label, marker in ((1, "o"), (0, "x")):
            pts = [x for x, l in zip(X, y) if l == label]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=8, marker=marker, color=color, alpha=0.5,
                           label=f"{name} {'in' if label else 'out of'} scope")
    ax.set_xlabel("dense cosine of the nearest workflow")
    ax.set_ylabel("share of the turn's words in its vocabulary")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(report / "scope.png", dpi=120)
    plt.close(fig)


def train_command(
    data: Path = typer.Option(None, help="Directory holding the datasets (default ../shared/data)."),
    out: Path = typer.Option(None, help="Model file (default: the bundled dialogue/understanding/scope_model.json)."),
    report: Path = typer.Option(Path("reports/scope-train"), help="Report directory."),
    cache: Path = typer.Option(Path(".flowdesk/eval"), help="Imported libraries and their indexes."),
    keep: float = typer.Option(KEEP, min=0.5, max=1.0, help="Share of train's in-scope requests the threshold keeps."),
) -> None:
    """Fit the scope gate: which turns with no active workflow the library serves at all."""
    from dialogue.understanding.scope import MODEL_PATH

    metrics = train_scope(Path(data) if data else default_data_dir(), Path(out) if out else MODEL_PATH, report, cache,
                          keep)
    for name, r in metrics["summary"].items():
        typer.echo(f"{name}: in scope kept {r['in_scope_kept']:.3f}, out of scope turned away "
                   f"{r['out_of_scope_turned_away']:.3f}")
    typer.echo(f"model: {out or MODEL_PATH}; report: {report / 'report.md'}")
