"""What every command shares: the base model and what applying a command may consult.

A command is the understanding step's reading of the user's turn, as data (Rasa CALM's commands):
policies emit them, ``apply_commands`` runs each on the dialogue stack, and the state keeps them
(``State.commands``) so Studio, the executor and the evaluations see what the agent understood.
Commands are immutable; ``apply`` returns a new stack and never mutates the one it was given.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from ..frames import Frame, top


@dataclass(frozen=True)
class ApplyEnv:
    """What applying a command may consult (never state it may change)."""

    turn: int
    has_workflow: Callable[[str], bool]  # is the name a workflow of the library?
    finished: Callable[[Frame], bool]  # has the frame's procedure reached its end?
    invalidate: Callable[[Frame, dict[str, Any]], list[str] | None]  # executed list after a slot change
    slots_of: Callable[[str], frozenset[str]] = lambda _name: frozenset()  # a workflow's slot names
    settled: Callable[[Frame], bool] = lambda _frame: False  # finished, with an irreversible call made
    takes: Callable[[str, str, Any], bool] = lambda _wf, _slot, _value: False  # a valid value of that slot?
    # does a new instance of the workflow start with the value an earlier task of the conversation holds under
    # the slot's name (who the user is, what they refer to: ids, email, phone — never a preference)?
    carries: Callable[[str, str], bool] = lambda _wf, _slot: False
    today: dt.date | None = None  # the desk's calendar date relative dates are read against (None = machine's)
    # the library's sentence embeddings (texts -> L2-normalised rows): an answer naming an enum option in
    # other words (``understanding.enums``); None: only the rules read options
    embed: Callable[[list[str]], Any] | None = None


class Command(BaseModel):
    """Base of every command: ``command`` names the kind, ``turn`` the user turn it belongs to."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    command: str
    turn: int = 0

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        return stack  # commands that only inform the executor (chit-chat, clarify) leave the stack as it is


def replace_top(stack: list[Frame], frame: Frame) -> list[Frame]:
    return [*stack[:-1], frame]


def set_on_top(stack: list[Frame], slot: str, value: Any, env: ApplyEnv) -> list[Frame]:
    """A slot value on the active frame; the calls that used another value (or none) run again."""
    frame = top(stack)
    if frame is None:
        return stack
    slots = {**(frame.get("slots") or {}), slot: value}
    executed = env.invalidate(frame, {slot: value})
    update = {"slots": slots} if executed is None else {"slots": slots, "executed": executed, "status": "active"}
    return replace_top(stack, Frame(**{**frame, **update}))


def suspend(stack: list[Frame], env: ApplyEnv) -> list[Frame]:
    """The active frame steps aside: interrupted when unfinished (it can be resumed), dropped when done."""
    if not stack:
        return stack
    current = stack[-1]
    if current.get("status") == "interrupted":
        return stack  # nothing is active (the active one was cancelled): the waiting frame stays resumable
    if current.get("status") != "active" or env.finished(current):
        return stack[:-1]
    return replace_top(stack, Frame(**{**current, "status": "interrupted"}))


def activate(stack: list[Frame], workflow: str, env: ApplyEnv, new: Callable[[], Frame]) -> list[Frame]:
    """``workflow`` on top: an interrupted instance is taken back with its progress, else ``new()``.  A
    settled instance (its irreversible call made) is not taken back: asking again is a new instance."""
    current = stack[-1] if stack else None
    if current is not None and current.get("workflow") == workflow and current.get("status") != "interrupted" \
            and not env.settled(current):
        return stack
    waiting = next((f for f in reversed(stack) if f.get("workflow") == workflow and f.get("status") == "interrupted"),
                   None)
    rest = suspend(stack, env)
    if waiting is not None:
        rest = [f for f in rest if f.get("id") != waiting["id"]]
        slots = dict(waiting.get("slots") or {})
        if current is not None and current.get("status") != "interrupted" and env.finished(current):
            # what the waiting task had asked for and the user gave inside the aside ("actually first, what's
            # my balance? C-1001 pin 4821" while a card block asked for them) is its answer too
            asked = set(waiting.get("asked") or [])
            slots.update({k: v for k, v in carried(current, workflow, env).items()
                          if k in asked and slots.get(k) in (None, "")})
        return [*rest, Frame(**{**waiting, "status": "active", "slots": slots})]
    fresh = new()
    if current is not None and current.get("status") != "interrupted" and env.finished(current):
        fresh = Frame(**{**fresh, "slots": {**carried(current, workflow, env), **(fresh.get("slots") or {})}})
    return [*rest, fresh]


def carried(previous: Frame, workflow: str, env: ApplyEnv) -> dict[str, Any]:
    """The values of the task just finished that the next task asks for too, where they are valid there:
    searching hotels then booking one keeps the check-in date, tracking an order then cancelling it the
    order id.  Never into another instance of the same workflow: asking for it again is a new request
    with new values (a second booking must not reuse the first one's)."""
    if previous.get("workflow") == workflow:
        return {}
    return {k: v for k, v in (previous.get("slots") or {}).items()
            if v not in (None, "") and env.takes(workflow, k, v)}


# "where is my other order?": the request is about another thing than the one an earlier task held
_ANOTHER = re.compile(r"\b(?:other|another|different|second|separate)\b", re.I)


def remembered(stack: list[Frame], workflow: str, env: ApplyEnv, request: str = "") -> dict[str, Any]:
    """The values a new instance of ``workflow`` starts with: for each slot that carries (``ApplyEnv.carries``:
    who the user is, what they refer to), the latest value an earlier task of the conversation holds under
    that name, given or returned ("cancel B-1008" — "no, leave it" — "push it to 9.30pm instead": the change is
    of B-1008).  None when the request says it is about another one ("where is my other order?").  Unlike
    ``carried`` (everything the task just finished holds that the next one asks for), from any earlier task,
    into any workflow, but only who the user is and what they refer to."""
    out: dict[str, Any] = {}
    if _ANOTHER.search(request or ""):
        return out
    for name in env.slots_of(workflow):
        if not env.carries(workflow, name):
            continue
        # what the user gave, or what an earlier task returned for it ("book ... " — "plans changed, cancel that
        # please": the booking just made)
        value = next((v for f in reversed(stack) for v in ((f.get("slots") or {}).get(name),
                                                            (f.get("results") or {}).get(name)) if v not in (None, "")),
                     None)
        if value is not None and env.takes(workflow, name, value):
            out[name] = value
    return out
