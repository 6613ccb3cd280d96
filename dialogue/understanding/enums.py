"""Enum options said in other words, in the answer to the question for them ("Why are you sending it
back?" — "they're too small" for ``does_not_fit``; "What kind of event?" — "a concert" for ``Music``).

``slots.match_enum`` reads an option said as itself (the phrase, a time, overlapping words, a near
spelling).  Said in other words, the answer was lost and the question asked again.  When the slot was
just asked and the rules read nothing, this module compares the answer's clauses (and the whole answer)
with each option's words by sentence embeddings — the library's embedding model, passed in as ``embed``
(this package imports no other) — and takes the nearest option when it leads the next one by at least
``MIN_LEAD``.  A question, "I don't know", or a reply with no content word after its discourse markers
("hmm") is no answer.

Only for the asked slot, and with a lead: on SGD, where the slot was just asked and the rules read nothing,
the nearest option is the value on 90% of train answers, but an answer to another question scored against
the slot's options names one too; a message that was not asked for the slot names an option's neighbour
far more often than the option.  ``flowdesk eval enums`` (``evals/enums_eval.py``, ``reports/enums-sgd``)
measures all three and chose ``MIN_LEAD`` on train.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from workflows.text import DISCOURSE, FILLERS, STOPWORDS, UNSURE, content_words, split_identifier

Embed = Callable[[list[str]], Any]  # texts -> (n, dim) array, rows L2-normalised

MIN_LEAD = 0.125  # chosen on SGD train by `flowdesk eval enums` (options right minus 2 x wrong)
_CLAUSE = re.compile(r"[,;:!?()\"]|\.(?:\s|$)|\s[-–—]\s|\b(?:and|but|because|so)\b", re.I)
_WORD = re.compile(r"[a-z][a-z'-]*", re.I)
# options no answer resembles: "any of them", booleans, numbers
_ANY = frozenset({"dontcare", "dont care", "any", "none", "other", "unknown", "n/a", "true", "false"})


def option_text(option: str) -> str:
    """The words of an option ("does_not_fit" -> "does not fit", "FullSize" -> "Full Size")."""
    return " ".join(split_identifier(option).replace("-", " ").split()) or option


def readable(options: Sequence[str]) -> list[str]:
    """The options an answer can mean in other words (not "any", booleans or numbers)."""
    return [o for o in options if o.strip().lower() not in _ANY and not re.fullmatch(r"[\d.:\s-]+", o)]


def clauses(text: str) -> list[str]:
    """The answer's clauses that hold a content word."""
    parts = [p.strip() for p in _CLAUSE.split(text) if p and p.strip()]
    return [p for p in parts if any(w.lower() not in STOPWORDS for w in _WORD.findall(p))]


def is_answer(text: str) -> bool:
    """Could the message be an answer in other words: not a question, not "I don't know", and content words
    after the discourse markers that open it ("hmm", "well, ..." alone say nothing)?"""
    rest = DISCOURSE.sub("", text)
    return "?" not in text and not UNSURE.search(text) and bool(content_words(rest) - FILLERS)


def nearest(text: str, options: Sequence[str], embed: Embed) -> tuple[str, float, float] | None:
    """(option, similarity, lead over the next option) of the option nearest to any clause of ``text`` or
    to the whole of it; None with fewer than two options an answer can mean."""
    opts = readable(options)
    if len(opts) < 2:
        return None
    parts = [*clauses(text), text]
    vec = embed([*parts, *map(option_text, opts)])
    sims = (vec[len(parts):] @ vec[:len(parts)].T).max(axis=1)
    order = sorted(range(len(opts)), key=lambda i: -float(sims[i]))
    best, second = order[0], order[1]
    return opts[best], float(sims[best]), float(sims[best] - sims[second])


def read_answer(text: str, options: Sequence[str], embed: Embed | None) -> str | None:
    """The option an answer to the question for an enum slot means in other words, or None."""
    if embed is None or not is_answer(text):
        return None
    found = nearest(text, options, embed)
    return found[0] if found is not None and found[2] >= MIN_LEAD else None
