"""FlowAgent's controllers: soft hints before the executor decides, hard checks after.

``pre_controller`` writes ``guidance.hints`` (APIs not callable yet and why, calls already made
with the same arguments, the conversation getting long, actions the user declined).
``post_controller`` runs small checks on the executor's ``proposal``; each returns a ``Verdict``.
Rejections are appended to ``violations`` and counted in ``attempts``; the proposal is cleared so
the executor retries with the reasons, and after ``context.max_attempts`` rejections in a turn
(or at once when the session is over ``max_turns``) it is replaced by a safe reply — the invalid
action itself never reaches a tool or the user.  ``route_after_post`` is the edge that follows.
"""

from __future__ import annotations

import ast
import uuid
from string import Template
from typing import Any, Callable

from langgraph.runtime import Runtime

from graph.context import Context
from graph.resources import get_resources
from graph.state import Progress, Proposal, State, Verdict
from workflows.bindings import validate_args
from workflows.pdl import BUILTIN_ANSWERS, TEMPLATE_VAR, Workflow
from workflows.procedure import Call, If, While, parse_procedure

# Replies that belong to no workflow (greetings, safe replies, clarifications, resume offers):
# the executor and the controllers may use them whatever the active workflow.
GENERIC_REPLIES = set(BUILTIN_ANSWERS) | {"safe_reply", "clarify", "greeting", "goodbye", "fallback",
                                          "no_workflow", "out_of_scope", "resume", "offer_resume",
                                          "cancelled", "cancel", "confirm_cancel", "done", "chitchat", "llm_reply"}
SAFE_REPLY = "safe_reply"
MAX_TOOL_CALLS_PER_TURN = 12  # a runaway guard: no honest turn needs more tool calls than this


# --- shared helpers ------------------------------------------------------------------------------

def active(state: State, runtime: Runtime[Context]) -> tuple[Workflow | None, Progress]:
    name = state.get("active_workflow")
    wf = get_resources(runtime.context).library.workflows.get(name) if name else None
    return wf, dict((state.get("progress") or {}).get(name or "", {}) or {})


def values_of(progress: Progress) -> dict[str, Any]:
    """Names a template or a condition can read: returned values, then slots (slots win)."""
    vals: dict[str, Any] = {}
    for key, val in (progress.get("results") or {}).items():
        if isinstance(val, dict):
            vals.update(val)  # results may be kept per API (api -> returned dict)
        else:
            vals[key] = val
    vals.update(progress.get("slots") or {})
    return vals


def successful_calls(progress: Progress, api: str | None = None) -> list[dict]:
    return [c for c in progress.get("call_args") or []
            if c.get("status", "ok") == "ok" and (api is None or c.get("api") == api)]


def _norm(v: Any) -> Any:
    return v.strip().lower() if isinstance(v, str) else v


def _verdict(name: str, proposal: Proposal, reason: str = "") -> Verdict:
    return Verdict(controller=name, ok=not reason, reason=reason, proposal=dict(proposal))


def _procedure(wf: Workflow):
    try:
        return parse_procedure(wf.procedure)
    except Exception:  # noqa: BLE001 - the loader validated it; be defensive anyway
        return None


# --- condition evaluation (for the branch check) ---------------------------------------------------

class _Unknown(Exception):
    pass


def _eval(node: ast.expr, vals: dict[str, Any]) -> Any:
    """Evaluate a procedure condition on known values; ``_Unknown`` when it reads anything unknown."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        if node.id not in vals:
            raise _Unknown(node.id)
        return vals[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval(node.operand, vals)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, vals)
    if isinstance(node, ast.BoolOp):
        results = [_eval(v, vals) for v in node.values]
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, vals) for e in node.elts]
    if isinstance(node, ast.Compare):
        left = _eval(node.left, vals)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, vals)
            ok = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
                  ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
                  ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
                  ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b}[type(op)]
            try:
                if not ok(left, right):
                    return False
            except TypeError:
                raise _Unknown("incomparable") from None
            left = right
        return True
    raise _Unknown(type(node).__name__)  # COND("...") and anything else: not decidable here


def _guards(steps, name: str, path: list) -> list[list[tuple[ast.expr, str, bool]]]:
    """For every call of ``name``: the conditions (test, source, must_be) on the way to it."""
    found = []
    for step in steps:
        if isinstance(step, Call) and step.name == name:
            found.append(list(path))
        elif isinstance(step, If):
            before: list[tuple[ast.expr, str, bool]] = []
            for test, src, body in step.branches:
                found += _guards(body, name, path + before + [(test, src, True)])
                before.append((test, src, False))
            found += _guards(step.orelse, name, path + before)
        elif isinstance(step, While):
            found += _guards(step.body, name, path)  # a retry loop may run again: not a guard
    return found


def blocked_by_branch(wf: Workflow, name: str, vals: dict[str, Any]) -> str | None:
    """Why ``name`` cannot be reached on the current values (None when it can, or we cannot tell)."""
    proc = _procedure(wf)
    if proc is None:
        return None
    paths = _guards(proc.steps, name, [])
    if not paths:
        return None
    reasons = []
    for path in paths:
        failed = None
        for test, src, must_be in path:
            try:
                if bool(_eval(test, vals)) != must_be:
                    failed = f"`{src}` is {'false' if must_be else 'true'}"
                    break
            except _Unknown:
                continue
        if failed is None:
            return None  # this occurrence is reachable (or undecidable): allow it
        reasons.append(failed)
    return f"{name} is on a branch that does not apply: " + "; ".join(dict.fromkeys(reasons))


# --- post-decision checks: (proposal, wf, progress, state, context) -> Verdict ---------------------

def check_known(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> Verdict:
    name = p.get("name") or ""
    if p.get("kind") == "tool":
        if wf is None:
            return _verdict("unknown_node", p, f"no active workflow, so there is no tool {name!r} to call")
        if wf.api(name) is None:
            return _verdict("unknown_node", p, f"{name!r} is not an API of workflow {wf.name} "
                                               f"(APIs: {', '.join(a.name for a in wf.apis) or 'none'})")
    elif p.get("kind") == "reply":
        if wf is not None and name and name not in GENERIC_REPLIES and wf.answer(name) is None:
            return _verdict("unknown_node", p, f"{name!r} is not an ANSWER of workflow {wf.name}")
        if not (p.get("text") or "").strip():
            return _verdict("unknown_node", p, f"reply {name!r} has no text")
    else:
        return _verdict("unknown_node", p, f"proposal kind {p.get('kind')!r} is neither 'tool' nor 'reply'")
    return _verdict("unknown_node", p)


def check_dependency(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> Verdict:
    """Every precondition node has completed — and, for APIs, ran with the same shared arguments."""
    if wf is None:
        return _verdict("node_dependency", p)
    node = wf.api(p.get("name", "")) if p.get("kind") == "tool" else wf.answer(p.get("name", ""))
    if node is None:
        return _verdict("node_dependency", p)
    executed = set(progress.get("executed") or [])
    missing = [d for d in node.precondition if d not in executed]
    if missing:
        return _verdict("node_dependency", p, f"{node.name} needs {', '.join(missing)} first (not done yet)")
    if p.get("kind") == "tool":
        args = p.get("args") or {}
        for dep in node.precondition:
            calls = successful_calls(progress, dep)
            if not calls:
                continue
            last = calls[-1].get("args") or {}
            stale = [k for k in set(last) & set(args) if _norm(last[k]) != _norm(args[k])]
            if stale:
                k = sorted(stale)[0]
                return _verdict("node_dependency", p, f"{dep} ran with {k}={last[k]!r}, not {args[k]!r}: "
                                                      f"run {dep} again with the new value first")
    return _verdict("node_dependency", p)


def check_branch(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> Verdict:
    """The node lies on a procedure branch whose condition holds on the values known so far."""
    if wf is None or p.get("name") in GENERIC_REPLIES:
        return _verdict("procedure_branch", p)
    return _verdict("procedure_branch", p, blocked_by_branch(wf, p.get("name", ""), values_of(progress)) or "")


_STOP = {"a", "an", "the", "is", "are", "to", "for", "of", "and", "or", "in", "on", "at", "your", "you", "i",
         "we", "it", "be", "has", "have", "been", "with", "this", "that", "my", "our", "can", "will", "please"}


def _content_words(text: str) -> set[str]:
    import re

    return {w for w in re.findall(r"[a-z]+", TEMPLATE_VAR.sub(" ", text.lower())) if w not in _STOP and len(w) > 2}


def check_claim(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> Verdict:
    """A free-text reply (not a declared ANSWER) that reads like an ANSWER whose preconditions have not
    run — e.g. "Booked! Your reference is ..." before any booking — inherits that ANSWER's dependency."""
    if p.get("kind") != "reply" or wf is None or wf.answer(p.get("name", "")) is not None:
        return _verdict("reply_claim", p)
    said = _content_words(p.get("text") or "")
    executed = set(progress.get("executed") or [])
    for ans in wf.answers:
        missing = [d for d in ans.precondition if d not in executed]
        words = _content_words(ans.template)
        if missing and len(words) >= 2 and len(words & said) / len(words) >= 0.6:
            return _verdict("reply_claim", p, f"this reply reads like {ans.name}, which needs "
                                              f"{', '.join(missing)} first (not done yet)")
    return _verdict("reply_claim", p)


def check_repeat(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> Verdict:
    if p.get("kind") != "tool":
        return _verdict("api_repetition", p)
    args = p.get("args") or {}
    same = [c for c in progress.get("call_args") or []
            if c.get("api") == p.get("name") and c.get("args") == args and c.get("status") != "cancelled"]
    api = wf.api(p.get("name", "")) if wf else None
    if api is not None and api.irreversible and any(c.get("status", "ok") == "ok" for c in same):
        return _verdict("api_repetition", p, f"{api.name} already succeeded with these arguments and cannot be "
                                             "undone; do not run it again")
    if len(same) >= ctx.max_api_repeats:
        return _verdict("api_repetition", p, f"{p.get('name')} was already called {len(same)} times with these "
                                             f"arguments (limit {ctx.max_api_repeats}); use its result")
    return _verdict("api_repetition", p)


def check_declined(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> Verdict:
    if p.get("kind") != "tool":
        return _verdict("user_declined", p)
    for c in progress.get("call_args") or []:
        if (c.get("status") == "cancelled" and c.get("api") == p.get("name") and c.get("args") == (p.get("args") or {})
                and c.get("turn") == state.get("turn")):
            return _verdict("user_declined", p, f"the user declined {p.get('name')} with these arguments")
    return _verdict("user_declined", p)


def check_args(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> Verdict:
    if p.get("kind") != "tool" or wf is None or wf.api(p.get("name", "")) is None:
        return _verdict("argument_schema", p)
    return _verdict("argument_schema", p, "; ".join(validate_args(wf.api(p["name"]), p.get("args") or {})))


def check_turns(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> Verdict:
    turn = state.get("turn") or 0
    if turn > ctx.max_turns:
        return _verdict("session_length", p, f"the conversation is over {ctx.max_turns} turns (turn {turn})")
    return _verdict("session_length", p)


def check_turn_budget(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> Verdict:
    if p.get("kind") != "tool":
        return _verdict("turn_budget", p)
    n = sum(1 for c in progress.get("call_args") or [] if c.get("turn") == state.get("turn"))
    if n >= MAX_TOOL_CALLS_PER_TURN:
        return _verdict("turn_budget", p, f"{n} tool calls in this turn already (limit {MAX_TOOL_CALLS_PER_TURN})")
    return _verdict("turn_budget", p)


def check_template(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> Verdict:
    if p.get("kind") != "reply":
        return _verdict("answer_template", p)
    left = [a or b for a, b in TEMPLATE_VAR.findall(p.get("text") or "")]
    if left:
        return _verdict("answer_template", p, f"answer {p.get('name')} has unfilled "
                                              + ", ".join(f"${v}" for v in dict.fromkeys(left)))
    return _verdict("answer_template", p)


CHECKS: list[Callable[..., Verdict]] = [check_known, check_turns, check_dependency, check_branch, check_claim,
                                       check_args, check_repeat, check_declined, check_turn_budget, check_template]


def check_proposal(p: Proposal, wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> list[Verdict]:
    """Every check's verdict (accepting ones included), in order."""
    return [check(p, wf, progress, state, ctx) for check in CHECKS]


# --- safe replies ----------------------------------------------------------------------------------

def render(wf: Workflow | None, name: str, progress: Progress) -> str:
    """An ANSWER's template filled from slots and returned values (unknown ``$vars`` stay visible)."""
    ans = wf.answer(name) if wf else None
    if ans is None:
        return ""
    return Template(ans.template).safe_substitute({k: _show(v) for k, v in values_of(progress).items()})


def _show(v: Any) -> str:
    return ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def safe_reply(rejections: list[Verdict], wf: Workflow | None, progress: Progress) -> Proposal:
    """A reply that is always allowed: clarify, apologise, or offer a human — chosen by the reason."""
    kinds = {v["controller"] for v in rejections}
    last = rejections[-1]
    name = last.get("proposal", {}).get("name", "that")
    if kinds & {"session_length", "turn_budget"}:
        text = ("We have been at this for a while, so I'd like to hand you over to a colleague who can "
                "finish it with you. Is that all right?")
    elif "user_declined" in kinds:
        text = f"Understood — I have not gone ahead with {name.replace('_', ' ')}. What would you like to do instead?"
    elif "argument_schema" in kinds and wf is not None:
        fields = []
        for v in rejections:
            if v["controller"] == "argument_schema":
                fields += [part.split("'")[1] for part in v["reason"].split("; ") if "'" in part]
        fields = list(dict.fromkeys(fields))
        described = [(wf.slot(f).description or f) if wf.slot(f) else f.replace("_", " ") for f in fields]
        text = "Before I can continue, could you tell me " + (", ".join(described) or "a few more details") + "?"
        return Proposal(kind="reply", name="request_information", args={"slots": fields}, text=text,
                        call_id=f"safe-{uuid.uuid4().hex[:8]}")
    elif kinds & {"node_dependency", "procedure_branch", "reply_claim"}:
        # say what is missing in the user's words, not the controller's
        node = (wf.api(name) or wf.answer(name)) if wf is not None else None
        done = set(progress.get("executed") or [])
        missing = [d for d in (node.precondition if node else []) if d not in done]
        if not missing and wf is not None and last["controller"] == "reply_claim":
            missing = [w for w in last["reason"].split("needs ", 1)[-1].split(" first")[0].split(", ") if wf.api(w)]
        step = missing[0].replace("_", " ") if missing else "an earlier step"
        text = (f"I'm sorry, I can't do that yet — {step} has to be done first. Shall we continue step by "
                "step, or would you like me to connect you with a colleague?")
    else:
        text = ("I'm sorry, something went wrong on my side and I could not complete that step. Could you "
                "rephrase what you need, or shall I connect you with a colleague?")
    return Proposal(kind="reply", name=SAFE_REPLY, args={}, text=text, call_id=f"safe-{uuid.uuid4().hex[:8]}")


# --- the nodes -------------------------------------------------------------------------------------

def hints_for(wf: Workflow | None, progress: Progress, state: State, ctx: Context) -> list[str]:
    hints: list[str] = []
    turn = state.get("turn") or 0
    if turn >= max(1, int(ctx.max_turns * 0.75)):
        hints.append(f"The conversation is getting long (turn {turn} of at most {ctx.max_turns}): "
                     "finish the task or offer to hand over to a human.")
    if wf is None:
        return hints
    executed = set(progress.get("executed") or [])
    vals = values_of(progress)
    for node in [*wf.apis, *wf.answers]:
        kind = "API" if node in wf.apis else "ANSWER"
        missing = [d for d in node.precondition if d not in executed]
        if missing:
            hints.append(f"{kind} {node.name} is not callable yet: it needs {', '.join(missing)} first.")
        elif kind == "API" and (why := blocked_by_branch(wf, node.name, vals)):
            hints.append(f"API {node.name} is not callable now: {why.split(': ', 1)[1]}.")
    seen: dict[tuple, int] = {}
    for c in progress.get("call_args") or []:
        if c.get("status", "ok") == "cancelled":
            if c.get("turn") == turn:
                hints.append(f"The user declined {c.get('api')} with {c.get('args')}; do not call it again this turn.")
            continue
        key = (c.get("api"), repr(sorted((c.get("args") or {}).items())))
        seen[key] = seen.get(key, 0) + 1
    for (api, args), n in seen.items():
        hints.append(f"API {api} was already called {n}x with these arguments {args}; reuse its result "
                     f"instead of calling it again (limit {ctx.max_api_repeats}).")
    return hints


def pre_controller(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    wf, progress = active(state, runtime)
    guidance = dict(state.get("guidance") or {})
    guidance["hints"] = hints_for(wf, progress, state, runtime.context)
    return {"guidance": guidance}


def post_controller(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    wf, progress = active(state, runtime)
    proposal = dict(state.get("proposal") or {})
    if not proposal:
        proposal = {"kind": "reply", "name": "", "text": ""}
    if proposal.get("kind") == "reply" and not (proposal.get("text") or "").strip():
        proposal["text"] = render(wf, proposal.get("name", ""), progress)  # a name alone: fill its template
    if proposal.get("kind") == "tool" and not proposal.get("call_id"):
        proposal["call_id"] = f"call-{uuid.uuid4().hex[:8]}"
    rejections = [v for v in check_proposal(proposal, wf, progress, state, ctx) if not v["ok"]]
    if not rejections:
        return {"proposal": proposal}
    violations = list(state.get("violations") or []) + rejections
    attempts = (state.get("attempts") or 0) + 1
    over_length = any(v["controller"] in ("session_length", "turn_budget") for v in rejections)
    if attempts >= ctx.max_attempts or over_length:
        return {"violations": violations, "attempts": attempts, "proposal": safe_reply(rejections, wf, progress)}
    return {"violations": violations, "attempts": attempts, "proposal": None}


def route_after_post(state: State) -> str:
    """post_controller → executor (rejected, retry) | tools (tool call) | respond (reply)."""
    proposal = state.get("proposal")
    if not proposal:
        return "executor"
    return "tools" if proposal.get("kind") == "tool" else "respond"
