"""The ``experience`` node: WISE-Flow's online step — inject learned guidance before execution.

With ``context.experience`` on and an experience store induced from logged trajectories, the node
writes the block that best matches the active workflow and the user's intention to ``experience``;
the executor shows it to the LLM policy.  No experience store exists yet (``flowdesk induce`` is to
come), so the node writes ``""``: an honest no-op that keeps the graph's shape.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State


def experience(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    return {"experience": ""}
