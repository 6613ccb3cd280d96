"""The ``clarify`` node: when the retriever cannot tell the top workflows apart, ask the user.

FlowSwitch lists interactive clarification for ambiguous intents as future work; here it is a
LangGraph ``interrupt``: the question and the options go to the caller (CLI, Studio, SDK), the
answer comes back with ``Command(resume=...)`` — an option number ("2"), a workflow name, or any
text, matched by word overlap with the options' names and descriptions.  The choice is appended to
the turn's commands as ``StartFlow(workflow=...)``; ``apply_commands`` makes it active.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from graph.context import Context
from graph.resources import get_resources
from dialogue.commands import StartFlow, dump
from graph.state import State, turn_commands
from workflows.text import words

def _words(text: str) -> set[str]:
    return set(words(text.replace("_", " ")))


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
    options = next((c["options"] for c in reversed(turn_commands(state)) if c.get("command") == "clarify"), [])
    lib = get_resources(runtime.context).library
    describe = {o: lib.workflows[o].description if o in lib.workflows else "" for o in options}
    lines = [f"{i}. {lib.workflows[o].display_name if o in lib.workflows else o} — {describe[o]}"
             for i, o in enumerate(options, 1)]
    question = "I can help with several things here. Which one do you mean?\n" + "\n".join(lines)
    answer = interrupt({"kind": "clarify", "question": question, "options": options})
    picked = choose(answer, options, describe) or options[0]
    turn = int(state.get("turn") or 0)
    return {"commands": dump([StartFlow(workflow=picked, turn=turn, source="clarify")]),
            "trace": [{"event": "user", "type": "clarify", "answer": str(answer), "workflow": picked, "turn": turn}]}

