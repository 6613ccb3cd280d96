"""Renderer tests: every representation of the good fixture renders deterministically; the code
form is valid Python with the procedure's calls; the Mermaid chart has every API node, decision
diamonds with yes/no edges and a path from Start to End; verbatim representations are kept;
``flowdesk workflows show`` prints them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from workflows.cli import workflows_app
from workflows.library import load_library
from workflows.pdl import Workflow
from workflows.procedure import parse_procedure
from workflows.render import RENDER_FORMATS, render

GOOD = Path(__file__).parent / "fixtures" / "good"


@pytest.fixture(scope="module")
def lib():
    return load_library(GOOD)


def declarative_workflow() -> Workflow:
    """No procedure: only APIs/ANSWERs whose order comes from preconditions (declared out of order)."""
    return Workflow(
        name="opening_hours", description="Tell the opening hours of a restaurant", domain="dining",
        role="restaurant_host", slots=[{"name": "restaurant"}],
        apis=[{"name": "format_hours", "precondition": ["get_hours"], "returns": ["text"]},
              {"name": "get_hours", "parameters": {"type": "object", "required": ["restaurant"],
                                                   "properties": {"restaurant": {"type": "string"}}},
               "returns": ["hours"]}],
        answers=[{"name": "tell_hours", "template": "We are open $text.", "precondition": ["format_hours"]}],
    )


def mermaid(chart: str) -> tuple[dict[str, str], list[tuple[str, str | None, str]]]:
    """Node id -> label and (source, edge label, target) edges of our ``flowchart TD`` output."""
    nodes, edges = {}, []
    for line in chart.splitlines()[1:]:
        line = line.strip()
        if m := re.fullmatch(r"(\w+) -->(?:\|([^|]*)\|)? (\w+)", line):
            edges.append((m[1], m[2], m[3]))
        elif m := re.fullmatch(r"(\w+)[\[\(\{]+\"?(.*?)\"?[\]\)\}]+", line):
            nodes[m[1]] = m[2]
    return nodes, edges


def reachable(edges, start):
    seen, todo = {start}, [start]
    while todo:
        n = todo.pop()
        for a, _, b in edges:
            if a == n and b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


@pytest.mark.parametrize("fmt", RENDER_FORMATS)
def test_every_format_renders_deterministically(lib, fmt):
    for wf in [*lib.workflows.values(), declarative_workflow()]:
        out = render(wf, fmt)
        assert out.strip(), (wf.name, fmt)
        assert out == render(wf, fmt)


def test_text_has_steps_branches_and_loops(lib):
    text = render(lib.get("book_table"), "text")
    assert text.startswith("Book table (dining / restaurant host): Reserve a table")
    assert '1. Ask the user "Which restaurant, for how many people, and when?"' in text
    assert "2. Call the API check_availability with restaurant, party size and time." in text
    assert "3. If available:" in text and "Otherwise:" in text
    assert "Only after check_availability. It cannot be undone: confirm with the user first." in text
    assert "Ask the user for guest name (Name for the booking)." in text
    assert "Note: the booking cannot be undone" in text  # the procedure comment travels with its call
    loop = render(lib.get("cancel_booking"), "text")
    assert "3. Repeat while not found:" in loop and "4. If the user confirms the cancellation:" in loop


def test_code_is_python_with_the_procedure_calls_in_order(lib):
    for wf in lib.workflows.values():
        code = render(wf, "code")
        tree = ast.parse(code)
        fn = tree.body[0]
        assert isinstance(fn, ast.FunctionDef) and fn.name == wf.name
        assert [a.arg for a in fn.args.args] == [s.name for s in wf.slots]
        assert ast.get_docstring(fn).startswith(wf.description)
        rendered = sorted((n.lineno, n.col_offset, f"{n.func.value.id}.{n.func.attr}") for n in ast.walk(fn)
                          if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute))
        expected = [f"{c.kind}.{c.name}" for c in parse_procedure(wf.procedure).calls()]
        assert [name for *_, name in rendered] == expected
    assert 'if COND("the user confirms the cancellation"):' in render(lib.get("cancel_booking"), "code")


def test_flowchart_has_api_nodes_decisions_and_paths(lib):
    for wf in lib.workflows.values():
        chart = render(wf, "flowchart")
        assert chart.startswith("flowchart TD\n")
        nodes, edges = mermaid(chart)
        labels = " | ".join(nodes.values())
        for api in wf.apis:
            assert f"API {api.name}(" in labels, (wf.name, api.name)
        assert reachable(edges, "start") >= set(nodes) - {"start"}, "every node is reachable from Start"
        for n in nodes:  # and every node can finish
            assert "done" in reachable(edges, n), n
        decisions = [n for n in nodes if re.fullmatch(r"d\d+", n)]
        assert decisions, wf.name
        for d in decisions:
            assert {lbl for a, lbl, _ in edges if a == d} == {"yes", "no"}, d
    nodes, edges = mermaid(render(lib.get("book_table"), "flowchart"))
    assert "available?" in nodes.values()
    nodes, edges = mermaid(render(lib.get("cancel_booking"), "flowchart"))
    loop = next(n for n, lbl in nodes.items() if lbl == "not found?")
    assert any(b == loop and a != loop and lbl is None for a, lbl, b in edges
               if nodes.get(a, "").startswith("found, booking")), "the retry loops back to its test"
    assert "the user confirms the cancellation?" in nodes.values()


def test_flowchart_escapes_quotes():
    wf = Workflow(name="q", description="d", domain="x", role="y",
                  procedure='if COND("the \\"vip\\" flag is set"):\n    ANSWER.request_information("a")\n')
    chart = render(wf, "flowchart")
    assert "#quot;vip#quot;" in chart and '\\"' not in chart


def test_summary_is_short_and_names_the_apis(lib):
    summary = render(lib.get("book_table"), "summary")
    assert summary == "Reserve a table at one of our restaurants. It uses the APIs check_availability and book."
    assert 1 <= len(re.findall(r"[.!?](\s|$)", summary)) <= 3


def test_verbatim_representations_are_kept(lib):
    assert render(lib.get("cancel_booking"), "summary") == "Cancels a table booking after finding it by its reference."
    data = lib.get("book_table").model_dump()
    data["representations"] = {"text": "As written.", "flowchart": "graph LR\n a-->b"}
    wf = Workflow.model_validate(data)
    assert render(wf, "text") == "As written."
    assert render(wf, "flowchart") == "graph LR\n a-->b"
    assert render(wf, "code").startswith("def book_table(")  # absent ones are still rendered


def test_pdl_round_trips_without_defaults(lib):
    for wf in lib.workflows.values():
        text = render(wf, "pdl")
        assert "binding" not in text and "required: true" not in text  # defaults are left out
        assert "procedure: |" in text
        again = Workflow.model_validate(yaml.safe_load(text))
        assert again.model_dump() == wf.model_dump()


def test_workflow_without_procedure_follows_preconditions():
    wf = declarative_workflow()
    text = render(wf, "text")
    assert text.index("API get_hours") < text.index("API format_hours") < text.index("We are open")
    code = render(wf, "code")
    assert "[hours] = API.get_hours(restaurant)" in code and "ANSWER.tell_hours()" in code
    ast.parse(code)
    nodes, edges = mermaid(render(wf, "flowchart"))
    ids = {label.split("API ")[-1].split("(")[0]: n for n, label in nodes.items() if "API" in label}
    assert set(ids) == {"get_hours", "format_hours"}
    assert (ids["get_hours"], None, ids["format_hours"]) in edges
    assert ("start", None, ids["get_hours"]) in edges
    assert render(wf, "summary") == "Tell the opening hours of a restaurant. It uses the APIs get_hours and format_hours."
    empty = Workflow(name="nothing", description="Only a description.", domain="x", role="y")
    assert render(empty, "flowchart") == "flowchart TD\n    start([Start])\n    done([End])\n    start --> done\n"
    assert "pass" in render(empty, "code")


def test_unknown_format_is_an_error(lib):
    with pytest.raises(ValueError, match="unknown representation 'html'"):
        render(lib.get("book_table"), "html")


runner = CliRunner()


def test_cli_show_each_format(lib):
    for fmt in RENDER_FORMATS:
        result = runner.invoke(workflows_app, ["show", "book_table", "--as", fmt, "--library", str(GOOD)])
        assert result.exit_code == 0, result.output
        assert result.stdout == render(lib.get("book_table"), fmt)


def test_cli_show_unknown_name_suggests_close_ones():
    result = runner.invoke(workflows_app, ["show", "book_tabel", "--library", str(GOOD)])
    assert result.exit_code == 1
    assert f"no workflow named 'book_tabel' in the library at {GOOD}" in result.stderr
    assert "did you mean book_table?" in result.stderr


def test_cli_show_rejects_unknown_format():
    result = runner.invoke(workflows_app, ["show", "book_table", "--as", "html", "--library", str(GOOD)])
    assert result.exit_code == 2 and "--as must be one of" in result.stderr


def test_amounts_of_money_read_as_money():
    from workflows.semantics import render_template

    assert render_template("€$amount back; $total EUR; rated $stars; $$$price", {
        "amount": 67.4, "total": 318.9, "stars": 4.5, "price": 260.0}) == "€67.40 back; 318.90 EUR; rated 4.5; $260"
