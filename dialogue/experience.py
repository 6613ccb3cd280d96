"""What verified experience says about a frame: the prerequisites the PDL lacks, met or not.

The ``experience`` node puts the verified prerequisites of the active workflow that its PDL does not
declare into the state (``prerequisites``: ``{"action", "requires", "kind", "provides", "support",
"confidence", "block"}``; argument rules add ``"relation"`` and ``"other"``).  The pre-decision hints,
the post-decision check ``experience_prerequisite`` and the offline executor read them through these
functions — one reading for all three.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from workflows.relations import BROKEN_BY, facts

from .frames import Frame, successful_calls

Prerequisite = dict[str, Any]


def declared(wf, action: str) -> set[str]:
    """Every node the PDL says ``action`` needs first (its precondition closure)."""
    nodes = {n.name: n for n in [*wf.apis, *wf.answers]}
    seen: set[str] = set()
    todo = list(getattr(nodes.get(action), "precondition", []) or [])
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo += list(getattr(nodes.get(d), "precondition", []) or [])
    return seen


def _mine(p: Prerequisite, frame: Frame | dict | None, kind: str = "action") -> bool:
    """Learned for the frame's workflow (a state written for another frame does not apply)."""
    return p.get("kind") == kind and p.get("workflow", "") in ("", (frame or {}).get("workflow"))


def unmet(prerequisites: Iterable[Prerequisite], frame: Frame | dict | None, action: str) -> list[Prerequisite]:
    """The action prerequisites of ``action`` that have not succeeded in ``frame`` yet."""
    return [p for p in prerequisites or () if _mine(p, frame) and p.get("action") == action
            and not successful_calls(frame, p.get("requires"))]


def provider_of(prerequisites: Iterable[Prerequisite], frame: Frame | dict | None,
                slots: Iterable[str]) -> Prerequisite | None:
    """The unmet prerequisite whose result provides one of ``slots`` (asking the user for such a value is
    asking for what an action should produce), else None."""
    wanted = set(slots or ())
    for p in prerequisites or ():
        if _mine(p, frame) and wanted & set(p.get("provides") or ()) \
                and not successful_calls(frame, p.get("requires")):
            return p
    return None


def broken(prerequisites: Iterable[Prerequisite], frame: Frame | dict | None, action: str,
           args: Mapping[str, Any], given: Iterable[str] = (), day: str | None = None) -> list[Prerequisite]:
    """The argument rules of ``action`` that ``args`` break (a value reusing another argument's value, a date
    on the wrong side of today) — except when the last question asked for nothing but ruled arguments (the
    question a broken rule asks) and the user gave them this turn (``given``): their answer stands."""
    rules = [p for p in prerequisites or () if _mine(p, frame, "argument") and p.get("action") == action]
    asked = set((frame or {}).get("asked") or ())
    if asked and asked <= {p["requires"] for p in rules}:
        rules = [p for p in rules if p["requires"] not in set(given or ())]
    if not rules:
        return []
    done = {c["api"]: c.get("args") or {} for c in successful_calls(frame) if c.get("api") != action}
    seen = facts(args or {}, done, day or datetime.now(timezone.utc).date().isoformat())
    return [p for p in rules if (p["requires"], BROKEN_BY.get(p.get("relation", ""), ""), p.get("other", "")) in seen]


def describe(p: Prerequisite) -> str:
    if p.get("kind") == "argument":
        rule = f"must not reuse the value of {p.get('other')}" if p.get("relation") == "differs" \
            else f"must be a date in the {p.get('relation')}"
        return (f"experience ({p.get('support', 0)} sessions, confidence {float(p.get('confidence', 0)):.2f}) shows "
                f"{p['action']}'s {p['requires']} {rule}")
    gives = f"; its result gives {', '.join(p['provides'])}" if p.get("provides") else ""
    return (f"experience ({p.get('support', 0)} sessions, confidence {float(p.get('confidence', 0)):.2f}) shows "
            f"{p['action']} needs {p['requires']} first{gives}")
