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


def test_the_one_waiting_task_is_resumed_in_the_users_own_words():
    """With one task waiting, "back to" names it however the user puts it; "continue with booking" may
    go on with the active one, and a turn the detector reads as a new request may start another task."""
    assert pick("ok back to the dinner - put it under Lucia Romero", ["book_table"], DESCRIBE) == "book_table"
    assert pick("Yes, confirmed, continue with it.", ["track_order"], DESCRIBE) is None
    assert pick("thanks now can we go back and rent that previous car?", ["track_order"], DESCRIBE,
                searching=True) is None
    assert pick("ok back to the dinner", ["book_hotel", "track_order"], DESCRIBE) is None  # several: name it


def test_giving_up_in_other_words_and_what_is_not_giving_up():
    from dialogue.understanding.navigation import CANCEL, _gives_up

    booking = "book_table Book a table"
    for text in ("scratch that", "actually I don't want to transfer anymore", "cancel that please, I changed my mind"):
        assert _gives_up(text, booking), text
    assert not _gives_up("cancel my order ORD-7001", booking)  # may be another task
    assert not _gives_up("can I cancel it?", booking, finished=True)  # what the finished task did
    assert not _gives_up("cancel it, I changed my mind", "cancel_order Cancel an order")  # its request and reason
    for text in ("I'll drop it off on the 7th of March", "continue with the booking", "stop at the bank first"):
        assert not CANCEL.search(text), text


def test_choose_by_number_ordinal_name_and_words():
    options = ["book_table", "track_order", "book_hotel"]
    assert choose("2", options, DESCRIBE) == "track_order"
    assert choose("the first one", options, DESCRIBE) == "book_table"
    assert choose("book_hotel", options, DESCRIBE) == "book_hotel"
    assert choose("where is my order", options, DESCRIBE) == "track_order"
    assert choose("", options, DESCRIBE) is None
    assert choose("7", options, DESCRIBE) is None  # out of range, and no words match
