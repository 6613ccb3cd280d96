"""Slot filling from user messages (hand-written slots; no dataset)."""

from __future__ import annotations

import datetime as dt

import pytest

from dialogue.understanding.slots import fill_slots, find_date, find_time, match_enum, slot_kind
from workflows.text import yes_no
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
    assert yes_no("go on") is yes_no("Continue, please") is yes_no("proceed") is True


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


def test_free_text_date_keeps_the_form_its_example_is_written_in():
    """A string slot whose example writes dates in words takes them as said; typed or ISO-example slots and
    relative dates get the normal form."""
    wf = WF.model_copy(update={"slots": [
        Slot(name="meeting_time", description='Meeting start time, year + month + day, default "February 8, 2046"')]})
    iso = WF.model_copy(update={"slots": [Slot(name="day", description='Day, e.g. "2046-02-08"')]})
    said = fill_slots("It was November 8, 2044.", wf, pending=["meeting_time"], today=TODAY).values
    assert said == {"meeting_time": "November 8, 2044"}
    assert fill_slots("November 8, 2044", iso, pending=["day"], today=TODAY).values == {"day": "2044-11-08"}
    assert fill_slots("tomorrow", wf, pending=["meeting_time"], today=TODAY).values == {"meeting_time": "2026-11-22"}
    at = fill_slots("at 12:30 on February 21, 2050", wf, pending=["meeting_time"], today=TODAY).values
    assert at == {"meeting_time": "12:30 on February 21, 2050"}


def test_values_asked_together_are_taken_in_the_questions_order_when_unlabelled():
    wf = WF.model_copy(update={"slots": [Slot(name="meeting_own", description="Conference initiator"),
                                         Slot(name="own_value", description="User DingTalk name")]})
    both = ["meeting_own", "own_value"]
    assert fill_slots("that would be ajb, that would be wabg.", wf, pending=both, today=TODAY).values == \
        {"meeting_own": "ajb", "own_value": "wabg"}
    # as many parts as questions only: otherwise no part is given to the second question
    assert "own_value" not in fill_slots("ajb, wabg, and xyz", wf, pending=both, today=TODAY).values


def test_slot_kind_from_description():
    assert slot_kind(Slot(name="when", description="Date and time")) == "datetime"
    assert slot_kind(Slot(name="size", description="Number of guests")) == "integer"
    assert slot_kind(Slot(name="contact", description="Email address")) == "email"
    assert slot_kind(Slot(name="who", description="Full name")) == "person"
    assert slot_kind(Slot(name="note", description="Anything to add")) == "string"


# --- H10: information given early, corrections, numbers named by their cue words -----------------
CARD = Workflow.model_validate({
    "name": "block_card", "description": "Block a card.", "domain": "banking", "role": "cards",
    "slots": [
        {"name": "customer_id", "description": "Customer number, e.g. C-1001"},
        {"name": "pin", "type": "integer", "description": "4-digit PIN for telephone banking"},
        {"name": "card_last4", "type": "integer", "description": "Last 4 digits of the card"},
        {"name": "reason", "type": "enum", "enum": ["lost", "stolen", "compromised"]},
    ],
})
ORDER = Workflow.model_validate({
    "name": "cancel_order", "description": "Cancel an order.", "domain": "retail", "role": "orders",
    "slots": [
        {"name": "order_id", "description": "Order number, e.g. ORD-7001"},
        {"name": "email", "description": "Email address used for the order"},
        {"name": "reason", "type": "enum",
         "enum": ["changed_mind", "ordered_by_mistake", "found_cheaper", "delivery_too_slow"]},
    ],
})


def test_full_first_message_fills_every_slot_including_the_name():
    f = fill("Please book a table at Luigi's for 4 people on Friday at 7 under the name Ada Lovelace")
    assert f.values["guest_name"] == "Ada Lovelace" and f.values["party_size"] == 4
    assert fill("Book Luigi's for 2 people at 8pm for Grace Hopper, just book it").values["guest_name"] == "Grace Hopper"


def test_a_name_after_the_bare_word_name_and_a_party_of_one():
    f = fill("book me a table at Luigi's tonight at 8 for 2, name Ben Ortiz")
    assert f.values["guest_name"] == "Ben Ortiz" and f.values["party_size"] == 2
    assert fill("a table at Luigi's for a friend named Ada Lovelace").values["guest_name"] == "Ada Lovelace"
    for msg in ("from friday at 8, just me", "only me this time", "I'll be dining alone at 8"):
        assert fill(msg).values["party_size"] == 1, msg


@pytest.mark.parametrize("msg", ["Sorry, I meant Saturday, same time", "Wait, we'll be 8 people, not 4",
                                 "Oh wait, where is my order ORD-7002? My email is a@b.org"])
def test_pending_name_does_not_take_a_correction_or_a_question(msg):
    assert "guest_name" not in fill(msg, ["guest_name"]).values


def test_pending_name_still_takes_a_bare_name():
    assert fill("Ada Lovelace", ["guest_name"]).values["guest_name"] == "Ada Lovelace"
    assert "order_id" not in fill("The name is Ada Lovelace", ["order_id"]).values  # an id has a digit


def test_numbers_go_to_the_slot_their_words_name():
    f = fill_slots("My card ending in 4417 was stolen. My customer number is C-1001 and my PIN is 4821", CARD)
    assert f.values == {"customer_id": "C-1001", "card_last4": 4417, "pin": 4821, "reason": "stolen"}
    f = fill_slots("PIN 1357, card ends with 0456", CARD)
    assert f.values["pin"] == 1357 and f.values["card_last4"] == "0456"  # the leading zero is kept


def test_order_id_and_email_in_one_short_message():
    assert fill_slots("cancel order A1234 for ann@example.com", ORDER).values == {
        "order_id": "A1234", "email": "ann@example.com"}


@pytest.mark.parametrize("msg,reason", [("I ordered the wrong size", "ordered_by_mistake"),
                                        ("it is a duplicate", "ordered_by_mistake"),
                                        ("it takes too long", "delivery_too_slow"),
                                        ("I found it cheaper elsewhere", "found_cheaper"),
                                        ("I changed my mind", "changed_mind")])
def test_enum_reasons_in_everyday_words(msg, reason):
    assert fill_slots(f"Cancel ORD-7001, a@b.org, the reason: {msg}", ORDER).values["reason"] == reason


# --- values typed and validated by what the PDL says of the slot -------------------------------------
BANK = Workflow.model_validate({
    "name": "report", "description": "Report charges.", "domain": "bank", "role": "cards",
    "slots": [
        {"name": "customer_id", "description": "Customer number, e.g. C-1001"},
        {"name": "pin", "type": "integer", "description": "4-digit PIN for telephone banking"},
        {"name": "card_last4", "type": "integer", "description": "Last 4 digits of the card"},
        {"name": "transaction_ids", "description": "References of the disputed transactions, e.g. TX-5003, TX-5004"},
        {"name": "new_address", "description": "Full new postal address"},
        {"name": "amount", "type": "number", "description": "Amount in euros"},
    ],
    "apis": [{"name": "move", "parameters": {"type": "object", "properties": {
        "amount": {"type": "number", "minimum": 1}, "new_address": {"type": "string", "minLength": 8}}}}],
})


def test_a_value_of_another_slots_shape_is_not_taken():
    f = fill_slots("TX-5003 and TX-5004", BANK, pending=["transaction_ids"])
    assert f.values == {"transaction_ids": "TX-5003, TX-5004"}
    assert fill_slots("C-1001", BANK, pending=["transaction_ids"]).values == {"customer_id": "C-1001"}


def test_digit_counts_from_the_description():
    # "4" of "4-digit" is no PIN, card digits or amount; a PIN has four digits
    f = fill_slots("C-1003; the 4-digit PIN for telephone banking is 2468; the last 4 digits of the card is 7781",
                   BANK, pending=["customer_id", "pin", "card_last4"])
    assert (f.values["customer_id"], f.values["pin"], f.values["card_last4"]) == ("C-1003", 2468, 7781)
    assert "pin" not in fill_slots("50", BANK, pending=["pin"]).values
    assert fill_slots("50", BANK, pending=["pin", "amount"]).values == {"amount": 50}


def test_a_free_value_is_what_the_other_values_leave():
    f = fill_slots("Customer C-1001, PIN 4821, new address 7 Elm Street, Northwind NW9 1AA", BANK,
                   pending=["customer_id", "pin", "new_address"])
    assert f.values == {"customer_id": "C-1001", "pin": 4821, "new_address": "7 Elm Street, Northwind NW9 1AA"}
    f = fill_slots("Full new postal address: 75 Elm Street, Northwind NW2 8BM", BANK, pending=["new_address"])
    assert f.values == {"new_address": "75 Elm Street, Northwind NW2 8BM"}
    assert "new_address" not in fill_slots("Elm", BANK, pending=["new_address"]).values  # minLength 8


def test_a_labelled_name_is_the_name():
    assert fill("The name for the booking is Marek Novak.", pending=["guest_name"]).values == {
        "guest_name": "Marek Novak"}
    assert fill("Name for the booking: Marek Novak", pending=["guest_name"]).values == {"guest_name": "Marek Novak"}


def test_a_year_belongs_to_the_date_and_times_are_no_counts():
    f = fill("December 19, 2026 at 19:30", pending=["party_size"])
    assert f.values == {"time": "2026-12-19 19:30"}


def test_the_replaced_value_of_a_correction_is_no_value():
    assert fill_slots("Correction: ORD-7001, not ORD-7006.", ORDER, pending=["reason"]).values == {
        "order_id": "ORD-7001"}
    f = fill_slots("Correction: found cheaper, not changed mind.", ORDER, pending=["order_id"])
    assert f.values["reason"] == "found_cheaper"
    assert fill("a table for 4, not 5").values["party_size"] == 4


def test_references_of_a_free_text_slot_are_taken_unasked():
    f = fill_slots("Sure, TX-5004 and sure, 4821 and C-1001 and it's 4417", BANK, pending=[])
    assert f.values["transaction_ids"] == "TX-5004" and f.values["customer_id"] == "C-1001"
    f = fill_slots("C-1005 and 3141 and it's 75 Elm Street, Northwind NW2 8BM.", BANK,
                   pending=["customer_id", "pin", "new_address"])
    assert f.values == {"customer_id": "C-1005", "pin": 3141, "new_address": "75 Elm Street, Northwind NW2 8BM"}


def test_a_descriptions_example_outranks_its_own_words():
    # FlowBench's own data: "18 digits" beside a 19-digit example; an "email type" that is no address
    wf = Workflow.model_validate({"name": "mail", "description": "Reply.", "domain": "d", "role": "r", "slots": [
        {"name": "person_id", "description": 'ID number, 18 digits, e.g. "4300001979912125421"'},
        {"name": "post_form", "description": 'Email type, e.g. "Tencent Mail"'}]})
    assert fill_slots("4300001979912125421", wf, pending=["person_id"]).values == {"person_id": "4300001979912125421"}
    assert slot_kind(wf.slot("post_form")) == "string"


RIDE = Workflow.model_validate({
    "name": "order_ride", "description": "Order a ride.", "domain": "travel", "role": "driver",
    "slots": [
        {"name": "pickup_location", "description": "The location from where the user wants to be picked up. The "
                                                   "format is: City + Road name + Road number. For example, "
                                                   "\"No. 23, Xiangshan Road, Beijing\""},
        {"name": "dropoff_location", "description": "The destination where the user wants to be dropped off"},
        {"name": "dining_time", "description": "The time, for example, \"12 o'clock on the 19th\""},
        {"name": "contact_information", "description": "Phone number and email address, for example, "
                                                       "\"13829102291\" or \"contact@qq.com\""},
    ],
})


def test_an_address_is_no_refusal_and_a_place_no_person():
    assert yes_no("No. 23, Xiangshan Road") is None and yes_no("No, thanks") is False
    assert slot_kind(RIDE.slot("pickup_location")) == "string"
    f = fill_slots("That would be No. 23, Xiangshan Road, 4th Floor, Beijing", RIDE, pending=["pickup_location"])
    assert f.values == {"pickup_location": "No. 23, Xiangshan Road, 4th Floor, Beijing"}


def test_values_labelled_with_their_slot_several_in_one_message():
    f = fill_slots("Pickup location: No. 23, Xiangshan Road, Beijing; the dropoff location is No. 88, Lanxi Road, "
                   "also it's 13829102291", RIDE, pending=["pickup_location", "dropoff_location"])
    assert f.values == {"pickup_location": "No. 23, Xiangshan Road, Beijing",
                        "dropoff_location": "No. 88, Lanxi Road", "contact_information": "13829102291"}


MOVE = Workflow.model_validate({
    "name": "move_money", "description": "Move money between two accounts.", "domain": "d", "role": "r",
    "slots": [{"name": "from_account", "type": "enum", "enum": ["checking", "savings"],
               "description": "Account the money leaves"},
              {"name": "amount", "type": "number", "description": "Amount"}]})


@pytest.mark.parametrize("msg,values", [
    ("transfer 250 from my savings into checking", {"from_account": "savings", "amount": 250}),
    ("move 100 from checking to savings", {"from_account": "checking", "amount": 100}),
    # said only as the destination: the source is not that account (it is asked for)
    ("transfer 300 euros to my checking account", {"amount": 300}),
])
def test_a_slot_named_for_a_direction_takes_only_the_value_said_that_way(msg, values):
    assert fill_slots(msg, MOVE).values == values


@pytest.mark.parametrize("msg,value", [("two hundred and fifty euros", 250), ("a hundred euros", 100),
                                       ("twenty-five", 25), ("three thousand five hundred", 3500),
                                       ("one hundred and five", 105)])
def test_amounts_said_in_words_count_whole(msg, value):
    assert fill_slots(msg, MOVE, pending=["amount"]).values["amount"] == value
    # two numbers side by side stay two numbers
    assert fill("two three", ["party_size"]).values["party_size"] == 2


@pytest.mark.parametrize("msg,value", [("half past seven", "19:30"), ("quarter to 8 pm", "19:45"),
                                       ("at half past 9 am", "09:30"), ("a quarter past ten", "10:15")])
def test_times_said_in_words(msg, value):
    assert find_time(msg)[0] == value


def test_a_day_of_the_month_alone_is_the_next_such_day():
    assert find_date("on the 21st please", TODAY)[0] == "2026-11-21"  # TODAY is the 21st
    assert find_date("the 6th", TODAY)[0] == "2026-12-06"
    assert find_date("the 31st", TODAY)[0] == "2026-12-31"  # no 31 November
    assert find_date("the 2nd one", TODAY) is None  # an item of a list, not a date
    # "half past seven" is a time, never a party of 7
    assert fill("half past seven", ["time"]).values == {"time": "19:30"}


STAY = Workflow.model_validate({
    "name": "find_rooms", "description": "Find a room.", "domain": "d", "role": "r",
    "slots": [{"name": "nights", "type": "integer", "description": "Number of nights"},
              {"name": "guests", "type": "integer", "description": "Number of guests in the room"}]})


@pytest.mark.parametrize("msg,values", [("2 adults", {"guests": 2}), ("3 nights for 2 people", {"nights": 3, "guests": 2}),
                                        ("for 2 guests, 3 nights", {"guests": 2, "nights": 3}),
                                        ("which one is cheapest?", {})])
def test_counts_go_to_the_slot_they_count(msg, values):
    assert fill_slots(msg, STAY).values == values


def test_a_single_letter_is_no_free_text_value():
    assert "guest_name" not in fill("y", ["guest_name"]).values
    assert fill("Al", ["guest_name"]).values["guest_name"] == "Al"


def test_a_question_for_information_changes_no_value_given():
    from dialogue.understanding.slots import slot_commands

    frame = {"slots": {"time": "Saturday 20:00"}}
    cmds, _ = slot_commands("what time do you close on Friday?", WF, frame, ["guest_name"], 3)
    assert not [c for c in cmds if c.command == "correct_slot"]
    cmds, _ = slot_commands("how about Friday at 7?", WF, frame, ["guest_name"], 3)
    assert [c.slot for c in cmds if c.command == "correct_slot"] == ["time"]


def test_an_identifier_typed_loosely_is_written_in_its_examples_form():
    wf = Workflow.model_validate({"name": "track", "description": "Track.", "domain": "d", "role": "r", "slots": [
        {"name": "order_id", "description": "Order number, e.g. ORD-7001"}]})
    for said in ("where is ord 7003?", "ord7003 please", "my order is Ord-7003"):
        assert fill_slots(said, wf).values == {"order_id": "ORD-7003"}, said


# --- readings of how people say values (probe round 7) --------------------------------------------
FREEZE = Workflow.model_validate({
    "name": "freeze", "description": "Freeze a card.", "domain": "d", "role": "r",
    "slots": [{"name": "customer_id", "description": "Customer number, e.g. C-1001"},
              {"name": "pin", "type": "integer", "description": "4-digit PIN"},
              {"name": "card_last4", "type": "integer", "description": "Last 4 digits of the card"}]})


@pytest.mark.parametrize("msg,values", [
    ("C-1002 1357 card 1180", {"pin": 1357, "card_last4": 1180}),  # "card" labels the number after it
    ("card 1180 and PIN 1357", {"pin": 1357, "card_last4": 1180}),
    ("PIN 1357 card ending 1180", {"pin": 1357, "card_last4": 1180})])
def test_a_label_between_two_numbers_names_the_one_after_it(msg, values):
    got = fill_slots(msg, FREEZE, pending=["customer_id", "pin", "card_last4"]).values
    assert {k: got.get(k) for k in values} == values


@pytest.mark.parametrize("msg,values", [("for three nights for 2 guests", {"nights": 3, "guests": 2}),
                                        ("two guests for 5 nights", {"guests": 2, "nights": 5})])
def test_a_count_said_in_words_keeps_its_unit(msg, values):
    assert fill_slots(msg, STAY).values == values


@pytest.mark.parametrize("msg,size", [("a table for me and my 3 kids", 4), ("for 2 adults and 2 children", 4),
                                      ("two adults, one child", 3), ("me and my 2 friends", 3),
                                      ("for me, my husband and our three kids", 5), ("a table for me and my wife", 2),
                                      ("my wife and I and our 2 kids", 4)])
def test_a_party_said_by_its_parts_is_their_sum(msg, size):
    assert fill(msg).values["party_size"] == size


STAY_FROM = Workflow.model_validate({
    "name": "stay", "description": "Book a stay.", "domain": "d", "role": "r",
    "slots": [{"name": "check_in", "type": "date", "description": "Arrival date"},
              {"name": "nights", "type": "integer", "description": "Number of nights"}]})
TRIP = Workflow.model_validate({
    "name": "trip", "description": "Book a trip.", "domain": "d", "role": "r",
    "slots": [{"name": "depart", "type": "date", "description": "Departure date"},
              {"name": "back", "type": "date", "description": "Return date"}]})


def test_a_period_said_by_its_ends_is_a_first_day_and_a_length():
    assert fill_slots("from the 10th to the 13th of december", STAY_FROM, today=TODAY).values == \
        {"check_in": "2026-12-10", "nights": 3}
    assert fill_slots("between Dec 30 and Jan 2", STAY_FROM, today=TODAY).values == \
        {"check_in": "2026-12-30", "nights": 3}
    # two date slots: the first day and the last
    assert fill_slots("from 2026-12-01 to 2026-12-05", TRIP, today=TODAY).values == \
        {"depart": "2026-12-01", "back": "2026-12-05"}
    # "from savings to checking" is no period
    assert fill_slots("from savings to checking on the 5th", STAY_FROM, today=TODAY).values == {"check_in": "2026-12-05"}
    # a stay said by its arrival and departure
    assert fill_slots("checking in on 1 December and leaving on the 4th", STAY_FROM, today=TODAY).values == \
        {"check_in": "2026-12-01", "nights": 3}
    assert fill_slots("check in dec 3, check out dec 7", STAY_FROM, today=TODAY).values == \
        {"check_in": "2026-12-03", "nights": 4}


@pytest.mark.parametrize("msg,value", [("at 8", "20:00"), ("at 9", "09:00"), ("7.30pm", "19:30"),
                                       ("seven thirty pm", "19:30"), ("at half seven", "19:30"),
                                       ("seven in the evening", "19:00"), ("9 in the morning", "09:00"),
                                       ("at eight o'clock", "20:00"), ("11 at night", "23:00")])
def test_times_said_other_ways(msg, value):
    assert find_time(msg)[0] == value


def test_a_count_in_words_is_no_time():
    assert find_time("seven people") is None
    assert fill("table for seven at 8pm").values == {"party_size": 7, "time": "20:00"}


def test_a_quantifier_option_yields_to_an_option_said_as_itself():
    assert match_enum("any restaurants by the harbour?", ["any", "harbour", "riverside"])[0] == "harbour"
    assert match_enum("any area is fine", ["any", "harbour", "riverside"])[0] == "any"


def test_a_correction_while_another_value_is_asked_corrects_the_value_given():
    from dialogue.commands import CorrectSlot
    from dialogue.understanding.slots import slot_commands

    frame = {"slots": {"restaurant": "Luigi's", "party_size": 2}}
    cmds, _ = slot_commands("oh actually we're 4 now", WF, frame, ["guest_name"], 3)
    assert [(c.slot, c.value) for c in cmds if isinstance(c, CorrectSlot)] == [("party_size", 4)]
    # without a correction marker an unlabelled number is no answer to the name question
    cmds, _ = slot_commands("we're 4", WF, frame, ["guest_name"], 3)
    assert not [c for c in cmds if c.slot == "party_size"]


@pytest.mark.parametrize("text,value", [("dob 12/04/1988", "1988-04-12"), ("on 3/27/2024", "2024-03-27"),
                                        ("in two days", "2026-11-23"), ("in a week", "2026-11-28")])
def test_dates_said_other_ways(text, value):
    assert find_date(text, TODAY)[0] == value


def test_a_stay_said_in_weeks_is_its_nights():
    assert fill_slots("from december 1 for a week", STAY_FROM, today=TODAY).values == \
        {"check_in": "2026-12-01", "nights": 7}
    assert fill_slots("for two weeks", STAY_FROM, today=TODAY).values == {"nights": 14}


@pytest.mark.parametrize("text,value", [("€75.50", 75.5), ("move 1.5k", 1500), ("$1,200 please", 1200),
                                        ("75,50 euros", 75.5), ("transfer 200", None), ("at 7.30pm", None)])
def test_amounts_written_as_money(text, value):
    from dialogue.understanding.slots import find_amount

    found = find_amount(text)
    assert (found[0] if found else None) == value


def test_an_identifiers_digits_after_the_slots_name_take_its_examples_prefix():
    order = Workflow.model_validate({
        "name": "track", "description": "Track an order.", "domain": "d", "role": "r",
        "slots": [{"name": "order_id", "description": "Order number, e.g. ORD-7001"}]})
    assert fill_slots("where is order 7003?", order).values == {"order_id": "ORD-7003"}
    assert fill_slots("order no. 7003", order).values == {"order_id": "ORD-7003"}
    assert fill_slots("I ordered 3 things", order).values == {}


def test_a_value_the_user_sets_a_slot_to_is_that_slots():
    addr = Workflow.model_validate({
        "name": "move", "description": "Change the address.", "domain": "d", "role": "r",
        "slots": [{"name": "customer_id", "description": "Customer number, e.g. C-1001"},
                  {"name": "pin", "type": "integer", "description": "4-digit PIN"},
                  {"name": "new_address", "description": "Full new postal address"}]})
    assert fill_slots("update my address to 1 New Road, Northwind NW1 1AA, customer C-1001 pin 4821", addr).values \
        == {"customer_id": "C-1001", "pin": 4821, "new_address": "1 New Road, Northwind NW1 1AA"}


def test_text_me_is_a_text_message():
    assert match_enum("just text me", ["email", "sms"])[0] == "sms"


# A booking whose only free-text slot is the customer's name: a name said beside the asked value is kept
BOOK = Workflow.model_validate({
    "name": "table", "description": "Book a table.", "domain": "dining", "role": "host",
    "slots": [{"name": "restaurant", "type": "enum", "enum": ["Cactus Club", "Tamarind", "Lucca", "The Porch"]},
              {"name": "time", "type": "enum", "enum": ["6 pm", "7 pm", "8 pm"]},
              {"name": "party_size", "type": "integer", "description": "Party Size"},
              {"name": "customer_name", "description": "Customer Name"}]})


@pytest.mark.parametrize("msg,asked,value", [
    ("Party Size: 30 and Mark.", "party_size", "Mark"),
    ("30 and Mark", "party_size", "Mark"),
    ("the party size is 30; Mark Jones", "party_size", "Mark Jones"),
    ("Sure, 30, also that would be Mark.", "party_size", "Mark"),
    ("We're six. Ann Lee", "party_size", "Ann Lee"),
    ("Tamarind, and it's Zoë", "restaurant", "Zoë"),
    ("7 pm plus Ada", "time", "Ada"),
])
def test_a_name_volunteered_beside_the_asked_value_is_kept(msg, asked, value):
    from dialogue.understanding.slots import slot_commands

    cmds, _ = slot_commands(msg, BOOK, {"slots": {}}, [asked], 3)
    assert {c.slot: c.value for c in cmds}.get("customer_name") == value
    assert asked in {c.slot for c in cmds}


@pytest.mark.parametrize("msg", ["30 please", "30 and thanks", "30 and Thanks!", "30. Cheers", "30 and make it quick",
                                 "30, to Union Station", "30 on Friday", "30, Mark, Tom", "Sorry, 30 and Mark",
                                 "30 and Mark?", "30. Is there parking?", "30 and Lucca"])
def test_no_name_is_read_from_other_words_beside_the_asked_value(msg):
    from dialogue.understanding.slots import slot_commands

    cmds, _ = slot_commands(msg, BOOK, {"slots": {}}, ["party_size"], 3)
    assert "customer_name" not in {c.slot for c in cmds}


def test_a_volunteered_name_needs_the_asked_value_and_one_free_text_slot_missing():
    from dialogue.understanding.slots import slot_commands

    def named(msg, frame, asked, wf=BOOK):
        return {c.slot: c.value for c in slot_commands(msg, wf, {"slots": frame}, asked, 3)[0]}.get("customer_name")

    assert named("30 and Mark", {"customer_name": "Ann"}, ["party_size"]) is None  # given already: no change
    assert named("Mark", {}, ["party_size"]) is None  # the asked value is not in the message
    # nothing asked: the span reader takes a bare name for the one person slot missing (STAR sessions 0.487 ->
    # 0.497 against leaving it: the simulated user answers questions whose slot the agent's words do not name)
    assert named("Mark", {}, []) == "Mark"
    assert named("Can you book a table for me? Sure, Lucca, also that would be Mark", {}, []) == "Mark"
    assert named("Can you book a table for me? Lucca. Mark", {}, []) is None
    place = Workflow.model_validate({**BOOK.model_dump(), "slots": [
        *BOOK.model_dump()["slots"], {"name": "pickup", "description": "Pickup location"}]})
    assert named("30 and Mark", {}, ["party_size"], place) is None  # "Mark" may be the place
    assert named("30 and Mark", {"pickup": "Union Station"}, ["party_size"], place) == "Mark"


def test_a_bare_number_nobody_asked_for_fills_an_empty_slot_but_replaces_no_value():
    from dialogue.understanding.slots import slot_commands

    quiz = Workflow.model_validate({"name": "quiz", "description": "Play a quiz.", "domain": "d", "role": "r",
                                    "slots": [{"name": "QuestionNum", "type": "integer", "description": "Question Number"}],
                                    "procedure": "ANSWER.ask()\n", "answers": [{"name": "ask", "template": "Ready?"}]})

    def changes(text, slots):
        cmds, _ = slot_commands(text, quiz, {"slots": slots}, [], 1)
        return [(c.command, c.value) for c in cmds]

    assert changes("two in the bush", {}) == [("set_slot", 2)]
    assert changes("two in the bush", {"QuestionNum": 8}) == []  # the answer to question 8, not question 2
    assert changes("question 9 please", {"QuestionNum": 8}) == [("correct_slot", 9)]
    assert changes("actually make it 9", {"QuestionNum": 8}) == [("correct_slot", 9)]
    # after a call with the value failed, a bare number for it is another try ("not available" - "try 700")
    cmds, _ = slot_commands("oh man, try 700", quiz, {"slots": {"QuestionNum": 828}, "results": {"Message": "Unavailable"},
                                                       "calls": [{"api": "q", "args": {"QuestionNum": 828}, "status": "ok"}]}, [], 1)
    assert [(c.command, c.value) for c in cmds] == [("correct_slot", 700)]
