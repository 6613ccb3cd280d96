"""Schema-Guided Dialogue (DSTC8) schema -> PDL library: domain -> service -> intent.

Reads ``sgd/<split>/schema.json`` (``fallback_pre2020/<split>/schema.json`` when absent).
Domain = the service prefix (``Restaurants``), role = the service (``Restaurants_1``), workflow =
one intent named exactly ``<service>__<intent>`` (``workflow_name``; the switching evaluation maps
gold labels with the same rule).  Slots = the intent's required + optional slots (categorical ->
enum), one API = the intent (``irreversible`` = ``is_transactional``, binding ``simulate``), and
the procedure collects the required slots, calls the API and informs the results.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..pdl import Answer, Api, Binding, Domain, Role, Slot, Workflow
from .common import display, identifier, identifiers, write_library


def workflow_name(service: str, intent: str) -> str:
    """The library name of an SGD intent: ``<service>__<intent>`` (each part a valid identifier)."""
    return f"{identifier(service)}__{identifier(intent)}"


def domain_of(service: str) -> str:
    service = identifier(service)
    return service.rsplit("_", 1)[0] if service.rsplit("_", 1)[-1].isdigit() else service


def schema_path(data_dir: Path, split: str) -> Path:
    data_dir = Path(data_dir)
    for root in (data_dir, data_dir / "sgd"):
        for cand in (root / split / "schema.json", root / "fallback_pre2020" / split / "schema.json"):
            if cand.exists():
                return cand
    raise FileNotFoundError(f"{data_dir}: no SGD schema for split {split!r} (looked for sgd/{split}/schema.json)")


def _slot_schema(slot: dict) -> dict:
    out: dict = {"type": "string", "description": slot.get("description", "")}
    if slot.get("is_categorical") and slot.get("possible_values"):
        out["enum"] = list(slot["possible_values"])
    return out


def _readable(name: str) -> str:
    return name.replace("_", " ")


def _workflow(service: dict, intent: dict) -> Workflow:
    sname = service["service_name"]
    slot_defs = {s["name"]: s for s in service.get("slots", [])}
    raw_required = list(intent.get("required_slots", []))
    raw_optional = [s for s in intent.get("optional_slots", {}) if s not in raw_required]
    raw_results = list(intent.get("result_slots", []))
    # Schema names may be Python keywords ("from", "class"), hyphenated, start with a digit...: the
    # procedure needs identifiers; the original is kept as the slot's title for display.
    ident = identifiers([*raw_required, *raw_optional, *raw_results])
    required = [ident[n] for n in raw_required]
    optional = [ident[n] for n in raw_optional]
    slots = []
    for raw in raw_required + raw_optional:
        sd = slot_defs.get(raw, {"name": raw})
        cat = bool(sd.get("is_categorical") and sd.get("possible_values"))
        default = intent.get("optional_slots", {}).get(raw)
        desc = sd.get("description", "") + (f" (default: {default})" if raw in raw_optional and default else "")
        slots.append(Slot(name=ident[raw], title=display(raw, ident[raw]), description=desc,
                          type="enum" if cat else "string", enum=list(sd["possible_values"]) if cat else None,
                          required=raw in raw_required))
    params = {"type": "object", "properties": {ident[n]: _slot_schema(slot_defs.get(n, {"name": n}))
                                               for n in raw_required + raw_optional}}
    if required:
        params["required"] = required
    results = [ident[n] for n in raw_results]
    api = Api(name=identifier(intent["name"]), description=intent.get("description", ""), parameters=params,
              returns=results,
              irreversible=bool(intent.get("is_transactional")), binding=Binding(simulate=True))
    verb = "Done" if intent.get("is_transactional") else "Here is what I found"
    details = ", ".join(f"{_readable(r)}: ${r}" for r in results)
    answers = [Answer(name="inform_results", template=f"{verb}. {details}." if details else f"{verb}.",
                      precondition=[api.name])]
    lines = []
    if required:
        lines.append(f"[{', '.join(required)}] = ANSWER.request_information("
                     f"{', '.join(json.dumps(r) for r in required)})")
    call = f"API.{api.name}({', '.join(required + optional)})"
    lines.append(f"[{', '.join(results)}] = {call}" if results else call)
    lines.append("ANSWER.inform_results()")
    svc_desc = service.get("description", "").strip()
    return Workflow(
        name=workflow_name(sname, intent["name"]), title=intent["name"],
        description=intent.get("description", "").strip() or intent["name"],
        detailed_description=f"{intent.get('description', '').strip()}. Service {sname}: {svc_desc}."
        .replace("..", "."),
        domain=domain_of(sname), role=identifier(sname), slots=slots, apis=[api], answers=answers,
        procedure="\n".join(lines) + "\n",
        tags=["source:sgd", f"service:{sname}", f"intent:{intent['name']}"]
        + (["transactional"] if intent.get("is_transactional") else []),
    )


def import_sgd(data_dir: Path, out_dir: Path, split: str = "train") -> Path:
    """Import one split's SGD schema into ``out_dir``; returns the library root."""
    schema = json.loads(schema_path(data_dir, split).read_text(encoding="utf-8"))
    domains: dict[str, list[dict]] = {}
    for service in schema:
        domains.setdefault(domain_of(service["service_name"]), []).append(service)
    dom_models = [Domain(name=d, title=d, description=" ".join(
        f"{s['service_name']}: {s.get('description', '').strip()}." for s in services).replace("..", "."))
        for d, services in domains.items()]
    roles = [Role(name=identifier(s["service_name"]), title=s["service_name"].replace("_", " "),
                  domain=domain_of(s["service_name"]),
                  description=s.get("description", "").strip() or s["service_name"]) for s in schema]
    workflows = [_workflow(s, i) for s in schema for i in s.get("intents", [])]
    return write_library(out_dir, dom_models, roles, workflows)
