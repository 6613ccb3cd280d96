"""Parses a PDL procedure (Python-like, read with ``ast``) into a small tree of steps.

Allowed statements (anything else is a ``ProcedureError`` with its line):
  ``[a, b] = API.name(x, y)`` / ``a = ANSWER.name()`` / ``API.name(...)`` (a call step),
  ``if``/``elif``/``else`` on returned values, slots or ``COND("natural-language condition")``,
  ``while`` for retries, ``pass``, ``break``, and comments.
The same tree is rendered for people (``render.py``), checked by the validator and interpreted
by the offline executor.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Union

from .pdl import BUILTIN_CONDITION


class ProcedureError(ValueError):
    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line  # 1-based line inside the procedure text


@dataclass
class Call:
    kind: str  # "API" | "ANSWER"
    name: str
    args: list[str]  # slot/value names or string literals (for request_information("slot"))
    targets: list[str]  # names assigned from the call
    line: int
    comment: str = ""  # the comment lines just above the call, if any

    @property
    def node(self) -> str:
        return self.name


@dataclass
class If:
    branches: list[tuple[ast.expr, str, list["Step"]]]  # (condition, source text, body)
    orelse: list["Step"]
    line: int


@dataclass
class While:
    test: ast.expr
    source: str
    body: list["Step"]
    line: int


@dataclass
class Pass:
    line: int


@dataclass
class Break:
    line: int


Step = Union[Call, If, While, Pass, Break]


@dataclass
class Procedure:
    steps: list[Step]
    source: str
    comments: dict[int, str] = field(default_factory=dict)

    def calls(self) -> list[Call]:
        return list(iter_calls(self.steps))

    def condition_names(self) -> set[str]:
        """Plain names read by conditions (slots or returned values)."""
        return {name for name, _ in condition_names_with_lines(self)}


def condition_names_with_lines(proc: Procedure) -> list[tuple[str, int]]:
    """``(name, line)`` for each plain name a condition reads, once per name (its first use)."""
    seen: dict[str, int] = {}
    for step in iter_steps(proc.steps):
        tests = [t for t, _, _ in step.branches] if isinstance(step, If) else [step.test] if isinstance(step, While) else []
        for test in tests:
            for node in ast.walk(test):
                if isinstance(node, ast.Name) and node.id not in (BUILTIN_CONDITION, "True", "False", "None"):
                    seen.setdefault(node.id, test.lineno)
    return sorted(seen.items(), key=lambda kv: (kv[1], kv[0]))


def iter_steps(steps: list[Step]):
    for step in steps:
        yield step
        if isinstance(step, If):
            for _, _, body in step.branches:
                yield from iter_steps(body)
            yield from iter_steps(step.orelse)
        elif isinstance(step, While):
            yield from iter_steps(step.body)


def iter_calls(steps: list[Step]):
    return (s for s in iter_steps(steps) if isinstance(s, Call))


def _comments(source: str) -> dict[int, str]:
    """Full-line comments by line number."""
    out = {}
    for i, raw in enumerate(source.splitlines(), start=1):
        text = raw.strip()
        if text.startswith("#"):
            out[i] = text.lstrip("#").strip()
    return out


def _inline_comments(source: str) -> dict[int, str]:
    """Comments after code on the same line (``x = API.a()  # why``), found with ``tokenize``
    so a ``#`` inside a string literal is not mistaken for one."""
    import io
    import tokenize

    out: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT and tok.line[: tok.start[1]].strip():
                out[tok.start[0]] = tok.string.lstrip("#").strip()
    except (tokenize.TokenError, SyntaxError):  # the source already parsed; be lenient anyway
        pass
    return out


def _attached_comment(comments: dict[int, str], inline: dict[int, str], line: int) -> str:
    """The run of comment lines directly above ``line`` plus its inline comment, joined."""
    above: list[str] = []
    i = line - 1
    while i in comments:
        above.insert(0, comments[i])
        i -= 1
    parts = [c for c in above if c] + ([inline[line]] if line in inline else [])
    return " ".join(parts)


def _targets(node: ast.expr, line: int) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Name) for e in node.elts):
        return [e.id for e in node.elts]
    raise ProcedureError("the left side of an assignment must be a name or a list of names", line)


def _call(node: ast.expr, targets: list[str], line: int, comment: str) -> Call:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id in ("API", "ANSWER")):
        raise ProcedureError("only API.<name>(...) and ANSWER.<name>(...) calls are allowed here", line)
    if node.keywords:
        raise ProcedureError("call arguments are positional names or strings, not keywords", line)
    args = []
    for a in node.args:
        if isinstance(a, ast.Name):
            args.append(a.id)
        elif isinstance(a, ast.Constant) and isinstance(a.value, str):
            args.append(a.value)
        elif isinstance(a, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Name) for e in a.elts):
            args.extend(e.id for e in a.elts)  # FlowAgent's API_x([a, b]) style
        else:
            raise ProcedureError("call arguments must be names or string literals", line)
    return Call(node.func.value.id, node.func.attr, args, targets, line, comment)


_ALLOWED_EXPR = (ast.BoolOp, ast.UnaryOp, ast.Compare, ast.Name, ast.Constant, ast.And, ast.Or, ast.Not,
                 ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Is, ast.IsNot,
                 ast.Load, ast.List, ast.Tuple, ast.USub)


def _check_condition(test: ast.expr, line: int) -> None:
    for node in ast.walk(test):
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id == BUILTIN_CONDITION and len(node.args) == 1
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                raise ProcedureError(f'conditions may only call {BUILTIN_CONDITION}("...") with one string', line)
        elif not isinstance(node, _ALLOWED_EXPR):
            raise ProcedureError(f"'{type(node).__name__}' is not allowed in a condition", line)


def _block(stmts: list[ast.stmt], source: str, comments: dict[int, str],
           inline: dict[int, str] | None = None) -> list[Step]:
    inline = inline or {}
    steps: list[Step] = []
    for st in stmts:
        line = st.lineno
        comment = _attached_comment(comments, inline, line)
        if isinstance(st, ast.Assign):
            if len(st.targets) != 1:
                raise ProcedureError("chained assignment is not allowed", line)
            steps.append(_call(st.value, _targets(st.targets[0], line), line, comment))
        elif isinstance(st, ast.Expr):
            steps.append(_call(st.value, [], line, comment))
        elif isinstance(st, ast.If):
            branches = []
            node: ast.stmt | None = st
            orelse: list[Step] = []
            while isinstance(node, ast.If):
                _check_condition(node.test, node.lineno)
                branches.append((node.test, ast.get_source_segment(source, node.test) or ast.unparse(node.test),
                                 _block(node.body, source, comments, inline)))
                rest = node.orelse
                if len(rest) == 1 and isinstance(rest[0], ast.If):
                    node = rest[0]
                else:
                    orelse = _block(rest, source, comments, inline)
                    node = None
            steps.append(If(branches, orelse, line))
        elif isinstance(st, ast.While):
            _check_condition(st.test, line)
            if st.orelse:
                raise ProcedureError("while ... else is not allowed", line)
            steps.append(While(st.test, ast.get_source_segment(source, st.test) or ast.unparse(st.test),
                               _block(st.body, source, comments, inline), line))
        elif isinstance(st, ast.Pass):
            steps.append(Pass(line))
        elif isinstance(st, ast.Break):
            steps.append(Break(line))
        else:
            raise ProcedureError(f"'{type(st).__name__}' statements are not allowed in a procedure", line)
    return steps


def parse_procedure(source: str) -> Procedure:
    """Parse procedure text; raises ``ProcedureError`` with the 1-based line of the problem."""
    import textwrap

    text = textwrap.dedent(source or "")
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise ProcedureError(f"does not parse: {exc.msg}", exc.lineno) from None
    comments = _comments(text)
    steps = _block(tree.body, text, comments, _inline_comments(text))
    _check_breaks(steps, in_loop=False)
    return Procedure(steps, text, comments)


def _check_breaks(steps: list[Step], in_loop: bool) -> None:
    # ``ast.parse`` accepts a stray ``break``; only the compiler would reject it.
    for step in steps:
        if isinstance(step, Break) and not in_loop:
            raise ProcedureError("'break' outside a while loop", step.line)
        if isinstance(step, If):
            for _, _, body in step.branches:
                _check_breaks(body, in_loop)
            _check_breaks(step.orelse, in_loop)
        elif isinstance(step, While):
            _check_breaks(step.body, True)
