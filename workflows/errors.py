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

# libyaml's parser when PyYAML was built with it (several times faster on large imported libraries).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
        self.node = yaml.compose(text, Loader=_LOADER)  # raises yaml.YAMLError with a mark
        self.data = yaml.load(text, Loader=_LOADER)

    def duplicate_keys(self) -> list[tuple[str, int]]:
        """``(field path, line)`` of every key repeated in a mapping (PyYAML silently keeps the last)."""
        out: list[tuple[str, int]] = []

        def walk(node: yaml.Node | None, loc: tuple[Any, ...]) -> None:
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for k, v in node.value:
                    if k.value in seen:
                        out.append((field_path(loc + (k.value,)), k.start_mark.line + 1))
                    seen.add(k.value)
                    walk(v, loc + (k.value,))
            elif isinstance(node, yaml.SequenceNode):
                for i, child in enumerate(node.value):
                    walk(child, loc + (i,))

        walk(self.node, ())
        return out

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
        # e.g. an unclosed ``{`` is noticed lines later: also say where the construct began.
        ctx, ctx_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if ctx and ctx_mark and (not mark or ctx_mark.line != mark.line):
            problem += f" ({ctx} that starts on line {ctx_mark.line + 1})"
        return None, [Issue(str(path), mark.line + 1 if mark else None, "", f"YAML syntax error: {problem}")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Issue(str(path), None, "", f"cannot read: {exc}")]
    if not isinstance(doc.data, dict):
        return None, [Issue(str(path), 1, "", "expected a mapping of fields at the top level")]
    return doc, [Issue(str(path), line, field, "this key appears twice in the same mapping; only the last one counts")
                 for field, line in doc.duplicate_keys()]


# Friendlier words for the regular expressions used in ``pdl.py``.
_PATTERN_HINTS = {
    r"^[A-Za-z_][A-Za-z0-9_]*$": "must be an identifier (letters, digits and _, not starting with a digit)",
    r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$": "must look like 'package.module:function'",
}


def _trim(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """Drop the parts of a Pydantic location that are not in the file (union member tags like
    ``bool`` or ``dict[str,any]`` after a scalar), keeping a final missing key."""
    out: list[Any] = []
    for part in loc:
        if isinstance(data, dict):
            out.append(part)
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int):
            out.append(part)
            data = data[part] if part < len(data) else None
        else:
            break
    return tuple(out)


def _message(err: dict[str, Any]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind == "string_pattern_mismatch":
        pattern = (err.get("ctx") or {}).get("pattern", "")
        if pattern in _PATTERN_HINTS:
            return f"{_PATTERN_HINTS[pattern]} (got {err.get('input')!r})"
    if kind == "string_too_short" and (err.get("ctx") or {}).get("min_length") == 1:
        return "must not be empty"
    return err["msg"].removeprefix("Value error, ")


def pydantic_issues(doc: YamlDoc, exc: ValidationError) -> list[Issue]:
    merged: dict[tuple[Any, ...], list[str]] = {}
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = _message(err)
        msgs = merged.setdefault(_trim(loc, doc.data), [])
        if msg not in msgs:
            msgs.append(msg)
    # A union field yields one error per member: report them once, joined.
    return [Issue(str(doc.path), doc.line(loc), field_path(loc), " or ".join(msgs)) for loc, msgs in merged.items()]
