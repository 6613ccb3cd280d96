"""STAR wizard actions replayed with the gold history (teacher forcing), on the dialogue stack: the one
source of next-action states for the next-action evaluation (``evals/next_action.py``) and for training
the learned executor policy (``evals/train_executor.py``), so both see exactly the same states.

For every wizard action (``pick_suggestion``/``utter`` with an ``ActionLabel``, or a ``query`` with
``APIName`` + ``Constraints``) ``replay`` yields a ``WizardStep``: the task's workflow and interpreter,
the frame, the turn's reading and the messages *before* the action — the user's messages read into the
frame by ``dialogue.turn.read_turn`` (the code the graph's ``apply_commands`` runs), the wizard's earlier
actions as executed nodes, the queries as API calls with their knowledge-base results — and the gold
label: a reply's STAR label, a query as ``query`` / ``query_check`` / ``query_book`` (by ``RequestType``)
plus its constrained slots.  After the consumer has looked at the step, the gold action is applied (use
a step before asking for the next one: its message list grows).

The STAR facts (splits, query names, constraint values) are owned by ``workflows.extraction.star``.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Iterator

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from workflows.extraction.star import constraints, query_label

from . import eval_today


def answer_name(wf, label: str) -> str:
    """The workflow ANSWER a STAR label stands for."""
    from workflows.importers.star import star_label_to_answer

    name = star_label_to_answer(label)
    return star_label_to_answer("L_" + label) if wf.api(name) is not None else name


def label_of(proposal: dict) -> str:
    """The STAR label of an executor proposal (a query by its request type)."""
    from workflows.importers.star import answer_to_star_label

    if proposal.get("kind") == "tool":
        return query_label(proposal.get("args") or {})
    name = proposal.get("name") or ""
    return answer_to_star_label(name[2:] if name.startswith("L_L_") else name) if name.startswith("L_") else name


def candidate_label(c) -> str:
    """The STAR label a candidate stands for (without building its reply text)."""
    if c.proposal is not None:
        return label_of(c.proposal)
    if c.kind == "api":
        return label_of({"kind": "tool", "args": c.fixed})
    return label_of({"kind": "reply", "name": c.name})


def query_slots(proposal: dict) -> list[str]:
    """The constrained slots of a query proposal ([] for replies)."""
    if proposal.get("kind") != "tool":
        return []
    return sorted(k for k in (proposal.get("args") or {}) if k != "RequestType")


@dataclass
class WizardStep:
    """One wizard action to predict, with the state before it (do not mutate ``frame``)."""

    dialogue: int
    task: str
    wf: Any
    interp: Any
    frame: dict
    reading: dict
    messages: list
    gold: str
    gold_slots: list[str] = field(default_factory=list)


class _LazyInterps(dict):
    """A mapping that builds an interpreter on first access (a replay touches few of the library's)."""

    def __init__(self, build):
        super().__init__()
        self._build = build

    def get(self, key, default=None):
        try:
            return self._build(key)
        except KeyError:
            return default


def replay(d: dict, library, interps: dict | None = None) -> Iterator[WizardStep]:
    """Gold-history replay of one dialogue: a ``WizardStep`` before every labelled wizard action.
    ``interps``: a cache of interpreters by workflow name shared across dialogues (optional)."""
    from dialogue.execution.interpreter import Interpreter
    from dialogue.frames import Frame, new_frame
    from dialogue.turn import make_env, read_turn
    from dialogue.understanding.navigation import reading_of
    from nodes.respond import asked_slots

    interps = {} if interps is None else interps

    def interp_of(name: str) -> Interpreter:
        if name not in interps:
            interps[name] = Interpreter(library.workflows[name])
        return interps[name]

    env = make_env(0, library.workflows, _LazyInterps(interp_of), dt.date.fromisoformat(eval_today()))
    caps = [c["Task"] for c in d["Scenario"].get("WizardCapabilities") or []]
    active = caps[0] if len(caps) == 1 else None
    frames: dict[str, Frame] = {}
    messages: list = []
    last_user = ""
    reading: dict = {}

    def frame_of(name: str) -> Frame:
        if name not in frames:
            frames[name] = new_frame(name, 0)
        return frames[name]

    def read(name: str) -> None:
        wf = library.workflows[name]
        stack, _ = read_turn([frame_of(name)], wf, interp_of(name), reading, set(), env)
        frames[name] = stack[-1]

    for i, e in enumerate(d["Events"]):
        agent, action = e.get("Agent"), e.get("Action")
        wf = library.workflows.get(active) if active else None
        if agent == "User" and action == "utter":
            last_user = e.get("Text") or ""
            reading = reading_of(last_user)
            messages.append(HumanMessage(last_user))
            if wf is not None:
                read(active)
            continue
        if agent == "Wizard" and action == "select_task":
            active = e.get("Task")
            if active in library.workflows and last_user:  # the new task reads the user's latest message too
                read(active)
            continue
        if agent == "KnowledgeBase":
            if wf is not None and e.get("APIName") == (wf.apis[0].name if wf.apis else None):
                f = frame_of(active)
                item = e.get("Item") or {}
                data = {k: v for k, v in item.items() if k != "APIName"}
                calls = list(f.get("calls") or [])
                if calls:
                    calls[-1] = {**calls[-1], "status": "ok" if data else "error"}
                # a failed query still happened: it stays executed (the flowchart branches on it)
                frames[active] = Frame(**{**f, "calls": calls, "results": {**(f.get("results") or {}), **data}})
                messages.append(ToolMessage(json.dumps(data or {"error": "nothing found"}), tool_call_id=f"q{i}"))
            continue
        if agent != "Wizard":
            continue
        label = e.get("ActionLabel") if action in ("pick_suggestion", "utter") else None
        is_query = action == "query"
        if not (label and label != "custom") and not is_query:
            if action == "utter" and e.get("Text"):
                messages.append(AIMessage(e["Text"]))
            continue
        if wf is None:
            continue
        f = frame_of(active)
        if is_query:
            args = constraints(e)
            gold, gold_slots = query_label(args), sorted(k for k in args if k != "RequestType")
        else:
            gold, gold_slots = label, []
        yield WizardStep(d["DialogueID"], active, wf, interp_of(active), f, reading, messages, gold, gold_slots)
        # apply the gold action to the history
        if is_query:
            api = e.get("APIName")
            slots = {**(f.get("slots") or {}), **{k: v for k, v in args.items()
                                                  if wf.slot(k) is not None and v not in (None, "") and k != "RequestType"}}
            frames[active] = Frame(**{**f, "executed": [*(f.get("executed") or []), api], "slots": slots,
                                      "calls": [*(f.get("calls") or []), {"api": api, "args": args, "status": "ok"}]})
            messages.append(AIMessage("", tool_calls=[{"name": api, "args": args, "id": f"q{i}", "type": "tool_call"}]))
        else:
            name = answer_name(wf, label)
            interp = interp_of(active)  # what the question asks, as the graph's ``respond`` records it
            asked = asked_slots(wf, interp.procedure, name, {}, f.get("slots") or {}, interp.implied_targets(name))
            frames[active] = Frame(**{**f, "executed": [*(f.get("executed") or []), name], "asked": asked})
            messages.append(AIMessage(e.get("Text") or ""))
