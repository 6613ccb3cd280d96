"""The ``clarify`` node: when the retriever cannot tell the top workflows apart, ask the user.

FlowSwitch lists interactive clarification for ambiguous intents as future work; here it is a
LangGraph ``interrupt``: the question and the options go to the caller (CLI, Studio, SDK), the
answer comes back with ``Command(resume=...)`` — an option number ("2"), a workflow name, or any
text, matched by word overlap with the options' names and descriptions.  The chosen workflow
becomes active; an unfinished previous one is pushed on ``workflow_stack`` (as the retriever does).
"""

from __future__ import annotations

import re
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from graph.context import Context
from graph.resources import get_resources
from graph.state import State

_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower().replace("_", " ")))


def choose(answer: Any, options: list[str], describe: dict[str, str]) -> str | None:
    """Resolve the user's answer to one of ``options`` (None when nothing matches)."""
    text = str(answer or "").strip()
    if not text:
        return None
    if text.isdigit() and 1 <= int(text) <= len(options):
        return options[int(text) - 1]
    ordinals = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "last": len(options)}
    said = _words(text)
    for word, idx in ordinals.items():
        if word in said and idx <= len(options) and len(said) <= 4:
            return options[idx - 1]
    if text in options:
        return text
    scores = {o: len(said & _words(o + " " + describe.get(o, ""))) for o in options}
    best = max(options, key=lambda o: scores[o])
    ranked = sorted(scores.values(), reverse=True)
    if ranked[0] == 0 or (len(ranked) > 1 and ranked[0] == ranked[1]):
        return None
    return best


def clarify(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    options = list(state.get("clarify") or [])
    lib = get_resources(runtime.context).library
    describe = {o: lib.workflows[o].description if o in lib.workflows else "" for o in options}
    lines = [f"{i}. {lib.workflows[o].display_name if o in lib.workflows else o} — {describe[o]}"
             for i, o in enumerate(options, 1)]
    question = "I can help with several things here. Which one do you mean?\n" + "\n".join(lines)
    answer = interrupt({"kind": "clarify", "question": question, "options": options})
    picked = choose(answer, options, describe) or options[0]
    update: dict[str, Any] = {"clarify": [], "active_workflow": picked,
                              "trace": [{"event": "user", "type": "clarify", "answer": str(answer),
                                         "workflow": picked}]}
    previous = state.get("active_workflow")
    progress = (state.get("progress") or {}).get(previous or "", {})
    old_stack = list(state.get("workflow_stack") or [])
    stack = [w for w in old_stack if w != picked]  # resuming takes it off the stack
    if previous and previous not in options and not progress.get("done") and previous not in stack:
        stack.append(previous)
    if stack != old_stack:
        update["workflow_stack"] = stack
    return update
