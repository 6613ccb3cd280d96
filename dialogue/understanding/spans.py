"""Free-text values the rules do not place: a learned reader of which words of a message are the value
of which free-text slot ("I want to go from Forbes and Murray to the Airport" for a departure and an
arrival location; "I'm John and I'd like a room at the Hilton" for a customer and a hotel name).

``slots.fill_slots`` reads typed values (dates, numbers, ids, enum options) by their form and a free-text
value only where a rule places it: the reply to the question just asked, a label ("pickup location:
..."), a name after "my name is".  A value said unasked, in the user's own words, was lost.  This module
scores every short span of the message (``candidate_spans``: runs of up to ``MAX_LEN`` words within a
clause, not starting or ending with a function word) against every free-text slot still empty, with a
logistic regression over features that name no service — the span's form (length, capitals, digits, the
whole reply or not), the words around it, whether its slot was just asked — each also crossed with the
words of the slot's own name and description ("from" before the span x "departure" in the slot's words),
hashed (CRC-32) into ``DIM`` buckets: the model file keeps bucket numbers and weights, never a word.
Spans go to slots best first, one slot per span, no two overlapping, above the model's threshold.

Fitted by ``flowdesk train spans`` (``evals/spans_train.py``) on SGD train, whose user turns mark each
free-text value's characters, and on STAR train, whose queries name the values the user said; the threshold
is chosen on train.  ``load_spans(path)`` (None when the
file is absent: the rules alone read values), ``SpanModel.read(...)``.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from pydantic import BaseModel, Field

from workflows.text import STOPWORDS, split_identifier

from .model_files import read_model

MODEL_PATH = Path(__file__).with_name("spans_model.json")
DIM = 1 << 20  # hash buckets of the features
MAX_LEN = 6  # words in a span
# a word: letters/digits, inner apostrophes, hyphens, ampersands and dots ("O'Hare", "St.", "AT&T", "5th")
_TOKEN = re.compile(r"[\w](?:[\w'&-]*[\w])?\.?")
_BREAK = re.compile(r"[,;:!?()\"]|\.\s|\s-\s")  # what between two words ends a clause
_EDGE_STOP = STOPWORDS | {"please", "thanks", "thank", "also", "just", "like", "want", "need", "would", "get",
                          "go", "ok", "okay", "sure", "hi", "hello", "hey", "um", "uh", "well", "really", "yeah",
                          "it's", "i'm", "i'd", "i'll", "i've", "that's", "there's", "what's", "let's", "don't",
                          "can't", "we're", "you're", "we'd", "we'll"}
_DETERMINERS = frozenset("the a an my our your his her their this that".split())
_SLOT_STOP = STOPWORDS | {"name", "value", "user", "customer", "number", "the", "e.g", "eg", "etc", "default"}


@dataclass(frozen=True)
class Span:
    """Words ``i..j`` (exclusive) of a message, characters ``start..end``."""

    i: int
    j: int
    start: int
    end: int


def tokens(text: str) -> list[tuple[str, int, int]]:
    """The message's words with their character offsets (a trailing dot kept only on an abbreviation:
    "Dr.", "St.")."""
    out = []
    for m in _TOKEN.finditer(text):
        w, a, b = m.group(0), m.start(), m.end()
        if w.endswith(".") and not re.fullmatch(r"[A-Z][a-z]{1,2}\.", w):  # "Dr.", "St.", "Mrs." keep theirs
            w, b = w[:-1], b - 1
        out.append((w, a, b))
    return out


def candidate_spans(text: str, toks: list[tuple[str, int, int]] | None = None) -> list[Span]:
    """Every run of 1..``MAX_LEN`` words that stays within a clause and neither starts nor ends with a
    function word (the values the reader may place).  A title may start with "the" ("the Alembic"), and a
    place may run over one comma to a capitalised last word ("Phoenix, AZ", "Paris, France")."""
    toks = tokens(text) if toks is None else toks
    low = [w.lower() for w, _, _ in toks]
    cap = [w[:1].isupper() for w, _, _ in toks]
    gap = [text[toks[k - 1][2]:toks[k][1] + 1] if k < len(toks) else "" for k in range(len(toks))]
    # a clause break between word k-1 and k; a lone comma is a soft one
    brk = [False] + [bool(_BREAK.search(gap[k])) for k in range(1, len(toks))]
    soft = [False] + [text[toks[k - 1][2]:toks[k][1]].strip() == "," and cap[k] and cap[k - 1]
                      for k in range(1, len(toks))]
    out = []
    for i in range(len(toks)):
        if low[i] in _EDGE_STOP and not (low[i] == "the" and i + 1 < len(toks) and cap[i + 1]):
            continue
        for j in range(i + 1, min(len(toks), i + MAX_LEN) + 1):
            if j - 1 > i and brk[j - 1]:
                if soft[j - 1]:
                    out.append(Span(i, j, toks[i][1], toks[j - 1][2]))  # "Phoenix, AZ" ends at the word after
                break
            if low[j - 1] in _EDGE_STOP:
                continue
            out.append(Span(i, j, toks[i][1], toks[j - 1][2]))
    return out


def slot_words(name: str, description: str = "") -> tuple[str, ...]:
    """The words a slot is known by: its name's and description's content words (at most eight)."""
    words = re.findall(r"[a-z]+", f"{split_identifier(name)} {description or ''}".lower())
    out = list(dict.fromkeys(w for w in words if len(w) > 2 and w not in _SLOT_STOP))
    return tuple(out[:8]) or ("<slot>",)


def _shape(w: str) -> str:
    if any(c.isdigit() for c in w):
        return "d" if w.isdigit() else "m"
    return "C" if w[:1].isupper() else "l"


def span_features(text: str, toks: list[tuple[str, int, int]], low: list[str], content: list[int],
                  s: Span) -> tuple[list[str], list[str]]:
    """What the span itself says, the same for every slot: (features crossed with the slot's words,
    features read alone)."""
    shape = "".join(sorted(set(_shape(toks[k][0]) for k in range(s.i, s.j))))
    sentence_start = s.i == 0 or bool(re.search(r"[.!?]\s*$", text[:toks[s.i][1]]))
    # the words before, over an article or a possessive ("to the Airport" is said like "to Airport")
    k = s.i - 1
    while k >= 0 and low[k] in _DETERMINERS:
        k -= 1
    b1 = low[k] if k >= 0 else "<s>"
    b2 = low[k - 1] if k > 0 else "<s>"
    a1 = low[s.j] if s.j < len(low) else "</s>"
    whole = bool(content) and s.i <= content[0] and s.j > content[-1]
    n = s.j - s.i
    crossed = [f"len={min(n, 4)}", f"shape={shape}", f"whole={int(whole)}", f"b1={b1}", f"b2={b2}", f"a1={a1}",
               f"first={low[s.i]}", f"last={low[s.j - 1]}"]
    alone = [f"ss={int(sentence_start)}", f"b21={b2}_{b1}", f"shape_len={shape}_{min(n, 4)}",
             f"shape_b1={shape}_{b1}", f"rest={min(len(content), 8) - min(n, 8)}"]
    return crossed, alone


def _crc(feature: str) -> int:
    return zlib.crc32(feature.encode("utf-8"))


def pair_buckets(crossed: list[int], alone: list[int], words: tuple[bytes, ...], state: tuple[bytes, ...],
                 state_crc: tuple[int, ...]) -> list[int]:
    """A (span, slot) pair's feature buckets: the span's features alone, each crossed with the slot's words
    and with its state (kind, asked, labelled just before), and the state alone.  Arguments are CRCs of the
    span's feature strings and the slot's ``|w=word`` / ``|k=kind`` suffixes (crossing continues the CRC:
    ``crc32(b, crc32(a)) == crc32(a + b)``)."""
    crc = zlib.crc32
    out = [c % DIM for c in state_crc]
    for c in crossed:
        out.append(c % DIM)
        for w in words:
            out.append(crc(w, c) % DIM)
        for k in state:
            out.append(crc(k, c) % DIM)
    for c in alone:
        out.append(c % DIM)
        for k in state:
            out.append(crc(k, c) % DIM)
    return out


@dataclass(frozen=True)
class Target:
    """A free-text slot the reader may fill: its name, words, kind (``string`` / ``person``), asked now."""

    name: str
    words: tuple[str, ...]
    kind: str
    pending: bool


def _near(low: list[str], s: Span, words: tuple[str, ...]) -> bool:
    before = low[max(0, s.i - 3):s.i]
    return any(w[:5] == b[:5] for w in words for b in before if len(b) > 2)


def _overlaps(s: Span, spans: list[tuple[int, int]]) -> bool:
    return any(s.start < b and a < s.end for a, b in spans)


def design(text: str, targets: list[Target], taken: Iterable[tuple[int, int]] = ()
           ) -> tuple[list[Span], list[tuple[int, int, list[int]]]]:
    """The candidate spans (none over characters already ``taken``) and, per (span, target) pair, its
    feature buckets (the reader's and the fit's rows)."""
    toks = tokens(text)
    taken = list(taken)
    spans = [s for s in candidate_spans(text, toks) if not _overlaps(s, taken)]
    low = [w.lower() for w, _, _ in toks]
    content = [k for k in range(len(low)) if low[k] not in _EDGE_STOP]
    slot = [(tuple(f"|w={w}".encode() for w in t.words[:4]), f"|k={t.kind}|p={int(t.pending)}") for t in targets]
    rows = []
    for si, s in enumerate(spans):
        crossed, alone = span_features(text, toks, low, content, s)
        cc, ca = [_crc(f) for f in crossed], [_crc(f) for f in alone]
        for ti, t in enumerate(targets):
            words, kp = slot[ti]
            state = (kp + f"|near={int(_near(low, s, t.words))}").encode()
            rows.append((si, ti, pair_buckets(cc, ca, words, (state, kp.encode()), (zlib.crc32(state),))))
    return spans, rows


class Placed(NamedTuple):
    """A value the reader places: its words, their probability of being the slot's, their characters."""

    value: str
    probability: float
    span: tuple[int, int]


class SpanModel(BaseModel):
    """A fitted span reader (``spans_model.json``)."""

    buckets: dict[int, float] = Field(description="feature bucket -> weight (pruned)")
    intercept: float
    threshold: float = Field(description="on the probability that a span is the slot's value")
    provenance: dict[str, Any] = Field(default_factory=dict, description="training counts; never text")

    def probability(self, buckets: Iterable[int]) -> float:
        get = self.buckets.get
        z = self.intercept + sum(get(b, 0.0) for b in buckets)
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    def read(self, text: str, targets: list[Target], taken: list[tuple[int, int]] = ()) -> dict[str, Placed]:
        """slot -> ``Placed`` for the targets whose best span clears the threshold: spans go to slots best
        first, one slot per span, no two overlapping, none over characters already ``taken``."""
        if not targets or not text.strip():
            return {}
        spans, rows = design(text, targets, taken)
        scored = sorted(((self.probability(f), si, ti) for si, ti, f in rows), key=lambda x: -x[0])
        out: dict[str, Placed] = {}
        used: list[tuple[int, int]] = []
        for p, si, ti in scored:
            if p < self.threshold:
                break
            t, s = targets[ti], spans[si]
            if t.name in out or _overlaps(s, used):
                continue
            out[t.name] = Placed(text[s.start:s.end], p, (s.start, s.end))
            used.append((s.start, s.end))
        return out


def load_spans(path: str | None = None) -> SpanModel | None:
    """The reader in ``path`` ('' / None: the bundled model); None when the file is absent
    (``model_files.ModelFileError`` when it cannot be read)."""
    return _load(str(Path(path) if path else MODEL_PATH))


@lru_cache(maxsize=4)
def _load(path: str) -> SpanModel | None:
    return read_model(path, SpanModel, "flowdesk train spans")
