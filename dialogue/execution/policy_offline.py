"""The offline policy of the PDL executor: the procedure interpreter decides, replies come from ANSWER
templates filled with slots and results, questions name the missing slots.

It also handles what the interpreter alone does not: skipping a greeting when the user went straight
to business, closing ("no, that's all"), a new request about the same thing after the flow ended
("and tomorrow?"), and proposals the post-controller already rejected this turn (the next
alternative is proposed instead: the unmet precondition, a question, or an apology).
"""

from __future__ import annotations

import re
from langchain_core.messages import BaseMessage

from workflows.pdl import Workflow
from workflows.sanitize import user_args
from workflows.semantics import values_view
from workflows.text import humanize, message_text, render_value, role_of

from ..experience import broken, provider_of, unmet
from ..understanding.slots import referents
from .interpreter import Interpreter, NextAction, message_words
from .replies import OOW, cond_question, new_call_id, proposal_for

GREETING_ONLY = re.compile(r"^\W*(?:(?:hi|hello|hey|hiya|howdy|good (?:morning|afternoon|evening|day)|greetings)"
                           r"(?:\s+there)?[\s\W]*)+$", re.I)
GOODBYE = re.compile(r"\b(?:bye|goodbye|good bye|have a (?:good|nice|great) (?:day|night|one))\b", re.I)
CLOSING_USER = re.compile(r"\b(?:bye|goodbye|that'?s (?:all|it)|that is (?:all|it)|nothing else|no(?:pe)?,? thanks?|"
                          r"no thank you|thanks?|thank you|all set|i'?m good|i'?m done)\b", re.I)


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


def rerun_last_api(wf: Workflow, interp: Interpreter, frame: dict, called_since_message: bool = False) -> dict | None:
    """The last API called again with the current slots (its fixed arguments kept) — a new request about
    the same thing after the flow ended ("and tomorrow?").  Guarded so a related message cannot loop: at
    most once per user message with the same arguments (not when that very call already followed it) and
    never an irreversible API (a second booking is never a "new request")."""
    calls = frame.get("calls") or []
    api = wf.api(calls[-1].get("api") or "") if calls else None
    if api is None or api.irreversible:
        return None
    last = calls[-1]
    args, _ = interp.call_args(frame, last["api"])
    for k, v in (last.get("args") or {}).items():
        args.setdefault(k, v)
    if called_since_message and args == (last.get("args") or {}):
        return None  # this message was answered with exactly this call already
    return {"kind": "tool", "name": last["api"], "args": args, "call_id": new_call_id()}


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
        if role_of(m) == "user":
            return False
        if getattr(m, "tool_calls", None) or role_of(m) == "tool":
            return True
    return False


def same(a: dict, b: dict | None) -> bool:
    if not b:
        return False
    return a.get("kind") == b.get("kind") and a.get("name") == b.get("name") and (
        a.get("kind") == "reply" or (a.get("args") or {}) == (b.get("args") or {}))


def next_proposal(wf: Workflow, interp: Interpreter, frame: dict, reading: dict, rejected: list[dict],
                  skip: set[str] | frozenset = frozenset(), message: str = "", last_said: str = "") -> dict:
    """The interpreter's next step, or — when it was rejected this turn — the next alternative.
    ``last_said``: the agent's previous reply (a question the user just answered is not asked again)."""
    values = values_view(frame.get("slots"), frame.get("results"))
    act = interp.next_action(frame, reading, skip)
    if act.kind == "done":
        closing = closing_answer(wf, message, frame.get("executed") or [])
        if closing:
            act = NextAction("answer", closing)
    candidates = [with_branch_question(wf, interp, frame, act, proposal_for(wf, act, values), skip)]
    if act.kind == "api":  # alternatives when the call was rejected: its unmet precondition, or ask
        api = wf.api(act.name)
        done = set(frame.get("executed") or [])
        for pre in (api.precondition if api else []):
            if pre not in done:
                if wf.api(pre):
                    args, missing = interp.call_args(frame, pre)
                    candidates.append(proposal_for(wf, NextAction("api", pre, args=args) if not missing else
                                                   NextAction("ask", "request_information", slots=missing), values))
                else:
                    candidates.append(proposal_for(wf, NextAction("answer", pre), values))
        # a value the user has to give is missing (asked once already, not understood): ask for it
        # precisely rather than run the call without it
        lacking = [p for p in (api.required_params if api else []) if p not in act.args and wf.slot(p)]
        if lacking:
            candidates.append(proposal_for(wf, NextAction("ask", "request_information", slots=lacking), values))
        if act.args:  # nothing to confirm without arguments ("confirm the details: ?")
            details = ", ".join(f"{humanize(k)} {render_value(v)}" for k, v in
                                user_args(act.args, {s.name for s in wf.slots}).items())
            # the user said no to this very call ("hmm no, leave it"): it is not made, and it stays on offer
            refused = any(c.get("status") == "cancelled" and not c.get("reread") and c.get("api") == act.name
                          and c.get("args") == act.args for c in frame.get("calls") or [])
            candidates.append({"kind": "reply", "name": "request_information",
                               "text": f"Okay, I will not {humanize(act.name)} ({details}). Tell me what to change, "
                                       "or say yes if you want me to go ahead after all." if refused else
                                       f"Before I {humanize(act.name)}, could you confirm the details: {details}?"})
    candidates.append({"kind": "reply", "name": OOW,
                       "text": "I'm sorry, I can't do that right now. Is there anything else I can help with?"})
    # a question for values is not answered by a yes ("ok" to "the name, please?"): it stands
    wants_values = act.kind == "ask" and bool(act.slots)
    for c in candidates:
        # a confirmation is answered once: asked again right after a yes, it would loop
        answered = c.get("text") == last_said and reading.get("yesno") is True and c.get("name") != OOW \
            and not (wants_values and c is candidates[0])
        if not answered and not any(same(c, r) for r in rejected):
            return c
    return candidates[-1]


def with_branch_question(wf: Workflow, interp: Interpreter, frame: dict, act: NextAction, proposal: dict,
                         skip: set[str] | frozenset = frozenset()) -> dict:
    """An ANSWER a flowchart branch follows ("Ask if the user wants to pay now" -> "Pay now" / "Later")
    asks that branch's question in the same reply, and the user's yes/no decides it.  Said alone, the
    node's text leaves the user nothing to answer, and the answer given to it would be asked for again.
    Only compiled flowchart branches ("<node> -> <outcome>"): a PDL author's own conditions keep their
    turn."""
    if act.kind != "answer" or proposal.get("kind") != "reply":
        return proposal
    after = interp.next_action({**frame, "executed": [*(frame.get("executed") or []), act.name]}, {}, skip)
    if after.kind != "ask_cond" or " -> " not in after.condition:
        return proposal
    node, outcome = after.condition.rsplit(" -> ", 1)
    text = proposal.get("text") or ""
    # the branch hangs off this very node: its outcome is the question ("…: is it Pay now?")
    same_node = re.sub(r"\W+", " ", node).strip().casefold() in re.sub(r"\W+", " ", text).casefold()
    if node.rstrip().endswith("?") and text.rstrip().endswith("?"):
        question = ""  # the reply is that node's own question ("Should I book that for you?")
    else:
        question = f"Is it {outcome.replace('_', ' ')}? (yes/no)" if same_node else cond_question(after.condition)
    text = text.rstrip()
    text += "" if not text or not question or text.endswith((".", "?", "!", ":")) else "."
    return {**proposal, "text": f"{text} {question}".strip(), "args": {**(proposal.get("args") or {}),
                                                                               "slots": [after.cond_key]}}


def recheck_failed(wf: Workflow, frame: dict, proposal: dict) -> dict | None:
    """A call that already failed with exactly these arguments is not retried blindly: when the user
    gave some of them, they are asked for again (the answer corrects them); else None."""
    if proposal.get("kind") != "tool":
        return None
    args = proposal.get("args") or {}
    if not any(c.get("status") == "error" and c.get("api") == proposal.get("name") and c.get("args") == args
               for c in frame.get("calls") or []):
        return None
    given = [k for k in args if wf.slot(k) is not None and k in (frame.get("slots") or {})]
    if not given:
        return None
    ask = proposal_for(wf, NextAction("ask", "request_information", slots=given), {})
    return {**ask, "text": f"I couldn't {humanize(proposal['name'])} with those details. {ask['text']}"}


def last_reply(messages: list[BaseMessage]) -> str:
    """The agent's reply before the user's latest message."""
    seen_user = False
    for m in reversed(messages or []):
        if role_of(m) == "user":
            seen_user = True
        elif seen_user and role_of(m) == "agent" and not getattr(m, "tool_calls", None):
            return message_text(m)
    return ""


def prerequisite_first(wf: Workflow, interp: Interpreter, frame: dict, upcoming: NextAction,
                       prerequisites: tuple | list, rejected: list[dict], given: list[str] | tuple = ()) -> dict | None:
    """Verified experience (``dialogue.experience``): when the next step is an API whose learned
    prerequisite has not run, or a question (or a condition) on a value such a prerequisite's result gives, the
    prerequisite API comes first (or the question for its own missing arguments); when the next API's values
    break a learned argument rule, the user is asked for them again; else None."""
    if not prerequisites:
        return None
    bad = broken(prerequisites, frame, upcoming.name, upcoming.args, given) if upcoming.kind == "api" else []
    if bad:  # a value the call would reuse or get wrong: the user gives it again
        ask = proposal_for(wf, NextAction("ask", "request_information", slots=[b["requires"] for b in bad]),
                           values_view(frame.get("slots"), frame.get("results")))
        return None if any(same(ask, r) for r in rejected) else ask
    if upcoming.kind == "api":
        pending = unmet(prerequisites, frame, upcoming.name)
        first = pending[0] if pending else None
    elif upcoming.kind in ("ask", "answer") and upcoming.slots:
        first = provider_of(prerequisites, frame, upcoming.slots)
    elif upcoming.kind == "ask_cond":  # a condition on a value the prerequisite's result holds
        first = provider_of(prerequisites, frame, re.findall(r"[A-Za-z_]\w*", upcoming.condition))
    else:
        first = None
    if first is None or wf.api(first["requires"]) is None:
        return None
    args, missing = interp.call_args(frame, first["requires"])
    missing = missing or [b["requires"] for b in broken(prerequisites, frame, first["requires"], args, given)]
    act = NextAction("api", first["requires"], args=args) if not missing else \
        NextAction("ask", "request_information", slots=missing)
    proposal = proposal_for(wf, act, values_view(frame.get("slots"), frame.get("results")))
    return None if any(same(proposal, r) for r in rejected) else proposal


def lookup_first(wf: Workflow, interp: Interpreter, frame: dict, upcoming: NextAction, rejected: list[dict]) -> dict | None:
    """A question for a value the workflow can look up the choices or the current value of ("which item of
    the order", "the new day" of a booking) comes after that lookup: a reversible API not yet run, whose
    arguments are all given, that returns a referent of an asked slot (``understanding.slots.referents``).
    The user's answer can then point into what it returned ("the first one", "same day")."""
    if upcoming.kind not in ("ask", "answer") or not upcoming.slots:
        return None
    done = set(frame.get("executed") or [])
    for api in wf.apis:
        if api.irreversible or api.name in done or not any(set(referents(s)) & set(api.returns)
                                                           for s in upcoming.slots):
            continue
        args, missing = interp.call_args(frame, api.name)
        if missing or any(p not in args for p in api.required_params):
            continue
        proposal = proposal_for(wf, NextAction("api", api.name, args=args),
                                values_view(frame.get("slots"), frame.get("results")))
        if not any(same(proposal, r) for r in rejected):
            return proposal
    return None


def decide(wf: Workflow, interp: Interpreter, frame: dict, reading: dict, messages: list[BaseMessage],
           rejected: list[dict], prerequisites: tuple | list = ()) -> dict:
    """The next proposal for the active frame (pure: the frame is not changed); ``prerequisites``: the
    verified experience the PDL lacks (``prerequisite_first``)."""
    message = reading.get("text") or ""
    yesno = reading.get("yesno")
    has_values = bool(reading.get("slots_given"))
    related = bool(message_words(message) & interp.vocabulary)
    skip = greeting_answers(wf) if message and not GREETING_ONLY.match(message) else frozenset()
    executed = frame.get("executed") or []
    # "No, that's all, thanks" right after "Anything else?": the conversation is over, whatever the
    # procedure would still do (its remaining nodes belong to a request the user just declined)
    closed = bool(message and CLOSING_USER.search(message) and executed and executed[-1] in closing_answers(wf)
                  and not has_values and yesno is not True)
    upcoming = interp.next_action(frame, reading, skip)
    if closed or message and GOODBYE.search(message) and upcoming.kind in ("answer", "done"):
        bye = closing_answer(wf, "bye", [])
        if bye and bye not in [r.get("name") for r in rejected]:
            return {**proposal_for(wf, NextAction("answer", bye), values_view(frame.get("slots"), frame.get("results"))), "completes": True}
    finished = upcoming.kind == "done" or (upcoming.kind == "answer" and upcoming.name in closing_answers(wf))
    go_on = yesno is True and offered_to_continue(wf, executed)
    if message and finished and (go_on or not CLOSING_USER.search(message) and (related or has_values)):
        # a new request about the same thing after the flow ended
        again = rerun_last_api(wf, interp, frame, called_since_user(messages))
        if again is not None and not any(same(again, r) for r in rejected):
            return again
    proposal = prerequisite_first(wf, interp, frame, upcoming, prerequisites, rejected, reading.get("given") or ()) \
        or lookup_first(wf, interp, frame, upcoming, rejected) or next_proposal(wf, interp, frame, reading, rejected, skip, message, last_reply(messages))
    recheck = recheck_failed(wf, frame, proposal)
    if recheck is not None and not any(same(recheck, r) for r in rejected):
        return recheck
    if upcoming.kind == "done":
        proposal = {**proposal, "completes": True}
    return proposal
