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
from graph.resources import get_resources
from graph.state import State


def query_of(state: State) -> str:
    """The detector's self-generated query, or the last user message when there is none."""
    query = (state.get("search_query") or "").strip()
    if query:
        return query
    for msg in reversed(state.get("messages") or []):
        if getattr(msg, "type", "") == "human":
            content = msg.content
            return content if isinstance(content, str) else " ".join(
                p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return ""


def router(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    if ctx.strategy == "flat":
        return {"route": {"domains": [], "roles": []}}
    res = get_resources(ctx)
    # Everything passed explicitly: the cached retriever may have been built under another context.
    route = res.retriever.route(query_of(state), strategy=ctx.strategy, top_k_upper=ctx.top_k_upper,
                                router_model=res.model("router") or "offline")
    return {"route": route}
