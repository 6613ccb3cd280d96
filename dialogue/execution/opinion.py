"""A text classifier's opinion of each candidate, as evidence for the learned executor's ranker (issue 14).

A plain classifier over the task, the previous two actions, the actions done, whether a tool result just
arrived and the user's last words (``evals/text_baseline.py``) predicts logged agents' next action better
than the ranker's top choice on the tasks it was trained on: it knows, per seen task, which action follows
which words and history.  The ranker reads its probability of each candidate's action (``OPINION_FEATURES``)
beside the workflow-relative features; an action the classifier never saw as a label (a workflow it never
saw) is flagged unknown, and the ranker falls back on the other features (it learns that regime from
training turns scored by classifiers that left whole tasks out: ``evals/train_executor.py``).

The classifier is multinomial logistic regression over hashed features (``inputs``): symbols of the state
and TF-IDF (sublinear, L2-normalised) of the message's words and word pairs, each hashed (CRC-32) into
``DIM`` buckets, so the model file keeps bucket numbers and weights, never a word.  Its labels are action
keys (``action_key``): an ANSWER's name, an API call with its fixed arguments, ``request_information``,
the out-of-workflow reply, and ``OTHER`` for a logged action no candidate stood for.
"""

from __future__ import annotations

import math
import re
import zlib
from functools import lru_cache

from pydantic import BaseModel, Field, model_validator

DIM = 1 << 20  # hash buckets: few collisions among the ~10^5 distinct features of STAR train
OTHER = "<other>"  # the label of a logged action that no candidate stood for
# per candidate: its probability (-1: a label never seen), its share of the workflow's actions' mass, the gap
# to the workflow's most probable action, whether it is that action, whether its label is known, and the
# mass of the workflow's known actions (the same for every row: how much the classifier sees this workflow)
OPINION_FEATURES = ["opinion_p", "opinion_share", "opinion_gap", "opinion_top", "opinion_known", "opinion_mass"]
_WORD = re.compile(r"(?u)\b\w\w+\b")  # scikit-learn's default token pattern (the baseline's)


def action_key(kind: str, name: str, fixed: dict | None = None) -> str:
    """The classifier's label of a candidate (``policy_learned.Candidate``: kind, name, fixed arguments)."""
    if kind == "api":
        return "api:" + name + "".join(f"|{k}={v}" for k, v in sorted((fixed or {}).items()))
    return name


@lru_cache(maxsize=8192)
def _bucket(feature: str) -> int:
    """The feature's hash bucket (cached: the state's symbols repeat from turn to turn)."""
    return zlib.crc32(feature.encode("utf-8")) % DIM


_TERM = zlib.crc32(b"t=")  # the CRC-32 of a text term's prefix, continued over the term's bytes


@lru_cache(maxsize=4096)
def text_buckets(text: str) -> tuple[tuple[int, float], ...]:
    """The message's words and word pairs as (bucket, sublinear term frequency), before idf (cached: a
    message is read again at each of the agent's actions that follow it).  A term's bucket is
    ``_bucket("t=" + term)``, computed by continuing the CRC (``crc32(b, crc32(a)) == crc32(a + b)``): a pair's
    from its first word's, without building the strings (a sixth less per new message; the same buckets, in
    the same order)."""
    crc = zlib.crc32
    words = [w.encode("utf-8") for w in _WORD.findall(text.lower())]
    heads = [crc(w, _TERM) for w in words]  # "t=" + word
    counts: dict[int, int] = {}
    for h in heads:
        b = h % DIM
        counts[b] = counts.get(b, 0) + 1
    for i in range(1, len(words)):  # "t=" + first + " " + second
        b = crc(words[i], crc(b" ", heads[i - 1])) % DIM
        counts[b] = counts.get(b, 0) + 1
    return tuple((b, 1.0 + math.log(n)) for b, n in counts.items())


def text_norm(text: tuple[tuple[int, float], ...]) -> float:
    """The L2 norm over a message's own terms (``text_buckets``) that its TF-IDF values are divided by, in the
    fit as in reading (terms the model does not keep still count)."""
    return math.sqrt(sum(v * v for _, v in text)) or 1.0


def inputs(task: str, executed: list[str], tool_result: bool, text: str) -> tuple[tuple[int, ...], tuple]:
    """What the classifier reads of a state: the symbols' buckets (value 1) and ``text_buckets``."""
    return _symbols(task, tuple(executed), tool_result), text_buckets(text)


@lru_cache(maxsize=4096)
def _symbols(task: str, executed: tuple[str, ...], tool_result: bool) -> tuple[int, ...]:
    """The state's symbols as sorted buckets (cached: a dialogue's states repeat across its actions)."""
    prev1 = executed[-1] if executed else "<none>"
    prev2 = executed[-2] if len(executed) > 1 else "<none>"
    symbols = [f"task={task}", f"prev1={prev1}", f"prev2={prev2}", f"prev12={prev1}|{prev2}",
               *(f"done={d}" for d in sorted(set(executed)))]
    if tool_result:
        symbols.append("kb")
    return tuple(sorted({_bucket("s=" + s) for s in symbols}))


class OpinionModel(BaseModel):
    """The classifier in the executor's model file: kept buckets, their idf, sparse class weights."""

    classes: list[str] = Field(min_length=2, description="action keys (``action_key``), OTHER included")
    buckets: list[int] = Field(description="kept hashed features, ascending")
    idf: list[float] = Field(description="per kept bucket: the idf of a text feature, 0 for a symbol (value 1)")
    counts: list[int] = Field(description="per kept bucket: how many of the next cols/vals are its weights")
    cols: list[int] = Field(description="non-zero weights: index into ``classes``")
    vals: list[int] = Field(description="non-zero weights, in hundredths (the file's size)")
    intercept: list[float] = Field(description="per class")

    @model_validator(mode="after")
    def _shapes(self) -> "OpinionModel":
        if not (len(self.buckets) == len(self.idf) == len(self.counts)):
            raise ValueError("buckets, idf and counts differ in length")
        if not (len(self.cols) == len(self.vals) == sum(self.counts)) or any(n < 0 for n in self.counts):
            raise ValueError("cols and vals must hold counts' weights")
        if len(self.intercept) != len(self.classes):
            raise ValueError("one intercept per class")
        if self.cols and (min(self.cols) < 0 or max(self.cols) >= len(self.classes)):
            raise ValueError("a weight's class is out of range")
        return self

    def reader(self) -> "Reader":
        """The tables the executor reads the classifier with, built once (``LearnedPolicy`` builds them on
        loading, so the first turn does not pay for them)."""
        r = self.__dict__.get("_reader")
        if r is None:
            r = self.__dict__["_reader"] = Reader(self)
        return r

    def index(self, key: str) -> int:
        """The class of an action key (-1: never a label in training)."""
        return self.reader().cls.get(key, -1)

    def proba(self, x: tuple[tuple[int, ...], tuple]):
        """The classes' probabilities for ``inputs``' output."""
        return self.reader().proba(x)

    def features(self, x, keys: list[str], workflow_keys: tuple[str, ...]) -> list[tuple[float, ...]]:
        """``OPINION_FEATURES`` of each candidate key, read against the workflow's actions (``workflow_keys``:
        every action key the workflow has, so a row does not depend on which other candidates are scored)."""
        return self.reader().features(x, keys, workflow_keys)


class Reader:
    """An ``OpinionModel`` ready to read, per turn (derived at load; the model file is unchanged): the weights
    as a dense float32 matrix (kept buckets x classes: a few MiB, one gather and one product per turn), the
    lookups, and caches for what repeats from turn to turn — a message's kept buckets and values (a message is
    read again at each of the agent's actions that follow it), a state's rows, a workflow's classes.  Plain
    attributes, no per-call lookups through the Pydantic model (the executor reads it on every scored turn)."""

    __slots__ = ("W", "b", "at", "cls", "known", "texts", "symbols")
    CACHE = 4096  # entries per cache before it is emptied (memory stays bounded in a long-running server)

    def __init__(self, m: "OpinionModel"):
        import numpy as np

        W = np.zeros((len(m.buckets), len(m.classes)), dtype=np.float32)
        W[np.repeat(np.arange(len(m.buckets)), m.counts), m.cols] = np.asarray(m.vals, dtype=np.float32) / 100
        self.W, self.b = W, np.asarray(m.intercept, dtype=np.float32)
        self.at = {b: (i, m.idf[i]) for i, b in enumerate(m.buckets)}  # bucket -> (row, idf)
        self.cls = {c: i for i, c in enumerate(m.classes)}
        self.known: dict = {}  # workflow keys -> their classes
        # id(text_buckets' tuple) -> (the tuple, its rows, its values): keyed by identity (``text_buckets``
        # returns the same tuple for the same message; a tuple's hash would cost a pass over its pairs), the
        # tuple kept beside it so an id is never read for another message
        self.texts: dict = {}
        self.symbols: dict = {}  # a state's symbols -> their rows

    def _words(self, text: tuple) -> tuple:
        hit = self.texts.get(id(text))
        if hit is not None and hit[0] is text:
            return hit
        norm = text_norm(text)
        at = self.at
        found = [(h[0], v * h[1] / norm) for b, v in text if (h := at.get(b)) is not None and h[1]]
        if len(self.texts) > self.CACHE:
            self.texts.clear()
        hit = self.texts[id(text)] = (text, [i for i, _ in found], [v for _, v in found])
        return hit

    def proba(self, x: tuple[tuple[int, ...], tuple]):
        """The classes' probabilities (float32) for ``inputs``' output: the intercept plus the kept
        features' weighted rows (one gather, one product), then a softmax from the largest logit."""
        import numpy as np

        symbols, text = x
        _, rows_t, vals_t = self._words(text)
        rows = self.symbols.get(symbols)
        if rows is None:
            if len(self.symbols) > self.CACHE:
                self.symbols.clear()
            at = self.at
            rows = self.symbols[symbols] = [at[b][0] for b in symbols if b in at]
        if rows or rows_t:
            # (the rows by ``take`` of an index array, as ``IntentModel.vector`` gathers: the same rows)
            z = np.asarray([1.0] * len(rows) + vals_t, dtype=np.float32) @ self.W.take(
                np.array(rows + rows_t, dtype=np.intp), axis=0)
            z += self.b
        else:
            z = self.b.copy()
        # (the ufuncs' reductions that ``ndarray.max`` / ``.sum`` call, without their Python wrappers: the same values)
        z -= np.maximum.reduce(z)
        np.exp(z, out=z)
        z /= np.add.reduce(z)
        return z

    def features(self, x, keys: list[str], workflow_keys: tuple[str, ...]) -> list[tuple[float, ...]]:
        """``OpinionModel.features``."""
        p = self.proba(x).tolist()  # (Python floats: cheaper to index a few times than the array)
        cls = self.cls
        known = self.known.get(workflow_keys)
        if known is None:
            known = self.known[workflow_keys] = [j for j in (cls.get(k, -1) for k in workflow_keys) if j >= 0]
        if known:
            mine = [p[j] for j in known]
            mass, best = sum(mine), max(mine)
        else:
            mass = best = 0.0
        out = []
        for k in keys:
            j = cls.get(k, -1)
            if j < 0:
                out.append((-1.0, 0.0, -1.0, 0.0, 0.0, mass))
                continue
            pk = p[j]
            out.append((pk, pk / mass if mass > 0 else 0.0, best - pk, float(pk >= best), 1.0, mass))
        return out
