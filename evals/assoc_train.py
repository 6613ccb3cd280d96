"""Fit the turn <-> workflow word association (``dialogue.understanding.assoc``) on the training splits and
cross-fit its feature into the pick model's rows.

Examples: every scored user turn of SGD train and STAR train where the gold workflow changes (the first
request included) and is in the library: the gold is the positive, the other workflows of its domain and
``NEGATIVES`` drawn from the rest of the library the negatives.  Rows are hashed (turn word x workflow
word) pairs (``assoc.pair_features``); a logistic regression (scikit-learn ``SGDClassifier``, log loss) over
them; the weights pruned to the ``KEEP`` largest.

Cross-fitting: services (a gold's role, SGD's and STAR's apart) go to ``FOLDS`` folds; a pick row's
association feature comes from the model fitted without its service's fold (neither its turns nor its
workflows as negatives), so the pick model learns how far to trust the feature on services the association
never saw.  The model written beside the switch model is fitted on every example.  Dev splits are never read.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Sequence

import typer

from .datasets import load_switch_dataset

SOURCES = (("sgd", "train"), ("star", "train"))
NEGATIVES = 8  # random negatives per example, beside the gold's own domain
KEEP = 60_000  # the largest weights kept (the model file stays small; the rest are near 0)
ALPHA = 1e-5  # SGDClassifier's L2 penalty
FOLDS = 5
# The floor on the sd the relative features divide by (``AssocModel.sd_floor``): this quantile of the pick turns'
# spread (0 = no floor), as the dense z-score's (``evals.switch_train.DEN_SD_QUANTILE``).
SD_QUANTILE = 0.99
SGD_EVERY = 2  # SGD train: every k-th dialogue's change turns (STAR train: all)


def _library(name: str, data: Path, cache: Path):
    from graph.resources import get_resources

    from .switch_train import _context

    full, lib_dir = load_switch_dataset(name, data, "train", None, cache, False, 1)
    return full, get_resources(_context(name, lib_dir, cache)).library


def examples(data: Path, cache: Path, sgd_every: int = SGD_EVERY) -> tuple[list, dict, dict]:
    """(examples [(dataset, turn words, gold, dialogue)], per dataset {workflow: (words, service, domain)}, per dataset
    its library)."""
    from dialogue.understanding.assoc import turn_words, workflow_words

    out: list = []
    libs: dict = {}
    libraries: dict = {}
    for name, _ in SOURCES:
        full, library = _library(name, data, cache)
        libraries[name] = library
        libs[name] = {n: (workflow_words(wf), f"{name}:{wf.role}", wf.domain) for n, wf in library.workflows.items()}
        for d in full[::sgd_every] if name == "sgd" else full:
            for t in d.user_turns:
                if t.scored and t.gold and t.gold_changed and t.gold in library.workflows:
                    said = turn_words(t.text)
                    if said:
                        out.append((name, said, t.gold, f"{name}:{d.id}"))
    return out, libs, libraries


def _matrix(rows: Sequence[tuple[Sequence[str], Sequence[str]]], n_features: int):
    import numpy as np
    from scipy.sparse import csr_matrix

    from dialogue.understanding.assoc import pair_features

    indptr, indices, values = [0], [], []
    for said, words in rows:
        f = pair_features(said, words, n_features)
        indices += f.keys()
        values += f.values()
        indptr.append(len(indices))
    return csr_matrix((np.asarray(values, dtype=np.float32), np.asarray(indices, dtype=np.int32),
                       np.asarray(indptr, dtype=np.int64)), shape=(len(rows), n_features))


def fit_assoc(exs: list, libs: dict, leave_out: frozenset[str] = frozenset(), seed: int = 0,
              alpha: float = ALPHA, keep: int = KEEP, skip_dialogues: frozenset[str] = frozenset()):
    """The association model over ``exs`` whose gold's service is not in ``leave_out`` (nor are those services'
    workflows negatives) and whose dialogue is not in ``skip_dialogues``."""
    import numpy as np
    from sklearn.linear_model import SGDClassifier

    from dialogue.understanding.assoc import N_FEATURES, AssocModel

    rng = random.Random(seed)
    pool = {name: [n for n, (_, svc, _) in lib.items() if svc not in leave_out] for name, lib in libs.items()}
    rows, y = [], []
    for name, said, gold, *dialogue in exs:
        lib = libs[name]
        if lib[gold][1] in leave_out or (dialogue and dialogue[0] in skip_dialogues):
            continue
        domain = lib[gold][2]
        negs = {n for n in pool[name] if lib[n][2] == domain and n != gold}
        others = [n for n in pool[name] if n != gold and n not in negs]
        negs |= set(rng.sample(others, min(NEGATIVES, len(others))))
        rows.append((said, lib[gold][0]))
        y.append(1)
        for n in sorted(negs):
            rows.append((said, lib[n][0]))
            y.append(0)
    X = _matrix(rows, N_FEATURES)
    clf = SGDClassifier(loss="log_loss", alpha=alpha, max_iter=20, tol=1e-4, random_state=seed)
    clf.fit(X, np.asarray(y))
    coef = clf.coef_[0]
    nz = np.flatnonzero(coef)
    top = nz[np.argsort(-np.abs(coef[nz]))[:keep]]
    return AssocModel(weights={int(i): round(float(coef[i]), 4) for i in sorted(top)},
                      trained_on={"examples": sum(y), "rows": len(y), "alpha": alpha, "negatives": NEGATIVES})


def service_folds(services: Sequence[str], folds: int = FOLDS) -> dict[str, int]:
    """Each key's fold (a service, or a dialogue): the keys in a stable hashed order dealt round-robin."""
    import zlib

    order = sorted(set(services), key=lambda s: (zlib.crc32(s.encode()), s))
    return {s: i % folds for i, s in enumerate(order)}


def _raw(rows: list, texts: list, model_for, libraries: dict) -> list:
    """Per dialogue, each turn's (first row, raw association scores of its candidates in row order), from
    ``model_for(dialogue, service)``."""
    from dialogue.understanding.assoc import raw_scores

    out = []
    for (dx, dy, dg, dd), (dialogue, said) in zip(rows, texts):
        first: dict[int, int] = {}
        for i, g in enumerate(dg):
            first.setdefault(g, i)
        out.append([(first[g], raw_scores(model_for(dialogue, dd[first[g]]), text, names, libraries[name]))
                    for g, (name, text, names) in enumerate(said) if g in first])
    return out


def _fill(rows: list, raw: list, floor: float) -> list:
    """The rows with ``ASSOC`` columns: each turn's ``_raw`` scores relative to its candidates (sd at least
    ``floor``), as ``assoc.candidate_features`` reads them at a search."""
    from dialogue.understanding.assoc import ASSOC, relative
    from dialogue.understanding.ranker import ROW_FEATURES

    cols = [ROW_FEATURES.index(k) for k in ASSOC]
    out = []
    for (dx, dy, dg, dd), turns in zip(rows, raw):
        dx = [list(r) for r in dx]
        for start, scores in turns:
            for j, values in enumerate(relative(scores, floor)):
                for c, v in zip(cols, values):
                    dx[start + j][c] = v
        out.append((dx, dy, dg, dd))
    return out


def sd_floor(raws: list) -> float:
    """The ``SD_QUANTILE`` quantile of the spread of the pick turns' association scores (``_raw`` of each
    regime), over the turns with more than one candidate."""
    import numpy as np

    sds = [float(np.std(scores)) for raw in raws for turns in raw for _, scores in turns if len(scores) > 1]
    return round(float(np.quantile(sds, SD_QUANTILE)), 6) if sds else 0.0


def both_regimes(unseen: list, seen: list) -> list:
    """Each dialogue's rows twice, as one dialogue (so the held-out split keeps both copies together): with the
    feature of a model that never saw the turn's service, and with that of one that saw the service but not
    the dialogue."""
    out = []
    for (ux, uy, ug, ud), (sx, sy, sg, sd) in zip(unseen, seen):
        shift = max(ug) + 1 if ug else 0
        out.append((ux + sx, uy + sy, ug + [g + shift for g in sg], ud + sd))
    return out


def assoc_for_pick(rows: list, texts: list, data: Path, model_path: Path, cache: Path) -> tuple[list, dict[str, Any]]:
    """The pick rows with the association feature in both regimes the agent meets it (``both_regimes``):
    a service the association model never saw (a fold of services left out of its fit) and a service it saw
    in other dialogues (a fold of dialogues left out) — fitted on one regime alone the pick misreads the
    other (``reports/switch-train-pick``).  Returns the rows and the pick section's record; the model fitted
    on every example is written beside ``model_path`` (``assoc_model.json``)."""
    exs, libs, libraries = examples(data, cache)
    services = [libs[n][g][1] for n, _, g, _ in exs] + [s for *_, dd in rows for s in dd]
    fold = service_folds(services)
    dfold = service_folds([d for *_, d in exs] + [d for d, _ in texts])
    by_service, by_dialogue = {}, {}
    for k in range(FOLDS):
        by_service[k] = fit_assoc(exs, libs, leave_out=frozenset(s for s, f in fold.items() if f == k))
        by_dialogue[k] = fit_assoc(exs, libs, skip_dialogues=frozenset(d for d, f in dfold.items() if f == k))
        typer.echo(f"association fold {k}: {len(by_service[k].weights)} / {len(by_dialogue[k].weights)} weights")
    unseen_model = lambda d, svc: by_service[fold[svc]]  # noqa: E731
    seen_model = lambda d, svc: by_dialogue[dfold[d]]  # noqa: E731
    # each regime's scores once: the floor is fitted on both, then every row reads them relative to its turn
    raw_unseen, raw_seen = (_raw(rows, texts, m, libraries) for m in (unseen_model, seen_model))
    floor = sd_floor([raw_unseen, raw_seen]) if SD_QUANTILE else 0.0
    unseen, seen = _fill(rows, raw_unseen, floor), _fill(rows, raw_seen, floor)
    final = fit_assoc(exs, libs)
    final.sd_floor = floor
    # beside the switch model, which names it by its file name (``Ranker.picker`` reads it beside the model)
    path = Path(model_path).with_name("assoc_model.json")
    path.write_text(final.model_dump_json(indent=0) + "\n", encoding="utf-8")
    return both_regimes(unseen, seen), {"assoc": path.name, "assoc_fit": {**final.trained_on, "weights": len(final.weights),
                                                                     "folds": FOLDS, "sgd_every": SGD_EVERY,
                                                                     "sd_floor": floor}}
