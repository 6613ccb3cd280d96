"""The ``retriever`` node: ranks the routed workflow pool and resolves the turn's search.

Writes ``candidates`` (ranked, with scores, retriever and level) and appends to the turn's commands
either ``StartFlow(workflow=<top candidate>)`` or — when the top candidates are within
``context.clarify_margin`` of each other — ``Clarify(options)`` for the ``clarify`` node, or
``OutOfScope`` when no workflow is open and the scope gate (``dialogue.understanding.scope``,
``context.scope_gate``) finds the turn far from every workflow.  With no workflow open, a message holding
two requests (``dialogue.understanding.requests``: each part ranked on its own) gives two StartFlows: the
first said, and the other ``queued`` below it.  The margin
is in the configured retriever's score units (RRF ~1/60, cosine in [-1, 1]), or, with
``context.context_prior``, in the re-ranked units (top = 1 + prior).
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dialogue.commands import Clarify, OutOfScope, StartFlow, dump
from dialogue.execution.interpreter import message_words
from dialogue.turn import make_env, open_frame
from dialogue.understanding.belief import initial_belief, side_question
from dialogue.understanding.features import announced_aside, split_history
from dialogue.understanding.prior import DEFAULT_PRIOR, context_rerank, rerank_text
from dialogue.understanding.ranker import DEPTH, evidence, load_ranker
from dialogue.understanding.requests import rule_for, two_requests
from dialogue.understanding.scope import load_scope, scope_features
from dialogue.understanding.slots import value_labels
from graph.context import Context
from graph.resources import get_resources, model_for
from graph.state import State, active_workflow, search_query_of, turn_commands


def too_close(candidates: list[dict], margin: float) -> list[str]:
    """Names of the candidates within ``margin`` of the best (empty unless at least two are)."""
    if margin <= 0 or len(candidates) < 2:
        return []
    best = candidates[0]["score"]
    close = [c["workflow"] for c in candidates if best - c["score"] < margin]
    return close if len(close) >= 2 else []


def _with_prior(state: State, library, candidates: list[dict]) -> list[dict]:
    by_name = {c["workflow"]: c for c in candidates}
    seen = [f["workflow"] for f in state.get("stack") or []]
    ranking = context_rerank([(c["workflow"], c["score"]) for c in candidates], library,
                             active_workflow(state), seen, rerank_text(state.get("messages") or []))
    return [{**by_name[name], "score": round(score, 6)} for name, score in ranking]


def _learned(state: State, ctx: Context, res, query: str, candidates: list[dict], route: dict | None,
             frame: dict | None) -> tuple[list[dict], dict[str, float]]:
    """The candidates in the learned ranker's order (score = its logit) and the pick's belief.  Its
    lexical and dense evidence comes from the same routed pool (a hierarchical route still holds);
    ``frame``: the open frame (a settled one counts as seen, not active)."""
    ranker = load_ranker(ctx.switch_model)
    if ranker is None:
        return candidates, {}
    text, agent, _ = split_history(state.get("messages") or [])
    text = labelled(text, res.library, frame["workflow"] if frame else None)
    lexical = [(c["workflow"], float(c["score"])) for c in
               res.retriever.search(query, retriever="bm25", strategy=ctx.strategy, top_k=DEPTH, route=route)]
    dense = [(c["workflow"], float(c["score"])) for c in
             res.retriever.search(query, retriever="dense", strategy=ctx.strategy, top_k=DEPTH, route=route)]
    ev = evidence(text, agent, [(c["workflow"], float(c["score"])) for c in candidates], lexical, dense)
    stack = state.get("stack") or []
    seen = [f["workflow"] for f in stack]
    active = frame["workflow"] if frame else None
    # The active workflow and its pick's alternatives compete too (a search may find the same task).
    extra = ([active] if active else []) + list((frame.get("belief") or {}) if frame else [])
    scores = ranker.picker().scores(ev, res.library, active, seen, extra)
    if active and scores and side_question(text, frame, scores[0][0], res.library):
        scores = sorted(scores, key=lambda x: x[0] != active)  # stable: the active first, the rest as ranked
    elif active and len(scores) > 1 and scores[0][0] == active and scores[1][1] >= 0 and announced_aside(text):
        # the user says it is another matter ("before that, where is my other order?"), and the ranker itself finds
        # another workflow more likely right than not (a logit of at least 0): that one ("by the way, do you have
        # wifi?" fits none: the active one stays, and says it cannot help)
        scores = sorted(scores, key=lambda x: x[0] == active)
    wfs = res.library.workflows
    by_name = {c["workflow"]: c for c in candidates}
    out = [{**by_name.get(n, {"workflow": n, "domain": wfs[n].domain, "role": wfs[n].role,
                             "retriever": "bm25", "level": "flat"}), "score": round(s, 6)} for n, s in scores]
    return out, initial_belief(scores)


def labelled(text: str, library, active: str | None) -> str:
    """``text`` with what its references are (``slots.value_labels``: "where is ORD-7003?" also says "Order
    number"), so the search meets the workflows that take them."""
    labels = value_labels(text, library.workflows.values(), library.workflows.get(active) if active else None)
    return f"{text} ({', '.join(labels)})" if labels else text


def served(state: State, res) -> bool:
    """Does the library serve a turn with no open workflow at all (a search from inside one was decided by
    the detector)?  False only when the scope gate (``dialogue.understanding.scope``) says the turn is far
    from every workflow."""
    # the user's own words, as the gate was fitted (the self-generated query may add the agent's words), with what
    # their references are ("ORD-7004" is an order number: a desk that takes order numbers serves the turn)
    return serves(labelled(split_history(state.get("messages") or [])[0] or search_query_of(state), res.library, None),
                  res)


def serves(text: str, res) -> bool:
    """The scope gate on one text (True without a gate)."""
    gate = load_scope()
    if gate is None or not text.strip():
        return True
    dense = [(c["workflow"], float(c["score"])) for c in
             res.retriever.search(text, retriever="dense", strategy="flat", top_k=1)]
    interps = res.interpreters
    return gate.in_scope(scope_features(text, dense, message_words, lambda name: interps[name].vocabulary,
                                        res.library_words))


def part_ranking(ctx: Context, res, text: str) -> list[tuple[str, float]]:
    """A part of the message ranked on its own, as a search with nothing open ranks a whole turn (the
    learned ranker's logits over the configured retriever's, BM25's and the dense candidates)."""
    ranker = load_ranker(ctx.switch_model)
    if ranker is None:
        return []

    def search(kind: str) -> list[tuple[str, float]]:
        return [(c["workflow"], float(c["score"])) for c in
                res.retriever.search(text, retriever=kind, strategy="flat", top_k=DEPTH, fusion=ctx.fusion)]

    ev = evidence(text, "", search(ctx.retriever), search("bm25"), search("dense"))
    return ranker.picker().scores(ev, res.library, None, [], [])


def queued_request(state: State, ctx: Context, res, pick: str, turn: int) -> list[StartFlow]:
    """A second request in the same message (``dialogue.understanding.requests``): the first one said is
    started, the other queued on the stack; [] when the message makes one request."""
    text = split_history(state.get("messages") or [])[0]
    ranker = load_ranker(ctx.switch_model)
    found = two_requests(text, pick, lambda part: part_ranking(ctx, res, part), lambda part: serves(part, res),
                         rule_for(ctx.switch_model)) if text and ctx.ranker and ranker else None
    if found is None:
        return []
    first, second = found
    return [StartFlow(workflow=first.workflow, query=first.text, turn=turn, source="retriever",
                      confidence=round(first.probability, 6)),
            StartFlow(workflow=second.workflow, query=second.text, turn=turn, source="retriever",
                      confidence=round(second.probability, 6), queued=True)]


def retriever(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    res = get_resources(ctx)
    route = state.get("route") if ctx.strategy != "flat" else None  # the router ran before (graph/agent.py)
    depth = max(ctx.top_k, DEFAULT_PRIOR.depth if ctx.context_prior else DEPTH if ctx.ranker else 0)
    frame = open_frame(state.get("stack") or [], make_env(0, res.library.workflows, res.interpreters))
    query = labelled(search_query_of(state), res.library, frame["workflow"] if frame else None)
    candidates = res.retriever.search(query, retriever=ctx.retriever, strategy=ctx.strategy,
                                      representation=ctx.representation, top_k=depth, fusion=ctx.fusion,
                                      route=route or None)
    belief: dict[str, float] = {}
    # A frame the turn itself cancels ("never mind the restaurant, I need a hotel instead") is not the active one
    # the pick weighs: the user has just left it.  Its workflow stays a candidate, as for any opening request
    # ("forget this booking, book me another table" starts it afresh).
    cancelled = {c.get("workflow") for c in turn_commands(state) if c.get("command") == "cancel_flow"}
    if frame is not None and frame["workflow"] in cancelled:
        frame = None
    if ctx.ranker and candidates:
        candidates, belief = _learned(state, ctx, res, query, candidates, route or None, frame)
    elif ctx.context_prior and candidates:
        candidates = _with_prior(state, res.library, candidates)
    candidates = candidates[:ctx.top_k]
    turn = int(state.get("turn") or 0)
    options = too_close(candidates, ctx.clarify_margin)
    # the gate was fitted to the offline reading; an LLM detector's SEARCH is its own judgement of scope
    llm_detector = ctx.detector_mode != "offline" and model_for(ctx, "detector") is not None
    if candidates and frame is None and ctx.scope_gate and not llm_detector and not served(state, res):
        return {"candidates": candidates, "commands": dump([OutOfScope(turn=turn)])}
    if options:
        commands = [Clarify(options=options, turn=turn)]
    elif candidates:
        # with nothing open, a message may hold two requests: the first said starts, the second waits
        commands = (queued_request(state, ctx, res, candidates[0]["workflow"], turn) if frame is None else []) or \
            [StartFlow(workflow=candidates[0]["workflow"], query=query, turn=turn, source="retriever",
                       confidence=round(float(candidates[0].get("score", 0.0)), 6), belief=belief)]
    else:
        commands = []
    return {"candidates": candidates, "commands": dump(commands)}
