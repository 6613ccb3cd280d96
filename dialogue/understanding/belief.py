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

When the switch model holds a fitted reviser (``flowdesk train switch``), it decides instead of the
margin: gradient-boosted trees over each alternative compared with the active workflow on everything
said since the pick (``reviser_rows``), fitted on the agent's own closed-loop mistakes on the training
splits.  An alternative the turn itself does not speak of needs a second threshold, a third when the turn
answers a question only the agent's words asked, and none may be revised to on a turn that answers the
active procedure's own question or corrects a value (``reviser_candidates``).

A turn that answers the yes/no question the active procedure waits on (and neither corrects the pick
nor asks for anything else) is not re-verified: the procedure progresses as expected, and the words
around the answer are no evidence of another task (``answers_question``).

Re-verification scores the alternatives without the "active workflow" features (the stay prior is the
margin, not a feature that would always vote for the pick being checked).
"""

from __future__ import annotations

import re
from functools import lru_cache
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
                      turn: int, commands: Sequence, messages: Sequence = (), scorer=None, dense=None) -> list:
    """The turn's re-verification of the active frame: ``ReviseFlow`` when the evidence overturns the
    pick, ``VerifyFlow`` (the updated belief) when it holds, nothing when the turn navigates or the
    frame has no belief.  With a fitted reviser in the switch model (and the conversation's
    ``messages`` and a ``scorer``), the reviser decides; else the belief's margin does."""
    from ..commands import ReviseFlow, VerifyFlow

    if ranker is None or not frame or frame.get("status") != "active" or not frame.get("belief"):
        return []
    if any(getattr(c, "command", "") in ("start_flow", "resume_flow", "cancel_flow", "human_handoff", "close",
                                         "chitchat", "capabilities") for c in commands):
        return []
    if answers_question(frame, ev.text):
        return []
    active = frame["workflow"]
    belief, target = reverify(ranker, ev, library, active, seen, dict(frame["belief"]))
    reviser = ranker.meta.get("reviser")
    if reviser and scorer is not None and messages:
        target, p = revise_choice(reviser, reviser_candidates(ranker, frame, ev, messages, library, scorer, seen,
                                                              belief, dense))
        if target is None:
            return [VerifyFlow(workflow=active, belief=belief, turn=turn)]
        belief = {**belief, target: max([belief.get(target, -1e9), *belief.values()])}
        return [ReviseFlow(workflow=target, previous=active, belief=belief, turn=turn,
                           reason=f"everything said since the pick fits it better (p={p:.2f})")]
    if target is not None and not is_correction(ev.text) and not speaks_of(ev.text, library, target, active):
        target = None  # "Sure, Ben" answers the question asked; it says nothing of another task
    if target is not None:
        why = "the user corrects the pick" if is_correction(ev.text) else "later turns fit it better"
        return [ReviseFlow(workflow=target, previous=active, belief=belief, reason=why, turn=turn)]
    return [VerifyFlow(workflow=active, belief=belief, turn=turn)]


def answers_question(frame: dict, text: str) -> bool:
    """The turn answers the yes/no question the active procedure waits on (the executor reads it into
    the frame's pending condition): the procedure progresses as expected and the turn says nothing of
    which task the user is on.  Its other words ("no, I've changed my mind") are the answer's, not a
    request: on an unseen library (FlowBench sessions) they matched some other workflow's wording and
    the reviser left a right pick.  An explicit correction ("no, I meant …") or a turn that also asks for
    something ("yes, and can you block my card") still re-verifies."""
    from .navigation import is_instruction
    from .policy_offline import answers_yes_no

    return answers_yes_no(text, ",".join(frame.get("asked") or [])) and not is_correction(text) \
        and not is_instruction(text)


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


# --- the learned reviser ----------------------------------------------------------------------------
# Re-verification above adds one turn's evidence to the pick's belief and needs a fixed margin; the
# reviser instead reads everything said since the pick (the user's turns together, the agent's
# questions) against each alternative and is fitted on the agent's own mistakes: closed-loop traces of
# the training splits (``flowdesk train switch``), label "this alternative is the gold while the active
# pick is not".  Its features compare an alternative with the active workflow; none names a service.

REVISER_FEATURES = (
    "belief_gap", "in_belief", "turn_gap", "acc_gap", "rank_acc_gap",
    "lex_norm_acc", "lex_top_acc", "lex_top_turn", "enum_acc", "slot_acc", "verb_acc", "clash_acc", "names_acc",
    "user_cover", "agent_cover", "speaks_turn", "speaks_acc", "correction", "since", "same_domain", "same_role",
    "agent_last_cover", "dense_acc_gap", "dense_agent_gap",
)
# Row mark (not a feature): the turn follows a question only the agent's words ask and does not speak of the
# alternative (``reviser_candidates``).
ANSWER = "answers_unspoken"
ACC_DEPTH = 5  # alternatives taken from the ranking of everything said since the pick
DENSE_TURNS = 4  # the user's turns since the pick that are embedded (the encoder's cost grows with length)


def since_pick(messages: Sequence, started: int, last: int = 0) -> tuple[str, str]:
    """(the user's turns from the pick's turn on, joined; the agent's messages between them, joined);
    ``last`` > 0 keeps only the last ``last`` user turns."""
    from workflows.text import message_text, role_of

    users: list[str] = []
    agents: list[str] = []
    n = 0
    for m in messages:
        role, text = role_of(m), message_text(m).strip()
        if role == "user" and text:
            n += 1
            if n >= started:
                users.append(text)
        elif role == "agent" and text and n >= started:
            agents.append(text)
    return " ".join(users[-last:] if last else users), " ".join(agents)


def _cover(wf, text_words: set[str]) -> float:
    """Share of a workflow's slot words (names and values) the text mentions."""
    from workflows.text import content_words, stemmed

    words = stemmed(set().union(*(content_words(f"{sl.name} {' '.join(sl.enum or [])}") for sl in wf.slots))
                    if wf.slots else set())
    return len(words & text_words) / len(words) if words else 0.0


def reviser_rows(ranker: Ranker, frame: dict, ev_turn: Evidence, messages: Sequence, library, scorer,
                 seen: Sequence[str], belief: dict[str, float], dense=None) -> list[tuple[str, dict[str, float]]]:
    """(alternative, its features against the active workflow) for one STAY turn; ``ev_turn`` is the
    turn's evidence (its re-verification's), ``belief`` the pick's belief after it; ``scorer`` ranks what
    was said since the pick; ``dense(texts, names) -> [{name: cosine}]`` (the retriever's dense scores;
    None = no dense evidence)."""
    import math

    from workflows.text import content_words, stemmed

    from .ranker import evidence, features

    active = frame["workflow"]
    wfs = library.workflows
    act = wfs.get(active)
    if act is None:
        return []
    text, agent = ev_turn.text, ev_turn.agent
    users, agents = since_pick(messages, int(frame.get("started") or 0))
    acc_rank = scorer(users)
    ev_acc = evidence(users, agent, acc_rank)
    names = [n for n in dict.fromkeys([*belief, *(n for n, _ in acc_rank[:ACC_DEPTH])]) if n in wfs and n != active]
    if not names:
        return []
    others = [n for n in seen if n != active]
    verifier = ranker.verifier()
    fa_turn = features(active, ev_turn, library, None, others)
    fa_acc = features(active, ev_acc, library, None, others)
    v_turn_a, v_acc_a, r_acc_a = verifier.logit(fa_turn), verifier.logit(fa_acc), ranker.logit(fa_acc)
    user_words = stemmed(content_words(users))
    agent_words = stemmed(content_words(agents))
    floor = min(belief.values()) - 1.0 if belief else -5.0
    b_active = belief.get(active, floor)
    correction = float(is_correction(text))
    since = math.log1p(max(0, sum(1 for _ in _user_turns(messages)) - int(frame.get("started") or 0)))
    top_turn = ev_turn.retrieval[0][0] if ev_turn.retrieval else ""
    top_acc = acc_rank[0][0] if acc_rank else ""
    agent_last = stemmed(content_words(agent))
    pool = [active, *names]
    recent = since_pick(messages, int(frame.get("started") or 0), DENSE_TURNS)[0]
    cos = dict(zip(("acc", "agent"), dense([recent, agent or " "], pool) if dense is not None else ({}, {})))

    def dgap(kind: str, n: str) -> float:
        c = cos[kind]
        return float(c.get(n, 0.0) - c.get(active, 0.0)) if n in c and active in c else 0.0

    rows = []
    for n in names:
        wf = wfs[n]
        ft, fc = features(n, ev_turn, library, None, others), features(n, ev_acc, library, None, others)
        f = {
            "belief_gap": belief.get(n, floor) - b_active, "in_belief": float(n in belief),
            "turn_gap": verifier.logit(ft) - v_turn_a, "acc_gap": verifier.logit(fc) - v_acc_a,
            "rank_acc_gap": ranker.logit(fc) - r_acc_a,
            "lex_norm_acc": fc["lex_norm"] - fa_acc["lex_norm"],
            "lex_top_acc": float(n == top_acc) - float(active == top_acc),
            "lex_top_turn": float(n == top_turn) - float(active == top_turn),
            "enum_acc": fc["enum_hit"] - fa_acc["enum_hit"], "slot_acc": fc["slot_hit"] - fa_acc["slot_hit"],
            "verb_acc": fc["verb_match"] - fa_acc["verb_match"], "clash_acc": fc["verb_clash"] - fa_acc["verb_clash"],
            "names_acc": fc["names_task"] - fa_acc["names_task"],
            "user_cover": _cover(wf, user_words) - _cover(act, user_words),
            "agent_cover": _cover(wf, agent_words) - _cover(act, agent_words),
            "speaks_turn": float(speaks_of(text, library, n, active)),
            "speaks_acc": float(speaks_of(users, library, n, active)),
            "correction": correction, "since": since,
            "same_domain": float(wf.domain == act.domain), "same_role": float(wf.role == act.role),
            "agent_last_cover": _cover(wf, agent_last) - _cover(act, agent_last),
            "dense_acc_gap": dgap("acc", n), "dense_agent_gap": dgap("agent", n) if agent else 0.0,
        }
        rows.append((n, f))
    return rows


def reviser_candidates(ranker: Ranker, frame: dict, ev_turn: Evidence, messages: Sequence, library, scorer,
                       seen: Sequence[str], belief: dict[str, float], dense=None) -> list[tuple[str, dict[str, float]]]:
    """The rows the reviser decides on (``reviser_rows``): none when the turn answers the pending yes/no
    question.  On a turn that answers the active procedure's own question (``frame["asked"]``) or corrects
    something, only the alternatives the turn itself speaks of: an answer ("tomas@example.com") or a
    corrected value ("sorry, I meant the 11th") says nothing of another task, and words of a digression
    since the pick belong to that digression.  On a turn that follows a question the active procedure did
    not ask (the agent's last message asks something, ``answers_agent``), an alternative the turn does not
    speak of is marked ``ANSWER`` and needs the reviser's ``threshold_answer`` (none = never): the question
    came from elsewhere than the pick, and on STAR most wrong picks the agent stayed on were only ever
    answered, never re-requested.  Every alternative otherwise, the reviser's ``threshold_unspoken`` then
    deciding on those the turn does not speak of.  Its training rows are these very rows
    (``evals.switch_train.reviser_rows_closed_loop``)."""
    if answers_question(frame, ev_turn.text):
        return []
    rows = reviser_rows(ranker, frame, ev_turn, messages, library, scorer, seen, belief, dense)
    # a correction naming no other task ("wait, I meant checking") corrects a value, not the pick; an answer to
    # the active procedure's own question is the procedure progressing
    if frame.get("asked") or is_correction(ev_turn.text):
        return [(n, {**f, ANSWER: 0.0}) for n, f in rows if f["speaks_turn"]]
    follows = answers_agent(frame, ev_turn.agent)
    return [(n, {**f, ANSWER: float(follows and not f["speaks_turn"])}) for n, f in rows]


def answers_agent(frame: dict, agent: str) -> bool:
    """The turn follows a question: the active procedure waits on a value, or the agent's last message
    asks something.  The turn is then read as the answer ("It's under Donald Knuth", "sorry, I meant the
    11th", "let's do Casa Fiorella instead"), evidence for the task that asked, and only an alternative the
    turn itself speaks of may be revised to ("no, I meant block my card" still can): what was said since
    the pick (a digression's words among it) is not enough.  Read from the agent's words as well as the
    frame so that a replayed dialogue, whose agent turns are the dataset's, meets the rule the live agent
    meets."""
    return bool(frame.get("asked")) or "?" in (agent or "")


def _user_turns(messages: Sequence):
    from workflows.text import message_text, role_of

    return (m for m in messages if role_of(m) == "user" and message_text(m).strip())


def revise_choice(reviser: dict, rows: Sequence[tuple[str, dict[str, float]]]) -> tuple[str | None, float]:
    """(the alternative the reviser revises to or None, its probability): the most probable alternative
    when its probability passes the reviser's threshold (both chosen on the training splits)."""
    if not rows:
        return None, 0.0
    booster = _booster(reviser["booster"])
    import numpy as np

    names = reviser.get("features") or REVISER_FEATURES  # the features the booster was fitted on
    # one thread: a handful of rows per turn, where LightGBM's thread pool costs far more than it saves
    probs = booster.predict(np.array([[f.get(k, 0.0) for k in names] for _, f in rows]), num_threads=1)
    passes = [j for j in range(len(rows)) if probs[j] > _threshold(reviser, rows[j][1])]
    if not passes:
        return None, float(max(probs))
    i = max(passes, key=lambda j: probs[j])
    return rows[i][0], float(probs[i])


def _threshold(reviser: dict, f: dict[str, float]) -> float:
    """The probability an alternative must pass: ``threshold`` when the turn itself speaks of it (a word of
    its task the active one lacks), ``threshold_unspoken`` when only what was said since the pick, the
    agent's offer or a correction points to it (both chosen closed loop on train; without the second,
    such an alternative is never revised to); ``threshold_answer`` for a row marked ``ANSWER`` (none = never:
    the models fitted before it)."""
    if f.get(ANSWER):
        t = reviser.get("threshold_answer")
        return float(t) if t is not None else float("inf")
    if f.get("speaks_turn"):
        return float(reviser.get("threshold", 0.5))
    t = reviser.get("threshold_unspoken")
    return float(t) if t is not None else float("inf")


@lru_cache(maxsize=4)
def _booster(model: str):
    import lightgbm as lgb

    return lgb.Booster(model_str=model)
