"""The ``respond`` node: sends the accepted reply and records it.

Appends the AIMessage (its ``response_metadata`` names the ANSWER and workflow), marks the ANSWER
node executed in the active workflow's progress, sets ``progress.pending`` to the slots the answer
asks for when it is a question (comma-separated; None otherwise) and logs an assistant event.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from graph.context import Context
from graph.resources import get_resources
from graph.state import State
from workflows.pdl import BUILTIN_ANSWERS, Workflow
from workflows.procedure import ProcedureError, iter_calls, parse_procedure


def asked_slots(wf: Workflow | None, name: str, args: dict, filled: dict) -> list[str]:
    """Slots this answer asks for: request_information's arguments, or the names the procedure
    assigns from the ANSWER call (``[a, b] = ANSWER.ask()``), unfilled ones first."""
    if wf is None:
        return []
    if name == "request_information":
        asked = list(args.get("slots") or args.get("slot") or [])
        asked = [asked] if isinstance(asked, str) else asked
    else:
        try:
            calls = [c for c in iter_calls(parse_procedure(wf.procedure).steps) if c.kind == "ANSWER" and c.name == name]
        except ProcedureError:
            calls = []
        asked = [t for c in calls for t in (c.targets or (c.args if name == "request_information" else []))]
    asked = [s for s in dict.fromkeys(asked) if s]
    unfilled = [s for s in asked if filled.get(s) in (None, "")]
    return unfilled or asked


def respond(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    proposal = dict(state.get("proposal") or {})
    text = proposal.get("text") or ""
    name = proposal.get("name") or ""
    wf_name = state.get("active_workflow") or ""
    wf = get_resources(runtime.context).library.workflows.get(wf_name) if wf_name else None
    update: dict[str, Any] = {}
    asks: list[str] = []
    if wf is not None:
        all_progress = dict(state.get("progress") or {})
        progress = dict(all_progress.get(wf_name) or {})
        if wf.answer(name) is not None or name in BUILTIN_ANSWERS:
            progress["executed"] = list(progress.get("executed") or []) + [name]
        asks = asked_slots(wf, name, proposal.get("args") or {}, progress.get("slots") or {})
        progress["pending"] = ",".join(asks) if asks else None
        all_progress[wf_name] = progress
        update["progress"] = all_progress
    message = AIMessage(content=text, response_metadata={"answer": name, "workflow": wf_name})
    event = {"event": "assistant", "workflow": wf_name, "answer": name, "text": text, "asks": asks,
             "turn": state.get("turn") or 0}
    update.update(messages=[message], trace=[event])
    return update
