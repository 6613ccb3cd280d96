"""Unit tests of the two small nodes the graph adds: ``resume`` (stack) and ``clarify`` (choice)."""

from __future__ import annotations

from nodes.clarify import choose
from dialogue.understanding.navigation import BACK
from dialogue.understanding.navigation import pick_resume as pick

DESCRIBE = {"book_table": "Book a table Reserve a new table at a named restaurant",
            "track_order": "Track an order Tell the customer where their order is",
            "book_hotel": "Book a hotel room Reserve a room at one of our hotels"}


def test_back_requests_are_recognised():
    for text in ("Now back to my table booking", "can we go back to the hotel", "let's resume", "carry on"):
        assert BACK.search(text), text
    for text in ("I want to pick up my parcel", "book a table", "yes"):
        assert not BACK.search(text), text


def test_pick_by_overlap_recency_and_refusal():
    stack = ["book_hotel", "book_table"]
    assert pick("back to my table booking", stack, DESCRIBE) == "book_table"
    assert pick("back to the hotel room please", stack, DESCRIBE) == "book_hotel"
    assert pick("let's go back", stack, DESCRIBE) == "book_table"  # bare: the most recent
    assert pick("back to my parcel refund", stack, DESCRIBE) is None  # names nothing stacked


def test_choose_by_number_ordinal_name_and_words():
    options = ["book_table", "track_order", "book_hotel"]
    assert choose("2", options, DESCRIBE) == "track_order"
    assert choose("the first one", options, DESCRIBE) == "book_table"
    assert choose("book_hotel", options, DESCRIBE) == "book_hotel"
    assert choose("where is my order", options, DESCRIBE) == "track_order"
    assert choose("", options, DESCRIBE) is None
    assert choose("7", options, DESCRIBE) is None  # out of range, and no words match
