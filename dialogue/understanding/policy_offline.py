"""The offline switch-detector policy: a scored STAY/SEARCH decision over the features of the turn.

``score = w·features``; SEARCH iff ``score > threshold``.  Two rules come first: a turn naming
another workflow's task outright is a SEARCH; a new value for a slot of the active workflow is a STAY
(FlowAgent's intent switching with new values).  ``confidence`` ∈ [0.5, 1) grows with
``|score - threshold|``.  Out of scope — greetings, closings, chit-chat with no request and no
content — is ``STAY`` with ``out_of_scope``.  With no active workflow any in-scope turn is a SEARCH.
Weights and thresholds were tuned on training splits only (SGD train, STAR DialogueID % 5 in {1, 2})
with ``flowdesk eval switch --tune``.  A switch model fitted by ``flowdesk train switch --detector-only``
replaces the linear score with LightGBM trees over ``DETECTOR_FEATURES`` (the linear features and the
turn's context, ``features.CONTEXT_FEATURES``); a model without trees keeps the linear score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Literal, Sequence

from workflows.text import UNSURE, yes_no

from .closing import load_closing
from .features import (CONTEXT_FEATURES, QUESTION, announced_aside, asks_for_something, context_features,
                       foreign_share, lexical_features, markers_end_task, names_task, retrieval_feature,
                       slot_update, split_history)
from .query import self_generated_query
from .slots import restated

RETRIEVAL_TOP_K = 10


@dataclass(frozen=True)
class Params:
    """Tunable weights (defaults: tuned on SGD train + STAR train, see module docstring)."""

    # Grid-searched on SGD train (every 10th dialogue, 16,638 turns; ``--tune``): top-1 of
    # bm25/flat/text/Last1+ctx/on among the most accurate settings with switch recall >= 0.85 (STAR
    # train alone: threshold 1.5, w_answer 1.5, w_request 1.5, w_retrieval 1.0, w_verb 1.5, w_done 0).
    # w_offer, bias and margin were set by hand; w_done (the agent reported the task finished) was
    # tuned to 0 on both datasets and is kept as a feature for the grid.
    w_request: float = 1.0
    w_cue: float = 0.5
    w_offer: float = 1.5
    w_retrieval: float = 1.5
    w_answer: float = 1.0
    bias: float = 0.0
    threshold: float = 2.0
    w_verb: float = 1.5  # the intent verb moves away from the active workflow's (find -> book)
    w_done: float = 0.0
    margin: float = 0.2  # relative BM25 margin for "another workflow clearly wins"
    use_names: bool = True  # rule: naming another workflow's task is a SEARCH
    names_alone: bool = True  # ... even without a request phrase ("Where is my parcel? Track order 7")
    use_slot_update: bool = True  # rule: a new value for an active slot is a STAY
    use_digression: bool = True  # rule: an unrelated question/request while an answer is awaited is a SEARCH
    foreign: float = 0.75  # share of the turn's content words outside the active workflow's vocabulary
    # The learned detector's trees (a LightGBM model string over ``DETECTOR_FEATURES``): when set they
    # replace the linear score — SEARCH iff their probability that a search serves the turn where staying
    # would not (what they were fitted on) exceeds ``tree_threshold``.
    trees: str = ""
    tree_threshold: float = 0.5
    # ``veto``: the trees only overrule the linear score's searches (SEARCH iff both search), keeping its
    # stays — what they learned best is where a search is needless; ``replace``: they decide alone.
    tree_mode: str = "replace"
    # Record the trees' whole input row in the verdict (and so in the turn's trace) even without trees: what
    # ``flowdesk train switch --detector-only`` fits them on.  Off by default — the turn's context (a slot
    # reading of its own among it) is then not computed for a linear detector that does not read it.
    record_row: bool = False
    # Read the turns that may end the active task with the learned closing detector (``closing.py``) when
    # its model file is present; off: the hand-written closing markers.
    use_closing: bool = True


DEFAULT_PARAMS = Params()

# The features of the linear part, in the order a learned detector's weights are stored.
LINEAR_FEATURES = ("request", "cue", "verb_shift", "done", "offer_retrieval", "retrieval", "answer")
# The learned detector's trees read the linear features and the turn's context.
DETECTOR_FEATURES = LINEAR_FEATURES + CONTEXT_FEATURES


def learned_params(detector: dict | None, base: Params = DEFAULT_PARAMS) -> Params:
    """``Params`` from a detector fitted by ``flowdesk train switch`` (the ``detector`` entry of the switch
    model: logistic weights per ``LINEAR_FEATURES``, bias, threshold; and, in newer models, ``trees``:
    a LightGBM model string with its probability threshold); ``base`` when there is none."""
    if not detector:
        return base
    from dataclasses import replace

    w = detector["weights"]
    trees = detector.get("trees") or {}
    return replace(base, w_request=w["request"], w_cue=w["cue"], w_verb=w["verb_shift"], w_done=w["done"],
                   w_offer=w["offer_retrieval"], w_retrieval=w["retrieval"], w_answer=-w["answer"],
                   bias=detector["bias"], threshold=detector.get("threshold", 0.0),
                   trees=trees.get("booster", ""), tree_threshold=float(trees.get("threshold", 0.5)),
                   tree_mode=str(trees.get("mode", "replace")),
                   record_row=bool(detector.get("record_row", False)))


@lru_cache(maxsize=4)
def _booster(model: str):
    import lightgbm as lgb

    return lgb.Booster(model_str=model)


def tree_probability(trees: str, row: dict[str, float]) -> float:
    """The learned detector's probability that searching, not staying, ends the turn on the user's workflow."""
    import numpy as np

    booster = _booster(trees)
    return float(booster.predict(np.array([[row[k] for k in booster.feature_name()]]), num_threads=1)[0])

ScoreFn = Callable[[str], list[tuple[str, float]]]  # text -> [(workflow, score)] best first


@dataclass
class Verdict:
    action: Literal["STAY", "SEARCH"]
    out_of_scope: bool = False
    confidence: float = 1.0
    search_query: str = ""
    user_intention: str = ""
    policy: str = "offline"
    features: dict[str, float] = field(default_factory=dict)
    self_query: str = ""  # the self-generated query even on STAY (evaluations without the detector)
    row: dict[str, float] = field(default_factory=dict)  # the learned detector's inputs (DETECTOR_FEATURES)




def answers_choice(turn: str, workflow, pending: str | None) -> bool:
    """The turn picks one of the options the active workflow just asked for ("the item was returned" for
    a refund's reason, one option being ``item_returned``): an answer, even when its words name another
    task (return an item)."""
    from .slots import match_enum

    slots = [workflow.slot(n) for n in (pending or "").split(",") if workflow is not None and n]
    return any(s is not None and s.enum and match_enum(turn, s.enum) for s in slots)


def answers_yes_no(turn: str, pending: str | None) -> bool:
    """The active procedure waits on a yes/no condition and the turn is a yes or a no ("No, don't do
    that."): the answer it waits for, never the end of the task."""
    from workflows.semantics import is_condition_key

    return any(is_condition_key(p) for p in (pending or "").split(",") if p) and yes_no(turn) is not None


def answers_pending(turn: str, pending: str | None) -> bool:
    """The turn answers what the procedure asks, so it never ends the task: a yes or a no to its yes/no
    condition (``answers_yes_no``), or "I don't know" / "not sure" (the question is skipped:
    ``SkipQuestion``; a learned reader fitted on SGD, where such turns are rare, read "I don't know" to "Could
    you tell me the auth token?" as an ending)."""
    return bool(UNSURE.search(turn)) or answers_yes_no(turn, pending)


def _squash(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-2.0 * abs(x)))


def offline_decide(messages: Sequence[Any], active: str | None, workflow=None, score: ScoreFn | None = None,
                   pending: str | None = None, params: Params = DEFAULT_PARAMS,
                   roles: dict[str, str] | None = None, finished: bool = False,
                   filled: dict | None = None) -> Verdict:
    """``roles``: workflow name -> role, for the digression rule (without it the rule does not fire);
    ``finished``: the active workflow's procedure has run to its end; ``filled``: its frame's slot values."""
    turn, agent, earlier = split_history(messages)
    feats = lexical_features(turn, agent, workflow, pending)
    in_scope_request = asks_for_something(feats)
    fx: dict[str, float] = {k: v for k, v in feats.items() if isinstance(v, float)}

    def verdict(action: str, conf: float, oos: bool = False, why: str = "") -> Verdict:
        # once the active task has run to its end, the user's earlier turns were about it: a request now
        # is written without them ("thanks! can I cancel it?" after a tracking would search the tracking)
        query = self_generated_query(turn, agent, [] if finished else earlier, feats) if turn else ""
        intention = why or (f"the user wants to: {turn}" if turn else "")
        return Verdict(action, oos, conf, query if action == "SEARCH" else "", intention, "offline", fx,
                       query)  # type: ignore[arg-type]

    if not turn:
        return verdict("STAY", 0.95, oos=active is None, why="no user message")
    # The user ends the active task ("No, thanks!" to "anything else?", "maybe later" to an offer): out of
    # scope.  The learned closing detector reads it when its model is present, else the closing markers.
    if active is not None and not in_scope_request and not answers_pending(turn, pending):
        closer = load_closing() if params.use_closing else None
        ends = closer.ends(turn, agent, workflow, feats) if closer is not None else markers_end_task(feats)
        fx["ends_task"] = float(ends)
        if ends:
            return verdict("STAY", 0.9, oos=True, why="out of scope: the user ends the task")
    # Closings and greetings/thanks without any request or content: out of scope with nothing active, a
    # wrap-up inside the active workflow otherwise.
    if (feats["closing"] or feats["chit_chat"]) and not in_scope_request and feats["content_words"] <= 3:
        if active is None:
            return verdict("STAY", 0.9, oos=True, why="out of scope: closing or small talk")
        if finished and feats["closing"]:  # "thanks, that's all, bye!" once the task has run to its end
            fx["ends_task"] = 1.0
            return verdict("STAY", 0.9, oos=True, why="out of scope: the user ends the finished task")
        return verdict("STAY", 0.85, why="small talk or wrap-up inside the active workflow")
    # A bare yes/no when no workflow waits for one ("Yes, go ahead" after the booking is made) agrees to
    # nothing: there is no task in it to search for.
    if active is None and not in_scope_request and feats["content_words"] <= 1 and yes_no(turn) is not None:
        return verdict("STAY", 0.8, oos=True, why="out of scope: a yes/no with nothing asked")
    # Retrieval evidence on the turn, with the agent's offer/question when the turn is elliptical.
    probe = turn
    if feats["accepts_offer"] or feats["content_words"] <= 2:
        probe = f"{feats['offer_text'] or agent} {turn}"
    ranking = score(probe) if score is not None else []
    ret, info = retrieval_feature(ranking, active, params.margin)
    fx["retrieval"] = ret
    if active is None:
        if not ranking and not in_scope_request and feats["content_words"] == 0:
            return verdict("STAY", 0.8, oos=True, why="out of scope: nothing to search for")
        return verdict("SEARCH", 0.95, why=f"no active workflow; the user wants: {turn}")
    # "Wait, I meant B-1008 for the booking reference" once the change of B-1008 is done: a correction that only
    # restates what the finished task used changes nothing, and starts nothing (a search could find the
    # booking's cancellation, ready to run with that very reference)
    if finished and filled and workflow is not None and restated(turn, workflow, filled):
        return verdict("STAY", 0.85, why="a correction that restates what the finished task used")
    # Another workflow's task named outright ("can you also track my order?") is a switch; a new
    # value for an active slot is not, even with "change"/"instead" in it.
    named = "" if names_task(turn, active) or answers_choice(turn, workflow, pending) else next(
        (n for n, _ in ranking[:5] if n != active and names_task(turn, n)), "")
    fx["names_other"] = float(bool(named))
    if named and params.use_names and (params.names_alone or feats["request"] or feats["cue"]
                                       or feats["accepts_offer"]):
        return verdict("SEARCH", 0.85, why=f"the user names another task ({named})")
    # A digression: while the workflow waits for an answer the user asks or requests something the
    # active workflow's own words do not cover, and retrieval clearly prefers a workflow of another
    # role (a side remark near the active task — "is parking free there?" — is not a new task).
    fx["foreign"] = foreign_share(turn, workflow)
    question = bool(QUESTION.search(turn))
    asks = question or bool(feats["request"]) or bool(feats["cue"])
    elsewhere = bool(info.get("top")) and (roles or {}).get(info.get("top")) not in (None, workflow.role)
    # a question the user announces as an aside ("one more thing before that, where is ...?") needs only
    # retrieval to lean elsewhere; any other turn, retrieval to prefer another workflow clearly
    leans = ret >= 0.5 or (question and feats["cue"] and ret > 0)
    digression = params.use_digression and feats["asked"] and asks and fx["foreign"] >= params.foreign and leans \
        and elsewhere
    # an announced aside stays one when it also gives values the active workflow asked for ("actually first,
    # what's my savings balance? C-1001 pin 4821" while a card block asks for them): the aside is stacked
    # above the waiting task, which the user comes back to, rather than read into it
    # (announced, the aside needs no other role: "before that, where is my other order?" mid-cancellation)
    if announced_aside(turn) and (digression or params.use_digression and feats["asked"] and leans
                                            and info.get("top") not in (None, active)):
        return verdict("SEARCH", 0.8, why=f"an announced aside: another workflow fits better ({info.get('top')})")
    if params.use_slot_update and not feats["accepts_offer"] and not named \
            and slot_update(turn, workflow, bool(feats["request"])):
        fx["slot_update"] = 1.0
        return verdict("STAY", 0.8, why=f"a new slot value for {active}")
    if digression:
        return verdict("SEARCH", 0.8, why=f"a digression: another workflow fits better ({info.get('top')})")
    s = (params.w_request * feats["request"] + params.w_cue * feats["cue"] + params.w_verb * feats["verb_shift"]
         + params.w_done * feats["done"]
         + params.w_offer * feats["accepts_offer"] * max(0.0, ret)
         + params.w_retrieval * ret - params.w_answer * feats["answer"] + params.bias)
    fx["score"] = s
    row = {"request": feats["request"], "cue": feats["cue"], "verb_shift": feats["verb_shift"], "done": feats["done"],
           "offer_retrieval": feats["accepts_offer"] * max(0.0, ret), "retrieval": ret, "answer": feats["answer"]}
    wants_row = bool(params.trees or params.record_row)  # the turn's context: only what reads it pays for it
    if wants_row:
        row.update(context_features(turn, agent, feats, workflow, pending, ranking, active, len(earlier),
                                    fx["foreign"], finished, filled))
    if params.trees:
        p = tree_probability(params.trees, row)
        fx["probability"] = p
        action = "SEARCH" if p > params.tree_threshold and (params.tree_mode != "veto" or s > params.threshold) \
            else "STAY"
        conf = 0.5 + abs(p - params.tree_threshold)
    else:
        action = "SEARCH" if s > params.threshold else "STAY"
        conf = _squash(s - params.threshold)
    why = (f"another workflow fits better ({info.get('top')})" if action == "SEARCH"
           else f"continuing {active}")
    v = verdict(action, conf, why=why)
    v.row = row if wants_row else {}
    return v


