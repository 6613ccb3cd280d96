"""Next-action evaluation: metrics on hand-made labels, and a smoke run on STAR (data-marked)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evals.next_action import ZERO_SHOT_TASKS, Turn, _literal, prf, query_label, write_predictions

DATA = Path(os.environ.get("FLOWDESK_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")


def test_prf_matches_hand_computation():
    m = prf(["a", "a", "b", "c"], ["a", "b", "b", "a"])
    assert m["accuracy"] == 0.5
    # a: P 1/2 R 1/2 F .5; b: P 1/2 R 1 F 2/3; c: 0
    assert m["macro_f1"] == pytest.approx((0.5 + 2 / 3 + 0) / 3)
    assert m["weighted_f1"] == pytest.approx((2 * 0.5 + 2 / 3) / 4)


def test_query_labels_and_constraint_literals():
    assert query_label({"RequestType": "Check"}) == "query_check"
    assert query_label({"City": "Chicago"}) == "query"
    assert _literal('"Legume"') == "Legume" and _literal("12") == 12
    assert _literal('api.is_one_of(["Sunny", "Cloudy"])') == "Sunny"
    assert len(ZERO_SHOT_TASKS) == 6


def test_predictions_file_has_one_line_per_turn_with_labels_only(tmp_path):
    turns = [Turn(gold="hello", pred="hello", task="bank", dialogue=7, gold_slots=[], pred_slots=[], cost=0.1,
                  learned="query", learned_slots=["City"], vetoed=1),
             Turn(gold="bye", pred="ask_name", task="ride", dialogue=8, gold_slots=[], pred_slots=[])]
    lines = write_predictions(turns, tmp_path / "p" / "turns.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    assert [r["dialogue"] for r in rows] == [7, 8] and rows[0]["learned_slots"] == ["City"]
    assert rows[1]["pred"] == "ask_name" and "learned" not in rows[1]
    assert "cost" not in rows[0]  # timings differ from run to run: the file compares decisions only


@pytest.mark.data
def test_smoke_run_on_star(tmp_path):
    if not (DATA / "star" / "dialogues.jsonl.gz").exists():
        pytest.skip(f"STAR data not found under {DATA} (set FLOWDESK_DATA)")
    from typer.testing import CliRunner

    from evals.cli import app

    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["next-action", "--dataset", "star", "--data", str(DATA), "--split", "train",
                                      "--limit", "12", "--out", str(out)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["turns"] > 20 and 0 <= metrics["overall"]["offline"]["accuracy"] <= 1
    assert metrics["summary"]["weighted_f1"] == metrics["overall"]["offline"]["weighted_f1"]
    # the oracle over the candidates bounds every policy that picks among them (the rules' proposal is one)
    o = metrics["overall"]
    assert o["oracle"]["accuracy"] >= max(o["offline"]["accuracy"], o["learned"]["accuracy"])
    assert all(n <= of for _, n, of in metrics["missing_from_candidates"])
    assert (out / "report.md").read_text().startswith("# Next-action prediction on STAR")
    assert (out / "per_task_weighted_f1.png").exists()


@pytest.mark.data
def test_a_sample_of_the_split(tmp_path):
    """``--every N`` scores 1 in N dialogues of the split (a development sample), and the report says so."""
    if not (DATA / "star" / "dialogues.jsonl.gz").exists():
        pytest.skip(f"STAR data not found under {DATA} (set FLOWDESK_DATA)")
    from typer.testing import CliRunner

    from evals.cli import app

    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["next-action", "--dataset", "star", "--data", str(DATA), "--split", "train",
                                      "--limit", "3", "--every", "4", "--model", "none", "--out", str(out)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["every"] == 4 and metrics["dialogues"] == 3
    assert "1 in 4 of the split" in (out / "report.md").read_text()
    bad = CliRunner().invoke(app, ["next-action", "--dataset", "star", "--data", str(DATA), "--every", "0"])
    assert bad.exit_code != 0 and "--every" in bad.output
