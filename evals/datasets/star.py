"""STAR dialogues as switch-evaluation dialogues.

Splits (the DialogueID % 5 == 0 fifth is a private holdout): ``train`` = DialogueID % 5 in {1, 2},
``dev`` = {3, 4}.  By default only MultiTask dialogues (the ones with task switches); ``single_task``
adds the others.

Gold per user turn: the wizard picks the task flowchart (``Wizard/select_task``) *after* the user
speaks, so a user turn is labelled with the task in force when the wizard answers it — the last
``select_task`` before the next user turn (else a ``query`` whose API is a task), carried over while the
wizard selects nothing.  Turns before the first selection get the first task selected later (the user
opened with that request; the wizard selected only after collecting a detail).  Single-task dialogues
have one task (their only WizardCapability).  STAR has no "no task" label, so gold is never None.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from . import Dialogue, Turn, finish_labels

SPLITS = {"train": (1, 2), "dev": (3, 4)}


def _tasks(data_dir: Path) -> set[str]:
    return {p.name for p in (Path(data_dir) / "star" / "tasks").iterdir() if p.is_dir()}


def convert(raw: dict, tasks: set[str]) -> Dialogue | None:
    dlg = Dialogue(id=str(raw["DialogueID"]))
    scenario = raw.get("Scenario", {})
    caps = [c.get("Task") for c in scenario.get("WizardCapabilities", []) if c.get("Task") in tasks]
    fixed = caps[0] if not scenario.get("MultiTask") and len(caps) == 1 else None
    current: str | None = fixed
    window: list[int] = []  # indexes of user turns waiting for a label
    labels: dict[int, str | None] = {}
    first_task: str | None = fixed
    for ev in raw.get("Events", []):
        agent, action = ev.get("Agent"), ev.get("Action")
        if agent == "User" and action == "utter":
            dlg.turns.append(Turn("user", ev.get("Text") or ""))
            labels[len(dlg.turns) - 1] = current
            window = [len(dlg.turns) - 1]
        elif agent == "Wizard" and action in ("utter", "pick_suggestion"):
            if ev.get("Text"):
                dlg.turns.append(Turn("agent", ev["Text"]))
        elif agent == "Wizard" and (action == "select_task" and ev.get("Task") in tasks
                                    or action == "query" and ev.get("APIName") in tasks):
            if fixed is None:
                current = ev.get("Task") or ev.get("APIName")
                first_task = first_task or current
                for i in window:  # the wizard's choice answers the pending user turn
                    labels[i] = current
    users = [i for i, t in enumerate(dlg.turns) if t.speaker == "user"]
    if not users or first_task is None:
        return None
    for i in users:
        dlg.turns[i].gold = labels[i] or first_task
    return finish_labels(dlg)


def load(data_dir: Path, split: str = "dev", limit: int | None = None, single_task: bool = False
         ) -> list[Dialogue]:
    if split not in SPLITS:
        raise ValueError(f"STAR split must be one of {sorted(SPLITS)} (DialogueID % 5 == 0 is held out)")
    tasks = _tasks(data_dir)
    out: list[Dialogue] = []
    with gzip.open(Path(data_dir) / "star" / "dialogues.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            raw = json.loads(line)
            if raw["DialogueID"] % 5 not in SPLITS[split]:
                continue
            if not single_task and not raw.get("Scenario", {}).get("MultiTask"):
                continue
            dlg = convert(raw, tasks)
            if dlg is not None:
                out.append(dlg)
                if limit and len(out) >= limit:
                    break
    return out


def library(data_dir: Path, out_dir: Path) -> Path:
    """The 24 STAR task flowcharts imported as a PDL library (workflow name = task folder name)."""
    from workflows.importers import star_kb
    from workflows.importers.star import import_star

    from .flowbench import import_once

    # The library's tools read this data (also when the import was cached by an earlier run).
    star_kb.register_data_dir(Path(data_dir) / "star")
    return import_once(out_dir, lambda: import_star(Path(data_dir) / "star", out_dir))
