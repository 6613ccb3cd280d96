"""The post-decision checks (FlowAgent's controllers), as a registry.

Each check is ``(proposal, workflow, frame, env) -> Verdict``: accepting (``ok``) or rejecting with a
reason.  ``CHECKS`` maps a check's name to it, in the order they run; ``Context.disabled_checks``
switches checks off by name (the evaluations' ablation), never by patching this module.
Conditions are evaluated by ``workflows.semantics`` — the evaluator the interpreter uses — in its
abstaining mode: a check never blocks what it cannot decide.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Callable

from workflows.bindings import schema_errors
from workflows.sanitize import user_args
from workflows.pdl import BUILTIN_ANSWERS, TEMPLATE_VAR, Workflow
from workflows.procedure import Call, If, Procedure, While
from workflows.semantics import UNKNOWN, Scope, decided, evaluate
from workflows.text import content_words, sentences

from ..experience import broken, describe, provider_of, unmet
from ..frames import Frame, successful_calls

# Replies that belong to no workflow (greetings, safe replies, clarifications, repair patterns):
# the executor and the controllers may use them whatever the active workflow.
GENERIC_REPLIES = frozenset(set(BUILTIN_ANSWERS) | {"safe_reply", "clarify", "greeting", "goodbye", "fallback",
                                                    "no_workflow", "out_of_scope", "resume", "offer_resume",
                                                    "cancelled", "cancel", "confirm_cancel", "done", "chitchat",
                                                    "llm_reply"})
MAX_TOOL_CALLS_PER_TURN = 12  # a runaway guard: no honest turn needs more tool calls than this

Proposal = dict[str, Any]
Verdict = dict[str, Any]


def is_generic(name: str) -> bool:
    return name in GENERIC_REPLIES or name.startswith("pattern_")


@dataclass(frozen=True)
class CheckEnv:
    """What the checks read besides the proposal: the turn, the limits and the frame's values view."""

    turn: int
    max_turns: int
    max_api_repeats: int
    scope: Scope = field(default_factory=Scope)
    procedure: Procedure | None = None
    prerequisites: tuple = ()  # verified experience the PDL lacks (dialogue.experience)
    given: tuple = ()  # slots the user gave values for this turn
    # irreversible calls of the workflow that succeeded earlier in the conversation: ``done_key`` of the API and
    # the values the user gave for it
    done_before: tuple = ()


def _norm(v: Any) -> Any:
    return v.strip().lower() if isinstance(v, str) else v


def _verdict(name: str, proposal: Proposal, reason: str = "", **data: Any) -> Verdict:
    """A check's verdict; ``data`` carries what the reason says as structure (``missing`` nodes,
    ``fields`` of the arguments) so the safe reply and the hints never parse reason texts."""
    return {"controller": name, "ok": not reason, "reason": reason, "proposal": dict(proposal), **data}


# --- branch guards --------------------------------------------------------------------------------

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


def guards_of(procedure: Procedure, name: str) -> tuple:
    """``_guards`` of the procedure's steps, kept on the procedure per name (a procedure is not changed once
    parsed; the learned executor checks a few proposals on every turn, the post-controller each one)."""
    kept = procedure.__dict__.get("_guards")
    if kept is None or kept[0] is not procedure.steps:  # (kept beside the steps they were read from)
        kept = procedure.__dict__["_guards"] = (procedure.steps, {})
    paths = kept[1].get(name)
    if paths is None:
        paths = kept[1][name] = tuple(tuple(path) for path in _guards(procedure.steps, name, []))
    return paths


def blocked_by_branch(procedure: Procedure, name: str, scope: Scope) -> str | None:
    """Why ``name`` cannot be reached on the current values (None when it can, or we cannot tell)."""
    paths = guards_of(procedure, name)
    if not paths:
        return None
    reasons = []
    for path in paths:
        failed = None
        for test, src, must_be in path:
            value = decided(evaluate(test, scope, missing=UNKNOWN))
            if value is not None and value != must_be:
                failed = f"`{src}` is {'false' if must_be else 'true'}"
                break
        if failed is None:
            return None  # this occurrence is reachable (or undecidable): allow it
        reasons.append(failed)
    return "; ".join(dict.fromkeys(reasons))



# --- the checks ---------------------------------------------------------------------------------------

def check_known(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    name = p.get("name") or ""
    if p.get("kind") == "tool":
        if wf is None:
            return _verdict("unknown_node", p, f"no active workflow, so there is no tool {name!r} to call")
        if wf.api(name) is None:
            return _verdict("unknown_node", p, f"{name!r} is not an API of workflow {wf.name} "
                                               f"(APIs: {', '.join(a.name for a in wf.apis) or 'none'})")
    elif p.get("kind") == "reply":
        if wf is not None and name and not is_generic(name) and wf.answer(name) is None:
            return _verdict("unknown_node", p, f"{name!r} is not an ANSWER of workflow {wf.name}")
        if not (p.get("text") or "").strip():
            return _verdict("unknown_node", p, f"reply {name!r} has no text")
    else:
        return _verdict("unknown_node", p, f"proposal kind {p.get('kind')!r} is neither 'tool' nor 'reply'")
    return _verdict("unknown_node", p)


def check_dependency(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    """Every precondition node has completed — and, for APIs, ran with the same shared arguments."""
    if wf is None:
        return _verdict("node_dependency", p)
    node = wf.api(p.get("name", "")) if p.get("kind") == "tool" else wf.answer(p.get("name", ""))
    if node is None:
        return _verdict("node_dependency", p)
    executed = set(frame.get("executed") or [])
    missing = [d for d in node.precondition if d not in executed]
    if missing:
        return _verdict("node_dependency", p, f"{node.name} needs {', '.join(missing)} first (not done yet)",
                        missing=missing)
    if p.get("kind") == "tool":
        args = p.get("args") or {}
        for dep in node.precondition:
            calls = successful_calls(frame, dep)
            if not calls:
                continue
            last = calls[-1].get("args") or {}
            stale = [k for k in set(last) & set(args) if _norm(last[k]) != _norm(args[k])]
            if stale:
                k = sorted(stale)[0]
                return _verdict("node_dependency", p, f"{dep} ran with {k}={last[k]!r}, not {args[k]!r}: "
                                                      f"run {dep} again with the new value first", missing=[dep])
    return _verdict("node_dependency", p)


def check_experience(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    """A verified prerequisite from experience holds: the action it gates does not run before it, its learned
    argument rules hold for the call's values, and the user is not asked for a value that action's result
    provides."""
    if wf is None or not env.prerequisites:
        return _verdict("experience_prerequisite", p)
    if p.get("kind") == "tool":
        missing = unmet(env.prerequisites, frame, p.get("name") or "")
        if missing:
            return _verdict("experience_prerequisite", p, describe(missing[0]) + " (not done yet)",
                            missing=[m["requires"] for m in missing])
        bad = broken(env.prerequisites, frame, p.get("name") or "", p.get("args") or {}, env.given)
        if bad:
            return _verdict("experience_prerequisite", p, describe(bad[0]) + ": ask the user for it again",
                            fields=[b["requires"] for b in bad])
    elif p.get("kind") == "reply":
        asked = (p.get("args") or {}).get("slots") or []
        provider = provider_of(env.prerequisites, frame, [asked] if isinstance(asked, str) else asked)
        if provider is not None:
            return _verdict("experience_prerequisite", p, f"{describe(provider)}: run it instead of asking the user",
                            missing=[provider["requires"]])
    return _verdict("experience_prerequisite", p)


def check_branch(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    """The node lies on a procedure branch whose condition holds on the values known so far."""
    if wf is None or env.procedure is None or is_generic(p.get("name") or ""):
        return _verdict("procedure_branch", p)
    why = blocked_by_branch(env.procedure, p.get("name", ""), env.scope)
    return _verdict("procedure_branch", p, f"{p.get('name')} is on a branch that does not apply: {why}" if why else "")


def _content_words(text: str) -> set[str]:
    return content_words(TEMPLATE_VAR.sub(" ", text))


def check_claim(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    """A free-text reply (not a declared ANSWER) that reads like an ANSWER whose preconditions have not
    run — e.g. "Booked! Your reference is ..." before any booking — inherits that ANSWER's dependency."""
    if p.get("kind") != "reply" or wf is None or wf.answer(p.get("name", "")) is not None:
        return _verdict("reply_claim", p)
    text = p.get("text") or ""
    if (p.get("args") or {}).get("slots"):
        # An ask for values: its questions request, they claim nothing — a re-ask after a failed call
        # names that call and the slot ("the card ending in ..."), which an ANSWER's template shares.
        text = " ".join(s for s in sentences(text) if not s.endswith("?"))
    said = _content_words(text)
    executed = set(frame.get("executed") or [])
    for ans in wf.answers:
        missing = [d for d in ans.precondition if d not in executed]
        words = _content_words(ans.template)
        if missing and len(words) >= 2 and len(words & said) / len(words) >= 0.6:
            return _verdict("reply_claim", p, f"this reply reads like {ans.name}, which needs "
                                              f"{', '.join(missing)} first (not done yet)", missing=missing)
    return _verdict("reply_claim", p)


def check_repeat(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    if p.get("kind") != "tool":
        return _verdict("api_repetition", p)
    args = p.get("args") or {}
    same = [c for c in frame.get("calls") or []
            if c.get("api") == p.get("name") and c.get("args") == args and c.get("status") != "cancelled"]
    api = wf.api(p.get("name", "")) if wf else None
    if api is not None and api.irreversible and (any(c.get("status", "ok") == "ok" for c in same)
                                                 or done_key(api.name, user_args(args, {s.name for s in wf.slots}))
                                                 in env.done_before):
        # (a correction after a booking that names what was booked, "Maison Verte, not Casa Fiorella", starts
        # the task afresh with the same details: it must not book a second table)
        return _verdict("api_repetition", p, f"{api.name} already succeeded with these arguments and cannot be "
                                             "undone; do not run it again", already_done=True)
    if len(same) >= env.max_api_repeats:
        return _verdict("api_repetition", p, f"{p.get('name')} was already called {len(same)} times with these "
                                             f"arguments (limit {env.max_api_repeats}); use its result")
    return _verdict("api_repetition", p)


def done_key(api: str, args: dict) -> tuple:
    """How ``CheckEnv.done_before`` names a call: the API and its arguments, in a hashable form."""
    return api, tuple(sorted((k, str(v)) for k, v in (args or {}).items()))


def check_declined(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    if p.get("kind") != "tool":
        return _verdict("user_declined", p)
    for c in frame.get("calls") or []:
        if (c.get("status") == "cancelled" and c.get("api") == p.get("name") and c.get("args") == (p.get("args") or {})
                and c.get("turn") == env.turn):
            return _verdict("user_declined", p, f"the user declined {p.get('name')} with these arguments")
        # the answer to its confirmation is this turn ("is there parking?"): with nothing changed, the call
        # waits for the user to agree to it again; with a value changed ("wait, we're 3 now") it is a new call,
        # and its own confirmation asks about the new details
        if c.get("status") == "cancelled" and c.get("reread") and c.get("api") == p.get("name") \
                and c.get("turn") == env.turn - 1 and c.get("args") == (p.get("args") or {}):
            return _verdict("user_declined", p, f"the user has just answered {p.get('name')}'s confirmation with "
                                                "more to say; ask before calling it again")
    return _verdict("user_declined", p)


def check_args(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    if p.get("kind") != "tool" or wf is None or wf.api(p.get("name", "")) is None:
        return _verdict("argument_schema", p)
    errors = schema_errors(wf.api(p["name"]), p.get("args") or {})
    return _verdict("argument_schema", p, "; ".join(m for _, m in errors), fields=[f for f, _ in errors if f])


def check_turns(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    turn = env.turn
    if turn > env.max_turns:
        return _verdict("session_length", p, f"the conversation is over {env.max_turns} turns (turn {turn})")
    return _verdict("session_length", p)


def check_turn_budget(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    if p.get("kind") != "tool":
        return _verdict("turn_budget", p)
    n = sum(1 for c in frame.get("calls") or [] if c.get("turn") == env.turn)
    if n >= MAX_TOOL_CALLS_PER_TURN:
        return _verdict("turn_budget", p, f"{n} tool calls in this turn already (limit {MAX_TOOL_CALLS_PER_TURN})")
    return _verdict("turn_budget", p)


def check_template(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv) -> Verdict:
    if p.get("kind") != "reply":
        return _verdict("answer_template", p)
    left = [a or b for a, b in TEMPLATE_VAR.findall(p.get("text") or "")]
    if left:
        return _verdict("answer_template", p, f"answer {p.get('name')} has unfilled "
                                              + ", ".join(f"${v}" for v in dict.fromkeys(left)))
    return _verdict("answer_template", p)


CHECKS: dict[str, Callable[..., Verdict]] = {
    "unknown_node": check_known, "session_length": check_turns, "node_dependency": check_dependency,
    "experience_prerequisite": check_experience, "procedure_branch": check_branch, "reply_claim": check_claim,
    "argument_schema": check_args,
    "api_repetition": check_repeat, "user_declined": check_declined, "turn_budget": check_turn_budget,
    "answer_template": check_template,
}


def run_checks(p: Proposal, wf: Workflow | None, frame: Frame, env: CheckEnv,
               disabled: frozenset[str] | set[str] = frozenset()) -> list[Verdict]:
    """Every enabled check's verdict (accepting ones included), in order."""
    return [check(p, wf, frame, env) for name, check in CHECKS.items() if name not in disabled]
