"""Reading a turn as conversation navigation: going back to an interrupted workflow, cancelling the
active one, not knowing the answer, asking for a person — and turning the detector's verdict into the
turn's commands (``turn_commands``).  Generic English markers only."""

from __future__ import annotations

import re
from typing import Any

from workflows.text import FILLERS, UNSURE, content_words, yes_no

from ..commands import (AskCapabilities, CancelFlow, ChitChat, Close, Command, HumanHandoff, ResumeFlow,
                        SkipQuestion, StartFlow)
from .policy_offline import Verdict

BACK = re.compile(r"\b(?:back to|go back|get back|return to|resume|continue (?:with|the|my)|carry on|"
                  r"pick up where|where (?:we (?:were|left)|were we)|finish(?:ing)? (?:\w+ing )?(?:the|my|up|it|that)|"
                  r"now (?:the|my)\b)", re.I)
GO_BACK = re.compile(r"\b(?:back to|go back|get back|return to)\b", re.I)
CANCEL = re.compile(r"\b(?:cancel(?: that| it| this)?|never ?mind|forget (?:it|about it)|(?:stop|scratch|scrap) (?:this|that|it)|"
                    r"i changed my mind|start (?:over|again|afresh)|(?:don'?t|do not) want to (?:do|continue|"
                    r"go on with|go ahead with) (?:this|that|it)|(?:don'?t|do not) (?:want|need) to (?:\w+ ){1,3}any ?more)\b"
                    r"|^\W*stop\b(?!\s+(?:at|by|in|on|near|over)\b)", re.I)
ABANDON = re.compile(r"\bnever ?mind\b|\bforget (?:it|about it)\b", re.I)
_PERSON = r"(?:(?:real|actual|live|human|proper)\s+)?(?:human|person|being|agent|representative|operator|colleague|manager)"
HUMAN = re.compile(r"\b(?:(?:talk|speak|chat) (?:to|with)|connect me (?:to|with)|transfer me to|"
                   r"put me (?:through|over) to|pass me (?:on |over )?to|get me|"
                   r"i (?:want|need|would like|'d like)(?: to (?:talk|speak) to)?) (?:a |an |the |your )?"
                   rf"{_PERSON}\b|\b(?:talk|speak) (?:to|with) (?:someone|somebody)\b"
                   rf"|^\W*(?:(?:an?|the|a real)\s+)?{_PERSON}(?:\s+please)?\W*$", re.I)
# "What can you help me with?", "what kind of things can you do?", "how can you help?", "/help"
CAPABILITIES = re.compile(r"\bwhat (?:else )?(?:can|could|do) you (?:do|help(?: me)?(?: with)?|offer)\b|"
                          r"\bwhat (?:kind of |sort of )?(?:things|tasks|services|help) (?:can|do|could) you\b|"
                          r"\bhow (?:can|could) you help(?: me)?\s*[?.!]*$|^\W*/?help\W*$", re.I)
# Navigation words say *that* the user goes back, not *where*: they never count as naming a workflow.
_NAVIGATION = frozenset({"back", "get", "let", "now", "finish", "finishing"})


def is_instruction(text: str) -> bool:
    """The turn navigates or asks for something ("back to my booking", "can you check my balance"): it is
    not the plain answer to the pending question, even when it starts with one."""
    from .features import IMPERATIVE, REQUEST

    return bool(BACK.search(text) or REQUEST.search(text) or IMPERATIVE.search(text))


def _stems(text: str) -> set[str]:
    return {w[:4] for w in content_words(text.replace("_", " ")) if w not in FILLERS and w not in _NAVIGATION}


def pick_resume(text: str, stacked: list[str], describe: dict[str, str], searching: bool = False) -> str | None:
    """The interrupted workflow the user refers to ("back to the booking"; a bare "let's go back" takes
    the most recent one); None when the turn does not ask to go back.  ``searching``: the detector reads a
    new request in the turn ("can we go back and book that car?" may be another task than the one waiting)."""
    if not stacked or not BACK.search(text):
        return None
    said = _stems(text)
    best, shared = _most_named(said, stacked, describe)
    if shared > 0:
        return best
    # nothing named: the one task waiting when the turn says it goes back ("ok back to the dinner - put it
    # under Lucia Romero": the words name it their own way; "continue with booking" may go on with this one),
    # or, with several, the most recent when the turn says nothing else
    if len(stacked) == 1 and not searching and GO_BACK.search(text):
        return stacked[-1]
    return stacked[-1] if not (said - _stems("continue resume return pick carry where left were up")) else None


def after_going_back(text: str) -> str:
    """What a turn that goes back says after the way back ("right, back to the address change: it's 2 Mill
    Lane" -> "it's 2 Mill Lane"): the resumed task's answer, read without the navigation words (which would
    make it an instruction, not an answer).  The whole turn when nothing follows the way back."""
    m = BACK.search(text)
    rest = re.split(r"[:;,.!?]|\s[-–]\s", text[m.end():], maxsplit=1) if m else []
    return rest[1].strip() if len(rest) > 1 and rest[1].strip() else text


def names_interrupted(text: str, stacked: list[str], describe: dict[str, str], active_about: str) -> str | None:
    """With the active task done and no new request read, a turn that names an interrupted task ("as I was
    saying, the table", "so, the restaurant?") goes back to it: the interrupted workflow whose name and
    description share the most words with the turn, when it shares more than the finished one."""
    said = _stems(text)
    if not stacked or not said:
        return None
    best, shared = _most_named(said, stacked, describe)
    return best if shared > len(said & _stems(active_about)) else None


def _most_named(said: set[str], stacked: list[str], describe: dict[str, str]) -> tuple[str, int]:
    """(the interrupted workflow whose name and description share the most of the turn's words, how many);
    ties: the most recent."""
    scores = {name: len(said & _stems(name + " " + describe.get(name, ""))) for name in stacked}
    best = max(reversed(stacked), key=lambda n: scores[n])
    return best, scores[best]


def reading_of(text: str) -> dict[str, Any]:
    """What the turn says regardless of any workflow: yes/no, "I don't know"."""
    return {"text": text, "yesno": yes_no(text), "info_missing": bool(UNSURE.search(text))}


def turn_commands(verdict: Verdict, text: str, turn: int, *, active: str | None, active_about: str,
                  asked: list[str], stacked: list[str], describe: dict[str, str],
                  finished: bool = False, idle: bool = False) -> list[Command]:
    """The turn's commands from the detector's verdict and the navigation markers.

    ``active_about``: the active workflow's name and description (a workflow that is itself about
    cancelling reads "cancel" as its task, not as cancelling it); ``finished``: the active workflow's
    procedure has run to its end (there is nothing left to stop); ``idle``: no task at all in this
    conversation yet (nothing done that "cancel it" could point at)."""
    if HUMAN.search(text):
        return [HumanHandoff(turn=turn)]
    if CAPABILITIES.search(text):
        return [AskCapabilities(turn=turn)]
    target = pick_resume(text, stacked, describe, verdict.action == "SEARCH")
    if target is None and finished and verdict.action != "SEARCH":
        target = names_interrupted(text, stacked, describe, active_about)
    if target is not None:
        return [ResumeFlow(workflow=target, turn=turn)]
    # Giving up ("never mind", "forget it", "let's stop here, I changed my mind") wins
    # over a search the words of the active task would start again; "cancel X" may be a new task, so it
    # only cancels when no search was read (below)
    if active and verdict.action == "SEARCH" and _gives_up(text, active_about, finished):
        # "never mind the restaurant, I need a hotel in porto instead": the request after giving up starts
        instead = _request_after(text)
        return [CancelFlow(workflow=active, turn=turn)] + ([StartFlow(
            query=instead, confidence=round(verdict.confidence, 3), turn=turn, source=verdict.policy)] if instead else [])
    if active and verdict.action == "SEARCH" and BACK.search(text) and _names_active(text, active_about):
        return []  # "ok, back to the hotel" while booking it: the pending question stands
    if idle and verdict.action == "SEARCH" and CANCEL.search(text) and not _stems(rest := CANCEL.sub(" ", text)) \
            and not re.search(r"\d", rest):  # ("cancel B-1003" names what to cancel)
        return [ChitChat(turn=turn)]  # a bare "cancel" with nothing under way: ask what the user means
    if verdict.action == "SEARCH":
        return [StartFlow(query=verdict.search_query, confidence=round(verdict.confidence, 3), turn=turn,
                          source=verdict.policy)]
    out: list[Command] = []
    said, abandons = CANCEL.search(text), bool(ABANDON.search(text))
    if active and (abandons or said and (not re.search(r"cancel", active_about, re.I)
                                         or _gives_up(text, active_about, finished))):
        if finished and not abandons and said and said.group(0).lower().startswith("cancel"):
            # "can I cancel it?" once the task is done: cancelling what it did (the order), a new task
            return [StartFlow(query=verdict.self_query or text, confidence=round(verdict.confidence, 3), turn=turn,
                              source=verdict.policy)]
        return [CancelFlow(workflow=active, turn=turn)]
    if verdict.out_of_scope:
        out.append(Close(turn=turn) if _closing(verdict) else ChitChat(turn=turn))
    if asked and UNSURE.search(text):
        out.append(SkipQuestion(asked=list(asked), turn=turn))
    return out


def _request_after(text: str) -> str:
    """The request a turn makes after giving up the active task ("forget it, I need a hotel instead" ->
    "I need a hotel instead"): the clauses after the give-up marker's, when they ask for something other
    than stopping."""
    from .features import IMPERATIVE, REQUEST

    m = CANCEL.search(text)
    rest = re.split(r"[,;.!]|\s+-\s+", text[m.end():], maxsplit=1) if m else []
    rest_text = rest[1].strip() if len(rest) > 1 else ""
    if not rest_text or CANCEL.search(rest_text):  # "forget it, please cancel this": still giving up
        return ""
    return rest_text if REQUEST.search(rest_text) or IMPERATIVE.search(rest_text) else ""


def _names_active(text: str, active_about: str) -> bool:
    """A "back to ..." turn that names nothing but the active task (or nothing at all)."""
    said = _stems(text)
    return not said or bool(said & _stems(active_about))


def _gives_up(text: str, active_about: str, finished: bool = False) -> bool:
    """The turn abandons the active task: "never mind" / "forget it", or a cancel marker that is not the
    word "cancel" itself (in a workflow that is not itself about cancelling); "cancel that" only while
    the task is under way."""
    if ABANDON.search(text):
        return True
    # any marker but the word "cancel": "cancel my order" may ask for another task, and so may "can I cancel
    # it?" once the task is done (what it did, the order); under way, "cancel that" points at the task itself.
    # In a task about cancelling, "cancel it" is its request and "I changed my mind" its reason.
    about_cancelling = bool(re.search(r"cancel", active_about, re.I))
    for m in CANCEL.finditer(text):
        g = m.group(0).lower()
        if about_cancelling and (g.startswith("cancel") or "mind" in g):
            continue
        if not g.startswith("cancel") or g != "cancel" and not finished:
            return True
    return False


def _closing(verdict: Verdict) -> bool:
    f = verdict.features
    return bool(f.get("ends_task")) or bool(f.get("closing"))  # ("thank you so much, goodbye": a goodbye)
