"""The learned free-text span reader (``dialogue/understanding/spans.py``) and its place in ``fill_slots``:
values said unasked in the user's own words go to the empty free-text slots; the asked slot, the values
the rules read and the values the conversation has are left alone."""

from __future__ import annotations

import datetime as dt

import pytest

from dialogue.understanding.slots import fill_slots
from dialogue.understanding.model_files import ModelFileError
from dialogue.understanding.spans import SpanModel, Target, candidate_spans, load_spans, slot_words
from workflows.pdl import Slot, Workflow

TODAY = dt.date(2026, 11, 21)


def _said(text: str) -> list[str]:
    return [text[s.start:s.end] for s in candidate_spans(text)]


def test_candidate_spans_keep_whole_values_within_a_clause():
    spans = _said("I am flying to Phoenix, AZ. I want 1 ticket from Seattle, WA.")
    assert {"Phoenix, AZ", "Seattle, WA", "Phoenix", "1 ticket"} <= set(spans)
    assert not any(s.startswith(("AZ", "WA")) and len(s) > 2 for s in spans)  # no span over a sentence end
    assert "the Alembic" in _said("It's called the Alembic.")  # a title may start with "the"
    assert not any(s.lower().startswith(("it's", "called the")) and s != "called the Alembic"
                   for s in _said("It's called the Alembic."))
    assert "Dr. Alexis" in _said("I'd like to see Dr. Alexis on Monday")  # an abbreviation's dot is no sentence end
    assert "Mark" in _said("Yes, my name is Mark.")  # a name ending a sentence keeps no dot


def _targets(*slots: tuple[str, str]) -> list[Target]:
    return [Target(name, slot_words(name, desc), "string", False) for name, desc in slots]


@pytest.mark.parametrize("text,slots,expected", [
    ("I'd like to eat somewhere in San Francisco",
     [("restaurant_name", "Name of the restaurant"), ("city", "City where the restaurant is located")],
     {"city": "San Francisco"}),
    ("A one-way ticket to Lisbon, leaving from Madrid",
     [("origin_city", "City the flight leaves from"), ("destination_city", "City the flight goes to")],
     {"destination_city": "Lisbon", "origin_city": "Madrid"}),
    ("Book me a table at Luigi's Trattoria in Boston",
     [("restaurant_name", "Name of the restaurant"), ("city", "City where the restaurant is located")],
     {"restaurant_name": "Luigi's Trattoria", "city": "Boston"}),
    ("I'd like to book a table for 4 at 7pm",
     [("restaurant_name", "Name of the restaurant"), ("city", "City where the restaurant is located")], {}),
    ("what is my balance?", [("reason", "Why the customer writes"), ("city", "The customer's city")], {}),
])
def test_the_bundled_reader_places_values_of_slots_it_never_saw(text, slots, expected):
    model = load_spans()
    assert model is not None, "the bundled spans_model.json is missing (flowdesk train spans)"
    got = {name: placed.value for name, placed in model.read(text, _targets(*slots)).items()}
    assert got == expected


def test_a_span_goes_to_one_slot_and_never_over_taken_characters():
    model = load_spans()
    text = "A one-way ticket to Lisbon, leaving from Madrid"
    targets = _targets(("origin_city", "City the flight leaves from"), ("destination_city", "City the flight goes to"))
    got = model.read(text, targets, taken=[(text.index("Madrid"), len(text))])
    assert "origin_city" not in got and got["destination_city"].value == "Lisbon"
    placed = model.read(text, targets)
    assert len({p.span for p in placed.values()}) == len(placed)
    assert all(text[a:b] == p.value for p in placed.values() for a, b in [p.span])


RIDE = Workflow(
    name="book_ride", description="Book a ride", domain="travel", role="rides", slots=[
        Slot(name="departure_location", type="string", description="Where the ride departs from"),
        Slot(name="arrival_location", type="string", description="Where the ride arrives"),
        Slot(name="customer_name", type="string", description="Name of the customer"),
        Slot(name="driver_name", type="enum", description="Driver name", enum=["Mark", "Ella", "Dave"]),
    ], apis=[], answers=[], procedure="")


def _fill(text: str, pending=(), missing=None):
    missing = [s.name for s in RIDE.slots] if missing is None else missing
    return fill_slots(text, RIDE, pending=list(pending), today=TODAY, missing=missing).values


def test_fill_slots_reads_unasked_free_text_values():
    assert _fill("I want to go from Forbes and Murray to the Airport.") == \
        {"departure_location": "Forbes and Murray", "arrival_location": "Airport"}


def test_fill_slots_leaves_values_the_conversation_has_and_the_asked_slot_to_the_rules():
    # the departure is known: the reader does not replace it (``missing`` says which slots are empty)
    got = _fill("I want to go from Forbes and Murray to the Airport.", missing=["arrival_location", "customer_name"])
    assert got == {"arrival_location": "Airport"}
    # the asked slot takes the reply by the reply rules, not by the reader
    assert _fill("Forbes and Murray", pending=["departure_location"]) == {"departure_location": "Forbes and Murray"}
    # without ``missing`` (a caller that does not know the frame) the reader is not asked
    assert "departure_location" not in fill_slots("I want to go from Forbes and Murray to the Airport.", RIDE,
                                                  today=TODAY).values


def test_a_bare_reply_answers_the_asked_question_not_an_enum_option():
    """"Mark" to "What is your name?" names the customer, though a driver option is spelled "Mark"."""
    assert _fill("Mark", pending=["customer_name"]) == {"customer_name": "Mark"}
    assert _fill("Mark", pending=[])["driver_name"] == "Mark"  # unasked, the option is what it names
    assert _fill("I'd like Mark as my driver", pending=["customer_name"]).get("driver_name") == "Mark"


def test_a_malformed_model_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "spans_model.json"
    bad.write_text('{"buckets": {"12": "heavy"}, "intercept": 0.0, "threshold": 0.5}', encoding="utf-8")
    with pytest.raises(ModelFileError, match=r"spans_model\.json.*buckets"):
        load_spans(str(bad))
    assert load_spans(str(tmp_path / "absent.json")) is None
    assert isinstance(load_spans(), SpanModel)
