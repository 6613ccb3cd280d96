"""The one text module: message text, word splitting, stop words and the yes/no lexicon.

Every part of the product that reads words goes through here, so "what is a content word" and
"is this a yes" have one answer.  Kept deliberately generic (English function words and
affirmations), never shaped to a dataset's or the demo's wording.
"""

from __future__ import annotations

import json
import re
from types import MappingProxyType
from typing import Any, Callable, Iterable

WORD = re.compile(r"[a-z0-9']+")
LETTERS = re.compile(r"[a-z]+")
CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")

# English function words: dropped wherever content words are compared.
STOPWORDS = frozenset("""
a an the and or but if of for to in on at by with from as about into over under is are was were be been being
am do does did has have had it its this that these those there here i me my we our you your he she they them
their his her what which who whom how when where why can could would will shall should may might must not no
please yes s
""".split())
# Words of a user turn that carry no task content: function words plus conversational fillers
# (the detector's weights were tuned with exactly this set).
FILLERS = frozenset("""
a an the i me my you your we our it its this that is are was be to of for and or but so in on at with
please thanks thank much very just ok okay yes no yeah sure great good fine alright all right nope
would could can will do does did have has had like want need get go let lets that's thats it's i'm
im i'd id that'll bye goodbye hi hello hey else nothing more anything one some more also really
""".split())

# Number words read as numbers (the slot reader adds its own, "a couple"; a quiz answer "3" is "three")
NUMBER_WORDS = MappingProxyType({w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())})

# Discourse markers opening a turn ("Oh wait, before that: …", "Also, one more thing — …") say that a
# new request follows; they are not part of it.  Generic English, stripped before the query is written.
DISCOURSE = re.compile(r"^\W*(?:(?:oh|ah|um+|hmm+|uh|well|so|ok(?:ay)?|sorry|wait|hold on|hang on|actually|also|and|"
                       r"btw|by the way|one more thing|another thing|quick (?:question|one)|real quick|before (?:that|we "
                       r"(?:continue|go on|finish|do that))|first|in the meantime|meanwhile|oops|hey|"
                       r"(?:i )?(?:just )?remembered|i forgot)\b[\s,;:.!\-–—]*)+", re.I)

# Affirmations and refusals at the start of a reply ("yes please", "sounds great", "no thanks", "I don't").
_YES = (r"(yes|yeah|yep|yup|sure|ok|okay|alright|all right|absolutely|definitely|of course|correct|right|affirmative|"
        r"that'?s right|true|perfect|great|sounds good|that works|please do|go ahead|go on|continue|proceed|fine|exactly|"
        r"that would be (great|fantastic|perfect|nice|wonderful|lovely|good|awesome|amazing)|"
        r"(that )?sounds (great|perfect|fine|nice|wonderful|lovely))")
_NO = r"(no|nope|nah|not|nothing|negative|false|don'?t|do not|i don'?t|i do not|i'?m not|i am not)"
YES_START = re.compile(rf"^\W*(please\W+)?{_YES}\b", re.I)
# "No. 23, Xiangshan Road" starts an address (the abbreviation of "number"), not a refusal
NO_START = re.compile(rf"^\W*{_NO}\b(?!\.?\s*\d)", re.I)
# "I don't know" is neither a yes nor a no: the user cannot answer.
UNSURE = re.compile(r"\b(?:don'?t|do not|didn'?t) (?:know|have|remember|recall)\b|\bforgot\b|\bno idea\b|"
                    r"\bnot sure\b|\bcan'?t remember\b", re.I)

# Single words that confirm / refuse an irreversible action ("yes, go ahead" / "no, wait").
CONFIRM_WORDS = frozenset({"yes", "y", "yeah", "yep", "sure", "ok", "okay", "confirm", "confirmed", "go", "proceed",
                           "please", "correct", "absolutely", "definitely", "do"})
REFUSE_WORDS = frozenset({"no", "n", "nope", "nah", "don't", "dont", "not", "cancel", "stop", "wait", "never", "abort"})
# What makes a yes conditional: a question ("ok, how much is it?"), a contrast or a change ("yes but for 3
# people", "sure, only TX-5003", "ok, actually…"), a hesitation ("yes - oh wait").
HEDGE = re.compile(r"\?|\b(?:but|though|however|instead|only|except|unless|actually|rather|wait|hold on|hang on)\b",
                   re.I)


def message_text(message: Any) -> str:
    """The text of a LangChain message, a ``{"role", "content"}`` dict or a plain string."""
    if isinstance(message, str):
        return message
    content = getattr(message, "content", None)
    if content is None and isinstance(message, dict):
        content = message.get("content", "")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content or "")


def role_of(message: Any) -> str:
    """``user`` | ``agent`` | ``tool`` | ``other`` for a message object or dict."""
    kind = getattr(message, "type", None) or (message.get("role") if isinstance(message, dict) else "")
    return {"human": "user", "user": "user", "ai": "agent", "assistant": "agent", "tool": "tool"}.get(kind, "other")


def last_user_text(messages: Iterable[Any]) -> str:
    """The latest user message's text ("" when there is none)."""
    for m in reversed(list(messages or [])):
        if role_of(m) == "user":
            return message_text(m)
    return ""


def words(text: str) -> list[str]:
    """Lower-case word tokens (letters, digits, apostrophes)."""
    return WORD.findall((text or "").lower())


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, each ending in its punctuation (a missing final stop is added)."""
    parts = [p.strip() for p in re.split(r"(?<=[.!?])\s+", (text or "").strip()) if p.strip()]
    return [p if p[-1] in ".!?" else p + "." for p in parts]


def split_identifier(name: str) -> str:
    """``bookTable`` / ``book_table`` -> ``book table``."""
    return CAMEL.sub(" ", name or "").replace("_", " ")


def content_words(text: str, *, min_len: int = 3, stop: frozenset[str] = STOPWORDS) -> set[str]:
    """Words that carry content (identifiers split, function words dropped)."""
    return {w for w in LETTERS.findall(split_identifier(text).lower()) if len(w) >= min_len and w not in stop}


def stemmed(ws: Iterable[str], size: int = 4) -> set[str]:
    """Words plus a crude prefix stem, so "rain" meets "raining" and "booking" meets "book"."""
    ws = set(ws)
    return ws | {w[:size] + "~" for w in ws if len(w) >= size}


def yes_no(text: str) -> bool | None:
    """True / False when the reply starts with an affirmation / a refusal, else None (refusals win;
    "I don't know" is neither)."""
    if UNSURE.search(text or ""):
        return None
    if NO_START.search(text or ""):
        return False
    if YES_START.search(text or ""):
        return True
    return None


_ALTERNATIVES = re.compile(r"^(?P<first>.+?)\s+or\s+(?P<second>[^?]+)\?\s*$", re.I | re.S)


def alternative_answer(question: str, reply: str) -> bool | None:
    """The answer to a yes/no question offered with an alternative ("Can I proceed or do you require more
    detailed instructions?") when the reply names one side instead of saying yes or no: True when it
    shares words only with the question's own side ("you can proceed"), False when only with the
    alternative ("I need more detailed instructions"), else None.  Placeholders in brackets are no words."""
    m = _ALTERNATIVES.match(re.sub(r"\[[^\]]*\]", " ", question or "").strip())
    if not m:
        return None
    said = stemmed(content_words(reply or ""))
    first = said & stemmed(content_words(m["first"]))
    second = said & stemmed(content_words(m["second"]))
    return None if bool(first) == bool(second) else bool(first)


def confirms(text: str) -> bool:
    """Is ``text`` an unconditional yes to "shall I go ahead?"  A reply that starts with an affirmation is a
    yes whatever follows, so the request may be restated in it ("yes, cancel it", "yes, I never made those
    payments", "yes, no problem"); any hedge (a question, "but", "only", "wait") makes it no yes, because
    the call would then run on values the user just changed.  Without a leading affirmation, a confirming
    word and no refusing one ("I confirm", "go for it").  Unclear is no: nothing irreversible runs on it."""
    text = text or ""
    if not text.strip() or UNSURE.search(text) or NO_START.search(text) or HEDGE.search(text):
        return False
    if YES_START.search(text):
        return True
    said = set(words(text))
    return bool(said & CONFIRM_WORDS) and not said & REFUSE_WORDS


# Ways of saying "leave things as they are" beyond a no ("hmm no, leave it", "actually no, I'll keep it")
KEEP_AS_IS = re.compile(r"\b(?:i'?ll|we'?ll|i will|we will|i'?d rather|let'?s) (?:keep|leave) (?:it|them|that|this)\b"
                        r"|\b(?:leave|keep|forget|drop|scrap) (?:it|that|them|this)(?: (?:as it is|as they are|then|"
                        r"for now))?\b|\bnever ?mind\b|\bnot (?:now|today)\b|\bhold off\b|\bdon'?t bother\b"
                        r"|\bchanged my mind\b", re.I)


def says_more(text: str) -> bool:
    """Does a reply that is no yes say more than no ("wait no, it's the debit one, 6045", "no, make it 4
    people", "what's the fee?")?  Such a reply is a turn of its own (a correction, a question), not only a
    refusal; "no", "no thanks, don't", "hmm no, leave it", "actually no, I'll keep it" is only one."""
    if confirms(text):
        return False
    rest = KEEP_AS_IS.sub(" ", DISCOURSE.sub("", text or ""))
    said = set(words(rest)) - FILLERS - REFUSE_WORDS - CONFIRM_WORDS
    return bool(said) or "?" in (text or "")


def lower_first(text: str) -> str:
    """A title inside a sentence: "Reserve a hotel room" -> "reserve a hotel room"."""
    return text[:1].lower() + text[1:]


def humanize(name: str) -> str:
    """An identifier as words for people: ``check_availability`` -> ``check availability``."""
    return split_identifier(name).strip().lower()


def render_value(v: Any) -> str:
    """Lists and records rendered for people: "A, B and C"; records by their name."""
    if isinstance(v, dict):
        for key in ("name", "Name", "title", "id"):
            if key in v:
                return str(v[key])
        return ", ".join(f"{k}: {render_value(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        items = [render_value(x) for x in v]
        if not items:
            return "none"
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))  # "€260", not "€260.0"
    return str(v)


LETTER_RUN = re.compile(r"[^\W\d_]+")  # words in any script: runs of letters
LONGEST_WORD = 40  # no word of any language in use is longer; a longer run is a key held down or data


def reads_as_language(text: str, known: Callable[[str], bool], *, expecting_value: bool = False) -> bool:
    """Is ``text`` a message in words, rather than nothing, noise or pasted data?

    Generic and structural: text that is empty once normalised, has neither letters nor digits, parses
    as a JSON object or array, or holds a letter run longer than ``LONGEST_WORD`` is not language; nor is
    text without digits none of whose words (two letters or more) is ``known`` (the caller's vocabulary: the library's
    words and the common words of a language model's vocabulary) — unless the agent is waiting for a
    value (``expecting_value``), where a name or code the vocabulary cannot know is a fair answer."""
    stripped = text.strip()
    if not stripped or not any(ch.isalnum() for ch in stripped):
        return False
    if stripped[0] in "{[" and stripped[-1] in "}]":
        try:
            if isinstance(json.loads(stripped), (dict, list)):
                return False
        except ValueError:
            pass
    runs = LETTER_RUN.findall(stripped.lower())
    if any(len(r) > LONGEST_WORD for r in runs):
        return False
    if re.search(r"\d", stripped):
        return True  # a number, date or reference (ORD-7003) says something whatever its words
    candidates = [r for r in runs if len(r) >= 2]
    if not candidates:
        return expecting_value and len(runs) <= 3  # a one-letter answer ("y") to a question
    return expecting_value or any(known(r) for r in candidates)
