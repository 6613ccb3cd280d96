"""The agent graph builder: wires the nodes of ``nodes/`` into one LangGraph ``StateGraph``.

``build_agent(context, checkpointer, store)`` returns the compiled graph::

    START → recover → detector ─STAY────────────────────────────────────→ apply_commands
                         └─SEARCH→ router → retriever ─(found)──────────→ apply_commands
                                                └─(too close)→ clarify ─→ apply_commands
    apply_commands → experience → pre_controller → executor → post_controller
                                     ↑                ↑            ├─ rejected, retry → executor
                                     └──── tools ←────┼────────────├─ tool call → tools
                                                                   └─ reply → respond → END

The detector reads the turn into commands (its STAY/SEARCH is the first conditional edge); the
retriever or clarify resolve a search into a StartFlow; ``apply_commands`` applies them to the
dialogue stack.  Only wiring lives here.  Two guards wrap the nodes:
every node sees a ``Context`` (the one given to ``build_agent``, the run's ``context=``, or the
environment's), and the first node of a turn (``recover``) checks the input and the configuration, so
bad input fails with a message naming the field before any node changes the state, and replaces the
user's message by its normalised text (``normalise_input``) before any node reads it.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from pathlib import Path
from typing import Any, Callable, Literal

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from workflows.sanitize import MAX_MESSAGE_CHARS, normalize_text
from workflows.text import message_text

from .checkpoint import ledger_for
from .eventlog import logged
from .context import ROLES, Context, ContextError
from .models import ModelConfigError, role_model
from .state import InputState, OutputState, State, decision, turn_commands

# LangGraph reads a run's default durability from this configurable key (langgraph-api sets it too).
DURABILITY_KEY = "__pregel_durability"
MODEL_FIELDS = tuple(f"{role}_model" for role in ROLES)


class AgentInputError(ValueError):
    """The caller's input cannot be processed (e.g. an empty user message); names the field."""


# One error for unusable configuration, owned by graph.context (a bad Context value raises it when
# the Context is built; check_context adds the checks that need the registry or the file system).
AgentConfigError = ContextError


def check_context(context: Context) -> None:
    """Fail fast, naming the field: model specs parse, the library directory exists."""
    for name in MODEL_FIELDS:
        try:
            role_model(context, name.removesuffix("_model"))
        except ModelConfigError as exc:
            raise AgentConfigError(str(exc)) from None
    lib = Path(context.library)
    if not lib.is_dir():
        raise AgentConfigError(f"library: directory {str(lib)!r} does not exist (FLOWDESK_LIBRARY)")
    hints = typing.get_type_hints(Context)
    for name in ("retriever", "strategy", "representation", "fusion", "detector_mode"):
        choices = typing.get_args(hints[name])
        if choices and getattr(context, name) not in choices:
            raise AgentConfigError(f"{name}: {getattr(context, name)!r} is not one of {list(choices)}")


def check_input(state: dict) -> None:
    """The turn's user message must be non-empty and bounded."""
    messages = state.get("messages") or []
    if not messages or not isinstance(messages[-1], HumanMessage):
        raise AgentInputError("messages: a turn starts with a user message (role 'user'/'human')")
    text = message_text(messages[-1])
    if not text.strip():
        raise AgentInputError("messages[-1].content: the user message is empty")
    if len(text) > MAX_MESSAGE_CHARS:
        raise AgentInputError(f"messages[-1].content: {len(text)} characters is over the limit of "
                              f"{MAX_MESSAGE_CHARS}; send a shorter message")


def normalise_input(state: dict) -> tuple[dict, HumanMessage | None]:
    """The turn's user message as clean text (``workflows.sanitize.normalize_text``: invalid UTF-8,
    lone surrogates, control characters): the state every node reads, and the replacement message
    (None when the text was already clean)."""
    messages = list(state.get("messages") or [])
    last = messages[-1]
    clean = normalize_text(message_text(last))
    if isinstance(last.content, str) and last.content == clean:
        return state, None
    replaced = HumanMessage(content=clean, id=last.id, name=last.name)
    return {**state, "messages": [*messages[:-1], replaced]}, replaced


def _with_context(fn: Callable, default: Context | None, *, first: bool = False, ledger: str = "",
                  events: str = "") -> Callable:
    """Give ``fn`` a Runtime whose context is always a ``Context``; the first node also validates.
    ``ledger``: the agent's ledger location, for runs whose context names none (see build_agent);
    ``events``: the event log beside the checkpoints (``graph.eventlog``: the node's events are logged)."""
    fn = logged(fn.__name__, fn, events)

    @functools.wraps(fn)
    def node(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = runtime.context
        if ctx is None:
            ctx = default or Context()
        elif isinstance(ctx, dict):  # e.g. a caller passing a plain mapping
            ctx = Context(**ctx)
        if ledger and not ctx.ledger:
            ctx = Context(**{**{f.name: getattr(ctx, f.name) for f in dataclasses.fields(Context)}, "ledger": ledger})
        if not first:
            return fn(state, runtime.override(context=ctx))
        check_context(ctx)
        check_input(state)
        state, normalised = normalise_input(state)
        update = fn(state, runtime.override(context=ctx))
        if normalised is not None:  # the stored message is the normalised one (same id: add_messages replaces it)
            update = {**(update or {}), "messages": [normalised, *((update or {}).get("messages") or [])]}
        return update

    return node


def after_detector(state: State) -> Literal["router", "apply_commands"]:
    """STAY → apply the turn's commands; SEARCH → find the workflow first."""
    return "router" if decision(turn_commands(state)) == "SEARCH" else "apply_commands"


def after_retriever(state: State) -> Literal["clarify", "apply_commands"]:
    last = turn_commands(state)[-1:]
    return "clarify" if last and last[0].get("command") == "clarify" else "apply_commands"


def after_tools(state: State) -> Literal["detector", "pre_controller"]:
    """A declined confirmation whose answer said more than no (``nodes.tools``) is read as the next turn;
    otherwise the workflow goes on."""
    last = (state.get("messages") or [])[-1:]
    return "detector" if last and isinstance(last[0], HumanMessage) else "pre_controller"


def build_agent(context: Context | None = None, checkpointer=None, store=None, *, served: bool = False):
    """Compile the agent.  ``context`` is the default for runs that pass none (``context=`` wins).

    Exactly-once tools: the tool-call ledger lives beside ``checkpointer``'s store (``Context.ledger``
    overrides it; ``served``: the LangGraph server brings the checkpointer, ours by ``flowdesk serve``,
    so the ledger is beside ``FLOWDESK_CHECKPOINT_URL`` / the default file).  Runs default to
    ``durability="sync"``: each step's checkpoint is committed before the next step, so a turn with an
    irreversible tool is on disk before that tool runs (a caller's ``durability=`` still wins)."""
    from memory.ledger import ledger_location
    from nodes.recover import recover
    from nodes.apply_commands import apply_commands
    from nodes.clarify import clarify
    from nodes.controller import post_controller, pre_controller, route_after_post
    from nodes.detector import detector
    from nodes.executor import executor
    from nodes.experience import experience
    from nodes.respond import respond
    from nodes.retriever import retriever
    from nodes.router import router
    from nodes.tools import tools

    if context is not None:
        check_context(context)
    from memory.events import events_location

    ledger = ledger_location(None) if served and checkpointer is None else ledger_for(checkpointer)
    events = events_location(ledger)
    wrap = functools.partial(_with_context, default=context, events=events)
    with_ledger = functools.partial(_with_context, default=context, ledger=ledger, events=events)  # the nodes that use it

    g = StateGraph(State, context_schema=Context, input_schema=InputState, output_schema=OutputState)
    g.add_node("recover", with_ledger(recover, first=True))
    g.add_node("detector", wrap(detector))
    g.add_node("router", wrap(router))
    g.add_node("retriever", wrap(retriever))
    g.add_node("clarify", wrap(clarify))
    g.add_node("apply_commands", wrap(apply_commands))
    g.add_node("experience", wrap(experience))
    g.add_node("pre_controller", wrap(pre_controller))
    g.add_node("executor", wrap(executor))
    g.add_node("post_controller", wrap(post_controller))
    g.add_node("tools", with_ledger(tools))
    g.add_node("respond", wrap(respond))

    g.add_edge(START, "recover")
    g.add_edge("recover", "detector")
    g.add_conditional_edges("detector", after_detector, ["router", "apply_commands"])
    g.add_edge("router", "retriever")
    g.add_conditional_edges("retriever", after_retriever, ["clarify", "apply_commands"])
    g.add_edge("clarify", "apply_commands")
    g.add_edge("apply_commands", "experience")
    g.add_edge("experience", "pre_controller")
    g.add_edge("pre_controller", "executor")
    g.add_edge("executor", "post_controller")
    g.add_conditional_edges("post_controller", route_after_post, ["executor", "tools", "respond"])
    g.add_conditional_edges("tools", after_tools, ["detector", "pre_controller"])
    g.add_edge("respond", END)
    agent = g.compile(checkpointer=checkpointer, store=store, name="flowdesk")
    if checkpointer is None:  # nothing to make durable (the server passes its own durability per run)
        return agent
    return agent.with_config(configurable={DURABILITY_KEY: "sync"})
