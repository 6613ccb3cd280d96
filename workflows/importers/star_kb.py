"""Executable STAR knowledge-base tools: ``workflows.importers.star_kb:<api_name>`` bindings.

STAR ships value *specifications* (``star/apis/apis/<api>.json``: input/output fields with types,
categories, ranges and ``Enabled`` rules; ``star/apis/dbs/<db>.json``) rather than item tables.
``query(api_name, **constraints)`` generates items that satisfy the constraints, deterministically
(seeded by the API name and the constraints), or returns ``{"error": ...}`` when a constraint
cannot be met (a value outside the categories or the range).  Constraints are plain values or
STAR's query forms ``api.is_equal_to(x)``, ``api.is_one_of([..])``, ``api.is_at_least(n)``,
``api.is_at_most(n)``.

Where the data lives, in a fresh process: ``FLOWDESK_DATA`` (the data root or its ``star``
folder), else ``../shared/data`` relative to the current directory, else ``../shared/data``
next to the repository; ``register_data_dir`` overrides all three inside one process.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from .common import identifier

_registered: Path | None = None
_ENABLED = re.compile(r'^!lambda p:\s*p\["(\w+)"\]\s*(?:==\s*"([^"]*)")?\s*$')
_QUERY = re.compile(r"^\s*api\.(is_equal_to|is_one_of|is_at_least|is_at_most|is_not)\((.*)\)\s*$", re.S)


def register_data_dir(path: str | Path) -> None:
    """Use this STAR folder (or data root) in this process, e.g. right after an import."""
    global _registered
    _registered = Path(path)
    _spec.cache_clear()


def star_dir() -> Path:
    candidates = [_registered] if _registered else []
    if os.environ.get("FLOWDESK_DATA"):
        candidates.append(Path(os.environ["FLOWDESK_DATA"]))
    candidates += [Path.cwd() / ".." / "shared" / "data", Path(__file__).resolve().parents[3] / "shared" / "data"]
    for c in candidates:
        for d in (c, c / "star"):
            if (d / "apis" / "apis").is_dir():
                return d
    raise FileNotFoundError("STAR data not found: set FLOWDESK_DATA to the data directory (with star/apis/)")


@lru_cache(maxsize=64)
def _spec(api_name: str) -> dict:
    root = star_dir()
    path = root / "apis" / "apis" / f"{api_name}.json"
    if not path.exists():
        raise KeyError(f"no STAR API named {api_name!r} in {root / 'apis' / 'apis'}")
    api = json.loads(path.read_text(encoding="utf-8"))
    fields = {f["Name"]: f for f in api.get("output", [])}
    # The item fields: the API's outputs, completed by its knowledge base's value spec.
    for db in (api.get("db"), api.get("function"), api_name):
        db_path = root / "apis" / "dbs" / f"{db}.json"
        if db and db != "null" and db_path.exists():
            for f in json.loads(db_path.read_text(encoding="utf-8")):
                fields.setdefault(f["Name"], f)
            break
    inputs = {f["Name"]: f for f in api.get("input", [])}
    # The importer names a field by its identifier (``common.identifier``): accept both spellings.
    aliases = {identifier(n): n for n in [*fields, *inputs] if identifier(n) != n}
    return {"api": api, "fields": fields, "inputs": inputs, "aliases": aliases}


def _parse(value: Any) -> tuple[str, Any]:
    """(operator, operand) of a constraint value."""
    if isinstance(value, str):
        m = _QUERY.match(value)
        if m:
            op, raw = m.groups()
            try:
                arg = ast.literal_eval(raw.strip() or "None")
            except (ValueError, SyntaxError):
                arg = raw.strip().strip('"')
            return op, arg
        if len(value) >= 2 and value[0] == value[-1] == '"':
            return "is_equal_to", value[1:-1]
    return "is_equal_to", value


_CLOCK = re.compile(r"^(\d{1,2})\s*([ap])\.?m\.?$", re.I)


def _canon(field: dict, value: Any) -> Any:
    """The spec's own spelling of a value, or None when the spec cannot hold it."""
    kind = field.get("Type")
    if kind in ("Categorical", "RequestType", "CategoricalMultiple"):
        for cat in field.get("Categories", []):
            if isinstance(cat, str) and str(value).strip().lower() == cat.lower():
                return cat
        return None
    if kind == "Integer":
        # an hour the API's input spells as a time of day ("4 pm") where the knowledge base keeps 0-23
        clock = _CLOCK.match(str(value).strip())
        try:
            num = int(clock.group(1)) % 12 + (12 if clock.group(2).lower() == "p" else 0) if clock \
                else int(float(value))
        except (TypeError, ValueError):
            return None
        lo, hi = _bound(field, "Min", -10**9), _bound(field, "Max", 10**9)
        return num if lo <= num <= hi else None
    if kind == "Boolean":
        if isinstance(value, bool):
            return value
        low = str(value).strip().lower()
        return True if low in ("true", "yes", "1") else False if low in ("false", "no", "0") else None
    return str(value)


def _choices(field: dict, op: str, arg: Any) -> list[Any] | None:
    """Values of ``field`` meeting one constraint (None = any string, [] = impossible)."""
    kind = field.get("Type")
    if kind == "Integer":
        lo, hi = _bound(field, "Min", 0), _bound(field, "Max", 100)
        if op == "is_at_least":
            lo = max(lo, int(float(arg)))
        elif op == "is_at_most":
            hi = min(hi, int(float(arg)))
        elif op in ("is_equal_to", "is_one_of"):
            vals = arg if isinstance(arg, list) else [arg]
            return [v for v in (_canon(field, x) for x in vals) if v is not None]
        return list(range(lo, hi + 1)) if lo <= hi else []
    if kind in ("Categorical", "RequestType", "Boolean", "CategoricalMultiple"):
        vals = arg if isinstance(arg, list) else [arg]
        canon = [v for v in (_canon(field, x) for x in vals) if v is not None]
        if op == "is_not":
            return [c for c in _domain(field) if c not in canon]
        return canon
    return [str(arg)]


_RELATIVE = re.compile(r'^!lambda\s+p:\s*p\["(\w+)"\]\s*(?:([+*-])\s*(\d+))?\s*$')


def _bound(field: dict, key: str, default: int, item: dict | None = None) -> int:
    """A numeric bound of the spec; a bound relative to another field of the item ('!lambda p:
    p["StartTimeHour"] + 2') is read (never evaluated as code) against the item being generated."""
    raw = field.get(key, default)
    if isinstance(raw, (int, float)):
        return int(raw)
    m = _RELATIVE.match(str(raw))
    base = (item or {}).get(m.group(1)) if m else None
    if not isinstance(base, (int, float)) or isinstance(base, bool):
        return default
    n = int(m.group(3) or 0)
    return int({"+": base + n, "-": base - n, "*": base * n}.get(m.group(2) or "+", base))


def _domain(field: dict, item: dict | None = None) -> list[Any]:
    kind = field.get("Type")
    if kind == "Boolean":
        return [True, False]
    if kind == "Integer":
        return list(range(_bound(field, "Min", 0, item), _bound(field, "Max", 100, item) + 1))
    return list(field.get("Categories", []))


def _generate(name: str, field: dict, rng: random.Random, item: dict | None = None) -> Any:
    kind = field.get("Type")
    if kind == "CategoricalMultiple":
        cats = list(field.get("Categories", []))
        return sorted(rng.sample(cats, k=min(len(cats), rng.randint(1, 3))), key=cats.index) if cats else []
    dom = _domain(field, item)
    if dom:
        return rng.choice(dom)
    return f"{field.get('ReadableName', name)} {rng.randint(100, 999)}"


def query(api_name: str, **constraints: Any) -> dict[str, Any]:
    """Items of ``api_name``'s knowledge base meeting ``constraints``: the first item's fields at the
    top level plus ``items`` and ``total_items``; ``{"error": ...}`` when nothing can match."""
    spec = _spec(api_name)
    fields, inputs = spec["fields"], spec["inputs"]
    allowed: dict[str, list[Any] | None] = {}
    constraints = {spec["aliases"].get(k, k): v for k, v in constraints.items()}
    for key, value in constraints.items():
        if value is None or value == "":
            continue
        # the API's own input spec first: it says how callers spell a value ("8 pm"), where the KB's value
        # spec may store it otherwise (an hour as an integer)
        field = inputs.get(key) or fields.get(key)
        if field is None:
            continue  # an input the KB does not store (a name, a PIN): accepted, not filtered on
        op, arg = _parse(value)
        try:
            options = _choices(field, op, arg)
        except (TypeError, ValueError):
            options = []
        if options is not None and not options:
            return {"error": f"no {api_name} item has {key} {op.replace('_', ' ')} {arg!r}",
                    "items": [], "total_items": 0}
        allowed[key] = options
    seed = json.dumps([api_name, sorted((k, str(v)) for k, v in constraints.items())])
    rng = random.Random(int(hashlib.sha256(seed.encode()).hexdigest()[:16], 16))
    count = rng.randint(1, 3) if spec["api"].get("returns_count") else 1
    items = []
    for _ in range(count):
        item: dict[str, Any] = {}
        # fields bounded by another field's value (MaxLevel >= Level) after the fields they depend on
        for name, field in sorted(fields.items(), key=lambda kv: any(isinstance(kv[1].get(b), str)
                                                                      for b in ("Min", "Max"))):
            rule = _ENABLED.match(str(field.get("Enabled", "")))
            if rule:
                dep, want = rule.groups()
                if (item.get(dep) != want) if want is not None else not item.get(dep):
                    continue
            options = allowed.get(name)
            if options:
                item[name] = rng.choice(options)
            elif name in allowed:  # a free-text constraint: echo it
                item[name] = str(_parse(constraints[name])[1])
            else:
                item[name] = _generate(name, field, rng, item)
        items.append(item)
    total = len(items) + (rng.randint(0, 7) if spec["api"].get("returns_count") else 0)
    # The top-level fields under the names the imported workflow binds them to (its identifiers).
    return {**{identifier(k): v for k, v in items[0].items()}, "items": items, "total_items": total}


def returned_fields(api_name: str) -> set[str]:
    """The fields a query of ``api_name`` returns (its outputs and its KB's fields), as identifiers."""
    return {identifier(k) for k in _spec(api_name)["fields"]}


def _tool(api_name: str):
    def tool(**constraints: Any) -> dict[str, Any]:
        return query(api_name, **constraints)

    tool.__name__ = tool.__qualname__ = api_name
    tool.__doc__ = f"STAR knowledge-base query for {api_name}."
    return tool


def __getattr__(name: str):
    # ``star_kb:<api_name>`` bindings resolve here: any STAR API name is a tool of this module.
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        found = (star_dir() / "apis" / "apis" / f"{name}.json").exists()
    except FileNotFoundError:
        found = False
    if not found:
        raise AttributeError(f"module {__name__!r} has no STAR API {name!r}")
    return _tool(name)
