"""Fits the text classifier the learned executor's ranker reads as evidence (``dialogue/execution/opinion.py``),
and its cross-fitted opinions of the ranker's training turns.

The ranker must learn how far to trust the classifier on dialogues the classifier did not see, so each
training turn's ``OPINION_FEATURES`` come from a classifier that did not see its dialogue (``cross_fit``):
most dialogues through ``FOLDS`` folds by dialogue, and a share (``TASK_OUT``) through classifiers that
left the dialogue's whole task out (tasks in ``FOLDS`` groups), so the ranker also learns the regime of a
workflow whose actions the classifier never saw as labels (every label of a new task is unknown but the
shared ones: greetings, the question, the out-of-workflow reply).  The classifier stored in the model
file is fitted on all training turns.  Every turn is a training row of the classifier, those whose logged
action no candidate stands for as ``OTHER``.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter

C = 4.0  # the baseline's (``evals/text_baseline.py``)
FOLDS = 4
TASK_OUT = 0.2  # the share of dialogues scored by a classifier that never saw their task
MIN_DF = 2  # a text feature is kept when it occurs in this many training turns (the baseline's min_df)
PRUNE = 0.1  # weights smaller than this are not stored: 127k of 338k on STAR train, the same top label on 99.5%
# of a 1-in-8 sample of train turns (0.2: 97%), the file under 2 MiB


def label_of(t) -> str:
    """A training turn's label (``evals.train_executor.TurnRows``): the gold candidate's action key."""
    from dialogue.execution.opinion import OTHER

    return t.tf.keys[t.gold] if t.gold >= 0 else OTHER


def _inputs(t):
    from dialogue.execution.opinion import inputs

    return inputs(*t.tf.state)


def fit(turns: list) -> "OpinionModel":  # noqa: F821 (dialogue.execution.opinion.OpinionModel)
    """The classifier fitted on ``turns`` (pruned to the weights that matter)."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from sklearn.linear_model import LogisticRegression

    from dialogue.execution.opinion import OpinionModel

    xs = [_inputs(t) for t in turns]
    labels = [label_of(t) for t in turns]
    df = Counter(b for _, text in xs for b, _ in text)
    symbols = {b for sym, _ in xs for b in sym}
    n = len(xs)
    text_kept = {b for b, k in df.items() if k >= MIN_DF}
    buckets = sorted(symbols | text_kept)
    col = {b: i for i, b in enumerate(buckets)}
    is_text = [b in text_kept and b not in symbols for b in buckets]
    idf = [math.log((1 + n) / (1 + df[b])) + 1.0 if text else 1.0 for b, text in zip(buckets, is_text)]
    X = design(xs, col, idf, is_text)
    # (300 iterations at tol 1e-3: the training fits it nine times, see ``cross_fit``)
    lr = LogisticRegression(C=C, max_iter=300, tol=1e-3).fit(X, labels)
    W, b = lr.coef_.T, lr.intercept_  # buckets x classes (classes_ sorted, as ``model.classes``)
    if W.shape[1] == 1:  # two classes: one logit (the second's); as a softmax, the first's is 0
        W, b = np.hstack([np.zeros_like(W), W]), np.concatenate([[0.0], b])
    W = np.round(W * 100)  # hundredths (``OpinionModel.vals``)
    W[np.abs(W) < PRUNE * 100] = 0
    used = np.nonzero((W != 0).any(axis=1))[0]
    M = csr_matrix(W[used])
    M.sort_indices()
    return OpinionModel(classes=[str(x) for x in lr.classes_], buckets=[int(buckets[i]) for i in used],
                        idf=[round(idf[i], 3) if is_text[i] else 0.0 for i in used],
                        counts=np.diff(M.indptr).tolist(), cols=M.indices.tolist(), vals=[int(v) for v in M.data],
                        intercept=[round(float(v), 4) for v in b])


def design(xs: list, col: dict[int, int], idf: list[float], is_text: list[bool]):
    """The classifier's matrix of ``inputs`` outputs (the same values as ``OpinionModel.proba`` reads)."""
    from scipy.sparse import csr_matrix

    from dialogue.execution.opinion import text_norm

    rows, cols, vals = [], [], []
    for r, (sym, text) in enumerate(xs):
        norm = text_norm(text)
        for b in sym:
            if b in col:
                rows.append(r)
                cols.append(col[b])
                vals.append(1.0)
        for b, v in text:
            j = col.get(b)
            if j is not None and is_text[j]:
                rows.append(r)
                cols.append(j)
                vals.append(v * idf[j] / norm)
    return csr_matrix((vals, (rows, cols)), shape=(len(xs), len(col)))


def _unit(key: str) -> float:
    return zlib.crc32(key.encode("utf-8")) / 2 ** 32


def cross_fit(turns: list, scored: list) -> list:
    """``OPINION_FEATURES`` rows of each of ``scored``'s turns (a subset of ``turns``), each from a classifier
    that did not see its dialogue (``TASK_OUT`` of the dialogues: nor its task)."""
    tasks = sorted({t.task for t in turns})
    group = {task: i % FOLDS for i, task in enumerate(sorted(tasks, key=lambda x: _unit("task:" + x)))}
    first: dict = {}
    for t in turns:
        first.setdefault(t.dialogue, t.task)  # a dialogue that switches tasks goes with its first one
    fold = {d: ("task", group[task]) if _unit(f"out:{d}") < TASK_OUT else ("dialogue", int(_unit(f"fold:{d}") * FOLDS))
            for d, task in first.items()}
    out: list = [None] * len(scored)
    for kind in ("dialogue", "task"):
        for k in range(FOLDS):
            held = [i for i, t in enumerate(scored) if fold[t.dialogue] == (kind, k)]
            if not held:
                continue
            if kind == "dialogue":
                train = [t for t in turns if fold[t.dialogue] != (kind, k)]
            else:
                train = [t for t in turns if group[t.task] != k and fold[t.dialogue] != (kind, k)]
            if len({label_of(t) for t in train}) < 2:
                continue
            model = fit(train)
            for i in held:
                t = scored[i]
                out[i] = model.features(_inputs(t), t.tf.keys, t.tf.workflow_keys)
    return out
