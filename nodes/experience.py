"""The ``experience`` node: WISE-Flow's online step — inject learned guidance before execution.

With ``context.experience`` on and an experience store present (``Resources.experience``, filled
by the offline ``induce`` graph from logged trajectories), the node asks the store for the block
that best matches the active workflow and the user's intention and writes it to
``guidance.experience``; the executor shows it to the LLM policy.  Otherwise — the default, and
whenever no store has been induced yet — it writes ``guidance.experience = ""``: an honest no-op,
so the graph's shape does not depend on whether experience exists.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.resources import get_resources
from graph.state import State


def _query(state: State, runtime: Runtime[Context]) -> str:
    active = state.get("active_workflow") or ""
    parts = [state.get("user_intention") or state.get("search_query") or ""]
    if active:
        wf = get_resources(runtime.context).library.workflows.get(active)
        parts.append(f"{active.replace('_', ' ')}: {wf.description if wf else ''}")
    return "\n".join(p for p in parts if p)


def experience(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    guidance = dict(state.get("guidance") or {})
    block = ""
    ctx = runtime.context
    if ctx.experience and state.get("active_workflow"):
        store = getattr(get_resources(ctx), "experience", None)
        if store is not None:
            # Contract of an experience store: ``search(query, k) -> list[str]`` of rendered blocks,
            # best first (WISE-Flow: retrieved workflow + aligned progress + checked prerequisites).
            hits = store.search(_query(state, runtime), 1)
            block = hits[0] if hits else ""
    guidance["experience"] = block
    return {"guidance": guidance}
