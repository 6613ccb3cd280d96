"""FlowBench (as packaged by FlowSwitch) -> PDL library: 51 workflows, 22 roles, 6 domains.

Reads ``flowswitch/data/workflow_final.jsonl`` and ``flowswitch/pools/{domain,role}_desc.json``.
Per scenario: name = unique snake_case slug of the scenario, ``title`` = the scenario verbatim,
tags ``uuid:<uuid>``; the four representations are kept verbatim; tools come from ``apis``
(input/output parameters -> JSON Schema ``parameters`` + ``returns``, binding ``simulate``); the
procedure is compiled from the Mermaid flowchart (``mermaid.compile_graph``): a node naming a
tool calls it, other nodes become ANSWERs whose template is the node text, nodes with several
outgoing edges become ``COND`` branches, and preconditions are the dominating tool calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..pdl import Answer, Api, Binding, Domain, Representations, Role, Slot, Workflow
from .common import dataset_dir, display, escape_template, identifier, json_schema_type, slugify, unique, write_library
from .mermaid import Compiled, MermaidError, Node, NodeAction, compile_graph, parse_mermaid

# Tools of the toolbox that no flowchart node uses (checked by tests/test_importers.py):
# "Online surveys" ships the voucher scenario's ``userReservation`` though its flow never books.
KNOWN_UNUSED_APIS = {"online_surveys": {"userReservation"}}

_PREFIX = re.compile(r"^\s*(?:sub\s*goal|suboal|current\s*goal|goal)\s*:\s*", re.I)
_SPEAKS = re.compile(r"\b(inform|tell|notify|provide the user|confirm the|remind|ask (?:the user|if|whether))", re.I)
_AUX = re.compile(r'^\s*"([A-Za-z_][A-Za-z0-9_]*)"\s*:\s*"(.*)"\s*$')


@dataclass
class ImportReport:
    """What an import did, for the CLI and the tests."""

    root: Path
    unused_apis: dict[str, list[str]] = field(default_factory=dict)  # workflow -> APIs not in its procedure
    loops: dict[str, int] = field(default_factory=dict)


def node_title(text: str) -> tuple[str, str]:
    """(title, description) of a flowchart node ("Subgoal: X\nDescription: Y" -> ("X", "Y"))."""
    head, sep, desc = text.partition("Description:")
    lines = [ln.strip() for ln in head.strip().splitlines() if ln.strip()]
    if not sep and len(lines) > 1 and _PREFIX.match(lines[0]):
        # "Subgoal: X" on the first line, the explanation below it without a "Description:" label.
        head, desc = lines[0], " ".join(lines[1:])
    head = " ".join(head.split())
    desc = " ".join(desc.split())
    return _PREFIX.sub("", head).strip() or " ".join(text.split()), desc


def _api(raw: dict) -> Api:
    props, required = {}, []
    for pname, spec in (raw.get("input_parameters") or {}).items():
        spec = spec if isinstance(spec, dict) else {"description": str(spec)}
        key = identifier(pname)
        props[key] = {"type": json_schema_type(spec.get("type")), "description": str(spec.get("description", ""))}
        if spec.get("required"):
            required.append(key)
    params: dict = {"type": "object", "properties": props}
    if required:
        params["required"] = required
    returns = [identifier(k) for k in (raw.get("output_parameters") or {})]
    return Api(name=identifier(raw["api_name"]), description=raw.get("api_description", "").strip(),
               parameters=params, returns=returns, binding=Binding(simulate=True))


_ENUM = re.compile(r"\benumerat(?:ion|ed)\s+type\W*\[([^\]]+)\]", re.I)


def enum_values(description: str) -> list[str] | None:
    """The values a FlowBench parameter lists ("Cuisine. Enumeration type, [Sichuan cuisine, ...]")."""
    m = _ENUM.search(description or "")
    values = [v.strip().strip("\"'“”") for v in m.group(1).split(",")] if m else []
    values = list(dict.fromkeys(v for v in values if v))
    return values if len(values) >= 2 else None


def _slots(apis: list[Api], raw_apis: list[dict], flowchart: str) -> list[Slot]:
    slots: dict[str, Slot] = {}
    for api, raw in zip(apis, raw_apis):
        for pname, spec in (raw.get("input_parameters") or {}).items():
            key = identifier(pname)
            if key in slots:
                continue
            spec = spec if isinstance(spec, dict) else {}
            kind = json_schema_type(spec.get("type"))
            stype = kind if kind in ("integer", "number", "boolean") else "string"
            desc = str(spec.get("description", ""))
            slots[key] = Slot(name=key, title=display(pname, key), description=desc, type=stype,
                              enum=enum_values(desc) if stype == "string" else None,
                              required=bool(spec.get("required")))
    # "The auxiliary parameter information ..." after the chart: values the flow collects itself.
    _, sep, tail = flowchart.partition("auxiliary parameter")
    for line in tail.splitlines() if sep else []:
        m = _AUX.match(line)
        key = identifier(m.group(1)) if m else ""
        if m and key not in slots:
            slots[key] = Slot(name=key, title=display(m.group(1), key), description=m.group(2).replace('\\"', '"'),
                              required=False)
    return list(slots.values())


def _mentions(text: str, api_names: list[str]) -> list[str]:
    """Tools a node's text names, in order; exact word match first, then case-insensitive."""
    found = []
    for name in api_names:
        m = re.search(rf"\b{re.escape(name)}\b", text) or re.search(rf"\b{re.escape(name)}\b", text, re.I)
        if m:
            found.append((m.start(), name))
    return [n for _, n in sorted(found)]


def compile_flowbench(flowchart: str, apis: list[Api], raw_names: list[str]) -> tuple[Compiled, list[Answer]]:
    chart = parse_mermaid(flowchart)
    by_raw = dict(zip(raw_names, apis))
    start = chart.start()
    taken = {a.name for a in apis}
    answers: list[Answer] = []
    answer_of: dict[str, str] = {}

    def answer_for(node: Node, title: str, desc: str, suffix: str = "") -> str:
        if node.id not in answer_of:
            name = unique(slugify(title, max_words=7) + suffix, taken)
            answer_of[node.id] = name
            template = title if not desc else f"{title}: {desc}" if not title.endswith((".", "?", "!")) else f"{title} {desc}"
            answers.append(Answer(name=name, template=escape_template(template)))
        return answer_of[node.id]

    def action(node: Node) -> NodeAction:
        title, desc = node_title(node.label)
        if node.id == start:  # its edge labels name what the user asks for
            return NodeAction(question="The user asks for")
        called = _mentions(node.text, raw_names)
        lines = [f"# {' '.join(title.split())}"]
        if called:
            for raw in called:
                api = by_raw[raw]
                call = f"API.{api.name}({', '.join(api.param_names)})"
                lines.append(f"[{', '.join(api.returns)}] = {call}" if api.returns else call)
            names = [by_raw[r].name for r in called]
            # "... call X, and inform the user of the fee based on the returned ...": the node also
            # speaks after the call, so it gets an ANSWER right after the tool call(s).
            last = max(re.search(rf"\b{re.escape(r)}\b", node.text, re.I).end() for r in called)
            if _SPEAKS.search(node.text[last:]):
                name = answer_for(node, title, desc, "_reply")
                return NodeAction(lines + [f"ANSWER.{name}()"], names + [name], title)
            return NodeAction(lines, names, title)
        if node.shape == "decision":  # a pure question: only the branches below it
            return NodeAction([], [], title)
        name = answer_for(node, title, desc)
        return NodeAction(lines + [f"ANSWER.{name}()"], [name], title)

    compiled = compile_graph(chart, action, {a.name for a in apis})
    for ans in answers:
        ans.precondition = compiled.preconditions.get(ans.name, [])
    return compiled, answers


def _load(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append({**json.loads(line), "_line": lineno})
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
    return rows


def import_flowbench_report(data_dir: Path, out_dir: Path) -> ImportReport:
    root = dataset_dir(data_dir, "flowswitch", "data/workflow_final.jsonl")
    rows = _load(root / "data" / "workflow_final.jsonl")
    domain_desc = json.loads((root / "pools" / "domain_desc.json").read_text(encoding="utf-8"))
    role_desc = json.loads((root / "pools" / "role_desc.json").read_text(encoding="utf-8"))
    report = ImportReport(Path(out_dir))
    domains: dict[str, Domain] = {}
    roles: dict[str, Role] = {}
    workflows: list[Workflow] = []
    names: set[str] = set()
    for row in rows:
        dom = slugify(row["domain"])
        domains.setdefault(dom, Domain(name=dom, title=row["domain"],
                                       description=domain_desc.get(row["domain"]) or row["domain"]))
        role = identifier(row["role"])
        roles.setdefault(role, Role(name=role, title=row["role"].replace("_", " "), domain=dom,
                                    description=role_desc.get(row["role"]) or row["role"].replace("_", " ")))
        raw_apis = row.get("apis") or []
        apis = [_api(a) for a in raw_apis]
        rep = row["workflow"]
        try:
            compiled, answers = compile_flowbench(rep["flowchart"], apis, [a["api_name"] for a in raw_apis])
        except MermaidError as exc:
            raise ValueError(f"{root / 'data' / 'workflow_final.jsonl'}:{row['_line']}: field workflow.flowchart "
                             f"({row['scenario']}): {exc}") from None
        for api in apis:
            api.precondition = compiled.preconditions.get(api.name, [])
        name = unique(slugify(row["scenario"]), names)
        called = {c for c in re.findall(r"API\.(\w+)\(", compiled.procedure)}
        unused = [a.name for a in apis if a.name not in called]
        if unused:
            report.unused_apis[name] = unused
        if compiled.loops:
            report.loops[name] = len(compiled.loops)
        summary = (rep.get("summary") or "").strip()
        wf = Workflow(
            name=name, title=row["scenario"], description=summary or row["scenario"],
            detailed_description=(rep.get("text") or "").strip(), domain=dom, role=role,
            slots=_slots(apis, raw_apis, rep["flowchart"]), apis=apis, answers=answers,
            procedure=compiled.procedure,
            representations=Representations(text=rep.get("text"), code=rep.get("code"),
                                            flowchart=rep.get("flowchart"), summary=rep.get("summary")),
            tags=[f"uuid:{row['uuid']}", "source:flowbench", f"flowbench_domain:{row['domain']}"],
        )
        workflows.append(wf)
    write_library(out_dir, domains.values(), roles.values(), workflows)
    return report


def import_flowbench(data_dir: Path, out_dir: Path) -> Path:
    """Import FlowBench into ``out_dir``; returns the library root."""
    return import_flowbench_report(data_dir, out_dir).root
