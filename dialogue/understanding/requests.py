"""Two requests in one message ("where is ORD-7003 and please cancel ORD-7010"): which part asks for what.

Rasa CALM's understanding step may start more than one flow per message: the first request becomes the
active workflow and the second waits on the dialogue stack (``StartFlow(queued=True)``) until the first
is finished.  Which parts of a message are requests of their own is read generically, with no words
shaped to a service: the message is cut where a clause is joined on by a coordinating conjunction
("and", "also", "then", "plus"; a new sentence alone is not cut: it mostly gives details), and each part is
ranked on its own by the same ranking the retriever node picks with.  A cut is a candidate only when each part
asks for something itself (a request phrase or a question, not a scene-setter: "I'm leaving town soon and I
need a hotel"), is served by the library (the scope gate) and the two parts pick different workflows.

Whether a candidate cut makes two requests is decided by a small learned classifier (``RequestsModel``,
``ranker.requests`` in the switch model, fitted on train messages by ``flowdesk train switch --requests-only``)
over features that do not hinge on the pick model's probability scale (``cut_features``): where each part's pick
stands in the whole message's ranking and the whole's pick in each part's, log-probability gaps and margins,
part lengths and question/request marks — so a part that only adds a value to the other ("book a table for 2
and make it 7pm") or a workflow that does both ("check the balance and transfer") reads as one request.  Model
files written before the classifier keep the former rule: each part's top probability at least
``min_probability`` and surer of its pick than the whole message by ``min_lead``, and the whole's pick one of
the parts'.

``two_requests(text, pick, rank, served, rule)`` returns the two ``Request`` in the order they were said.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .features import QUESTION, lexical_features
from .ranker import load_ranker, log_softmax

# where the next clause is joined on by a coordinating conjunction (which belongs to neither request)
_CUT = re.compile(r"(?:[.;!?]+\s+|,\s*|\s+)(?:and\s+(?:then\s+|also\s+)?|also\s+|then\s+|plus\s+)", re.I)
_WORD = re.compile(r"\w+")
# The former rule's threshold on each part's own pick probability (``ranker.requests.min_probability`` in model
# files written before the classifier; 0.5 without it): it hinges on the pick model's probability scale.
MIN_PROBABILITY = 0.5
# ... and how much surer of its pick each part must be than the whole message is (``min_lead``; 0 without it).
MIN_LEAD = 0.0
MIN_WORDS = 3  # words each part needs to be a request of its own
MAX_CUTS = 4  # cuts tried per message (long messages are read whole)
RANK_CAP = 5  # a pick further down a ranking than this counts as this far (a ranking holds a few dozen)
GAP_CAP = 10.0  # log-probability gaps are capped: beyond it a candidate is simply out of the running

# The classifier's inputs for one candidate cut (``cut_features``); none is a probability, so none moves with
# the pick model's scale the way a threshold on a probability does.
CUT_FEATURES = (
    "head_margin", "tail_margin",  # each part's log-probability lead of its pick over its own runner-up
    "whole_margin",  # the whole message's lead of its pick over its runner-up
    "head_gap", "tail_gap",  # each part's pick in the whole's ranking: its log-probability below the whole's pick
    "head_rank", "tail_rank",  # ... and its place there (0 = the whole's pick)
    "whole_in_head", "whole_in_tail",  # the whole's pick's place in each part's own ranking
    "cross_head", "cross_tail",  # the tail's pick's place in the head's ranking, and the head's in the tail's
    "whole_is_part",  # the whole's pick is one of the parts' picks
    "top_two_are_parts",  # the whole's two best are the parts' two picks
    "head_words", "tail_words",  # log word counts of the parts
    "head_question", "tail_question", "head_request", "tail_request",  # what marks each part as asking
)


@dataclass(frozen=True)
class Request:
    text: str  # the part of the message that asks for it
    workflow: str
    probability: float


class RequestsModel(BaseModel):
    """The learned two-requests decision as stored in ``ranker.requests`` (a standardised logistic
    regression over ``features``): a cut makes two requests when its probability reaches ``threshold``.
    The fit's record (examples, accuracies) may sit beside it in the file."""

    model_config = ConfigDict(extra="allow")

    features: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    threshold: float = Field(0.5, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _same_length(self) -> "RequestsModel":
        n = len(self.features)
        if not n or any(len(v) != n for v in (self.mean, self.scale, self.coef)):
            raise ValueError("features, mean, scale and coef must have one entry per feature")
        if unknown := set(self.features) - set(CUT_FEATURES):
            raise ValueError(f"unknown cut features: {sorted(unknown)}")
        return self

    def probability(self, f: dict[str, float]) -> float:
        """P(the cut makes two requests)."""
        z = self.intercept + sum(c * (f[k] - m) / (s or 1.0)
                                 for k, m, s, c in zip(self.features, self.mean, self.scale, self.coef))
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


@dataclass(frozen=True)
class ThresholdRule:
    """The former rule (model files written before the classifier): each part's top probability reaches
    ``min_probability`` and leads the whole message's probability of it by ``min_lead``."""

    min_probability: float = MIN_PROBABILITY
    min_lead: float = MIN_LEAD


Rule = RequestsModel | ThresholdRule


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
    return bool(_asks(text)["request"] or QUESTION.search(text))


def _asks(text: str) -> dict[str, float]:
    return lexical_features(text, "", None, None)


def rule_of(model: dict | None) -> Rule:
    """The two-requests decision stored in a switch model's data: the classifier when fitted, else the former
    rule with its stored (or default) threshold and lead."""
    found = ((model or {}).get("ranker") or {}).get("requests") or {}
    if "coef" in found:
        return RequestsModel.model_validate(found)
    return ThresholdRule(float(found.get("min_probability", MIN_PROBABILITY)),
                         float(found.get("min_lead", MIN_LEAD)))


@lru_cache(maxsize=8)
def rule_for(path: str | None) -> Rule:
    """``rule_of`` the switch model in ``path`` ('' / None: the bundled one), read once per file as the model
    itself is (``ranker.load_ranker``), not validated again on every turn."""
    ranker = load_ranker(path)
    return rule_of(ranker.meta if ranker else None)


def _place(name: str, order: Sequence[str]) -> float:
    return float(order.index(name)) if name in order[:RANK_CAP] else float(RANK_CAP)


def _gap(lp: dict[str, float], name: str) -> float:
    """How far below the ranking's best ``name`` stands, in log-probability (capped; 0 for the best)."""
    return min(GAP_CAP, max(lp.values()) - lp[name]) if name in lp else GAP_CAP


def _margin(order: Sequence[str], lp: dict[str, float]) -> float:
    return min(GAP_CAP, lp[order[0]] - lp[order[1]]) if len(order) > 1 else GAP_CAP


def _ordered(lp: dict[str, float]) -> list[str]:
    return sorted(lp, key=lambda n: -lp[n])


def cut_features(head: str, tail: str, head_lp: dict[str, float], tail_lp: dict[str, float],
                 whole_lp: dict[str, float]) -> dict[str, float]:
    """``CUT_FEATURES`` of one cut, from the log-probabilities of the head's, the tail's and the whole
    message's rankings (``ranker.log_softmax``); each ranking non-empty."""
    ho, to, wo = _ordered(head_lp), _ordered(tail_lp), _ordered(whole_lp)
    a, b, w = ho[0], to[0], wo[0]
    ha, ta = _asks(head), _asks(tail)
    return {
        "head_margin": _margin(ho, head_lp), "tail_margin": _margin(to, tail_lp), "whole_margin": _margin(wo, whole_lp),
        "head_gap": _gap(whole_lp, a), "tail_gap": _gap(whole_lp, b),
        "head_rank": _place(a, wo), "tail_rank": _place(b, wo),
        "whole_in_head": _place(w, ho), "whole_in_tail": _place(w, to),
        "cross_head": _place(b, ho), "cross_tail": _place(a, to),
        "whole_is_part": float(w in (a, b)), "top_two_are_parts": float(set(wo[:2]) == {a, b}),
        "head_words": math.log(len(_WORD.findall(head))), "tail_words": math.log(len(_WORD.findall(tail))),
        "head_question": float(bool(QUESTION.search(head))), "tail_question": float(bool(QUESTION.search(tail))),
        "head_request": float(bool(ha["request"])), "tail_request": float(bool(ta["request"])),
    }


@dataclass(frozen=True)
class Cut:
    """A candidate cut: its parts with their picks, the whole message's log-probabilities, its features."""

    head: Request
    tail: Request
    whole: dict[str, float]
    features: dict[str, float]


def candidate_cuts(text: str, rank: Callable[[str], Sequence[tuple[str, float]]],
                   served: Callable[[str], bool]) -> list[Cut]:
    """The cuts of ``text`` whose parts each ask for something, are served and pick different workflows."""
    out: list[Cut] = []
    whole: dict[str, float] | None = None
    for head, tail in cuts(text):
        if not (is_request(head) and is_request(tail)):
            continue
        head_lp, tail_lp = log_softmax(rank(head)), log_softmax(rank(tail))
        if not head_lp or not tail_lp:
            continue
        a, b = max(head_lp, key=head_lp.get), max(tail_lp, key=tail_lp.get)
        if a == b or not (served(head) and served(tail)):
            continue
        whole = log_softmax(rank(text)) if whole is None else whole
        if not whole:
            return []
        out.append(Cut(Request(head, a, math.exp(head_lp[a])), Request(tail, b, math.exp(tail_lp[b])), whole,
                       cut_features(head, tail, head_lp, tail_lp, whole)))
    return out


def score(cut: Cut, pick: str, rule: Rule) -> float | None:
    """How surely the cut makes two requests under ``rule`` (higher = surer), None when it does not.  The
    former rule also wants the whole message's pick (``pick``) to be one of the parts'."""
    if isinstance(rule, RequestsModel):
        p = rule.probability(cut.features)
        return p if p >= rule.threshold else None
    a, b = cut.head, cut.tail
    if pick not in (a.workflow, b.workflow) or min(a.probability, b.probability) < rule.min_probability:
        return None
    if any(part.probability <= math.exp(cut.whole.get(part.workflow, -math.inf)) + rule.min_lead for part in (a, b)):
        return None  # one workflow reads the whole message as surely as the part: one request about both
    return min(a.probability, b.probability)


def two_requests(text: str, pick: str, rank: Callable[[str], Sequence[tuple[str, float]]],
                 served: Callable[[str], bool], rule: Rule | None = None) -> tuple[Request, Request] | None:
    """The two requests the message makes, in the order said; None when it makes one.  ``pick``: the whole
    message's workflow; ``rank``: a text's candidates with their logits (the retriever's ranking);
    ``served``: is a text in the library's scope (the scope gate); ``rule``: the decision (``rule_of`` the
    switch model; the former rule at its defaults when None).  Of several cuts, the surest."""
    best = surest(candidate_cuts(text, rank, served), pick, ThresholdRule() if rule is None else rule)
    return (best.head, best.tail) if best is not None else None


def surest(cuts_: Sequence[Cut], pick: str, rule: Rule) -> Cut | None:
    """Of a message's candidate cuts, the one ``rule`` is surest makes two requests (``score``); None when
    none does."""
    scored = [(s, cut) for cut in cuts_ if (s := score(cut, pick, rule)) is not None]
    return max(scored, key=lambda x: x[0])[1] if scored else None
