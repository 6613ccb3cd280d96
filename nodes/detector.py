"""The FlowSwitch workflow-switch detector node: STAY with the active workflow or SEARCH the library.

Three policies (``Context.detector_mode``):

- ``offline`` (default) — a scored decision over features of the new user turn:
  * *answering*: the agent asked something and the turn looks like an answer (short, yes/no, a number,
    date or time, an enum value of the active workflow's slots, "the second one");
  * *request / switch cues*: "I want to", "can you", "actually", "instead", "also", "cancel", ...;
  * *accepting an offer*: "yes" to "Would you like me to reserve a table?" — the offer is the new intent;
  * *retrieval evidence*: the turn (plus the agent's question when the turn is elliptical) ranked with
    the retriever's BM25 over the library; +1 when another workflow beats the active one by a relative
    margin, -1 when the active workflow is the best match;
  * *verb shift*: the intent verb (reserve/book/buy vs find/search vs play) of the turn, or of the offer
    it accepts, differs from the active workflow's ("book me 2 tickets" while finding events).
  ``score = w·features``; SEARCH iff ``score > threshold``.  Two rules come first: a turn naming
  another workflow's task outright ("can you also track my order?") is a SEARCH; a new value for a slot
  of the active workflow ("make it 20:30", "change the party size to 6") is a STAY (FlowAgent's intent
  switching with new values).  ``confidence`` ∈ [0.5, 1) grows with
  ``|score - threshold|`` (rule-based verdicts carry fixed confidences).
  Out of scope — greetings, closings that decline or answer "anything else?" ("no, that's all",
  "bye") and chit-chat with no request and no content — is ``decision = "STAY"`` with
  ``out_of_scope = True`` ("thanks, that's all I needed" mid-task stays in the workflow): the agent keeps its workflow
  stack untouched and answers generically; evaluations read it as "no workflow predicted".
  With no active workflow any in-scope turn is a SEARCH.
- ``llm`` — the FlowSwitch prompt with structured output ``{action, search_query, user_intention}``
  (``with_structured_output`` when the model supports it, else JSON parsed from text), up to 2 retries on
  malformed output, then the offline verdict.
- ``cascade`` — offline first; the LLM only when the offline confidence is below ``CASCADE_THRESHOLD``.

``context_rerank`` re-scores a SEARCH ranking with the conversation's context (the active service,
services used before, the intent verb, enum values); evals/switch.py applies it to ``+ctx`` queries.

Weights and thresholds were tuned on training splits only (SGD train, STAR DialogueID % 5 in {1, 2})
with ``flowdesk eval switch --tune``; see evals/switch.py.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from pydantic import BaseModel, Field, ValidationError

CASCADE_THRESHOLD = 0.7
RETRIEVAL_TOP_K = 10
LLM_RETRIES = 2


@dataclass
class Params:
    """Tunable weights (defaults: tuned on SGD train + STAR train, see module docstring)."""

    # Grid-searched on SGD train (every 10th dialogue, 16,638 turns; ``--tune``): top-1 of
    # bm25/flat/text/Last1+ctx/on among the most accurate settings with switch recall >= 0.85 (STAR
    # train alone: threshold 1.5, w_answer 1.5, w_request 1.5, w_retrieval 1.0, w_verb 1.5, w_done 0).
    # w_offer, bias and margin were set by hand; w_done (the agent reported the task finished) was
    # tuned to 0 on both datasets and is kept as a feature for the grid.
    w_request: float = 1.0
    w_cue: float = 0.5
    w_offer: float = 1.5
    w_retrieval: float = 1.5
    w_answer: float = 1.0
    bias: float = 0.0
    threshold: float = 2.0
    w_verb: float = 1.5  # the intent verb moves away from the active workflow's (find -> book)
    w_done: float = 0.0
    margin: float = 0.2  # relative BM25 margin for "another workflow clearly wins"
    use_names: bool = True  # rule: naming another workflow's task is a SEARCH
    names_alone: bool = True  # ... even without a request phrase ("Where is my parcel? Track order 7")
    use_slot_update: bool = True  # rule: a new value for an active slot is a STAY


DEFAULT_PARAMS = Params()

ScoreFn = Callable[[str], list[tuple[str, float]]]  # text -> [(workflow, score)] best first


@dataclass
class Verdict:
    action: Literal["STAY", "SEARCH"]
    out_of_scope: bool = False
    confidence: float = 1.0
    search_query: str = ""
    user_intention: str = ""
    policy: str = "offline"
    features: dict[str, float] = field(default_factory=dict)
    self_query: str = ""  # the self-generated query even on STAY (evaluations without the detector)


# --- lexical features -------------------------------------------------------------------------------

_YES = (r"(yes|yeah|yep|yup|sure|ok|okay|alright|all right|absolutely|definitely|of course|correct|right|"
        r"perfect|great|sounds good|that works|please do|go ahead|fine|exactly|that would be (great|fantastic|"
        r"perfect|nice|wonderful|lovely|good|awesome|amazing)|(that )?sounds (great|perfect|fine|nice|wonderful|lovely))")
_NO = r"(no|nope|nah|not|nothing|negative|i don'?t|i do not|i'?m not|i am not)"
YES_START = re.compile(rf"^\W*(please\W+)?{_YES}\b", re.I)
NO_START = re.compile(rf"^\W*{_NO}\b", re.I)
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
                 r"different|besides|in addition|as well|now i|next|before that|hold on|oh,? wait|quick question)\b",
                 re.I)
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
                        r"purchase|play|transfer|file|report|rsvp|rent|make (a|an|me)|tell me|show me|put|add|set up|track)\b", re.I)
QUESTION = re.compile(r"\?|^\W*(what|which|when|where|who|how|do|does|did|is|are|can|could|would|will|may|"
                      r"please (provide|tell|confirm|give|let))\b", re.I)
NUMBERISH = re.compile(r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|noon|midnight|"
                       r"today|tomorrow|tonight|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
                       r"january|february|march|april|may|june|july|august|september|october|november|"
                       r"december|morning|afternoon|evening|am|pm|o'?clock|half past|quarter)\b", re.I)
ORDINAL = re.compile(r"\b(first|second|third|fourth|fifth|last|latter|former|1st|2nd|3rd|that|this) "
                     r"(one|option|choice)\b", re.I)
ELLIPTIC = re.compile(r"\b(it|that|this|there|them|those|one)\b", re.I)
_WORD = re.compile(r"[a-z0-9']+")
_FILLER = frozenset("""
a an the i me my you your we our it its this that is are was be to of for and or but so in on at with
please thanks thank much very just ok okay yes no yeah sure great good fine alright all right nope
would could can will do does did have has had like want need get go let lets that's thats it's i'm
im i'd id that'll bye goodbye hi hello hey else nothing more anything one some more also really
""".split())


def _content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _FILLER and len(w) > 1]


def _text_of(msg: Any) -> str:
    content = getattr(msg, "content", None)
    if content is None and isinstance(msg, dict):
        content = msg.get("content", "")
    if isinstance(content, list):
        content = " ".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content or "").strip()


def _role_of(msg: Any) -> str:
    kind = getattr(msg, "type", None) or (msg.get("role") if isinstance(msg, dict) else "")
    return {"human": "user", "user": "user", "ai": "agent", "assistant": "agent"}.get(kind, "other")


def split_history(messages: Sequence[Any]) -> tuple[str, str, list[str]]:
    """(last user text, the agent text right before it, earlier user texts oldest first)."""
    items = [(_role_of(m), _text_of(m)) for m in messages]
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
    value = bool(NUMBERISH.search(turn)) or any(
        v and re.search(rf"\b{re.escape(v)}\b", low) for v in _slot_values(workflow))
    if not value:
        return False
    tokens = set(_WORD.findall(low))
    slot_words = {w for slot in getattr(workflow, "slots", []) or [] for w in slot.name.lower().split("_")
                  if len(w) > 2 and w not in ("new", "the")}
    return bool(CHANGE_VALUE.search(turn)) or (not request and any(_mentions(w, tokens) for w in slot_words))


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


# --- self-generated query ----------------------------------------------------------------------------

_ACTION = re.compile(r"(?:i want to|i'?d like to|i would like to|i need to|i wanna|can you|could you|would you|"
                     r"will you|help me|please|i'?m looking to|i am looking to|let'?s|is it possible to)\s+"
                     r"([^?.!,;]+)", re.I)


def _phrase(text: str, limit: int = 12) -> str:
    words = text.strip().split()
    return " ".join(words[:limit]).strip(" ,.;")


def self_generated_query(turn: str, agent: str, earlier: Sequence[str], feats: dict) -> str:
    """FlowSwitch's query format, written from the turn (plus context when the turn is elliptical)."""
    context_needed = feats.get("accepts_offer") or (
        feats.get("content_words", 0) <= 2 or (ELLIPTIC.search(turn) and feats.get("content_words", 0) <= 4))
    m = _ACTION.search(turn)
    action = _phrase(m.group(1)) if m else ""
    offer = feats.get("offer_text") or ""
    if feats.get("accepts_offer") and offer:
        om = OFFER_CLAUSE.search(offer)
        action = _phrase(om.group(1)) if om else _phrase(offer)
    desc_parts = [turn]
    if context_needed:
        if offer:
            desc_parts.insert(0, offer)
        elif earlier:
            desc_parts = list(earlier[-2:]) + desc_parts
    description = " ".join(p.strip() for p in desc_parts if p.strip())
    if not action:
        action = _phrase(" ".join(_content_words(description)), 8) or _phrase(description)
    name = " ".join(w.capitalize() for w in _phrase(action, 6).split())
    return (f"Potential Name of the workflow: {name}, Task description of the workflow: {description}, "
            f"the action you need to take to solve the task: {action}")


# --- the offline policy ------------------------------------------------------------------------------

def _squash(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-2.0 * abs(x)))


def offline_decide(messages: Sequence[Any], active: str | None, workflow=None, score: ScoreFn | None = None,
                   pending: str | None = None, params: Params = DEFAULT_PARAMS) -> Verdict:
    turn, agent, earlier = split_history(messages)
    feats = lexical_features(turn, agent, workflow, pending)
    in_scope_request = feats["cue"] or feats["accepts_offer"] or (feats["request"] and not feats["closing"])
    fx: dict[str, float] = {k: v for k, v in feats.items() if isinstance(v, float)}

    def verdict(action: str, conf: float, oos: bool = False, why: str = "") -> Verdict:
        query = self_generated_query(turn, agent, earlier, feats) if turn else ""
        intention = why or (f"the user wants to: {turn}" if turn else "")
        return Verdict(action, oos, conf, query if action == "SEARCH" else "", intention, "offline", fx,
                       query)  # type: ignore[arg-type]

    if not turn:
        return verdict("STAY", 0.95, oos=active is None, why="no user message")
    # Out of scope: closings and greetings/thanks without any request or content.
    if (feats["closing"] or feats["chit_chat"]) and not in_scope_request and feats["content_words"] <= 3:
        if active is None or feats["ends_task"]:
            return verdict("STAY", 0.9, oos=True, why="out of scope: closing or small talk")
        return verdict("STAY", 0.85, why="small talk or wrap-up inside the active workflow")
    # Retrieval evidence on the turn, with the agent's offer/question when the turn is elliptical.
    probe = turn
    if feats["accepts_offer"] or feats["content_words"] <= 2:
        probe = f"{feats['offer_text'] or agent} {turn}"
    ranking = score(probe) if score is not None else []
    ret, info = retrieval_feature(ranking, active, params.margin)
    fx["retrieval"] = ret
    if active is None:
        if not ranking and not in_scope_request and feats["content_words"] == 0:
            return verdict("STAY", 0.8, oos=True, why="out of scope: nothing to search for")
        return verdict("SEARCH", 0.95, why=f"no active workflow; the user wants: {turn}")
    # Another workflow's task named outright ("can you also track my order?") is a switch; a new
    # value for an active slot is not, even with "change"/"instead" in it.
    named = "" if names_task(turn, active) else next(
        (n for n, _ in ranking[:5] if n != active and names_task(turn, n)), "")
    fx["names_other"] = float(bool(named))
    if named and params.use_names and (params.names_alone or feats["request"] or feats["cue"]
                                       or feats["accepts_offer"]):
        return verdict("SEARCH", 0.85, why=f"the user names another task ({named})")
    if params.use_slot_update and not feats["accepts_offer"] and not named \
            and slot_update(turn, workflow, bool(feats["request"])):
        fx["slot_update"] = 1.0
        return verdict("STAY", 0.8, why=f"a new slot value for {active}")
    s = (params.w_request * feats["request"] + params.w_cue * feats["cue"] + params.w_verb * feats["verb_shift"]
         + params.w_done * feats["done"]
         + params.w_offer * feats["accepts_offer"] * max(0.0, ret)
         + params.w_retrieval * ret - params.w_answer * feats["answer"] + params.bias)
    fx["score"] = s
    action = "SEARCH" if s > params.threshold else "STAY"
    conf = _squash(s - params.threshold)
    why = (f"another workflow fits better ({info.get('top')})" if action == "SEARCH"
           else f"continuing {active}")
    return verdict(action, conf, why=why)


# --- context prior for SEARCH turns ------------------------------------------------------------------

@dataclass
class Prior:
    """Re-ranking of a retrieval ranking with the conversation's context (tuned on train splits only)."""

    same_role: float = 0.4  # the active workflow's role/service: tasks of one service follow each other
    seen_role: float = 0.4  # a role used earlier in the conversation
    unseen_sibling: float = 0.4  # penalty: a role never used whose domain was (the near-duplicate service)
    verb: float = 0.2  # the turn's intent verb (reserve/book/buy vs find/search) matches the workflow's
    slot: float = 0.2  # an enum value of the workflow's slots is mentioned
    depth: int = 30  # how many retrieved candidates are re-ranked


DEFAULT_PRIOR = Prior()
VERB_GROUPS = {
    "transact": {"reserve", "reservation", "book", "booking", "buy", "purchase", "schedule", "appointment", "rent",
                 "transfer", "pay", "send", "add", "make", "order", "rsvp", "set"},
    "find": {"find", "search", "look", "lookup", "looking", "browse", "show", "list", "recommend", "suggest"},
    "play": {"play", "listen", "stream", "cast"},
}
_VERB_OF = {w: g for g, ws in VERB_GROUPS.items() for w in ws}


def verb_groups(words) -> set[str]:
    return {_VERB_OF[w] for w in words if w in _VERB_OF}


def rerank_text(messages: Sequence[Any]) -> str:
    """The turn, plus the agent's offer when the turn accepts it ("Would you like to reserve?" "Yes")."""
    turn, agent, _ = split_history(messages)
    feats = lexical_features(turn, agent)
    offer = feats.get("offer_text") or ""
    if feats["accepts_offer"] and offer:
        m = OFFER_CLAUSE.search(offer)
        return f"{m.group(1) if m else offer} {turn}"
    return turn


def context_rerank(ranking: list[tuple[str, float]], library, active: str | None, seen: Sequence[str],
                   text: str, prior: Prior = DEFAULT_PRIOR) -> list[tuple[str, float]]:
    """``ranking`` (best first) re-scored as ``score / top score + prior(context)``.

    The prior favours the active workflow's role and roles used before in the conversation, and
    penalises an unused role of a domain already used (SGD's near-duplicate services: the one used
    before is the one the user means); optionally the intent verb and enum values in ``text``."""
    if not ranking or ranking[0][1] <= 0:
        return ranking
    wfs = library.workflows
    top = ranking[0][1]
    act = wfs.get(active) if active else None
    used = [wfs[n] for n in seen if n in wfs] + ([act] if act else [])
    roles = {w.role for w in used}
    domains = {w.domain for w in used}
    low = text.lower()
    tokens = set(_WORD.findall(low))
    turn_verbs = verb_groups(tokens)
    out = []
    for name, score in ranking[:prior.depth]:
        wf = wfs.get(name)
        p = 0.0
        if wf is not None:
            if act is not None and wf.role == act.role:
                p += prior.same_role
            if wf.role in roles:
                p += prior.seen_role
            elif wf.domain in domains:
                p -= prior.unseen_sibling
            if prior.verb and turn_verbs & verb_groups(name_words(name)):
                p += prior.verb
            if prior.slot and any(len(v) > 3 and re.search(rf"\b{re.escape(v)}\b", low) for v in _slot_values(wf)
                                  if v not in ("true", "false")):
                p += prior.slot
        out.append((name, score / top + p))
    out.sort(key=lambda x: -x[1])
    return out + [(n, sc / top) for n, sc in ranking[prior.depth:]]


# --- the LLM policy ----------------------------------------------------------------------------------

class SwitchDecision(BaseModel):
    """Structured output of the LLM detector (FlowSwitch)."""

    action: Literal["STAY", "SEARCH"]
    search_query: str = Field(default="", description="FlowSwitch self-generated query when action is SEARCH")
    user_intention: str = Field(default="", description="one line: what the user wants now")


PROMPT = """You are the workflow switch detector of a customer-service agent that follows workflows.
The agent is currently executing this workflow:
Name: {name}
Description: {description}

Recent conversation:
{history}

New user turn: {turn}

Decide whether the agent should STAY in the current workflow (the user answers a question, gives
requested information, or continues the same task) or SEARCH the workflow library for another
workflow (the user asks for something the current workflow does not handle, or there is no current
workflow). When you answer SEARCH, write a search query in exactly this format:
"Potential Name of the workflow: ..., Task description of the workflow: ..., the action you need to take to solve the task: ..."
Reply with JSON only: {{"action": "STAY" or "SEARCH", "search_query": "...", "user_intention": "..."}}"""


def llm_prompt(messages: Sequence[Any], workflow=None, history_turns: int = 6) -> str:
    items = [(_role_of(m), _text_of(m)) for m in messages]
    items = [(r, t) for r, t in items if r in ("user", "agent") and t]
    turn = items[-1][1] if items and items[-1][0] == "user" else ""
    hist = items[:-1] if turn else items
    history = "\n".join(f"{'User' if r == 'user' else 'Agent'}: {t}" for r, t in hist[-history_turns:]) or "(none)"
    return PROMPT.format(name=getattr(workflow, "name", None) or "(no active workflow)",
                         description=getattr(workflow, "description", "") or "-", history=history, turn=turn)


def parse_decision(text: str) -> SwitchDecision:
    """The first JSON object in the text, validated; raises ValueError when malformed."""
    start = text.find("{")
    while start != -1:
        depth = 0
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                try:
                    return SwitchDecision.model_validate(json.loads(text[start:i + 1]))
                except (json.JSONDecodeError, ValidationError):
                    break
        start = text.find("{", start + 1)
    raise ValueError(f"no valid decision JSON in model output: {text[:200]!r}")


def _structured(model):
    try:
        return model.with_structured_output(SwitchDecision)
    except (NotImplementedError, AttributeError, TypeError, ValueError):
        return None  # fake/simple chat models: parse JSON from text instead


def llm_decide(model, messages: Sequence[Any], workflow, fallback: Callable[[], Verdict],
               retries: int = LLM_RETRIES) -> Verdict:
    prompt = llm_prompt(messages, workflow)
    runner = _structured(model)
    errors: list[str] = []
    for _ in range(retries + 1):
        try:
            if runner is not None:
                out = runner.invoke(prompt)
                decision = out if isinstance(out, SwitchDecision) else SwitchDecision.model_validate(out)
            else:
                decision = parse_decision(_text_of(model.invoke(prompt)))
        except Exception as exc:  # malformed output or a transport error: retry, then fall back
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
            continue
        query = decision.search_query.strip()
        if decision.action == "SEARCH" and not query:
            query = fallback().search_query or decision.user_intention
        return Verdict(decision.action, False, 1.0, query, decision.user_intention, "llm",
                       {"llm_attempts": float(len(errors) + 1)})
    v = fallback()
    v.policy = "offline-fallback"
    v.features = {**v.features, "llm_attempts": float(len(errors))}
    v.user_intention = v.user_intention or "; ".join(errors)
    return v


def decide(messages: Sequence[Any], active: str | None, workflow=None, score: ScoreFn | None = None,
           pending: str | None = None, mode: str = "offline", model=None,
           params: Params = DEFAULT_PARAMS, cascade_threshold: float = CASCADE_THRESHOLD) -> Verdict:
    """One detector verdict under a policy (``offline`` | ``llm`` | ``cascade``)."""
    offline = offline_decide(messages, active, workflow, score, pending, params)
    if model is None or mode == "offline":
        return offline
    if mode == "cascade" and offline.confidence >= cascade_threshold:
        offline.policy = "cascade-offline"
        return offline
    v = llm_decide(model, messages, workflow, lambda: offline)
    if mode == "cascade" and v.policy == "llm":
        v.policy = "cascade-llm"
    return v


# --- the graph node ----------------------------------------------------------------------------------

def retriever_scorer(retriever, top_k: int = RETRIEVAL_TOP_K) -> ScoreFn:
    """Detector evidence from the library retriever's BM25 (flat, cheap: no embedding per turn)."""

    def score(text: str) -> list[tuple[str, float]]:
        cands = retriever.search(text, retriever="bm25", strategy="flat", top_k=top_k)
        return [(c["workflow"], float(c.get("score", 0.0))) for c in cands]

    return score


def detector(state: dict, runtime) -> dict:
    from graph.context import Context
    from graph.resources import get_resources

    ctx = getattr(runtime, "context", None) or Context()
    res = get_resources(ctx)
    active = state.get("active_workflow")
    workflow = res.library.workflows.get(active) if active else None
    if active and workflow is None:
        active = None  # the library changed under the thread: treat as no active workflow
    pending = ((state.get("progress") or {}).get(active) or {}).get("pending") if active else None
    model = res.model("detector") if ctx.detector_mode != "offline" else None
    started = time.perf_counter()
    v = decide(state.get("messages", []), active, workflow, retriever_scorer(res.retriever), pending,
               ctx.detector_mode, model)
    turn_no = int(state.get("turn") or 0) + 1
    text, _, _ = split_history(state.get("messages", []))
    return {
        "decision": v.action,
        "search_query": v.search_query,
        "user_intention": v.user_intention,
        "turn": turn_no,
        "attempts": 0,
        "violations": [],
        "trace": [{"event": "user", "turn": turn_no, "text": text, "workflow": active, "decision": v.action,
                   "out_of_scope": v.out_of_scope, "confidence": round(v.confidence, 3), "policy": v.policy,
                   "elapsed_ms": round((time.perf_counter() - started) * 1000, 2)}],
    }
