"""What the executor says: questions for missing slots, yes/no questions for undecidable conditions,
ANSWER templates filled from the values view, and proposals built from the interpreter's next action."""

from __future__ import annotations

import re
import uuid
from typing import Any

from workflows.pdl import Workflow
from workflows.semantics import render_template
from workflows.text import humanize, lower_first

from .interpreter import NextAction

OOW = "answer_out_of_workflow_questions"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:12]}"


def slot_phrase(wf: Workflow, name: str) -> str:
    """A slot as the agent names it to the user: "the order number", "which item goes back" (its questions,
    and what a task waits for: ``pattern_cannot_continue``)."""
    s = wf.slot(name)
    # The description's first clause ("The location where the user wants to find a restaurant. City +
    # District ..." -> "location where you want to find a restaurant"), else the source's own name
    # (``Slot.title``: "from", not "from_"), else the name.
    desc = (re.split(r"[,(]|\.\s", s.description)[0].strip().rstrip(".") if s and s.description
            else s.title if s and s.title else humanize(name))
    desc = re.sub(r"^(?:the|a|an)\s+", "", desc, flags=re.I)
    desc = re.sub(r"\bthe (?:user|customer)'s\b", "your", desc, flags=re.I)
    desc = re.sub(r"\bthe (?:user|customer) (want|intend|need)s\b", r"you \1", desc, flags=re.I)
    desc = re.sub(r"\bthe (?:user|customer) (?:is|are)\b", "you are", desc, flags=re.I)
    desc = re.sub(r"\bthe (?:user|customer) (should|would|can|could|will|may|must)\b", r"you \1", desc, flags=re.I)
    if re.match(r"(?:why|how|when|where|whether)\b", desc, re.I):  # "why the customer cancels": a verb follows
        desc = re.sub(r"\bthe (?:user|customer) ([a-z]+?)s\b", r"you \1", desc, flags=re.I)
    part = lower_first(desc) if desc else humanize(name)
    # "the order number", but "which item goes back" / "why it is returned" take no article
    return part if re.match(r"(?:which|what|why|how|where|when|who|whether)\b", part) else f"the {part}"


def question_for(wf: Workflow, slots: list[str]) -> str:
    parts = [slot_phrase(wf, name) for name in slots]
    if not parts:
        return "Could you tell me a bit more about what you need?"
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Could you tell me {listed}?"


def with_options(wf: Workflow, text: str, slots: list[str], most: int = 8) -> str:
    """A question asked again with the values it can take ("Could you tell me the city of the stay? Which one
    is it: lisbon, porto, seville or amsterdam?"): the user's last answer gave nothing, so the same question
    again would loop.  Only slots with a short list of options (``most``)."""
    lists = [[humanize(o) for o in s.enum] for n in slots if (s := wf.slot(n)) is not None and s.enum
             and len(s.enum) <= most]
    if not lists:
        return text
    said = "; ".join(", ".join(o[:-1]) + " or " + o[-1] if len(o) > 1 else o[0] for o in lists)
    return f"{text.rstrip()} Which one is it: {said}?"


def cond_question(condition: str) -> str:
    if " -> " in condition:  # compiled flowchart branch: "<question> -> <outcome>"
        question, outcome = condition.rsplit(" -> ", 1)
        question = re.sub(r"\s*\(first time.*\)$", "", question.strip())
        if question.endswith("?"):
            return question
        return f"Just to check about {question.rstrip('.')}: is it {outcome.replace('_', ' ')}? (yes/no)"
    text = re.sub(r"\bthe (?:user|customer|caller)(?:'s)?\b", "you", condition.strip().rstrip("?."), flags=re.I)
    text = re.sub(r"\byou is\b", "you are", text)
    text = re.sub(r"\byou has\b", "you have", text)
    return f"Just to check: {text}? (yes/no)"


def answer_text(wf: Workflow, name: str, values: dict[str, Any], slots: list[str] | None = None) -> str:
    """An ANSWER's template filled from the values view (or a question for its slots when it has none)."""
    ans = wf.answer(name)
    text = render_template(ans.template, values) if ans and ans.template else ""
    if not text.strip():
        text = question_for(wf, slots) if slots else humanize(name).capitalize() + "."
    return text


def proposal_for(wf: Workflow, act: NextAction, values: dict) -> dict:
    if act.kind == "api":
        return {"kind": "tool", "name": act.name, "args": act.args, "call_id": new_call_id()}
    if act.kind == "ask":  # named after the ANSWER it stands for when it asks for the rest of its slots
        return {"kind": "reply", "name": act.name or "request_information", "text": question_for(wf, act.slots),
                "args": {"slots": act.slots}}
    if act.kind == "ask_cond":
        return {"kind": "reply", "name": "request_information", "text": cond_question(act.condition),
                "args": {"slots": [act.cond_key]}}
    if act.kind == "answer":
        return {"kind": "reply", "name": act.name, "text": answer_text(wf, act.name, values, act.slots)}
    return {"kind": "reply", "name": OOW, "completes": True,
            "text": f"Your request to {lower_first(wf.display_name)} is complete. "
                    "Is there anything else I can help with?"}
