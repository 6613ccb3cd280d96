"""The ``executor`` node (PDL executor): fills slots from the user's latest message and proposes the
next action — a tool call or a reply — for the active workflow.

Policy: the LLM policy (``executor_llm``) when ``get_resources(ctx).model("executor")`` is set, else
the offline policy: the procedure interpreter (``pdl_runtime``) decides, replies come from ANSWER
templates filled with slots/results, questions name the missing slots' descriptions.  Handles
cancellation, side questions while a slot is pending (answer_out_of_workflow_questions, then
re-ask), going back after a changed slot, and proposals the post-controller already rejected.
"""

from __future__ import annotations

import copy
import json
import re
import string
import uuid
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from graph.context import Context
from graph.resources import get_resources
from workflows.pdl import Workflow

from .pdl_runtime import (INFO_MISSING_SLOT, LAST_MESSAGE_SLOT, YESNO_SLOT, Interpreter, NextAction, invalidate,
                          is_internal, public_values)
from .slot_filling import fill_slots

OOW = "answer_out_of_workflow_questions"
CANCEL = re.compile(r"\b(?:cancel(?: that| it| this)?|never ?mind|forget (?:it|about it)|stop (?:this|that|it)|"
                    r"i changed my mind)\b", re.I)
DONT_KNOW = re.compile(r"\b(?:don'?t|do not|didn'?t) (?:know|have|remember|recall)\b|\bforgot\b|\bno idea\b|"
                       r"\bnot sure\b|\bcan'?t remember\b", re.I)
MIN_CONF_NEW, MIN_CONF_CHANGE = 0.5, 0.7


def _text(m: BaseMessage) -> str:
    c = m.content
    return c if isinstance(c, str) else " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)


def latest_user_message(messages: list[BaseMessage]) -> str:
    for m in reversed(messages or []):
        if isinstance(m, HumanMessage) or getattr(m, "type", "") == "human":
            return _text(m)
    return ""


def render_value(v: Any) -> str:
    """Lists and records rendered for people: "A, B and C"."""
    if isinstance(v, dict):
        for key in ("name", "Name", "title", "id"):
            if key in v:
                return str(v[key])
        return ", ".join(f"{k}: {render_value(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        items = [render_value(x) for x in v]
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def humanize(name: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).replace("_", " ").strip().lower()


def fill_template(template: str, values: dict[str, Any]) -> str:
    return string.Template(template).safe_substitute(
        {k: render_value(v) for k, v in public_values(values).items()})


def question_for(wf: Workflow, slots: list[str]) -> str:
    parts = []
    for name in slots:
        s = wf.slot(name)
        desc = (s.description.split(",")[0].split("(")[0].strip() if s and s.description else humanize(name))
        parts.append(desc[0].lower() + desc[1:] if desc else humanize(name))
    if not parts:
        return "Could you tell me a bit more about what you need?"
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Could you tell me the {listed}?"


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


def last_items(progress: dict) -> list | None:
    for v in reversed(list((progress.get("results") or {}).values())):
        if isinstance(v, list) and v:
            return v
    return None


_INTERPRETERS: dict[tuple[str, str], Interpreter] = {}


def interpreter_for(wf: Workflow) -> Interpreter:
    """Parsed procedures are cached per workflow text (the executor runs several times a turn)."""
    key = (wf.name, wf.procedure)
    if key not in _INTERPRETERS:
        _INTERPRETERS[key] = Interpreter(wf)
    return _INTERPRETERS[key]


GREETING_ONLY = re.compile(r"^\W*(?:(?:hi|hello|hey|hiya|howdy|good (?:morning|afternoon|evening|day)|greetings)"
                           r"(?:\s+there)?[\s\W]*)+$", re.I)
GOODBYE = re.compile(r"\b(?:bye|goodbye|good bye|have a (?:good|nice|great) (?:day|night|one))\b", re.I)
CLOSING_USER = re.compile(r"\b(?:bye|goodbye|that'?s (?:all|it)|that is (?:all|it)|nothing else|no(?:pe)?,? thanks?|"
                          r"no thank you|thanks?|thank you|all set|i'?m good|i'?m done)\b", re.I)
_STOP = set("the a an and or to of for in on at is are be with you your me my i we our it this that what which "
            "can could would will please do does have has how when where there here about from by as not no yes".split())


def greeting_answers(wf: Workflow) -> set[str]:
    """Replies that only greet (by name, or a template that is just "Hello, how can I help?")."""
    out = set()
    for a in wf.answers:
        if re.search(r"(?:^|_)(?:hello|hi|greet|greeting|welcome)(?:_|$)", a.name, re.I):
            out.add(a.name)
    return out


def closing_answers(wf: Workflow) -> set[str]:
    return {a.name for a in wf.answers if re.search(r"goodbye|(?:^|_)bye(?:_|$)|anything_else|anything_more|help_more",
                                                     a.name)}


def closing_answer(wf: Workflow, message: str, executed: list[str]) -> str | None:
    """When the procedure is over: say goodbye if the user is closing, else offer more help."""
    names = [a.name for a in wf.answers]
    bye = [n for n in names if re.search(r"goodbye|(?:^|_)bye(?:_|$)", n)]
    more = [n for n in names if re.search(r"anything_else|anything_more|help_more", n)]
    closing = bool(CLOSING_USER.search(message or "")) or (executed and executed[-1] in more)
    pick = (bye if closing else more) or more or bye
    return pick[0] if pick else None


def rerun_last_api(wf: Workflow, interp: Interpreter, progress: dict, called_since_message: bool = False) -> dict | None:
    """The last API called again with the current slots (its fixed arguments kept) — a new request about
    the same thing after the flow ended ("and tomorrow?").  Guarded so a related message cannot loop: at
    most once per user message with the same arguments (not when that very call already followed it) and
    never an irreversible API (a second booking is never a "new request")."""
    calls = progress.get("call_args") or []
    api = wf.api(calls[-1].get("api") or "") if calls else None
    if api is None or api.irreversible:
        return None
    last = calls[-1]
    interp.next_action(progress)  # loads the current values
    args, _ = interp.call_args(last["api"])
    for k, v in (last.get("args") or {}).items():
        args.setdefault(k, v)
    if called_since_message and args == (last.get("args") or {}):
        return None  # this message was answered with exactly this call already
    return {"kind": "tool", "name": last["api"], "args": args, "call_id": _new_call_id()}


CONTINUE_OFFER = re.compile(r"\b(?:continue|go on|keep going|next (?:one|question|step)|another (?:one|round|question)|"
                            r"play again|one more)\b[^?]*\?", re.I)


def offered_to_continue(wf: Workflow, executed: list[str]) -> bool:
    """The last reply offered another round ("Would you like to continue playing?"): a yes runs the
    procedure's API again."""
    last = wf.answer(executed[-1]) if executed else None
    return bool(last and last.template and CONTINUE_OFFER.search(last.template))


def called_since_user(messages: list[BaseMessage]) -> bool:
    """A tool call was made after the user's latest message."""
    for m in reversed(messages or []):
        if isinstance(m, HumanMessage) or getattr(m, "type", "") == "human":
            return False
        if getattr(m, "tool_calls", None) or getattr(m, "type", "") == "tool":
            return True
    return False


def _content_words(text: str) -> set[str]:
    """Content words, with a 4-letter stem for longer ones so "rain" meets "raining"."""
    words = {w for w in re.findall(r"[a-z]+", text.lower().replace("_", " ")) if len(w) > 2 and w not in _STOP}
    return words | {w[:4] + "~" for w in words if len(w) >= 4}


_VOCAB: dict[tuple[str, str], set[str]] = {}


def workflow_vocabulary(wf: Workflow) -> set[str]:
    key = (wf.name, wf.procedure)
    if key not in _VOCAB:
        _VOCAB[key] = _vocabulary(wf)
    return _VOCAB[key]


def _vocabulary(wf: Workflow) -> set[str]:
    parts = [wf.name, wf.description, wf.detailed_description]
    parts += [f"{s.name} {s.description} {' '.join(s.enum or [])}" for s in wf.slots]
    parts += [f"{a.name} {a.template}" for a in wf.answers] + [f"{a.name} {a.description}" for a in wf.apis]
    words = _content_words(" ".join(re.sub(r"(?<=[a-z])(?=[A-Z])", " ", p or "") for p in parts))
    return words | {w[:-1] for w in words if w.endswith("s")}


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:12]}"


def pending_slots(interp: Interpreter, progress: dict) -> list[str]:
    """What the workflow is waiting for: the slots of the question the state machine stands on."""
    executed = progress.get("executed") or []
    pend = progress.get("pending")
    # only a question actually put to the user is pending (respond sets ``pending``; the last node is a reply)
    if not (pend or (executed and interp.workflow.api(executed[-1]) is None)):
        return []
    named = [x.strip() for x in str(pend or "").split(",") if x.strip()]
    if named and all(interp.workflow.slot(x) or x.startswith("__cond_") for x in named):
        return named
    act = interp.next_action(progress)
    if act.kind == "ask":
        return act.slots
    if act.kind == "ask_cond":
        return [act.cond_slot]
    return []


def update_progress(wf: Workflow, interp: Interpreter, progress: dict, message: str) -> dict:
    """Slot filling from the latest user message (idempotent: re-running on the same message changes nothing)."""
    slots = progress.setdefault("slots", {})
    pending = pending_slots(interp, progress)
    found = fill_slots(message, wf, pending=pending, last_items=last_items(progress))
    # what the latest reply says about yes/no and missing information (branch conditions read these)
    slots[YESNO_SLOT] = None if found.yesno is None else ("yes" if found.yesno else "no")
    slots[INFO_MISSING_SLOT] = bool(DONT_KNOW.search(message))
    slots[LAST_MESSAGE_SLOT] = message
    if found.yesno is not None:
        for p in pending:
            if p.startswith("__cond_"):
                slots[p] = slots[YESNO_SLOT]
    changed = {}
    for name, value in found.values.items():
        conf = found.confidence.get(name, 0)
        old = slots.get(name)
        if old is None or old == "":
            if conf >= MIN_CONF_NEW:
                slots[name] = value
                changed[name] = value  # new information: an API that ran without it is stale
        elif str(old).lower() != str(value).lower() and (conf >= MIN_CONF_CHANGE or name in pending):
            slots[name] = value
            changed[name] = value
    if changed:
        invalidate(wf, progress, changed)
    return {"found": found, "pending": pending, "changed": changed}


def offline_proposal(wf: Workflow, interp: Interpreter, progress: dict, rejected: list[dict],
                     skip: set[str] | frozenset = frozenset(), message: str = "") -> dict:
    values = interp.values(progress)
    act = interp.next_action(progress, skip)
    if act.kind == "done":
        closing = closing_answer(wf, message, progress.get("executed") or [])
        if closing:
            act = NextAction("answer", closing)
    candidates = [_proposal_for(wf, act, values)]
    if act.kind == "api":  # alternatives when the call was rejected: its unmet precondition, or ask
        api = wf.api(act.name)
        done = set(progress.get("executed") or [])
        for pre in (api.precondition if api else []):
            if pre not in done:
                if wf.api(pre):
                    args, missing = interp.call_args(pre)
                    candidates.append(_proposal_for(wf, NextAction("api", pre, args=args) if not missing else
                                                    NextAction("ask", "request_information", slots=missing), values))
                else:
                    candidates.append(_proposal_for(wf, NextAction("answer", pre), values))
        candidates.append({"kind": "reply", "name": "request_information",
                           "text": f"Before I {humanize(act.name)}, could you confirm the details: "
                                   + ", ".join(f"{humanize(k)} {render_value(v)}" for k, v in act.args.items()) + "?"})
    candidates.append({"kind": "reply", "name": OOW,
                       "text": "I'm sorry, I can't do that right now. Is there anything else I can help with?"})
    for c in candidates:
        if not any(_same(c, r) for r in rejected):
            return c
    return candidates[-1]


REJECTIONS_SLOT = "__rejections"  # [[proposal signature, progress fingerprint]] per violation of this turn


def progress_fingerprint(progress: dict) -> str:
    """What a rejection depended on: the nodes run, the user's slot values and the results."""
    slots = {k: v for k, v in (progress.get("slots") or {}).items() if not is_internal(k)}
    return json.dumps([progress.get("executed") or [], slots, sorted((progress.get("results") or {}).items(),
                       key=lambda kv: kv[0]), len(progress.get("call_args") or [])], sort_keys=True, default=str)


def live_rejections(progress: dict, violations: list | None) -> list[dict]:
    """The proposals rejected earlier in this turn whose reason still holds.  A violation is stamped with
    the progress it was judged against (the executor's progress does not move between its proposal and
    the verdict); once progress moves on (a precondition ran, a slot arrived) the same proposal may be
    valid and is proposed again."""
    violations = [v for v in (violations or []) if v.get("proposal")]
    slots = progress.setdefault("slots", {})
    stamps = list(slots.get(REJECTIONS_SLOT) or [])
    if len(stamps) > len(violations):  # a new turn reset the violations
        stamps = []
    now = progress_fingerprint(progress)
    for v in violations[len(stamps):]:
        stamps.append([_signature(v["proposal"]), now])
    slots[REJECTIONS_SLOT] = stamps
    return [v["proposal"] for v, (_, at) in zip(violations, stamps) if at == now]


def _signature(p: dict) -> str:
    args = {} if p.get("kind") == "reply" else (p.get("args") or {})
    return json.dumps([p.get("kind"), p.get("name"), args], sort_keys=True, default=str)


def _same(a: dict, b: dict | None) -> bool:
    if not b:
        return False
    return a.get("kind") == b.get("kind") and a.get("name") == b.get("name") and (
        a.get("kind") == "reply" or (a.get("args") or {}) == (b.get("args") or {}))


def _proposal_for(wf: Workflow, act: NextAction, values: dict) -> dict:
    if act.kind == "api":
        return {"kind": "tool", "name": act.name, "args": act.args, "call_id": _new_call_id()}
    if act.kind == "ask":
        return {"kind": "reply", "name": "request_information", "text": question_for(wf, act.slots),
                "args": {"slots": act.slots}}
    if act.kind == "ask_cond":
        return {"kind": "reply", "name": "request_information", "text": cond_question(act.condition),
                "args": {"slots": [act.cond_slot]}}
    if act.kind == "answer":
        ans = wf.answer(act.name)
        text = fill_template(ans.template, values) if ans and ans.template else ""
        if not text.strip():
            text = question_for(wf, act.slots) if act.slots else humanize(act.name).capitalize() + "."
        return {"kind": "reply", "name": act.name, "text": text}
    return {"kind": "reply", "name": OOW, "text": f"That completes {wf.display_name}. Is there anything else I can help with?"}


def decide(wf: Workflow, progress: dict, messages: list[BaseMessage], guidance: dict | None = None,
           violations: list | None = None, model: Any = None) -> tuple[dict, dict]:
    """(progress, proposal) for one executor step; pure apart from the model call."""
    progress = copy.deepcopy(progress or {})
    progress.setdefault("executed", [])
    interp = interpreter_for(wf)
    message = latest_user_message(messages)
    if message and CANCEL.search(message) and not re.search(r"cancel", wf.name + " " + wf.description, re.I) \
            or (message and re.search(r"\bnever ?mind\b|\bforget (?:it|about it)\b", message, re.I)):
        progress["done"], progress["pending"] = True, None
        return progress, {"kind": "reply", "name": OOW,
                          "text": f"Okay, I've stopped {wf.display_name}. Is there anything else I can help with?"}
    info = update_progress(wf, interp, progress, message) if message else {"found": None, "pending": [], "changed": {}}
    found = info["found"]
    rejected = live_rejections(progress, violations)
    related = bool(_content_words(message) & workflow_vocabulary(wf))
    if found is not None and info["pending"] and not found.values and found.is_question and found.yesno is None \
            and not related:
        # a side question while we wait for an answer: acknowledge, then ask again
        act = interp.next_action(progress)
        again = _proposal_for(wf, act, interp.values(progress))
        text = ("I'm afraid I can't help with that here — I'm helping you with " + wf.display_name + ". "
                + (again["text"] if again["kind"] == "reply" else ""))
        return progress, {"kind": "reply", "name": OOW, "text": text.strip()}
    if model is not None:
        from .executor_llm import propose

        act = interp.next_action(progress)
        suggestion = f"{act.kind} {act.name} {act.args or act.slots or act.condition}".strip()
        proposal = propose(model, wf, messages, progress, guidance or {}, violations or [], suggestion)
        if proposal is not None and not any(_same(proposal, r) for r in rejected):
            return progress, proposal
    skip = greeting_answers(wf) if message and not GREETING_ONLY.match(message) else frozenset()
    executed = progress.get("executed") or []
    # "No, that's all, thanks" right after "Anything else?": the conversation is over, whatever the
    # procedure would still do (its remaining nodes belong to a request the user just declined)
    closed = bool(found is not None and CLOSING_USER.search(message) and executed
                  and executed[-1] in closing_answers(wf) and not found.values and found.yesno is not True)
    if closed or message and GOODBYE.search(message) and interp.next_action(progress, skip).kind in ("answer", "done"):
        bye = closing_answer(wf, "bye", [])
        if bye and bye not in [r.get("name") for r in rejected]:
            progress["done"] = True
            return progress, _proposal_for(wf, NextAction("answer", bye), interp.values(progress))
    upcoming = interp.next_action(progress, skip)
    finished = upcoming.kind == "done" or (upcoming.kind == "answer" and upcoming.name in closing_answers(wf))
    go_on = found is not None and found.yesno is True and offered_to_continue(wf, executed)
    if message and finished and (go_on or not CLOSING_USER.search(message)
                                 and (related or (found is not None and found.values))):
        # a new request about the same thing after the flow ended
        again = rerun_last_api(wf, interp, progress, called_since_user(messages))
        if again is not None and not any(_same(again, r) for r in rejected):
            return progress, again
    proposal = offline_proposal(wf, interp, progress, rejected, skip, message)
    if interp.next_action(progress, skip).kind == "done":
        progress["done"] = True
    return progress, proposal


def executor(state: dict, runtime: Any = None) -> dict:
    context = getattr(runtime, "context", None) or Context()
    res = get_resources(context)
    name = state.get("active_workflow")
    wf = res.library.workflows.get(name) if name else None
    if wf is None:
        return {"proposal": {"kind": "reply", "name": OOW,
                             "text": "I'm not sure which task you need help with. Could you tell me what you'd like to do?"}}
    all_progress = dict(state.get("progress") or {})
    progress, proposal = decide(wf, all_progress.get(name) or {}, state.get("messages") or [], state.get("guidance"),
                                state.get("violations"), res.model("executor"))
    all_progress[name] = progress
    return {"progress": all_progress, "proposal": proposal}
