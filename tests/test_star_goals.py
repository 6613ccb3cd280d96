"""STAR dialogues' goals for simulated sessions (evals/star_goals.py): synthetic STAR folder (fast) and the
real STAR data (data-marked)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from evals.session_goals import Gold
from evals.sessions import score
from evals.star_goals import _api_specs, _with_constraints, dialogue_goals

DATA = Path(os.environ.get("FLOWDESK_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
needs_star = pytest.mark.skipif(not (DATA / "star" / "dialogues.jsonl.gz").exists(),
                                reason=f"STAR not found in {DATA} (set FLOWDESK_DATA)")


def _query(api, cons, item):
    return [{"Agent": "Wizard", "Action": "query", "APIName": api, "Constraints": [{k: v} for k, v in cons.items()]},
            {"Agent": "KnowledgeBase", "Action": "return_item", "Item": {"APIName": api, **item} if item else None}]


def _dialogue(did, tasks, events):
    return {"DialogueID": did, "Scenario": {"WizardCapabilities": [{"Task": t} for t in tasks]}, "Events": events}


@pytest.fixture()
def star(tmp_path):
    root = tmp_path / "star"
    (root / "apis" / "apis").mkdir(parents=True)
    (root / "apis" / "apis" / "table_book.json").write_text(json.dumps({
        "input": [{"Name": "Restaurant Name", "Type": "Categorical", "Categories": ["Lucca", "Tamarind"],
                   "ReadableName": "Restaurant"},
                  {"Name": "PartySize", "Type": "Integer", "Min": 1, "Max": 9, "ReadableName": "Party Size"},
                  {"Name": "RequestType", "Type": "RequestType", "Categories": ["Check", "Book"]}],
        "output": [{"Name": "Status", "Type": "Categorical", "Categories": ["Booked", "Full"]}],
        "required": ["Restaurant Name"], "db": "t"}))
    dialogues = [
        # DialogueID % 5 == 3: dev. The last query's constraints are the goal, RequestType left out.
        _dialogue(3, ["table_book"], _query("table_book", {"Restaurant Name": '"Lucca"', "PartySize": "4",
                                                           "RequestType": '"Check"'}, {"Status": "Full"})
                  + _query("table_book", {"Restaurant Name": '"Tamarind"', "PartySize": "4",
                                          "RequestType": '"Book"'}, {"Status": "Booked"})),
        _dialogue(8, ["table_book"], _query("table_book", {"PartySize": "2"}, {})),  # nothing found: no goal
        _dialogue(13, ["table_book", "weather"], _query("table_book", {"PartySize": "3"}, {"Status": "Booked"})),
        _dialogue(1, ["table_book"], _query("table_book", {"PartySize": "5"}, {"Status": "Booked"})),  # train
    ]
    with gzip.open(root / "dialogues.jsonl.gz", "wt", encoding="utf-8") as fh:
        for d in dialogues:
            fh.write(json.dumps(d) + "\n")
    return root


def test_dialogue_goals_take_the_users_last_constraints_and_the_row(star):
    goals = dialogue_goals(star, "dev", per_task=5)
    assert len(goals) == 1  # the empty result, the multi-task dialogue and the train one give none
    g = goals[0]
    assert g["task"] == "table_book" and g["id"] == "3"
    assert g["slots"] == {"Restaurant_Name": "Tamarind", "PartySize": 4}  # identifiers; RequestType dropped
    assert g["row"] == {"Status": "Booked"}
    assert dialogue_goals(star, "train", per_task=5)[0]["slots"] == {"PartySize": 5}
    assert dialogue_goals(star, "dev", per_task=5, tasks={"weather"}) == []


def test_slot_specs_come_from_the_star_api_not_the_library(star):
    specs = _api_specs(star, "table_book")
    assert specs["Restaurant_Name"] == {"description": "Restaurant", "type": "enum", "enum": ["Lucca", "Tamarind"]}
    assert specs["PartySize"]["type"] == "integer"
    assert _api_specs(star, "missing") == {}


def test_a_library_that_drops_a_constraint_cannot_succeed():
    slots = {"Restaurant_Name": "Tamarind", "PartySize": 4}
    measured = Gold(["table_book"], [("table_book", {"Restaurant_Name": "Tamarind", "RequestType": "Book"})],
                    "inform_booked", [], {})
    gold = _with_constraints(measured, "table_book", slots)
    assert gold.calls == [("table_book", {"Restaurant_Name": "Tamarind", "RequestType": "Book", "PartySize": 4})]
    # without a call of the task's API in the measured gold, the user's query is the gold
    assert _with_constraints(Gold([], [], "", [], {}), "table_book", slots).calls == [("table_book", slots)]
    from evals.star_goals import StarGoal

    goal = StarGoal("table_book", "get help with table book", slots, {}, "inform_booked@3", gold)
    full = [("table_book", {"Restaurant_Name": "Tamarind", "PartySize": 4, "RequestType": "Book"})]
    lossy = [("table_book", {"Restaurant_Name": "Tamarind", "RequestType": "Book"})]
    assert score(goal, "none", None, full, 1, ["inform_booked"], [], {}, set())["success"]
    assert not score(goal, "none", None, lossy, 1, ["inform_booked"], [], {}, set())["success"]


@pytest.mark.data
@needs_star
def test_star_goals_against_the_imported_library(tmp_path):
    from evals.star_goals import import_gold_library, star_goals
    from workflows.demo.db import ensure_db
    from workflows.importers.star_kb import register_data_dir
    from workflows.library import load_library

    register_data_dir(DATA / "star")
    lib = load_library(import_gold_library(DATA, tmp_path / "gold"))
    db = ensure_db(tmp_path / "p.sqlite")
    goals = star_goals(lib, DATA, db, per_task=2, workflows=["weather", "restaurant_book"])
    assert {g.workflow for g in goals} == {"weather", "restaurant_book"} and len(goals) == 4
    for g in goals:
        assert g.dialogue and g.row and int(g.dialogue) % 5 in (3, 4)
        api_calls = [a for n, a in g.gold.calls if n == g.workflow]
        assert api_calls and all(all(a.get(k) == v for k, v in g.slots.items()) for a in api_calls)
        assert set(g.slot_specs) == set(g.slots) and all(s["description"] for s in g.slot_specs.values())
    assert len({g.id for g in goals}) == len(goals)


def test_a_re_asked_question_gets_another_of_the_users_values():
    from evals.simulated_user import SimulatedUser
    from evals.star_goals import StarGoal

    specs = {"Name": {"description": "Restaurant Name", "type": "string", "enum": []},
             "CustomerName": {"description": "Customer Name", "type": "string", "enum": []},
             "PartySize": {"description": "Party Size", "type": "integer", "enum": []}}
    goal = StarGoal("table_book", "get help with table book", {"Name": "Tamarind", "CustomerName": "Mark", "PartySize": 4},
                    specs, "kb_query@3", Gold([], [], "", [], {}))
    user = SimulatedUser(goal, seed=0)
    user.given[goal.id] = {"PartySize"}
    first = user._guess(goal, "May I have your name, please?")
    assert set(first) == {"Name", "CustomerName"}  # not given yet, sharing "name" with the question
    user.given[goal.id] |= set(first)
    user.tried["may i have your name, please?"] = {"Name"}  # only the restaurant was offered so far
    assert user._guess(goal, "May I have your name, please?") == ["CustomerName"]
    assert user._guess(goal, "Anything else?") == []  # a new question with every value given: nothing to add
