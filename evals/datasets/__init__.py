"""Dataset adapters for the switch evaluation: every dataset becomes dialogues of turns in one format.

A ``Dialogue`` is a list of ``Turn``s (``speaker`` "user" | "agent", ``text``).  User turns carry the
gold workflow name (``None`` = out of scope / no task), ``prev_gold`` (the gold of the previous user
turn, i.e. the active workflow under the paper's turn-level protocol) and ``gold_changed``.  Turns with
``scored=False`` are context only (FlowBench samples score their last user turn only).

``load_switch_dataset(name, data_dir, split, limit)`` returns ``(dialogues, library_dir)``: the library is
imported from the same data with the project's importers into a cache folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DATASETS = ("sgd", "star", "flowbench-samples")


def eval_today() -> str:
    """The calendar date a dataset's relative dates ("tomorrow", "on Friday") are read against in every
    evaluation and training replay (``Context.today``): the demo desk's, fixed, so that a figure does not
    depend on the day it is measured (a full run that crossed midnight once read 20 turns differently)."""
    from workflows.demo.db import desk_today

    return desk_today().isoformat()


@dataclass
class Turn:
    speaker: str  # "user" | "agent"
    text: str
    gold: str | None = None  # workflow name; None = out of scope (user turns only)
    prev_gold: str | None = None  # gold of the previous user turn (the active workflow)
    gold_changed: bool = False
    scored: bool = True

    def as_dict(self) -> dict:
        return {"speaker": self.speaker, "text": self.text, "gold": self.gold, "gold_changed": self.gold_changed}


@dataclass
class Dialogue:
    id: str
    turns: list[Turn] = field(default_factory=list)

    @property
    def user_turns(self) -> list[Turn]:
        return [t for t in self.turns if t.speaker == "user"]


def finish_labels(dialogue: Dialogue) -> Dialogue:
    """Fill ``prev_gold`` / ``gold_changed`` from consecutive user-turn golds."""
    prev: str | None = None
    for t in dialogue.user_turns:
        t.prev_gold = prev
        t.gold_changed = t.gold != prev
        prev = t.gold
    return dialogue


def default_data_dir() -> Path:
    """``FLOWDESK_DATA`` or ``../shared/data`` next to the repository."""
    env = os.environ.get("FLOWDESK_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def load_switch_dataset(name: str, data_dir: str | Path, split: str = "dev", limit: int | None = None,
                        cache_dir: str | Path = ".flowdesk/eval", single_task: bool = False, every: int = 1
                        ) -> tuple[list[Dialogue], Path]:
    """``every`` > 1 keeps every k-th dialogue (a sample spread over the whole split), then ``limit``."""
    if every > 1:
        dialogues, lib = load_switch_dataset(name, data_dir, split, None, cache_dir, single_task)
        return dialogues[::every][:limit] if limit else dialogues[::every], lib
    data_dir = Path(data_dir)
    cache = Path(cache_dir)
    if name == "sgd":
        from . import sgd

        return sgd.load(data_dir, split, limit), sgd.library(data_dir, cache / f"sgd-{split}", split)
    if name == "star":
        from . import star

        return star.load(data_dir, split, limit, single_task), star.library(data_dir, cache / "star")
    if name == "flowbench-samples":
        from . import flowbench

        return flowbench.load(data_dir, limit), flowbench.library(data_dir, cache / "flowbench")
    raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
