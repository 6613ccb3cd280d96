"""Closed-loop switching evaluation: the agent's own decisions feed every later turn.

Each dialogue is replayed turn by turn through the *understanding part of the graph* — the very node
functions ``build_agent`` wires (``detector`` → ``router`` → ``retriever`` → ``apply_commands``), in the
graph's order, with the state merged by the graph's own reducers (``graph.state.State``'s annotations).
The stack that results — the active workflow, the interrupted frames, the belief behind each pick —
is what the next turn sees.  Agent turns are the dataset's (the executor's replies are not generated),
so the comparison with the gold labels is turn by turn.  ``tests/test_switch_loop.py`` replays dialogues
through the compiled graph (``interrupt_after=["apply_commands"]``) and gets the same decisions.

The prediction of a turn is the active workflow after it (first), followed on a SEARCH turn by the
retriever's other candidates (MAP@5); an out-of-scope reading predicts nothing when the dataset has
"no task" labels.  Errors are cut into categories (``error_category``).
"""

from __future__ import annotations

import time
import typing
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from .datasets import Dialogue
from .switch_metrics import TurnRecord

# The graph's understanding part, in the order build_agent wires it.
UNDERSTANDING = ("detector", "router", "retriever", "apply_commands")
ERROR_CATEGORIES = ("wrong pick at the change", "stayed on a wrong pick", "missed change", "needless search",
                    "out of scope")


def _reducers() -> dict[str, Any]:
    from graph.state import State

    hints = typing.get_type_hints(State, include_extras=True)
    out = {}
    for name, hint in hints.items():
        meta = getattr(hint, "__metadata__", ())
        out[name] = meta[0] if meta else None
    return out


def merge(state: dict, update: dict, reducers: dict[str, Any]) -> dict:
    """``update`` merged into ``state`` the way the graph merges a node's return value."""
    out = dict(state)
    for key, value in (update or {}).items():
        reducer = reducers.get(key)
        out[key] = reducer(out.get(key), value) if reducer is not None and key in out else \
            (reducer(None, value) if reducer is not None else value)
    return out


@dataclass
class LoopTurn:
    """One user turn as the agent understood it (closed loop)."""

    dialogue: str
    index: int
    gold: str | None
    prev_gold: str | None
    before: str | None  # the active workflow when the turn arrived (the agent's own)
    active: str | None  # the active workflow after the turn
    decision: str  # STAY | SEARCH
    commands: list[str]
    candidates: list[str]
    out_of_scope: bool
    revised: bool
    first: bool  # the dialogue's first scored user turn
    ms: float


class UnderstandingLoop:
    """Runs the graph's understanding nodes on one conversation at a time."""

    def __init__(self, context):
        from langgraph.runtime import Runtime

        from nodes.apply_commands import apply_commands
        from nodes.detector import detector
        from nodes.retriever import retriever
        from nodes.router import router

        self.context = context
        self.runtime = Runtime(context=context)
        self.nodes = {"detector": detector, "router": router, "retriever": retriever,
                      "apply_commands": apply_commands}
        self.reducers = _reducers()

    def user_turn(self, state: dict, text: str) -> dict:
        from graph.agent import after_detector, after_retriever

        state = merge(state, {"messages": [HumanMessage(text)]}, self.reducers)
        state = merge(state, self.nodes["detector"](state, self.runtime), self.reducers)
        if after_detector(state) == "router":
            state = merge(state, self.nodes["router"](state, self.runtime), self.reducers)
            state = merge(state, self.nodes["retriever"](state, self.runtime), self.reducers)
            if after_retriever(state) == "clarify":
                state = merge(state, clarify_first(state), self.reducers)
        return merge(state, self.nodes["apply_commands"](state, self.runtime), self.reducers)

    def agent_turn(self, state: dict, text: str) -> dict:
        return merge(state, {"messages": [AIMessage(text)]}, self.reducers)


def clarify_first(state: dict) -> dict:
    """The evaluation's user answers a clarification with the first option (no one to ask)."""
    from dialogue.commands import StartFlow, dump
    from graph.state import turn_commands

    options = turn_commands(state)[-1].get("options") or []
    turn = int(state.get("turn") or 0)
    return {"commands": dump([StartFlow(workflow=options[0], turn=turn, source="clarify")])} if options else {}


def replay(loop: UnderstandingLoop, dlg: Dialogue) -> list[LoopTurn]:
    from graph.state import active_workflow, decision, turn_commands

    state: dict = {"messages": []}
    out: list[LoopTurn] = []
    first = True
    for i, turn in enumerate(dlg.turns):
        if turn.speaker != "user":
            state = loop.agent_turn(state, turn.text)
            continue
        before = active_workflow(state)
        t0 = time.perf_counter()
        state = loop.user_turn(state, turn.text)
        ms = (time.perf_counter() - t0) * 1000
        cmds = turn_commands(state)
        kinds = [c.get("command") for c in cmds]
        if not turn.scored:
            continue
        dec = decision(cmds)
        out.append(LoopTurn(dlg.id, i, turn.gold, turn.prev_gold, before, active_workflow(state), dec, kinds,
                            [c["workflow"] for c in state.get("candidates") or []] if dec == "SEARCH" else [],
                            any(k in ("chitchat", "close") for k in kinds), "revise_flow" in kinds, first, ms))
        first = False
    return out


def to_record(t: LoopTurn, oos_labels: bool = True) -> TurnRecord:
    """The turn as the switch metrics score it: the active workflow first, then the other candidates."""
    if t.out_of_scope and oos_labels:
        predicted: list[str] = []
    elif t.active is None:
        predicted = []
    else:
        predicted = [t.active] + [c for c in t.candidates if c != t.active][:4]
    searched = t.decision == "SEARCH"
    changed = searched or t.revised or (t.out_of_scope and oos_labels)
    return TurnRecord(t.gold, t.prev_gold, predicted, "SEARCH" if changed else "STAY",
                      bool(t.out_of_scope and oos_labels), t.before, searched, t.ms)


def error_category(t: LoopTurn, oos_labels: bool = True) -> str | None:
    """Why a turn's top-1 is wrong (None when it is right)."""
    rec = to_record(t, oos_labels)
    top = rec.predicted[0] if rec.predicted else None
    if top == t.gold:
        return None
    if t.gold is None or (rec.out_of_scope and oos_labels):
        return "out of scope"
    acted = t.decision == "SEARCH" or t.revised
    if t.gold != t.prev_gold:
        return "wrong pick at the change" if acted else "missed change"
    return "needless search" if acted else "stayed on a wrong pick"


@dataclass
class LoopResult:
    turns: list[LoopTurn] = field(default_factory=list)
    seconds: float = 0.0


def run_loop(dialogues: list[Dialogue], context, progress=None) -> LoopResult:
    loop = UnderstandingLoop(context)
    res = LoopResult()
    t0 = time.perf_counter()
    for dlg in dialogues:
        res.turns.extend(replay(loop, dlg))
        if progress:
            progress()
    res.seconds = time.perf_counter() - t0
    return res


def loop_metrics(turns: list[LoopTurn], oos_labels: bool = True) -> dict[str, Any]:
    """The switch metrics of a closed-loop run, plus recall without first turns and error shares."""
    from .switch_metrics import compute

    recs = [to_record(t, oos_labels) for t in turns]
    m: dict[str, Any] = compute(recs)
    later = [r for t, r in zip(turns, recs) if not t.first and r.gold_changed]
    m["switch_recall_no_first"] = (sum(r.predicted_change for r in later) / len(later)) if later else float("nan")
    m["revisions_per_turn"] = sum(t.revised for t in turns) / max(1, len(turns))
    cats = [error_category(t, oos_labels) for t in turns]
    errors = [c for c in cats if c]
    m["errors"] = len(errors)
    m["error_shares"] = {c: (errors.count(c) / len(errors) if errors else 0.0) for c in ERROR_CATEGORIES}
    m["error_rates"] = {c: errors.count(c) / max(1, len(turns)) for c in ERROR_CATEGORIES}
    return m


def stay_baseline(dialogues: list[Dialogue]) -> dict[str, Any]:
    """Always STAY on the gold previous workflow (the first turn: the gold itself is not known, nothing)."""
    from .switch_metrics import compute

    recs = [TurnRecord(t.gold, t.prev_gold, [t.prev_gold] if t.prev_gold else [], "STAY", False, t.prev_gold, False)
            for d in dialogues for t in d.turns if t.speaker == "user" and t.scored]
    return compute(recs)
