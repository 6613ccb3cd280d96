"""Malformed-input corpus (marker faults): hundreds of generated broken library files, YAML
documents, bindings, procedures, tool arguments, client contexts and texts go through the loader,
the validator, the tool runner and the configuration boundary.  Zero tracebacks: every problem
comes back as a named ``Issue`` / ``ContextError`` / failed ``ToolResult``.

Generated with hypothesis (derandomized, so CI runs the same corpus every time); ``CORPUS`` counts
the inputs, and the last test checks there were at least 200.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from graph.context import ContextError, client_context  # noqa: E402
from workflows.bindings import ToolRunner  # noqa: E402
from workflows.errors import Issue  # noqa: E402
from workflows.library import check_library  # noqa: E402
from workflows.pdl import Workflow  # noqa: E402
from workflows.sanitize import normalize_text, redact  # noqa: E402

pytestmark = pytest.mark.faults
GOOD = Path(__file__).parent / "fixtures" / "good"
WF_REL = Path("dining/restaurant_host/book_table.yaml")
BASE = yaml.safe_load((GOOD / WF_REL).read_text())
CORPUS: dict[str, int] = {}
SETTINGS = dict(deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])


def _count(kind: str) -> None:
    CORPUS[kind] = CORPUS.get(kind, 0) + 1


@pytest.fixture(scope="module")
def lib_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus") / "lib"
    shutil.copytree(GOOD, root)
    return root


def check_file(root: Path, content: bytes) -> list[Issue]:
    """Write ``content`` as one workflow file of an otherwise good library; validate the library."""
    (root / WF_REL).write_bytes(content)
    lib, issues = check_library(root)  # must never raise
    assert all(isinstance(i, Issue) for i in issues)
    for i in issues:
        assert isinstance(i.message, str) and i.message and (i.line is None or i.line >= 1), i
        assert "Traceback" not in str(i)
    return issues


# --- strategies ---------------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True),
                    st.text(max_size=40), st.sampled_from(["", "~", "2026-13-45", "0x1F", ".inf", "yes", "$x", "${y}",
                                                           "os:system", "a" * 300, "\u202e", "\ud800"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                           max_leaves=12)
FIELDS = ["name", "description", "domain", "role", "slots", "apis", "answers", "procedure", "tags",
          "representations", "title", "detailed_description"]
python_targets = st.one_of(
    st.sampled_from(["os:system", "subprocess:run", "builtins:eval", "workflows.demo.tools:connect",
                     "workflows.demo.tools:_open", "workflows.demo.tools:os", "workflows.demo.tools:nope",
                     "workflows.demo:tools", "workflows.demo.tools.x:y", "workflows.importers.star_kb:__getattr__",
                     "workflows.demo.tools:book_table", "no.such.module:f", "a:b:c", ":", "x:", ""]),
    st.from_regex(r"[A-Za-z_][\w.]{0,20}:[A-Za-z_]\w{0,10}", fullmatch=True))
http_urls = st.one_of(
    st.sampled_from(["http://169.254.169.254/latest", "http://localhost:2024/x", "file:///etc/passwd", "gopher://x",
                     "http://user:pw@api.example/x", "https://api.example/x?api_key=abc123", "http://[::1]:80/",
                     "http://${env:HOST}/x", "http://", "http://a:99999/", "://", "https://ex ample.com/"]),
    st.text(max_size=60))
procedures = st.one_of(
    st.text(max_size=200),
    st.sampled_from(["(" * 5000 + ")" * 5000, "[x] = API.book(" + "a," * 3000 + ")", "if x:\n" * 300 + "  pass",
                     "\x00", "while True:\n    pass", "import os\nos.system('id')", "[a] = API.nope()",
                     "if COND(" + "'x'" * 1000 + "):\n    pass", "lambda: 1", "x = 1 if " * 200 + "1"]),
    st.lists(st.sampled_from(["[a] = ANSWER.ask_details()", "if available:", "    ANSWER.confirm_booking()",
                              "else:", "  pass", "break", "while x > 1:", "ANSWER.request_information('x')"]),
             max_size=8).map("\n".join))


@st.composite
def mutated_workflows(draw):
    """The good workflow with a few of its fields replaced, dropped or nested in odd places."""
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["replace", "drop", "add", "api", "binding", "procedure", "slot", "answer"]))
        if op == "replace":
            doc[draw(st.sampled_from(FIELDS))] = draw(json_values)
        elif op == "drop":
            doc.pop(draw(st.sampled_from(FIELDS)), None)
        elif op == "add":
            doc[draw(st.text(min_size=1, max_size=10))] = draw(json_values)
        elif op == "api" and isinstance(doc.get("apis"), list) and doc["apis"]:
            api = doc["apis"][draw(st.integers(0, len(doc["apis"]) - 1))]
            if isinstance(api, dict):
                api[draw(st.sampled_from(["name", "parameters", "returns", "precondition", "irreversible",
                                          "binding", "description"]))] = draw(json_values)
        elif op == "binding" and isinstance(doc.get("apis"), list) and doc["apis"] and isinstance(doc["apis"][0], dict):
            doc["apis"][0]["binding"] = draw(st.one_of(
                st.fixed_dictionaries({"python": python_targets}),
                st.fixed_dictionaries({"http": st.fixed_dictionaries(
                    {"url": http_urls}, optional={"headers": st.dictionaries(st.text(max_size=15), st.text(max_size=30), max_size=3),
                                                  "method": st.sampled_from(["GET", "POST", "TRACE"]),
                                                  "timeout": st.one_of(st.floats(), st.integers())})}),
                st.fixed_dictionaries({"simulate": json_values}), json_values))
        elif op == "procedure":
            doc["procedure"] = draw(procedures)
        elif op == "slot":
            doc["slots"] = draw(st.lists(st.one_of(json_values, st.fixed_dictionaries(
                {"name": st.text(max_size=10)}, optional={"type": st.text(max_size=8), "enum": json_values})), max_size=4))
        elif op == "answer":
            doc["answers"] = draw(st.lists(st.fixed_dictionaries(
                {"name": st.text(max_size=10)}, optional={"template": st.text(max_size=60), "precondition": json_values}),
                max_size=4))
    return doc


def _dump(doc) -> bytes:
    try:
        return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return json.dumps(doc, default=str).encode("utf-8", "surrogatepass")


yaml_snippets = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.lists(st.sampled_from([
        "name: x\n", "a: &a [1, 2]\n", "b: *a\n", "c: *missing\n", "<<: *a\n", "? [1, 2]\n: v\n", "!!python/object:os.system {}\n",
        "d: !!binary AAAA\n", "e: 2026-13-45\n", "f: 1" + "0" * 5000 + "\n", "g: {{{{\n", "- x\n", "  - y\n", "h: |\n  x\n",
        "%YAML 1.1\n---\n", "---\n", "...\n", "i: \"\\ud800\"\n", "\t- tab\n", "j: [" * 60 + "]" * 60 + "\n",
        "k: !!set {a, b}\n", "l: !custom 1\n", "m: &x {n: *x}\n", "name: name\nname: twice\n"]), max_size=8)
    .map(lambda parts: "".join(parts).encode()))


# --- the corpus ---------------------------------------------------------------------------------------

@settings(max_examples=120, **SETTINGS)
@given(doc=mutated_workflows())
def test_mutated_workflow_files_give_named_issues(lib_root, doc):
    _count("workflow file (mutated)")
    check_file(lib_root, _dump(doc))


@settings(max_examples=100, **SETTINGS)
@given(content=yaml_snippets)
def test_arbitrary_yaml_and_bytes_give_named_issues(lib_root, content):
    _count("YAML / bytes")
    check_file(lib_root, content)  # a well-formed document may even be valid: no assertion on the count


@settings(max_examples=60, **SETTINGS)
@given(name=st.sampled_from(["_domain.yaml", "_role.yaml"]), doc=st.one_of(json_values, st.fixed_dictionaries(
    {"name": json_values, "description": json_values}, optional={"domain": json_values, "title": json_values})))
def test_malformed_domain_and_role_files(tmp_path_factory, name, doc):
    _count("domain/role file")
    root = tmp_path_factory.mktemp("dr") / "lib"
    shutil.copytree(GOOD, root)
    target = root / "dining" / name if name == "_domain.yaml" else root / "dining" / "restaurant_host" / name
    target.write_bytes(_dump(doc))
    _, issues = check_library(root)
    assert all(isinstance(i, Issue) for i in issues)


SCHEMAS = [BASE["apis"][0]["parameters"],
           {"type": "object", "properties": {"restaurant": {"$ref": "http://169.254.169.254/schema"}}},
           {"type": "object", "properties": {"restaurant": {"$ref": "#/definitions/missing"}}},
           {"type": "object", "properties": {"restaurant": {"type": "string", "pattern": "(a+)+$"}}}]


@settings(max_examples=60, **SETTINGS)
@given(args=json_values, binding=st.sampled_from([{"simulate": True}, {"python": "workflows.demo.tools:check_availability"},
                                                  {"python": "os:system"}, {"http": {"url": "http://169.254.169.254/x"}}]),
       schema=st.sampled_from(SCHEMAS))
def test_tool_runner_never_raises_on_malformed_arguments(tmp_path_factory, args, binding, schema):
    _count("tool arguments")
    from graph.context import Context

    wf = Workflow.model_validate({**{k: BASE[k] for k in ("name", "description", "domain", "role")},
                                  "apis": [{**BASE["apis"][0], "binding": binding, "parameters": schema}]})
    db = tmp_path_factory.getbasetemp() / "corpus-demo.sqlite"
    res = ToolRunner(Context(db_path=str(db), tool_timeout=5)).run(wf, "check_availability", args)
    assert res.ok or (isinstance(res.error, str) and res.error)


@settings(max_examples=60, **SETTINGS)
@given(mapping=st.dictionaries(st.sampled_from(["top_k", "top_k_upper", "tool_timeout", "max_attempts", "retriever",
                                                "library", "base_url", "judge_api_key_env", "confirm_irreversible",
                                                "clarify_margin", "unknown"]), json_values, max_size=4))
def test_client_contexts_give_named_errors(mapping):
    _count("client context")
    try:
        client_context(mapping)
    except ContextError as exc:
        assert str(exc).split(":")[0] in mapping, str(exc)


@settings(max_examples=40, **SETTINGS)
@given(value=st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_text_normalisation_is_total(value):
    _count("user text")
    out = normalize_text(value)
    assert isinstance(out, str)
    out.encode("utf-8")  # no lone surrogate survives
    assert not any(ord(c) < 32 and c not in "\t\n" for c in out)
    assert isinstance(redact(out), str)


def test_corpus_size():
    """Run with the whole file: the generated corpus has at least 200 inputs, all without a traceback."""
    total = sum(CORPUS.values())
    if total == 0:
        pytest.skip("run the whole file to count the corpus")
    print(f"malformed corpus: {total} inputs, 0 tracebacks: " + ", ".join(f"{k} {n}" for k, n in CORPUS.items()))
    assert total >= 200, CORPUS
