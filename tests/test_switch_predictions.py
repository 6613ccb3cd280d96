"""``flowdesk eval switch --predictions``: per-turn rows, the relation of a wrong pick to the gold, the
confusion table and the twin ceiling — on hand-built turns over a hand-built library, and a data-marked
run of the closed loop whose rows must agree with its metrics."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

DATA = Path(os.environ.get("FLOWDESK_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def _wf(name, domain, role, description, title=None):
    return SimpleNamespace(name=name, domain=domain, role=role, description=description, title=title)


# Two services of one domain repeating an intent, a second intent of the first, and another domain.
LIB = SimpleNamespace(workflows={w.name: w for w in [
    _wf("Hotels_1__SearchHotel", "Hotels", "Hotels_1", "Find a hotel"),
    _wf("Hotels_1__ReserveHotel", "Hotels", "Hotels_1", "Reserve a hotel"),
    _wf("Hotels_4__SearchHotel", "Hotels", "Hotels_4", "Look for accommodation"),
    _wf("Hotels_4__ShowRooms", "Hotels", "Hotels_4", "List the rooms"),
    _wf("Media_2__FindMovies", "Media", "Media_2", "Find movies to watch"),
    _wf("Movies_2__FindMovies", "Movies", "Movies_2", "Discover movies"),
    _wf("track_order", "shop", "orders", "Track an order", title="Track order"),
]})


def test_relation_of_a_wrong_pick_to_the_gold():
    from evals.switch_predictions import relation

    g = "Hotels_1__SearchHotel"
    assert relation(g, g, LIB) is None
    assert relation(g, "Hotels_1__ReserveHotel", LIB) == "same service, other intent"
    assert relation(g, "Hotels_4__SearchHotel", LIB) == "same domain, other service, same intent"
    assert relation(g, "Hotels_4__ShowRooms", LIB) == "same domain, other service, other intent"
    assert relation("Media_2__FindMovies", "Movies_2__FindMovies", LIB) == "other domain, same intent"
    assert relation(g, "track_order", LIB) == "other domain"
    assert relation(g, None, LIB) == "NONE (out of scope)"
    assert relation(None, g, LIB) == "workflow for an out-of-scope gold"


def test_twins_are_the_same_intent_or_description_in_another_service():
    from evals.switch_predictions import twins

    tw = twins(LIB)
    assert tw["Hotels_1__SearchHotel"] == {"Hotels_4__SearchHotel"}
    assert tw["Movies_2__FindMovies"] == {"Media_2__FindMovies"}
    # the same service's other intent and a lone workflow have no twin
    assert "Hotels_1__ReserveHotel" not in tw and "track_order" not in tw and "Hotels_4__ShowRooms" not in tw


def test_rows_confusions_and_ceiling(tmp_path):
    from evals.switch_loop import LoopTurn
    from evals.switch_predictions import ceiling, confusions, read_rows, rows_of, write_rows

    def t(i, gold, prev, before, active, decision="STAY", cands=(), oos=False):
        return LoopTurn("d1", i, gold, prev, before, active, decision, [], list(cands), oos, False, i == 0, 1.0)

    turns = [t(0, "Hotels_1__SearchHotel", None, None, "Hotels_4__SearchHotel", "SEARCH",
               ["Hotels_4__SearchHotel", "Hotels_1__SearchHotel"]),  # wrong pick at the change: the twin
             t(2, "Hotels_1__SearchHotel", "Hotels_1__SearchHotel", "Hotels_4__SearchHotel",
               "Hotels_4__SearchHotel"),  # stayed on the twin
             t(4, "Hotels_1__ReserveHotel", "Hotels_1__SearchHotel", "Hotels_4__SearchHotel",
               "Hotels_4__SearchHotel"),  # missed change (other service, other intent)
             t(6, "Hotels_1__ReserveHotel", "Hotels_1__ReserveHotel", "Hotels_4__SearchHotel",
               "Hotels_1__ReserveHotel", "SEARCH", ["Hotels_1__ReserveHotel"]),  # right
             t(8, None, "Hotels_1__ReserveHotel", "Hotels_1__ReserveHotel", "Hotels_1__ReserveHotel")]  # oos
    rows = rows_of("default", turns, LIB)
    assert [r.verdict for r in rows] == ["wrong", "wrong", "wrong", "right", "wrong"]
    assert [r.category for r in rows] == ["wrong pick at the change", "stayed on a wrong pick", "missed change",
                                          None, "out of scope"]
    assert rows[0].predicted == "Hotels_4__SearchHotel" and rows[0].candidates[:2] == ["Hotels_4__SearchHotel",
                                                                                         "Hotels_1__SearchHotel"]
    assert rows[2].relation == "same domain, other service, other intent"
    assert rows[4].relation == "workflow for an out-of-scope gold"

    path = tmp_path / "p.jsonl"
    assert write_rows(path, rows) == 5
    back = read_rows(path)
    assert back == rows
    assert set(json.loads(path.read_text().splitlines()[0])) == {
        "run", "dialogue", "turn", "gold", "prev_gold", "before", "predicted", "candidates", "decision", "verdict",
        "category", "relation"}

    table = confusions(back)
    assert table["wrong pick at the change"] == {"same domain, other service, same intent": 1}
    assert table["all"]["same domain, other service, same intent"] == 2 and sum(table["all"].values()) == 4

    ceil = ceiling(back, LIB)
    # the golds of turns 0-3 have twins (SearchHotel in Hotels_4; ReserveHotel has none) -> 2 turns
    assert ceil["gold_has_twin"] == 2 and ceil["twin_confusions"] == 2
    assert ceil["top1"] == pytest.approx(1 / 5) and ceil["top1_twins_right"] == pytest.approx(3 / 5)


@pytest.mark.data
@pytest.mark.skipif(not (DATA / "sgd").is_dir(), reason=f"datasets not found at {DATA} (set FLOWDESK_DATA)")
def test_closed_loop_writes_rows_that_agree_with_its_metrics(tmp_path):
    from typer.testing import CliRunner

    from evals.cli import app
    from evals.switch_predictions import read_rows

    pred = tmp_path / "pred.jsonl"
    res = CliRunner().invoke(app, ["switch", "--dataset", "sgd", "--split", "dev", "--data", str(DATA), "--limit", "6",
                                   "--out", str(tmp_path / "out"), "--predictions", str(pred)],
                             env={"FLOWDESK_EVAL_CACHE": str(tmp_path / "cache")})
    assert res.exit_code == 0, res.output + repr(res.exception)
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    rows = read_rows(pred)
    for run in ("default", "teacher"):
        mine = [r for r in rows if r.run == run]
        assert len(mine) == m[run]["turns"]
        assert sum(r.verdict == "right" for r in mine) / len(mine) == pytest.approx(m[run]["top1"])
        assert sum(r.verdict == "wrong" for r in mine) == m[run]["errors"]
        assert all((r.relation is None) == (r.verdict == "right") for r in mine)
    assert "What the wrong top-1 is" in (tmp_path / "out" / "report.md").read_text()
