"""The conversation-test file format and its loader.

A file holds ``test_cases``; a case is a name and a list of steps; a step is a mapping with exactly one
key — ``user`` (a user turn) or ``confirm`` (the answer to a pending confirmation) drive the
conversation, every other key checks the turn before it::

    test_cases:
      - name: book a table
        steps:
          - user: "A table at Sakura Lane for 3 on 2026-12-11 at 19:30"
          - workflow: book_table
          - bot_contains: "name"
          - user: "Bob Stone"
          - confirm: "yes"
          - tool_called: {name: book, args: {party_size: 3}}
          - workflow_completed: book_table

``known_failure: "why"`` on a case marks a known defect of the agent: the case runs and its diff is
shown, but only an unexpected pass fails the run.

A malformed file raises ``LibraryError`` whose issues name the file, the line and the field
(``cases.yaml:7: test_cases[0].steps[2].tool_called.name: required field is missing``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workflows.errors import Issue, LibraryError, parse_file

DRIVERS = ("user", "confirm")
CHECKS = ("workflow", "bot_contains", "bot_matches", "tool_called", "tool_not_called", "slot",
          "workflow_completed", "workflow_cancelled", "handoff", "no_workflow")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCall(_M):
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)  # a subset the call's arguments must match


class Step(_M):
    """One step: exactly one of the fields is set."""

    user: str | None = Field(default=None, min_length=1)
    confirm: str | None = Field(default=None, min_length=1)
    workflow: str | None = None  # the active workflow after the turn
    bot_contains: str | None = Field(default=None, min_length=1)  # case-insensitive substring of the replies
    bot_matches: str | None = Field(default=None, min_length=1)  # regular expression searched in the replies
    tool_called: ToolCall | None = None
    tool_not_called: str | None = Field(default=None, min_length=1)
    slot: dict[str, Any] | None = None  # slots of the active workflow (a subset)
    workflow_completed: str | None = None
    workflow_cancelled: str | None = None
    handoff: bool | None = None  # true: the turn handed over to a person
    no_workflow: bool | None = None  # true: no workflow is active after the turn (out of scope)
    line: int = Field(default=0, exclude=True)  # where the step is in its file (set by the loader)

    @field_validator("tool_called", mode="before")
    @classmethod
    def _name_only(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v  # ``tool_called: book`` is ``{name: book}``

    @field_validator("bot_matches")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> "Step":
        given = self.keys()
        if len(given) != 1:
            raise ValueError(f"a step has exactly one of {list(DRIVERS + CHECKS)}; got {given or 'none'}")
        return self

    def keys(self) -> list[str]:
        return [k for k in DRIVERS + CHECKS if getattr(self, k) is not None]

    @property
    def kind(self) -> str:
        return self.keys()[0]

    @property
    def value(self) -> Any:
        return getattr(self, self.kind)

    def describe(self) -> str:
        v = self.value
        if isinstance(v, BaseModel):
            v = v.model_dump()
        return f"{self.kind}: {v!r}"


class TestCase(_M):
    __test__ = False  # not a pytest class
    name: str = Field(min_length=1)
    steps: list[Step] = Field(min_length=1)
    # a known defect of the agent, named: the case still runs and is reported; it fails the run only
    # when it unexpectedly passes (so a fix is noticed and the mark removed)
    known_failure: str | None = Field(default=None, min_length=1)
    file: str = Field(default="", exclude=True)
    line: int = Field(default=0, exclude=True)

    @model_validator(mode="after")
    def _starts_with_user(self) -> "TestCase":
        if self.steps[0].kind != "user":
            raise ValueError("the first step must be a 'user' turn")
        return self


class TestFile(_M):
    __test__ = False
    test_cases: list[TestCase] = Field(min_length=1)


def find_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every ``*.yaml``/``*.yml`` under the given files or directories, sorted; a missing path is an issue."""
    out: list[Path] = []
    missing: list[Issue] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.suffix in (".yaml", ".yml") and q.is_file())
        elif p.is_file():
            out.append(p)
        else:
            missing.append(Issue(str(p), None, "", "no such file or directory"))
    if missing:
        raise LibraryError(missing)
    return list(dict.fromkeys(out))


def load_tests(paths: Iterable[str | Path], workflows: Iterable[str] | None = None) -> list[TestCase]:
    """Every test case of every file under ``paths``; with ``workflows`` (the library's names) a step naming
    an unknown workflow is an issue too.  Raises ``LibraryError`` listing every problem."""
    files = find_files(paths)
    known = set(workflows) if workflows is not None else None
    cases: list[TestCase] = []
    issues: list[Issue] = []
    if not files:
        raise LibraryError([Issue(", ".join(map(str, paths)), None, "", "no test files (*.yaml) found")])
    for path in files:
        tf, doc, errs = parse_file(path, TestFile)
        issues += errs
        if tf is None:
            continue
        names: set[str] = set()
        for ci, case in enumerate(tf.test_cases):
            case.file, case.line = str(path), doc.line(("test_cases", ci)) or 0
            if case.name in names:
                issues.append(Issue(str(path), doc.line(("test_cases", ci, "name")), f"test_cases[{ci}].name",
                                    f"duplicate test case name {case.name!r}"))
            names.add(case.name)
            for si, step in enumerate(case.steps):
                step.line = doc.line(("test_cases", ci, "steps", si)) or 0
                if known is None:
                    continue
                for key in ("workflow", "workflow_completed", "workflow_cancelled"):
                    wf = getattr(step, key)
                    if wf is not None and wf not in known:
                        issues.append(Issue(str(path), step.line, f"test_cases[{ci}].steps[{si}].{key}",
                                            f"unknown workflow {wf!r}"))
            cases.append(case)
    if issues:
        raise LibraryError(issues)
    return cases
