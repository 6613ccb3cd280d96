"""The ``apply_commands`` node: the one place the dialogue stack's frames start, stop, resume and take
slot values.

It applies the turn's commands in order (``dialogue.commands``), then reads the user's message for
the workflow that is active afterwards: ``SetSlot`` / ``CorrectSlot`` from slot filling (not on a
turn that only navigates — resuming, cancelling, handing over), the user's yes/no to a pending
natural-language condition, and ``OutOfScope`` for a side question the workflow cannot answer while
it waits for an answer.  The slot commands are appended to the turn's commands, so Studio and the
evaluations see everything the agent understood.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dialogue.commands import ApplyEnv, apply_all, dump
from dialogue.frames import Frame, top
from dialogue.turn import NAVIGATION, make_env, read_turn
from dialogue.understanding.navigation import after_going_back
from graph.context import Context
from graph.resources import Resources, get_resources
from graph.state import State, turn_commands

def _env(res: Resources, turn: int) -> ApplyEnv:
    return make_env(turn, res.library.workflows, res.interpreters, res.today, res.embed)


def _read_queued(stack: list, start: dict, res: Resources, reading: dict, kinds: set[str], env: ApplyEnv
                 ) -> tuple[list, list]:
    """The queued frame of this turn reads its own part of the message (read as if it were active)."""
    at = next((i for i, f in enumerate(stack) if f.get("queued") and f.get("workflow") == start.get("workflow")
               and f.get("started") == env.turn), None)
    if at is None:
        return stack, []
    frame = stack[at]
    wf = res.library.workflows[frame["workflow"]]
    alone, added = read_turn([Frame(**{**frame, "status": "active"})], wf, res.interpreters[wf.name],
                             {**reading, "text": start.get("query") or ""}, kinds, env)
    done = Frame(**{**alone[-1], "status": "interrupted"})
    return [*stack[:at], done, *stack[at + 1:]], [c for c in added if c.command in ("set_slot", "correct_slot")]


def _shared(stack: list, res: Resources, turn: int) -> list:
    """Two requests in one message share what the user said once for both ("block card 4417 and tell me my
    savings balance, C-1001 pin 4821": the customer number and PIN in the second part are the block's too): a
    value one of the two frames read fills the other's slot of the same name when that one has none — not
    an option (the account of a balance is no reason to block a card)."""
    active = top(stack)
    at = next((i for i, f in enumerate(stack) if f.get("queued") and f.get("started") == turn), None)
    if active is None or at is None:
        return stack
    frames = [active, stack[at]]
    for i, (mine, other) in enumerate((frames, frames[::-1])):
        wf = res.library.workflows[mine["workflow"]]
        given = {s.name: v for s in wf.slots if not s.enum and (mine.get("slots") or {}).get(s.name) in (None, "")
                 and (v := (other.get("slots") or {}).get(s.name)) not in (None, "")}
        if given:
            frames[i] = Frame(**{**mine, "slots": {**(mine.get("slots") or {}), **given}})
    out = list(stack)
    out[at], out[-1] = frames[1], frames[0]
    return out


def apply_commands(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    res = get_resources(runtime.context)
    turn = int(state.get("turn") or 0)
    commands = turn_commands(state)
    env = _env(res, turn)
    stack = apply_all(list(state.get("stack") or []), commands, env)
    kinds = {c.get("command") for c in commands}
    frame = top(stack)
    wf = res.library.workflows.get(frame["workflow"]) if frame else None
    added: list = []
    # a turn that only navigates gives no values; one that gives up a task for a new request ("never mind
    # the table, I need a hotel in porto") gives the new task its values
    navigates = bool(kinds & NAVIGATION) and not (commands and commands[-1].get("command") == "start_flow")
    reading = state.get("reading") or {}
    queued = [c for c in commands if c.get("command") == "start_flow" and c.get("queued")]
    if queued:  # two requests in one message: each frame reads the part that asked for it
        stack, added = _read_queued(stack, queued[-1], res, reading, kinds, env)
        first = next(c for c in commands if c.get("command") == "start_flow" and c.get("workflow") and not c.get("queued"))
        reading = {**reading, "text": first.get("query") or reading.get("text")}
    if "resume_flow" in kinds:  # the resumed task reads what the turn says after the way back
        reading = {**reading, "text": after_going_back(reading.get("text") or "")}
    if wf is not None and not navigates:
        stack, more = read_turn(stack, wf, res.interpreters[wf.name], reading, kinds, env)
        added = [*added, *more]
    if queued:
        stack = _shared(stack, res, env.turn)
    update: dict[str, Any] = {"stack": [{"op": "replace", "stack": stack}]}
    if added:
        update["commands"] = dump(added)
    return update
