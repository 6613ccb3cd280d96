"""The transcript format ``flowdesk extract --transcripts FILE.jsonl`` reads (docs/TRANSCRIPTS.md).

One dialogue per line::

    {"id": "c-17", "task": "book_table", "domain": "dining",
     "turns": [
       {"speaker": "user", "text": "I'd like a table for two tonight"},
       {"speaker": "agent", "text": "Which restaurant?", "action": "ask_restaurant"},
       {"speaker": "user", "text": "Casa Fiorella"},
       {"speaker": "agent", "action": "check_table",
        "api": {"name": "reserve", "args": {"Restaurant": "Casa Fiorella", "Mode": "check"},
                "result": {"Status": "Available"}}},
       {"speaker": "agent", "text": "Casa Fiorella has a table. Shall I book it?", "action": "ask_confirm"}]}

- ``speaker``: ``user`` or ``agent``; ``text`` is what was said (may be empty for an API call).
- ``action``: the agent's action label (a reply kind such as ``ask_restaurant``) when the logs have one;
  agent turns without ``action`` or ``api`` are free text and do not become workflow steps.
- ``api``: an API call made at that point, with ``args`` and the ``result`` it returned (``{}`` or
  ``null`` = nothing found). Its step is named ``action`` when given, else the API name.
- ``task``: the dialogue's intent/task when known; dialogues without one are grouped by content.
- ``domain`` / ``role``: optional grouping for the library tree (default ``general`` / ``<domain>_agent``).

``load_transcripts(path)`` validates every line and raises ``TranscriptError`` listing each problem as
``file:line: field: message`` (never a traceback).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import Issue, LibraryError, field_path
from ..importers.common import identifiers


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ApiCall(_Model):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    args: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] | None = None

    @field_validator("args", "result")
    @classmethod
    def _identifiers(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # Log field names ("from", "check-in", "Größe") become slot and value names of the mined
        # workflow: make them identifiers once, here (``importers.common.identifier``).
        if value is None:
            return None
        names = identifiers(value)
        return {names[k]: v for k, v in value.items()}


class TranscriptTurn(_Model):
    speaker: Literal["user", "agent"]
    text: str = ""
    action: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    api: ApiCall | None = None

    @model_validator(mode="after")
    def _agent_only(self) -> "TranscriptTurn":
        if self.speaker == "user" and (self.action or self.api):
            raise ValueError("only agent turns carry an action or an api call")
        return self

    @property
    def step(self) -> str | None:
        """The workflow step this turn performs (None: free text)."""
        return self.action or (self.api.name if self.api else None)


class Transcript(_Model):
    id: str
    task: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    domain: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    role: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    turns: list[TranscriptTurn] = Field(min_length=1)


class TranscriptError(LibraryError):
    """Problems in a transcripts file, one ``Issue`` (file, line, field, message) each."""


def parse_transcripts(lines: Iterable[str], source: str = "<transcripts>") -> list[Transcript]:
    out: list[Transcript] = []
    issues: list[Issue] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            issues.append(Issue(source, no, "", f"not valid JSON ({exc.msg} at column {exc.colno})"))
            continue
        try:
            out.append(Transcript.model_validate(raw))
        except ValidationError as exc:
            for err in exc.errors():
                issues.append(Issue(source, no, field_path(tuple(err["loc"])), err["msg"]))
    if not out and not issues:
        issues.append(Issue(source, None, "", "no transcripts (the file is empty)"))
    if issues:
        raise TranscriptError(issues)
    return out


def load_transcripts(path: str | Path) -> list[Transcript]:
    path = Path(path)
    if not path.is_file():
        raise TranscriptError([Issue(str(path), None, "", "file does not exist")])
    with path.open(encoding="utf-8") as fh:
        return parse_transcripts(fh, str(path))


def dump_transcripts(transcripts: Iterable[Transcript], path: str | Path) -> Path:
    path = Path(path)
    with path.open("w", encoding="utf-8") as fh:
        for t in transcripts:
            fh.write(t.model_dump_json(exclude_none=True) + "\n")
    return path
