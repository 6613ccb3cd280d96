"""The ``router`` node: picks the upper layers of the library (domains / roles) for the search.

FlowSwitch's hierarchical strategies: D>W, R>W, D>R>W narrow the workflow pool to the top-k
domains and/or roles; ``flat`` searches the whole library (empty route).  With ``router_model``
set the LLM is asked to "select the top-k most relevant" items (JSON, retried, falling back to the
embedding router on malformed output); ``offline`` routes by embeddings.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.resources import get_resources, model_for
from graph.state import State, search_query_of


def route_for(state: State, ctx: Context) -> dict[str, list[str]]:
    if ctx.strategy == "flat":
        return {"domains": [], "roles": []}
    res = get_resources(ctx)
    return res.retriever.route(search_query_of(state), strategy=ctx.strategy, top_k_upper=ctx.top_k_upper,
                               router_model=model_for(ctx, "router"))


def router(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    return {"route": route_for(state, runtime.context)}
