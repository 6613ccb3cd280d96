"""The agent graph builder: wires the nodes of ``nodes/`` into one LangGraph ``StateGraph``.

``build_agent(context, checkpointer, store)`` returns the compiled graph::

    START → detector → resume ─STAY──────────────────────────────────→ experience
                         ├─SEARCH→ router → retriever ─(clear)─────→ experience
                         │                      └─(too close)→ clarify → experience
                         └─(resumed, next step is a question)──────→ post_controller
    experience → pre_controller → executor → post_controller
                   ↑                 ↑            ├─ rejected, retry → executor
                   └──── tools ←─────┼────────────├─ tool call → tools
                                                  └─ reply → respond → END

``resume`` takes a workflow back from ``workflow_stack`` when the user asks to return to it
(turning the detector's SEARCH into STAY).  Only wiring lives here.  Two guards wrap the nodes:
every node sees a ``Context`` (the one given to ``build_agent``, the run's ``context=``, or the
environment's), and the first node of a turn checks the input and the configuration, so bad input
fails with a message naming the field before any node changes the state.
"""

from __future__ import annotations

import functools
import typing
from pathlib import Path
from typing import Any, Callable

from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from .context import ROLES, Context, ContextError
from .models import ModelConfigError, role_model
from .state import InputState, OutputState, State

MAX_MESSAGE_CHARS = 20_000  # longer user messages are refused (embedding/LLM inputs stay bounded)
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


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)


def check_input(state: dict) -> None:
    """The turn's user message must be non-empty and bounded."""
    messages = state.get("messages") or []
    if not messages or not isinstance(messages[-1], HumanMessage):
        raise AgentInputError("messages: a turn starts with a user message (role 'user'/'human')")
    text = _text(messages[-1])
    if not text.strip():
        raise AgentInputError("messages[-1].content: the user message is empty")
    if len(text) > MAX_MESSAGE_CHARS:
        raise AgentInputError(f"messages[-1].content: {len(text)} characters is over the limit of "
                              f"{MAX_MESSAGE_CHARS}; send a shorter message")


def _with_context(fn: Callable, default: Context | None, *, first: bool = False) -> Callable:
    """Give ``fn`` a Runtime whose context is always a ``Context``; the first node also validates."""

    @functools.wraps(fn)
    def node(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = runtime.context
        if ctx is None:
            ctx = default or Context()
        elif isinstance(ctx, dict):  # e.g. a caller passing a plain mapping
            ctx = Context(**ctx)
        if first:
            check_context(ctx)
            check_input(state)
        return fn(state, runtime.override(context=ctx))

    return node


def _after_detector(state: State) -> str:
    return "router" if state.get("decision") == "SEARCH" else "experience"


def _after_resume(state: State) -> str:
    if state.get("resumed") and state.get("proposal"):
        return "post_controller"  # the resume node proposed the resumed workflow's next question
    return _after_detector(state)


def _after_retriever(state: State) -> str:
    return "clarify" if state.get("clarify") else "experience"


def build_agent(context: Context | None = None, checkpointer=None, store=None):
    """Compile the agent.  ``context`` is the default for runs that pass none (``context=`` wins)."""
    from nodes.clarify import clarify
    from nodes.controller import post_controller, pre_controller, route_after_post
    from nodes.detector import detector
    from nodes.executor import executor
    from nodes.experience import experience
    from nodes.respond import respond
    from nodes.resume import resume
    from nodes.retriever import retriever
    from nodes.router import router
    from nodes.tools import tools

    if context is not None:
        check_context(context)
    wrap = functools.partial(_with_context, default=context)

    g = StateGraph(State, context_schema=Context, input_schema=InputState, output_schema=OutputState)
    g.add_node("detector", _with_context(detector, context, first=True))
    g.add_node("resume", wrap(resume))
    g.add_node("router", wrap(router))
    g.add_node("retriever", wrap(retriever))
    g.add_node("clarify", wrap(clarify))
    g.add_node("experience", wrap(experience))
    g.add_node("pre_controller", wrap(pre_controller))
    g.add_node("executor", wrap(executor))
    g.add_node("post_controller", wrap(post_controller))
    g.add_node("tools", wrap(tools))
    g.add_node("respond", wrap(respond))

    g.add_edge(START, "detector")
    g.add_edge("detector", "resume")
    g.add_conditional_edges("resume", _after_resume, ["router", "experience", "post_controller"])
    g.add_edge("router", "retriever")
    g.add_conditional_edges("retriever", _after_retriever, ["clarify", "experience"])
    g.add_edge("clarify", "experience")
    g.add_edge("experience", "pre_controller")
    g.add_edge("pre_controller", "executor")
    g.add_edge("executor", "post_controller")
    g.add_conditional_edges("post_controller", _wrap_route(route_after_post, context),
                            ["executor", "tools", "respond"])
    g.add_edge("tools", "pre_controller")
    g.add_edge("respond", END)
    return g.compile(checkpointer=checkpointer, store=store, name="flowdesk")


def _wrap_route(route: Callable, default: Context | None) -> Callable:
    """Conditional-edge functions may take (state) or (state, runtime); give them a Context too."""
    import inspect

    params = inspect.signature(route).parameters
    if len(params) < 2:
        return route

    def route_after_post(state: State, runtime: Runtime[Context]) -> str:
        ctx = runtime.context or default or Context()
        return route(state, runtime.override(context=ctx))

    return route_after_post
