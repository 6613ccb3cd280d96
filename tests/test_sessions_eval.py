"""Session-level evaluation: goals from the PDL and the demo database (gold by playing the procedure with
the real tools), the simulated user (deterministic per seed, reads questions by the slots' words, an
LLM user through a scripted chat model), the metrics, and a small run through the real graph."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evals import sessions as S
from evals.session_goals import generate_goals, match_column, terminal_answers
from evals.simulated_user import CATEGORIES, SimulatedUser
from workflows.demo.db import ensure_db
from workflows.library import bundled_library_path, load_library


@pytest.fixture(scope="module")
def library():
    return load_library(bundled_library_path())


@pytest.fixture(scope="module")
def goals(library, tmp_path_factory):
    db = tmp_path_factory.mktemp("goals") / "demo.sqlite"
    ensure_db(db)
    return generate_goals(library, db, workflows=["track_order", "cancel_booking", "check_balance"])


def test_goals_cover_each_branch_with_coherent_values_and_a_gold(goals, library):
    by_id = {g.id: g for g in goals}
    for wf in ("track_order", "cancel_booking", "check_balance"):
        assert {g.branch for g in goals if g.workflow == wf} == terminal_answers(library.workflows[wf])
    shipped = by_id["track_order:in_transit"]
    assert [n for n, _ in shipped.gold.calls] == ["track_order"] and shipped.gold.diff == {}
    assert any(v.startswith(("NP", "PW")) for v in shipped.gold.info)  # the tracking number must be told
    cancel = by_id["cancel_booking:confirm_cancellation"]
    assert cancel.slots["booking_id"].startswith("B-") and list(cancel.gold.diff) == ["bookings"]
    assert cancel.declined is not None and cancel.declined.diff == {}  # refusing leaves the booking
    balance = by_id["check_balance:tell_balance"]
    assert "auth_tokens" in balance.gold.volatile and "auth_tokens" not in balance.gold.diff


def test_slots_match_columns_by_name():
    tables = {"orders": ["id", "email"], "customers": ["id", "email", "pin"], "cards": ["id", "last4"],
              "order_items": ["id", "order_id", "name"], "card_transactions": ["id", "card_id"]}
    assert match_column("order_id", tables) == ("orders", "id")
    assert match_column("card_last4", tables) == ("cards", "last4")
    assert match_column("transaction_ids", tables) == ("card_transactions", "id")
    assert match_column("item", tables) == ("order_items", "name")
    assert match_column("pin", tables) == ("customers", "pin")


def test_simulated_user_is_deterministic_per_seed_and_answers_what_is_asked(goals):
    goal = next(g for g in goals if g.id == "check_balance:tell_balance")

    def talk(seed):
        u = SimulatedUser(goal, seed)
        return [u.reply(None), u.reply("Could you tell me your customer number and your PIN?")]

    assert talk(3) == talk(3)
    assert len({tuple(talk(s)) for s in range(6)}) > 1  # wording varies with the seed
    u = SimulatedUser(goal, 0)
    u.reply(None)
    said = u.reply("Before I go on, could you confirm your PIN?")
    assert str(goal.slots["pin"]) in said and goal.slots["customer_id"] not in said
    right = u.reply(f"Could you confirm the details: customer id {goal.slots['customer_id']}, pin {goal.slots['pin']}?")
    assert right.lower().startswith(("yes", "sure"))  # the right values restated: a yes, not a repetition
    wrong = u.reply(f"Could you confirm the details: customer id {goal.slots['customer_id']}, pin 1?")
    assert str(goal.slots["pin"]) in wrong
    assert u.reply("Thank you. Your savings balance is 800.0 EUR.") is None  # nothing asked: done


def test_out_of_workflow_moves(goals):
    goal = next(g for g in goals if g.id == "cancel_booking:confirm_cancellation")
    other = next(g for g in goals if g.id == "track_order:in_transit")
    u = SimulatedUser(goal, 1, "intent_switch", second=other)
    u.reply(None)
    texts = [u.reply("What is the reference of the booking you want to cancel?") for _ in range(2)]
    assert u.moves == ["intent_switch"] and u.current is other
    assert any("track" in t.lower() for t in texts if t)
    given = u.reply("What is your order number, and the email address you ordered with?")
    assert other.slots["order_id"] in given and other.slots["email"] in given
    back = u.reply(f"Order {other.slots['order_id']} is on its way with Parcelwise.")
    assert u.current is goal and ("back" in back.lower() or "return" in back.lower())
    refuse = SimulatedUser(goal, 0, "refuse_confirmation")
    assert refuse.confirm("Please confirm before I cancel booking. Shall I go ahead? (yes/no)").lower().startswith("no")
    assert SimulatedUser(goal, 0).confirm("Shall I go ahead?").lower().startswith(("yes", "sure"))
    ref = goal.slots["booking_id"]
    assert SimulatedUser(goal, 0).confirm(f"Please confirm before I cancel (booking id: {ref}).").lower().startswith(
        ("yes", "sure"))
    objection = SimulatedUser(goal, 0).confirm("Please confirm before I cancel (booking id: B-9999).")
    assert objection.lower().startswith("no") and ref in objection  # a user checks the details
    with pytest.raises(ValueError, match="category"):
        SimulatedUser(goal, 0, "teleport")
    assert set(CATEGORIES) >= {"none", "intent_switch", "procedure_jump", "irrelevant", "cancellation",
                               "correction", "refuse_confirmation"}


def test_llm_user_through_a_scripted_chat_model(goals):
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage

    from graph.context import Context
    from graph.models import register_chat_model
    from graph.resources import model_for

    spec = register_chat_model("sim-user", FakeMessagesListChatModel(responses=[
        AIMessage("Hi, where is my parcel?"), AIMessage("ORD-7006, priya.raman@example.com"), AIMessage("###STOP###")]))
    model = model_for(Context(user_simulator_model=spec), "user_simulator")
    goal = next(g for g in goals if g.id == "track_order:in_transit")
    u = SimulatedUser(goal, 0, model=model)
    assert goal.slots["order_id"] in u.instructions() and "track" in u.instructions().lower()
    assert u.reply(None) == "Hi, where is my parcel?"
    assert u.reply("What is your order number and email?") == "ORD-7006, priya.raman@example.com"
    assert u.reply("It is on its way.") is None


def test_metrics():
    gold = [("verify", {"id": 1}), ("book", {"n": 2})]
    assert S.match_calls(gold, [("verify", {"id": 1}), ("verify", {"id": 1}), ("book", {"n": 3})]) == [(0, 0), (1, 2)]
    rs = [{"task": "a", "success": s} for s in (True, True, True, False)] + [{"task": "b", "success": True}] * 4
    assert S.pass_k(rs, 1) == pytest.approx((0.75 + 1) / 2) and S.pass_k(rs, 4) == pytest.approx(0.5)


def test_a_small_run_through_the_real_graph(agent_context, tmp_path):
    metrics = S.run_eval(tmp_path / "out", seeds=2, categories=["none", "cancellation"], workflows=["track_order"],
                         context=agent_context, work_dir=tmp_path / "work")
    summary = json.loads((tmp_path / "out" / "metrics.json").read_text())["summary"]
    assert set(summary) == {"success", "progress", "tool_f1", "param_f1", "f_beta", "mmr", "te_ratio", "pass_k",
                            "sessions"}
    assert summary["sessions"] == 4 * 2 * 2 and set(summary["pass_k"]) == {"1", "2"}
    assert metrics["by_category"]["none"]["success"] >= 0.75  # track_order is a workflow the agent handles
    assert (tmp_path / "out" / "pass_k.png").exists() and "pass^k" in (tmp_path / "out" / "report.md").read_text()


# --- goals of imported flowcharts: branches chosen by the user's answers to natural-language conditions ---
def test_condition_branches_become_goals_the_user_answers(tmp_path):
    from workflows.library import Library
    from workflows.pdl import Workflow

    wf = Workflow.model_validate({
        "name": "pay_fee", "title": "Pay the apartment fee", "description": "Pay a fee.", "domain": "d", "role": "r",
        "slots": [{"name": "phone", "description": 'Mobile phone number, 11 digits, such as "13800000000"'}],
        "apis": [{"name": "lookup", "parameters": {"type": "object", "required": ["phone"],
                                                   "properties": {"phone": {"type": "string"}}},
                  "returns": ["fee_amount"], "binding": {"simulate": True}}],
        "answers": [{"name": "ask_pay_now", "template": "Ask if the user wants to pay now"},
                    {"name": "pay_reminder", "template": "Please pay before the end of the month."},
                    {"name": "later_reminder", "template": "Remember to pay as early as possible."}],
        "procedure": '[fee_amount] = API.lookup(phone)\nANSWER.ask_pay_now()\n'
                     'if COND("Ask if the user wants to pay now -> Pay now"):\n    ANSWER.pay_reminder()\n'
                     'else:\n    ANSWER.later_reminder()\n'})
    lib = Library(root=tmp_path, workflows={"pay_fee": wf})
    db = tmp_path / "db.sqlite"
    ensure_db(db)
    goals = generate_goals(lib, db, free_text=True)
    assert {g.branch for g in goals} == {"pay_reminder", "later_reminder"}
    for g in goals:
        assert g.gold.calls == [("lookup", {"phone": g.slots["phone"]})]
        (text, value), = g.conditions.values()
        assert text == "Ask if the user wants to pay now -> Pay now" and value == (g.branch == "pay_reminder")
        user = SimulatedUser(g, seed=0)
        user.reply(None)
        said = user.reply("Just to check about Ask if the user wants to pay now: is it Pay now? (yes/no)")
        assert said.lower().startswith("yes" if value else "no")
