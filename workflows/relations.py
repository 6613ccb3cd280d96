"""Value relations of a tool call's arguments: the facts experience learns argument rules from.

A call's ``facts`` are what its argument values show against the frame so far: ``(arg, "same", "B.y")``
— the value equals the one argument ``y`` (another name) had in the latest successful call of ``B``
(a PIN reused as a card number) — and ``(arg, "past"/"future", "")`` — a date before/after the day of
the call.  ``memory.induce`` learns a rule against a fact that precedes errors and never successes
(``RULE_AGAINST``: same → differs, future → past, past → future); ``dialogue.experience`` checks a
proposed call's facts against the learned rules (``BROKEN_BY``).  One definition for both.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from .sanitize import REDACTED

ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}(?:$|[T ])")
RULE_AGAINST = {"same": "differs", "future": "past", "past": "future"}
BROKEN_BY = {rule: fact for fact, rule in RULE_AGAINST.items()}


def scalar(v: Any) -> str | None:
    """A comparable form of an argument value (None: nothing to compare — empty, redacted, structured)."""
    if v is None or isinstance(v, (list, dict, bool)) or v == REDACTED or str(v).strip() == "":
        return None
    return str(v).strip().lower()


def facts(args: Mapping[str, Any], done: Mapping[str, Mapping[str, Any]], day: str) -> set[tuple[str, str, str]]:
    """The value facts of ``args``; ``done``: action -> arguments of its latest successful call (the call's
    own action excluded by the caller); ``day``: the ISO day of the call."""
    out = set()
    for arg, value in args.items():
        v = scalar(value)
        if v is None:
            continue
        for src, src_args in done.items():
            out |= {(arg, "same", f"{src}.{k}") for k, w in src_args.items() if k != arg and scalar(w) == v}
        if day and isinstance(value, str) and ISO_DAY.match(value) and value[:10] != day:
            out.add((arg, "past" if value[:10] < day else "future", ""))
    return out
