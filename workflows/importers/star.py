"""STAR task flowcharts -> PDL library: 24 workflows named exactly as the task folders.

Reads ``star/tasks/<task>/<task>.json`` (``replies`` + ``graph``) and ``star/apis/apis/<task>.json``.
- Domain: a documented grouping of the task prefix (``DOMAINS``); role ``<prefix>_agent``.
- Slots and the one API (named like the task) come from the API's inputs/outputs; the binding is
  ``workflows.importers.star_kb:<task>`` (executable against the knowledge-base specs).
- ANSWERs come from ``replies``: name = ``star_label_to_answer(label)`` (identity for labels that
  are already safe identifiers; ``answer_to_star_label`` inverts it; renamed ones are also tagged
  ``star_label:<answer>=<label>``).  ``{slot:fmt}`` placeholders become ``$Field`` when a slot or
  returned field matches the name.
- Procedure: the graph maps each node to its next node; branching is encoded by *outcome*
  pseudo-nodes with no incoming edge (query_success/failure, available/unavailable, yes/no,
  info_missing, correct/incorrect/...).  ``attach_outcomes`` decides which node each outcome
  follows (a query node for results, the open question for yes/no, the ask-chain for
  info_missing), then ``mermaid.compile_graph`` writes ``if COND("... -> <outcome>")`` branches.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from ..pdl import Answer, Api, Binding, Domain, Role, Slot, Workflow
from .common import RESERVED, dataset_dir, display, escape_template, identifier, identifiers, write_library
from .mermaid import Edge, Flowchart, Node, NodeAction, compile_graph

DOMAINS = {
    "travel": ("hotel", "plane", "ride", "trip"),
    "housing_and_banking": ("apartment", "bank"),
    "health": ("doctor",),
    "events_and_meetings": ("meeting", "party"),
    "dining": ("restaurant",),
    "information": ("weather", "trivia"),
    "spaceship": ("spaceship",),
}
DOMAIN_TEXT = {
    "travel": "Travel services: hotel search, booking and room service, flights, ride booking and status, trip directions.",
    "housing_and_banking": "Apartment search and viewings, bank balances and fraud reports.",
    "health": "Doctor appointments and follow-up instructions.",
    "events_and_meetings": "Meetings and parties: scheduling meetings, planning parties and answering invitations.",
    "dining": "Restaurant search and table reservations.",
    "information": "Everyday information: weather forecasts and trivia games.",
    "spaceship": "Spaceship operations: access codes and life-support repairs.",
}
OUTCOMES = {"yes", "no", "available", "unavailable", "correct", "incorrect", "noanswer", "done"}
_OUTCOME_RE = re.compile(r"^(query_(success|failure)|info_missing\d*)$")
_PLACEHOLDER = re.compile(r"\{(\w+)(?::[^}]*)?\}")
_TYPES = {"Integer": "integer", "Boolean": "boolean", "CategoricalMultiple": "array"}
# The wizard interface's task-independent closing replies (no task prefix; the dialogues' suggestions,
# ``ActionLabelOptions``, offer them across tasks) although only some task specs list them: ``goodbye_1``
# (in 10 of the 24 specs) and ``goodbye_2`` (in none; the same "Thank you and goodbye." reply).  Every
# imported task gets them as ANSWERs outside the procedure (no precondition: a conversation may close at any
# turn), so the executor's candidates hold the wizard's closing wherever it comes; their template is the
# specs' own ``goodbye_1``.
GENERIC_CLOSINGS = ("goodbye_1", "goodbye_2")


def star_label_to_answer(label: str) -> str:
    """STAR ActionLabel -> ANSWER name.  Safe identifiers map to themselves; anything else (or a
    label starting with ``L_``, or a reserved word) is escaped: ``L_`` + each character, with
    ``_`` -> ``__`` and any other non-alphanumeric character -> ``_`` + two hex digits."""
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", label) and not label.startswith("L_") and label not in RESERVED:
        return label
    out = []
    for ch in label:
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        elif ch == "_":
            out.append("__")
        else:
            out.append("_" + (f"{ord(ch):02x}" if ord(ch) < 256 else f"u{ord(ch):04x}"))
    return "L_" + "".join(out)


def answer_to_star_label(name: str) -> str:
    """Inverse of ``star_label_to_answer``."""
    if not name.startswith("L_"):
        return name
    s, out, i = name[2:], [], 0
    while i < len(s):
        if s[i] != "_":
            out.append(s[i])
            i += 1
        elif s[i + 1] == "_":
            out.append("_")
            i += 2
        elif s[i + 1] == "u":
            out.append(chr(int(s[i + 2:i + 6], 16)))
            i += 6
        else:
            out.append(chr(int(s[i + 1:i + 3], 16)))
            i += 3
    return "".join(out)


def domain_of(task: str) -> str:
    prefix = task.split("_")[0]
    return next((d for d, prefixes in DOMAINS.items() if prefix in prefixes), prefix)


def is_query(node: str) -> bool:
    return node == "query" or (node.startswith("query_") and not _OUTCOME_RE.match(node))


def is_outcome(node: str) -> bool:
    return node in OUTCOMES or bool(_OUTCOME_RE.match(node))


def attach_outcomes(graph: dict[str, str], replies: dict[str, str]) -> dict[str, list[str]]:
    """For each outcome pseudo-node, the real node it follows: {node: [outcome, ...]}."""
    incoming = set(graph.values())
    start = next(iter(graph))
    outcomes = [n for n in graph if n not in incoming and n != start and is_outcome(n)]
    nodes = list(dict.fromkeys([*graph, *graph.values()]))
    queries = [n for n in nodes if is_query(n)]
    sinks = [n for n in nodes if n not in graph and not is_outcome(n)]
    attached: dict[str, list[str]] = {}

    def put(node: str | None, outs: list[str]) -> None:
        if node and outs:
            attached.setdefault(node, []).extend(outs)

    avail = [o for o in outcomes if o in ("available", "unavailable")]
    avail_at = "query_check" if "query_check" in queries else (queries[0] if queries else None)
    if avail:
        put(avail_at, avail)
    result = [o for o in outcomes if o.startswith("query_")]
    if result:
        free = [q for q in queries if q in sinks and not (avail and q == avail_at)]
        order = ["query_book", "query", "query_check"]
        free.sort(key=lambda q: order.index(q) if q in order else len(order))
        put(free[0] if free else (queries[-1] if queries else None), result)
    missing = sorted((o for o in outcomes if o.startswith("info_missing")), key=lambda o: (len(o), o))
    if missing:
        # info_missing starts an alternative ask-chain; it branches off the node that reaches the same
        # merge point as that chain; info_missing2 branches off the chain's last node.
        chain, n = [], graph.get(missing[0])
        while n and n in graph and n not in chain and not is_query(n):
            others = [p for p, q in graph.items() if q == graph[n] and p != n and not is_outcome(p)]
            chain.append(n)
            if others:
                put(others[0], [missing[0]])
                if len(missing) > 1:
                    put(n, missing[1:2])
                break
            n = graph[n]
    questions = [o for o in outcomes if o in OUTCOMES - {"available", "unavailable"}]
    if questions:
        def asks(n: str) -> bool:  # a question, or a reply that is only a placeholder ("{question:s}")
            text = replies.get(n, "").strip()
            return "?" in text or bool(re.fullmatch(r"\{\w+(?::[^}]*)?\}", text))

        def score(n: str) -> int:
            closing = n in ("anything_else", "goodbye_1") or n.endswith("_bye")
            return 4 * asks(n) + 2 * ("ask" in n or "confirm" in n) + ("inform" not in n) - 3 * closing
        cands = [n for n in sinks if not is_query(n) and asks(n)]
        if cands:
            put(max(cands, key=lambda n: (score(n), -nodes.index(n))), questions)
    return attached


def _template(text: str, names: list[str]) -> str:
    norm = {re.sub(r"[^a-z0-9]", "", n.lower()): n for n in names}

    def sub(m: re.Match) -> str:
        key = re.sub(r"[^a-z0-9]", "", m.group(1).lower())
        hit = norm.get(key) or next((v for k, v in norm.items() if k.endswith(key) and len(key) >= 3), None) \
            or next((v for k, v in norm.items() if key.endswith(k) and len(k) >= 3), None)
        return "${" + hit + "}" if hit else "[" + m.group(1).replace("_", " ") + "]"

    return _PLACEHOLDER.sub(sub, escape_template(text))


def _param(field: dict) -> dict:
    out: dict = {"type": _TYPES.get(field.get("Type"), "string"),
                 "description": field.get("ReadableName", field["Name"])}
    cats = field.get("Categories") or []
    if out["type"] == "array":
        out["items"] = {"type": "string"}
    if cats and all(isinstance(c, str) for c in cats):
        out["description"] += " (one of: " + ", ".join(cats[:12]) + (", ..." if len(cats) > 12 else "") + ")"
    if field.get("Type") == "Integer" and "Min" in field and "Max" in field:
        out["description"] += f" ({field['Min']}-{field['Max']})"
    return out


def _slot(field: dict, name: str, required: bool) -> Slot:
    kind = field.get("Type")
    cats = field.get("Categories") or []
    title = display(field["Name"], name)
    if kind in ("Categorical", "RequestType") and cats and all(isinstance(c, str) for c in cats):
        return Slot(name=name, title=title, description=field.get("ReadableName", ""), type="enum", enum=list(cats),
                    required=required)
    stype = {"Integer": "integer", "Boolean": "boolean"}.get(kind, "string")
    return Slot(name=name, title=title, description=field.get("ReadableName", ""), type=stype, required=required)


def _purpose(replies: dict[str, str], task: str) -> str:
    """From the out-of-scope reply: "I am only able to help you reserve a hotel room." -> "Reserve a hotel room."."""
    m = re.search(r"only able to (.+?)[.!]?$", replies.get("out_of_scope", ""))
    if not m:
        return task.replace("_", " ").capitalize() + "."
    text = re.sub(r"^help you with ", "help with ", m.group(1))
    text = re.sub(r"^help you (?:to )?", "", text)
    return text[0].upper() + text[1:] + "."


def task_chart(spec: dict) -> Flowchart:
    """A task's flowchart as the importer reads it: reply/query nodes, outcome-labelled branch edges."""
    replies: dict[str, str] = spec.get("replies", {})
    graph: dict[str, str] = spec.get("graph", {})
    attached = attach_outcomes(graph, replies)
    nodes = [n for n in dict.fromkeys([*graph, *graph.values(), *replies]) if not is_outcome(n)]
    chart = Flowchart()
    for n in nodes:
        chart.nodes[n] = Node(n, replies.get(n, n))
    for n in nodes:
        for o in attached.get(n, []):
            if o in graph:
                chart.edges.append(Edge(n, graph[o], o))
        if n in graph:
            chart.edges.append(Edge(n, graph[n], ""))
    return chart


def gold_charts(data_dir: Path) -> dict[str, Flowchart]:
    """Every STAR task's flowchart (``task_chart``), by task folder name."""
    root = dataset_dir(data_dir, "star", "tasks")
    return {p.name: task_chart(json.loads((p / f"{p.name}.json").read_text(encoding="utf-8")))
            for p in sorted((root / "tasks").iterdir()) if (p / f"{p.name}.json").exists()}


def closing_template(root: Path) -> str:
    """The task specs' generic closing reply (``goodbye_1``; the most common text among the specs), or ""
    when no spec has one (then no task gets the generic closings)."""
    texts = [json.loads((p / f"{p.name}.json").read_text(encoding="utf-8")).get("replies", {}).get(GENERIC_CLOSINGS[0])
             for p in sorted((root / "tasks").iterdir()) if (p / f"{p.name}.json").exists()]
    found = Counter(t for t in texts if isinstance(t, str))
    return found.most_common(1)[0][0] if found else ""


def _workflow(task_dir: Path, api_path: Path, closing: str = "") -> Workflow:
    task = task_dir.name
    spec = json.loads((task_dir / f"{task}.json").read_text(encoding="utf-8"))
    raw_api = json.loads(api_path.read_text(encoding="utf-8"))
    replies: dict[str, str] = spec.get("replies", {})
    inputs = raw_api.get("input", [])
    # Field names become identifiers (the KB tool maps them back: ``star_kb.query``).
    ident = identifiers([f["Name"] for f in inputs] + [f["Name"] for f in raw_api.get("output", [])])
    required = [ident.get(n, identifier(n)) for n in raw_api.get("required", [])]
    outputs = [ident[f["Name"]] for f in raw_api.get("output", [])]
    params: dict = {"type": "object", "properties": {ident[f["Name"]]: _param(f) for f in inputs}}
    if required:
        params["required"] = required
    api = Api(name=identifier(task), description=f"Query the {raw_api.get('db', task)} knowledge base ({task}).",
              parameters=params, returns=outputs, binding=Binding(python=f"workflows.importers.star_kb:{task}"),
              # Not ``irreversible``: Check and Book share the API and the graph asks yes/no before booking.
              irreversible=False)
    slots = [_slot(f, ident[f["Name"]], ident[f["Name"]] in required) for f in inputs]
    value_names = [ident[f["Name"]] for f in inputs] + outputs

    chart = task_chart(spec)
    # Wizard labels only in responses.json (e.g. apartment_ask_end_time) are ANSWERs too, outside the
    # procedure, so every ActionLabel of the dialogues maps to an ANSWER of its task.
    responses_path = task_dir / "responses.json"
    responses = json.loads(responses_path.read_text(encoding="utf-8")) if responses_path.exists() else {}
    all_replies = {**replies, **{k: v for k, v in responses.items() if k not in replies and isinstance(v, str)}}
    if closing:
        all_replies.update({k: closing for k in GENERIC_CLOSINGS if k not in all_replies})
    answers: list[Answer] = []
    tags = ["source:star", f"star_task:{spec.get('task', task)}", f"star_db:{raw_api.get('db')}"]
    answer_of: dict[str, str] = {}
    for label, text in all_replies.items():
        if is_outcome(label) or is_query(label):
            continue
        name = star_label_to_answer(label)
        if name == api.name:
            name = star_label_to_answer("L_" + label)  # escaped: cannot clash with the API
        answer_of[label] = name
        if name != label:
            tags.append(f"star_label:{name}={label}")
        answers.append(Answer(name=name, template=_template(text, value_names)))

    def action(node: Node) -> NodeAction:
        if is_query(node.id):
            kind = node.id.removeprefix("query").strip("_") or "lookup"
            call = f"API.{api.name}({', '.join(api.param_names)})"
            lines = [f"# {node.id}" + (f": RequestType = {kind.capitalize()}" if "RequestType" in api.param_names else "")]
            lines.append(f"[{', '.join(outputs)}] = {call}" if outputs else call)
            return NodeAction(lines, [api.name], f"{api.name} {node.id.replace('_', ' ')} result")
        name = answer_of[node.id]
        # Branch questions quote the reply with its placeholders as [name]; a bare placeholder -> the label.
        spoken = _PLACEHOLDER.sub(lambda m: "[" + m.group(1).replace("_", " ") + "]", node.text).strip()
        return NodeAction([f"ANSWER.{name}()"], [name], node.id if spoken.startswith("[") and spoken.endswith("]") else spoken)

    compiled = compile_graph(chart, action, {api.name})
    for ans in answers:
        ans.precondition = compiled.preconditions.get(ans.name, [])
    steps = [replies[n] for n in chart.reachable() if n in replies and not is_query(n)]
    return Workflow(
        name=identifier(task), title=task.replace("_", " ").capitalize(), description=_purpose(replies, task),
        detailed_description=" ".join(steps), domain=domain_of(task), role=f"{task.split('_')[0]}_agent",
        slots=slots, apis=[api], answers=answers, procedure=compiled.procedure, tags=tags,
    )


def import_star(data_dir: Path, out_dir: Path) -> Path:
    """Import the 24 STAR tasks into ``out_dir``; returns the library root."""
    root = dataset_dir(data_dir, "star", "tasks")
    from . import star_kb

    star_kb.register_data_dir(root)  # tools called in this process read the same data
    workflows = []
    closing = closing_template(root)
    for task_dir in sorted(p for p in (root / "tasks").iterdir() if (p / f"{p.name}.json").exists()):
        api_path = root / "apis" / "apis" / f"{task_dir.name}.json"
        if not api_path.exists():
            raise FileNotFoundError(f"{api_path}: no API schema for STAR task {task_dir.name!r}")
        workflows.append(_workflow(task_dir, api_path, closing))
    domains = sorted({w.domain for w in workflows})
    roles: dict[str, Role] = {}
    for w in workflows:
        titles = [x.title.lower() for x in workflows if x.role == w.role]
        roles.setdefault(w.role, Role(name=w.role, title=w.role.replace("_", " "), domain=w.domain,
                                      description=f"Assistant for {w.role.split('_')[0]} tasks: "
                                      + "; ".join(x.description.rstrip(".") for x in workflows if x.role == w.role)
                                      + f" ({', '.join(titles)})."))
    dom_models = [Domain(name=d, title=d.replace("_", " ").capitalize(), description=DOMAIN_TEXT.get(d, d)) for d in domains]
    return write_library(out_dir, dom_models, roles.values(), workflows)
