"""SGD (DSTC8 Schema-Guided Dialogue) as switch-evaluation dialogues.

Gold per USER turn: the focus frame's ``state.active_intent`` as ``<service>__<intent>`` (``NONE`` →
None = no task).  Focus frame: the only frame; in a 2-frame turn, the frame carrying the user's
INFORM_INTENT act, else (fallback files lack user acts) the frame whose service differs from the previous
user turn's focus service — the rule STATS.json documents (it agrees 100% with INFORM_INTENT on HEAD
files).  Reads ``<data>/sgd/<split>/dialogues_*.json.gz`` and ``<data>/sgd/fallback_pre2020/<split>/``.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Iterator

from . import Dialogue, Turn, finish_labels


def dialogue_files(data_dir: Path, split: str) -> list[Path]:
    root = Path(data_dir) / "sgd"
    files = {p.name: p for p in sorted((root / "fallback_pre2020" / split).glob("dialogues_*.json.gz"))}
    files.update({p.name: p for p in sorted((root / split).glob("dialogues_*.json.gz"))})
    if not files:
        raise FileNotFoundError(f"{root / split}: no dialogues_*.json.gz (is --data pointing at shared/data?)")
    return [files[k] for k in sorted(files)]


def every_dialogue(data_dir: Path, split: str, every: int = 1) -> Iterator[dict]:
    """Every ``every``-th raw dialogue of the split, in file order."""
    k = 0
    for path in dialogue_files(data_dir, split):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            dialogues = json.load(fh)
        for raw in dialogues:
            k += 1
            if not (k - 1) % every:
                yield raw


def user_turns(raw: dict) -> Iterator[tuple[dict, dict[str, set]]]:
    """A dialogue's user turns, each with the slots the system's turn before it requested, by service."""
    asked: dict[str, set] = defaultdict(set)
    for turn in raw["turns"]:
        if turn["speaker"] != "USER":
            asked = defaultdict(set)
            for f in turn.get("frames", []):
                asked[f["service"]].update(a.get("slot") for a in f.get("actions", []) if a.get("act") == "REQUEST")
            continue
        yield turn, asked


def _focus(frames: list[dict], prev_service: str | None) -> dict | None:
    if not frames:
        return None
    if len(frames) == 1:
        return frames[0]
    for f in frames:
        if any(a.get("act") == "INFORM_INTENT" for a in f.get("actions", [])):
            return f
    for f in frames:
        if f.get("service") != prev_service:
            return f
    return frames[-1]


def convert(raw: dict) -> Dialogue:
    dlg = Dialogue(id=str(raw["dialogue_id"]))
    prev_service = None
    for t in raw["turns"]:
        if t["speaker"] == "USER":
            focus = _focus(t.get("frames", []), prev_service)
            gold = None
            if focus is not None:
                prev_service = focus["service"]
                intent = focus.get("state", {}).get("active_intent", "NONE")
                gold = None if intent in (None, "NONE") else f"{focus['service']}__{intent}"
            dlg.turns.append(Turn("user", t["utterance"], gold))
        else:
            dlg.turns.append(Turn("agent", t["utterance"]))
    return finish_labels(dlg)


def load(data_dir: Path, split: str = "dev", limit: int | None = None) -> list[Dialogue]:
    out: list[Dialogue] = []
    for path in dialogue_files(data_dir, split):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for raw in json.load(fh):
                out.append(convert(raw))
                if limit and len(out) >= limit:
                    return out
    return out


def library(data_dir: Path, out_dir: Path, split: str) -> Path:
    """The split's schema imported as a PDL library (``<service>__<intent>`` workflows)."""
    from workflows.importers.sgd import import_sgd

    from .flowbench import import_once

    return import_once(out_dir, lambda: import_sgd(Path(data_dir) / "sgd", out_dir, split))
