"""The conversation prior for SEARCH turns: re-rank a retrieval ranking with the conversation's context
(the active role, roles used before, the intent verb, enum values).  Used by the retriever node when
``Context.context_prior`` is on and by the switching evaluation's ``+ctx`` queries."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from .features import _WORD, OFFER_CLAUSE, _slot_values, lexical_features, name_words, split_history, verb_groups

@dataclass
class Prior:
    """Re-ranking of a retrieval ranking with the conversation's context (tuned on train splits only)."""

    same_role: float = 0.4  # the active workflow's role/service: tasks of one service follow each other
    seen_role: float = 0.4  # a role used earlier in the conversation
    unseen_sibling: float = 0.4  # penalty: a role never used whose domain was (the near-duplicate service)
    verb: float = 0.2  # the turn's intent verb (reserve/book/buy vs find/search) matches the workflow's
    slot: float = 0.2  # an enum value of the workflow's slots is mentioned
    depth: int = 30  # how many retrieved candidates are re-ranked


DEFAULT_PRIOR = Prior()
def rerank_text(messages: Sequence[Any]) -> str:
    """The turn, plus the agent's offer when the turn accepts it ("Would you like to reserve?" "Yes")."""
    turn, agent, _ = split_history(messages)
    feats = lexical_features(turn, agent)
    offer = feats.get("offer_text") or ""
    if feats["accepts_offer"] and offer:
        m = OFFER_CLAUSE.search(offer)
        return f"{m.group(1) if m else offer} {turn}"
    return turn


def context_rerank(ranking: list[tuple[str, float]], library, active: str | None, seen: Sequence[str],
                   text: str, prior: Prior = DEFAULT_PRIOR) -> list[tuple[str, float]]:
    """``ranking`` (best first) re-scored as ``score / top score + prior(context)``.

    The prior favours the active workflow's role and roles used before in the conversation, and
    penalises an unused role of a domain already used (SGD's near-duplicate services: the one used
    before is the one the user means); optionally the intent verb and enum values in ``text``."""
    if not ranking or ranking[0][1] <= 0:
        return ranking
    wfs = library.workflows
    top = ranking[0][1]
    act = wfs.get(active) if active else None
    used = [wfs[n] for n in seen if n in wfs] + ([act] if act else [])
    roles = {w.role for w in used}
    domains = {w.domain for w in used}
    low = text.lower()
    tokens = set(_WORD.findall(low))
    turn_verbs = verb_groups(tokens)
    out = []
    for name, score in ranking[:prior.depth]:
        wf = wfs.get(name)
        p = 0.0
        if wf is not None:
            if act is not None and wf.role == act.role:
                p += prior.same_role
            if wf.role in roles:
                p += prior.seen_role
            elif wf.domain in domains:
                p -= prior.unseen_sibling
            if prior.verb and turn_verbs & verb_groups(name_words(name)):
                p += prior.verb
            if prior.slot and any(len(v) > 3 and re.search(rf"\b{re.escape(v)}\b", low) for v in _slot_values(wf)
                                  if v not in ("true", "false")):
                p += prior.slot
        out.append((name, score / top + p))
    out.sort(key=lambda x: -x[1])
    return out + [(n, sc / top) for n, sc in ranking[prior.depth:]]


