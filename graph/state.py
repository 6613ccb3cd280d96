"""The agent's state, field by field (what Studio shows for every thread).

Every field has one owner (the node that writes it) and one reducer (how a write is merged); nodes
return only their change.  Per-turn lists (``commands``, ``violations``) carry the turn number and
their reducer keeps the newest turn's; ``stack`` is changed through operations that ``merge_stack``
applies (see ``dialogue.frames``).

| field | owner(s) | reducer |
|---|---|---|
| messages | caller (user; the first node replaces it by its normalised text), tools, respond | ``add_messages`` |
| recovered | recover (calls a crash left unreported, settled from the ledger) | ``this_turn`` |
| turn | detector | replace |
| reading | detector | replace |
| commands | detector; retriever, clarify (resolve the search); apply_commands (slot commands) | ``this_turn`` |
| search_query, user_intention | detector | replace |
| route | router | replace |
| candidates | retriever | replace |
| stack | apply_commands (frame lifecycle), tools (call outcomes), recover (outcomes a crash left unrecorded), respond (replies) | ``merge_stack`` ops |
| experience, prerequisites | experience | replace |
| hints | pre_controller | replace |
| proposal | executor | replace |
| violations | post_controller | ``this_turn`` |
| action | post_controller (the accepted proposal, or the safe reply; None = retry) | replace |
| trace | every node that logs an event | ``bounded_trace`` (latest 200) |
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages

from dialogue.frames import Frame, bounded_trace, interrupted, merge_stack, this_turn

SCHEMA_VERSION = 2  # 1: active_workflow/workflow_stack/progress (before the dialogue stack)


class Candidate(TypedDict, total=False):
    """One ranked workflow from the retriever."""

    workflow: str  # workflow name in the library
    domain: str
    role: str
    score: float  # fused score, higher is better
    retriever: str  # "bm25" | "dense" | "hybrid"
    level: str  # strategy that produced it: "flat" | "D>W" | "R>W" | "D>R>W"


class Proposal(TypedDict, total=False):
    """An action: a tool call or a reply."""

    kind: Literal["tool", "reply"]
    name: str  # API name (tool) or ANSWER name (reply)
    args: dict[str, Any]  # tool arguments (reply: {"slots": [...]} it asks for)
    text: str  # reply text shown to the user
    call_id: str
    completes: bool  # sending this reply completes the workflow instance


class Reading(TypedDict, total=False):
    """What the user's turn says whatever the workflow (control data: never a slot)."""

    text: str
    yesno: bool | None
    info_missing: bool  # "I don't know" / "no idea"


class InputState(TypedDict):
    """What a caller sends: the new user message(s)."""

    messages: Annotated[list[AnyMessage], add_messages]


class State(InputState, total=False):
    turn: int  # user turns so far
    recovered: Annotated[list[dict[str, Any]], this_turn]  # calls a crash cut short, reported this turn (recover)
    version: int  # state schema version (SCHEMA_VERSION)
    reading: Reading
    commands: Annotated[list[dict[str, Any]], this_turn]  # the turn's commands (dialogue.commands)
    search_query: str  # the detector's self-generated query (on SEARCH)
    user_intention: str  # the detector's one-line reading of what the user wants
    route: dict[str, list[str]]  # the router's pick: {"domains": [...], "roles": [...]} (empty = flat)
    candidates: list[Candidate]  # ranked workflows from the last search
    stack: Annotated[list[Frame], merge_stack]  # the dialogue stack; the last frame is the active workflow
    experience: str  # WISE-Flow experience block for this step ("" when none)
    prerequisites: list[dict[str, Any]]  # verified learned prerequisites the PDL lacks (dialogue.experience)
    hints: list[str]  # pre-decision hints for this step
    proposal: Proposal | None  # the executor's proposed action this step
    violations: Annotated[list[dict[str, Any]], this_turn]  # post-decision rejections in this turn
    action: Proposal | None  # what passed the post-decision gate (None: rejected, the executor retries)
    trace: Annotated[list[dict[str, Any]], bounded_trace]  # event stream (user/assistant/environment)


class OutputState(TypedDict, total=False):
    messages: list[AnyMessage]
    stack: list[Frame]
    commands: list[dict[str, Any]]
    candidates: list[Candidate]
    violations: list[dict[str, Any]]


def active_workflow(state: dict) -> str | None:
    """The active workflow's name (a view of the stack, for callers and evaluations)."""
    stack = state.get("stack") or []
    return stack[-1]["workflow"] if stack and stack[-1].get("status") in ("active", "done") else None


def interrupted_workflows(state: dict) -> list[str]:
    """Interrupted workflows that can be resumed, oldest first (a view of the stack)."""
    return [f["workflow"] for f in interrupted(state.get("stack"))]


def turn_commands(state: dict) -> list[dict[str, Any]]:
    """The current turn's commands (the reducer keeps the newest turn's, which lags until the detector
    of a new turn has written one)."""
    turn = int(state.get("turn") or 0)
    return [c for c in state.get("commands") or [] if int(c.get("turn") or 0) == turn]


def given_slots(commands: list[dict[str, Any]] | None) -> list[str]:
    """The slots the turn's commands gave values for (set or corrected)."""
    return [c["slot"] for c in commands or [] if c.get("command") in ("set_slot", "correct_slot") and c.get("slot")]


def decision(commands: list[dict[str, Any]] | None) -> Literal["STAY", "SEARCH"]:
    """The detector's visible decision: SEARCH when the turn asks to find a workflow."""
    return "SEARCH" if any(c.get("command") == "start_flow" and not c.get("workflow") for c in commands or []) \
        else "STAY"


def search_query_of(state: dict) -> str:
    """What a search looks for: the detector's self-generated query, else the last user message."""
    from workflows.text import last_user_text

    return (state.get("search_query") or "").strip() or last_user_text(state.get("messages") or [])


def frame_for(state: dict, workflow: str) -> dict:
    """The latest frame of ``workflow`` on the stack ({} when there is none) — a view for callers."""
    return next((f for f in reversed(state.get("stack") or []) if f.get("workflow") == workflow), {})
