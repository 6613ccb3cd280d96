"""FlowSwitch's 10 FlowBench turn-level samples (``flowswitch/data/sample_input.jsonl``) as dialogues.

Each sample is one dialogue whose last user turn is scored: gold = ``answer[0]`` (a workflow uuid, or
"Out of scope" → None), the active workflow = ``last_turn_workflow[0]`` (first listed; "" → none).
Earlier user turns are context only.  Assistant "Response: …"/"Thought: …" texts become agent turns;
function results are dropped.  Uuids map to library names through the importer's ``uuid:<uuid>`` tags.
Also holds ``import_once``, shared by the adapters to import a library into a cache folder once.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from . import Dialogue, Turn

OUT_OF_SCOPE = "Out of scope"
_MARK = ".imported"


def import_once(out_dir: Path, run: Callable[[], object]) -> Path:
    """Run an importer into ``out_dir`` unless a previous run finished there."""
    out_dir = Path(out_dir)
    if not (out_dir / _MARK).exists():
        if out_dir.exists():
            shutil.rmtree(out_dir)  # a half-written import from an interrupted run
        out_dir.mkdir(parents=True)
        run()
        (out_dir / _MARK).write_text("ok\n")
    return out_dir


def uuid_names(library) -> dict[str, str]:
    names = {}
    for wf in library.workflows.values():
        for tag in wf.tags:
            if tag.startswith("uuid:"):
                names[tag[5:]] = wf.name
    return names


def _agent_text(content: str) -> str:
    content = content.strip()
    if content.startswith("Response:"):
        return content[len("Response:"):].strip()
    return content


def load(data_dir: Path, limit: int | None = None, uuid_to_name: dict[str, str] | None = None
         ) -> list[Dialogue]:
    path = Path(data_dir) / "flowswitch" / "data" / "sample_input.jsonl"
    names = uuid_to_name or {}

    def name(uuid: str) -> str | None:
        if not uuid or uuid == OUT_OF_SCOPE:
            return None
        return names.get(uuid, uuid)

    out: list[Dialogue] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                answer = raw["answer"]
                last = raw.get("last_turn_workflow") or []
            except (json.JSONDecodeError, KeyError) as exc:
                raise ValueError(f"{path}:{lineno}: bad sample ({exc})") from None
            dlg = Dialogue(id=raw.get("turn_id", str(lineno)))
            for m in raw["messages"]:
                if m.get("role") == "user":
                    dlg.turns.append(Turn("user", m.get("content", ""), scored=False))
                elif m.get("role") == "assistant":
                    dlg.turns.append(Turn("agent", _agent_text(m.get("content", ""))))
            users = dlg.user_turns
            if not users:
                raise ValueError(f"{path}:{lineno}: field messages: no user turn")
            final = users[-1]
            final.scored = True
            final.gold = name(answer[0] if answer else "")
            final.prev_gold = name(last[0] if isinstance(last, list) and last else "")
            final.gold_changed = final.gold != final.prev_gold
            # Drop anything after the scored user turn (function results of that turn's action).
            dlg.turns = dlg.turns[: dlg.turns.index(final) + 1]
            out.append(dlg)
            if limit and len(out) >= limit:
                break
    return out


def library(data_dir: Path, out_dir: Path) -> Path:
    from workflows.importers.flowbench import import_flowbench

    return import_once(out_dir, lambda: import_flowbench(Path(data_dir) / "flowswitch", out_dir))
