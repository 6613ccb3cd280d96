"""LLM extraction: QA-CoT (Guide/Implementer question answering) and the paper's baselines.

Every method reads the Proc-Sim representatives of one task (``elements.representative``) and must
produce the workflow's body as YAML (``slots``, ``apis``, ``answers``, ``procedure``). That body is
checked with the library's own validator; the validator's problems go back to the model (at most
``retries`` times) before the task fails with a clear error.

- ``basic``: one prompt with the conversations.
- ``plan``: the model first lists the steps and branches, then writes the workflow from its plan.
- ``reflection``: basic, then the model critiques its draft against the conversations and revises it.
- ``ensemble``: basic ``n`` times; the draft whose procedure nodes agree most with the others wins.
- ``qa-cot``: a Guide asks the method's questions one by one (intent, slots, actions and their order,
  branch conditions, replies); an Implementer answers each from the conversations, seeing the earlier
  answers (the chain of thought); the workflow is written from the whole question-answer record.

The chat model is a callable ``chat(messages) -> str`` with messages ``[(role, text), ...]``; the graph
layer adapts a LangChain chat model (``graph.models.chat_model``), tests pass a scripted one.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Sequence

import yaml
from pydantic import ValidationError

from ..pdl import Workflow
from ..procedure import ProcedureError, parse_procedure
from ..validate import validate_workflow
from .transcripts import Transcript

Chat = Callable[[list[tuple[str, str]]], str]
METHODS = ("qa-cot", "basic", "plan", "reflection", "ensemble")
GUIDE_QUESTIONS = (
    "What does the user want in these conversations (the intent), in one sentence?",
    "Which pieces of information (slots) does the agent collect, and which API arguments carry them?",
    "Which actions does the agent perform (replies and API calls), and in which order?",
    "Where does the conversation branch, and on what condition (an API result, or the user's answer)?",
    "What does the agent say at each reply? Give a template with ${slot} placeholders.",
)
FORMAT = """Answer with one YAML document in a ```yaml block with exactly these keys:
slots: [{name, description, type}]            # type: string | integer | number | boolean
apis: [{name, description, parameters: {type: object, properties: {arg: {type, description}}, required: [...]}, returns: [...]}]
answers: [{name, template}]                   # template text may use ${slot} placeholders
procedure: |                                  # PDL: [x] = ANSWER.ask_x(), [r] = API.name(args), if/elif/else, while, COND("...")
  ..."""


class ExtractionError(ValueError):
    pass


def render_conversations(ts: Sequence[Transcript], max_turns: int = 40) -> str:
    out = []
    for k, t in enumerate(ts, 1):
        lines = [f"Conversation {k} ({t.id}):"]
        for turn in t.turns[:max_turns]:
            if turn.api is not None:
                lines.append(f"  agent [{turn.step}] API {turn.api.name}({turn.api.args}) -> {turn.api.result}")
            else:
                tag = f" [{turn.action}]" if turn.action else ""
                lines.append(f"  {turn.speaker}{tag}: {turn.text}")
        out.append("\n".join(lines))
    return "\n\n".join(out)


def parse_body(text: str) -> dict:
    m = re.search(r"```(?:yaml)?\s*\n(.*?)```", text, re.S)
    try:
        body = yaml.safe_load(m.group(1) if m else text)
    except yaml.YAMLError as exc:
        raise ExtractionError(f"the model's answer is not YAML: {exc}") from None
    if not isinstance(body, dict) or "procedure" not in body:
        raise ExtractionError("the model's answer has no 'procedure' key")
    return {k: body[k] for k in ("slots", "apis", "answers", "procedure") if k in body}


def to_workflow(body: dict, name: str, domain: str, role: str, description: str) -> tuple[Workflow | None, list[str]]:
    """The workflow and the validator's problems ([] when valid)."""
    try:
        wf = Workflow.model_validate({**body, "name": name, "domain": domain, "role": role,
                                      "description": description, "tags": ["source:extracted-llm"]})
    except ValidationError as exc:
        return None, [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return wf, [f"{i.field}: {i.message}" for i in validate_workflow(wf)]


def _nodes(wf: Workflow) -> set[str]:
    try:
        return {c.name for c in parse_procedure(wf.procedure).calls()}
    except ProcedureError:
        return set()


def extract_llm(method: str, task: str, reps: Sequence[Transcript], chat: Chat, *, domain: str, role: str,
                description: str, retries: int = 2, n: int = 3) -> Workflow:
    if method not in METHODS:
        raise ExtractionError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    convs = render_conversations(reps)
    system = ("You turn customer-service conversations into a workflow written in PDL. "
              f"The task is {task!r}. Use the agent's action labels as ANSWER names and the API names as given.")

    def draft(history: list[tuple[str, str]]) -> Workflow:
        msgs = [("system", system)] + history
        problems: list[str] = []
        for _ in range(retries + 1):
            reply = chat(msgs)
            try:
                wf, problems = to_workflow(parse_body(reply), task, domain, role, description)
            except ExtractionError as exc:
                wf, problems = None, [str(exc)]
            if wf is not None and not problems:
                return wf
            msgs = msgs + [("assistant", reply), ("user", "The workflow is not valid:\n- " + "\n- ".join(problems)
                                                  + "\nFix it and answer again.\n" + FORMAT)]
        raise ExtractionError(f"task {task!r}: no valid workflow after {retries + 1} tries: {'; '.join(problems[:5])}")

    ask = f"Conversations:\n\n{convs}\n\n"
    if method == "basic":
        return draft([("user", ask + "Write the workflow these conversations follow.\n" + FORMAT)])
    if method == "plan":
        plan = chat([("system", system), ("user", ask + "List the workflow's steps in order, with the conditions "
                                                       "of each branch. Do not write PDL yet.")])
        return draft([("user", ask + f"Your plan:\n{plan}\n\nNow write the workflow.\n" + FORMAT)])
    if method == "reflection":
        first = draft([("user", ask + "Write the workflow these conversations follow.\n" + FORMAT)])
        critique = chat([("system", system), ("user", ask + "Draft procedure:\n" + first.procedure
                                                    + "\nWhat does this draft get wrong or miss? Be specific.")])
        return draft([("user", ask + "Draft procedure:\n" + first.procedure + f"\nCritique:\n{critique}\n\n"
                       "Write the corrected workflow.\n" + FORMAT)])
    if method == "ensemble":
        drafts = [draft([("user", ask + f"Write the workflow these conversations follow (attempt {i + 1}).\n" + FORMAT)])
                  for i in range(n)]
        votes = Counter(node for d in drafts for node in _nodes(d))
        return max(drafts, key=lambda d: (sum(votes[x] for x in _nodes(d)) / max(1, len(_nodes(d))), -drafts.index(d)))
    # qa-cot: the Guide's questions, the Implementer's answers, then the workflow from the record
    record: list[str] = []
    for q in GUIDE_QUESTIONS:
        answer = chat([("system", system + " You are the Implementer: answer the Guide's question from the "
                        "conversations only."), ("user", ask + ("Earlier answers:\n" + "\n".join(record) + "\n\n"
                                                                if record else "") + f"Guide: {q}")])
        record.append(f"Q: {q}\nA: {answer.strip()}")
    return draft([("user", ask + "Question-answer record:\n" + "\n\n".join(record)
                   + "\n\nWrite the workflow from this record.\n" + FORMAT)])
