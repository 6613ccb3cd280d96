"""The belief behind the active workflow, and revising it when later turns point elsewhere.

When the retriever picks a workflow, the frame keeps the ranker's log-probabilities of the runners-up
(``Frame.belief``).  Every later turn that stays in the workflow re-verifies the pick: the learned
ranker's verifier (``dialogue.understanding.ranker``, weights fitted on STAY turns) scores the same
alternatives on the new turn — slot words and enum values the user gives, the verb of the request, an
offer the user accepts, the agent's question — and the evidence is added to the belief.  When an
alternative leads the active workflow by more than ``Ranker.revise_margin`` (chosen on the training
splits), the turn's reading is ``ReviseFlow``: the frame is replaced and the slots that still fit
carry over.  An explicit correction ("no, I meant …") re-verifies with the correction's words alone and
a margin of zero.

Re-verification scores the alternatives without the "active workflow" features (the stay prior is the
margin, not a feature that would always vote for the pick being checked).
"""

from __future__ import annotations

import re
from typing import Sequence

from .ranker import Evidence, Ranker, log_softmax

# "no, I meant…", "I said…", "not that one, …": the user corrects what the agent understood.
CORRECTION = re.compile(r"^\W*(?:no|nope|nah|not that|wrong)\b.{0,40}?\b(?:i (?:meant|mean|said|wanted|asked)|"
                        r"i'?m (?:asking|talking) about|not\b)|\b(?:i meant|what i meant|i was asking about|"
                        r"that'?s not what i (?:asked|wanted|meant))\b", re.I)


def initial_belief(scores: Sequence[tuple[str, float]], size: int = 5) -> dict[str, float]:
    """The pick's belief: log-probabilities of the top ``size`` candidates."""
    return {n: round(v, 4) for n, v in log_softmax(list(scores[:size])).items()}


def is_correction(text: str) -> bool:
    return bool(CORRECTION.search(text or ""))


def reverify(ranker: Ranker, ev: Evidence, library, active: str, seen: Sequence[str],
             belief: dict[str, float]) -> tuple[dict[str, float], str | None]:
    """(the updated belief, the workflow to revise to or None)."""
    alternatives = [n for n in belief if n in library.workflows]
    if active not in alternatives or len(alternatives) < 2:
        return belief, None
    scores = [(n, s) for n, s in ranker.verifier().scores(ev, library, None, [n for n in seen if n != active],
                                               extra=alternatives) if n in alternatives]
    turn = log_softmax(scores)
    updated = {n: round(ranker.decay * belief[n] + turn.get(n, min(turn.values())), 4) for n in alternatives}
    best = max(alternatives, key=lambda n: updated[n])
    margin = 0.0 if is_correction(ev.text) else ranker.revise_margin
    if best != active and updated[best] - updated[active] > margin:
        return updated, best
    return updated, None


def revision_commands(ranker: Ranker | None, frame: dict | None, ev: Evidence, library, seen: Sequence[str],
                      turn: int, commands: Sequence) -> list:
    """The turn's re-verification of the active frame: ``ReviseFlow`` when the evidence overturns the
    pick, ``VerifyFlow`` (the updated belief) when it holds, nothing when the turn navigates or the
    frame has no belief."""
    from ..commands import ReviseFlow, VerifyFlow

    if ranker is None or not frame or frame.get("status") != "active" or not frame.get("belief"):
        return []
    if any(getattr(c, "command", "") in ("start_flow", "resume_flow", "cancel_flow", "human_handoff", "close",
                                         "chitchat") for c in commands):
        return []
    active = frame["workflow"]
    belief, target = reverify(ranker, ev, library, active, seen, dict(frame["belief"]))
    if target is not None and not is_correction(ev.text) and not speaks_of(ev.text, library, target, active):
        target = None  # "Sure, Ben" answers the question asked; it says nothing of another task
    if target is not None:
        why = "the user corrects the pick" if is_correction(ev.text) else "later turns fit it better"
        return [ReviseFlow(workflow=target, previous=active, belief=belief, reason=why, turn=turn)]
    return [VerifyFlow(workflow=active, belief=belief, turn=turn)]


def _words_of(wf) -> set[str]:
    from workflows.text import content_words, stemmed

    texts = [wf.name, wf.display_name, wf.description] + [f"{sl.name} {sl.description} {' '.join(sl.enum or [])}"
                                                          for sl in wf.slots]
    return stemmed(set().union(*(content_words(t) for t in texts)))


def speaks_of(text: str, library, target: str, active: str) -> bool:
    """The turn names something of ``target`` the active workflow does not have (a word of its title,
    description, slots or their values): the evidence a revision needs beyond the ranker's scores."""
    from workflows.text import content_words, stemmed

    said = stemmed(content_words(text or ""))
    other, own = library.workflows.get(target), library.workflows.get(active)
    if other is None or own is None:
        return True
    return bool(said & _words_of(other) - _words_of(own))


def side_question(text: str, frame: dict | None, pick: str | None, library) -> bool:
    """A question about the task at hand, not a new task: the active frame waits for an answer, the
    turn asks something without requesting anything, and the search found a sibling of the active
    workflow (same role).  The pick then stays with the active workflow (the executor answers the
    side question and asks again)."""
    from .features import QUESTION, REQUEST

    if not frame or frame.get("status") != "active" or not frame.get("asked") or not pick:
        return False
    active = library.workflows.get(frame.get("workflow") or "")
    other = library.workflows.get(pick)
    if active is None or other is None or pick == active.name or other.role != active.role:
        return False
    return bool(QUESTION.search(text)) and not REQUEST.search(text)
