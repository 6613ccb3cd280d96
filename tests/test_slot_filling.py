"""Slot filling from user messages (hand-written slots; no dataset)."""

from __future__ import annotations

import datetime as dt

import pytest

from nodes.slot_filling import fill_slots, find_date, find_time, match_enum, slot_kind, yes_no
from workflows.pdl import Slot, Workflow

TODAY = dt.date(2026, 11, 21)  # a Saturday
WF = Workflow.model_validate({
    "name": "book_table", "description": "Reserve a table.", "domain": "dining", "role": "host",
    "slots": [
        {"name": "restaurant", "description": "Restaurant name"},
        {"name": "party_size", "type": "integer", "description": "Number of guests"},
        {"name": "time", "description": "Date and time, e.g. \"Friday 19:30\""},
        {"name": "guest_name", "description": "Name for the booking"},
        {"name": "cuisine", "type": "enum", "enum": ["Italian", "Chinese", "Mexican"]},
        {"name": "email", "description": "Email address"},
        {"name": "order_id", "description": "Order id"},
        {"name": "vip", "type": "boolean", "description": "Member of the club"},
    ],
})


def fill(msg, pending=(), items=None):
    return fill_slots(msg, WF, pending=list(pending), last_items=items, today=TODAY)


def test_several_slots_in_one_message():
    f = fill("a table for 4 at Luigi's on Friday at 7")
    assert f.values == {"party_size": 4, "restaurant": "Luigi's", "time": "Friday 19:00"}


@pytest.mark.parametrize("msg,value", [("two", 2), ("a party of 4", 4), ("we are six people", 6), ("12", 12)])
def test_integers_for_the_pending_slot(msg, value):
    assert fill(msg, ["party_size"]).values["party_size"] == value


def test_free_string_for_the_pending_slot_drops_filler():
    assert fill("My name is Mark Jones", ["guest_name"]).values == {"guest_name": "Mark Jones"}
    assert fill("it's under Alice.", ["guest_name"]).values == {"guest_name": "Alice"}


def test_question_is_not_taken_as_a_value():
    f = fill("what's the weather like tomorrow?", ["guest_name"])
    assert "guest_name" not in f.values and f.is_question


def test_enum_fuzzy():
    assert fill("italien food please", ["cuisine"]).values["cuisine"] == "Italian"
    assert fill("something mexican", []).values["cuisine"] == "Mexican"
    assert match_enum("a pizza place", ["Italian", "Chinese"]) is None


def test_enum_matches_normalised_times():
    assert match_enum("around 7pm", ["6 pm", "7 pm", "8 pm"])[0] == "7 pm"


def test_entities():
    f = fill("mail me at a.b@example.com about order A1234")
    assert f.values["email"] == "a.b@example.com" and f.values["order_id"] == "A1234"


def test_boolean_pending():
    assert fill("yes please", ["vip"]).values["vip"] is True
    assert fill("no, I'm not", ["vip"]).values["vip"] is False
    assert yes_no("Sure, go ahead") is True and yes_no("The blue one") is None


def test_ordinal_reference_to_last_results():
    items = [{"name": "Luigi's"}, {"name": "Roma"}, {"name": "Napoli"}]
    assert fill("the second one", ["restaurant"], items).values["restaurant"] == "Roma"
    assert fill("the last one please", ["restaurant"], items).values["restaurant"] == "Napoli"


@pytest.mark.parametrize("text,value", [("7pm", "19:00"), ("19:30", "19:30"), ("at 8:15 am", "08:15"),
                                        ("noon", "12:00")])
def test_times(text, value):
    assert find_time(text)[0] == value


@pytest.mark.parametrize("text,value", [("tomorrow", "2026-11-22"), ("June 3", "2027-06-03"),
                                        ("2026-12-01", "2026-12-01"), ("on friday", "Friday"),
                                        ("the 5th of December", "2026-12-05")])
def test_dates(text, value):
    assert find_date(text, TODAY)[0] == value


def test_datetime_slot_combines_date_and_time():
    assert fill("tomorrow 19:30", ["time"]).values["time"] == "2026-11-22 19:30"


def test_slot_kind_from_description():
    assert slot_kind(Slot(name="when", description="Date and time")) == "datetime"
    assert slot_kind(Slot(name="size", description="Number of guests")) == "integer"
    assert slot_kind(Slot(name="contact", description="Email address")) == "email"
    assert slot_kind(Slot(name="who", description="Full name")) == "person"
    assert slot_kind(Slot(name="note", description="Anything to add")) == "string"
