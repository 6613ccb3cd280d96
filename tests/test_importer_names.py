"""Importers produce valid PDL for any schema: every source name becomes an identifier (keywords,
hyphens, leading digits, unicode), the original is kept for display, and the library loads."""

from __future__ import annotations

import json
import keyword
import os
import random
import re
from pathlib import Path

import pytest

from workflows.importers.common import identifier, identifiers
from workflows.importers.sgd import import_sgd, workflow_name
from workflows.library import check_library, load_library
from workflows.procedure import parse_procedure

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NASTY = ["from", "class", "import", "lambda", "None", "True", "check-in", "2nd_date", "7", "café_name",
         "Größe", "名前", "город", "-", "a b", "a-b", "a_b", "π", "return date", "API", "ANSWER", ""]


def test_identifier_is_valid_and_stable_for_any_name():
    for raw in NASTY:
        name = identifier(raw)
        assert NAME.match(name), (raw, name)
        assert not keyword.iskeyword(name)
        assert identifier(raw) == name  # deterministic
    assert identifier("from") == "from_" and identifier("café") == "cafe" and identifier("2nd") == "n_2nd"
    assert identifier("destination_city") == "destination_city"  # valid names are kept
    assert identifier("名前") != identifier("город")  # distinct unicode names stay distinct
    group = identifiers(["a-b", "a_b", "a b"])
    assert len(set(group.values())) == 3 and all(NAME.match(v) for v in group.values())


def _fuzzed_schema(seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    pool = NASTY[:-1] + [f"{rng.choice(NASTY[:-1])}{rng.choice(['', '-x', ' 2', 'é'])}" for _ in range(20)]
    services = []
    for s in range(3):
        slots = [{"name": n, "description": "" if i % 3 == 0 else f"the {n}", "is_categorical": i % 2 == 0,
                  "possible_values": ["yes", "no"] if i % 2 == 0 else []}
                 for i, n in enumerate(dict.fromkeys(rng.sample(pool, 8)))]
        names = [d["name"] for d in slots]
        intents = [{"name": intent, "description": f"Do {intent}", "is_transactional": bool(k % 2),
                    "required_slots": names[:3], "optional_slots": {names[3]: "x", names[4]: "dontcare"},
                    "result_slots": names}
                   for k, intent in enumerate(["class", "Find-Ström", "3rd way"])]
        services.append({"service_name": ["Zug-Bahn_1", "from_2", "Café"][s], "description": "fuzz",
                         "slots": slots, "intents": intents})
    return services


def test_fuzzed_sgd_schema_imports_into_a_valid_library(tmp_path):
    schema = _fuzzed_schema()
    (tmp_path / "sgd" / "dev").mkdir(parents=True)
    (tmp_path / "sgd" / "dev" / "schema.json").write_text(json.dumps(schema, ensure_ascii=False), encoding="utf-8")
    root = import_sgd(tmp_path / "sgd", tmp_path / "lib", "dev")
    lib, issues = check_library(root)
    assert issues == [], "\n".join(map(str, issues[:5]))
    assert len(lib.workflows) == 9
    for service in schema:
        for intent in service["intents"]:
            wf = lib.get(workflow_name(service["service_name"], intent["name"]))
            parse_procedure(wf.procedure)
            titles = {s.title or s.name for s in wf.slots}
            # the source's own names are kept for display
            assert set(intent["required_slots"]) <= titles
            kw = [s for s in wf.slots if s.title == "from"]
            assert all(s.name == "from_" and s.display_name == "from" for s in kw)


def test_the_question_shows_the_source_name(tmp_path):
    from dialogue.execution.replies import question_for

    schema = [{"service_name": "Trains_9", "description": "", "slots": [
        {"name": "from", "description": "", "is_categorical": False, "possible_values": []}],
        "intents": [{"name": "Go", "description": "go", "is_transactional": False, "required_slots": ["from"],
                     "optional_slots": {}, "result_slots": []}]}]
    (tmp_path / "sgd" / "dev").mkdir(parents=True)
    (tmp_path / "sgd" / "dev" / "schema.json").write_text(json.dumps(schema))
    wf = load_library(import_sgd(tmp_path / "sgd", tmp_path / "lib", "dev")).get("Trains_9__Go")
    assert wf.slot("from_") is not None and question_for(wf, ["from_"]) == "Could you tell me the from?"


def test_mined_transcript_fields_become_identifiers():
    from workflows.extraction.transcripts import ApiCall

    call = ApiCall(name="book", args={"from": "A", "check-in": "today"}, result={"class": "eco"})
    assert call.args == {"from_": "A", "check_in": "today"} and call.result == {"class_": "eco"}


# --- every schema file of the real data ---------------------------------------------------------

def _data() -> Path:
    return Path(os.environ.get("FLOWDESK_DATA") or REPO.parent / "shared" / "data")


@pytest.mark.data
def test_every_schema_file_in_the_data_imports(tmp_path):
    data = _data()
    schemas = sorted((data / "sgd").glob("**/schema.json")) if (data / "sgd").is_dir() else []
    if not schemas:
        pytest.skip(f"no SGD schema files under {data}")
    for path in schemas:
        split = path.parent.name
        out = tmp_path / "sgd" / "-".join(path.relative_to(data / "sgd").parts[:-1])
        lib, issues = check_library(import_sgd(path.parent.parent, out, split))
        assert issues == [], f"{path}: " + "\n".join(map(str, issues[:5]))
        raw = json.loads(path.read_text())
        assert len(lib.workflows) == sum(len(s["intents"]) for s in raw)
    if (data / "star" / "tasks").is_dir():
        from workflows.importers.star import import_star

        lib, issues = check_library(import_star(data, tmp_path / "star"))
        assert issues == [] and lib.workflows
    if (data / "flowswitch").is_dir():
        from workflows.importers.flowbench import import_flowbench

        lib, issues = check_library(import_flowbench(data / "flowswitch", tmp_path / "flowbench"))
        assert issues == [] and lib.workflows
