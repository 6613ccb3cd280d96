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
from dialogue.frames import top
from dialogue.turn import NAVIGATION, make_env, read_turn
from graph.context import Context
from graph.resources import Resources, get_resources
from graph.state import State, turn_commands

def _env(res: Resources, turn: int) -> ApplyEnv:
    return make_env(turn, res.library.workflows, res.interpreters, res.today)


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
    if wf is not None and not navigates:
        stack, added = read_turn(stack, wf, res.interpreters[wf.name], state.get("reading") or {}, kinds, env)
    update: dict[str, Any] = {"stack": [{"op": "replace", "stack": stack}]}
    if added:
        update["commands"] = dump(added)
    return update
