"""Friendly problems: every report names the file, the line and the field.

``YamlDoc`` keeps the YAML node tree so a Pydantic error location such as
``('apis', 1, 'precondition', 0)`` can be turned into the line a person should open.

YAML is loaded with limits (``yaml_limit_problem``), checked on the parser's event stream before
any tree is built: at most ``MAX_YAML_BYTES`` per file, ``MAX_YAML_DEPTH`` levels of nesting,
``MAX_YAML_ALIASES`` aliases and ``MAX_YAML_NODES`` values once aliases are expanded — so an alias
bomb or a 5,000-deep nesting is a named error at its line within milliseconds, not minutes of CPU
or a RecursionError.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

# libyaml's parser when PyYAML was built with it (several times faster on large imported libraries).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_YAML_BYTES = 1_000_000    # the largest imported workflow file is about 30 kB
MAX_YAML_DEPTH = 50           # workflows nest about 8 levels (JSON Schemas inside apis)
MAX_YAML_ALIASES = 200
MAX_YAML_NODES = 200_000      # values after expanding aliases; an imported workflow has a few hundred


class _Loader(_LOADER):
    def construct_object(self, node, deep=False):
        # SafeConstructor lets Python's own errors escape (the timestamp 2026-13-45, an integer over
        # 4,300 digits): turn them into a YAML error that carries the value's line.
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, OverflowError, TypeError) as exc:
            raise yaml.constructor.ConstructorError(None, None, f"invalid value {str(node.value)[:40]!r}: {exc}",
                                                    node.start_mark) from None


class YamlLimitError(yaml.YAMLError):
    """A YAML document over one of the loader's limits; ``line`` is where the limit was crossed."""

    def __init__(self, line: int | None, message: str):
        super().__init__(message)
        self.line, self.message = line, message


def yaml_limit_problem(text: str) -> YamlLimitError | None:
    """The first limit ``text`` crosses, from a single pass over the parser's events, or None.

    Each anchored node's expanded size is remembered, so an alias costs what it expands to and the
    count grows exactly as construction would, without constructing anything."""
    if len(text) > MAX_YAML_BYTES:
        return YamlLimitError(None, f"file is larger than the limit of {MAX_YAML_BYTES:,} characters")
    depth = aliases = nodes = 0
    anchors: dict[str, int] = {}
    open_nodes: list[tuple[str | None, int]] = []
    try:
        for ev in yaml.parse(text, Loader=_LOADER):
            line = ev.start_mark.line + 1 if ev.start_mark else None
            if isinstance(ev, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    return YamlLimitError(line, f"nesting deeper than the limit of {MAX_YAML_DEPTH} levels")
                open_nodes.append((ev.anchor, nodes))
                nodes += 1
            elif isinstance(ev, yaml.CollectionEndEvent):
                depth -= 1
                anchor, start = open_nodes.pop()
                if anchor:
                    anchors[anchor] = nodes - start
            elif isinstance(ev, yaml.ScalarEvent):
                nodes += 1
                if ev.anchor:
                    anchors[ev.anchor] = 1
            elif isinstance(ev, yaml.AliasEvent):
                if any(anchor == ev.anchor for anchor, _ in open_nodes):
                    return YamlLimitError(line, f"alias *{ev.anchor} is inside the node it names (a cycle)")
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    return YamlLimitError(line, f"more than the limit of {MAX_YAML_ALIASES} aliases (*name)")
                nodes += anchors.get(ev.anchor, 1)
            if nodes > MAX_YAML_NODES:
                return YamlLimitError(line, f"more than {MAX_YAML_NODES:,} values once aliases are expanded "
                                            f"(an alias bomb?)")
    except yaml.MarkedYAMLError as exc:
        # libyaml (with PyYAML >= 6.0.4) stops at a nesting limit of its own while it scans ahead of the
        # events this loop reads, so a deep file is stopped there before it reaches ours: the same limit
        # crossed, named as ours; any other error is the file's syntax
        if "nesting depth" not in (exc.problem or ""):
            raise
        mark = exc.problem_mark
        return YamlLimitError(mark.line + 1 if mark else None,
                              f"nesting deeper than the limit of {MAX_YAML_DEPTH} levels")
    return None


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
        if text is None:
            size = path.stat().st_size
            if size > MAX_YAML_BYTES:  # do not even read it
                raise YamlLimitError(None, f"file is larger than the limit of {MAX_YAML_BYTES:,} bytes ({size:,})")
            text = path.read_text(encoding="utf-8")
        problem = yaml_limit_problem(text)  # raises yaml.YAMLError with a mark on bad syntax
        if problem is not None:
            raise problem
        # One parse: compose the node tree (for lines), then construct the data from it.
        loader = _Loader(text)
        try:
            self.node = loader.get_single_node()
            self.data = loader.construct_document(self.node) if self.node is not None else None
        finally:
            loader.dispose()

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
    except YamlLimitError as exc:
        return None, [Issue(str(path), exc.line, "", f"YAML limit: {exc.message}")]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        # e.g. an unclosed ``{`` is noticed lines later: also say where the construct began.
        ctx, ctx_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if ctx and ctx_mark and (not mark or ctx_mark.line != mark.line):
            problem += f" ({ctx} that starts on line {ctx_mark.line + 1})"
        kind = "value error" if isinstance(exc, yaml.constructor.ConstructorError) else "syntax error"
        return None, [Issue(str(path), mark.line + 1 if mark else None, "", f"YAML {kind}: {problem}")]
    except UnicodeDecodeError as exc:
        return None, [Issue(str(path), None, "", f"cannot read: not UTF-8 text (byte {exc.start}: {exc.reason})")]
    except OSError as exc:
        return None, [Issue(str(path), None, "", f"cannot read: {exc.strerror or exc}")]
    except (ValueError, OverflowError, TypeError, RecursionError) as exc:  # _Loader names the line; a last guard
        return None, [Issue(str(path), None, "", f"YAML value error: {exc}")]
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


def parse_file(path: Path, model: type[M]) -> tuple[M | None, YamlDoc | None, list[Issue]]:
    """Load a YAML file and validate it as ``model``: the object (or None), the document (for line
    lookups; None when the YAML itself is broken) and every issue, each naming file, line and field."""
    doc, issues = load_yaml(path)
    if doc is None:
        return None, None, issues
    try:
        return model.model_validate(doc.data), doc, issues
    except ValidationError as exc:
        return None, doc, issues + pydantic_issues(doc, exc)

