"""The agent's state, field by field (what Studio shows for every thread).

Nodes return partial updates. ``messages`` and ``trace`` accumulate through reducers; every
other field is replaced by the node that owns it.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages


class Candidate(TypedDict, total=False):
    """One ranked workflow from the retriever."""

    workflow: str  # workflow name in the library
    domain: str
    role: str
    score: float  # fused score, higher is better
    retriever: str  # "bm25" | "dense" | "hybrid"
    level: str  # strategy that produced it: "flat" | "D>W" | "R>W" | "D>R>W"


class Progress(TypedDict, total=False):
    """Where one workflow instance stands (kept while the workflow is on the stack)."""

    executed: list[str]  # completed nodes (API and ANSWER names) in order
    slots: dict[str, Any]  # filled slot values
    results: dict[str, Any]  # values returned by APIs (name -> value), latest wins
    calls: dict[str, int]  # API name -> times called
    call_args: list[dict[str, Any]]  # [{"api": name, "args": {...}}] every call made, in order
    pending: str | None  # the node the workflow is waiting on (e.g. the question just asked)
    done: bool  # the procedure reached its end


class Proposal(TypedDict, total=False):
    """The executor's proposed next action."""

    kind: Literal["tool", "reply"]
    name: str  # API name (tool) or ANSWER name (reply)
    args: dict[str, Any]  # tool arguments
    text: str  # reply text shown to the user
    call_id: str


class Verdict(TypedDict, total=False):
    controller: str  # which post-decision check spoke
    ok: bool
    reason: str
    proposal: Proposal


class InputState(TypedDict):
    """What a caller sends: the new user message(s)."""

    messages: Annotated[list[AnyMessage], add_messages]


class State(InputState, total=False):
    active_workflow: str | None  # the workflow being executed (``w_a``)
    workflow_stack: list[str]  # interrupted workflows to offer to resume, most recent last
    decision: Literal["STAY", "SEARCH"] | None  # the detector's verdict for this turn
    search_query: str  # the detector's self-generated query (on SEARCH)
    user_intention: str  # the detector's one-line reading of what the user wants
    route: dict[str, list[str]]  # the router's pick: {"domains": [...], "roles": [...]} (empty = flat)
    candidates: list[Candidate]  # ranked workflows from the last search
    clarify: list[str]  # set when the top candidates are too close to call: ask between these
    progress: dict[str, Progress]  # per workflow name
    guidance: dict[str, Any]  # {"hints": [...pre-decision hints], "experience": "..."}
    proposal: Proposal | None  # the executor's proposed action this step
    violations: list[Verdict]  # post-decision rejections in this turn (reset each turn)
    attempts: int  # rejected proposals in this turn
    turn: int  # user turns so far
    trace: Annotated[list[dict[str, Any]], operator.add]  # event stream (user/assistant/environment)
    resumed: str | None  # workflow taken back from workflow_stack this turn (set by the resume node)


class OutputState(TypedDict, total=False):
    messages: list[AnyMessage]
    active_workflow: str | None
    decision: Literal["STAY", "SEARCH"] | None
    candidates: list[Candidate]
    violations: list[Verdict]
