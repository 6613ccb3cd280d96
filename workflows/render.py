"""Deterministic renderers: one workflow's PDL as text, code, Mermaid flowchart, summary or YAML.

``render(workflow, fmt)`` returns ``workflow.representations.<fmt>`` verbatim when the file
provides it (e.g. FlowBench's own text/code/flowchart) and otherwise renders it from the
procedure tree (``procedure.parse_procedure``).  A workflow without a procedure is rendered
from its declarations: slots to collect, then APIs/ANSWERs in precondition order.  These
strings are indexed for retrieval and shown by ``flowdesk workflows show``, so they must be
stable: same workflow in, same text out.
"""

from __future__ import annotations

import ast
import re

import yaml

from .pdl import BUILTIN_CONDITION, Api, Workflow
from .procedure import Break, Call, If, Pass, Step, While, iter_calls, parse_procedure
from .text import sentences

RENDER_FORMATS = ("text", "code", "flowchart", "summary", "pdl")


def render(workflow: Workflow, fmt: str) -> str:
    """The ``fmt`` representation of ``workflow`` (text|code|flowchart|summary|pdl)."""
    if fmt not in RENDER_FORMATS:
        raise ValueError(f"unknown representation {fmt!r}; choose one of {', '.join(RENDER_FORMATS)}")
    if fmt == "pdl":
        return render_pdl(workflow)
    given = getattr(workflow.representations, fmt)
    if given:
        return given
    return {"text": render_text, "code": render_code, "flowchart": render_flowchart,
            "summary": render_summary}[fmt](workflow)


def render_all(workflow: Workflow) -> dict[str, str]:
    """The four retrieval representations (text, code, flowchart, summary)."""
    return {fmt: render(workflow, fmt) for fmt in ("text", "code", "flowchart", "summary")}


# ---------------------------------------------------------------- shared helpers


def _steps(wf: Workflow) -> list[Step]:
    """The procedure's steps; for an empty procedure, one call per node in precondition order."""
    if wf.procedure.strip():
        return parse_procedure(wf.procedure).steps
    steps: list[Step] = []
    for name in _node_order(wf):
        api = wf.api(name)
        if api is not None:
            args = api.required_params or api.param_names
            steps.append(Call("API", name, list(args), list(api.returns), 0))
        else:
            steps.append(Call("ANSWER", name, [], [], 0))
    return steps


def _node_order(wf: Workflow) -> list[str]:
    """APIs then ANSWERs, each placed after its preconditions (stable topological order)."""
    decl = [a.name for a in wf.apis] + [a.name for a in wf.answers]
    deps = {a.name: [d for d in a.precondition if d in decl] for a in [*wf.apis, *wf.answers]}
    done: list[str] = []
    visiting: set[str] = set()

    def visit(n: str) -> None:
        if n in done or n in visiting:  # a cycle is the validator's problem; do not loop
            return
        visiting.add(n)
        for d in deps.get(n, []):
            visit(d)
        visiting.discard(n)
        done.append(n)

    for n in decl:
        visit(n)
    return done


def _words(name: str) -> str:
    return name.replace("_", " ")


def _join(items: list[str]) -> str:
    items = [i for i in items if i]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


_OPS = {ast.Eq: "is", ast.NotEq: "is not", ast.Lt: "is less than", ast.LtE: "is at most",
        ast.Gt: "is greater than", ast.GtE: "is at least", ast.In: "is one of", ast.NotIn: "is not one of",
        ast.Is: "is", ast.IsNot: "is not"}


def condition_text(test: ast.expr) -> str:
    """A condition in words: ``COND("x")`` -> ``x``, ``a != "b"`` -> ``a is not "b"``."""
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == BUILTIN_CONDITION:
        return str(test.args[0].value) if test.args and isinstance(test.args[0], ast.Constant) else "?"
    if isinstance(test, ast.Name):
        return _words(test.id)
    if isinstance(test, ast.Constant):
        return repr(test.value) if isinstance(test.value, str) else str(test.value)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return f"not {condition_text(test.operand)}"
    if isinstance(test, ast.BoolOp):
        word = " and " if isinstance(test.op, ast.And) else " or "
        return word.join(condition_text(v) for v in test.values)
    if isinstance(test, ast.Compare):
        out = condition_text(test.left)
        for op, right in zip(test.ops, test.comparators):
            out += f" {_OPS.get(type(op), '?')} {condition_text(right)}"
        return out
    if isinstance(test, (ast.List, ast.Tuple)):
        return "[" + ", ".join(condition_text(e) for e in test.elts) + "]"
    return ast.unparse(test)


# ---------------------------------------------------------------- text


def _call_text(wf: Workflow, c: Call) -> str:
    if c.kind == "ANSWER" and c.name == "request_information":
        wanted = c.args or c.targets
        out = f"Ask the user for {_join([_slot_words(wf, s) for s in wanted]) or 'the missing information'}."
    elif c.kind == "ANSWER" and c.name == "answer_out_of_workflow_questions":
        out = "Answer the user's questions that are outside this workflow."
    elif c.kind == "ANSWER":
        ans = wf.answer(c.name)
        said = f'"{ans.template.strip()}"' if ans and ans.template.strip() else _words(c.name)
        if c.targets:
            out = f"Ask the user {said} to learn {_join([_slot_words(wf, t) for t in c.targets])}."
        else:
            if said.startswith('"'):  # end the sentence unless the quoted template already does
                out = f"Reply: {said}" + ("" if said[-2:-1] in (".", "!", "?") else ".")
            else:
                out = f"Reply with {said}."
        if ans and ans.precondition:
            out += f" Only after {_join(ans.precondition)}."
    else:
        api = wf.api(c.name)
        out = f"Call the API {c.name}"
        if c.args:
            out += f" with {_join([_words(a) for a in c.args])}"
        out += "."
        if api is not None:
            if api.description.strip():
                out += f" {_end(api.description)}"
            if api.precondition:
                out += f" Only after {_join(api.precondition)}."
            if api.irreversible:
                out += " It cannot be undone: confirm with the user first."
        if c.targets:
            out += f" It returns {_join([_words(t) for t in c.targets])}."
    if c.comment:
        out += f" Note: {c.comment}."
    return out


def _end(text: str) -> str:
    text = text.strip()
    return text if text[-1:] in (".", "!", "?") else text + "."


def _slot_words(wf: Workflow, name: str) -> str:
    slot = wf.slot(name)
    return f"{_words(name)} ({slot.description.strip()})" if slot and slot.description.strip() else _words(name)


def _text_block(wf: Workflow, steps: list[Step], prefix: str, indent: str, out: list[str], n: int = 0) -> int:
    """Numbered lines for ``steps``; returns the last number used (an if's branches share one
    numbering, so "Otherwise:" continues 3.3 -> 3.4)."""
    for step in steps:
        if isinstance(step, Pass):
            continue
        n += 1
        num = f"{prefix}{n}."
        if isinstance(step, Call):
            out.append(f"{indent}{num} {_call_text(wf, step)}")
        elif isinstance(step, Break):
            out.append(f"{indent}{num} Stop repeating and continue after the loop.")
        elif isinstance(step, While):
            out.append(f"{indent}{num} Repeat while {condition_text(step.test)}:")
            _text_block(wf, step.body, num, indent + "   ", out)
        elif isinstance(step, If):
            inner = 0
            for k, (test, _, body) in enumerate(step.branches):
                head = f"{num} If" if k == 0 else f"{' ' * len(num)} Otherwise, if"
                out.append(f"{indent}{head} {condition_text(test)}:")
                inner = _text_block(wf, body, num, indent + "   ", out, inner)
            if step.orelse:
                out.append(f"{indent}{' ' * len(num)} Otherwise:")
                _text_block(wf, step.orelse, num, indent + "   ", out, inner)
    return n


def render_text(wf: Workflow) -> str:
    """Natural-language steps, the FlowBench "text" form."""
    out = [f"{wf.display_name[:1].upper()}{wf.display_name[1:]} ({wf.domain} / {_words(wf.role)}): "
           f"{wf.description.strip()}"]
    if wf.detailed_description.strip():
        out.append(wf.detailed_description.strip())
    if wf.slots:
        out.append("Information to collect: " + "; ".join(_slot_words(wf, s.name) for s in wf.slots) + ".")
    steps = _steps(wf)
    if steps:
        out.append("Steps:" if wf.procedure.strip() else "Steps (in the order their preconditions allow):")
        _text_block(wf, steps, "", "", out)
    else:
        out.append("There are no steps: answer from the description.")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- code

_PY_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}


def _call_code(c: Call) -> str:
    args = ", ".join(a if a.isidentifier() and c.name != "request_information" else f'"{a}"' for a in c.args)
    call = f"{c.kind}.{c.name}({args})"
    if not c.targets:
        return call
    return f"[{', '.join(c.targets)}] = {call}"


def _code_block(wf: Workflow, steps: list[Step], indent: str, out: list[str]) -> None:
    if not steps:
        out.append(f"{indent}pass")
        return
    for step in steps:
        if isinstance(step, Call):
            if step.comment:
                out.append(f"{indent}# {step.comment}")
            node: Api | None = wf.api(step.name) if step.kind == "API" else None
            node_pre = node.precondition if node else (wf.answer(step.name).precondition
                                                       if wf.answer(step.name) else [])
            notes = []
            if node and node.description.strip():
                notes.append(node.description.strip().rstrip("."))
            if node_pre:
                notes.append("requires " + ", ".join(node_pre))
            if node and node.irreversible:
                notes.append("irreversible: confirm first")
            line = f"{indent}{_call_code(step)}"
            out.append(line + (f"  # {'; '.join(notes)}" if notes else ""))
        elif isinstance(step, Pass):
            out.append(f"{indent}pass")
        elif isinstance(step, Break):
            out.append(f"{indent}break")
        elif isinstance(step, While):
            out.append(f"{indent}while {_src(step.source)}:")
            _code_block(wf, step.body, indent + "    ", out)
        elif isinstance(step, If):
            for k, (_, source, body) in enumerate(step.branches):
                out.append(f"{indent}{'if' if k == 0 else 'elif'} {_src(source)}:")
                _code_block(wf, body, indent + "    ", out)
            if step.orelse:
                out.append(f"{indent}else:")
                _code_block(wf, step.orelse, indent + "    ", out)


def _src(source: str) -> str:
    return " ".join(source.split())  # a condition written over several lines, on one


def render_code(wf: Workflow) -> str:
    """A Python-like function: slots as parameters, the procedure as its body."""
    params = ", ".join(f"{s.name}: {_PY_TYPES.get(s.type, 'str')}" for s in wf.slots)
    doc = wf.description.strip()
    if wf.detailed_description.strip():
        doc += "\n\n" + wf.detailed_description.strip()
    doc_lines = doc.replace('"""', "'''").splitlines()
    out = [f"def {wf.name}({params}):", '    """' + doc_lines[0]]
    if len(doc_lines) == 1:
        out[-1] += '"""'
    else:
        out += [("    " + ln) if ln.strip() else "" for ln in doc_lines[1:]] + ['    """']
    _code_block(wf, _steps(wf), "    ", out)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- flowchart (Mermaid)


def _label(text: str) -> str:
    """A quoted Mermaid label; quotes and brackets are escaped as entities."""
    text = re.sub(r"\s+", " ", text).strip()
    return '"' + text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;") + '"'


class _Chart:
    """Builds ``flowchart TD``: a step list is compiled with *pending exits* — the (node, edge
    label) pairs that flow into whatever comes next."""

    def __init__(self, wf: Workflow):
        self.wf = wf
        self.lines: list[str] = []
        self.count = 0
        self.breaks: list[list[tuple[str, str | None]]] = []

    def node(self, prefix: str, shape: str) -> str:
        self.count += 1
        nid = f"{prefix}{self.count}"
        self.lines.append(f"    {nid}{shape}")
        return nid

    def link(self, pending: list[tuple[str, str | None]], target: str) -> None:
        for src, label in pending:
            self.lines.append(f"    {src} -->|{label}| {target}" if label else f"    {src} --> {target}")

    def call(self, c: Call) -> str:
        args = f"({', '.join(c.args)})" if c.args else "()"
        text = f"{c.kind} {c.name}{args}"
        if c.targets:
            text = f"{', '.join(c.targets)} = {text}"
        shape = f"[{_label(text)}]" if c.kind == "API" else f"({_label(text)})"
        return self.node("n", shape)

    def seq(self, steps: list[Step], pending: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
        for step in steps:
            if isinstance(step, Call):
                nid = self.call(step)
                self.link(pending, nid)
                pending = [(nid, None)]
            elif isinstance(step, Break):
                if self.breaks:
                    self.breaks[-1].extend(pending)
                pending = []
            elif isinstance(step, While):
                d = self.node("d", "{" + _label(condition_text(step.test) + "?") + "}")
                self.link(pending, d)
                self.breaks.append([])
                self.link(self.seq(step.body, [(d, "yes")]), d)  # the loop goes back to its test
                pending = [(d, "no"), *self.breaks.pop()]
            elif isinstance(step, If):
                exits: list[tuple[str, str | None]] = []
                for test, _, body in step.branches:
                    d = self.node("d", "{" + _label(condition_text(test) + "?") + "}")
                    self.link(pending, d)
                    exits += self.seq(body, [(d, "yes")])
                    pending = [(d, "no")]
                exits += self.seq(step.orelse, pending)
                pending = exits
        return pending


def render_flowchart(wf: Workflow) -> str:
    """Mermaid ``flowchart TD``: API calls as boxes, ANSWERs as rounded boxes, if/while as
    decision diamonds whose outgoing edges are labelled yes/no."""
    chart = _Chart(wf)
    chart.lines.append("    start([Start])")
    if wf.procedure.strip():
        pending = chart.seq(parse_procedure(wf.procedure).steps, [("start", None)])
    else:
        # No procedure: a dependency graph; nodes without preconditions follow Start.
        ids: dict[str, str] = {}
        for c in _steps(wf):
            ids[c.name] = chart.call(c)
        needed: set[str] = set()
        for item in [*wf.apis, *wf.answers]:
            pre = [d for d in item.precondition if d in ids]
            needed.update(pre)
            chart.link([(ids[d], None) for d in pre] or [("start", None)], ids[item.name])
        pending = [(ids[n], None) for n in ids if n not in needed] or [("start", None)]
    chart.lines.append("    done([End])")
    chart.link(pending, "done")
    return "flowchart TD\n" + "\n".join(chart.lines) + "\n"


# ---------------------------------------------------------------- summary


def render_summary(wf: Workflow) -> str:
    """One to three sentences: what it is for, then the APIs it relies on."""
    out = sentences(wf.description)[:2]
    if wf.procedure.strip():
        order = list(dict.fromkeys(c.name for c in iter_calls(parse_procedure(wf.procedure).steps)
                                   if c.kind == "API"))
    else:
        order = [n for n in _node_order(wf) if wf.api(n) is not None]
    if order:
        shown = order[:4] + ([f"{len(order) - 4} more"] if len(order) > 4 else [])
        out.append(f"It uses the API{'s' if len(order) > 1 else ''} {_join(shown)}.")
    elif wf.slots:
        out.append(f"It collects {_join([_words(s.name) for s in wf.slots[:4]])}.")
    return " ".join(out)


# ---------------------------------------------------------------- pdl (YAML)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Multi-line text (procedures, flowcharts) as ``|`` blocks so it reads like the source file.
    style = "|" if "\n" in value and not any(ln != ln.rstrip() for ln in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render_pdl(wf: Workflow) -> str:
    """The workflow as PDL YAML, without fields left at their defaults (round-trips to ``wf``)."""
    data = wf.model_dump(mode="json", exclude_defaults=True, by_alias=True)
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


__all__ = ["RENDER_FORMATS", "render", "render_all", "render_text", "render_code", "render_flowchart",
           "render_summary", "render_pdl", "condition_text"]
