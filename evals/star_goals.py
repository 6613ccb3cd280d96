"""Goals for simulated users taken from STAR dialogues (``flowdesk eval sessions --dataset star``, and the
sub-flow simulation of ``flowdesk eval extraction``).

A STAR dialogue gives what a real user wanted: its task, the constraints the user gave (the arguments of
the wizard's last knowledge-base query, ``RequestType`` left out: that is how the wizard queries — check
or book — not something the user knows) and the KB row the dialogue ended with.  One goal per dialogue:

- ``slots`` = those constraints under the workflow's names (``importers.common.identifier``);
- ``slot_specs`` from the task's STAR API spec (``star/apis/apis/<task>.json``: readable names, types,
  categories), so the simulated user speaks the same way whatever library the agent runs;
- the gold: the library's own workflow played with the real STAR KB tools (``session_goals.measure_gold``:
  path, terminal ANSWER, the KB values the user must be told); every call to the task's API must carry
  the user's constraints (a library that lost a constraint cannot satisfy them).  When the workflow cannot
  be played through with the user's constraints (it asks for something the user never gave), the gold is
  the library-independent one: the task's API called with the user's constraints.
- ``row``: the KB row of the dialogue (reference only; the STAR KB tools generate rows from the
  constraints, so the values the user must receive come from the gold run, not from the recording).

Dialogues: single-task ones of a split (default dev: DialogueID % 5 in {3, 4}) whose last query returned a
row, sampled with a seed, at most ``per_task`` per task.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

from workflows.library import Library

from .session_goals import Gold, Goal, measure_gold, terminal_answers

PROTOCOL_ARGS = {"RequestType"}  # how the wizard queries STAR's KB (check / book), not the user's constraint


@dataclass
class StarGoal(Goal):
    """A goal with where it comes from: the dialogue's id and the KB row it ended with (never its text)."""

    dialogue: str = ""
    row: dict[str, Any] = field(default_factory=dict)


def _api_specs(root: Path, task: str) -> dict[str, dict[str, Any]]:
    """Slot specs from the task's STAR API file: identifier -> {description, type, enum}."""
    from workflows.importers.common import identifier

    path = root / "apis" / "apis" / f"{task}.json"
    if not path.exists():
        return {}
    api = json.loads(path.read_text(encoding="utf-8"))
    out = {}
    for f in api.get("input", []) + api.get("output", []):
        cats = [c for c in f.get("Categories") or [] if isinstance(c, str)]
        kind = {"Integer": "integer", "Boolean": "boolean"}.get(f.get("Type"), "enum" if cats else "string")
        out[identifier(f["Name"])] = {"description": f.get("ReadableName") or f["Name"], "type": kind, "enum": cats}
    return out


def dialogue_goals(data: str | Path, split: str = "dev", per_task: int = 2, seed: int = 0,
                   tasks: set[str] | None = None) -> list[dict[str, Any]]:
    """``{id, task, slots, row}`` per sampled single-task dialogue whose last KB query found a row."""
    from workflows.extraction.star import constraints, iter_dialogues, star_dir
    from workflows.importers.common import identifier

    root = star_dir(data)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for d in iter_dialogues(root / "dialogues.jsonl.gz", split):
        caps = [c["Task"] for c in d["Scenario"].get("WizardCapabilities") or []]
        if len(caps) != 1 or (tasks is not None and caps[0] not in tasks):
            continue
        events = d["Events"]
        last = None
        for i, e in enumerate(events):
            if e.get("Agent") == "Wizard" and e.get("Action") == "query" and e.get("APIName") == caps[0]:
                nxt = events[i + 1] if i + 1 < len(events) else {}
                item = {k: v for k, v in (nxt.get("Item") or {}).items() if k != "APIName"} \
                    if nxt.get("Agent") == "KnowledgeBase" else {}
                last = (constraints(e), item)
        if last is None or not last[1]:
            continue
        slots = {identifier(k): v for k, v in last[0].items()
                 if k not in PROTOCOL_ARGS and v not in (None, "") and not isinstance(v, (list, dict))}
        if slots:
            by_task.setdefault(caps[0], []).append({"id": str(d["DialogueID"]), "task": caps[0], "slots": slots,
                                                   "row": last[1]})
    out = []
    for task in sorted(by_task):
        rows = by_task[task]
        out += random.Random(f"{seed}:{task}").sample(rows, min(per_task, len(rows)))
    return out


def _with_constraints(gold: Gold, api: str, slots: dict[str, Any]) -> Gold:
    """Every call to the task's API must carry the user's constraints."""
    calls = [(n, {**args, **slots} if n == api else args) for n, args in gold.calls]
    if not any(n == api for n, _ in calls):
        calls.append((api, dict(slots)))
    return Gold(gold.path, calls, gold.terminal, gold.info, gold.diff, gold.irreversible, gold.volatile)


def star_goals(library: Library, data: str | Path, db: str | Path, split: str = "dev", per_task: int = 2,
               seed: int = 0, workflows: list[str] | None = None) -> list[StarGoal]:
    """Goals from STAR dialogues for the library's workflows (named like the STAR tasks)."""
    from workflows.extraction.star import star_dir
    from workflows.importers.star_kb import register_data_dir

    root = star_dir(data)
    register_data_dir(root)  # the KB tools read the same STAR folder
    names = set(workflows or library.workflows)
    rows = dialogue_goals(root, split, per_task, seed, tasks=names)
    work = Path(tempfile.mkdtemp(prefix="flowdesk-star-goals-"))
    pristine = work / "pristine.sqlite"
    shutil.copy(db, pristine)
    goals: list[StarGoal] = []
    try:
        for r in rows:
            wf = library.workflows[r["task"]]
            specs = _api_specs(root, r["task"])
            api = r["task"] if wf.api(r["task"]) is not None else (wf.apis[0].name if wf.apis else r["task"])
            measured = measure_gold(wf, dict(r["slots"]), pristine, work)
            gold = _with_constraints(measured, api, r["slots"]) if measured is not None else \
                Gold([api], [(api, dict(r["slots"]))], "", [], {})
            # the user names the task, not the library's wording of it: the same opener for every library
            title = "get help with " + r["task"].replace("_", " ")
            goal = StarGoal(r["task"], title, dict(r["slots"]),
                            {k: specs.get(k, {"description": k, "type": "string", "enum": []}) for k in r["slots"]},
                            f"{gold.terminal or 'kb_query'}@{r['id']}", gold, terminals=sorted(terminal_answers(wf)),
                            dialogue=r["id"], row=r["row"])
            goals.append(goal)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return goals


ABOUT = ("A goal-driven simulated user (`evals/simulated_user.py`, offline, deterministic per seed) talks to the "
         "real agent graph (offline policies) running a library of STAR workflows bound to the STAR KB tools "
         "(`workflows/importers/star_kb.py`), a fresh thread per session. Goals (`evals/star_goals.py`): one per "
         "sampled single-task STAR dev dialogue whose last KB query found a row: the task, the constraints the user "
         "gave (that query's arguments, RequestType left out) and the row. Gold: the library's own procedure played "
         "with those constraints and the KB tools; every call it makes to the task's API must carry the user's "
         "constraints (when the procedure cannot be played through with them, the gold is that API called with "
         "them). Success: the gold calls are made (and the values the gold's terminal reply shows are told). "
         "Tool P/R/F1 and parameter F1 follow FlowBench (calls aligned to the gold by name, in order); F_beta "
         "(β=5), MMR and TE-ratio follow WISE-Flow over milestones; pass^k per τ-bench over seeds. Session words "
         "are not kept in this folder (the goals hold values typed by STAR's users).")


def run_star_sessions(library: str | Path, data: str | Path, out: str | Path, *, per_task: int = 2, seeds: int = 1,
                      categories: list[str] | None = None, workflows: list[str] | None = None,
                      store_dir: str | None = None, progress=None, title: str | None = None) -> dict[str, Any]:
    """``evals.sessions.run_eval`` with STAR dialogues' goals against ``library`` (imported or extracted STAR
    workflows, bound to the STAR KB tools) — one report in ``out``; ``categories``: every out-of-workflow
    category unless given (the sub-flow simulation of ``evals.extraction`` plays ``["none"]``)."""
    from graph.context import Context
    from workflows.extraction.star import star_dir
    from workflows.importers.star_kb import register_data_dir

    from .sessions import run_eval

    register_data_dir(star_dir(data))
    ctx = Context(store_dir=str(store_dir)) if store_dir else Context()
    return run_eval(out, library=str(library), seeds=seeds, categories=categories, workflows=workflows,
                    context=ctx, progress=progress,
                    goal_source=lambda lib, db, wfs: star_goals(lib, data, db, per_task=per_task, workflows=wfs),
                    transcripts=False,  # the goals hold values users typed in STAR dialogues: no words in reports
                    about=ABOUT,
                    title=title or "Sessions with simulated users pursuing STAR dialogues' goals (offline agent)")


def import_gold_library(data: str | Path, out: Path) -> Path:
    """The imported STAR library (``importers.star.import_star``) at ``out``, written once."""
    from workflows.extraction.star import star_dir
    from workflows.importers.star import import_star

    if not (out.exists() and any(out.rglob("*.yaml"))):
        out.mkdir(parents=True, exist_ok=True)
        import_star(star_dir(data), out)
    return out
