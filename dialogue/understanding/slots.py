"""Slot filling for the offline executor: values for a workflow's slots from one user message.

Typed values (integers incl. number words, booleans, dates, times, datetimes), enums by fuzzy
matching (difflib + token overlap, also on normalised times/numbers), entity patterns (order ids,
emails, phone numbers), ordinal references to the last listed results ("the second one"), several
slots in one message, and — for the slot the agent just asked for — a free string (the reply minus
filler words).  A slot's kind comes from its type, refined by its name/description ("Date and
time" on a string slot is a datetime).  ``fill_slots`` returns values with a confidence each.
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
import re
from dataclasses import dataclass, field
from typing import Any

from workflows.pdl import Slot, Workflow
from workflows.semantics import result_polarity
from workflows.text import FILLERS, STOPWORDS, content_words, stemmed, yes_no
from workflows.text import NUMBER_WORDS as text_numbers

from .enums import option_text, read_answer
from .spans import Target, load_spans, slot_words

NUMBER_WORDS = {**text_numbers, "a couple": 2, "couple": 2, "single": 1, "thirty": 30, "forty": 40, "fifty": 50}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000}
ORDINALS = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4,
            "fifth": 5, "5th": 5, "last": -1}
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]
FILLER = re.compile(
    r"^(?:(?:yes|yeah|sure|ok|okay|well|um|uh|hi|hello|so)[,.!]?\s+)*(?:(?:it'?s|it is|that'?s|that is|"
    r"that would be|that'?d be|my \w+ is|the \w+ is|i am|i'm|this is|call me|i'?d like|i would like|i want|"
    r"i need|please|under|for|at|to|in|on)\s+)*",
    re.I)
QUESTION = re.compile(r"\?\s*$|^(?:what|how|why|when|where|who|which|can you|could you|do you|does|is there|are there"
                      r"|will you|tell me)\b", re.I)


@dataclass
class Filled:
    values: dict[str, Any] = field(default_factory=dict)
    confidence: dict[str, float] = field(default_factory=dict)
    yesno: bool | None = None  # the message read as a yes/no reply
    is_question: bool = False  # the user asked something (maybe out of the workflow)

    def set(self, slot: str, value: Any, conf: float) -> None:
        if slot not in self.values or conf > self.confidence.get(slot, 0):
            self.values[slot], self.confidence[slot] = value, conf


_QUOTED = re.compile(r"[\"“]([^\"“”]+)[\"”]")
_NORMAL_FORM = re.compile(r"(?:\d{4}-\d{2}-\d{2}|(?:mon|tues|wednes|thurs|fri|satur|sun)day)(?:[ T]\d{1,2}:\d{2})?"
                          r"|\d{1,2}:\d{2}", re.I)  # what find_date / find_time return


def _written_form(slot: Slot) -> bool:
    """The slot is free text whose own quoted example is written other than in our normal form of a date
    or time (``e.g. "November 8, 2044"``, ``"2024/3/27"``, ``"12:00 on the 19th"``): its tool takes the
    value as people write it."""
    if slot.type != "string":
        return False
    return any(re.search(r"\d", ex) and not _NORMAL_FORM.fullmatch(ex.strip())
               for ex in _QUOTED.findall(slot.description or ""))


def _as_said(slot: Slot, text: str, found: list[tuple[str, tuple[int, int]]]) -> str | None:
    """The words a date/time was said in, for a slot whose tool takes it as written (``_written_form``).
    None otherwise, and for a relative date ("tomorrow": no digit), whose normal form is what it means."""
    if not found or not _written_form(slot):
        return None
    spans = sorted(x[1] for x in found)
    if len(spans) == 2 and spans[1][0] - spans[0][1] > 4:  # far apart: each part as said
        said = " ".join(text[a:b].strip(" ,.;") for a, b in spans)
    else:  # "12:30 on February 21, 2050" as one phrase
        said = text[spans[0][0]:spans[-1][1]].strip(" ,.;")
    return said if re.search(r"\d", said) else None


# The kinds of value that say who the user is or what they refer to (a customer number, an order's reference,
# an email): a new task of the same conversation starts with them (``ApplyEnv.carries``); a preference (a date,
# a party size, a reason) is the task's own.
CARRIED_KINDS = frozenset({"id", "email", "phone"})


def slot_kind(slot: Slot) -> str:
    """The effective kind of a slot; string slots are refined by their name and description."""
    if slot.enum:
        return "enum"
    if slot.type != "string":
        return slot.type
    text = f"{slot.name} {slot.description}".lower().replace("_", " ")
    example = _EXAMPLES.search(slot.description or "")
    # "Email type, e.g. Tencent Mail" names an email but holds no address: its example says so
    if re.search(r"\bemail\b", text) and (example is None or "@" in example.group(1)):
        return "email"
    if re.search(r"\bphone\b|\bmobile\b", text):
        return "phone"
    if re.search(r"\b(?:id|number|code|reference)\b", text) and re.search(r"\b(?:order|booking|account|reference|id|"
                                                                      r"confirmation|ticket)\b", text):
        return "id"
    has_date = re.search(r"\b(?:date|day)\b", text)
    has_time = re.search(r"\btime\b|\bwhen\b", text)
    if has_date and has_time:
        return "datetime"
    if has_date:
        return "date"
    if has_time:
        return "time"
    # a place is no person, whatever words explain its format ("The location where the user wants ...
    # City + Road name + Road number"): what the slot is shows in its name and first clause
    label = f"{slot.name} {re.split(r'[.,;(]', slot.description or '')[0]}".lower().replace("_", " ")
    place = re.search(r"locat|address|destination|position|place\b", label)
    if not place and re.search(r"\bname\b", text) and re.search(
            r"\b(?:customer|full|your|user|guest|client|person|caller|passenger|renter|patient|host|holder|first|"
            r"last|my)\b", text):
        return "person"
    if re.search(r"\b(?:how many|number of|size|count|quantity|guests|people|party)\b", text):
        return "integer"
    return "string"


# --- what values fit a slot ------------------------------------------------------------------------
# A slot's values are constrained by what its PDL says: its examples ("Customer number, e.g. C-1001":
# a letter prefix and digits), a digit count in its description ("4-digit PIN", "last 4 digits of the
# card") and the JSON schemas of the API parameters it is passed to (minimum, maximum, minLength,
# maxLength, pattern).  A value is only taken for a slot it fits, so a transaction id is never a
# customer number and "4" (of "4-digit") is never a PIN.
_EXAMPLES = re.compile(r"\b(?:e\.\s?g\.?|for example|for instance|such as|like)\s*:?\s*(.+)$", re.I)
_EXAMPLE_TOKEN = re.compile(r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]*[A-Za-z0-9](?![\w-])")
_DIGIT_COUNT = re.compile(r"\b(\d{1,2})[- ]digits?\b|\blast\s+(\d{1,2})\s+digits\b", re.I)


def _shape(token: str) -> str:
    """An example's shape: its letters and separators as they are, each run of digits any digits."""
    return "".join(r"\d+" if part[0].isdigit() else re.escape(part) for part in re.findall(r"\d+|\D+", token))


@dataclass(frozen=True)
class SlotFit:
    """The constraints a slot's values must meet (each None when the PDL states none)."""

    shape: re.Pattern | None = None  # any of the description's examples' shapes
    prefixes: tuple[str, ...] = ()  # the examples' leading letters and separator ("ORD-" of "ORD-7001")
    digits: int | None = None  # exactly this many digits
    minimum: float | None = None
    maximum: float | None = None
    min_len: int | None = None
    max_len: int | None = None
    pattern: re.Pattern | None = None

    def shaped(self, value: Any, *, whole: bool = True) -> bool:
        """``value`` has the shape of one of the slot's examples (``whole=False``: holds one)."""
        text = str(value).strip()
        return self.shape is not None and bool(self.shape.fullmatch(text) if whole else self.shape.search(text))

    def ok(self, value: Any, *, whole: bool = True, shape: bool = True) -> bool:
        """``value`` meets every constraint (``shape=False``: every one but the examples' shape, which
        is a preference: "A1234" may still be an order number whose example is "ORD-7001")."""
        text = str(value).strip()
        if shape and self.shape is not None and not self.shaped(text, whole=whole):
            return False
        if self.digits is not None and not re.fullmatch(rf"\d{{{self.digits}}}", text):
            return False
        if self.minimum is not None or self.maximum is not None:
            try:
                num = float(text)
            except ValueError:
                num = None
            if num is not None and ((self.minimum is not None and num < self.minimum)
                                    or (self.maximum is not None and num > self.maximum)):
                return False
        if (self.min_len is not None and len(text) < self.min_len) or \
                (self.max_len is not None and len(text) > self.max_len):
            return False
        if self.pattern is not None and not self.pattern.search(text):
            return False
        return True


def slot_fit(slot: Slot, workflow: Workflow | None = None) -> SlotFit:
    """The constraints on ``slot``'s values from its description and the API parameters it feeds."""
    shapes: list[str] = []
    digits = None
    tokens: list[str] = []
    if slot.type in ("string", "integer", "number") and not slot.enum:
        if m := _EXAMPLES.search(slot.description or ""):
            # dates, times, plain numbers and ordinals ("the 19th", "4th floor") carry no shape
            tokens = [t for t in _EXAMPLE_TOKEN.findall(m.group(1))
                      if not re.fullmatch(r"[\d:.-]+|\d+(?:st|nd|rd|th)", t, re.I)]
            shapes = [_shape(t) for t in tokens]
        if m := _DIGIT_COUNT.search(slot.description or ""):
            digits = int(m.group(1) or m.group(2))
            examples = re.findall(r"(?<!\d)\d{4,}(?!\d)", (_EXAMPLES.search(slot.description or "") or m).group(0))
            if any(len(e) != digits for e in examples):
                digits = None  # the description's own example disagrees with its count: trust neither
    bounds: dict[str, Any] = {}
    for api in (workflow.apis if workflow is not None else []):
        spec = (api.parameters.get("properties") or {}).get(slot.name)
        if not isinstance(spec, dict):
            continue
        for key, name in (("minimum", "minimum"), ("maximum", "maximum"), ("minLength", "min_len"),
                          ("maxLength", "max_len")):
            if isinstance(spec.get(key), (int, float)) and not isinstance(spec.get(key), bool):
                bounds.setdefault(name, spec[key])
        if isinstance(spec.get("pattern"), str):
            try:
                bounds.setdefault("pattern", re.compile(spec["pattern"]))
            except re.error:
                pass  # the validator reports a bad pattern; slot filling does not guess
    shape = re.compile("|".join(f"(?:{s})" for s in dict.fromkeys(shapes)), re.I) if shapes else None
    prefixes = tuple(dict.fromkeys(m.group(0) for t in tokens if (m := re.match(r"[A-Za-z]+[-_]?(?=\d+$)", t))))
    return SlotFit(shape=shape, prefixes=prefixes, digits=digits, **bounds)


_REFERENCE = re.compile(r"(?<![\w-])([A-Za-z]+[-_])\d+(?![\w-])")


def value_labels(text: str, workflows, active: Workflow | None = None) -> list[str]:
    """What the references in ``text`` are, by the slots whose examples write them so ("ORD-7003" -> "Order
    number" of "Order number, e.g. ORD-7001"; "B-1008" -> "Booking reference"): the search can then meet the
    workflows that take them, where the reference's own characters say nothing.  ``workflows``: the
    library's.  A reference whose prefix several slots' examples write gives each of their labels; none the
    ``active`` workflow's slots give too (its customer number says nothing against the task under way, and may
    answer it)."""
    said = {m.group(1).lower() for m in _REFERENCE.finditer(text or "")}
    if not said:
        return []

    def labels_in(wfs) -> dict[str, None]:
        out: dict[str, None] = {}
        for wf in wfs:
            for slot in wf.slots:
                if said & {p.lower() for p in slot_fit(slot, wf).prefixes}:
                    out[_EXAMPLES.sub("", slot.description or "").strip(" ,;:(") or slot.name.replace("_", " ")] = None
        return out

    own = labels_in([active]) if active is not None else {}
    return [label for label in labels_in(workflows) if label not in own]


# --- typed extractors: each returns (value, span) or None ---------------------------------------
# am/pm, or the part of the day said in words ("seven in the evening", "9 in the morning")
_AMPM = r"(?P<ap>a\.?m\.?|p\.?m\.?|in the (?:morning|afternoon|evening)|at night)"
_TIME = re.compile(r"\b(?:(?P<h>[01]?\d|2[0-3])(?:[:.](?P<m>[0-5]\d))?\s*" + _AMPM + r"|(?P<h2>[01]?\d|2[0-3]):"
                   r"(?P<m2>[0-5]\d)|(?:at|@)\s+(?P<h3>1[0-2]|[1-9])(?![:.]?\d|\s*(?:people|persons|guests|of|pm|am|p\.m|a\.m)))\b"
                   r"|\b(?P<noon>noon|midday|midnight)\b"
                   # "12.30", "7.45": a dotted clock time, never an amount ("€12.30", "12.30 euros") or a date
                   r"|(?<![\d€$£.,])(?P<h4>[01]?\d|2[0-3])\.(?P<m4>[0-5]\d)"
                   r"(?!\d|[.,]\d|\s*(?:euros?|eur|dollars?|pounds?|quid|%|percent)\b)", re.I)


_HOUR_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
_HOUR = r"(?P<h>1[0-2]|[1-9]|" + "|".join(_HOUR_WORDS) + r")"
# "half past seven", "quarter to 8 pm", the British "half seven" (half past): minutes in words before an hour
_SAID_TIME = re.compile(r"\b(?:(?P<part>half)\s+(?:(?P<rel>past)\s+)?|(?P<quarter>(?:a\s+)?quarter)\s+(?P<qrel>past|to)\s+)"
                        + _HOUR + r"\b(?:\s*" + _AMPM + ")?", re.I)
_MINUTE_WORDS = {"o'clock": 0, "oclock": 0, "o clock": 0, "oh five": 5, "ten": 10, "fifteen": 15, "twenty": 20,
                 "thirty": 30, "forty": 40, "forty five": 45, "forty-five": 45, "fifty": 50}
# an hour in words with its minutes or the part of the day: "seven thirty pm", "seven in the evening",
# "at eight o'clock" (a bare "seven" stays a number)
_WORD_TIME = re.compile(r"\b(?P<at>(?:at|@)\s+)?(?P<hw>" + "|".join(_HOUR_WORDS) + r")(?:[\s-]+(?P<mw>"
                        + "|".join(sorted(map(re.escape, _MINUTE_WORDS), key=len, reverse=True)) + r"))?\b(?:\s*"
                        + _AMPM + r")?", re.I)


def _clock(h: int, minutes: int, ap: str | None) -> str:
    """HH:MM of an hour said on a 12-hour clock; without am/pm, business hours: 1..8 are the afternoon
    and evening ("at 8" books dinner), 9..12 the morning and noon."""
    if ap:
        h = (h % 12) + (0 if re.match(r"a\.?m|in the morning", ap, re.I) else 12)
    elif h <= 8:
        h += 12
    return f"{h:02d}:{minutes:02d}"


def _hour(word: str) -> int:
    return int(word) if word.isdigit() else _HOUR_WORDS.index(word.lower()) + 1


def _said_time(m: re.Match) -> str:
    h = _hour(m.group("h"))
    minutes = 30 if m.group("part") else 15
    if (m.group("qrel") or "").lower() == "to":
        h, minutes = (h - 1) or 12, 60 - minutes
    return _clock(h, minutes, m.group("ap"))


def nearer_half_day(value: Any, old: Any, message: str) -> Any:
    """A new clock time said without am/pm, read in the half of the day nearer the time it replaces ("make it
    8:30 instead" for a dinner at 20:00 is 20:30, not 08:30); any other value as it is."""
    if not (isinstance(value, str) and isinstance(old, str) and _CLOCK.fullmatch(value) and _CLOCK.fullmatch(old)):
        return value
    h, was = int(value[:2]), int(old[:2])
    if 1 <= h <= 11 and was >= 12 and abs(h + 12 - was) < abs(h - was) and not re.search(_AMPM, message, re.I):
        return f"{h + 12:02d}{value[2:]}"
    return value


_CLOCK = re.compile(r"\d{2}:\d{2}")


def find_time(text: str) -> tuple[str, tuple[int, int]] | None:
    if said := _SAID_TIME.search(text):
        return _said_time(said), said.span()
    m = _TIME.search(text)
    words = next((w for w in _WORD_TIME.finditer(text) if w.group("ap") or w.group("mw") and (
        w.group("at") or _MINUTE_WORDS[w.group("mw").lower()] == 0)), None)
    if words and (not m or words.start() < m.start()):
        return _clock(_hour(words.group("hw")), _MINUTE_WORDS.get((words.group("mw") or "").lower(), 0),
                      words.group("ap")), words.span()
    if not m:
        return None
    if m.group("noon"):
        return ("00:00" if m.group("noon").lower() == "midnight" else "12:00"), m.span()
    if m.group("h") is not None:
        h, mi = int(m.group("h")), int(m.group("m") or 0)
        return _clock(h, mi, m.group("ap")) if h <= 12 else f"{h:02d}:{mi:02d}", m.span()
    if m.group("h2") is not None:
        return f"{int(m.group('h2')):02d}:{m.group('m2')}", m.span()
    if m.group("h4") is not None:
        return f"{int(m.group('h4')):02d}:{m.group('m4')}", m.span()
    return _clock(int(m.group("h3")), 0, None), m.span()  # "at 7"


_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# "December 10", "10 December", "10th of Dec", each with an optional year ("December 10, 2026"): the year
# belongs to the date (never a party size)
_MONTH_DAY = re.compile(r"(?:\b(" + "|".join(m[:3] for m in MONTHS) + r")[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?\b"
                        r"|\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(" + "|".join(m[:3] for m in MONTHS) + r")[a-z]*\b)"
                        r"(?:,?\s+(?P<year>\d{4})\b)?", re.I)
# a day of the month alone, said as an ordinal: "on the 6th", "the 21st" (not "the 2nd one" of a list)
_DAY_ONLY = re.compile(r"\bthe\s+(\d{1,2})(?:st|nd|rd|th)\b(?!\s+ones?\b)", re.I)
_NUMERIC_DATE = re.compile(r"(?<![\d/.-])(\d{1,2})[/.](\d{1,2})[/.](\d{4}|\d{2})(?![\d/.]\d)")
_IN_DAYS = re.compile(r"\bin\s+(an?|\d{1,2}|" + "|".join(list(NUMBER_WORDS)[:21]) + r")\s+(days?|weeks?)\b", re.I)
_REL = re.compile(r"\b(today|tonight|tomorrow|day after tomorrow|" + "|".join(WEEKDAYS) + r")\b", re.I)


def in_declared_form(slot: Slot, value: str, today: dt.date | None = None) -> str:
    """A weekday as the date it means (the next one, today included, as the desk's tools read it) for a slot
    whose description declares the YYYY-MM-DD form ("Day of the meal, YYYY-MM-DD"); else as it is."""
    day = value.lower()
    if day not in WEEKDAYS or not re.search(r"\bYYYY-MM-DD\b", slot.description or "", re.I):
        return value
    today = today or dt.date.today()
    return (today + dt.timedelta(days=(WEEKDAYS.index(day) - today.weekday()) % 7)).isoformat()


def find_date(text: str, today: dt.date | None = None) -> tuple[str, tuple[int, int]] | None:
    today = today or dt.date.today()
    if m := _ISO.search(text):
        return m.group(0), m.span()
    if m := _NUMERIC_DATE.search(text):  # "12/04/1988": day first, unless the day cannot be one
        a, b, year = int(m.group(1)), int(m.group(2)), int(m.group(3))
        day, month = (b, a) if b > 12 >= a else (a, b)
        year += 0 if year >= 100 else (2000 if 2000 + year <= today.year + 10 else 1900)
        try:
            return dt.date(year, month, day).isoformat(), m.span()
        except ValueError:
            pass
    if m := _IN_DAYS.search(text):  # "in two days", "in a week"
        n = 1 if m.group(1).lower() in ("a", "an") else (int(m.group(1)) if m.group(1).isdigit()
                                                         else NUMBER_WORDS.get(m.group(1).lower(), 0))
        if n:
            return (today + dt.timedelta(days=n * (7 if m.group(2).lower().startswith("week") else 1))).isoformat(), \
                m.span()
    if m := _MONTH_DAY.search(text):
        mon = m.group(1) or m.group(4)
        day = int(m.group(2) or m.group(3))
        month = [x[:3] for x in MONTHS].index(mon[:3].lower()) + 1
        year = int(m.group("year")) if m.group("year") else \
            today.year + (1 if (month, day) < (today.month, today.day) else 0)
        try:
            return dt.date(year, month, day).isoformat(), m.span()
        except ValueError:
            return None
    if m := _DAY_ONLY.search(text):  # the next such day, this month or the next
        day = int(m.group(1))
        for ahead in range(3):
            month = (today.month - 1 + ahead) % 12 + 1
            year = today.year + (today.month - 1 + ahead) // 12
            try:
                found = dt.date(year, month, day)
            except ValueError:
                continue
            if found >= today:
                return found.isoformat(), m.span()
        return None
    if m := _REL.search(text):
        word = m.group(1).lower()
        if word in ("today", "tonight"):
            return today.isoformat(), m.span()
        if word == "tomorrow":
            return (today + dt.timedelta(days=1)).isoformat(), m.span()
        if word == "day after tomorrow":
            return (today + dt.timedelta(days=2)).isoformat(), m.span()
        return word.capitalize(), m.span()  # a weekday stays a weekday: the tools resolve it
    return None


# a stay or period said by its ends: "from the 10th to the 13th of december", "between May 3 and May 5"
_RANGE = re.compile(r"\b(?:from|between)\s+(?P<a>[\w ,./-]{1,30}?)\s*(?:\s[-–]\s|\bto\b|\buntil\b|\btill\b|\bthrough\b|\band\b)"
                    r"\s*(?P<b>[\w ,./-]{1,30})", re.I)
# ... or by the arrival and the departure ("checking in on 1 December and leaving on the 4th")
_STAY = re.compile(r"\b(?:check(?:ing)?[- ]?in|arriv(?:e|ing))\s+(?:on\s+)?(?P<a>[\w ,./-]{1,30}?)\s*(?:,|\band\b)?\s*"
                   r"(?:then\s+)?(?:leav(?:e|ing)|check(?:ing)?[- ]?out|depart(?:ing)?|go(?:ing)? home)\s+(?:on\s+)?"
                   r"(?P<b>[\w ,./-]{1,30})", re.I)
_BARE_DAY = re.compile(r"(?:the\s+)?(\d{1,2})(?:st|nd|rd|th)?", re.I)


def find_range(text: str, today: dt.date | None = None) -> tuple[dt.date, dt.date, tuple[int, int]] | None:
    """A period said by its first and last day (start, end, span); the first end may be a bare day that
    takes the last one's month ("from the 10th to the 13th of december")."""
    for m in [*_RANGE.finditer(text), *_STAY.finditer(text)]:
        end = find_date(m.group("b"), today)
        if not end or m.group("b")[:end[1][0]].strip().lower() not in ("", "the") or not _ISO.fullmatch(end[0]):
            continue
        last = dt.date.fromisoformat(end[0])
        first = None
        if bare := _BARE_DAY.fullmatch(m.group("a").strip()):
            day = int(bare.group(1))
            month_start = last.replace(day=1) if day <= last.day else (last.replace(day=1) - dt.timedelta(days=1))
            try:
                first = month_start.replace(day=day)
            except ValueError:
                continue
        elif (start := find_date(m.group("a"), today)) and _ISO.fullmatch(start[0]):
            first = dt.date.fromisoformat(start[0])
        if first is not None and first < last:
            return first, last, (m.start(), m.start("b") + end[1][1])
    return None


# A number on its own: not the digits of an identifier, a date, a time or a compound word ("C-1003",
# "2026-12-19", "19:30", "4-digit", "NW2"), which are never a count or an amount.
_INT = re.compile(r"(?:\b(?:party of|table for|group of|for)\s*)?(?<![\w:./-])(\d+|" + "|".join(
    sorted((re.escape(w) for w in NUMBER_WORDS), key=len, reverse=True)) + r")(?![\w:/-]|[.,]\d)"
    r"(?:\s*(?:people|persons|guests|adults|tickets|rooms|nights|of us))?", re.I)
_STRONG = re.compile(r"people|persons|guests|party|table|group|of us|adults", re.I)


_UNIT = "|".join(w for w in NUMBER_WORDS if " " not in w and NUMBER_WORDS[w] < 20 and w not in ("single", "couple"))
_NUMBER_WORD = rf"(?:{_UNIT}|{'|'.join(_TENS)}|{'|'.join(_SCALES)})"
# a number said in several words: "two hundred and fifty", "twenty-five", "a hundred", "three thousand"
_WORD_RUN = re.compile(rf"\b(?:(?:a|one)\s+(?=hundred|thousand))?{_NUMBER_WORD}"
                       rf"(?:(?:\s+and\s+|[\s-]+){_NUMBER_WORD})*\b", re.I)


def _run_value(run: str) -> int | None:
    """The value of a number said in words ("two hundred and fifty" -> 250); None when the words do not
    make one number ("two three")."""
    total, current, last = 0, 0, None
    for tok in re.findall(r"[a-z]+", run.lower()):
        if tok == "and":
            continue
        if tok in _SCALES:
            current = max(current, 1) * _SCALES[tok]
            if tok == "thousand":
                total, current = total + current, 0
            last = "scale"
            continue
        value = 1 if tok == "a" else _TENS.get(tok, NUMBER_WORDS.get(tok))
        if value is None:
            return None
        # "two three" is two numbers; "twenty five" and "hundred and five" add up
        if last == "unit" or (last == "tens" and value >= 10):
            return None
        current += value
        last = "tens" if tok in _TENS else "unit"
    return total + current


def find_ints(text: str) -> list[tuple[int | str, tuple[int, int], bool]]:
    """Every stand-alone number in ``text``: (value, span, strong), strong when the words around it say
    it counts people ("a table for 4", "4 guests").  Digits with a leading zero stay text ("0456").  A
    number said in several words counts once, whole ("two hundred and fifty euros")."""
    out = []
    chars = list(text)
    for m in _WORD_RUN.finditer(text):
        if len(re.findall(r"[a-z]+", m.group(0).lower())) < 2 or (value := _run_value(m.group(0))) is None:
            continue
        a, b = m.span()
        out.append((value, (a, b), bool(_STRONG.search(text[b:b + 12]))))
        chars[a:b] = " " * (b - a)
    for m in _INT.finditer("".join(chars)):
        tok = m.group(1).lower()
        if tok == "one" and re.search(r"\b(?:which|this|that|the|each|every|any|no|another|other|a|quick)\s+"
                                      r"(?:[a-z]+\s+)?$", text[:m.start(1)], re.I):
            continue  # "which one is cheapest?", "a quick one first": a pronoun, not a number
        if tok == "one" and re.match(r"\s+(?:more|of|sec|second|moment|thing|question|last)\b", text[m.end(1):], re.I):
            continue  # "one more thing", "one of them", "one sec": a phrase of speech, no count
        value: int | str = (tok if tok.startswith("0") and len(tok) > 1 else int(tok)) if tok.isdigit() \
            else NUMBER_WORDS[tok]
        out.append((value, m.span(1), bool(_STRONG.search(m.group(0)))))
    return sorted(out, key=lambda f: f[1])


# A party said by its parts: "2 adults and 2 children", "me and my 3 kids" (the speaker counts too)
_PERSON_NOUN = r"(?:adult|grown-?up|child(?:ren)?|kid|teen(?:ager)?|infant|bab(?:y|ie)|toddler|friend|colleague|guest" \
               r"|person|people)s?"
_COUNTED = re.compile(r"(?<![\w:./-])(\d+|" + "|".join(sorted((re.escape(w) for w in NUMBER_WORDS), key=len, reverse=True))
                      + rf")\s+(?:(?:of\s+)?(?:my|our|their)\s+)?(?:[a-z]+\s+)?{_PERSON_NOUN}\b", re.I)
_AND = re.compile(r"\s*(?:,|\band\b|\bplus\b|\bwith\b|[+&])\s*(?:(?:and|my|our)\s+)*$", re.I)
# one person named by who they are to the speaker ("my husband", "our son"), and the speaker ("me", "... and I")
_RELATIVE = r"(?:husband|wife|partner|spouse|boyfriend|girlfriend|fianc[eé]e?|son|daughter|child|kid|baby|mum|mom|" \
            r"mother|dad|father|brother|sister|friend|colleague|boss|grand(?:ma|pa|mother|father|son|daughter)|" \
            r"aunt|uncle|cousin|niece|nephew|guest)"
_ONE = re.compile(rf"\b(?:my|our)\s+(?:[a-z]+\s+)?{_RELATIVE}\b(?!\s*(?:'s|s\b))|\b(?:me|myself)\b|(?<=\band )I\b", re.I)
_ALONE = re.compile(r"\b(?:(?:just|only)\s+(?:me|myself)|by myself|on my own|alone|solo)\b", re.I)  # a party of one


def find_party(text: str) -> tuple[int, tuple[int, int]] | None:
    """The size of a party said by its parts (value, span): counts of people and single people ("me",
    "my husband") joined by "and" or commas — "me and my 3 kids", "2 adults and 2 children", "me, my
    husband and our three kids"; the speaker alone ("just me").  None for a single count (``find_int``
    reads those) or a single person."""
    parts = sorted([(m, int(m.group(1)) if m.group(1).isdigit() else NUMBER_WORDS[m.group(1).lower()])
                    for m in _COUNTED.finditer(text)] + [(m, 1) for m in _ONE.finditer(text)],
                   key=lambda p: p[0].start())
    runs: list[list[tuple[re.Match, int]]] = []
    for m, n in parts:
        if runs and runs[-1][-1][0].end() <= m.start() and _AND.fullmatch(text[runs[-1][-1][0].end():m.start()]):
            runs[-1].append((m, n))
        elif not runs or runs[-1][-1][0].end() <= m.start():
            runs.append([(m, n)])
    for run in runs:
        if len(run) >= 2 and any(m.re is _COUNTED or m.group(0).lower() not in ("me", "myself", "i") for m, _ in run):
            return sum(n for _, n in run), (run[0][0].start(), run[-1][0].end())
    return (1, alone.span()) if (alone := _ALONE.search(text)) else None


def find_int(text: str, fits=None) -> tuple[int | str, tuple[int, int], bool] | None:
    """The number a count slot most likely means: the first one said as a count of people, else the first;
    ``fits`` (value -> bool) keeps only the numbers the slot can hold.  (value, span, said as a count)."""
    found = [f for f in find_ints(text) if fits is None or fits(f[0])]
    return next((f for f in found if f[2]), found[0] if found else None)


# A capitalised name word, accented Latin letters included ("Lucía", "Øyvind", "Šimon").
_UP, _LOW = "A-ZÀ-ÖØ-ÞĀ-ž", "a-zß-öø-ÿĀ-ž'-"
_NAME_WORD = f"(?-i:[{_UP}][{_LOW}]+)"
# lower-case particles inside a family name ("Pieter de Vries", "Ludwig van Beethoven", "Ana da Silva")
_PARTICLE = r"(?-i:(?:de|da|di|du|del|della|der|den|van|von|la|le|bin|ibn|al|el|dos|das|ten|ter)\s+)"
PERSON = re.compile(r"\b(?:my name is|my name's|name is|name's|i am|i'm|this is|call me|it's|under(?: the name(?: of)?)?|"
                    r"(?:in|by) the name(?: of)?|name:|named|name|booked (?:for|under))\s+"
                    rf"({_NAME_WORD}(?:\s+{_PARTICLE}{{0,2}}{_NAME_WORD}){{0,2}})", re.I)
# "... for Ada Lovelace": a weaker cue, only a first and last name both capitalised
PERSON_FOR = re.compile(rf"\bfor\s+({_NAME_WORD}(?:\s+{_NAME_WORD}){{1,2}})\b")
EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
PHONE = re.compile(r"(?<!\w)\+?\d[\d\s().-]{6,}\d\b")
ORDER_ID = re.compile(r"\b(?=[A-Z0-9-]*\d)[A-Z]{1,4}-?\d{3,}\b|\b\d{5,}\b")


_CUE_STOP = STOPWORDS | {"number", "e", "g"}  # words of a slot description that cue no number


def number_cues(slot: Slot) -> set[str]:
    """Words that name this number slot in a message ("PIN is 4821", "card ending in 4417")."""
    words = set(re.findall(r"[a-z]+", f"{slot.name} {slot.description}".lower().replace("_", " "))) - _CUE_STOP
    if re.search(r"last\s*\d|last \w+ digits", f"{slot.name} {slot.description}".lower().replace("_", " ")):
        words |= {"ending", "ends", "last"}
    words |= {w[:-1] for w in words if w.endswith("s") and len(w) > 3}
    return words


def cue_numbers(text: str, slots: list[Slot], fits: dict[str, SlotFit] | None = None
                ) -> dict[str, tuple[int | str, tuple[int, int]]]:
    """Numbers (digits or words) assigned to slots by the words that name them: a label between the
    number and the one before it ("PIN is 4821") or a unit just after it ("3 nights"); each number to at
    most one slot, and only to a slot whose constraints it meets.  A word between two numbers names one
    of them: the unit of the first when the second has a unit of its own ("three nights for 2 guests"),
    else the label of the second ("1357 card 1180": the card's digits, and an unlabelled PIN)."""
    cues = {s.name: number_cues(s) for s in slots}
    known = set().union(*cues.values()) if cues else set()

    def cued(word: str, names: set[str]) -> bool:
        return word in names or (word.endswith("s") and word[:-1] in names)

    found = find_ints(text)
    nums = [(value, span) for value, span, _ in found]
    later = bool(CORRECTION.search(text))
    units: list[tuple[str, int] | None] = []  # the word just after each number, when it names numbers
    for _, (_, b) in nums:
        m = re.match(r"\s*([a-z]+)", text[b:b + 20].lower())
        units.append((m.group(1), b + m.end()) if m and cued(m.group(1), known) else None)
    for i in range(len(nums) - 1):
        # the word leads into the next number: its label — not across a comma ("3 nights, 2"), nor when the next
        # number has its own unit ("3 nights 2 adults")
        if units[i] and units[i + 1] is None and not found[i + 1][2] \
                and not text[units[i][1]:nums[i + 1][1][0]].strip(" :"):
            units[i] = None
    scored = []
    for i, (value, (a, b)) in enumerate(nums):
        start = (units[i - 1] or (None, nums[i - 1][1][1]))[1] if i else 0
        # the label words since the last value said before it ("lost my card. C-1002 1357": the id between
        # "card" and 1357 ends what "card" names; a value already read is blanked out, a run of spaces)
        before = re.split(r"\S*\d\S*|\s{3,}", text[max(start, a - 40):a])[-1]
        words = re.findall(r"[a-z]+", before.lower())[-4:] + ([units[i][0]] if units[i] else [])
        for s in slots:
            if fits and s.name in fits and not fits[s.name].ok(value):
                continue
            if hits := sum(1 for w in words if cued(w, cues[s.name])):
                # of two values named alike, the first — unless the message corrects itself ("pin 7777... no
                # sorry my pin is 5602"): then the later one
                scored.append((hits, a if later else -a, s.name, value, (a, b)))
    out: dict[str, tuple[int | str, tuple[int, int]]] = {}
    used: set[tuple[int, int]] = set()
    for hits, _, name, value, span in sorted(scored, reverse=True):
        if name not in out and span not in used:
            out[name], _ = (value, span), used.add(span)
    if later:  # "card ending 4417 - no sorry, 9032": a number said as the one before it, after the correction
        for name, (value, (a, b)) in list(out.items()):
            fix = next((m for m in CORRECTION.finditer(text) if m.start() >= b), None)
            again = [(v, sp) for v, sp in nums if fix and sp[0] >= fix.end() and sp not in used
                     and len(str(v)) == len(str(value)) and (not fits or name not in fits or fits[name].ok(v))]
            if len(again) == 1:
                out[name] = again[0]
                used.add(again[0][1])
    return out


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


# everyday words for common enum option words ("I ordered the wrong size" -> ordered_by_mistake)
ENUM_LEXICON = {
    "mistake": {"wrong", "mistake", "mistakenly", "accident", "accidentally", "duplicate", "twice", "error"},
    "slow": {"long", "slow", "late", "delayed", "delay", "forever", "ages"},
    "cheaper": {"cheaper", "cheap", "elsewhere", "price", "less"},
    "stolen": {"stole", "stolen", "theft", "robbed", "pickpocketed", "nicked", "swiped", "snatched", "mugged"},
    "lost": {"lose", "lost", "misplaced"},
    "compromised": {"compromised", "skimmed", "hacked", "cloned"},
    "faulty": {"broken", "damaged", "defective", "cracked", "malfunctioning"},
    "mind": {"mind"},
    "sms": {"text", "texts", "texting"},  # "text me": a text message
}


def _lexicon_hit(option: str, words: set[str]) -> bool:
    """An option word's everyday synonym appears in the message (only words the lexicon knows)."""
    return any(words & ENUM_LEXICON[w] for w in _tokens(option) if w in ENUM_LEXICON and w not in STOPWORDS)


# Prepositions that give a value a direction ("from my savings into checking"); a slot whose name says one
# direction ("from_account", "to_city") does not take a value said with the other.
_DIRECTIONS = {"from": "from", "out": "from", "to": "to", "into": "to", "onto": "to"}
_DIRECTED = re.compile(r"\b(from|out of|to|into|onto)\s+(?:(?:my|the|your|our|their|his|her|a|an)\s+)?"
                       r"(?:(?!(?:from|out|to|into|onto)\b)[\w'-]+\s*){1,3}", re.I)


def other_direction_blanked(text: str, slot: Slot) -> str:
    """``text`` with the values said in the direction opposite to the slot's own blanked out."""
    own = {_DIRECTIONS[w] for w in slot.name.lower().split("_") if w in _DIRECTIONS}
    if len(own) != 1:
        return text
    (direction,) = own
    chars = list(text)
    for m in _DIRECTED.finditer(text):
        if _DIRECTIONS[m.group(1).lower().split()[0]] != direction:
            a, b = m.span()
            chars[a:b] = " " * (b - a)
    return "".join(chars)


def negated_blanked(text: str, slot: Slot) -> str:
    """``text`` with the options it says are not meant blanked out ("savings not checking", "the faulty one,
    not the wrong item", "instead of checking"): a correction names the new value beside the old."""
    options = sorted((o for o in slot.enum or [] if o.strip()), key=len, reverse=True)
    if not options:
        return text
    said = "|".join(re.escape(option_text(o)) for o in options)
    pattern = rf"\b(?:not|instead of|rather than|isn'?t|wasn'?t)\s+(?:(?:the|my|a|an|from|in|to)\s+)?(?:{said})\b"
    return re.sub(pattern, lambda m: " " * len(m.group(0)), text, flags=re.I)


_QUANTIFIERS = frozenset({"any", "all", "both", "either", "every", "none", "some"})


def match_enum(text: str, options: list[str], *, whole: bool = False,
               today: dt.date | None = None) -> tuple[str, float] | None:
    """Best enum option mentioned in ``text``: exact phrase, normalised time/number, token overlap or difflib."""
    low = " " + " ".join(_tokens(text)) + " "
    best: tuple[str, float] | None = None
    t_time = find_time(text)
    # relative dates against weekday options ("tomorrow" -> "Sunday")
    if {o.lower() for o in options} & set(WEEKDAYS) and not any(f" {w} " in low for w in WEEKDAYS):
        d = find_date(text, today)
        if d and re.fullmatch(r"\d{4}-\d{2}-\d{2}", d[0]):
            day = WEEKDAYS[dt.date.fromisoformat(d[0]).weekday()]
            hit = next((o for o in options if o.lower() == day), None)
            if hit:
                return hit, 0.9
    for opt in options:
        o = " ".join(_tokens(opt))
        if not o:
            continue
        score = 0.0
        if f" {o} " in low:
            # a quantifier option said before a noun ("any french restaurants by the harbour") qualifies
            # the noun: it yields to an option said as itself
            score = 0.6 if o in _QUANTIFIERS and re.search(rf" {o} [a-z]", low) else 1.0
        else:
            o_time = find_time(opt)
            if t_time and o_time and t_time[0] == o_time[0]:
                score = 0.95
            else:
                ot, tt = set(o.split()), set(low.split())
                overlap = len(ot & tt) / len(ot)
                ratio = max((difflib.SequenceMatcher(None, o, " ".join(low.split()[i:i + len(ot)])).ratio()
                             for i in range(max(1, len(low.split()) - len(ot) + 1))), default=0)
                score = max(overlap * 0.85 if overlap >= 0.5 else 0, ratio * 0.9 if ratio >= 0.8 else 0)
                # every content word of a several-word option, in another form ("damaged when it arrived" for
                # damaged_on_arrival, "I no longer need it" for no_longer_needed)
                own, said = content_words(o), stemmed(content_words(low))
                if len(own) >= 2 and all(stemmed({w}) & said for w in own):
                    score = max(score, 0.8)
                if whole:  # the reply is only the value: compare it whole
                    score = max(score, difflib.SequenceMatcher(None, o, low.strip()).ratio() * 0.9)
        if score < 0.7 and _lexicon_hit(opt, set(low.split())):
            score = 0.7
        if score > (best[1] if best else 0.5):
            best = (opt, score)
    return best


def ordinal_pick(text: str, items: list[Any] | None) -> Any:
    if not items:
        return None
    m = re.search(r"\b(?:the\s+)?(" + "|".join(ORDINALS) + r")\b(?:\s+(?:one|option|choice|item))?", text.lower())
    if not m:
        return None
    k = ORDINALS[m.group(1)]
    idx = len(items) - 1 if k == -1 else k - 1
    return items[idx] if 0 <= idx < len(items) else None


def _item_value(item: Any, slot: str) -> Any:
    if isinstance(item, dict):
        for key in (slot, "name", "Name", "id", "title"):
            if key in item:
                return item[key]
        return next(iter(item.values()), None)
    return item


def clean_free_text(text: str) -> str:
    t = text.strip().strip(".!")
    t = FILLER.sub("", t).strip(" ,.!")
    return t


def bare_answer(message: str, option: str, pending: list[str], kinds: dict[str, str], found: dict) -> bool:
    """The message is nothing but ``option`` while a free-text slot is asked: the reply answers the
    question, whatever unasked enum option it also spells."""
    if not any(kinds.get(p) in ("string", "person") and p not in found for p in pending):
        return False
    said = set(_tokens(clean_free_text(message)))
    return bool(said) and said <= set(_tokens(option))


def _length_slots(workflow: Workflow, kinds: dict[str, str]) -> list[str]:
    """The count slots that hold a length of time in nights or days (a stay, a rental)."""
    return [s.name for s in workflow.slots if kinds[s.name] == "integer"
            and re.search(r"\b(?:nights?|days?)\b", f"{s.name} {s.description}".replace("_", " "), re.I)]


_WEEKS = re.compile(r"\bfor\s+(an?|\d|one|two|three|four)\s+(weeks?|fortnight)\b", re.I)
# an amount written as money: a currency sign, cents or a thousands "k" ("€75.50", "1.5k", "$1,200")
_AMOUNT = re.compile(r"(?<![\w:.,/-])(?P<cur>[€$£]\s?)?(?P<n>\d{1,3}(?:,\d{3})+|\d+)(?P<dec>[.,]\d+)?(?:\s?(?P<k>k)\b)?"
                     r"(?![\w:/-]|[.,]\d)", re.I)


def find_amount(text: str) -> tuple[int | float, tuple[int, int]] | None:
    """The first number written as money (value, span); a plain number is not (``find_int`` reads it)."""
    for m in _AMOUNT.finditer(text):
        if not (m.group("cur") or m.group("dec") or m.group("k") or "," in m.group("n")):
            continue
        value = float(m.group("n").replace(",", "") + (m.group("dec") or "").replace(",", ".")) * (1000 if m.group("k") else 1)
        return (int(value) if value.is_integer() else round(value, 2)), m.span()
    return None


def fill_slots(message: str, workflow: Workflow, *, pending: list[str] | None = None,
               last_items: list[Any] | None = None, today: dt.date | None = None,
               missing: list[str] | None = None, embed=None) -> Filled:
    """Slot values found in ``message``; ``pending`` are the slots the agent just asked for; ``missing``
    (when known) the slots the conversation has no value for yet — a name the user volunteers beside
    the asked values may fill the only free-text one among them (``volunteered_name``); ``embed`` (the
    library's sentence embeddings) reads an asked enum option said in other words (``enums``)."""
    pending = [p for p in (pending or []) if workflow.slot(p)]
    out = Filled(yesno=yes_no(message), is_question=bool(QUESTION.search(message.strip())))
    text = message
    # remove spans as they are used so "at 7" is not also a party size
    used: list[tuple[int, int]] = []

    def take(span: tuple[int, int]) -> None:
        used.append(span)

    def rest() -> str:
        chars = list(text)
        for a, b in used:
            for i in range(a, b):
                chars[i] = " "
        return "".join(chars)

    # the value a correction replaces is no value: "ORD-7001, not ORD-7006", "charged twice instead of
    # order cancelled", "... rather than Friday"
    for m in REPLACED.finditer(text):
        take(m.span(1) if m.group(1) else m.span(2))
    slots = sorted(workflow.slots, key=lambda s: s.name not in pending)  # the asked slots first
    kinds = {s.name: slot_kind(s) for s in slots}
    fits = {s.name: slot_fit(s, workflow) for s in slots}
    # "Contact information: phone number or email address": either reaches the person
    either = {s.name for s in slots if kinds[s.name] == "email"
              and re.search(r"\bphone\b|\bmobile\b", f"{s.name} {s.description}".replace("_", " "), re.I)}
    # ordinal reference to the last listed results
    pick = ordinal_pick(text, last_items)
    if pick is not None and pending:
        out.set(pending[0], _item_value(pick, pending[0]), 0.85)
    for kind in ("email", "phone", "id", "datetime", "time", "date", "enum", "person", "integer", "number",
                 "boolean"):
        if kind == "date" and (period := find_range(rest(), today)):
            # the first date slot takes the first day; a second date slot the last, else a count of nights/days
            dates = [s.name for s in workflow.slots if kinds[s.name] == "date"]
            counts = _length_slots(workflow, kinds)
            if dates and dates[0] not in out.values:
                out.set(dates[0], period[0].isoformat(), 0.9)
                if len(dates) > 1:
                    out.set(dates[1], period[1].isoformat(), 0.9)
                elif counts:
                    out.set(counts[0], (period[1] - period[0]).days, 0.9)
                take(period[2])
        if kind == "integer" and (weeks := _WEEKS.search(rest())) and (counts := [
                n for n in _length_slots(workflow, kinds) if n not in out.values]):
            n = weeks.group(1).lower()  # "for a week", "for two weeks", "a fortnight"
            n = 1 if n in ("a", "an") else int(n) if n.isdigit() else NUMBER_WORDS.get(n, 1)
            out.set(counts[0], n * (14 if weeks.group(2).lower() == "fortnight" else 7), 0.9), take(weeks.span())
        if kind == "integer" and (party := find_party(rest())):
            people = [s.name for s in slots if kinds[s.name] == kind and s.name not in out.values
                      and _STRONG.search(f"{s.name} {s.description}")]
            if people:
                out.set(people[0], party[0], 0.9), take(party[1])
        if kind in ("integer", "number"):  # numbers named by the words before them go first ("PIN is 4821")
            num_slots = [s for s in slots if kinds[s.name] == kind and s.name not in out.values]
            for name, (value, span) in cue_numbers(rest(), num_slots, fits).items():
                out.set(name, value, 0.9), take(span)
        for s in slots:
            if kinds[s.name] != kind or s.name in out.values:
                continue
            is_pending = s.name in pending
            src = rest()
            if kind == "email" and (m := EMAIL.search(src)):
                out.set(s.name, m.group(0), 0.95), take(m.span())
            elif kind == "email" and s.name in either and (m := PHONE.search(src)):
                out.set(s.name, re.sub(r"[^\d+]", "", m.group(0)), 0.9), take(m.span())
            elif kind == "phone" and (m := PHONE.search(src)):
                out.set(s.name, re.sub(r"[^\d+]", "", m.group(0)), 0.9), take(m.span())
            elif kind == "id" and (m := find_id(src, s.name, fits)):
                out.set(s.name, in_form(m.group(0), fits[s.name]), 0.9), take(m.span())
            elif kind == "id" and (loose := loose_id(src, fits[s.name], s)):
                out.set(s.name, loose[0], 0.85), take(loose[1])
            elif kind == "datetime":
                d, t = find_date(src, today), find_time(src)
                if d or t:
                    found = [x for x in (d, t) if x]
                    out.set(s.name, _as_said(s, src, found) or " ".join(x[0] for x in found), 0.9 if d and t else 0.7)
                    for x in found:
                        take(x[1])
            elif kind == "time" and (t := find_time(src)):
                out.set(s.name, _as_said(s, src, [t]) or t[0], 0.9), take(t[1])
            elif kind == "date" and (d := find_date(src, today)):
                out.set(s.name, _as_said(s, src, [d]) or in_declared_form(s, d[0], today), 0.9), take(d[1])
            elif kind == "enum":
                hit = match_enum(other_direction_blanked(negated_blanked(src, s), s), s.enum or [], whole=is_pending,
                                 today=today)
                if hit and not is_pending and bare_answer(message, hit[0], pending, kinds, out.values):
                    continue  # "Mark" to "What is your name?" names the customer, not the driver option "Mark"
                if hit:
                    out.set(s.name, hit[0], hit[1])
                    pos = src.lower().find(hit[0].lower())
                    if pos >= 0:
                        take((pos, pos + len(hit[0])))
                elif is_pending and s.name in (missing or ()) \
                        and [p for p in pending if p not in out.values and kinds.get(p) == "enum"] == [s.name] \
                        and (said := read_answer(other_direction_blanked(negated_blanked(src, s), s), s.enum or [],
                                                 embed)):
                    # the answer to the question for it, in other words ("they're too small" for does_not_fit),
                    # when it is the one choice left open and the slot has no value yet (never a change)
                    out.set(s.name, said, 0.8)
            elif kind == "person" and (m := PERSON.search(src) or PERSON_FOR.search(src)):
                out.set(s.name, m.group(1), 0.85), take(m.span(1))
            elif kind == "number" and (amount := find_amount(src)) and fits[s.name].ok(amount[0]):
                out.set(s.name, amount[0], 0.9 if is_pending else 0.8), take(amount[1])
            elif kind in ("integer", "number") and (n := find_int(src, fits[s.name].ok)):
                # a count of people goes to the slot that counts people, when there is one
                people = [o.name for o in slots if kinds[o.name] == "integer" and o.name not in out.values
                          and _STRONG.search(f"{o.name} {o.description}")]
                if people and s.name not in people and n[2]:
                    continue
                strong = bool(_STRONG.search(src))
                if is_pending or strong or len(pending) == 0:
                    # a bare number nobody asked for fills an empty slot but is too weak to replace a value
                    # given before ("two in the bush", the answer to a quiz question, is not question 2)
                    out.set(s.name, n[0], 0.9 if is_pending else 0.7 if strong else UNLABELLED), take(n[1])
            elif kind == "boolean" and is_pending and out.yesno is not None:
                out.set(s.name, out.yesno, 0.9)
    # references with the shape of a free-text slot's examples, asked or not ("TX-5003 and TX-5004" for
    # "References of the disputed transactions, e.g. TX-5003, TX-5004")
    for s in slots:
        fit = fits[s.name]
        if kinds[s.name] != "string" or s.name in out.values or fit.shape is None:
            continue
        found = [m for m in fit.shape.finditer(rest()) if re.fullmatch(r"[\w-]+", m.group(0))
                 and fits_slot(m.group(0), s.name, fits)]
        if found:
            out.set(s.name, ", ".join(dict.fromkeys(m.group(0) for m in found)), 0.8)
            for m in found:
                take(m.span())
    # values the user labels with the slot's name ("pickup location: No. 23, Xiangshan Road; dropoff
    # location: ...", "the meeting reason is ..."), several in one message
    for name, (value, span) in labelled_values(rest(), [s for s in slots if s.name not in out.values
                                                        and kinds[s.name] in ("string", "person", "id")]).items():
        # without the trailing parts other values and their labels leave ("..., customer C-1001 pin 4821")
        value = _labels_dropped(value, workflow, name) if kinds[name] == "string" else value
        if value and fits_slot(value, name, fits, whole=kinds[name] == "id"):
            out.set(name, value, 0.8), take(span)
    # free-text values said unasked, in the user's own words ("from Forbes and Murray to the Airport"):
    # the learned span reader places them in the empty slots the rules left (``spans``); never over a value
    # the conversation has, never in the asked slot (the reply rules below read it), never a corrected value
    # (only for a caller that says which slots the conversation lacks; not while an asked typed value went
    # unanswered: "Mark" to "For how many people?" is no name given)
    reader = load_spans() if missing else None
    unanswered = any(n not in out.values and kinds[n] not in ("string", "person") for n in pending)
    if reader is not None and not unanswered:
        # the asked slot competes for the words too (a bare reply is its value, not another slot's), but
        # its value is left to the reply rules below
        targets = [Target(s.name, slot_words(s.name, s.description), kinds[s.name], s.name in pending)
                   for s in slots if kinds[s.name] in ("string", "person") and s.name in missing
                   and s.name not in out.values]
        for name, placed in reader.read(text, targets, used).items():
            if name not in pending and fits_slot(placed.value, name, fits):
                out.set(name, placed.value, placed.probability)
                take(placed.span)
    # a proper name for a name-like string slot still empty ("at Luigi's")
    for s in slots:
        if kinds[s.name] != "string" or s.name in out.values:
            continue
        if not re.search(r"name|restaurant|hotel|place|city|destination|venue|company|shop|store",
                         f"{s.name} {s.description}", re.I):
            continue
        m = re.search(r"\b(?:at|from|in|to|called|named)\s+((?:[A-Z][\w'&-]*)(?:\s+[A-Z][\w'&-]*)*)", rest())
        if m and m.group(1).lower() not in WEEKDAYS + MONTHS:
            out.set(s.name, m.group(1), 0.6)
            take(m.span(1))
            break
    # the asked-for string slot takes the reply itself (minus filler) unless it is a question
    open_slots = [n for n in pending if n not in out.values]
    if (pending or out.values) and not open_slots and missing:
        # every asked value (if any) is read from its own words, and the message gives values: a name
        # said beside them ("30 and Mark.") is the value of the one free-text slot still missing
        if hit := volunteered_name(rest(), message, workflow, kinds,
                                   [n for n in missing if n not in out.values and n not in pending]):
            out.set(*hit, 0.6)
    plain = not out.is_question and "?" not in message and not CORRECTION.search(message)
    if len(open_slots) > 1 and plain and all(kinds[n] in ("string", "person") for n in open_slots):
        # several values asked in one question, answered in its order without labels ("It's ajb, and
        # wabg"): one comma/semicolon part each, when there are as many parts as open questions.  Not
        # with an identifier among them: its own shape places it, and "C-1005, 75 Elm Street, Northwind"
        # would split an address
        parts = [v for part in re.split(r"[;,]", rest())
                 if (v := free_value(re.sub(r"^\s*(?:(?:and|also|then)\b\s*)+", "", part, flags=re.I), "string"))
                 and not all(t in _FILLER_WORDS for t in _tokens(v))]
        if len(parts) == len(open_slots) and all(fits_slot(v, n, fits, whole=kinds[n] == "id")
                                                 for v, n in zip(parts, open_slots)):
            for v, n in zip(parts, open_slots):
                out.set(n, v, 0.6)
            open_slots = []
    for name in open_slots[:1]:
        # one question, nothing else understood: the reply itself is the answer.  Not a correction of
        # another value ("Sorry, I meant the 11th") nor a question ("where is my order ORD-7002?")
        kind = kinds[name]
        if kind not in ("string", "id", "person") or out.is_question or "?" in message or CORRECTION.search(message):
            continue
        if len(open_slots) > 1 and out.values:
            continue
        # the rest of the message once the other values are taken ("C-1001, PIN 4821, new address 7 Elm
        # Street, Northwind"), else the whole reply; either without the slot's own label ("full address: ...")
        source = remainder(rest(), workflow, name) if used else message
        value = free_value(source, kind, workflow.slot(name)) if source else None
        if value and (out.yesno is None or used) and fits_slot(value, name, fits, whole=kind == "id"):
            out.set(name, value, 0.6)
    for name, value in out.values.items():  # a free-text value ends where its sentence does ("... NW9 1AA. C-1001")
        if kinds.get(name) in ("string", "person") and isinstance(value, str):
            out.values[name] = value.rstrip(" .,;:")
    return out


_CLAUSE_END = re.compile(r"\s*[;,.!]+\s*(?:(?:and|also|plus)\s+)*|\s+(?:(?:and|also|plus)\s+)+", re.I)
_PLACED = re.compile(r"\b(?:to|at|from|in|on|for|into|via|near|by|with)\s*$", re.I)


def volunteered_name(text: str, message: str, workflow: Workflow, kinds: dict[str, str],
                     missing: list[str], correcting: bool = False) -> tuple[str, str] | None:
    """``(slot, name)`` for a name the user adds, unasked, beside the values they give ("Party Size: 30
    and Mark.", "7 pm, also it's Ann Lee", "Can you book a table? Sure, Lucca, also that would be Mark"):
    ``text`` is the message with the values already read blanked out.  Only when one free-text slot is
    still missing and it holds a person's name (any other free-text slot could take the same words: a
    place, a reason), and exactly one clause of the message, not one a value was read from, is a name as
    written — capitalised words, not one word at a sentence's start (sentence case is no name: "30.
    Cheers"), no filler or slot label, no enum option, not placed by a preposition ("to Union Station"),
    not in a question ("30 and Mark?").  ``correcting``: the message corrects the name (``missing`` holds the
    person slot it names), so its correction words are no reason to read nothing."""
    free = [n for n in missing if kinds.get(n) in ("string", "person")]
    if len(free) != 1 or kinds[free[0]] != "person" or CORRECTION.search(message) and not correcting:
        return None
    options = [o for s in workflow.slots if s.enum for o in s.enum]
    labels = set().union(*(label_words(s) for s in workflow.slots))
    names = []
    marked = "".join("\0" if t != m else t for t, m in zip(text, message))  # the values read: \0
    cuts = [0, *(x for m in _CLAUSE_END.finditer(marked) for x in m.span()), len(marked)]
    for a, b in zip(cuts[::2], cuts[1::2]):
        if "\0" in marked[a:b]:
            continue  # the clause of a value already read ("We're six", "Party Size: 30")
        value = clean_free_text(marked[a:b])
        at = message.find(value, a) if value else -1
        if at < 0 or not re.fullmatch(rf"{_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}}", value):
            continue
        words = value.split()
        low = [w.lower() for w in words]
        before = message[:at].rstrip()
        if (not before or before[-1] in ".!?") and len(words) == 1:
            continue  # one word in sentence case ("30. Cheers")
        if low[0] in _NOT_NAMES or any(w in _FILLER_WORDS or w in labels or w in WEEKDAYS or w in MONTHS for w in low) \
                or _PLACED.search(message[:at]) or (options and match_enum(value, options, whole=True)):
            continue
        if re.match(r"[^.!?]*\?", message[at:]):
            continue  # said in a question ("30 and Mark?")
        names.append(value)
    return (free[0], names[0]) if len(names) == 1 else None


def fits_slot(value: Any, slot: str, fits: dict[str, SlotFit], *, whole: bool = True) -> bool:
    """``value`` may be ``slot``'s: it meets the slot's constraints, and unless it has the shape of the
    slot's own examples, it has no other slot's example shape (a value is only taken for the slot it
    fits: "TX-5003" is a transaction's reference, not a customer number)."""
    fit = fits[slot]
    if not fit.ok(value, whole=whole, shape=False):
        return False
    if fit.shaped(value, whole=whole):
        return True
    # a reference written with a letter prefix of its own ("ORD-7003") is not one whose examples write another
    # ("C-1001"); one without ("A1234", "7003") may still be
    prefix = re.fullmatch(r"([A-Za-z]+[-_/])\d+", str(value).strip()) if whole else None
    if prefix and fit.prefixes and prefix.group(1).lower() not in {p.lower() for p in fit.prefixes}:
        return False
    return not any(f.shaped(value, whole=whole) for n, f in fits.items() if n != slot)


def in_form(value: str, fit: SlotFit) -> str:
    """``value`` with its examples' prefix as they write it ("Ord-7003" -> "ORD-7003")."""
    return next((p + value[len(p):] for p in fit.prefixes if value[:len(p)].lower() == p.lower()), value)


def loose_id(text: str, fit: SlotFit, slot: Slot | None = None) -> tuple[str, tuple[int, int]] | None:
    """An identifier typed loosely — other case, a space or no separator ("ord 7003", "ord7003"), or its
    digits after the slot's own name ("order 7003", "booking no. 1007") — written in its examples' form
    ("ORD-7003")."""
    names = [w for w in re.findall(r"[a-z]+", slot.name.lower()) if w not in ("id", "number", "no", "ref", "code")] \
        if slot is not None else []
    if names and len(fit.prefixes) == 1 and (
            m := re.search(rf"\b(?:{'|'.join(names)})\s+(?:(?:number|no\.?|num|#)\s*)?#?(\d+)\b", text, re.I)):
        value = fit.prefixes[0] + m.group(1)
        if fit.ok(value):
            return value, m.span()
    for prefix in fit.prefixes:
        letters = prefix.rstrip("-_")
        # one letter only written onto three digits or more ("b1003"): "b 2" is too common a phrase to be B-2
        loose = rf"\b{re.escape(letters)}[-_\s]?(\d+)\b" if len(letters) >= 2 else rf"\b{re.escape(letters)}(\d{{3,}})\b"
        if m := re.search(loose, text, re.I):
            value = prefix + m.group(1)
            if fit.ok(value):
                return value, m.span()
    return None


def find_id(text: str, slot: str, fits: dict[str, SlotFit]) -> re.Match | None:
    """The identifier in ``text`` for ``slot``: the first with the shape of its examples, else the first
    one that fits it (see ``fits_slot``)."""
    fit = fits[slot]
    found = sorted([*ORDER_ID.finditer(text), *(fit.shape.finditer(text) if fit.shape is not None else [])],
                   key=lambda m: m.start())
    return next((m for m in found if fit.shaped(m.group(0)) and fit.ok(m.group(0))), None) or \
        next((m for m in found if fits_slot(m.group(0), slot, fits)), None)


def slot_labels(slot: Slot) -> list[str]:
    """Phrases that name a slot: its name as words, its source name, its description's first clause
    when short ("Meeting start time, year + month + day" -> "meeting start time")."""
    head = re.split(r"[.,;(]", slot.description or "")[0].strip()
    labels = [slot.name.replace("_", " "), slot.title or "", head if 0 < len(head.split()) <= 5 else ""]
    return [lab.lower() for lab in dict.fromkeys(labels) if len(lab) >= 3]


# where a labelled value ends: a semicolon, or a comma / "and" before a new clause ("…, also it's …")
_VALUE_END = re.compile(r"\s*;|[,.]?\s+(?:and|also)\b|,\s*(?=(?:also|sure|it'?s|it is|that|the|my|and)\b)", re.I)


def labelled_values(text: str, slots: list[Slot]) -> dict[str, tuple[str, tuple[int, int]]]:
    """``slot -> (value, span)`` for values introduced by a label of their slot ("X: v", "the X is v").
    A value runs to the next label or clause; a label shared by two slots names neither."""
    marks = []
    for s in slots:
        for lab in slot_labels(s):
            for m in re.finditer(rf"\b(?:the |my )?{re.escape(lab)}\s*(?::|\bis\b|=)\s*", text, re.I):
                marks.append((m.start(), m.end(), s.name))
        # "update my address to ...", "change the email to ...": the slot's head noun set to a value
        head = re.escape(s.name.split("_")[-1].lower())
        for m in re.finditer(rf"\b(?:update|change|set|switch)\s+(?:my|the|our)\s+{head}\s+to\s+", text, re.I):
            marks.append((m.start(), m.end(), s.name))
    marks.sort()
    out: dict[str, tuple[str, tuple[int, int]]] = {}
    for i, (start, end, name) in enumerate(marks):
        if any(n != name and (a < end and start < b) for a, b, n in marks):
            continue  # overlapping labels of different slots: ambiguous
        stop = min([a for a, _, _ in marks[i + 1:] if a >= end] + [len(text)])
        chunk = text[end:stop]
        cut = _VALUE_END.search(chunk)
        value = chunk[:cut.start()] if cut else chunk
        value = value.strip(" ,.;")
        if value and name not in out:
            out[name] = (value, (end, end + len(value)))
    return out


def label_words(slot: Slot) -> set[str]:
    """The words that name a slot in a message: its name's and description's words — not its examples'
    ("Starting point, e.g. "Chongqing Qixinggang"": "Chongqing" is a value, of this slot or another)."""
    desc = slot.description or ""
    if m := _EXAMPLES.search(desc):
        desc = desc[:m.start()]
    desc = re.sub(r"[\"“][^\"”]*[\"”]", " ", desc)
    return set(_tokens(f"{slot.name.replace('_', ' ')} {slot.title or ''} {desc}"))


_LABEL_END = re.compile(r"\s*(?::|\bis\b|\bare\b|=)\s*", re.I)
_FILLER_WORDS = STOPWORDS | FILLERS


def strip_label(text: str, slot: Slot | None) -> str:
    """``text`` without a leading label naming ``slot`` ("Name the booking is made under: Marek Novak",
    "the new address is 7 Elm Street", "new address 7 Elm Street" -> the value)."""
    if slot is None:
        return text
    words = label_words(slot)
    for m in reversed(list(_LABEL_END.finditer(text))):  # the longest label first ("the name ... is made under:")
        head, value = text[:m.start()], text[m.end():].strip()
        toks = _tokens(head)
        if value and toks and all(w in words or w in _FILLER_WORDS for w in toks) and set(toks) & words:
            return value
    toks = list(re.finditer(r"[\w'-]+", text))
    cut, named = 0, False
    for t in toks:  # unmarked: leading label words, then the value
        w = t.group(0).lower()
        if w in words and w not in _FILLER_WORDS:
            named, cut = True, t.end()
        elif w in _FILLER_WORDS:
            continue
        else:
            break
    return text[cut:].strip(" :,.-") if named and text[cut:].strip(" :,.-") else text


def _labels_dropped(value: str, workflow: Workflow, slot: str) -> str:
    """``value`` without its trailing comma parts that hold only other slots' labels and filler (their
    values already taken out)."""
    junk = set().union(*(label_words(s) for s in workflow.slots if s.name != slot)) | _FILLER_WORDS
    parts = re.split(r"(?=[;,])", value)
    while len(parts) > 1 and all(t in junk for t in _tokens(parts[-1])):
        parts.pop()
    return "".join(parts).strip(" ,;")


def remainder(text: str, workflow: Workflow, slot: str) -> str:
    """What is left of a message for ``slot`` once other values are blanked out: the comma/semicolon
    parts that say more than a label of another slot or filler, joined."""
    others = set().union(*(label_words(s) for s in workflow.slots if s.name != slot)) if workflow.slots else set()
    junk = others | _FILLER_WORDS
    keep = []
    for part in re.split(r"[;,]", text):
        toks = [(m.group(0).lower(), m.span()) for m in re.finditer(r"[\w'-]+", part)]
        content = [i for i, (w, _) in enumerate(toks) if not all(t in junk for t in _tokens(w))]
        if content:  # the part without the filler and labels around it ("and it's 75 Elm Street")
            keep.append(part[toks[content[0]][1][0]:toks[content[-1]][1][1]])
    return ", ".join(keep)


REPLACED = re.compile(r"(?:,|;|\s-)\s*(?:and\s+)?(not\s+[^,.;!?]+)|\b((?:instead of|rather than)\s+[^,.;!?]+)", re.I)
CORRECTION = re.compile(r"\b(?:sorry|actually|i meant|i mean|instead|make it|change (?:it|that|the)|wait|rather|"
                        r"not (?:\d+|on|at|for)|(?:got|typed|spelt|spelled|wrote|gave you|put) (?:\w+ ){0,3}wrong|typo|"
                        r"my mistake|mistyped)\b", re.I)
# sentence starters that are not names ("Thanks. ..." is not a guest called Thanks)
_NOT_NAMES = {"yes", "no", "ok", "okay", "sure", "thanks", "thank", "please", "hi", "hello", "hey", "well", "oh",
              "so", "then", "and", "but", "the", "i", "my", "it", "that", "this", "great", "good", "fine", "perfect"}
_LEADING_NAME = re.compile(rf"^({_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}})\s*(?:[.,;!]|\band\b|$)")


def free_value(message: str, kind: str, slot: Slot | None = None) -> str | None:
    """The whole reply (minus filler and the slot's label) as the asked value, when it looks like one: a
    name is a few words without digits (or the name the reply starts with: "John. And my ID is 661"), an
    id has a digit."""
    value = clean_free_text(strip_label(clean_free_text(message), slot))
    if not value or re.fullmatch(r"[a-z]|[\W_]+", value, re.I):
        return None  # "y", "?", "-": no value (one Latin letter is no name; one Chinese character may be)
    words = value.split()
    if kind == "person":
        if len(words) <= 4 and not re.search(r"\d", value) and words[0].lower() not in _NOT_NAMES:
            return value
        m = _LEADING_NAME.match(value)
        return m.group(1) if m and m.group(1).split()[0].lower() not in _NOT_NAMES else None
    if kind == "id":
        return value if len(words) <= 2 and re.search(r"\d", value) else None
    return value if len(words) <= 40 else None


# --- the slot commands of a turn -------------------------------------------------------------------

MIN_CONF_NEW, MIN_CONF_CHANGE = 0.5, 0.7
UNLABELLED = 0.6  # a value read without a label or a question for it: enough for an empty slot, not for a change
WH_QUESTION = re.compile(r"(?:\W*(?:and|so|oh|also|btw|by the way|sorry|hey|ok|okay)\W+)*"
                         r"(?:what|when|where|which|who|why|how)\b(?!\s+about\b)", re.I)


def listed(value: Any) -> list | None:
    """``value`` as the list it holds: a list, or a text enumerating items by semicolons ("Ceramic vase
    (€39.00); Table runner (€24.50)": each item without its parenthesised details); else None."""
    if isinstance(value, list):
        return value or None
    if isinstance(value, str) and ";" in value:
        parts = [_without_details(p) for p in value.split(";")]
        parts = [p for p in parts if p]
        return parts if len(parts) >= 2 else None
    return None


def _without_details(item: str) -> str:
    return re.sub(r"\s*\([^)]*\)\s*$", "", item).strip()


def last_items(frame: dict) -> list | None:
    """The latest list an API returned (what "the second one" points into)."""
    for v in reversed(list((frame.get("results") or {}).values())):
        if (items := listed(v)) is not None:
            return items
    return None


# --- values that refer to what a lookup returned ----------------------------------------------------
# A slot may be answered by pointing at a value the workflow can look up: an item of the order
# ("the first one", "the table runner": ``item`` among the ``items`` a lookup lists) or the value the new
# one replaces ("8pm same day": ``new_date`` is the booking's ``date``).  The referents of a slot follow
# from names alone — its plural, or its name without the prefix that marks a replacement.
_REPLACING = re.compile(r"^(?:new|updated|changed|other|different|another)_", re.I)


_ID_SUFFIX = re.compile(r"_ids?$", re.I)
_PLURAL = re.compile(r"_ids$|[^su]s$", re.I)  # a slot for several values ("transaction_ids", "items"; not "address")


def referents(slot: str) -> tuple[str, ...]:
    """Names of the values a slot's answer may point into: the list of its kind (``items`` for ``item``,
    ``transactions`` for ``transaction_ids``) or the value it replaces (``date`` for ``new_date``)."""
    base = _REPLACING.sub("", slot)
    kinds = [f"{slot}s", f"{slot}es"] + ([f"{_ID_SUFFIX.sub('', slot)}s"] if _ID_SUFFIX.search(slot) else [])
    return tuple(dict.fromkeys(n for n in (*kinds, base) if n != slot))


_SAME = re.compile(r"\b(?:the\s+)?same\s+([a-z]+)\b", re.I)


def _plain(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _item_hits(item: str, said: set[str], topic: frozenset[str] | set[str] = frozenset()) -> tuple[int, int]:
    """An item's name words (letters only: a price or a size number is no name; not the words of the task's
    own name, ``topic``: "ride" names no ride of a ride order) and how many of them a message (its words
    ``said``) says.  Half of them name the item ("the trail running shoes" for "Trail running shoes, size 39",
    "the grinder" for "Espresso grinder"), and so does its head noun alone, the last word before any detail
    ("the shoes" for "Trail running shoes, size 39"): counted as all of them."""
    toks = {_plain(t) for t in _tokens(item) if t.isalpha() and len(t) > 2} - STOPWORDS - set(topic)
    plain = {_plain(t) for t in said}
    head = next((w for w in reversed(_tokens(re.split(r"[,(;]", item)[0])) if w.isalpha()), "")
    if head and _plain(head) in toks and _plain(head) in plain:
        return len(toks), len(toks)
    return len(toks), len(toks & plain)


def referred_values(message: str, workflow: Workflow, values: dict[str, Any], unfilled: list[str],
                    named_only: bool = False) -> dict[str, Any]:
    """Values for ``unfilled`` slots that ``message`` points at among ``values`` (slots and results): an item
    of a listed value by its position ("the first one") or its name said in the message ("send back the table
    runner"), or the value a replacing slot keeps ("same day").  ``named_only``: only an item named (a message
    said before the list existed: its "first" or "same" pointed at something else)."""
    out: dict[str, Any] = {}
    said = set(_tokens(message))
    topic = {_plain(t) for t in _tokens(workflow.name.replace("_", " "))}
    for name in unfilled:
        slot = workflow.slot(name)
        if slot is None:
            continue
        for ref in referents(name):
            value = values.get(ref)
            if value in (None, ""):
                continue
            items = listed(value)
            if items is None and ref != _REPLACING.sub("", name) and isinstance(value, str) and value.strip():
                items = [_without_details(value)]  # the list of its kind holds one item ("items" of a one-item order)
            if items is not None:
                pick = None if named_only else ordinal_pick(message, items)
                if pick is None:  # an item named in the message, when only one is (and no other is mentioned)
                    hits = [(i, _item_hits(str(_item_value(i, name)), said, topic)) for i in items]
                    named = [i for i, (n, k) in hits if k and 2 * k >= n]
                    alone = sum(1 for _, (_, k) in hits if k) == len(named)
                    pick = named[0] if len(named) == 1 and alone else None
                    if len(named) > 1 and alone and _PLURAL.search(name):
                        # "the two gamestore ones" for the disputed transactions: every item named, by reference
                        refs = [m.group(0) if (m := ORDER_ID.search(str(_item_value(i, name)))) else None for i in named]
                        if all(refs):
                            out[name] = ", ".join(refs)
                            break
                if pick is not None:
                    value = _item_value(pick, name)
                    # an id slot takes the listed item's reference ("TX-5007"), not its whole line
                    if _ID_SUFFIX.search(name) and isinstance(value, str) and (ref_id := ORDER_ID.search(value)):
                        value = ref_id.group(0)
                    out[name] = value
                    break
            elif not named_only and (m := _SAME.search(message)) \
                    and m.group(1).lower() in label_words(slot) | set(_tokens(ref)):
                out[name] = value  # "same day": the value the new one replaces stays
                break
    return out


def resembling(message: str, value: str, least: float = 0.5) -> str | None:
    """The stretch of ``message`` that says ``value`` again with a change: most of its words (at least ``least``
    of them, two at least), as many words as it has (the changed one in place of the old: "it's 21 Rose Lane,
    Northwind NW3 2AB" for "12 Rose Lane, Northwind NW3 2AB"), and not the same.  None otherwise."""
    old = _tokens(value)
    if len(set(old)) < 2:
        return None
    spans = [m.span() for m in re.finditer(r"[A-Za-z0-9]+", message)]
    best, best_key = None, (math.ceil(least * len(set(old))), -len(old))
    for i in range(len(spans)):
        for j in range(i + 1, len(spans)):
            said = message[spans[i][0]:spans[j][1]]
            key = (len(set(_tokens(said)) & set(old)), -abs(j - i + 1 - len(old)))
            if key > best_key:
                best, best_key = said, key
    return best if best is not None and best.strip().lower() != value.strip().lower() else None


def corrected(message: str, workflow: Workflow, frame: dict, found: Filled) -> None:
    """Values a correcting message gives in ways the reader does not take unasked (into ``found``): another item
    of the list a value came from, a free-text value said again with a change, a new name for the one person
    slot the message names, the hour of a time said as a bare number."""
    slots = frame.get("slots") or {}
    # "oh wait no, not the vase, I meant the table runner": another item of the list the value came from
    for name, value in other_item(message, workflow, frame, [n for n in slots if n not in found.values]).items():
        found.set(name, value, 0.85)
    # "I got the house number wrong, it's 21 Rose Lane, Northwind NW3 2AB": the words that resemble a free-text
    # value are its new spelling; "I typed the postcode wrong, it's NW9 1AB": a part of it, one word changed
    for name, current in slots.items():
        slot = workflow.slot(name)
        if name not in found.values and slot is not None and slot_kind(slot) == "string" and isinstance(current, str) \
                and (new := resembling(message, current) or changed_part(message, current)):
            found.set(name, new, 0.75)
    # "no - can we do 9 instead?" for a dinner at 20:00: a bare number that, read as the hour near the time it
    # would replace, moves it by two hours at most, is that time and no count ("we're 4 now" is one)
    ints = find_ints(message)
    times = [n for n, v in slots.items() if workflow.slot(n) is not None and slot_kind(workflow.slot(n)) == "time"
             and _CLOCK.fullmatch(str(v))]
    counted = len(ints) == 1 and re.search(r"\b(?:we'?re|we are|we'?ll be|we will be|there'?ll be|there are|party of|"
                                          r"table for|for)\s*$", message[:ints[0][1][0]], re.I)
    if len(ints) == 1 and len(times) == 1 and not ints[0][2] and not counted and isinstance(ints[0][0], int) \
            and 1 <= ints[0][0] <= 12:
        counts = [n for n, v in found.values.items() if v == ints[0][0] and n not in times]
        hour = nearer_half_day(f"{ints[0][0]:02d}:00", slots[times[0]], message)
        if counts and hour != slots[times[0]] and abs(int(hour[:2]) - int(slots[times[0]][:2])) <= 2:
            for n in counts:
                found.values.pop(n), found.confidence.pop(n, None)
            found.set(times[0], hour, 0.8)
    if not found.values:
        # "put it under my wife's name instead, Julia Porter": a new name for the one person slot the message
        # names by its label, read as a volunteered name is (one clause that is a name as written)
        said = set(_tokens(message))
        people = [s.name for s in workflow.slots if slot_kind(s) == "person" and slots.get(s.name) not in (None, "")
                  and label_words(s) & said]
        if len(people) == 1 and (hit := volunteered_name(message, message, workflow, {people[0]: "person"}, people,
                                                         correcting=True)):
            found.set(*hit, 0.6)


def changed_part(message: str, value: str) -> str | None:
    """``value`` with one word changed as ``message`` says it again, in the words around it ("it's NW9 1AB" for
    "7 Elm Street, Northwind NW9 1AA": the postcode's second half), the longest such stretch; the new word
    holds a digit or a capital (a number, a code, a name), the kept ones something more than stopwords.
    None when the message says no part of it again with one word changed."""
    old = [(m.group(0).lower(), m.span()) for m in re.finditer(r"[A-Za-z0-9]+", value)]
    said = [(m.group(0), m.span()) for m in re.finditer(r"[A-Za-z0-9]+", message)]
    for n in range(len(old), 1, -1):
        for i in range(len(old) - n + 1):
            for j in range(len(said) - n + 1):
                pairs = list(zip([t for t, _ in old[i:i + n]], [t for t, _ in said[j:j + n]]))
                diff = [k for k, (a, b) in enumerate(pairs) if a != b.lower()]
                if len(diff) != 1 or not re.search(r"\d|^[A-Z]", pairs[diff[0]][1]) \
                        or all(a in STOPWORDS for k, (a, _) in enumerate(pairs) if k != diff[0]):
                    continue
                a, b = old[i][1][0], old[i + n - 1][1][1]
                return value[:a] + message[said[j][1][0]:said[j + n - 1][1][1]] + value[b:]
    return None


def other_item(message: str, workflow: Workflow, frame: dict, filled: list[str]) -> dict[str, Any]:
    """Values of ``filled`` slots that a correcting message replaces by another item of the list the value
    is one of ("not the vase, I meant the table runner"): the one other item it names."""
    slots, results = frame.get("slots") or {}, frame.get("results") or {}
    out: dict[str, Any] = {}
    for name in filled:
        slot, current = workflow.slot(name), slots.get(name)
        if slot is None or slot.enum or current in (None, ""):
            continue
        for ref in referents(name):
            items = listed(results.get(ref))
            others = [i for i in items or [] if str(_item_value(i, name)) != str(current)]
            if items and len(others) < len(items):  # the value is one of the list's items
                out.update(referred_values(message, workflow, {ref: others}, [name], named_only=True))
                break
    return out


def restated(message: str, workflow: Workflow, values: dict) -> bool:
    """Does a correcting message only say again values the task already holds ("Wait, I meant B-1008 for the
    booking reference" when it is B-1008)?"""
    said = fill_slots(message, workflow).values if CORRECTION.search(message or "") else {}
    return bool(said) and all(str(values.get(k, "")).strip().lower() == str(v).strip().lower() for k, v in said.items())


def retried_slots(frame: dict, workflow: Workflow | None = None) -> set[str]:
    """The arguments of the frame's last call when it failed or its result says it did not work out
    ("Unavailable", "Reservation Failed"; with the ``workflow``, a yes/no value the call returns that is no:
    ``has_funds`` false): a value the user gives for one now is another try."""
    calls = [c for c in frame.get("calls") or [] if c.get("status") != "cancelled"]
    if not calls:
        return set()
    last, results = calls[-1], frame.get("results") or {}
    api = workflow.api(last.get("api") or "") if workflow is not None else None
    if last.get("status") == "error" or result_polarity(results) is False \
            or api is not None and any(results.get(r) is False for r in api.returns or []):
        return set(last.get("args") or {})
    return set()


def slot_commands(message: str, workflow: Workflow, frame: dict, asked: list[str], turn: int,
                  skip_free_text: bool = False, today: dt.date | None = None, embed=None) -> tuple[list, Filled]:
    """SetSlot / CorrectSlot commands for the active frame from the user's message.

    ``asked``: the slots the agent's last question asked for (a free-text answer may fill them);
    ``skip_free_text``: the user said they cannot answer, so the reply is no value; ``today``: the desk's
    calendar date ("tomorrow", "the 6th" are read against it; None = the machine's date); ``embed``: the
    library's sentence embeddings, for an asked enum option said in other words (``enums``)."""
    from ..commands import CorrectSlot, SetSlot

    pending = [] if skip_free_text else asked
    slots = frame.get("slots") or {}
    retry = retried_slots(frame, workflow)
    # nothing asked after a call that did not work out ("€442.08 is less than €500. A smaller amount?" — "ugh
    # fine, 400 then"): a bare number is the one amount or count the call was made with
    counts = [n for n in retry if workflow.slot(n) is not None and slot_kind(workflow.slot(n)) in ("integer", "number")]
    if not pending and not skip_free_text and len(counts) == 1:
        pending = counts
    found = fill_slots(message, workflow, pending=pending, last_items=last_items(frame), today=today,
                       missing=[s.name for s in workflow.slots if slots.get(s.name) in (None, "")], embed=embed)
    # an asked value pointed at among what a lookup listed ("the unknown merchant one", "the vase") is that
    # item, not the words that point at it
    unfilled = [n for n in pending if slots.get(n) in (None, "") and not (workflow.slot(n) and workflow.slot(n).enum)]
    for name, value in referred_values(message, workflow, {**(frame.get("results") or {}), **slots}, unfilled).items():
        found.values[name], found.confidence[name] = value, 0.85
    if pending and CORRECTION.search(message) and not any(n in found.values for n in pending):
        # "oh actually we're 4 now" while the name is asked: the correction is of a value already given,
        # read as if nothing were asked (an unlabelled number may then be that value)
        again = fill_slots(message, workflow, last_items=last_items(frame), today=today)
        for name, value in again.values.items():
            if slots.get(name) not in (None, "") and name not in found.values:
                found.set(name, value, again.confidence[name])
    if CORRECTION.search(message) or retry:
        corrected(message, workflow, frame, found)
    # a question for information ("what time do you close tonight?") changes no value the user gave;
    # "what about 8pm?" / "can we do tonight instead?" propose one
    inquiry = bool(WH_QUESTION.match(message.strip())) and "?" in message
    # a message that says it corrects ("actually we're 4 now") changes a value on the evidence a new one needs,
    # and so does a value for the last call after it failed ("not available any more" - "oh man, try 700")
    change = MIN_CONF_NEW if CORRECTION.search(message) else MIN_CONF_CHANGE
    out: list = []
    for name, value in found.values.items():
        conf = found.confidence.get(name, 0)
        old = slots.get(name)
        value = found.values[name] = nearer_half_day(value, old, message)
        if old is None or old == "":
            if conf >= MIN_CONF_NEW:
                out.append(SetSlot(slot=name, value=value, confidence=round(conf, 3), turn=turn))
        elif str(old).lower() != str(value).lower() and (conf >= change or name in asked or
                                                          name in retry and conf >= MIN_CONF_NEW) \
                and not (inquiry and name not in asked):
            out.append(CorrectSlot(slot=name, value=value, previous=old, confidence=round(conf, 3), turn=turn))
    return out, found
