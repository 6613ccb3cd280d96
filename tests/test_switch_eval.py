"""Switch evaluation: metrics on hand-computed cases, configuration parsing, dataset adapters on
hand-written raw records, and data-marked smoke runs of ``flowdesk eval switch``."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from evals.switch_metrics import TurnRecord, compute, hit_at, reciprocal_rank

DATA = Path(os.environ.get("FLOWDESK_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def test_topk_and_map_hand_computed():
    recs = [
        TurnRecord("a", None, ["a", "b"]),             # rank 1
        TurnRecord("b", "a", ["a", "c", "b"]),         # rank 3
        TurnRecord("c", "c", ["x", "y", "z", "w", "v", "c"]),  # rank 6: outside the top 5
        TurnRecord(None, "c", []),                     # out of scope, nothing predicted: correct
        TurnRecord(None, None, ["a"]),                 # out of scope but predicted: wrong
    ]
    m = compute(recs)
    assert m["top1"] == pytest.approx(2 / 5)
    assert m["top3"] == pytest.approx(3 / 5)
    assert m["top5"] == pytest.approx(3 / 5)
    assert m["map"] == pytest.approx((1 + 1 / 3 + 0 + 1 + 0) / 5)
    assert reciprocal_rank(recs[1]) == pytest.approx(1 / 3) and not hit_at(recs[2], 5)


def test_detector_metrics_hand_computed():
    recs = [
        TurnRecord("a", None, ["a"], "SEARCH", active=None),                       # change, flagged
        TurnRecord("a", "a", ["a"], "STAY", active="a", searched=False),           # stay, kept: right
        TurnRecord("b", "a", ["a"], "STAY", active="a", searched=False),           # missed switch
        TurnRecord("a", "a", ["a"], "SEARCH", active="a"),                         # false alarm
        TurnRecord(None, "a", [], "STAY", out_of_scope=True, active="a", searched=False),  # OOS switch caught
    ]
    m = compute(recs)
    assert m["detector_accuracy"] == pytest.approx(3 / 5)
    assert m["switch_recall"] == pytest.approx(2 / 3)       # changes: 1st, 3rd, 5th; caught 1st and 5th
    assert m["switch_precision"] == pytest.approx(2 / 3)    # flagged: 1st, 4th, 5th
    assert m["searches_per_turn"] == pytest.approx(2 / 5) and m["search_reduction"] == pytest.approx(3 / 5)
    assert m["top1_stay_turns"] == pytest.approx(1.0) and m["top1_switch_turns"] == pytest.approx(2 / 3)


def test_empty_metrics_are_nan():
    assert math.isnan(compute([])["top1"])


def test_parse_configs_expands_wildcards():
    import typer

    from evals.switch import parse_configs

    cfgs = parse_configs("bm25/flat/text/*/on,hybrid/R>W/summary/SelfGen/off")
    assert [c.name for c in cfgs][:2] == ["bm25/flat/text/Full/on", "bm25/flat/text/Last3/on"]
    assert len(cfgs) == 9 and cfgs[-1].name == "hybrid/R>W/summary/SelfGen/off"
    assert "bm25/flat/text/Last1+ctx/on" in [c.name for c in cfgs]
    with pytest.raises(typer.BadParameter):
        parse_configs("bm25/flat/text/Last9/on")


TWIN_LIB = {
    "dining/_domain.yaml": "name: dining\ndescription: Restaurants.\n",
    "dining/host_a/_role.yaml": "name: host_a\ndomain: dining\ndescription: Restaurant service A.\n",
    "dining/host_b/_role.yaml": "name: host_b\ndomain: dining\ndescription: Restaurant service B.\n",
    "dining/host_a/find_a.yaml": "name: find_a\ndescription: Find a restaurant by city and cuisine.\n"
                                 "domain: dining\nrole: host_a\n",
    "dining/host_a/book_a.yaml": "name: book_a\ndescription: Reserve a table at a restaurant.\n"
                                 "domain: dining\nrole: host_a\n",
    "dining/host_b/book_b.yaml": "name: book_b\ndescription: Reserve a table at a restaurant.\n"
                                 "domain: dining\nrole: host_b\n",
    # Unrelated workflows so that BM25's IDF is meaningful on a tiny library.
    **{f"travel/desk/{n}.yaml": f"name: {n}\ndescription: {d}\ndomain: travel\nrole: desk\n" for n, d in [
        ("weather", "Tell the weather forecast for a city."), ("bus", "Find a bus between two cities."),
        ("ride", "Get a taxi ride to an address."), ("flight", "Search one-way flights.")]},
    "travel/_domain.yaml": "name: travel\ndescription: Travel.\n",
    "travel/desk/_role.yaml": "name: desk\ndomain: travel\ndescription: Travel desk.\n",
}


def test_context_reranked_queries_keep_the_service_in_use(tmp_path):
    """Two near-duplicate services: after finding with service A, "reserve a table" means A's booking."""
    from evals.datasets import Dialogue, Turn, finish_labels
    from evals.switch import parse_configs, prepare, run_config
    from evals.switch_metrics import compute
    from graph.context import Context
    from memory.retrieval import build_retriever
    from workflows.library import load_library

    for rel, text in TWIN_LIB.items():
        (tmp_path / "lib" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "lib" / rel).write_text(text)
    lib = load_library(tmp_path / "lib")
    ctx = Context(library=str(tmp_path / "lib"), store_dir=str(tmp_path / "store"), db_path=str(tmp_path / "db"))
    retriever = build_retriever(lib, ctx, formats=["text"])
    dlg = finish_labels(Dialogue("d", [
        Turn("user", "Can you find me an Italian restaurant in Rome?", "find_a"),
        Turn("agent", "Trattoria Lumi is a nice place in Rome. Would you like to reserve a table?"),
        Turn("user", "Yes, please reserve a table there.", "book_a")]))
    cfgs = parse_configs("bm25/flat/text/Last1/on,bm25/flat/text/Last1+ctx/on")
    turns = prepare([dlg], lib, retriever, {c.query for c in cfgs})
    assert turns[1].seen == ("find_a",) and "reserve a table" in turns[1].ctx_text
    assert turns[1].verdict.action == "SEARCH", str(turns[1].verdict.features)
    plain, with_ctx = (run_config(c, turns, retriever, {}) for c in cfgs)
    assert set(plain[1].predicted[:2]) == {"book_a", "book_b"}  # a tie on the text alone
    assert with_ctx[1].predicted[0] == "book_a" and compute(with_ctx)["top1"] == 1.0


def test_sgd_focus_frame_and_labels():
    from evals.datasets.sgd import convert

    raw = {"dialogue_id": "x", "turns": [
        {"speaker": "USER", "utterance": "Find me a restaurant", "frames": [
            {"service": "Restaurants_1", "actions": [{"act": "INFORM_INTENT"}],
             "state": {"active_intent": "FindRestaurants"}}]},
        {"speaker": "SYSTEM", "utterance": "Found one. Book it?", "frames": []},
        {"speaker": "USER", "utterance": "Also a cab there", "frames": [
            {"service": "Restaurants_1", "actions": [], "state": {"active_intent": "FindRestaurants"}},
            {"service": "RideSharing_2", "actions": [{"act": "INFORM_INTENT"}],
             "state": {"active_intent": "GetRide"}}]},
        {"speaker": "SYSTEM", "utterance": "Done.", "frames": []},
        {"speaker": "USER", "utterance": "Thanks, that's all", "frames": [
            {"service": "RideSharing_2", "actions": [], "state": {"active_intent": "NONE"}}]},
    ]}
    users = convert(raw).user_turns
    assert [t.gold for t in users] == ["Restaurants_1__FindRestaurants", "RideSharing_2__GetRide", None]
    assert [t.gold_changed for t in users] == [True, True, True]
    assert users[1].prev_gold == "Restaurants_1__FindRestaurants"


def test_star_labels_follow_the_wizards_selection():
    from evals.datasets.star import convert

    raw = {"DialogueID": 3, "Scenario": {"MultiTask": True, "WizardCapabilities": []}, "Events": [
        {"Agent": "User", "Action": "utter", "Text": "What's my balance?"},
        {"Agent": "Wizard", "Action": "pick_suggestion", "Text": "Your name?"},
        {"Agent": "User", "Action": "utter", "Text": "Ann"},
        {"Agent": "Wizard", "Action": "select_task", "Task": "bank_balance"},
        {"Agent": "Wizard", "Action": "utter", "Text": "PIN?"},
        {"Agent": "User", "Action": "utter", "Text": "1234. And the weather tomorrow?"},
        {"Agent": "Wizard", "Action": "select_task", "Task": "weather"},
        {"Agent": "Wizard", "Action": "utter", "Text": "Sunny."},
        {"Agent": "User", "Action": "utter", "Text": "Great"},
    ]}
    dlg = convert(raw, {"bank_balance", "weather"})
    assert [t.gold for t in dlg.user_turns] == ["bank_balance", "bank_balance", "weather", "weather"]
    assert [t.gold_changed for t in dlg.user_turns] == [True, False, True, False]


needs_data = pytest.mark.skipif(not (DATA / "sgd").is_dir(),
                                reason=f"datasets not found at {DATA} (set FLOWDESK_DATA)")


def _run(tmp_path, *args):
    from typer.testing import CliRunner

    from evals.cli import app

    env = {"FLOWDESK_EVAL_CACHE": str(tmp_path / "cache")}
    result = CliRunner().invoke(app, ["switch", "--data", str(DATA), "--out", str(tmp_path / "out"), *args],
                                env=env)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return json.loads((tmp_path / "out" / "metrics.json").read_text())


@pytest.mark.data
@pytest.mark.slow
@needs_data
def test_smoke_flowbench_samples(tmp_path):
    m = _run(tmp_path, "--dataset", "flowbench-samples", "--loop", "teacher",
             "--configs", "bm25/flat/text/*/on,bm25/flat/text/Last1/off")
    assert m["turns"] == 10 and m["out_of_scope_golds"] == 2
    assert m["best"]["config"] in m["configs"] and 0.0 <= m["best"]["top1"] <= 1.0
    assert (tmp_path / "out" / "report.md").exists() and (tmp_path / "out" / "top1_map.png").exists()


@pytest.mark.data
@needs_data
def test_smoke_sgd_dev_limit_20(tmp_path):
    m = _run(tmp_path, "--dataset", "sgd", "--split", "dev", "--limit", "20", "--loop", "teacher",
             "--configs", "bm25/flat/text/SelfGen/on,bm25/flat/text/Last1/off")
    base, det = m["configs"]["bm25/flat/text/Last1/off"], m["configs"]["bm25/flat/text/SelfGen/on"]
    assert m["dialogues"] == 20 and base["searches_per_turn"] == 1.0
    assert det["searches_per_turn"] < 0.7  # the detector saves searches
    assert det["top1"] > base["top1"]  # and staying beats re-retrieving on every turn


@pytest.mark.data
@needs_data
def test_closed_loop_report_on_sgd_dev_limit_8(tmp_path):
    m = _run(tmp_path, "--dataset", "sgd", "--split", "dev", "--limit", "8")
    assert m["loop"] == "closed" and m["dialogues"] == 8
    for key in ("default", "best", "before", "teacher"):
        r = m[key]
        assert 0.0 <= r["top1"] <= 1.0 and 0.0 <= r["switch_recall_no_first"] <= 1.0
        shares = r["error_shares"]
        assert set(shares) == {"wrong pick at the change", "stayed on a wrong pick", "missed change",
                               "needless search", "out of scope"}
        assert r["errors"] == 0 or abs(sum(shares.values()) - 1.0) < 1e-9
    assert m["summary"]["top1"] == m["default"]["top1"] and "top1" in m["always_stay"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "always STAY" in report and "teacher-forced" in report and (tmp_path / "out" / "errors.png").exists()
