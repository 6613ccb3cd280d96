"""STAR dialogues (``star/dialogues.jsonl.gz``) read as transcripts, and the facts about them that the
extraction and the next-action evaluation share.

- Splits by ``DialogueID % 5``: train = {1, 2}, dev = {3, 4}, all = {1..4}; 0 is a private holdout.
- A wizard query is named by its ``RequestType`` constraint (``query_label``): ``query_check``,
  ``query_book`` or ``query`` — the names STAR's flowcharts give their query nodes.
- The task of a turn: the single ``WizardCapabilities`` task, or the latest ``select_task`` in
  multi-task dialogues; turns before the first selection belong to the first task selected (the user
  opened with that request). A multi-task dialogue yields one transcript per task it visits.
- Wizard replies keep their ``ActionLabel`` as the action (``custom`` and unlabelled ones are free text);
  a query carries its constraints as ``args`` and the knowledge base's returned item as ``result``.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any, Iterator

from .transcripts import ApiCall, Transcript, TranscriptTurn

SPLITS = {"train": {1, 2}, "dev": {3, 4}, "all": {1, 2, 3, 4}}


def star_dir(data: str | Path) -> Path:
    """The STAR folder given the data root or the folder itself."""
    data = Path(data)
    return data if (data / "dialogues.jsonl.gz").exists() else data / "star"


def iter_dialogues(path: str | Path, split: str, limit: int = 0, every: int = 1) -> Iterator[dict]:
    """Raw STAR dialogues of a split (``every`` > 1 keeps every k-th one; ``limit`` caps the count)."""
    if split not in SPLITS:
        raise ValueError(f"STAR split must be one of {sorted(SPLITS)}, not {split!r}")
    keep = SPLITS[split]
    n = seen = 0
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            if d["DialogueID"] % 5 not in keep:
                continue
            seen += 1
            if every > 1 and (seen - 1) % every:
                continue
            yield d
            n += 1
            if limit and n >= limit:
                return


def literal(raw: Any) -> Any:
    """A constraint value: JSON literal, or the first literal inside api.is_equal_to(...)/is_one_of(...)."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except (ValueError, TypeError):
        m = re.search(r"\(\s*(\[.*\]|\".*?\"|[\w.-]+)", raw)
        if m:
            try:
                v = json.loads(m.group(1))
                return v[0] if isinstance(v, list) and v else v
            except ValueError:
                return m.group(1)
        return raw


def constraints(event: dict) -> dict:
    """A query event's constraints as ``{field: value}``."""
    out = {}
    for c in event.get("Constraints") or []:
        for k, v in c.items():
            out[k] = literal(v)
    return out


def query_label(args: dict) -> str:
    rt = str(args.get("RequestType") or "").strip().lower()
    return f"query_{rt}" if rt in ("check", "book") else "query"


def to_transcripts(d: dict, tasks: set[str] | None = None) -> list[Transcript]:
    """One transcript per task the dialogue visits (ids ``<DialogueID>`` or ``<DialogueID>#<k>``)."""
    caps = [c["Task"] for c in d["Scenario"].get("WizardCapabilities") or []]
    fixed = caps[0] if len(caps) == 1 else None
    segments: list[tuple[str | None, list[TranscriptTurn]]] = [(fixed, [])]
    events = d["Events"]
    for i, e in enumerate(events):
        agent, action = e.get("Agent"), e.get("Action")
        turns = segments[-1][1]
        if agent == "User" and action == "utter":
            turns.append(TranscriptTurn(speaker="user", text=e.get("Text") or ""))
        elif agent == "Wizard" and action == "select_task" and fixed is None:
            task = e.get("Task")
            if segments[-1][0] is None:  # the opening turns belong to the first task selected
                segments[-1] = (task, turns)
            elif task != segments[-1][0]:
                # the wizard selects after the user asked: that request opens the new task's segment
                moved = []
                while turns and turns[-1].speaker == "user":
                    moved.insert(0, turns.pop())
                segments.append((task, moved))
        elif agent == "Wizard" and action in ("pick_suggestion", "utter"):
            label = e.get("ActionLabel")
            step = label if label and label != "custom" else None
            if step or e.get("Text"):
                turns.append(TranscriptTurn(speaker="agent", text=e.get("Text") or "", action=step))
        elif agent == "Wizard" and action == "query" and e.get("APIName"):
            api = e["APIName"]
            if fixed is None and tasks is not None and api in tasks and segments[-1][0] not in (None, api):
                # querying another task's API without selecting it: the wizard moved to that task
                segments.append((api, []))
                turns = segments[-1][1]
            args = constraints(e)
            result: dict | None = None
            nxt = events[i + 1] if i + 1 < len(events) else {}
            if nxt.get("Agent") == "KnowledgeBase":
                result = {k: v for k, v in (nxt.get("Item") or {}).items() if k != "APIName"}
            turns.append(TranscriptTurn(speaker="agent", action=query_label(args),
                                        api=ApiCall(name=e["APIName"], args=args, result=result)))
    out = []
    for k, (task, turns) in enumerate(segments):
        if task is None or not turns or (tasks is not None and task not in tasks):
            continue
        tid = str(d["DialogueID"]) if len(segments) == 1 else f"{d['DialogueID']}#{k}"
        out.append(Transcript(id=tid, task=task, turns=turns))
    return out


def load_star_transcripts(data: str | Path, split: str = "train", limit: int = 0, every: int = 1
                          ) -> list[Transcript]:
    root = star_dir(data)
    path = root / "dialogues.jsonl.gz"
    if not path.exists():
        raise FileNotFoundError(f"{data}: no star/dialogues.jsonl.gz here")
    tasks = {p.name for p in (root / "tasks").iterdir() if p.is_dir()} if (root / "tasks").is_dir() else None
    out: list[Transcript] = []
    for d in iter_dialogues(path, split, limit, every):
        out.extend(to_transcripts(d, tasks))
    return out
