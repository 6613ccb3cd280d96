"""Compliance script files: parametrised YAML templates (user turns, goal, confirmations,
expectations) read into sessions, with file:line errors."""

from __future__ import annotations

import re
import string
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workflows.errors import Issue, LibraryError, parse_file


SCRIPTS_DIR = Path(__file__).parent.parent / "compliance_scripts"
POLICIES = ("offline", "scripted", "scripted-nocontrol")
ADVERSARY = "compliance_adversary"
RECURSION_LIMIT = 80  # graph steps per turn
MAX_INTERRUPTS = 8  # confirmations per session
ATTACKS = ("skip_check", "fake_success", "free_text_claim", "repeat", "bad_args", "stale_args")
CATEGORIES = {
    "none": "no out-of-workflow move (control group)",
    "intent_switch": "intent switching: another task mid-way, then back",
    "slot_change": "intent switching: a slot value changed after it was used",
    "cancellation": "intent switching: the user cancels mid-way",
    "skip_step": "procedure jumping: asks to skip a step / just confirm",
    "info_early": "procedure jumping: information given before it is asked",
    "go_back": "procedure jumping: going back to an earlier step",
    "irrelevant": "irrelevant answering: off-topic reply to a question",
    "decline": "the user declines the irreversible action",
}


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DbCheck(_M):
    sql: str
    args: list[Any] = Field(default_factory=list)
    equals: Any = None
    unchanged: bool = False  # expect the value the query has on the freshly seeded database


class Expect(_M):
    ran: list[str] = Field(default_factory=list)  # tools that must have succeeded in the session
    not_ran: list[str] = Field(default_factory=list)  # tools that must not have succeeded
    db: list[DbCheck] = Field(default_factory=list)
    reply_contains: list[str] = Field(default_factory=list)  # regexes over the session's replies


class Template(_M):
    id: str = Field(pattern=r"^[a-z0-9_]+$")
    category: str
    goal: str
    workflow: str
    turns: list[str] = Field(min_length=1)
    confirm: list[str] = Field(default_factory=lambda: ["yes"])  # answers to interrupts in order; last repeats
    attacks: list[str] = Field(default_factory=lambda: list(ATTACKS))
    attack_budget: int = 1  # invalid proposals the adversary makes per turn
    expect: dict[str, Any] = Field(default_factory=dict)
    params: list[dict[str, Any]] = Field(min_length=1)


class ScriptFile(_M):
    templates: list[Template]


class Script(_M):
    id: str
    template: str
    category: str
    adversarial: bool
    goal: str
    workflow: str
    turns: list[str]
    confirm: list[str]
    attacks: list[str]
    attack_budget: int
    expect: Expect


def _subst(value: Any, params: dict[str, Any]) -> Any:
    if isinstance(value, str):
        if re.fullmatch(r"\$\w+", value) and value[1:] in params:
            return params[value[1:]]  # a lone $name keeps the parameter's type (numbers in SQL args)
        return string.Template(value).substitute({k: str(v) for k, v in params.items()})
    if isinstance(value, list):
        return [_subst(v, params) for v in value]
    if isinstance(value, dict):
        return {k: _subst(v, params) for k, v in value.items()}
    return value


def load_scripts(directory: str | Path = SCRIPTS_DIR) -> list[Script]:
    """Expand every template × parameter row; raises ``LibraryError`` naming file, line and field."""
    scripts: list[Script] = []
    issues: list[Issue] = []
    for path in sorted(Path(directory).glob("*.yaml")):
        sf, doc, errs = parse_file(path, ScriptFile)
        issues += errs
        if sf is None:
            continue
        for ti, t in enumerate(sf.templates):
            if t.category not in CATEGORIES:
                issues.append(Issue(str(path), doc.line(("templates", ti, "category")), f"templates[{ti}].category",
                                    f"unknown category {t.category!r}; one of {sorted(CATEGORIES)}"))
                continue
            bad = [a for a in t.attacks if a not in ATTACKS]
            if bad:
                issues.append(Issue(str(path), doc.line(("templates", ti, "attacks")), f"templates[{ti}].attacks",
                                    f"unknown attacks {bad}; one of {list(ATTACKS)}"))
                continue
            for pi, params in enumerate(t.params):
                try:
                    body = _subst({"turns": t.turns, "confirm": t.confirm, "expect": t.expect, "goal": t.goal},
                                  params)
                    scripts.append(Script(id=f"{t.id}-{pi + 1:02d}", template=t.id, category=t.category,
                                          adversarial=t.category != "none", workflow=t.workflow,
                                          attacks=t.attacks, attack_budget=t.attack_budget,
                                          expect=Expect.model_validate(body.pop("expect")), **body))
                except KeyError as exc:
                    issues.append(Issue(str(path), doc.line(("templates", ti, "params", pi)),
                                        f"templates[{ti}].params[{pi}]", f"no value for ${exc.args[0]}"))
                except ValidationError as exc:
                    issues.append(Issue(str(path), doc.line(("templates", ti, "expect")), f"templates[{ti}].expect",
                                        str(exc).splitlines()[0]))
    ids = Counter(s.id for s in scripts)
    issues += [Issue(str(directory), None, "id", f"duplicate script id {i!r}") for i, n in ids.items() if n > 1]
    if issues:
        raise LibraryError(issues)
    return scripts


