"""A learned association between how users phrase a request and the words of a workflow's own text.

The pick's other evidence of what a turn says of a candidate is literal overlap (``desc_share``,
``vocab_share``, slot words) or MiniLM's cosine: "I need somewhere to stay" meets a workflow described as
"search for a hotel" only through the embedding.  This model learns such associations from the training
splits: a logistic regression over hashed (turn word x workflow word) pairs, label "the workflow is the
turn's gold", fitted on the search/change turns of SGD train and STAR train (``evals.switch_train``).  No
pair names a service: both sides are plain vocabulary (a word's first ``STEM`` letters), and a pair the fit
never met hashes to a weight of 0, so unknown words say nothing.

The weights are stored hashed (no word of any dialogue is written out), pruned to the largest, in
``assoc_model.json`` beside the switch model (``AssocModel``, Pydantic-validated, loaded once).  A pick model
fitted with it (``flowdesk train switch --pick-only --pick-assoc``) reads the score relative to the turn's
candidates (``relative``: a z-score and the gap to the best other one, in the candidates' sd), the rows' feature
from fits that left the turn's service out and that left its dialogue out.  The bundled pick reads it (session 13,
``reports/switch-train-pick``: better on SGD/STAR dev closed loop, one demo conversation test lost).
"""

from __future__ import annotations

import math
import re
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from pydantic import BaseModel, Field

from workflows.text import FILLERS, content_words

from .features import name_words
from .model_files import read_model

ASSOC_PATH = Path(__file__).with_name("assoc_model.json")
STEM = 5  # a word's first letters: "booking" and "booked" meet, "hotel" and "hotels" meet
N_FEATURES = 1 << 24  # hash buckets of the (turn word, workflow word) pairs: many, so that a pair never met
# rarely falls in the bucket of one of the kept weights (at 1 << 20 one in 17 did)
# The pick model's columns from this model: the candidate's score as a z-score over the turn's candidates,
# and its gap to the best other candidate in the same unit.
ASSOC = ("assoc_z", "assoc_gap")
# A description's negated clause says what the workflow is not for: its words are not the workflow's.
_NEGATED = re.compile(r"\b(?:not|no|never|nothing|without)\b[^.;,:!?]*|\w+n't\b[^.;,:!?]*", re.I)


class AssocModel(BaseModel):
    """The association weights (``assoc_model.json``): hashed pair index -> coefficient."""

    version: int = 1
    stem: int = STEM
    n_features: int = N_FEATURES
    weights: dict[int, float] = Field(default_factory=dict)
    # the least sd the relative features divide by: a high quantile of the train turns' spread
    # (``evals.assoc_train.SD_QUANTILE``), as ``den_z``'s floor
    sd_floor: float = 0.0
    trained_on: dict[str, str | int | float] = Field(default_factory=dict)

    def score(self, turn: Sequence[str], workflow: Sequence[str]) -> float:
        """The association of a turn's words with a workflow's words (0 when no pair is known)."""
        if not turn or not workflow:
            return 0.0
        w = self.weights
        total = sum(w.get(pair_index(t, v, self.n_features), 0.0) for t in turn for v in workflow)
        return total * pair_scale(len(turn), len(workflow))


def _norm(words: Iterable[str], stem: int = STEM) -> tuple[str, ...]:
    return tuple(sorted({w[:stem] for w in words}))


def turn_words(text: str) -> tuple[str, ...]:
    """A turn's content words (conversational fillers dropped), cut to their stems."""
    return _norm(w for w in content_words(text) if w not in FILLERS)


@lru_cache(maxsize=8192)
def _workflow_words(name: str, description: str, slots: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    words = content_words(f"{_NEGATED.sub(' ', description)} {' '.join(name_words(name))}")
    for slot, text in slots:
        words |= content_words(f"{slot} {_NEGATED.sub(' ', text or '')}")
    return _norm(words)


def workflow_words(wf) -> tuple[str, ...]:
    """A workflow's own words: its description (negated clauses left out), task name, slots' names and
    descriptions, cut to their stems."""
    return _workflow_words(wf.name, wf.description or "", tuple((s.name, s.description or "") for s in wf.slots))


def pair_index(turn_word: str, workflow_word: str, n_features: int = N_FEATURES) -> int:
    """The hash bucket of a (turn word, workflow word) pair (crc32: stable across runs, unlike ``hash``)."""
    return zlib.crc32(f"{turn_word}\x1f{workflow_word}".encode()) % n_features


def pair_scale(n_turn: int, n_workflow: int) -> float:
    """The value of each pair feature: a long turn or a wordy workflow does not score more by its length."""
    return 1.0 / math.sqrt(n_turn * n_workflow)


def pair_features(turn: Sequence[str], workflow: Sequence[str], n_features: int = N_FEATURES) -> dict[int, float]:
    """The hashed pair features of one (turn, workflow) row, as the model reads them."""
    if not turn or not workflow:
        return {}
    scale = pair_scale(len(turn), len(workflow))
    out: dict[int, float] = {}
    for t in turn:
        for v in workflow:
            i = pair_index(t, v, n_features)
            out[i] = out.get(i, 0.0) + scale
    return out


def relative(scores: Sequence[float], floor: float = 0.0) -> list[tuple[float, float]]:
    """(z-score over the turn's candidates, gap to the best other candidate in their sd) of each score, the sd
    taken as at least ``floor`` (``AssocModel.sd_floor``: a turn of one or two known words would otherwise blow
    near-tied scores apart); (0, 0) where the scores do not spread (one candidate, or no known pair)."""
    n = len(scores)
    if n < 2:
        return [(0.0, 0.0)] * n
    mean = sum(scores) / n
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / n)
    if sd < 1e-9:
        return [(0.0, 0.0)] * n
    sd = max(sd, floor)
    order = sorted(range(n), key=lambda i: -scores[i])
    best, second = scores[order[0]], scores[order[1]]
    return [((s - mean) / sd, (s - (second if i == order[0] else best)) / sd) for i, s in enumerate(scores)]


def candidate_features(model: "AssocModel | None", text: str, names: Sequence[str], library) -> list[dict[str, float]]:
    """``ASSOC`` of each candidate ``names`` for a turn (all 0 without a model)."""
    if model is None:
        return [dict.fromkeys(ASSOC, 0.0) for _ in names]
    return [dict(zip(ASSOC, r)) for r in relative(raw_scores(model, text, names, library), model.sd_floor)]


def raw_scores(model: "AssocModel", text: str, names: Sequence[str], library) -> list[float]:
    """The association of a turn with each candidate ``names`` (0 for a name not in the library)."""
    said = turn_words(text)
    wfs = library.workflows
    return [model.score(said, workflow_words(wfs[n])) if n in wfs else 0.0 for n in names]


def load_assoc(path: str | None = None) -> AssocModel | None:
    """The association model in ``path`` ('' / None: the bundled one); None when absent."""
    return _load(str(Path(path) if path else ASSOC_PATH))


@lru_cache(maxsize=4)
def _load(path: str) -> AssocModel | None:
    return read_model(path, AssocModel, "flowdesk train switch --pick-only --pick-assoc")
