"""Features of a user turn for the switch detector: what the turn says (request, cue, answer, offer
accepted, closing, verb shift), whether it names another task or updates a slot, and the retrieval
evidence.  Lexicons are generic English conversation markers, not any dataset's wording."""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

from workflows.text import FILLERS, NO_START, YES_START, content_words, message_text, role_of, stemmed

from .slots import EMAIL, fill_slots

# --- lexical features -------------------------------------------------------------------------------

CLOSING = re.compile(r"\b(that'?s all|that is all|that'?ll be all|that will be all|that would be all|"
                     r"nothing else|nothing more|nothing further|no more|i'?m good|i am good|i'?m all set|"
                     r"all set|good ?bye|bye|see you|have a (good|nice|great) (day|night|one|evening))\b", re.I)
THANKS = re.compile(r"\b(thanks|thank you|thx|ty|appreciate it|cheers|much appreciated)\b", re.I)
GREETING = re.compile(r"^\W*(hi|hello|hey|howdy|greetings|good (morning|afternoon|evening))\b", re.I)
ANYTHING_ELSE = re.compile(r"\b(anything else|something else|any other|any more|anything (more|further|addition\w*)|"
                           r"another|else (can|could|may) i|help (you )?with (anything|something))\b", re.I)
OFFER = re.compile(r"\b(would you like|do you want|would you want|do you wish|would you care|shall i|should i|"
                   r"want me to|(can|may|will|could) i (book|reserve|get|buy|make|play|schedule|add|set|order|rent|"
                   r"transfer|purchase|start|call)|are you (ready|interested)|whether i need to|how about (i|we))\b",
                   re.I)
OFFER_CLAUSE = re.compile(r"(?:would you like|do you want|would you want|do you wish|would you care|shall i|"
                          r"should i|want me to|can i|may i|will i|could i|are you ready|are you interested in|"
                          r"whether i need to)\s+(?:me\s+)?(?:to\s+)?([^?.!]+)", re.I)
# The agent reports the active task finished: what the user asks next is likely a new task.
DONE = re.compile(r"\b(confirmed|successfully|successful|has been (set|made|placed|sent|booked|reserved|scheduled|"
                  r"submitted|added|transferred)|is (now )?(booked|reserved|scheduled|set|done|complete)|"
                  r"(you'?re|you are) (all set|booked)|enjoy)\b", re.I)
CUE = re.compile(r"\b(actually|instead|also|another thing|one more thing|something else|by the way|btw|"
                 r"cancel|change (my|the|it)|switch|what about|forget (it|that|about)|never ?mind|rather|"
                 r"different|besides|in addition|as well|now i|next|before that|hold on|oh,? wait|"
                 r"quick (?:question|one))\b",
                 re.I)
# What announces an aside, a request to be dealt with before the task at hand ("actually first, ...", "one more
# thing before that", "quick question"), unlike the cues of a change to it ("what about ...", "... instead").
ASIDE = re.compile(r"(?:^\W*|\b(?:actually|but|ok(?:ay)?|oh|wait|so|and)\W+)first\b(?![\s-]+(?:class|name|time|one|of)\b)"
                   r"|\bbefore (?:that|we (?:continue|go on|finish|do that))\b|\b(?:one more|another) thing\b"
                   r"|\bquick (?:question|one)\b|\breal quick\b|\bby the way\b|\bbtw\b|\bin the meantime\b|\bmeanwhile\b"
                   r"|\bwhile (?:i have you|you'?re at it|we'?re at it)\b", re.I)
# "where is my order?" asks for a service (tracking), unlike "where is it?" about the current item.
REQUEST = re.compile(r"\b(where is my|where's my|(what is|what's) the status of my|"
                     r"i (also |really |just |now )?want|i'?d (also |really )?like|i would (also |really )?like|"
                     r"i'?ll like|i'?ll (also )?need|i'?d want|i (also |now )?need|i wanna|i'?m looking|i am looking|looking for|"
                     r"can you|could you|would you|will you|can i|could i|can we|could we|shall we|help me|is it possible|i have to|"
                     r"let'?s|i'?d love|i'?m (trying|hoping|planning)|i am (trying|hoping|planning)|"
                     r"(please|pls) (find|book|reserve|check|get|search|look|make|buy|play|schedule|transfer|"
                     r"cancel|add|set|show|tell|order|rent|pay|send|call|start|help))\b", re.I)
# An imperative intent verb opening the turn or a clause ("book it now", "ok, now get me a cab").
IMPERATIVE = re.compile(r"(^|[.!?,;]\s*|\b(now|then|so|and|also|ok|okay|great|good|perfect)\W+)(please\s+)?"
                        r"(book|reserve|find|search|look up|check(?!\s*-?\s*(in|out)\b)|get me|order|cancel|schedule|send|call|buy|"
                        r"purchase|play|transfer|move|pay|block|refund|update|file|report|rsvp|rent|make (a|an|me)|tell me|show me|put|add|"
                        r"set up|track)\b", re.I)
QUESTION = re.compile(r"\?|^\W*(what|which|when|where|who|how|do|does|did|is|are|can|could|would|will|may|"
                      r"please (provide|tell|confirm|give|let))\b", re.I)


def announced_aside(turn: str) -> bool:
    """A question the user announces as a step aside ("oh and before that, where is my other order?", "quick
    question: ..."): by its own words not the task under way."""
    return bool(ASIDE.search(turn) and QUESTION.search(turn))


NUMBERISH = re.compile(r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|noon|midnight|"
                       r"today|tomorrow|tonight|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
                       r"january|february|march|april|may|june|july|august|september|october|november|"
                       r"december|morning|afternoon|evening|am|pm|o'?clock|half past|quarter)\b", re.I)
ORDINAL = re.compile(r"\b(first|second|third|fourth|fifth|last|latter|former|1st|2nd|3rd|that|this) "
                     r"(one|option|choice)\b", re.I)
ELLIPTIC = re.compile(r"\b(it|that|this|there|them|those|one)\b", re.I)
_WORD = re.compile(r"[a-z0-9']+")


def _content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in FILLERS and len(w) > 1]


def split_history(messages: Sequence[Any]) -> tuple[str, str, list[str]]:
    """(last user text, the agent text right before it, earlier user texts oldest first)."""
    items = [(role_of(m), message_text(m).strip()) for m in messages]
    items = [(r, t) for r, t in items if r in ("user", "agent") and t]
    last_user = max((i for i, (r, _) in enumerate(items) if r == "user"), default=None)
    if last_user is None:
        return "", "", []
    agent = next((t for r, t in reversed(items[:last_user]) if r == "agent"), "")
    earlier = [t for r, t in items[:last_user] if r == "user"]
    return items[last_user][1], agent, earlier


# "What time do you want?" / "Also, where would you like to see it?" ask for a slot; they offer nothing.
WH_WORD = re.compile(r"\b(what|which|when|where|who|whom|how)\b", re.I)


def _last_sentence_with(pattern: re.Pattern, text: str, skip: re.Pattern | None = None) -> str:
    """The last sentence matching ``pattern`` (and without ``skip`` before the match)."""
    for sent in reversed(re.split(r"(?<=[.?!])\s+", text)):
        m = pattern.search(sent)
        if m and not (skip and skip.search(sent[:m.start()])):
            return sent
    return ""


def _slot_values(workflow) -> list[str]:
    values: list[str] = []
    for slot in getattr(workflow, "slots", []) or []:
        values += [str(v).lower() for v in (slot.enum or [])]
    return values


def lexical_features(turn: str, agent: str, workflow=None, pending: str | None = None) -> dict[str, float]:
    low = turn.lower()
    content = _content_words(turn)
    asked = bool(agent and QUESTION.search(agent)) or bool(pending)
    request = 1.0 if REQUEST.search(turn) or IMPERATIVE.search(turn) else 0.0
    cue = 1.0 if CUE.search(turn) else 0.0
    short = len(_WORD.findall(low)) <= 6
    answer = 0.0
    if YES_START.search(turn) or NO_START.search(turn):
        answer += 0.5
    if short:
        answer += 0.4
    if NUMBERISH.search(turn):
        answer += 0.3
    if EMAIL.search(turn):
        answer += 0.5  # an e-mail address is a value someone gives, never a request
    if ORDINAL.search(turn):
        answer += 0.5
    if workflow is not None and any(v and re.search(rf"\b{re.escape(v)}\b", low) for v in _slot_values(workflow)):
        answer += 0.5
    answer = min(1.0, answer) * (1.0 if asked else 0.5)
    offer = _last_sentence_with(OFFER, agent, WH_WORD) if agent else ""
    accepts_offer = 1.0 if offer and (YES_START.search(turn) or (request and not cue)) \
        and not NO_START.search(turn) else 0.0
    declines = bool(NO_START.search(turn)) and not request
    if ANYTHING_ELSE.search(agent or "") and not declines and content and not CLOSING.search(turn):
        request = 1.0  # content in reply to "anything else?" is a new request
    # "No" to "anything else?" ends the task; so does declining an offered next step ("No, not now").
    closing = bool(CLOSING.search(turn)) or bool(declines and (ANYTHING_ELSE.search(agent or "") or offer))
    chit_chat = (bool(THANKS.search(turn)) or bool(GREETING.search(turn))) and len(content) <= 1
    # A closing ends the task only when it declines something or answers "anything else?"; "thanks,
    # that's all I needed" mid-task wraps up inside the active workflow (SGD keeps its intent there:
    # 480 of 490 such train turns).
    ends_task = closing and bool(NO_START.search(turn) or ANYTHING_ELSE.search(agent or ""))
    # The intent verb moves away from the active workflow's ("book me 2 tickets" while finding events,
    # "yes" to "shall I reserve it?" while searching): a switch inside the same service.
    verb_shift = 0.0
    active_verbs = verb_groups(name_words(workflow.name)) if workflow is not None else set()
    if active_verbs and (request or accepts_offer) and not declines:
        said = offer if accepts_offer and not verb_groups(_WORD.findall(low)) else turn
        verbs = verb_groups(_WORD.findall(said.lower()))
        verb_shift = float(bool(verbs) and not verbs & active_verbs)
    return {"request": request, "cue": cue, "answer": answer, "accepts_offer": accepts_offer,
            "closing": float(closing), "ends_task": float(ends_task), "verb_shift": verb_shift,
            "done": float(bool(agent and DONE.search(agent)) and not closing and bool(content)),
            "chit_chat": float(chit_chat), "content_words": float(len(content)),
            "asked": float(asked), "short": float(short), "offer_text": offer}  # type: ignore[dict-item]


def markers_end_task(feats: dict) -> bool:
    """The hand-written closing markers say the turn (read by ``lexical_features``) ends the active task: a
    closing that declines something or answers "anything else?" (``ends_task``), in three content words at
    most.  The learned closing detector (``closing.py``) replaces them when its model file is present."""
    return bool(feats["ends_task"] and feats["content_words"] <= 3)


def asks_for_something(feats: dict) -> bool:
    """The turn (read by ``lexical_features``) asks for something — a request that is no closing, a cue or
    an accepted offer — so it neither closes nor is small talk."""
    return bool(feats["cue"] or feats["accepts_offer"] or (feats["request"] and not feats["closing"]))


# A new value for a slot of the active workflow ("make it 20:30", "then let's do Dec 6 instead",
# "change the party size to 6") keeps the workflow: FlowAgent's intent switching with new values.
CHANGE_VALUE = re.compile(r"\b(make it|change (it|that|this|the [\w ]{1,20}?|my [\w ]{1,20}?) to|instead|"
                          r"rather|how about|what about|let'?s (do|make it|go with|say|try)|move it|push it|"
                          r"switch (it|that) to|can we do|could we do|can you do|actually)\b", re.I)
_NAME_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_NAME_STOP = frozenset("a an the of for to and or by in on at my new get".split())


def name_words(workflow: str) -> list[str]:
    """Task words of a workflow name: ``track_order`` -> track, order; ``Restaurants_2__ReserveRestaurant``
    -> reserve, restaurant (the service prefix is dropped)."""
    base = workflow.split("__")[-1]
    words = [w.lower() for w in _NAME_WORD.findall(base.replace("_", " "))]
    return [w for w in words if w not in _NAME_STOP and len(w) > 1]


def _mentions(word: str, tokens: set[str]) -> bool:
    stem = word[:max(4, min(len(word), 5))]  # crude stemming: tracking/track, orders/order, booking/book
    return any(t.startswith(stem) or word.startswith(t) and len(t) >= 4 for t in tokens)


def names_task(turn: str, workflow: str) -> bool:
    """The turn names the workflow's task: every task word of its name occurs ("track my order")."""
    words = name_words(workflow)
    tokens = set(_WORD.findall(turn.lower()))
    return len(words) >= 2 and all(_mentions(w, tokens) for w in words)


def slot_update(turn: str, workflow, request: bool = False) -> bool:
    """A new value for one of the active workflow's slots: a value plus a change phrase, or a value and
    a slot name in a turn that makes no request ("party of 6, please" vs "book me 2 tickets")."""
    if workflow is None:
        return False
    low = turn.lower()
    # a number, a time or a date counts when the slot reader takes one for the workflow ("9.30pm" is no value
    # of a cancellation, which only takes a booking reference)
    value = bool(NUMBERISH.search(turn)) and bool(fill_slots(turn, workflow).values) or any(
        v and re.search(rf"\b{re.escape(v)}\b", low) for v in _slot_values(workflow))
    if not value:
        return False
    tokens = set(_WORD.findall(low))
    return bool(CHANGE_VALUE.search(turn)) or (not request and any(_mentions(w, tokens) for w in _slot_words(workflow)))


def _slot_words(workflow) -> set[str]:
    """The words of the workflow's slot names (``party_size`` -> party, size)."""
    return {w for slot in getattr(workflow, "slots", []) or [] for w in slot.name.lower().split("_")
            if len(w) > 2 and w not in ("new", "the")}


def retrieval_feature(ranking: list[tuple[str, float]], active: str | None, margin: float) -> tuple[float, dict]:
    """+1 another workflow clearly beats the active one, -1 the active one is best, else in between."""
    if not ranking or ranking[0][1] <= 0:
        return 0.0, {"top": None}
    top, s_top = ranking[0]
    s_act = next((s for n, s in ranking if n == active), 0.0)
    info = {"top": top, "top_score": s_top, "active_score": s_act}
    if active is None:
        return 1.0, info
    if top == active:
        # How clearly the active workflow leads the runner-up.
        s_2 = ranking[1][1] if len(ranking) > 1 else 0.0
        return -min(1.0, 0.5 + (s_top - s_2) / s_top), info
    rel = (s_top - s_act) / s_top
    return (1.0 if rel >= margin else rel / margin), info




VERB_GROUPS = {
    "transact": {"reserve", "reservation", "book", "booking", "buy", "purchase", "schedule", "appointment", "rent",
                 "transfer", "pay", "send", "add", "make", "order", "rsvp", "set"},
    "find": {"find", "search", "look", "lookup", "looking", "browse", "show", "list", "recommend", "suggest"},
    "play": {"play", "listen", "stream", "cast"},
}
_VERB_OF = {w: g for g, ws in VERB_GROUPS.items() for w in ws}


def verb_groups(words) -> set[str]:
    return {_VERB_OF[w] for w in words if w in _VERB_OF}


def workflow_vocabulary(workflow) -> set[str]:
    """The words a workflow's own conversation uses: its name, descriptions, slots and enum values."""
    parts = [workflow.name, workflow.title or "", workflow.description]
    for slot in workflow.slots:
        parts += [slot.name, slot.title or "", slot.description, *(str(v) for v in slot.enum or [])]
    return stemmed(content_words(" ".join(parts)))


def foreign_share(turn: str, workflow) -> float:
    """Share of the turn's content words the active workflow's vocabulary does not know (0 when the
    turn has fewer than two content words: a bare value or a yes/no is never foreign)."""
    words = {w for w in content_words(turn) if w not in FILLERS}
    if workflow is None or len(words) < 2:
        return 0.0
    vocab = workflow_vocabulary(workflow)
    unknown = [w for w in words if not stemmed({w}) & vocab]
    return len(unknown) / len(words)


def _spread(ranking: Sequence[tuple[str, float]]) -> tuple[float, float]:
    """(mean, sd) of a ranking's scores."""
    vals = [s for _, s in ranking]
    mean = sum(vals) / len(vals)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))


def _z(spread: tuple[float, float], value: float, floor: float = 0.0) -> float:
    """``value`` as a z-score over a ranking's scores (their ``_spread``), the sd taken as at least ``floor``
    (0 when they do not spread)."""
    mean, sd = spread
    sd = max(sd, floor)
    return (value - mean) / sd if sd > 1e-9 else 0.0


# --- context of a turn for the learned detector ------------------------------------------------------

# The learned detector's inputs beyond the linear ones, in the order its trees read them.  None names a
# service: they say what the turn is (an answer to the agent's question, a value of the active
# workflow, a question of its own), where it falls in the dialogue, and how the library's BM25 ranking
# places the active workflow among all of them (relative to the top and as a z-score over the ranking, and
# its lead over the best other one), whether the active task is over (``wrapped_up``) and whether the turn
# gives a value for one of its open slots.
CONTEXT_FEATURES = ("asked", "pending", "short", "content_words", "words", "question", "agent_question",
                    "agent_offer", "yes_no", "numberish", "slot_value", "slot_word", "names_active", "foreign",
                    "active_rank", "active_rel", "active_z", "top_z", "top_margin", "position",
                    "wrapped_up", "other_z", "active_lead", "fills_open", "fills_any")


def _ranking_context(ranking: list[tuple[str, float]], active: str | None) -> dict[str, float]:
    if not ranking or ranking[0][1] <= 0:
        return {"active_rank": 0.0, "active_rel": 0.0, "active_z": 0.0, "top_z": 0.0, "top_margin": 0.0,
                "other_z": 0.0, "active_lead": 0.0}
    scores = [s for _, s in ranking]
    top = scores[0]
    spread = _spread(ranking)
    rank = next((i for i, (n, _) in enumerate(ranking) if n == active), None)
    s_act = scores[rank] if rank is not None else scores[-1]  # not ranked: at most the last one's score
    # the turn's own confidence in the active workflow against the best other one
    s_other = next((s for n, s in ranking if n != active), 0.0)
    return {"active_rank": float(rank + 1 if rank is not None else len(ranking) + 1),
            "active_rel": s_act / top if rank is not None else 0.0, "active_z": _z(spread, s_act),
            "top_z": _z(spread, top),
            "top_margin": (top - scores[1]) / top if len(scores) > 1 else 1.0,
            "other_z": _z(spread, s_other), "active_lead": _z(spread, s_act) - _z(spread, s_other)}


def _fills(turn: str, workflow, pending: str | None, filled: dict | None) -> tuple[float, float]:
    """(the turn gives a value for a slot of the active workflow still open, for any of its slots)."""
    if workflow is None or not getattr(workflow, "slots", None):
        return 0.0, 0.0
    found = set(fill_slots(turn, workflow, pending=(pending or "").split(",")).values)
    return float(bool(found - set(filled or {}))), float(bool(found))


def context_features(turn: str, agent: str, feats: dict, workflow, pending: str | None,
                     ranking: list[tuple[str, float]], active: str | None, position: int,
                     foreign: float, finished: bool = False, filled: dict | None = None) -> dict[str, float]:
    """``CONTEXT_FEATURES`` of a turn (``feats``: its ``lexical_features``; ``position``: user turns before
    it; ``foreign``: its ``foreign_share``, which the detector has already computed; ``finished``: the
    active workflow's procedure has run to its end; ``filled``: the active frame's slot values)."""
    from workflows.text import yes_no

    low = turn.lower()
    tokens = set(_WORD.findall(low))
    fills_open, fills_any = _fills(turn, workflow, pending, filled)
    # The active task is over — its procedure ran to the end (the frame), or the agent reported a result or
    # asked whether there is anything else (its words: replays of recorded dialogues have no live frames).
    wrapped_up = finished or bool(agent and (ANYTHING_ELSE.search(agent) or DONE.search(agent)))
    return {"asked": feats["asked"], "pending": float(bool(pending)), "short": feats["short"],
            "content_words": feats["content_words"], "words": float(len(_WORD.findall(low))),
            "question": float(bool(QUESTION.search(turn))), "agent_question": float(bool(agent and "?" in agent)),
            "agent_offer": float(bool(feats.get("offer_text"))), "yes_no": float(yes_no(turn) is not None),
            "numberish": float(bool(NUMBERISH.search(turn))),
            "slot_value": float(any(v and re.search(rf"\b{re.escape(v)}\b", low) for v in _slot_values(workflow))),
            "slot_word": float(any(_mentions(w, tokens) for w in _slot_words(workflow))),
            "names_active": float(bool(active) and names_task(turn, active)),
            "foreign": foreign, **_ranking_context(ranking, active),
            "position": float(position), "wrapped_up": float(wrapped_up), "fills_open": fills_open,
            "fills_any": fills_any}
