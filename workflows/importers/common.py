"""Helpers shared by the importers: identifiers, YAML writing and the library tree layout.

Every importer builds validated Pydantic models (``workflows.pdl``) and hands them to
``write_library``, which dumps them as ``<out>/<domain>/_domain.yaml``,
``<out>/<domain>/<role>/_role.yaml`` and ``<out>/<domain>/<role>/<name>.yaml`` with block
scalars for multi-line text, so the files stay readable and diff well.
"""

from __future__ import annotations

import keyword
import os
import re
import unicodedata
from pathlib import Path
from typing import Any, Iterable

import yaml

from ..pdl import BUILTIN_ANSWERS, BUILTIN_CONDITION, Domain, Role, Workflow

# Names a generated identifier must avoid: Python keywords, PDL built-ins, the call prefixes.
RESERVED = set(keyword.kwlist) | set(BUILTIN_ANSWERS) | {BUILTIN_CONDITION, "API", "ANSWER", "True", "False", "None"}


def default_data_dir() -> Path:
    """``FLOWDESK_DATA`` or ``../shared/data`` relative to the current directory."""
    return Path(os.environ.get("FLOWDESK_DATA") or Path("..") / "shared" / "data")


def dataset_dir(data_dir: Path, name: str, marker: str) -> Path:
    """Accept either the data root (``.../data``) or the dataset folder (``.../data/<name>``)."""
    data_dir = Path(data_dir)
    if (data_dir / marker).exists():
        return data_dir
    if (data_dir / name / marker).exists():
        return data_dir / name
    raise FileNotFoundError(f"{data_dir}: no {name} dataset here (looked for {marker} and {name}/{marker})")


def slugify(text: str, max_words: int | None = None) -> str:
    """snake_case identifier from free text ("Search for apartments" -> "search_for_apartments")."""
    words = re.findall(r"[A-Za-z0-9]+", text.replace("'", ""))
    if max_words:
        words = words[:max_words]
    slug = "_".join(w.lower() for w in words) or "x"
    if slug[0].isdigit():
        slug = "n_" + slug
    if slug in RESERVED:
        slug += "_"
    return slug


def identifier(text: str) -> str:
    """A valid PDL name for any source name, keeping case: accents folded (``café`` -> ``cafe``),
    anything else outside ``[A-Za-z0-9_]`` -> ``_``, a leading digit prefixed, keywords and PDL
    built-ins suffixed (``from`` -> ``from_``).  A name with no ASCII letter left gets a stable
    ``n_<hash>`` so distinct unicode names stay distinct.  Valid names come back unchanged."""
    raw = str(text).strip()
    folded = unicodedata.normalize("NFKD", raw).encode("ascii", "ignore").decode("ascii")
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", folded)).strip("_") if folded != raw else \
        re.sub(r"[^A-Za-z0-9_]", "_", folded)
    if not re.search(r"[A-Za-z0-9]", name):
        import hashlib

        name = "n_" + hashlib.sha1(raw.encode("utf-8")).hexdigest()[:8] if raw else "x"
    if name[0].isdigit():
        name = "n_" + name
    return name + "_" if name in RESERVED else name


def identifiers(names: Iterable[str], taken: set[str] | None = None) -> dict[str, str]:
    """``{original: identifier}`` for a group of names (one workflow's slots, an API's fields), unique
    within the group: ``a-b`` and ``a_b`` become ``a_b`` and ``a_b_2``."""
    taken = set(taken or ())
    out: dict[str, str] = {}
    for n in names:
        if n not in out:
            out[n] = unique(identifier(n), taken)
    return out


def display(original: str, name: str) -> str | None:
    """The original name to show when the identifier differs (``Slot.title``), else None."""
    return None if original == name else str(original)


def unique(name: str, taken: set[str]) -> str:
    out, i = name, 2
    while out in taken:
        out = f"{name}_{i}"
        i += 1
    taken.add(out)
    return out


def escape_template(text: str) -> str:
    """Literal text for an ANSWER template (``$`` would start a placeholder)."""
    return text.replace("$", "$$")


# --- YAML ---------------------------------------------------------------------------------------

class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # libyaml's emitter when present: ~5x faster
    pass


def _str(dumper, value: str):
    # Block scalars for multi-line text; PyYAML falls back to quotes when a block cannot hold it.
    style = "|" if "\n" in value else ">" if len(value) > 100 else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110)


def model_yaml(model) -> str:
    return dump_yaml(model.model_dump(mode="json", exclude_none=True))


def write_library(out_dir: Path, domains: Iterable[Domain], roles: Iterable[Role],
                  workflows: Iterable[Workflow]) -> Path:
    """Write the tree; refuses duplicate workflow names (they would silently overwrite)."""
    out_dir = Path(out_dir)
    seen: set[str] = set()
    for d in domains:
        (out_dir / d.name).mkdir(parents=True, exist_ok=True)
        (out_dir / d.name / "_domain.yaml").write_text(model_yaml(d), encoding="utf-8")
    for r in roles:
        (out_dir / r.domain / r.name).mkdir(parents=True, exist_ok=True)
        (out_dir / r.domain / r.name / "_role.yaml").write_text(model_yaml(r), encoding="utf-8")
    for w in workflows:
        if w.name in seen:
            raise ValueError(f"duplicate workflow name {w.name!r}")
        seen.add(w.name)
        folder = out_dir / w.domain / w.role
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{w.name}.yaml").write_text(model_yaml(w), encoding="utf-8")
    return out_dir


def json_schema_type(kind: str | None) -> str:
    """Map a dataset's parameter type onto a JSON Schema type."""
    k = (kind or "string").lower()
    return {"integer": "integer", "int": "integer", "number": "number", "float": "number", "double": "number",
            "boolean": "boolean", "bool": "boolean", "array": "array", "list": "array",
            "object": "object", "dict": "object"}.get(k, "string")
