"""Two requests in one message ("where is ORD-7003 and please cancel ORD-7010"): which part asks for what.

Rasa CALM's understanding step may start more than one flow per message: the first request becomes the
active workflow and the second waits on the dialogue stack (``StartFlow(queued=True)``) until the first
is finished.  Which parts of a message are requests of their own is read generically, with no words
shaped to a service: the message is cut where a clause is joined on by a coordinating conjunction
("and", "also", "then", "plus"; a new sentence alone is not cut: it mostly gives details), and each part is ranked on its own by the same ranking
the retriever node picks with.  A cut gives two requests only when each part asks for something itself (a request
phrase or a question, not a scene-setter: "I'm leaving town soon and I need a hotel"), is served by the library
(the scope gate) and confidently picks its own workflow (probability of its top pick), the two picks
differ, the whole message's pick is one of them, and each part is surer of its pick than the whole
message is, by a fitted lead (a workflow that does both — "check the balance and transfer" — reads the whole as
surely) — so a part that only adds a value to the other ("book a table for 2 and make it 7pm": "make it 7pm" names
no task of its own) gives no second request.

``two_requests(text, pick, rank, served)`` returns the two ``Request`` in the order they were said.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from .features import QUESTION, lexical_features
from .ranker import log_softmax

# where the next clause is joined on by a coordinating conjunction (which belongs to neither request)
_CUT = re.compile(r"(?:[.;!?]+\s+|,\s*|\s+)(?:and\s+(?:then\s+|also\s+)?|also\s+|then\s+|plus\s+)", re.I)
_WORD = re.compile(r"\w+")
# Each part's own pick, as a probability over the ranked candidates, must reach a threshold that depends on
# the pick model's probability scale: ``flowdesk train switch --requests-only`` fits it on train messages with
# the model and stores it as ``ranker.requests.min_probability``; a model without it (the bundled one: the fit,
# 0.6, reads the demo's "where is ORD-7003 and please cancel ORD-7010" as one request) uses this.
MIN_PROBABILITY = 0.5
# How much surer of its pick each part must be than the whole message is (``ranker.requests.min_lead``, fitted
# with the threshold; 0 without it, as before).
MIN_LEAD = 0.0
MIN_WORDS = 3  # words each part needs to be a request of its own
MAX_CUTS = 4  # cuts tried per message (long messages are read whole)


@dataclass(frozen=True)
class Request:
    text: str  # the part of the message that asks for it
    workflow: str
    probability: float


def cuts(text: str) -> list[tuple[str, str]]:
    """(head, tail) for each place the message may be cut into two clauses, each with enough words."""
    out = []
    for m in list(_CUT.finditer(text))[:MAX_CUTS]:
        head, tail = text[:m.start()].strip(" ,;"), text[m.end():].strip(" ,;")
        if len(_WORD.findall(head)) >= MIN_WORDS and len(_WORD.findall(tail)) >= MIN_WORDS:
            out.append((head, tail))
    return out


def is_request(text: str) -> bool:
    """The part asks for something itself — a request phrase or a question (the detector's lexical
    features) — rather than setting the scene ("I'm leaving town soon and I need a hotel").  Not its cue
    words ("also", "another"): they join a detail on as often as a request ("…, also the time is 21:30")."""
    return bool(lexical_features(text, "", None, None)["request"] or QUESTION.search(text))


def _probabilities(scores: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Each candidate's probability (softmax over the ranked logits)."""
    return {name: math.exp(lp) for name, lp in log_softmax(scores).items()}


def _top(scores: Sequence[tuple[str, float]]) -> tuple[str, float] | None:
    """The best candidate and its probability."""
    probs = _probabilities(scores)
    return max(probs.items(), key=lambda x: x[1]) if probs else None


def fitted(model: dict | None) -> tuple[float, float]:
    """(min_probability, min_lead) stored in a switch model's data (``MIN_PROBABILITY``, ``MIN_LEAD`` when
    absent)."""
    found = ((model or {}).get("ranker") or {}).get("requests") or {}
    return (float(found.get("min_probability", MIN_PROBABILITY)), float(found.get("min_lead", MIN_LEAD)))


def two_requests(text: str, pick: str, rank: Callable[[str], Sequence[tuple[str, float]]],
                 served: Callable[[str], bool], min_probability: float = MIN_PROBABILITY,
                 min_lead: float = MIN_LEAD) -> tuple[Request, Request] | None:
    """The two requests the message makes, in the order said; None when it makes one.  ``pick``: the whole
    message's workflow; ``rank``: a text's candidates with their logits (the retriever's ranking);
    ``served``: is a text in the library's scope (the scope gate)."""
    best: tuple[Request, Request] | None = None
    whole: dict[str, float] | None = None
    for head, tail in cuts(text):
        if not (is_request(head) and is_request(tail)):
            continue
        a, b = _top(rank(head)), _top(rank(tail))
        if a is None or b is None or a[0] == b[0] or pick not in (a[0], b[0]):
            continue
        if min(a[1], b[1]) < min_probability or not (served(head) and served(tail)):
            continue
        whole = _probabilities(rank(text)) if whole is None else whole
        if any(p <= whole.get(name, 0.0) + min_lead for name, p in (a, b)):
            continue  # one workflow reads the whole message as surely as the part: one request about both
        found = (Request(head, *a), Request(tail, *b))
        if best is None or min(a[1], b[1]) > min(best[0].probability, best[1].probability):
            best = found
    return best
