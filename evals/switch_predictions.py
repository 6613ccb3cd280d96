"""Per-turn predictions of the closed-loop switching evaluation, and what the wrong picks are.

``flowdesk eval switch --predictions FILE`` writes one JSON line per scored user turn and run
(``PredictionRow``: dialogue id, turn index, gold, prediction, verdict, error category — no dialogue
text), so a wrong turn can be looked up and the errors cut further without re-running the loop.

``relation`` says how a wrong top-1 relates to the gold in the library — the same service's other
intent, another service of the same domain (with the same intent name or not), another domain, or
nothing predicted (out of scope) — and ``confusions`` tabulates it by error category.

``twins`` finds the workflows that nothing in the library tells apart from another one: the same
intent name (the title, or the name without its service prefix) or the same description in another
service.  ``ceiling`` is an *analysis*, not a score: the top-1 the run would reach if every confusion
between such twins counted as right.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable, Literal

from pydantic import BaseModel

RELATIONS = ("same service, other intent", "same domain, other service, same intent",
             "same domain, other service, other intent", "other domain, same intent", "other domain",
             "NONE (out of scope)", "workflow for an out-of-scope gold")


class PredictionRow(BaseModel):
    """One scored user turn of one run (``default`` / ``best`` / ``before`` / ``teacher``)."""

    run: str
    dialogue: str
    turn: int  # the turn's index in the dialogue (agent turns counted)
    gold: str | None
    prev_gold: str | None
    before: str | None  # the active workflow when the turn arrived
    predicted: str | None  # top-1: the active workflow after the turn (None: nothing / out of scope)
    candidates: list[str]  # the prediction list scored for MAP@5, top-1 first
    decision: str  # STAY | SEARCH (a revision or an out-of-scope reading counts as a change: SEARCH)
    verdict: Literal["right", "wrong"]
    category: str | None  # evals.switch_loop.ERROR_CATEGORIES; None when right
    relation: str | None  # RELATIONS; None when right


def intent_name(wf) -> str:
    """The workflow's intent without its service: the title, else the name after ``__``."""
    return (wf.title or wf.name.split("__")[-1]).strip().lower()


def relation(gold: str | None, predicted: str | None, library) -> str | None:
    """How a wrong top-1 relates to the gold (None when it is right)."""
    if gold == predicted:
        return None
    if predicted is None:
        return "NONE (out of scope)"
    if gold is None:
        return "workflow for an out-of-scope gold"
    g, p = library.workflows.get(gold), library.workflows.get(predicted)
    if g is None or p is None:
        return "other domain"
    same_intent = intent_name(g) == intent_name(p)
    if g.role == p.role:
        return "same service, other intent"
    if g.domain == p.domain:
        return "same domain, other service, " + ("same intent" if same_intent else "other intent")
    return "other domain, same intent" if same_intent else "other domain"


def rows_of(run: str, turns, library, oos_labels: bool = True) -> list[PredictionRow]:
    """``PredictionRow``s of a run's ``evals.switch_loop.LoopTurn``s."""
    from .switch_loop import error_category, to_record

    out = []
    for t in turns:
        rec = to_record(t, oos_labels)
        top = rec.predicted[0] if rec.predicted else None
        cat = error_category(t, oos_labels)
        out.append(PredictionRow(run=run, dialogue=t.dialogue, turn=t.index, gold=t.gold, prev_gold=t.prev_gold,
                                 before=t.before, predicted=top, candidates=list(rec.predicted),
                                 decision=rec.decision, verdict="wrong" if cat else "right", category=cat,
                                 relation=relation(t.gold, top, library) if cat else None))
    return out


def write_rows(path: Path, rows: Iterable[PredictionRow]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(r.model_dump_json() + "\n")
            n += 1
    return n


def read_rows(path: Path) -> list[PredictionRow]:
    return [PredictionRow.model_validate_json(line) for line in Path(path).read_text(encoding="utf-8").splitlines()
            if line.strip()]


def confusions(rows: Iterable[PredictionRow]) -> dict[str, dict[str, int]]:
    """Wrong turns counted by error category, then by relation (``"all"`` sums the categories)."""
    table: dict[str, Counter] = {}
    for r in rows:
        if r.verdict == "wrong":
            table.setdefault(r.category or "?", Counter())[r.relation or "?"] += 1
            table.setdefault("all", Counter())[r.relation or "?"] += 1
    return {c: dict(cnt) for c, cnt in table.items()}


def twins(library) -> dict[str, set[str]]:
    """Workflows another service's workflow cannot be told from by name or description."""
    wfs = list(library.workflows.values())
    out: dict[str, set[str]] = {}
    for a in wfs:
        for b in wfs:
            if a.name != b.name and a.role != b.role and (
                    intent_name(a) == intent_name(b) or a.description.strip().lower() == b.description.strip().lower()):
                out.setdefault(a.name, set()).add(b.name)
    return out


def ceiling(rows: list[PredictionRow], library) -> dict[str, float]:
    """Turns whose gold has a twin, and top-1 if confusing a gold with its twin counted as right (analysis)."""
    tw = twins(library)
    n = len(rows)
    right = sum(r.verdict == "right" for r in rows)
    twin_turns = sum(r.gold in tw for r in rows)
    twin_wrong = sum(r.verdict == "wrong" and r.predicted in tw.get(r.gold or "", ()) for r in rows)
    return {"turns": n, "top1": right / n if n else float("nan"), "gold_has_twin": twin_turns,
            "gold_has_twin_share": twin_turns / n if n else float("nan"), "twin_confusions": twin_wrong,
            "top1_twins_right": (right + twin_wrong) / n if n else float("nan")}


def summary_of(rows: list[PredictionRow], library) -> dict[str, dict]:
    """Per run, in the rows' order: the confusion table and the twin ceiling."""
    out = {}
    for run in dict.fromkeys(r.run for r in rows):
        mine = [r for r in rows if r.run == run]
        out[run] = {"confusions": confusions(mine), "ceiling": ceiling(mine, library)}
    return out


def summarize(path: Path, library) -> dict[str, dict]:
    """``summary_of`` a ``--predictions`` file."""
    return summary_of(read_rows(path), library)


def main(path: str, library_dir: str) -> None:
    """Print ``summarize`` as JSON (``python -m evals.switch_predictions FILE LIBRARY``)."""
    from workflows.library import load_library

    print(json.dumps(summarize(Path(path), load_library(library_dir)), indent=2, default=str))


if __name__ == "__main__":  # pragma: no cover - a thin CLI over summarize
    import sys

    main(sys.argv[1], sys.argv[2])
