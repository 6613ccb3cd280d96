"""Pre-decision hints (FlowAgent's soft controllers): what the executor should know before it decides —
nodes not callable yet and why, calls already made with the same arguments, actions the user declined
this turn, the conversation getting long."""

from __future__ import annotations

from workflows.pdl import Workflow
from workflows.procedure import Procedure

from ..frames import Frame
from ..experience import describe, unmet
from .checks import CheckEnv, blocked_by_branch


def hints_for(wf: Workflow | None, frame: Frame, env: CheckEnv, procedure: Procedure | None) -> list[str]:
    hints: list[str] = []
    turn = env.turn
    if turn >= max(1, int(env.max_turns * 0.75)):
        hints.append(f"The conversation is getting long (turn {turn} of at most {env.max_turns}): "
                     "finish the task or offer to hand over to a human.")
    if wf is None:
        return hints
    executed = set(frame.get("executed") or [])
    for node in [*wf.apis, *wf.answers]:
        kind = "API" if node in wf.apis else "ANSWER"
        missing = [d for d in node.precondition if d not in executed]
        if missing:
            hints.append(f"{kind} {node.name} is not callable yet: it needs {', '.join(missing)} first.")
        elif kind == "API" and procedure is not None and (why := blocked_by_branch(procedure, node.name, env.scope)):
            hints.append(f"API {node.name} is not callable now: {why}.")
        for p in unmet(env.prerequisites, frame, node.name) if kind == "API" else []:
            hints.append(f"API {node.name} is not callable yet: {describe(p)}.")
    seen: dict[tuple, int] = {}
    for c in frame.get("calls") or []:
        if c.get("status") == "cancelled":
            if c.get("turn") == turn:
                hints.append(f"The user declined {c.get('api')} with {c.get('args')}; do not call it again this turn.")
            elif c.get("reread") and c.get("turn") == turn - 1:
                hints.append(f"The user answered {c.get('api')}'s confirmation with this message; ask before "
                             "calling it again.")
            continue
        key = (c.get("api"), repr(sorted((c.get("args") or {}).items())))
        seen[key] = seen.get(key, 0) + 1
    for (api, args), n in seen.items():
        hints.append(f"API {api} was already called {n}x with these arguments {args}; reuse its result "
                     f"instead of calling it again (limit {env.max_api_repeats}).")
    return hints
