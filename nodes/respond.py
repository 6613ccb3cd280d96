"""The ``respond`` node: sends the accepted reply and records it.

Appends the AIMessage (its ``response_metadata`` names the ANSWER and workflow), and — for the active
frame — an ``answer`` stack operation: the ANSWER node executed, the slots (or condition keys) the
reply asks for, and whether the reply completes the workflow.  When the reply finishes a workflow that
a second request of the same message waits under (``Frame.queued``), that one starts: a ``start``
operation, and the reply goes on with its first question.  Logs an assistant event.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from dialogue.execution.policy_offline import next_proposal
from dialogue.execution.replies import answer_text
from dialogue.frames import top
from graph.context import Context
from graph.resources import get_resources
from graph.state import State
from workflows.pdl import BUILTIN_ANSWERS, Workflow
from workflows.procedure import Procedure, iter_calls
from workflows.text import lower_first

MIGRATED = ("(This conversation was saved by an earlier version of flowdesk, so I could not carry over where we "
            "were; let's continue from here.) ")


def asked_slots(wf: Workflow | None, procedure: Procedure | None, name: str, args: dict, filled: dict,
                implied: list[str] | None = None) -> list[str]:
    """Slots this answer asks for: request_information's arguments, or the names the procedure
    assigns from the ANSWER call (``[a, b] = ANSWER.ask()``) — else the slot its name implies
    (``Interpreter.implied_targets``: an imported ``ask_name`` the procedure assigns nothing from), so the
    free-text answer to it is read as that slot — unfilled ones first."""
    if wf is None:
        return []
    if name == "request_information":
        asked = list(args.get("slots") or args.get("slot") or [])
        asked = [asked] if isinstance(asked, str) else asked
    else:
        calls = [c for c in iter_calls(procedure.steps) if c.kind == "ANSWER" and c.name == name] if procedure else []
        # a reply that also asks a branch's question (``with_branch_question``) awaits its yes/no too
        targets = [t for c in calls for t in c.targets] or list(implied or [])
        asked = targets + list(args.get("slots") or [])
    asked = [s for s in dict.fromkeys(asked) if s]
    unfilled = [s for s in asked if filled.get(s) in (None, "")]
    return unfilled or asked


def node_of(wf: Workflow, name: str) -> str:
    """The ANSWER node a reply named ``name`` executes in ``wf`` ("" for a reply that is no node)."""
    return name if (wf.answer(name) is not None or name in BUILTIN_ANSWERS) else ""


def queued_below(stack: list, frame: dict) -> dict | None:
    """The frame queued right below ``frame`` (a second request of the same message), if any."""
    at = next((i for i, f in enumerate(stack) if f.get("id") == frame.get("id")), None)
    below = stack[at - 1] if at else None
    return below if below is not None and below.get("queued") and below.get("status") == "interrupted" else None


def start_queued(res, frame: dict) -> tuple[str, list[dict]]:
    """What is said and done when the queued ``frame`` starts: ``pattern_queued_flow_start`` and its
    workflow's next question (the offline interpreter's), and the stack operations that make it active and
    record the question."""
    wf = res.library.workflows.get(frame.get("workflow"))
    if wf is None:
        return "", []
    pattern = res.patterns.workflows["pattern_queued_flow"]
    lead = answer_text(pattern, "pattern_queued_flow_start", {"flow": lower_first(wf.display_name)})
    ops: list[dict] = [{"op": "start", "frame": frame["id"]}]
    interp = res.interpreters[wf.name]
    active = {**frame, "status": "active"}
    ask = next_proposal(wf, interp, active, {}, [])
    if ask.get("kind") != "reply":  # a call comes first: the next turn makes it
        return lead, ops
    name = ask.get("name") or ""
    asks = asked_slots(wf, interp.procedure, name, ask.get("args") or {}, frame.get("slots") or {},
                       interp.implied_targets(name) if name else [])
    ops.append({"op": "answer", "frame": frame["id"], "answer": node_of(wf, name), "asked": asks, "done": False})
    return f"{lead} {ask.get('text') or ''}".strip(), ops


def respond(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    action = dict(state.get("action") or {})
    text = action.get("text") or ""
    if (state.get("reading") or {}).get("migrated"):
        text = MIGRATED + text
    name = action.get("name") or ""
    res = get_resources(runtime.context)
    frame = top(state.get("stack"))
    wf = res.library.workflows.get(frame["workflow"]) if frame else None
    wf_name = wf.name if wf is not None else ""
    update: dict[str, Any] = {}
    asks: list[str] = []
    if wf is not None and frame is not None:
        interp = res.interpreters.get(wf.name)
        asks = asked_slots(wf, interp.procedure if interp else None, name, action.get("args") or {},
                           frame.get("slots") or {}, interp.implied_targets(name) if interp and name else [])
        executed = node_of(wf, name)
        update["stack"] = [{"op": "answer", "frame": frame["id"], "answer": executed, "asked": asks,
                            "done": bool(action.get("completes"))}]
        after = {**frame, "executed": [*(frame.get("executed") or []), executed]} if executed else frame
        finished = bool(action.get("completes")) or (interp is not None and interp.next_action(after).kind == "done")
        waiting = queued_below(state.get("stack") or [], frame) if finished else None
        if waiting is not None:  # the second request of an earlier message starts now
            more, ops = start_queued(res, waiting)
            text, update["stack"] = f"{text} {more}".strip(), [*update["stack"], *ops]
    message = AIMessage(content=text, response_metadata={"answer": name, "workflow": wf_name})
    event = {"event": "assistant", "workflow": wf_name, "answer": name, "text": text, "asks": asks,
             "turn": int(state.get("turn") or 0)}
    update.update(messages=[message], trace=[event])
    return update
