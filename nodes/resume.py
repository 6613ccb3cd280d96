"""The ``resume`` node: returns to an interrupted workflow from ``workflow_stack``.

The retriever pushes the unfinished workflow on the stack when the user digresses; this node
takes it back when the user asks for it: the turn says "back to / continue / resume / return to
..." and names a stacked workflow (word overlap with its title and description, best match wins;
a bare "let's go back" takes the most recent one).  A plain "yes" is left to the detector (it may
accept an offer made by the current workflow).  Resuming sets ``decision = STAY`` (no search),
makes the stacked workflow active with its saved progress, and pushes the current one if
unfinished.
When the resumed workflow's next step is a question, the node proposes it directly (the graph goes
on to ``post_controller``) so the navigation turn is not misread as a slot value; otherwise the
executor takes over as usual.  Every turn it also drops completed workflows from the stack.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.resources import get_resources
from graph.state import State

BACK = re.compile(r"\b(?:back to|go back|get back|return to|resume|continue (?:with|the|my)|carry on|"
                  r"pick up where|where we (?:were|left))\b", re.I)
_WORD = re.compile(r"[a-z]+")
_STOP = {"the", "a", "an", "my", "to", "of", "for", "and", "or", "at", "in", "on", "with", "back", "go",
         "get", "let", "lets", "s", "me", "i", "now", "please", "can", "we", "you", "it", "that", "this"}


def _words(text: str) -> set[str]:
    out = set()
    for w in _WORD.findall(text.lower().replace("_", " ")):
        if w in _STOP or len(w) < 3:
            continue
        out.add(w[:5])  # crude stemming: booking/book, tables/table
    return out


def _user_text(state: State) -> str:
    for msg in reversed(state.get("messages") or []):
        if getattr(msg, "type", "") == "human":
            c = msg.content
            return c if isinstance(c, str) else " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)
    return ""


def _finished(state: State, name: str | None, runtime: Runtime[Context]) -> bool:
    if not name:
        return True
    progress = (state.get("progress") or {}).get(name) or {}
    if progress.get("done"):
        return True
    wf = get_resources(runtime.context).library.workflows.get(name)
    if wf is None:
        return True
    from nodes.pdl_runtime import Interpreter

    try:
        return Interpreter(wf).next_action(dict(progress)).kind == "done"
    except Exception:  # noqa: BLE001 - an unreadable procedure is not "finished"
        return False


def pick(text: str, stack: list[str], describe: dict[str, str]) -> str | None:
    """The stacked workflow the user refers to (None when the turn does not ask to go back)."""
    said = _words(text)
    scores = {name: len(said & _words(name + " " + describe.get(name, ""))) for name in stack}
    best = max(reversed(stack), key=lambda n: scores[n])  # ties: the most recent
    if scores[best] > 0:
        return best
    return stack[-1] if not (said - _words("continue resume return pick carry where left were")) else None


def _welcome_back(wf, progress: dict) -> dict | None:
    """The resumed workflow's next question, without reading this turn's message as slot values
    (it only says where to go).  None when the next step is not a reply — the executor takes over."""
    from nodes.executor import offline_proposal
    from nodes.pdl_runtime import Interpreter

    try:
        proposal = offline_proposal(wf, Interpreter(wf), copy.deepcopy(progress), [])
    except Exception:  # noqa: BLE001 - fall back to the executor
        return None
    if proposal.get("kind") != "reply":
        return None
    proposal["text"] = f"Sure — back to {wf.display_name[0].lower() + wf.display_name[1:]}. {proposal['text']}"
    return proposal


def resume(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    old_stack = list(state.get("workflow_stack") or [])
    # Completed workflows are not interrupted ones: nothing to offer to resume.
    stack = [w for w in old_stack if not _finished(state, w, runtime)]
    update: dict[str, Any] = {"resumed": None}
    if stack != old_stack:
        update["workflow_stack"] = stack
    if not stack:
        return update
    text = _user_text(state)
    lib = get_resources(runtime.context).library
    describe = {n: f"{lib.workflows[n].display_name} {lib.workflows[n].description}" if n in lib.workflows else n
                for n in stack}
    current = state.get("active_workflow")
    target = None
    if BACK.search(text):
        target = pick(text, stack, describe)
    if target is None or target not in lib.workflows:
        return update
    new_stack = [w for w in stack if w != target]
    if current and current != target and not _finished(state, current, runtime):
        new_stack.append(current)
    update.update(decision="STAY", active_workflow=target, workflow_stack=new_stack, resumed=target,
                  trace=[{"event": "user", "type": "resume", "workflow": target, "from": current,
                          "turn": state.get("turn") or 0}])
    proposal = _welcome_back(lib.workflows[target], (state.get("progress") or {}).get(target) or {})
    if proposal is not None:
        update["proposal"] = proposal
    else:
        update["resumed"] = None  # let the executor decide the next step
    return update
