"""The ``executor`` node (PDL executor): proposes the next action — a tool call or a reply — for the
active frame.

The turn's repair commands are answered by their pattern (``workflows/patterns``, ordinary PDL
flows): cancelling, handing over, small talk or closing with no workflow; going back to a workflow
and a side question while one waits are answered by the pattern *followed by* the workflow's next
question.  Otherwise the policy decides: the LLM policy (``dialogue.execution.policy_llm``) when an
executor model is configured, the offline interpreter policy as its fallback and the default.
Proposals the post-controller rejected this turn, against the same frame, are not proposed again.
"""

from __future__ import annotations

import re
from typing import Any

from langgraph.runtime import Runtime

from dialogue.execution import policy_llm
from dialogue.execution.policy_learned import load_policy
from dialogue.execution.interpreter import NextAction
from dialogue.execution.policy_offline import GOODBYE, closing_answer, decide, next_proposal, same
from dialogue.execution.replies import answer_text, proposal_for, slot_phrase, with_options
from dialogue.frames import declined_required, fingerprint, top
from graph.context import Context
from graph.resources import Resources, get_resources, model_for
from graph.state import State, given_slots, turn_commands
from workflows.semantics import values_view
from workflows.sanitize import user_args
from workflows.text import humanize, lower_first, render_value, sentences


def pattern_reply(res: Resources, name: str, flow: str = "", **values: str) -> dict[str, Any]:
    """A repair pattern's answer (its template filled with the workflow it speaks about, and ``values``);
    ``name`` is the pattern's, or one of its answers'."""
    wf = res.patterns.workflows.get(name) or next(w for w in res.patterns.workflows.values() if w.answer(name))
    return {"kind": "reply", "name": name, "text": answer_text(wf, name, {"flow": flow, **values})}


def coverage(library, examples: int = 4) -> str:
    """What the library covers, for people: its domains and one task of each of the first few
    ("banking, dining, retail and travel — for example: check an account balance, book a table, ...")."""
    by_domain: dict[str, list] = {}
    for w in sorted(library.workflows.values(), key=lambda w: w.name):
        by_domain.setdefault(w.domain, []).append(w)
    domains = render_value([humanize(d) for d in by_domain])
    tasks = [lower_first(ws[0].display_name) for ws in list(by_domain.values())[:examples]]
    return f"{domains} — for example: {render_value(tasks)}" if tasks else "nothing yet: no workflow is loaded"


INTERRUPTED = {"done": "pattern_interrupted_done", "failed": "pattern_interrupted_failed",
               "unknown": "pattern_interrupted_unknown"}


def interrupted_turn_notes(res: Resources, state: State, reply: str) -> str:
    """The ``pattern_interrupted_turn`` reports of the calls ``recover`` settled this turn ("" if none).
    When the reply itself states what the call returned (the workflow's own answer), only a lead-in:
    the user is told once."""
    turn = int(state.get("turn") or 0)
    pattern = res.patterns.workflows["pattern_interrupted_turn"]
    notes = []
    for n in state.get("recovered") or []:
        if int(n.get("turn") or 0) != turn:
            continue
        wf = res.workflow(n.get("workflow"))
        flow = lower_first(wf.display_name) if wf is not None else str(n.get("api", "")).replace("_", " ")
        data = n.get("data") or {}
        outcome = n.get("outcome", "unknown")
        answer = INTERRUPTED[outcome]
        if outcome == "done" and any(len(str(v)) >= 3 and str(v) in reply for v in data.values()):
            answer = "pattern_interrupted_lead"
        details = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in data.items()) if outcome == "done" \
            else str(n.get("error") or "")
        notes.append(answer_text(pattern, answer, {"flow": flow, "details": details}))
    return " ".join(notes)


def queued_note(res: Resources, state: State) -> str:
    """``pattern_queued_flow`` when this turn queued a second request ("" otherwise)."""
    queued = [c for c in turn_commands(state) if c.get("command") == "start_flow" and c.get("queued")]
    wf = res.workflow(queued[-1].get("workflow")) if queued else None
    return pattern_reply(res, "pattern_queued_flow", lower_first(wf.display_name))["text"] if wf is not None else ""


def executor(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """The proposal; a reply in a turn that follows a crash opens with the interrupted turn's report, one
    in a turn that queued a second request says so."""
    update = _propose(state, runtime)
    proposal = update.get("proposal") or {}
    if proposal.get("kind") == "reply":
        res = get_resources(runtime.context)
        text = proposal.get("text") or ""
        notes = " ".join(n for n in (interrupted_turn_notes(res, state, text), queued_note(res, state)) if n)
        if notes:
            update = {"proposal": {**proposal, "text": f"{notes} {text}".strip()}}
    return update


def _propose(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    res = get_resources(ctx)
    turn = int(state.get("turn") or 0)
    commands = turn_commands(state)
    kinds = {c.get("command") for c in commands}
    frame = top(state.get("stack"))
    wf = res.library.workflows.get(frame["workflow"]) if frame else None
    if "human_handoff" in kinds:
        return {"proposal": pattern_reply(res, "pattern_human_handoff")}
    if "capabilities" in kinds and (wf is None or frame is None):
        return {"proposal": pattern_reply(res, "pattern_capabilities", coverage(res.library))}
    cancelled = [c["workflow"] for c in commands if c.get("command") == "cancel_flow"]
    if cancelled and (wf is None or wf.name != cancelled[-1]):
        gone = res.library.workflows.get(cancelled[-1])
        stopped = pattern_reply(res, "pattern_cancel_flow",
                                lower_first(gone.display_name) if gone else humanize(cancelled[-1]))
        if wf is None or "start_flow" not in kinds:
            return {"proposal": stopped}
        # given up for a new request in the same turn: say what stopped, then go on with the new task
        rest = [c for c in state.get("commands") or [] if not (c.get("command") == "cancel_flow" and c.get("turn") == turn)]
        update = _propose({**state, "commands": rest}, runtime)
        proposal = update.get("proposal") or {}
        if proposal.get("kind") == "reply":
            said = sentences(stopped["text"])[0]  # "Okay, I've stopped …." without its "anything else?"
            update = {**update, "proposal": {**proposal, "text": f"{said} {proposal['text']}"}}
        return update
    if "not_understood" in kinds and (wf is None or frame is None or frame.get("status") == "done"):
        return {"proposal": pattern_reply(res, "pattern_not_understood")}
    if "out_of_scope" in kinds and frame is not None and wf is not None and (
            frame.get("status") == "done" or res.interpreters[wf.name].next_action(frame).kind == "done"):
        # a question after the task finished that none of it answers: say so, and what the desk covers
        return {"proposal": pattern_reply(res, "pattern_cannot_handle", coverage(res.library))}
    if wf is None or frame is None:
        if "out_of_scope" in kinds:  # the scope gate turned the request away: say what the desk covers
            return {"proposal": pattern_reply(res, "pattern_cannot_handle", coverage(res.library))}
        return {"proposal": pattern_reply(res, "pattern_close" if "close" in kinds else "pattern_chitchat")}
    interp = res.interpreters[wf.name]
    reading = {**(state.get("reading") or {}), "slots_given": bool(kinds & {"set_slot", "correct_slot"}),
               "given": given_slots(commands)}
    violations = [v for v in state.get("violations") or [] if v.get("turn") == turn]
    now = fingerprint(frame)
    rejected = [v["proposal"] for v in violations if v.get("at") == now and v.get("proposal")]
    done = next((v["proposal"] for v in violations if v.get("already_done") and v.get("at") == now), None)
    if done is not None:  # the same irreversible call again (a correction that names what was already booked)
        details = ", ".join(f"{humanize(k)} {render_value(v)}" for k, v in
                            user_args(done.get("args") or {}, {s.name for s in wf.slots}).items())
        return {"proposal": {**pattern_reply(res, "pattern_already_done", humanize(done.get("name") or ""),
                                             details=details), "completes": True}}
    if "close" in kinds and frame.get("status") != "done":
        # The user ends the task ("no, that's all", "maybe another time" to the next step offered): the
        # workflow's own closing answer when it has one, else the desk's (a goodbye to a farewell, "anything
        # else?" otherwise), and the frame completes — nothing is left waiting, the question is not asked again.
        message = reading.get("text") or ""
        own = closing_answer(wf, message, frame.get("executed") or [])
        ending = proposal_for(wf, NextAction("answer", own), values_view(frame.get("slots"), frame.get("results"))) \
            if own else pattern_reply(res, "pattern_close" if GOODBYE.search(message) else "pattern_close_task")
        if not any(same(ending, r) for r in rejected):
            return {"proposal": {**ending, "completes": True}}
    waiting = declined_required(frame, wf)
    if waiting:
        # named as the questions name them, as the user's own ("the customer number" -> "your customer number")
        yours = [re.sub(r"^the ", "your ", slot_phrase(wf, p)) for p in waiting]
        stuck = pattern_reply(res, "pattern_cannot_continue" + ("_many" if len(waiting) > 1 else ""),
                              lower_first(wf.display_name), values=render_value(yours))
        if not any(same(stuck, r) for r in rejected):
            return {"proposal": stuck}
    # repair patterns that continue with the workflow's next question (the message is no slot value)
    for kind, name, flow in (("capabilities", "pattern_capabilities", lambda: coverage(res.library)),
                             ("resume_flow", "pattern_resume_flow", lambda: lower_first(wf.display_name)),
                             ("out_of_scope", "pattern_out_of_scope", lambda: lower_first(wf.display_name)),
                             ("not_understood", "pattern_not_understood_continue", lambda: wf.display_name)):
        if kind in kinds:  # ``flow`` is worked out only for the pattern that answers (coverage reads the library)
            again = next_proposal(wf, interp, frame, {}, rejected)
            lead = pattern_reply(res, name, flow())
            if again.get("kind") == "reply":
                return {"proposal": {**again, "text": f"{lead['text']} {again['text']}".strip()}}
            if kind in ("out_of_scope", "not_understood"):
                return {"proposal": lead}
    model = model_for(ctx, "executor")
    messages = state.get("messages") or []
    if model is not None:
        act = interp.next_action(frame, reading)
        suggestion = f"{act.kind} {act.name} {act.args or act.slots or act.condition}".strip()
        guidance = {"hints": state.get("hints") or [], "experience": state.get("experience") or ""}
        proposal = policy_llm.propose(model, wf, messages, frame, guidance, violations, suggestion)
        if proposal is not None and not any(same(proposal, r) for r in rejected):
            return {"proposal": proposal}
    prerequisites = tuple(state.get("prerequisites") or ()) if ctx.experience else ()
    proposal = decide(wf, interp, frame, reading, messages, rejected, prerequisites)
    # --- learned-policy hook (dialogue/execution/policy_learned.py; Context.executor_policy): a trained
    # ranker re-orders the actions the workflow allows now, the interpreter's proposal among them; this
    # turn's rejections stay out and the post-controller still checks the result.  Default
    # (auto): the bundled model when its file is present, else the interpreter alone.
    policy = load_policy(ctx.executor_policy)
    if policy is not None:
        proposal = policy.choose(wf, interp, frame, reading, messages, proposal, rejected, prerequisites)
    # --- end of the learned-policy hook
    asked = [n for n in (proposal.get("args") or {}).get("slots") or [] if n in (frame.get("asked") or [])]
    if proposal.get("kind") == "reply" and asked and reading.get("text") and not reading["given"]:
        # the same question again after an answer that gave nothing: say what it can take
        proposal = {**proposal, "text": with_options(wf, proposal.get("text") or "", asked)}
    return {"proposal": proposal}
