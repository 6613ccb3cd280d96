"""The offline procedure interpreter on a hand-written workflow (no dataset)."""

from __future__ import annotations

import pytest

from dialogue.execution.interpreter import Interpreter
from dialogue.execution.interpreter import invalidate as _invalidate
from workflows.semantics import UNKNOWN, Scope
from workflows.semantics import condition_key as cond_slot
from workflows.semantics import judge_condition as _judge


def judge_condition(text, values, results):
    """The old (values, results) calling convention over the Scope the product uses."""
    return _judge(text, Scope(slots={k: v for k, v in values.items() if not k.startswith("__")}, results=results,
                              conditions={k: v in (True, "yes") for k, v in values.items() if k.startswith("cond_")},
                              yesno={"yes": True, "no": False}.get(values.get("__last_yesno")),
                              last_message=values.get("__last_message", ""),
                              info_missing=bool(values.get("__info_missing"))))


def next_action(workflow, progress, max_loops=3):
    frame = {**progress, "calls": progress.get("call_args") or progress.get("calls") or []}
    slots = frame.get("slots") or {}
    frame["conditions"] = {k: v in (True, "yes") for k, v in slots.items() if k.startswith("cond_")}
    frame["slots"] = {k: v for k, v in slots.items() if not k.startswith(("__", "cond_"))}
    reading = {"yesno": {"yes": True, "no": False}.get(slots.get("__last_yesno")), "text": slots.get("__last_message", "")}
    return Interpreter(workflow, max_loops).next_action(frame, reading)


def invalidate(workflow, progress, changed):
    frame = {**progress, "calls": progress.get("call_args") or []}
    executed = _invalidate(workflow, frame, changed)
    if executed is None:
        return []
    dropped = progress["executed"][len(executed):]
    progress["executed"], progress["done"] = executed, False
    return dropped
from workflows.pdl import Workflow

BOOK = Workflow.model_validate({
    "name": "book_table", "description": "Reserve a table.", "domain": "dining", "role": "host",
    "slots": [
        {"name": "restaurant", "description": "Restaurant name"},
        {"name": "party_size", "type": "integer", "description": "Number of guests"},
        {"name": "time", "description": "Date and time"},
        {"name": "guest_name", "description": "Name for the booking"},
    ],
    "apis": [
        {"name": "check_availability", "returns": ["available", "alternatives"],
         "parameters": {"type": "object", "required": ["restaurant", "party_size", "time"],
                        "properties": {"restaurant": {"type": "string"}, "party_size": {"type": "integer"},
                                       "time": {"type": "string"}}}},
        {"name": "book", "returns": ["booking_id"], "precondition": ["check_availability"],
         "parameters": {"type": "object", "required": ["restaurant", "party_size", "time", "guest_name"],
                        "properties": {"restaurant": {}, "party_size": {}, "time": {}, "guest_name": {}}}},
    ],
    "answers": [
        {"name": "ask_details", "template": "Which restaurant, for how many people, and when?"},
        {"name": "offer_alternatives", "template": "Sorry, $time is taken. I can offer $alternatives."},
        {"name": "confirm_booking", "template": "Booked! Your reference is $booking_id."},
    ],
    "procedure": (
        "[restaurant, party_size, time] = ANSWER.ask_details()\n"
        "[available, alternatives] = API.check_availability(restaurant, party_size, time)\n"
        "if available:\n"
        "    [guest_name] = ANSWER.request_information(\"guest_name\")\n"
        "    [booking_id] = API.book(restaurant, party_size, time, guest_name)\n"
        "    ANSWER.confirm_booking()\n"
        "else:\n"
        "    ANSWER.offer_alternatives()\n"),
})
FULL = {"restaurant": "Luigi's", "party_size": 4, "time": "Friday 19:00"}


def test_asks_first_then_skips_given_slots():
    act = next_action(BOOK, {})
    assert (act.kind, act.name, act.slots) == ("answer", "ask_details", ["restaurant", "party_size", "time"])
    # all given up front: the question is skipped and the API is next (procedure jumping)
    act = next_action(BOOK, {"slots": dict(FULL)})
    assert (act.kind, act.name, act.args) == ("api", "check_availability", FULL)


def test_asked_but_partly_answered_asks_for_the_rest():
    act = next_action(BOOK, {"executed": ["ask_details"], "slots": {"restaurant": "Luigi's"}})
    assert (act.kind, act.name, act.slots) == ("ask", "ask_details", ["party_size", "time"])


def test_partly_given_before_the_question_asks_only_for_the_rest():
    # "a table at Luigi's for 4" before ask_details ran: the template would re-ask all three
    act = next_action(BOOK, {"slots": {"restaurant": "Luigi's", "party_size": 4}})
    assert (act.kind, act.name, act.slots) == ("ask", "ask_details", ["time"])


def test_branches_both_ways():
    base = {"executed": ["ask_details", "check_availability"], "slots": dict(FULL)}
    yes = next_action(BOOK, {**base, "results": {"available": True, "alternatives": []}})
    assert (yes.kind, yes.slots) == ("ask", ["guest_name"])
    no = next_action(BOOK, {**base, "results": {"available": "false", "alternatives": ["20:00"]}})
    assert (no.kind, no.name) == ("answer", "offer_alternatives")


def test_api_when_ready_then_answer_then_done():
    p = {"executed": ["ask_details", "check_availability"], "slots": {**FULL, "guest_name": "Mark"},
         "results": {"available": True}}
    act = next_action(BOOK, p)
    assert (act.kind, act.name, act.args["guest_name"]) == ("api", "book", "Mark")
    p["executed"] += ["book"]
    p["results"]["booking_id"] = "B1"
    assert next_action(BOOK, p).name == "confirm_booking"
    p["executed"] += ["confirm_booking"]
    assert next_action(BOOK, p).kind == "done"


def test_going_back_reruns_the_api_that_used_the_old_value():
    p = {"executed": ["ask_details", "check_availability", "request_information", "book", "confirm_booking"],
         "slots": {**FULL, "guest_name": "Mark", "time": "Saturday 20:00"},
         "results": {"available": True, "booking_id": "B1"},
         "call_args": [{"api": "check_availability", "args": dict(FULL)},
                       {"api": "book", "args": {**FULL, "guest_name": "Mark"}}]}
    dropped = invalidate(BOOK, p, {"time": "Saturday 20:00"})
    assert dropped == ["check_availability", "request_information", "book", "confirm_booking"]
    act = next_action(BOOK, p)
    assert (act.kind, act.name, act.args["time"]) == ("api", "check_availability", "Saturday 20:00")


def test_unchanged_slot_drops_nothing():
    p = {"executed": ["check_availability"], "call_args": [{"api": "check_availability", "args": dict(FULL)}]}
    assert invalidate(BOOK, p, {"time": "Friday 19:00"}) == []
    assert p["executed"] == ["check_availability"]


LOOP = Workflow.model_validate({
    "name": "retry_code", "description": "Verify a code with retries.", "domain": "d", "role": "r",
    "slots": [{"name": "code", "description": "Access code"}],
    "apis": [{"name": "verify", "returns": ["valid"],
              "parameters": {"type": "object", "required": ["code"], "properties": {"code": {}}}}],
    "answers": [{"name": "prompt_code", "template": "Your code?"}, {"name": "welcome", "template": "Welcome."},
                {"name": "member_offer", "template": "Members get 10% off."}],
    "procedure": ("[code] = ANSWER.prompt_code()\n[valid] = API.verify(code)\n"
                  "while valid == False:\n    ANSWER.prompt_code()\n    [valid] = API.verify(code)\n"
                  "if COND(\"the user is a member\"):\n    ANSWER.member_offer()\n"
                  "ANSWER.welcome()\n"),
})


def test_while_loop_reruns_and_is_bounded():
    p = {"executed": ["prompt_code", "verify"], "slots": {"code": "1"}, "results": {"valid": False}}
    assert next_action(LOOP, p).name == "prompt_code"  # loop body runs again
    p["executed"] += ["prompt_code", "verify"]
    assert next_action(LOOP, p).name == "prompt_code"
    p["executed"] += ["prompt_code", "verify"] * 5  # more than max_loops: continue after the loop
    act = next_action(LOOP, p, max_loops=3)
    assert act.kind == "ask_cond"


def test_natural_language_condition_asked_once_then_recorded():
    p = {"executed": ["prompt_code", "verify"], "slots": {"code": "1"}, "results": {"valid": True}}
    act = next_action(LOOP, p)
    assert act.kind == "ask_cond" and act.condition == "the user is a member"
    p["slots"][act.cond_key] = "yes"
    assert next_action(LOOP, p).name == "member_offer"
    p["slots"][act.cond_key] = "no"
    assert next_action(LOOP, p).name == "welcome"


@pytest.mark.parametrize("text,results,expected", [
    ("the restaurant is available", {"Message": "Available"}, True),
    ("the restaurant is unavailable", {"Message": "Available"}, False),
    ("the booking failed", {"status": "Reservation Confirmed"}, False),
    ("the room is not available", {"Message": "Unavailable"}, True),
    ("the user is a member", {"Message": "Available"}, UNKNOWN),
])
def test_cond_judged_from_results(text, results, expected):
    assert judge_condition(text, {}, results) is expected


def test_cond_slot_is_stable():
    assert cond_slot("The user is a member") == cond_slot("the user is a member ")


@pytest.mark.parametrize("label,values,results,expected", [
    ("available", {}, {"Message": "The table is not available"}, False),
    ("unavailable", {}, {"Message": "Unavailable"}, True),
    ("query_success", {"__result_ok": True}, {"Status": "Reservation Confirmed"}, True),
    ("query_failure", {"__result_ok": True}, {"Status": "Booking failed"}, True),
    ("yes", {"__last_yesno": "no"}, {}, False),
    ("info_missing", {"__info_missing": True}, {}, True),
    ("correct", {"__last_message": "I think it is a snail"}, {"Answer": "snail"}, True),
    ("incorrect", {"__last_message": "a turtle?"}, {"Answer": "snail"}, True),
    ("correct", {"__last_message": "3!?"}, {"Answer": "three"}, True),
    ("correct", {"__last_message": "air lock"}, {"Answer": "airlock"}, True),
    ("incorrect", {"__last_message": "13"}, {"Answer": "three"}, True),
])
def test_compiled_flowchart_outcomes(label, values, results, expected):
    assert judge_condition(f"some question? -> {label}", values, results) is expected


@pytest.mark.parametrize("said, label, expected", [
    ("You can proceed.", "yes", True),
    ("I need more detailed instructions here, I don't know the street", "no", True),
    ("more detail please", "yes", False),
    ("hmm", "yes", UNKNOWN),  # neither side named: the question is asked
])
def test_a_side_of_an_alternative_question_answers_it(said, label, expected):
    q = "[simple instruction] Can I proceed or do you require more detailed instructions?"
    assert judge_condition(f"{q} -> {label}", {"__last_message": said}, {}) is expected


def test_loop_header_from_compiled_flowchart_is_entered():
    assert judge_condition("What would you like? (first time, or again after: no)", {}, {}) is True


REPEAT = Workflow.model_validate({
    "name": "forecast", "description": "Weather.", "domain": "d", "role": "r",
    "slots": [{"name": "city", "description": "City"}],
    "apis": [{"name": "weather", "returns": ["forecast"],
              "parameters": {"type": "object", "required": ["city"], "properties": {"city": {}}}}],
    "answers": [{"name": "ask_city", "template": "Which city?"}, {"name": "inform", "template": "$forecast"},
                {"name": "anything_else", "template": "Anything else?"}],
    "procedure": "[city] = ANSWER.ask_city()\n[forecast] = API.weather(city)\nANSWER.inform()\nANSWER.anything_else()\n",
})


def test_repeated_request_starts_a_new_round_and_history_picks_the_branch():
    p = {"executed": ["ask_city", "weather", "inform", "anything_else", "weather"], "slots": {"city": "Oslo"}}
    assert next_action(REPEAT, p).name == "inform"  # the latest round: inform again after the new call
    # a branch whose nodes already ran is the branch taken, whatever the (overwritten) results say now
    base = {"executed": ["ask_details", "check_availability", "offer_alternatives"], "slots": dict(FULL),
            "results": {"available": True}}
    assert next_action(BOOK, base).kind == "done"


def test_missing_parameter_is_asked_with_the_workflows_own_question_once():
    wf = REPEAT.model_copy(update={"answers": REPEAT.answers + [
        REPEAT.answers[0].model_copy(update={"name": "weather_ask_city", "template": "What city, please?"})],
        "procedure": "[forecast] = API.weather(city)\nANSWER.inform()\n"})
    act = next_action(wf, {})
    assert (act.kind, act.name, act.slots) == ("answer", "ask_city", ["city"])
    act = next_action(wf, {"executed": [act.name]})  # asked, not understood: try the call with what we have
    assert act.kind == "api" and act.name == "weather"


SEARCH = Workflow.model_validate({
    "name": "find_hotel", "description": "Search hotels.", "domain": "d", "role": "r",
    "slots": [{"name": "city", "description": "City"}, {"name": "price", "description": "Price range"}],
    "apis": [{"name": "search", "returns": ["hotels"],
              "parameters": {"type": "object", "properties": {"city": {}, "price": {}}}}],
    "answers": [{"name": "inform_criteria", "template": "I can search by city or price."},
                {"name": "show_results", "template": "$hotels"}],
    "procedure": "ANSWER.inform_criteria()\n[hotels] = API.search(city, price)\nANSWER.show_results()\n",
})


def test_briefing_before_a_call_is_skipped_when_the_user_already_gave_criteria():
    assert next_action(SEARCH, {}).name == "inform_criteria"
    act = next_action(SEARCH, {"slots": {"city": "Oslo", "price": "cheap"}})
    assert (act.kind, act.name, act.args) == ("api", "search", {"city": "Oslo", "price": "cheap"})


def test_optional_parameter_the_call_passes_is_asked_once_then_the_call_runs_without_it():
    """The API declares nothing required; ``API.search(city, price)`` says the call takes a price: asked
    for (once), not silently left out."""
    act = next_action(SEARCH, {"slots": {"city": "Oslo"}})
    assert (act.kind, act.name, act.slots) == ("ask", "request_information", ["price"])
    act = next_action(SEARCH, {"slots": {"city": "Oslo"}, "executed": ["request_information"]})
    assert (act.kind, act.name, act.args) == ("api", "search", {"city": "Oslo"})


def test_optional_parameter_is_not_asked_when_the_call_does_not_pass_it_or_the_api_declares_what_it_needs():
    wf = SEARCH.model_copy(update={"procedure": "[hotels] = API.search(city)\nANSWER.show_results()\n"})
    act = next_action(wf, {"slots": {"city": "Oslo"}})
    assert (act.kind, act.name, act.args) == ("api", "search", {"city": "Oslo"})
    api = SEARCH.apis[0]
    declared = SEARCH.model_copy(update={"apis": [api.model_copy(update={
        "parameters": {**api.parameters, "required": ["city"]}})]})
    act = next_action(declared, {"slots": {"city": "Oslo"}})
    assert (act.kind, act.name, act.args) == ("api", "search", {"city": "Oslo"})
    # the workflow asks for some arguments itself: those say what it collects, the price is a filter
    own = SEARCH.model_copy(update={"answers": SEARCH.answers + [
        SEARCH.answers[0].model_copy(update={"name": "search_ask_city", "template": "Which city?"})]})
    act = next_action(own, {"slots": {"city": "Oslo"}})
    assert (act.kind, act.name, act.args) == ("api", "search", {"city": "Oslo"})


def test_condition_answers_are_never_api_arguments():
    """Control data (the user's answers to conditions) lives in Frame.conditions, never among the slots."""
    frame = {"slots": {"restaurant": "Sakura", "party_size": 2, "time": "19:00"}, "conditions": {"cond_1": True},
             "executed": ["ask_details"], "calls": []}
    act = Interpreter(BOOK).next_action(frame)
    assert act.kind == "api" and "cond_1" not in act.args

def test_no_answer_is_neither_correct_nor_incorrect():
    LAST_MESSAGE_SLOT = "__last_message"

    values, results = {LAST_MESSAGE_SLOT: "Hmm, I have no idea"}, {"answer": "Paris"}
    assert judge_condition("q -> incorrect", values, results) is False
    assert judge_condition("q -> correct", values, results) is False
    assert judge_condition("q -> noanswer", values, results) is True
    assert judge_condition("q -> incorrect", {LAST_MESSAGE_SLOT: "London"}, results) is True


def test_a_question_for_the_rest_is_no_evidence_of_a_later_branch():
    # ask_details asked for the rest, then the table was not free: the generic question inside the
    # "available" branch did not run, so the walk follows the condition (offer alternatives)
    from dialogue.execution.interpreter import Interpreter

    wf = Workflow.model_validate({
        "name": "book", "description": "Book.", "domain": "d", "role": "r",
        "slots": [{"name": "restaurant"}, {"name": "party_size", "type": "integer"}, {"name": "guest_name"}],
        "apis": [{"name": "check", "parameters": {"type": "object", "required": ["restaurant", "party_size"],
                                                  "properties": {"restaurant": {"type": "string"},
                                                                 "party_size": {"type": "integer"}}},
                  "returns": ["available"]}],
        "answers": [{"name": "ask_details", "template": "Where and for how many?"},
                    {"name": "sorry", "template": "No table.", "precondition": ["check"]}],
        "procedure": "[restaurant, party_size] = ANSWER.ask_details()\n[available] = API.check(restaurant, party_size)\n"
                     "if available:\n    [guest_name] = ANSWER.request_information(\"guest_name\")\nelse:\n"
                     "    ANSWER.sorry()\n"})
    interp = Interpreter(wf)
    act = interp.next_action({"slots": {"restaurant": "Lumi"}})
    assert (act.kind, act.name) == ("ask", "ask_details")
    frame = {"slots": {"restaurant": "Lumi", "party_size": 7}, "results": {"available": False},
             "executed": ["request_information", "check"]}  # as recorded before the fix: still no evidence
    assert interp.next_action(frame).name == "sorry"
