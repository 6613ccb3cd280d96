"""Validator tests: each broken library under fixtures/broken/<case>/ must report the exact file,
line and field a person should open; the good fixture must load cleanly; ``flowdesk workflows
validate`` prints the same issues and sets its exit code."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from workflows.cli import workflows_app
from workflows.errors import LibraryError
from workflows.library import check_library, load_library, load_workflow

FIXTURES = Path(__file__).parent / "fixtures"
BROKEN = FIXTURES / "broken"
GOOD = FIXTURES / "good"
TRACK = "shop/clerk/track.yaml"

# case -> (file relative to the case root, line, field, words the message must contain)
CASES = {
    "yaml_syntax": (TRACK, 7, "", "YAML syntax error"),
    "duplicate_key": (TRACK, 7, "description", "appears twice"),
    "missing_field": (TRACK, 7, "slots[1].name", "required field is missing"),
    "wrong_type": (TRACK, 7, "apis[0].returns", "valid list"),
    "unknown_field": (TRACK, 9, "apis[1].preconditions", "unknown field"),
    "unknown_precondition": (TRACK, 11, "apis[1].precondition[1]", "unknown node 'check_identity'"),
    "unknown_precondition_flow": (TRACK, 11, "answers[0].precondition[1]", "unknown node 'check_identity'"),
    "cycle": (TRACK, 7, "apis[0].precondition", "dependency cycle: find_order -> cancel_order -> find_order"),
    "procedure_syntax": (TRACK, 10, "procedure", "line 2 of the procedure: does not parse"),
    "procedure_disallowed": (TRACK, 12, "procedure", "'For' statements are not allowed"),
    "procedure_keyword": (TRACK, 11, "procedure", "not keywords"),
    "attribute_condition": (TRACK, 10, "procedure", "'Attribute' is not allowed in a condition"),
    "undeclared_call": (TRACK, 11, "procedure", "undeclared API 'refund_order'"),
    "unknown_argument": (TRACK, 9, "procedure", "unknown value 'order_number'"),
    "unknown_condition_name": (TRACK, 14, "procedure", "unknown name 'delay'"),
    "invalid_schema": (TRACK, 10, "apis[0].parameters.properties.order_id.type", "invalid JSON Schema"),
    "required_not_in_properties": (TRACK, 9, "apis[0].parameters.required[1]", "'email' is not in properties"),
    "duplicate_workflow": ("shop/clerk/track_again.yaml", 1, "name", "duplicate workflow name 'track'"),
    "duplicate_slot": (TRACK, 8, "slots[2].name", "'order_id' is declared 2 times"),
    "unknown_template_name": (TRACK, 9, "answers[0].template", "unknown name $state"),
    "missing_domain_description": (TRACK, 3, "domain", "shop/_domain.yaml is missing"),
    "empty_role_description": ("shop/clerk/_role.yaml", 3, "description", "must not be empty"),
    "wrong_folder": (TRACK, 4, "role", "must live in shop/courier/"),
    "binding_two_kinds": (TRACK, 8, "apis[0].binding", "exactly one of python, http, simulate"),
    "binding_bad_python": (TRACK, 8, "apis[0].binding.python", "package.module:function"),
    "binding_wrong_simulate": (TRACK, 8, "apis[0].binding.simulate", "valid boolean"),
    # least privilege: the default policy allows only flowdesk's own tool modules and no http host
    "binding_not_allowed": (TRACK, 8, "apis[0].binding.python", "module 'os' is not an allowed tool module"),
    "binding_missing_function": (TRACK, 8, "apis[0].binding.python", "has no function 'no_such_tool'"),
    "binding_missing_module": (TRACK, 8, "apis[0].binding.python", "'workflows.demo.tools.nope' does not exist"),
    "binding_http_host": (TRACK, 10, "apis[0].binding.http.url", "host '169.254.169.254' is not an allowed http host"),
    # YAML limits: an alias bomb (9 aliases per level) and 5,000-deep nesting are refused at their line
    "yaml_alias_bomb": (TRACK, 10, "", "values once aliases are expanded"),
    "yaml_too_deep": (TRACK, 6, "", "nesting deeper than the limit of 50 levels"),
}


def test_every_fixture_case_is_listed():
    assert sorted(p.name for p in BROKEN.iterdir() if p.is_dir()) == sorted(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_case_reports_file_line_field(case):
    rel, line, field, words = CASES[case]
    root = BROKEN / case
    _, issues = check_library(root)
    assert issues, f"{case}: no issue reported"
    first = issues[0]
    assert (Path(first.file), first.line, first.field) == (root / rel, line, field), str(first)
    assert words in first.message, str(first)
    # The reported line really holds what the field names (the key, or for the procedure its code).
    text = (root / rel).read_text().splitlines()[line - 1]
    key = field.rsplit(".", 1)[-1].split("[")[0]
    if key and key != "procedure" and words != "required field is missing" and not field.endswith("]"):
        assert key in text, f"line {line} of {rel} is {text!r}, expected it to mention {key!r}"


def test_procedure_issue_lines_point_at_the_statement():
    # The line must be the offending statement inside the `|` block, not the `procedure:` key.
    for case, needle in (("procedure_disallowed", "for attempt"), ("undeclared_call", "refund_order"),
                         ("unknown_condition_name", "elif delay"), ("procedure_keyword", "order_id=")):
        rel, line, *_ = CASES[case]
        assert needle in (BROKEN / case / rel).read_text().splitlines()[line - 1], case


def test_wrong_folder_also_names_the_missing_role():
    _, issues = check_library(BROKEN / "wrong_folder")
    assert any(i.field == "role" and "courier" in i.message and "_role.yaml is missing" in i.message for i in issues)


def test_existing_but_broken_role_file_is_not_reported_as_missing():
    _, issues = check_library(BROKEN / "empty_role_description")
    assert len(issues) == 1


def test_load_library_raises_with_every_issue():
    with pytest.raises(LibraryError) as exc:
        load_library(BROKEN / "duplicate_slot")
    assert "track.yaml:8: slots[2].name" in str(exc.value)


def test_load_workflow_alone_runs_the_semantic_checks():
    with pytest.raises(LibraryError) as exc:
        load_workflow(BROKEN / "cycle" / TRACK)
    assert exc.value.issues[0].line == 7


def test_good_library_loads_cleanly():
    lib = load_library(GOOD)
    assert lib.stats() == {"domains": 1, "roles": 1, "workflows": 2, "apis": 4}
    assert lib.get("book_table").source == GOOD / "dining/restaurant_host/book_table.yaml"


def test_missing_directory_is_one_issue(tmp_path):
    _, issues = check_library(tmp_path / "nope")
    assert len(issues) == 1 and "does not exist" in issues[0].message


runner = CliRunner()


def test_cli_validate_good_prints_counts():
    result = runner.invoke(workflows_app, ["validate", str(GOOD)])
    assert result.exit_code == 0, result.output
    assert "1 domains, 1 roles, 2 workflows, 4 apis" in result.output


def test_cli_validate_broken_lists_issues_and_fails():
    root = BROKEN / "unknown_precondition"
    result = runner.invoke(workflows_app, ["validate", str(root)])
    assert result.exit_code == 1
    assert f"{root / TRACK}:11: apis[1].precondition[1]: unknown node 'check_identity'" in result.stdout
    assert "1 problem in 1 file" in result.stderr


def test_yml_files_are_reported_not_silently_skipped(tmp_path):
    import shutil

    shutil.copytree(GOOD, tmp_path / "lib")
    (tmp_path / "lib/dining/restaurant_host/extra.yml").write_text("name: extra\n")
    _, issues = check_library(tmp_path / "lib")
    assert [(Path(i.file).name, i.line) for i in issues] == [("extra.yml", None)]
    assert "must end in .yaml" in issues[0].message


def test_yaml_limits_answer_fast():
    import time

    for case in ("yaml_alias_bomb", "yaml_too_deep"):
        start = time.perf_counter()
        _, issues = check_library(BROKEN / case)
        assert time.perf_counter() - start < 2.0 and issues[0].message.startswith("YAML limit:"), case


def test_http_binding_with_an_allowed_host_and_env_secret_validates(tmp_path, monkeypatch):
    import shutil

    root = tmp_path / "lib"
    shutil.copytree(BROKEN / "binding_http_host", root)
    track = root / TRACK
    track.write_text(track.read_text().replace("http://169.254.169.254/latest/meta-data",
                                               "https://api.shop.example/orders?api_key=${env:SHOP_KEY}"))
    monkeypatch.setenv("FLOWDESK_HTTP_HOSTS", "api.shop.example")
    assert check_library(root)[1] == []
    track.write_text(track.read_text().replace("${env:SHOP_KEY}", "sk-live-1234"))
    issues = check_library(root)[1]
    assert [(i.line, i.field) for i in issues] == [(10, "apis[0].binding.http.url")]
    assert "literal secret" in issues[0].message and "sk-live-1234" not in issues[0].message
