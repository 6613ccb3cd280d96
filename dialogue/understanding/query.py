"""FlowSwitch's self-generated query, written from the new request (plus context only when the turn
is elliptical: an accepted offer, "that one", a bare value)."""

from __future__ import annotations

import re
from typing import Sequence

from workflows.text import DISCOURSE

from .features import ELLIPTIC, IMPERATIVE, OFFER_CLAUSE, _content_words

_ACTION = re.compile(r"(?:(?:i want|i'?d like|i would like|i need)(?:\s+to)?|i wanna|can you|could you|would you|"
                     r"will you|help me|please|i'?m looking to|i am looking to|let'?s|is it possible to)\s+"
                     r"([^?.!,;]+)", re.I)


def new_request(turn: str) -> str:
    """The turn without the discourse markers that open it (the whole turn when nothing is left)."""
    rest = DISCOURSE.sub("", turn).strip()
    return rest if len(rest) >= 3 else turn


def _phrase(text: str, limit: int = 12) -> str:
    words = text.strip().split()
    return " ".join(words[:limit]).strip(" ,.;")


def self_generated_query(turn: str, agent: str, earlier: Sequence[str], feats: dict) -> str:
    """FlowSwitch's query format, written from the new request in the turn (plus context only when the
    turn is elliptical: an accepted offer, or almost no words of its own)."""
    turn = new_request(turn)
    own = len(_content_words(turn))
    # "block it please, my card was stolen" carries its own request: earlier turns would only pull
    # the search back to the previous task.
    context_needed = feats.get("accepts_offer") or own <= 1 or (ELLIPTIC.search(turn) and own <= 2)
    m = _ACTION.search(turn)
    # else the clause that opens with an imperative verb ("argh, plans changed, cancel that please": cancel)
    im = None if m else IMPERATIVE.search(turn)
    action = _phrase(m.group(1)) if m else _phrase(re.split(r"[,;.!?]", turn[im.start(4):])[0]) if im else ""
    offer = feats.get("offer_text") or ""
    if feats.get("accepts_offer") and offer:
        om = OFFER_CLAUSE.search(offer)
        action = _phrase(om.group(1)) if om else _phrase(offer)
    desc_parts = [turn]
    if context_needed:
        if offer:
            desc_parts.insert(0, offer)
        elif earlier:
            desc_parts = list(earlier[-2:]) + desc_parts
    description = " ".join(p.strip() for p in desc_parts if p.strip())
    if not action:
        action = _phrase(" ".join(_content_words(description)), 8) or _phrase(description)
    name = " ".join(w.capitalize() for w in _phrase(action, 6).split())
    return (f"Potential Name of the workflow: {name}, Task description of the workflow: {description}, "
            f"the action you need to take to solve the task: {action}")


