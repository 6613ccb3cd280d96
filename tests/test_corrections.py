"""What users say to change, refer back and step aside (session 24's outside probe): corrections of every kind of
value, references to values said before a lookup or in an earlier task, and the words around numbers, times and
references — on the bundled desk's workflows, read by the slot reader and the commands the graph applies."""

from __future__ import annotations

import datetime as dt

import pytest

from dialogue.commands import StartFlow, apply_all
from dialogue.execution.interpreter import Interpreter
from dialogue.frames import new_frame
from dialogue.turn import make_env
from dialogue.understanding.features import announced_aside, slot_update
from dialogue.understanding.slots import (_item_hits, find_ints, find_time, fill_slots, in_declared_form, match_enum,
                                          nearer_half_day, resembling, slot_commands, value_labels)
from workflows.library import bundled_library_path, load_library
from workflows.text import says_more

LIB = load_library(bundled_library_path())
FRIDAY = dt.date(2026, 11, 20)


def wf(name: str):
    return LIB.workflows[name]


def test_one_in_a_phrase_of_speech_is_no_count():
    assert find_ints("one more thing actually, where is ORD-7003?") == []
    assert find_ints("one of them") == [] and find_ints("one sec") == []
    assert [v for v, *_ in find_ints("just one night")] == [1]


@pytest.mark.parametrize("msg", ["3 nights, 2 adults", "3 nights 2 adults", "2 adults, 3 nights",
                                 "three nights for 2 guests"])
def test_a_unit_after_a_number_stays_its_own(msg):
    assert fill_slots(msg, wf("search_hotels"), pending=["nights", "guests"]).values == {"nights": 3, "guests": 2}


def test_a_dotted_clock_time_is_a_time_and_an_amount_is_not():
    assert find_time("saturday lunch, 12.30, we're 2")[0] == "12:30"
    assert find_time("transfer 12.30 euros") is None and find_time("€12.30") is None
    assert find_time("on 12.10.2026") is None


def test_a_new_time_without_am_pm_is_read_near_the_one_it_replaces():
    assert nearer_half_day("08:30", "20:00", "make it 8:30 instead") == "20:30"
    assert nearer_half_day("08:30", "20:00", "make it 8:30 in the morning") == "08:30"
    assert nearer_half_day("11:00", "10:00", "11 then") == "11:00"
    frame = {"slots": {"restaurant": "Le Petit Quai", "time": "20:00", "date": "2026-12-02", "party_size": 2}}
    cmds, _ = slot_commands("make it 8:30 instead", wf("book_table"), frame, [], 3)
    assert [(c.command, c.slot, c.value) for c in cmds] == [("correct_slot", "time", "20:30")]


def test_a_weekday_is_a_date_where_the_slot_declares_the_iso_form():
    book = wf("book_table")
    assert in_declared_form(book.slot("date"), "Saturday", FRIDAY) == "2026-11-21"
    assert in_declared_form(book.slot("date"), "Friday", FRIDAY) == "2026-11-20"  # today included, as the tools
    assert fill_slots("saturday at 12.30 for 2", book, today=FRIDAY).values["date"] == "2026-11-21"


def test_a_reference_typed_without_its_dash_and_one_of_another_kind():
    cancel, transfer = wf("cancel_booking"), wf("transfer_money")
    assert fill_slots("pls cancel booking b1003", cancel).values == {"booking_id": "B-1003"}
    assert fill_slots("plan b 2", cancel).values == {}
    # an order's reference is no customer number, whatever was asked
    assert "customer_id" not in fill_slots("where is ORD-7003?", transfer, pending=["customer_id"]).values


def test_references_say_what_they_are_to_the_search():
    assert value_labels("where is ORD-7003? tomas.l@example.com", LIB.workflows.values()) == ["Order number"]
    assert value_labels("cancel B-1008 please", LIB.workflows.values()) == ["Booking reference"]
    assert value_labels("nothing to see here", LIB.workflows.values()) == []
    # a reference the task under way takes too says nothing against it
    assert value_labels("C-1005 pin 3141", LIB.workflows.values()) == ["Customer number"]
    assert value_labels("C-1005 pin 3141", LIB.workflows.values(), wf("block_card")) == []


def test_an_option_said_not_to_be_meant_is_not_read():
    transfer = wf("transfer_money")
    assert fill_slots("no wait, savings not checking, I want it to go into checking", transfer).values == \
        {"from_account": "savings"}
    assert fill_slots("it is faulty, not wrong item", wf("return_item")).values == {"reason": "faulty"}


def test_of_two_values_in_a_message_that_corrects_itself_the_later():
    found = fill_slots("savings to checking, 1.2k, pin 7777... no sorry my pin is 5602, customer c-1007",
                       wf("transfer_money")).values
    assert found["pin"] == 5602 and found["customer_id"] == "C-1007" and found["amount"] == 1200


@pytest.mark.parametrize("msg,option", [("the yoga mat was damaged when it arrived", "damaged_on_arrival"),
                                        ("you charged me twice", "charged_twice")])
def test_a_several_word_option_said_in_other_forms(msg, option):
    assert match_enum(msg, wf("refund_order").slot("reason").enum)[0] == option


def test_a_free_text_value_said_again_with_a_change():
    old = "12 Rose Lane, Northwind NW3 2AB"
    assert resembling("oh no sorry, I got the house number wrong, it's 21 Rose Lane, Northwind NW3 2AB", old) == \
        "21 Rose Lane, Northwind NW3 2AB"
    assert resembling("sorry I meant Le Petit Quai", "Casa Fiorella") is None
    assert resembling("thanks, 12 Rose Lane, Northwind NW3 2AB it is", old) is None  # the same: no change


def test_another_item_of_the_list_as_a_correction():
    frame = {"slots": {"order_id": "ORD-7011", "email": "nadia.okafor@example.com", "item": "Ceramic vase"},
             "results": {"items": "Ceramic vase (€58.00); Table runner (€24.50)"}}
    cmds, _ = slot_commands("oh wait no, not the vase, I meant the table runner", wf("return_item"), frame,
                            ["reason"], 3)
    assert [(c.command, c.slot, c.value) for c in cmds] == [("correct_slot", "item", "Table runner")]


def test_an_item_named_by_its_head_noun():
    n, k = _item_hits("Trail running shoes, size 39", {"the", "shoes", "from"})
    assert k >= n / 2
    assert _item_hits("Trail running shoes, size 39", {"trail"})[1] == 1  # a modifier alone: one of three


def test_a_new_name_at_a_correction_for_the_one_person_slot_it_names():
    frame = {"slots": {"restaurant": "Le Petit Quai", "party_size": 4, "date": "2026-12-02", "time": "20:00",
                       "guest_name": "Sam Porter"}}
    cmds, _ = slot_commands("oh wait, put it under my wife's name instead, Julia Porter", wf("book_table"), frame,
                            [], 3)
    assert [(c.command, c.slot, c.value) for c in cmds] == [("correct_slot", "guest_name", "Julia Porter")]
    cmds, _ = slot_commands("oh wait, make it Le Petit Quai instead", wf("book_table"), frame, [], 3)
    assert not any(c.slot == "guest_name" for c in cmds)


@pytest.mark.parametrize("answer,more", [("hmm no, leave it", False), ("actually no, I'll keep it", False),
                                         ("nah leave it as it is", False), ("no, keep it at 4 people", True),
                                         ("no, forget it, cancel the whole thing", True)])
def test_leaving_things_as_they_are_is_only_a_no(answer, more):
    assert says_more(answer) is more


def test_a_time_is_no_new_value_of_a_task_that_takes_none():
    assert not slot_update("actually could you just push it to 9.30pm the same day instead?", wf("cancel_booking"))
    assert slot_update("actually make it 9.30pm instead", wf("book_table"))


def test_an_announced_aside_is_a_question_said_to_be_one():
    assert announced_aside("oh and before that, where is my other order ORD-7002?")
    assert announced_aside("by the way, do you have wifi there?")
    assert not announced_aside("by the way it's under Chloe Martin")
    assert not announced_aside("where is my order?")


def _env(turn=2):
    return make_env(turn, LIB.workflows, {n: Interpreter(w) for n, w in LIB.workflows.items()})


def test_a_new_task_starts_with_who_the_user_is_and_what_they_refer_to():
    earlier = {**new_frame("cancel_booking", 1, {"booking_id": "B-1008"}), "status": "done"}
    stack = apply_all([earlier], [StartFlow(workflow="change_booking", query="push it to 9.30pm instead", turn=2)],
                      _env())
    assert stack[-1]["workflow"] == "change_booking" and stack[-1]["slots"] == {"booking_id": "B-1008"}
    bank = {**new_frame("block_card", 1, {"customer_id": "C-1005", "pin": 3141, "reason": "lost"}), "status": "done"}
    stack = apply_all([bank], [StartFlow(workflow="check_balance", query="and my balance?", turn=2)], _env())
    assert stack[-1]["slots"] == {"customer_id": "C-1005"}  # a PIN and a preference are the task's own


def test_a_request_about_another_one_carries_nothing():
    earlier = {**new_frame("cancel_order", 1, {"order_id": "ORD-7001", "email": "a@example.com"}), "status": "done"}
    stack = apply_all([earlier], [StartFlow(workflow="track_order", query="where is my other order?", turn=2)],
                      _env())
    assert stack[-1]["slots"] == {}


def test_a_bare_number_near_the_booked_time_is_its_hour_and_a_party_is_a_count():
    frame = {"slots": {"restaurant": "Harbour Catch", "party_size": 2, "date": "2026-12-03", "time": "20:00"}}
    cmds, _ = slot_commands("no - can we do 9 instead?", wf("book_table"), frame, ["party_size", "time"], 3)
    assert [(c.slot, c.value) for c in cmds] == [("time", "21:00")]
    frame = {"slots": {"restaurant": "Sakura Lane", "party_size": 2, "date": "2026-12-11", "time": "19:00"}}
    cmds, _ = slot_commands("oh actually we're 4 now", wf("book_table"), frame, ["guest_name"], 3)
    assert [(c.slot, c.value) for c in cmds] == [("party_size", 4)]


def test_a_quick_one_is_no_count():
    assert find_ints("sorry, quick one first - where's my order ORD-7012?") == []


def test_one_word_of_a_free_text_value_changed():
    from dialogue.understanding.slots import changed_part

    assert changed_part("oh no, I typed the postcode wrong, it's NW9 1AB", "7 Elm Street, Northwind NW9 1AA") == \
        "7 Elm Street, Northwind NW9 1AB"
    assert changed_part("sorry I meant the 14th", "window seat by the door") is None
    frame = {"slots": {"customer_id": "C-1001", "pin": 4821, "new_address": "7 Elm Street, Northwind NW9 1AA"}}
    cmds, _ = slot_commands("oh no, I typed the postcode wrong, it's NW9 1AB", wf("update_address"), frame, [], 3)
    assert [(c.slot, c.value) for c in cmds] == [("new_address", "7 Elm Street, Northwind NW9 1AB")]


def test_a_free_text_value_ends_with_its_sentence():
    found = fill_slots("I've moved, new address is 7 Elm Street, Northwind NW9 1AA. C-1001, PIN 4821",
                       wf("update_address")).values
    assert found["new_address"] == "7 Elm Street, Northwind NW9 1AA"


def test_a_number_after_a_call_that_said_no_is_its_amount():
    frame = {"slots": {"customer_id": "C-1007", "pin": 5602, "from_account": "checking", "amount": 500},
             "results": {"has_funds": False, "available_balance": 442.08},
             "calls": [{"api": "verify_identity", "args": {}, "status": "ok"},
                       {"api": "check_funds", "args": {"auth_token": "t", "from_account": "checking", "amount": 500},
                        "status": "ok"}]}
    cmds, _ = slot_commands("ugh fine, 400 then", wf("transfer_money"), frame, [], 3)
    assert [(c.command, c.slot, c.value) for c in cmds] == [("correct_slot", "amount", 400)]


def test_a_number_corrected_inside_the_message_after_a_cue():
    found = fill_slots("C-1001, PIN 4821, card ending 4417 - no sorry, 9032, that's the credit one",
                       wf("block_card")).values
    assert found["card_last4"] == 9032 and found["pin"] == 4821


def test_several_listed_items_named_together_for_a_slot_of_several():
    from dialogue.understanding.slots import referred_values

    listing = ("TX-5001 2026-11-14 Northwind Grocers €54.20; TX-5003 2026-11-18 QuickPay*GAMESTORE 88 €249.99; "
               "TX-5004 2026-11-18 QuickPay*GAMESTORE 88 €249.99")
    got = referred_values("the two gamestore ones", wf("report_fraud"), {"transactions": listing}, ["transaction_ids"])
    assert got == {"transaction_ids": "TX-5003, TX-5004"}


def test_the_action_of_a_request_is_its_imperative_clause():
    from dialogue.understanding.query import self_generated_query

    query = self_generated_query("argh, plans changed, cancel that please", "", [], {})
    assert query.endswith("the action you need to take to solve the task: cancel that please")


def test_a_new_task_takes_a_reference_an_earlier_one_returned():
    booked = {**new_frame("book_table", 1, {"restaurant": "Kiko Ramen Bar"}), "results": {"booking_id": "B-1011"},
              "status": "done"}
    stack = apply_all([booked], [StartFlow(workflow="cancel_booking", query="cancel that please", turn=2)], _env())
    assert stack[-1]["slots"] == {"booking_id": "B-1011"}


def test_someone_to_talk_to_is_a_hand_over():
    from dialogue.understanding.navigation import HUMAN

    assert HUMAN.search("this is ridiculous, just put me through to a real person")
    assert HUMAN.search("can you pass me on to a manager")


def test_a_correction_that_only_restates_what_the_task_used():
    from dialogue.understanding.slots import restated

    used = {"booking_id": "B-1008", "new_date": "2026-12-27", "new_time": "19:30"}
    assert restated("Wait, I meant B-1008 for the booking reference.", wf("change_booking"), used)
    assert not restated("Wait, I meant B-1009 for the booking reference.", wf("change_booking"), used)
    assert not restated("B-1008", wf("change_booking"), used)  # no correction in it
