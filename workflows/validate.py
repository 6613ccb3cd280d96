"""Semantic checks of one workflow that a schema cannot express.

Preconditions name existing nodes and form no cycle; the procedure parses and only calls
declared APIs/ANSWERs with known arguments; parameter schemas are valid JSON Schema; templates
and conditions only read known names; names are not declared twice.
"""

from __future__ import annotations

from collections import Counter

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .errors import Issue, YamlDoc
from .pdl import BUILTIN_ANSWERS, Workflow
from .policy import BindingPolicy, BindingRefused
from .procedure import ProcedureError, condition_names_with_lines, parse_procedure


def _cycle(graph: dict[str, list[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in graph.get(n, []):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in graph:
        if n not in state and (found := visit(n)):
            return found
    return None


def _refs(schema, loc: tuple) -> list[tuple[tuple, str]]:
    """``(location, value)`` of every ``$ref`` in a JSON Schema (a remote one would be fetched or fail)."""
    out: list[tuple[tuple, str]] = []
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "$ref" and isinstance(v, str):
                out.append((loc + (k,), v))
            else:
                out += _refs(v, loc + (k,))
    elif isinstance(schema, list):
        for j, v in enumerate(schema):
            out += _refs(v, loc + (j,))
    return out


def binding_issues(wf: Workflow, policy: BindingPolicy, add) -> None:
    """Refuse bindings the policy does not allow, at the binding's line."""
    for i, api in enumerate(wf.apis):
        b = api.binding
        if b.python:
            try:
                policy.resolve_python(b.python)
            except BindingRefused as exc:
                add(("apis", i, "binding", "python"), f"binding {b.python!r} refused: {exc}")
        elif b.http is not None:
            for fld, msg in policy.http_problems(b.http.url, b.http.headers):
                add(("apis", i, "binding", "http", *fld.split(".", 1)), msg)


def validate_workflow(wf: Workflow, doc: YamlDoc | None = None, policy: BindingPolicy | None = None) -> list[Issue]:
    """Every semantic problem of one workflow; ``policy`` defaults to ``BindingPolicy.from_env()``."""
    file = str(doc.path) if doc else str(wf.source or wf.name)
    line = doc.line if doc else (lambda loc: None)
    issues: list[Issue] = []

    def add(loc: tuple, msg: str, at: int | None = None) -> None:
        from .errors import field_path
        issues.append(Issue(file, at if at is not None else line(loc), field_path(loc), msg))

    for kind, items in (("slots", wf.slots), ("apis", wf.apis), ("answers", wf.answers)):
        for name, n in Counter(i.name for i in items).items():
            if n > 1:
                idx = [i for i, it in enumerate(items) if it.name == name][1]
                add((kind, idx, "name"), f"{name!r} is declared {n} times")
    for i, ans in enumerate(wf.answers):
        if wf.api(ans.name):
            add(("answers", i, "name"), f"{ans.name!r} is both an API and an ANSWER")

    nodes = wf.node_names
    graph: dict[str, list[str]] = {}
    for kind, items in (("apis", wf.apis), ("answers", wf.answers)):
        for i, item in enumerate(items):
            graph[item.name] = list(item.precondition)
            for j, dep in enumerate(item.precondition):
                if dep not in nodes:
                    add((kind, i, "precondition", j), f"unknown node {dep!r} (not an API or ANSWER of this workflow)")
                if dep == item.name:
                    add((kind, i, "precondition", j), f"{item.name!r} cannot be its own precondition")
    cyc = _cycle({k: [d for d in v if d in nodes and d != k] for k, v in graph.items()})
    if cyc:
        first = cyc[0]
        kind = "apis" if wf.api(first) else "answers"
        idx = [i.name for i in (wf.apis if kind == "apis" else wf.answers)].index(first)
        add((kind, idx, "precondition"), "dependency cycle: " + " -> ".join(cyc))

    for i, api in enumerate(wf.apis):
        try:
            Draft202012Validator.check_schema(api.parameters)
        except SchemaError as exc:
            # exc.path is where inside the schema the mistake sits, e.g. properties.x.type
            add(("apis", i, "parameters", *exc.path), f"invalid JSON Schema: {exc.message}")
            continue
        for ref_loc, ref in _refs(api.parameters, ("apis", i, "parameters")):
            if not ref.startswith("#"):
                add(ref_loc, f"only local references ('#/...') are allowed, got {ref[:80]!r}")
        if api.parameters.get("type", "object") != "object":
            add(("apis", i, "parameters", "type"), "the parameters schema must have type 'object'")
        props = api.parameters.get("properties", {})
        for j, req in enumerate(api.parameters.get("required", [])):
            if req not in props:
                add(("apis", i, "parameters", "required", j), f"required parameter {req!r} is not in properties")

    values = set(wf.value_names)
    if wf.procedure.strip():
        base = doc.value_line(("procedure",)) if doc else None
        try:
            proc = parse_procedure(wf.procedure)
        except ProcedureError as exc:
            at = base + exc.line - 1 if base and exc.line else None
            where = f"line {exc.line} of the procedure" if exc.line else "the procedure"
            add(("procedure",), f"{where}: {exc.message}", at)
            proc = None
        if proc is not None:
            calls = proc.calls()
            for c in calls:
                values.update(c.targets)
            for c in calls:
                at = base + c.line - 1 if base else None
                if c.kind == "API" and not wf.api(c.name):
                    add(("procedure",), f"calls undeclared API {c.name!r}", at)
                elif c.kind == "ANSWER" and not wf.answer(c.name) and c.name not in BUILTIN_ANSWERS:
                    add(("procedure",), f"calls undeclared ANSWER {c.name!r}", at)
                elif c.kind == "API":
                    for arg in c.args:
                        if arg not in values:
                            add(("procedure",), f"API {c.name!r} is called with unknown value {arg!r}", at)
            for name, cline in condition_names_with_lines(proc):
                if name not in values:
                    add(("procedure",), f"condition reads unknown name {name!r} (not a slot or returned value)",
                        base + cline - 1 if base else None)
    for i, ans in enumerate(wf.answers):
        for var in ans.variables:
            if var not in values:
                add(("answers", i, "template"), f"template uses unknown name ${var}")
    binding_issues(wf, policy or BindingPolicy.from_env(), add)
    return issues
