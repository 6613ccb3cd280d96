"""Friendly problems: every report names the file, the line and the field.

``yaml_lines`` keeps the YAML node tree so a Pydantic error location such as
``('apis', 1, 'precondition', 0)`` can be turned into the line a person should open.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError


@dataclass(frozen=True)
class Issue:
    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class LibraryError(Exception):
    """Raised with every problem found; ``str()`` lists them one per line."""

    def __init__(self, issues: list[Issue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


def field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class YamlDoc:
    """A parsed YAML mapping plus the node tree, to find the line of any field path."""

    def __init__(self, path: Path, text: str | None = None):
        self.path = path
        text = path.read_text(encoding="utf-8") if text is None else text
        self.node = yaml.compose(text)  # raises yaml.YAMLError with a mark
        self.data = yaml.safe_load(text)

    def line(self, loc: tuple[Any, ...]) -> int | None:
        node = self.node
        best = node.start_mark.line + 1 if node is not None else None
        for part in loc:
            child = None
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if k.value == part:
                        best = k.start_mark.line + 1
                        child = v
                        break
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                child = node.value[part]
                best = child.start_mark.line + 1
            if child is None:
                break
            node = child
        return best

    def value_line(self, loc: tuple[Any, ...]) -> int | None:
        """Line where the *value* at ``loc`` starts (for block scalars: the first content line)."""
        node = self.node
        for part in loc:
            nxt = None
            if isinstance(node, yaml.MappingNode):
                nxt = next((v for k, v in node.value if k.value == part), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                nxt = node.value[part]
            if nxt is None:
                return self.line(loc)
            node = nxt
        line = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
            line += 1
        return line


def load_yaml(path: Path) -> tuple[YamlDoc | None, list[Issue]]:
    try:
        doc = YamlDoc(path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [Issue(str(path), mark.line + 1 if mark else None, "", f"YAML syntax error: {problem}")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Issue(str(path), None, "", f"cannot read: {exc}")]
    if not isinstance(doc.data, dict):
        return None, [Issue(str(path), 1, "", "expected a mapping of fields at the top level")]
    return doc, []


def pydantic_issues(doc: YamlDoc, exc: ValidationError) -> list[Issue]:
    out = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "missing":
            msg = "required field is missing"
        out.append(Issue(str(doc.path), doc.line(loc), field_path(loc), msg.removeprefix("Value error, ")))
    return out
