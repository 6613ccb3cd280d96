"""Does the user end the active task?  The learned closing detector.

With a workflow active, a turn that ends it — "No, thanks!" to "anything else?", "Maybe another time."
to "Shall I book the car?", "Yes, that's it for now." to "Will that be all?" — is out of scope: the
agent closes instead of pushing on.  The same words can stay inside the task: "No, thanks." to "Shall I
try 6 pm instead?" after a failed booking declines a retry of the active workflow, "No, on my tv."
answers its question.  Hand-written markers (``features.CLOSING``, ``ends_task``) found four in five of
SGD dev's task endings; what tells the rest apart is spread over many small words of both sides.

The detector is a logistic regression over
- the turn's reading by ``features.lexical_features`` (closing and thanks markers, a yes or a no, a
  request, a cue, its length) and the agent's turn before it (an offer, "anything else?", a task done, an
  offered verb that is or is not the active workflow's own);
- the words and word pairs of the user's turn and of the agent's last sentences (L2-normalised per turn), hashed (CRC-32) into ``DIM`` buckets, kept only when the
  training dialogues use them in nearly every service (``flowdesk train closing`` keeps a term used
  with at least ``MIN_SERVICE_SHARE`` of the training services): common conversation words ("later",
  "that's all", "will that be", "instead"), never a service's own.  The model file keeps bucket numbers
  and weights, never a word.

Fitted by ``flowdesk train closing`` (``evals/closing_train.py``) on SGD train, the one training split
that labels a task's end (STAR has no "no task" gold); the threshold is chosen on train.
``load_closing(path)`` (None when the file is absent: the markers decide), ``ClosingModel.ends(...)``.
"""

from __future__ import annotations

import math
import re
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from workflows.text import NO_START, YES_START, sentences, yes_no

from .features import (ANYTHING_ELSE, CLOSING, NUMBERISH, QUESTION, THANKS, _WORD, name_words,
                       verb_groups)
from .model_files import read_model

MODEL_PATH = Path(__file__).with_name("closing_model.json")
DIM = 1 << 20  # hash buckets of the terms
MIN_SERVICE_SHARE = 0.85  # a kept term occurs with at least this share of the training services
# The numeric features, in the order of the model's ``coef`` (each in [0, 1]).
FEATURES = ("no_start", "yes_start", "says_no", "says_yes", "closing_marker", "thanks", "closing", "ends_task",
            "chit_chat", "request", "cue", "accepts_offer", "question", "numberish", "content", "words",
            "agent_anything_else", "agent_offer", "offer_other_verb", "offer_same_verb",
            "agent_asks")
_TERM = re.compile(r"[a-z']+")
AGENT_SENTENCES = 2  # the agent's sentences read for terms, from its message's end


def numeric_features(turn: str, agent: str, workflow, feats: dict[str, Any]) -> tuple[float, ...]:
    """``FEATURES`` of a turn; ``feats``: its ``lexical_features`` (read with the active workflow)."""
    offer = str(feats.get("offer_text") or "")
    offered = verb_groups(_WORD.findall(offer.lower())) if offer else set()
    own = verb_groups(name_words(workflow.name)) if workflow is not None else set()
    said = yes_no(turn)
    values = {
        "no_start": bool(NO_START.search(turn)), "yes_start": bool(YES_START.search(turn)),
        "says_no": said is False, "says_yes": said is True, "closing_marker": bool(CLOSING.search(turn)),
        "thanks": bool(THANKS.search(turn)), "question": "?" in turn, "numberish": bool(NUMBERISH.search(turn)),
        "content": min(float(feats["content_words"]), 8.0) / 8.0,
        "words": min(len(_WORD.findall(turn.lower())), 20) / 20.0,
        "agent_anything_else": bool(ANYTHING_ELSE.search(agent)), "agent_offer": bool(offer),
        "offer_other_verb": bool(offered) and not offered & own, "offer_same_verb": bool(offered & own),
        "agent_asks": bool(QUESTION.search(agent)),
    }
    return tuple(float(values[k] if k in values else feats[k]) for k in FEATURES)


def terms(text: str, side: str) -> list[str]:
    """A turn's words and word pairs, as the model names them (``side``: ``u`` the user, ``a`` the agent)."""
    words = _TERM.findall(text.lower())
    return [f"{side}={w}" for w in words] + [f"{side}={a} {b}" for a, b in zip(words, words[1:])]


def bucket(term: str) -> int:
    return zlib.crc32(term.encode("utf-8")) % DIM


def last_sentences(text: str, n: int = AGENT_SENTENCES) -> str:
    """The last ``n`` sentences of a message: what the user answers (an offer, "anything else?") comes last."""
    return " ".join(sentences(text)[-n:])


def term_values(turn: str, agent: str) -> dict[int, float]:
    """The user's turn and the end of the agent's (``last_sentences``) as hash bucket -> value: each side's
    distinct terms, L2-normalised per side (a long message's many words weigh no more than a short one's few)."""
    values: dict[int, float] = {}
    for text, side in ((turn, "u"), (last_sentences(agent), "a")):
        said = {bucket(t) for t in terms(text, side)}
        for b in said:
            values[b] = values.get(b, 0.0) + 1.0 / math.sqrt(len(said))
    return values


class ClosingModel(BaseModel):
    """A fitted closing detector (``closing_model.json``)."""

    features: list[str] = Field(description="the numeric features, in coef order (FEATURES)")
    coef: list[float]
    buckets: dict[int, float] = Field(description="kept term buckets -> weight")
    intercept: float
    threshold: float = Field(description="on the probability that the turn ends the task")
    provenance: dict[str, Any] = Field(default_factory=dict, description="training counts; never text")

    def probability(self, turn: str, agent: str, workflow, feats: dict[str, Any]) -> float:
        return self.probability_of(numeric_features(turn, agent, workflow, feats), term_values(turn, agent))

    def probability_of(self, x: tuple[float, ...], said: dict[int, float]) -> float:
        """From the numeric features and the two turns' ``term_values``."""
        z = self.intercept + sum(c * v for c, v in zip(self.coef, x))
        z += sum(self.buckets.get(b, 0.0) * v for b, v in said.items())
        return 1.0 / (1.0 + math.exp(-z))

    def ends(self, turn: str, agent: str, workflow, feats: dict[str, Any]) -> bool:
        return self.probability(turn, agent, workflow, feats) > self.threshold


def load_closing(path: str | None = None) -> ClosingModel | None:
    """The detector in ``path`` ('' / None: the bundled model); None when the file is absent or was fitted
    over other features."""
    return _load(str(Path(path) if path else MODEL_PATH))


@lru_cache(maxsize=4)
def _load(path: str) -> ClosingModel | None:
    model = read_model(path, ClosingModel, "flowdesk train closing")
    return model if model is not None and tuple(model.features) == FEATURES else None
