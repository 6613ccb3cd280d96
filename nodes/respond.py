"""The ``respond`` node: sends the accepted reply and records it.

Appends the AIMessage (its ``response_metadata`` names the ANSWER and workflow), and — for the active
frame — an ``answer`` stack operation: the ANSWER node executed, the slots (or condition keys) the
reply asks for, and whether the reply completes the workflow.  Logs an assistant event.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from dialogue.frames import top
from graph.context import Context
from graph.resources import get_resources
from graph.state import State
from workflows.pdl import BUILTIN_ANSWERS, Workflow
from workflows.procedure import Procedure, iter_calls

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
        executed = name if (wf.answer(name) is not None or name in BUILTIN_ANSWERS) else ""
        update["stack"] = [{"op": "answer", "frame": frame["id"], "answer": executed, "asked": asks,
                            "done": bool(action.get("completes"))}]
    message = AIMessage(content=text, response_metadata={"answer": name, "workflow": wf_name})
    event = {"event": "assistant", "workflow": wf_name, "answer": name, "text": text, "asks": asks,
             "turn": int(state.get("turn") or 0)}
    update.update(messages=[message], trace=[event])
    return update
