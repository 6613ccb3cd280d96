"""The ``retriever`` node: ranks the routed workflow pool and makes the best one active.

Writes ``candidates`` (ranked, with scores, retriever and level); ``clarify`` (the candidates
whose score is within ``context.clarify_margin`` of the best, when at least two are) — then the
active workflow is left for the ``clarify`` node to set; otherwise ``active_workflow`` = the top
candidate, pushing an unfinished previous workflow on ``workflow_stack`` so it can be resumed.
The margin is in the configured retriever's score units (RRF scores are ~1/60; cosine in [-1, 1]),
or, with ``context.context_prior``, in the re-ranked units (top = 1 + prior).
With ``context_prior`` the ranking is re-scored by the detector's conversation prior
(``nodes.detector.context_rerank``: the active role, roles used before, intent verb, slot values),
the same re-ranking the switching evaluation measures as the ``+ctx`` queries.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.resources import get_resources
from graph.state import State
from nodes.detector import DEFAULT_PRIOR, context_rerank, rerank_text
from nodes.router import query_of


def too_close(candidates: list[dict], margin: float) -> list[str]:
    """Names of the candidates within ``margin`` of the best (empty unless at least two are)."""
    if margin <= 0 or len(candidates) < 2:
        return []
    best = candidates[0]["score"]
    close = [c["workflow"] for c in candidates if best - c["score"] < margin]
    return close if len(close) >= 2 else []


def _with_prior(state: State, library, candidates: list[dict]) -> list[dict]:
    by_name = {c["workflow"]: c for c in candidates}
    seen = list((state.get("progress") or {}).keys())
    ranking = context_rerank([(c["workflow"], c["score"]) for c in candidates], library,
                             state.get("active_workflow"), seen, rerank_text(state.get("messages") or []))
    return [{**by_name[name], "score": round(score, 6)} for name, score in ranking]


def retriever(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    res = get_resources(ctx)
    route = state.get("route")
    if ctx.strategy == "flat":
        route = {"domains": [], "roles": []}
    elif not route:  # the router did not run (e.g. a caller wired retriever alone): route here
        route = res.retriever.route(query_of(state), strategy=ctx.strategy, top_k_upper=ctx.top_k_upper,
                                    router_model=res.model("router") or "offline")
    depth = max(ctx.top_k, DEFAULT_PRIOR.depth) if ctx.context_prior else ctx.top_k
    candidates = res.retriever.search(query_of(state), retriever=ctx.retriever, strategy=ctx.strategy,
                                      representation=ctx.representation, top_k=depth, fusion=ctx.fusion,
                                      route=route or None)
    if ctx.context_prior and candidates:
        candidates = _with_prior(state, res.library, candidates)
    candidates = candidates[:ctx.top_k]
    update: dict[str, Any] = {"candidates": candidates, "clarify": too_close(candidates, ctx.clarify_margin)}
    if not candidates or update["clarify"]:
        return update
    previous = state.get("active_workflow")
    top = candidates[0]["workflow"]
    stack = [w for w in (state.get("workflow_stack") or []) if w != top]  # resuming takes it off the stack
    if previous and previous != top:
        done = ((state.get("progress") or {}).get(previous) or {}).get("done")
        if not done and previous not in stack:
            stack.append(previous)
    update["active_workflow"] = top
    if stack != list(state.get("workflow_stack") or []):
        update["workflow_stack"] = stack
    return update
