"""The LLM policy of the PDL executor (FlowAgent style): prompt, tool binding, parsing, retries.

The system prompt carries the workflow's PDL (slots, APIs, ANSWERs, procedure), what has run, the
pre-decision hints, the experience block and the post-controller's rejections.  Each API is bound as
a tool with its JSON Schema parameters, plus a ``reply`` tool naming an ANSWER; plain text becomes a
reply named ``llm_reply``.  Malformed output (unknown tool, arguments that are not an object) is
sent back with the error, at most ``MAX_RETRIES`` times; then the caller falls back to the offline
policy (``propose`` returns None).
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from workflows.pdl import BUILTIN_ANSWERS, Workflow


log = logging.getLogger(__name__)
MAX_RETRIES = 2
REPLY_TOOL = "reply"


def pdl_block(wf: Workflow) -> str:
    lines = [f"Workflow: {wf.name} — {wf.description}"]
    if wf.detailed_description:
        lines.append(wf.detailed_description.strip())
    lines.append("SLOTS:")
    lines += [f"- {s.name} ({s.type}{': ' + '/'.join(s.enum) if s.enum else ''}): {s.description}" for s in wf.slots]
    lines.append("APIS:")
    for a in wf.apis:
        pre = f" [precondition: {', '.join(a.precondition)}]" if a.precondition else ""
        lines.append(f"- {a.name}({', '.join(a.param_names)}) -> {a.returns}: {a.description}{pre}")
    lines.append("ANSWERS:")
    lines += [f"- {a.name}: {a.template!r}" + (f" [precondition: {', '.join(a.precondition)}]" if a.precondition else "")
              for a in wf.answers]
    lines += [f"- {b}: (built in)" for b in BUILTIN_ANSWERS]
    lines += ["PROCEDURE:", wf.procedure.strip()]
    return "\n".join(lines)


def system_prompt(wf: Workflow, frame: dict, guidance: dict, violations: list, suggestion: str = "") -> str:
    parts = [
        "You are a customer-service agent that follows the workflow below, written in PDL (Procedure "
        "Description Language). At each step either call exactly one API (a tool) or reply to the user with the "
        f"`{REPLY_TOOL}` tool naming the ANSWER you give. Follow the procedure, but let the user skip ahead, go back "
        "or ask side questions (answer them with answer_out_of_workflow_questions, then return to the procedure). "
        "Never call an API whose preconditions have not run; ask for missing required parameters instead.",
        pdl_block(wf),
        "PROGRESS: executed=" + json.dumps(frame.get("executed") or []) + " slots="
        + json.dumps(frame.get("slots") or {}, default=str) + " results="
        + json.dumps(frame.get("results") or {}, default=str)[:2000],
    ]
    hints = (guidance or {}).get("hints") or []
    if hints:
        parts.append("HINTS:\n" + "\n".join(f"- {h}" for h in hints))
    if (guidance or {}).get("experience"):
        parts.append("EXPERIENCE FROM PAST SESSIONS:\n" + str(guidance["experience"]))
    if violations:
        parts.append("REJECTED PROPOSALS THIS TURN (do not propose them again):\n" + "\n".join(
            f"- {json.dumps(v.get('proposal'), default=str)}: {v.get('reason', '')}" for v in violations))
    if suggestion:
        parts.append(f"The procedure's next step (a suggestion): {suggestion}")
    return "\n\n".join(parts)


def tool_specs(wf: Workflow) -> list[dict]:
    tools = [{"type": "function", "function": {"name": a.name, "description": a.description or a.name,
                                               "parameters": a.parameters or {"type": "object", "properties": {}}}}
             for a in wf.apis]
    names = [a.name for a in wf.answers] + list(BUILTIN_ANSWERS)
    tools.append({"type": "function", "function": {
        "name": REPLY_TOOL, "description": "Reply to the user with one of the workflow's ANSWERs.",
        "parameters": {"type": "object", "required": ["name", "text"], "properties": {
            "name": {"type": "string", "enum": names}, "text": {"type": "string"}}}}})
    return tools


def _history(messages: list[BaseMessage]) -> list[BaseMessage]:
    """The conversation without dangling tool messages (providers reject orphans)."""
    out: list[BaseMessage] = []
    for m in messages:
        if isinstance(m, ToolMessage) and not (out and isinstance(out[-1], (AIMessage, ToolMessage))):
            continue
        out.append(m)
    return out


def parse(msg: Any, wf: Workflow) -> tuple[dict | None, str]:
    """(proposal, error). A tool call → tool/reply proposal; text → ``llm_reply``."""
    calls = getattr(msg, "tool_calls", None) or []
    if calls:
        call = calls[0]
        name, args = call.get("name"), call.get("args")
        if not isinstance(args, dict):
            return None, f"the arguments of {name!r} must be a JSON object"
        call_id = call.get("id") or f"call_{uuid.uuid4().hex[:12]}"
        if name == REPLY_TOOL:
            answer, text = args.get("name"), args.get("text")
            valid = {a.name for a in wf.answers} | set(BUILTIN_ANSWERS)
            if answer not in valid or not isinstance(text, str) or not text.strip():
                return None, f"reply needs name (one of {sorted(valid)}) and a non-empty text"
            return {"kind": "reply", "name": answer, "text": text}, ""
        if wf.api(name) is None:
            return None, f"{name!r} is not a tool of this workflow; use one of {[a.name for a in wf.apis] + [REPLY_TOOL]}"
        return {"kind": "tool", "name": name, "args": args, "call_id": call_id}, ""
    text = getattr(msg, "content", "")
    if isinstance(text, list):
        text = " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in text)
    if isinstance(text, str) and text.strip():
        return {"kind": "reply", "name": "llm_reply", "text": text.strip()}, ""
    return None, "empty answer: call a tool or reply"


def propose(model: Any, wf: Workflow, messages: list[BaseMessage], frame: dict, guidance: dict,
            violations: list, suggestion: str = "") -> dict | None:
    """The LLM's proposal, or None when it keeps failing (the caller falls back to the offline policy)."""
    try:
        bound = model.bind_tools(tool_specs(wf))
    except NotImplementedError:
        bound = model
    convo: list[BaseMessage] = [SystemMessage(system_prompt(wf, frame, guidance, violations, suggestion)),
                                *_history(messages)]
    for attempt in range(MAX_RETRIES + 1):
        try:
            msg = bound.invoke(convo)
        except Exception as exc:  # noqa: BLE001 — an unreachable model must not crash the turn
            log.warning("executor model failed: %s", exc)
            return None
        proposal, error = parse(msg, wf)
        if proposal is not None:
            return proposal
        log.info("executor output rejected (attempt %d): %s", attempt + 1, error)
        convo = convo + [HumanMessage(f"Your last output was invalid: {error}. Try again.")]
    return None
