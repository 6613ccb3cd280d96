"""Reading the user's message into the active frame — shared by the ``apply_commands`` node and the
evaluations that replay dialogues, so both run the same code.

``read_turn`` emits and applies ``SetSlot`` / ``CorrectSlot`` (slot filling), records the user's
yes/no to a pending natural-language condition and the asked values the reply declines (``Frame.declined``),
and emits ``OutOfScope`` for a side question the workflow cannot answer while it waits for an answer.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Mapping

from workflows.pdl import Workflow
from workflows.semantics import is_condition_key
from workflows.text import FILLERS, content_words, stemmed

from .commands import ApplyEnv, Command, OutOfScope, SetSlot, apply_all
from .execution.interpreter import Interpreter, invalidate, message_words
from .frames import Frame, irreversible_made, top
from .understanding.navigation import is_instruction
from .understanding.slots import CARRIED_KINDS, slot_commands, slot_kind

# commands that only navigate (or say the message is no language): the message is not read as slot values.
# A resumed task does read it: "ok, now the transfer please. C-1001 pin 4821" goes back and answers.
NAVIGATION = frozenset({"cancel_flow", "human_handoff", "clarify", "not_understood", "capabilities"})


def make_env(turn: int, workflows: Mapping[str, Workflow], interpreters: Mapping[str, Interpreter],
             today: dt.date | None = None, embed=None) -> ApplyEnv:
    def finished(frame: Frame) -> bool:
        interp = interpreters.get(frame.get("workflow") or "")
        return interp is None or interp.next_action(frame).kind == "done"

    def stale(frame: Frame, changed: dict[str, Any]) -> list[str] | None:
        wf = workflows.get(frame.get("workflow") or "")
        return invalidate(wf, frame, changed) if wf is not None else None

    def settled(frame: Frame) -> bool:
        # finished, with an irreversible call made: its outcome is in the world, so a later value cannot
        # re-run it; changing it is a new request (another instance or workflow), never a second booking
        return finished(frame) and irreversible_made(frame, workflows.get(frame.get("workflow") or ""))

    def slots_of(name: str) -> frozenset[str]:
        wf = workflows.get(name)
        return frozenset(s.name for s in wf.slots) if wf is not None else frozenset()

    def takes(name: str, slot: str, value: Any) -> bool:
        s = workflows[name].slot(slot) if name in workflows else None
        return s is not None and (not s.enum or value in s.enum)

    def carries(name: str, slot: str) -> bool:
        s = workflows[name].slot(slot) if name in workflows else None
        return s is not None and slot_kind(s) in CARRIED_KINDS

    return ApplyEnv(turn=turn, has_workflow=lambda name: name in workflows, finished=finished, invalidate=stale,
                    slots_of=slots_of, settled=settled, takes=takes, today=today, embed=embed, carries=carries)


def open_frame(stack: list[Frame] | None, env: ApplyEnv) -> Frame | None:
    """The active frame the user's next words can still change: the top frame, unless it is settled
    (finished with an irreversible call made — then the next request is a new one)."""
    frame = top(stack)
    return None if frame is None or env.settled(frame) else frame


def read_turn(stack: list[Frame], wf: Workflow, interp: Interpreter, reading: dict, kinds: set[str],
              env: ApplyEnv) -> tuple[list[Frame], list[Command]]:
    """The stack after reading the message into its active frame, and the commands that did it."""
    frame = top(stack)
    text = reading.get("text") or ""
    if frame is None or not text or env.settled(frame):  # a settled instance takes no more values
        return stack, []
    asked = list(frame.get("asked") or [])
    # a turn that navigates or asks for something is not the free-text answer to the pending question,
    # even when nothing else took it
    instruction = is_instruction(text)
    added, found = slot_commands(text, wf, frame, asked, env.turn,
                                 skip_free_text="skip_question" in kinds or instruction, today=env.today,
                                 embed=env.embed)
    stack = apply_all(stack, added, env)
    frame = top(stack)
    if frame is not None and (again := same_as_before(text, wf, frame, stack, env)):
        stack, added = apply_all(stack, again, env), [*added, *again]
        frame = top(stack)
    conds = [a for a in asked if is_condition_key(a)]
    if conds and reading.get("yesno") is not None and frame is not None:
        frame = Frame(**{**frame, "conditions": {**(frame.get("conditions") or {}),
                                                 **{k: bool(reading["yesno"]) for k in conds}}})
        stack = [*stack[:-1], frame]
    declined = _declined(asked, reading, found.values, frame, wf)
    if declined and frame is not None:
        frame = Frame(**{**frame, "declined": sorted({*(frame.get("declined") or []), *declined})})
        stack = [*stack[:-1], frame]
    # (after the end, a question with something to it: "hello? are you still there?" is no request)
    done = frame is not None and (frame.get("status") == "done" or env.finished(frame)) \
        and len(content_words(text) - FILLERS) >= 2
    related = bool(message_words(text) & (interp.vocabulary if done else _asked_words(wf, asked, interp)))
    if (asked or done) and not found.values and found.is_question and found.yesno is None and not related:
        # a side question while the workflow waits for an answer, or after it finished ("is breakfast included?")
        added = [*added, OutOfScope(turn=env.turn)]
    return stack, added


# "same customer number and pin", "the same details as before", "same as last time"
SAME = re.compile(r"\b(?:the\s+)?same\s+(?P<what>(?:[a-z-]+\s*,?\s*(?:and\s+|&\s*)?){0,6})", re.I)
_SAME_STOP = frozenset("as before last time one ones again details info information please thanks".split())


def same_as_before(text: str, wf: Workflow, frame: Frame, stack: list[Frame], env: ApplyEnv) -> list[Command]:
    """Values the user says are the same as before ("same customer number and pin"): the frame's missing
    slots the phrase names (or all of them when it names none: "the same details"), each from the most
    recent other frame of the conversation that holds a value under that slot's name."""
    m = SAME.search(text or "")
    if m is None:
        return []
    said = stemmed(content_words(m.group("what"))) - _SAME_STOP
    slots = frame.get("slots") or {}
    missing = [s for s in wf.slots if slots.get(s.name) in (None, "")]
    named = [s for s in missing if said & _slot_words(s)]
    out: list[Command] = []
    for s in named or (missing if not said else []):
        value = next(((f.get("slots") or {}).get(s.name) for f in reversed(stack)
                      if f is not frame and (f.get("slots") or {}).get(s.name) not in (None, "")), None)
        if value is not None and env.takes(wf.name, s.name, value):
            out.append(SetSlot(slot=s.name, value=value, turn=env.turn))
    return out


def _declined(asked: list[str], reading: dict, values: dict, frame: Frame | None, wf: Workflow) -> list[str]:
    """The asked slots the reply declines: the user says they do not have or know it ("I don't have my
    account number, but my dog was Buddy"), or answers no and gives no value.  The interpreter does not ask
    them again (asked again and again, a user who has no account number hears the same question until they
    leave; logged agents go on without it)."""
    if frame is None or not (reading.get("info_missing") or reading.get("yesno") is False and not values):
        return []
    slots = frame.get("slots") or {}
    open_ = [a for a in asked if not is_condition_key(a) and slots.get(a) in (None, "")]
    # "I don't have my customer number" declines that one of the values asked together, not the PIN
    said = stemmed(content_words(reading.get("text") or ""))
    named = [a for a in open_ if (s := wf.slot(a)) is not None and said & _slot_words(s)]
    return named or open_


def _asked_words(wf: Workflow, asked: list[str], interp: Interpreter) -> set[str]:
    """The words a question about what the agent just asked would use: the asked slots' names, descriptions
    and options, less the words of the workflow's name ("Why the item is returned" is about the reason, and
    "do I have to pay for the return postage?" is not); every word of the workflow when something other
    than a slot was asked (a condition)."""
    slots = [wf.slot(n) for n in asked]
    if not all(slots):
        return interp.vocabulary
    topic = stemmed(content_words(wf.name))
    return set().union(*((_slot_words(s) - topic) | stemmed(content_words(f"{s.name} {' '.join(s.enum or [])}"))
                         for s in slots))


def _slot_words(slot) -> set[str]:
    """The words a message names a slot by: its name's and its description's, stemmed."""
    return stemmed(content_words(f"{slot.name} {slot.description}"))
