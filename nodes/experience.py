"""The ``experience`` node: WISE-Flow's online step — inject verified, learned guidance before execution.

With ``context.experience`` on (the default) and blocks in the experience store for this library
(``flowdesk induce``; ``memory.experience_store``), the node:

1. retrieves the active workflow's blocks closest to the user's intention (the detector's one-line
   reading, else the workflow's name);
2. aligns them with progress: the actions that already succeeded in this workflow instance and the
   interpreter's next step;
3. checks the prerequisites of the next action against the frame (satisfied / unsatisfied) and its
   learned argument rules against the values it would be called with (holds / broken);
4. writes the compact block to ``experience`` (the LLM executor's prompt; Studio shows it) and the
   verified prerequisites the PDL does *not* declare, and the argument rules on slots, to ``prerequisites``
   — the pre-decision hints, the post-decision check ``experience_prerequisite`` and the offline executor read those
   (``dialogue.experience``).

Without a store, blocks or an active workflow it writes ``""`` and ``[]``: a no-op.
"""

from __future__ import annotations

import logging
from typing import Any

from langgraph.runtime import Runtime

from dialogue.experience import broken, declared, describe, unmet
from dialogue.frames import successful_calls, top
from graph.context import Context
from graph.resources import get_resources
from graph.state import State, given_slots, turn_commands

log = logging.getLogger("flowdesk.experience")
_SAID: set[str] = set()


def _unavailable(exc: Exception) -> None:
    """Log, once per kind of failure, that the experience store did not answer (the turn runs without it)."""
    from workflows.sanitize import redact

    what = f"{type(exc).__name__}: {str(exc)[:160]}"
    if what not in _SAID:
        _SAID.add(what)
        log.warning(redact(f"experience store not answering ({what}); this turn runs without experience"))


MAX_BLOCKS = 8  # blocks retrieved per step (a workflow has one workflow block, a contrast block, action blocks)


def experience(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    none: dict[str, Any] = {"experience": "", "prerequisites": []}
    ctx = runtime.context
    if not ctx.experience:
        return none
    frame = top(state.get("stack"))
    res = get_resources(ctx)
    wf = res.library.workflows.get(frame["workflow"]) if frame else None
    if wf is None:
        return none
    store = res.experience
    try:
        if store is None or not store.count():
            return none
        blocks = store.search(state.get("user_intention") or wf.display_name, res.library_key, wf.name, MAX_BLOCKS)
    except Exception as exc:  # noqa: BLE001 - a Chroma server gone mid-session: experience is advice, the turn goes on
        _unavailable(exc)
        return none
    if not blocks:
        return none
    prerequisites = []
    for b in blocks:
        if b.kind != "action" or wf.api(b.action) is None:
            continue
        pdl = declared(wf, b.action)
        for p in b.prerequisites:
            if p.kind == "argument" and wf.slot(p.requires) is not None:
                # a rule on a value the user gives (asked again when a call would break it)
                prerequisites.append({"workflow": wf.name, "action": b.action, "requires": p.requires, "kind": p.kind,
                                      "relation": p.relation, "other": p.other, "support": p.support,
                                      "confidence": p.confidence, "block": b.id})
            elif p.kind == "action" and p.requires not in pdl and wf.api(p.requires) is not None:
                # what its result gives: the arguments traced to it, and its other results no slot holds
                gives = set(p.provides) | {r for r in wf.api(p.requires).returns if wf.slot(r) is None}
                prerequisites.append({"workflow": wf.name, "action": b.action, "requires": p.requires, "kind": p.kind,
                                      "provides": sorted(gives), "support": p.support,
                                      "confidence": p.confidence, "block": b.id})
    # progress alignment: what succeeded so far, the next step, its prerequisites' status
    done = [c["api"] for c in successful_calls(frame)]
    act = res.interpreters[wf.name].next_action(frame, state.get("reading"))
    given = given_slots(turn_commands(state))
    lines = [b.text for b in blocks if b.kind != "action" or b.action == act.name
             or any(p["action"] == b.action for p in prerequisites)]
    lines.append(f"Progress: done {', '.join(dict.fromkeys(done)) or 'nothing yet'}; next {act.kind} {act.name}.")
    for p in prerequisites:
        if p["kind"] == "argument":
            if p["action"] == act.name:
                bad = broken([p], frame, act.name, act.args, given)
                status = "broken: ask the user for it again" if bad else "holds"
                lines.append(f"Check: {describe(p)}: {status}.")
            continue
        status = "unsatisfied" if unmet([p], frame, p["action"]) else "satisfied"
        lines.append(f"Check: {p['action']} needs {p['requires']} first: {status}.")
    return {"experience": "\n".join(lines), "prerequisites": prerequisites}
