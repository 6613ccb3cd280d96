"""``flowdesk test``: the bundled conversation tests pass through the real graph (CI runs them here),
a broken test file is refused with file:line and field (exit 2), a failing case exits 1 with a diff per
failed step, JUnit XML and procedure coverage."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from convtests.coverage import measure
from convtests.format import load_tests
from convtests.runner import ConversationTester, same
from workflows.errors import LibraryError

BUNDLED = Path(__file__).parent / "conversations"


@pytest.fixture(scope="module")
def tester(agent_context, tmp_path_factory):
    return ConversationTester(agent_context, tmp_path_factory.mktemp("convtests"))


@pytest.fixture
def cli_env(agent_context, monkeypatch):
    monkeypatch.setenv("FLOWDESK_STORE_DIR", agent_context.store_dir)
    from graph.cli import app

    return lambda *args: CliRunner().invoke(app, list(args))


def test_bundled_conversation_tests_pass_and_cover_every_branch_and_api(tester, agent_context):
    from graph.resources import get_resources

    library = get_resources(agent_context).library
    cases = load_tests([BUNDLED], workflows=library.workflows)
    results = [tester.run(c) for c in cases]
    bad = [f"{r.case.name}: {r.outcome}\n{[(s.step.describe(), s.expected, s.got) for s in r.failures()]}"
           for r in results if not r.passed]
    assert not bad, "\n".join(bad)
    cov = {c.workflow: c for c in measure(library, [r.exercised for r in results])}
    assert set(cov) == set(library.workflows)
    # every API and every branch is exercised (the slot-reading and pick defects that stopped
    # report_fraud's open_fraud_case and search_hotels' no-hotel branch are fixed)
    missing_apis = sorted(f"{w}.{a}" for w, c in cov.items() for a in c.apis if a not in c.ran)
    missing_branches = sorted(f"{w}:{b.label}" for w, c in cov.items() for b in c.branches if not b.hit(c.ran))
    assert missing_apis == [] and missing_branches == []


def test_a_case_checks_each_step_against_its_turn(tester, tmp_path):
    (tmp_path / "t.yaml").write_text(
        "test_cases:\n"
        "  - name: wrong expectations\n"
        "    steps:\n"
        "      - user: \"Can you track order ORD-7002 for amelia.hart@example.com?\"\n"
        "      - workflow: cancel_order\n"
        "      - tool_called: {name: track_order, args: {order_id: ORD-7002}}\n"
        "      - tool_called: {name: track_order, args: {order_id: ORD-7001}}\n"
        "      - bot_matches: \"(?i)parcelwise\"\n"
        "      - confirm: \"yes\"\n")
    r = tester.run(load_tests([tmp_path])[0])
    assert [s.ok for s in r.steps] == [False, True, False, True, False]
    assert "active workflow 'track_order'" in r.steps[0].got
    assert "track_order(order_id='ORD-7002'" in r.steps[2].got
    assert r.steps[4].expected == "a pending confirmation to answer" and not r.passed


def test_confirmation_is_answered_by_the_confirm_step_and_tool_state_is_fresh_per_case(tester, tmp_path):
    (tmp_path / "t.yaml").write_text(
        "test_cases:\n"
        "  - name: cancel\n"
        "    steps:\n"
        "      - user: \"Cancel my restaurant booking B-1004 please\"\n"
        "      - tool_called: cancel_booking\n"  # awaiting confirmation counts as called
        "      - workflow_completed: cancel_booking\n"  # not yet: the confirmation is pending
        "      - confirm: \"yes\"\n"
        "      - workflow_completed: cancel_booking\n"
        "      - bot_contains: is cancelled\n")
    case = load_tests([tmp_path])[0]
    first, second = tester.run(case), tester.run(case)  # the second starts from the seeded database again
    for r in (first, second):
        assert [s.ok for s in r.steps] == [True, False, True, True], r.transcript


def test_malformed_files_exit_2_naming_file_line_and_field(cli_env, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("test_cases:\n  - name: x\n    steps:\n      - user: hi\n      - tool_called: {args: {a: 1}}\n"
                   "      - workflow: no_such_flow\n      - bot_matches: \"(\"\n      - user: a\n        slot: {}\n")
    res = cli_env("test", str(bad))
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert f"{bad}:5: test_cases[0].steps[1].tool_called.name: required field is missing" in out
    assert f"{bad}:7: test_cases[0].steps[3].bot_matches: not a regular expression" in out
    assert "steps[4]: a step has exactly one of" in out
    unknown = tmp_path / "more" / "unknown.yaml"
    unknown.parent.mkdir()
    unknown.write_text("test_cases:\n  - name: x\n    steps:\n      - user: hi\n      - workflow: no_such_flow\n")
    with pytest.raises(LibraryError, match=r"unknown.yaml:5: test_cases\[0\].steps\[1\].workflow: unknown workflow"):
        load_tests([unknown], workflows=["book_table"])
    assert cli_env("test", str(tmp_path / "missing")).exit_code == 2


def test_cli_exit_codes_junit_and_coverage(cli_env, tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("test_cases:\n  - name: search\n    steps:\n"
                    "      - user: \"Can you find me an Italian restaurant in the old town?\"\n"
                    "      - workflow: search_restaurants\n      - bot_contains: Trattoria Lumi\n")
    junit = tmp_path / "out" / "junit.xml"
    res = cli_env("test", str(good), "--junit", str(junit), "--coverage")
    assert res.exit_code == 0, res.output
    assert "1 passed, 0 failed" in res.output and "search_restaurants" in res.output
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "0"
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("Trattoria Lumi", "Sakura Lane"))
    res = cli_env("test", str(bad), "--junit", str(junit))
    assert res.exit_code == 1
    out = " ".join(res.output.split())
    assert "expected: a reply containing 'Sakura Lane'" in out and f"{bad}:6" in out
    assert ET.parse(junit).getroot().find(".//failure") is not None


def test_value_matching():
    assert same(3, "3") and same("Bob Stone", "bob stone ") and same({"a": 1}, {"a": "1", "b": 2})
    assert not same("19:30", "19:00") and not same([1, 2], [1])


def test_the_default_tools_database_is_seeded_fresh_not_copied_from_earlier_chats(agent_context, tmp_path,
                                                                                  monkeypatch):
    # `flowdesk chat` writes to the default location; a transfer made there once changed what a later
    # `flowdesk test` in the same directory saw as a balance
    import sqlite3
    from dataclasses import replace

    from graph.context import Context
    from workflows.demo.db import ensure_db

    monkeypatch.chdir(tmp_path)
    default = Context.__dataclass_fields__["db_path"].default
    Path(default).parent.mkdir(parents=True)
    ensure_db(default)
    with sqlite3.connect(default) as db:
        db.execute("UPDATE accounts SET balance = balance - 2")

    def balances(path):
        with sqlite3.connect(path) as db:
            return db.execute("SELECT SUM(balance) FROM accounts").fetchone()[0]

    seeded = tmp_path / "seeded.sqlite"
    ensure_db(seeded)
    fresh = ConversationTester(replace(agent_context, db_path=default), tmp_path / "w1")
    assert balances(fresh.pristine) == balances(seeded) != balances(default)
    # a database the user names is theirs to test against: copied as it is
    named = ConversationTester(replace(agent_context, db_path=str(Path(default).resolve())), tmp_path / "w2")
    assert balances(named.pristine) == balances(default)
