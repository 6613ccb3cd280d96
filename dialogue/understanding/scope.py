"""Is a request one the library serves at all?  The scope gate for a turn with no active workflow.

With nothing active every request used to start the closest workflow, however far it was: "tell me a
joke" started a balance check, "hello, how are you today?" a transfer.  The gate reads three features
that name no service — how close the nearest workflow is (dense cosine of the turn to the best
workflow representation), how much of the turn's vocabulary that workflow's own words cover and how
much of it any workflow of the library covers (a flight asked of a desk without flights) — and
a logistic regression fitted by ``flowdesk train scope`` (``evals.scope_train``) on the first requests
of SGD train and STAR train: each against its own library (in scope) and against the library with the
request's whole domain taken out (out of scope: a real request the desk has no workflow for).  The
threshold keeps ``KEEP`` of the in-scope requests on train, so a vague but real first request still
starts its search; only turns far from every workflow are answered with what the desk covers.

``ScopeGate.in_scope(features)``; ``load_scope(path)`` (None when the model file is absent: no gate).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

FEATURES = ("dense_top", "coverage", "library_coverage")
MODEL_PATH = Path(__file__).with_name("scope_model.json")


def scope_features(text: str, dense: Sequence[tuple[str, float]], words: Callable[[str], set[str]],
                   vocabulary: Callable[[str], frozenset[str] | set[str]],
                   library: frozenset[str] | set[str] = frozenset()) -> tuple[float, ...] | None:
    """(dense cosine of the nearest workflow, share of the turn's words in that workflow's vocabulary, share
    of the turn's words in any workflow's vocabulary); None when nothing was retrieved.  ``dense``:
    (workflow, cosine) best first; ``words``: the turn's words as the interpreter reads them;
    ``vocabulary``: a workflow's words (stems included); ``library``: every workflow's words."""
    if not dense:
        return None
    top, cosine = dense[0]
    said = words(text)
    return (float(cosine), len(said & set(vocabulary(top))) / max(1, len(said)),
            len(said & set(library)) / max(1, len(said)))


@dataclass(frozen=True)
class ScopeGate:
    coef: tuple[float, ...]
    intercept: float
    threshold: float  # on the probability of "in scope"

    def probability(self, features: Sequence[float]) -> float:
        z = self.intercept + sum(c * x for c, x in zip(self.coef, features))
        return 1.0 / (1.0 + math.exp(-z))

    def in_scope(self, features: Sequence[float] | None) -> bool:
        return features is None or self.probability(features) >= self.threshold


def load_scope(path: str | None = None) -> ScopeGate | None:
    """The gate in ``path`` ('' / None: the bundled model); None when the file is absent."""
    return _load(str(Path(path) if path else MODEL_PATH))


@lru_cache(maxsize=4)
def _load(path: str) -> ScopeGate | None:
    p = Path(path)
    if not p.is_file():
        return None
    data = json.loads(p.read_text(encoding="utf-8"))
    names = tuple(data.get("features") or ())
    if not names or names != FEATURES[:len(names)]:
        return None  # a model over other features cannot be read with these (one over the first few can)
    return ScopeGate(tuple(float(c) for c in data["coef"]), float(data["intercept"]), float(data["threshold"]))
