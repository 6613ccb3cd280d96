"""The executor node: offline proposals, out-of-workflow turns, cancellation, rejected proposals and the
LLM policy with scripted chat models (tool call; malformed then valid; fallback)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import yaml
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from graph.context import Context
from graph.models import register_chat_model, unregister_chat_model
from workflows.pdl import Workflow
from nodes.executor import (called_since_user, decide, executor, fill_template, interpreter_for,
                            rerun_last_api)
from nodes.executor_llm import propose, system_prompt
from tests.test_pdl_runtime import BOOK, FULL


class Scripted(BaseChatModel):
    """Replies with the scripted messages in order; records what it saw and the tools bound."""

    script: list[Any]
    seen: list[Any] = []
    tools: list[Any] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        self.tools = list(tools)
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.seen.append(list(messages))
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return ChatResult(generations=[ChatGeneration(message=item)])


def human(text):
    return [HumanMessage(text)]


def test_offline_asks_then_calls_api_with_slots_from_message():
    progress, prop = decide(BOOK, {}, human("hi, I want to book a table"))
    assert prop == {"kind": "reply", "name": "ask_details", "text": "Which restaurant, for how many people, and when?"}
    progress["executed"].append("ask_details")  # what respond records
    progress, prop = decide(BOOK, progress, human("a table for 4 at Luigi's on Friday at 7"))
    assert prop["kind"] == "tool" and prop["name"] == "check_availability" and prop["call_id"]
    assert prop["args"] == {"restaurant": "Luigi's", "party_size": 4, "time": "Friday 19:00"}


def test_offline_reply_fills_template_with_readable_lists():
    p = {"executed": ["ask_details", "check_availability"], "slots": dict(FULL),
         "results": {"available": False, "alternatives": ["20:00", "21:00", "22:00"]}}
    _, prop = decide(BOOK, p, human("a table for 4 at Luigi's on Friday at 7"))
    assert prop["name"] == "offer_alternatives"
    assert prop["text"] == "Sorry, Friday 19:00 is taken. I can offer 20:00, 21:00 and 22:00."
    assert fill_template("$x and $unknown", {"x": [{"name": "A"}]}) == "A and $unknown"


def test_generic_question_names_slot_descriptions():
    p = {"executed": ["ask_details"], "slots": {"restaurant": "Luigi's"}}
    _, prop = decide(BOOK, p, human("Luigi's"))
    assert prop["name"] == "request_information"
    assert "number of guests" in prop["text"] and "date and time" in prop["text"]


def test_side_question_gets_oow_reply_and_reask():
    p = {"executed": ["ask_details", "check_availability", "request_information"], "slots": dict(FULL),
         "results": {"available": True}, "pending": "request_information"}
    _, prop = decide(BOOK, p, human("by the way, do you have parking?"))
    assert prop["name"] == "answer_out_of_workflow_questions"
    assert "name for the booking" in prop["text"]


def test_cancellation_stops_the_workflow():
    progress, prop = decide(BOOK, {"executed": ["ask_details"]}, human("never mind, forget it"))
    assert progress["done"] is True and "stopped" in prop["text"]


def test_changed_slot_goes_back_and_reruns_the_api():
    p = {"executed": ["ask_details", "check_availability", "request_information"],
         "slots": {**FULL, "guest_name": None}, "results": {"available": True},
         "call_args": [{"api": "check_availability", "args": dict(FULL)}]}
    progress, prop = decide(BOOK, p, human("actually make it 6 people"))
    assert progress["slots"]["party_size"] == 6
    assert prop["kind"] == "tool" and prop["name"] == "check_availability" and prop["args"]["party_size"] == 6


def test_rejected_proposal_is_not_repeated():
    p = {"slots": dict(FULL), "executed": []}
    _, first = decide(BOOK, p, human("go"))
    assert first["name"] == "check_availability"
    _, second = decide(BOOK, p, human("go"), violations=[{"controller": "x", "ok": False, "reason": "no",
                                                           "proposal": first}])
    assert second != first and second["kind"] == "reply"


def test_llm_tool_call_becomes_proposal_and_prompt_has_pdl():
    model = Scripted(script=[AIMessage("", tool_calls=[{"name": "check_availability", "args": dict(FULL),
                                                        "id": "c1"}])])
    prop = propose(model, BOOK, human("table for 4"), {"slots": dict(FULL)},
                   {"hints": ["book needs check_availability first"], "experience": "ask names last"}, [])
    assert prop == {"kind": "tool", "name": "check_availability", "args": FULL, "call_id": "c1"}
    system = model.seen[0][0].content
    assert "PROCEDURE:" in system and "book needs check_availability first" in system and "ask names last" in system
    assert {t["function"]["name"] for t in model.tools} == {"check_availability", "book", "reply"}


def test_llm_malformed_then_valid_retries():
    model = Scripted(script=[AIMessage("", tool_calls=[{"name": "teleport", "args": {}, "id": "c1"}]),
                             AIMessage("", tool_calls=[{"name": "reply", "args": {"name": "ask_details",
                                                                                   "text": "Where to?"}, "id": "c2"}])])
    prop = propose(model, BOOK, human("hi"), {}, {}, [])
    assert prop == {"kind": "reply", "name": "ask_details", "text": "Where to?"}
    assert "not a tool of this workflow" in model.seen[1][-1].content


def test_llm_plain_text_is_llm_reply():
    assert propose(Scripted(script=[AIMessage("Hello!")]), BOOK, human("hi"), {}, {}, []) == {
        "kind": "reply", "name": "llm_reply", "text": "Hello!"}


def test_llm_keeps_failing_falls_back_to_offline(tmp_path):
    bad = AIMessage("", tool_calls=[{"name": "teleport", "args": {}, "id": "x"}])
    model = Scripted(script=[bad, bad, bad])
    _, prop = decide(BOOK, {}, human("hi"), model=model)
    assert len(model.seen) == 3 and prop["name"] == "ask_details"
    model = Scripted(script=[ConnectionError("down")])
    _, prop = decide(BOOK, {}, human("hi"), model=model)
    assert prop["name"] == "ask_details"


def test_rejections_are_in_the_llm_prompt():
    violations = [{"controller": "dependency", "ok": False, "reason": "book needs check_availability",
                   "proposal": {"kind": "tool", "name": "book", "args": {}}}]
    assert "book needs check_availability" in system_prompt(BOOK, {}, {}, violations)


def _library(tmp_path):
    root = tmp_path / "lib"
    (root / "dining" / "host").mkdir(parents=True)
    (root / "dining" / "_domain.yaml").write_text(yaml.safe_dump({"name": "dining", "description": "Eating out."}))
    (root / "dining" / "host" / "_role.yaml").write_text(
        yaml.safe_dump({"name": "host", "domain": "dining", "description": "Restaurant host."}))
    (root / "dining" / "host" / "book_table.yaml").write_text(yaml.safe_dump(
        BOOK.model_dump(mode="json", exclude_defaults=True) | {"domain": "dining", "role": "host"}))
    return root


def test_node_uses_registered_model_from_context(tmp_path):
    lib = _library(tmp_path)
    state = {"messages": human("table for 4 at Luigi's on Friday at 7"), "active_workflow": "book_table",
             "progress": {}, "guidance": {}, "violations": []}
    offline = executor(state, SimpleNamespace(context=Context(library=str(lib), executor_model="offline")))
    assert offline["proposal"]["kind"] == "tool" and offline["progress"]["book_table"]["slots"]["party_size"] == 4
    spec = register_chat_model("exec-test", Scripted(script=[AIMessage("Happy to help!")]))
    try:
        out = executor(state, SimpleNamespace(context=Context(library=str(lib), executor_model=spec)))
    finally:
        unregister_chat_model("exec-test")
    assert out["proposal"] == {"kind": "reply", "name": "llm_reply", "text": "Happy to help!"}


# --- H10: information given early, retries that became valid, loops after the end, bookkeeping slots --
def test_every_detail_in_the_first_message_is_used_without_asking_again():
    msg = human("Book a table at Luigi's for 4 people on Friday at 7 under the name Ada Lovelace")
    progress, prop = decide(BOOK, {}, msg)
    assert prop["name"] == "check_availability" and progress["slots"]["guest_name"] == "Ada Lovelace"
    progress["executed"].append("check_availability")  # what the tools node records
    progress["results"] = {"available": True}
    progress["call_args"] = [{"api": "check_availability", "args": prop["args"]}]
    _, prop = decide(BOOK, progress, msg)
    assert prop["kind"] == "tool" and prop["name"] == "book" and prop["args"]["guest_name"] == "Ada Lovelace"


def test_a_rejected_call_is_proposed_again_once_progress_made_it_valid():
    msg = human("go")
    slots = {**FULL, "guest_name": "Ada"}
    book = {"kind": "tool", "name": "book", "args": dict(slots), "call_id": "call_x"}
    violation = {"controller": "precondition", "ok": False, "reason": "check first", "proposal": book}
    p, prop = decide(BOOK, {"executed": ["ask_details"], "slots": dict(slots)}, msg, violations=[violation])
    assert prop["name"] == "check_availability"
    # same progress, the rejected call is not repeated ...
    p2, prop = decide(BOOK, p, msg, violations=[violation, {"proposal": prop, "ok": False}])
    assert prop["kind"] == "reply"
    # ... but once the check ran, the very same call is valid and proposed again
    p2["executed"].append("check_availability")
    p2["results"] = {"available": True}
    p2["call_args"] = [{"api": "check_availability", "args": dict(FULL)}]
    _, prop = decide(BOOK, p2, msg, violations=[violation, {"proposal": prop, "ok": False}])
    assert prop["kind"] == "tool" and prop["name"] == "book" and prop["args"] == book["args"]


def _irreversible_book():
    wf = BOOK.model_copy(deep=True)
    wf.api("book").irreversible = True
    return wf


def test_a_related_message_after_the_end_does_not_book_again():
    done = {"executed": ["ask_details", "check_availability", "request_information", "book", "confirm_booking"],
            "slots": {**FULL, "guest_name": "Ada"}, "results": {"available": True, "booking_id": "B-1"},
            "call_args": [{"api": "check_availability", "args": dict(FULL)},
                          {"api": "book", "args": {**FULL, "guest_name": "Ada"}}]}
    _, prop = decide(_irreversible_book(), done, human("the booking name is Ada, a table at Luigi's for 4"))
    assert prop["kind"] == "reply"


def test_rerun_after_the_end_happens_once_per_message_and_never_for_irreversible_calls():
    interp = interpreter_for(BOOK)
    p = {"executed": ["ask_details", "check_availability", "offer_alternatives"], "slots": {**FULL, "party_size": 6},
         "call_args": [{"api": "check_availability", "args": dict(FULL)}]}
    again = rerun_last_api(BOOK, interp, p)
    assert again["name"] == "check_availability" and again["args"]["party_size"] == 6
    # the same call already answered this message (it is the last call now): no loop
    ran = {**p, "call_args": p["call_args"] + [{"api": "check_availability", "args": dict(again["args"])}]}
    assert rerun_last_api(BOOK, interp, ran, called_since_message=True) is None
    msgs = [HumanMessage("6 of us"), AIMessage("", tool_calls=[{"name": "check_availability", "args": {},
                                                                "id": "c1", "type": "tool_call"}])]
    assert called_since_user(msgs) and not called_since_user(msgs[:1])
    wf = BOOK.model_copy(deep=True)
    wf.api("check_availability").irreversible = True
    assert rerun_last_api(wf, interpreter_for(wf), p) is None


def test_bookkeeping_slots_never_fill_templates():
    assert fill_template("$__last_yesno / $guest_name", {"__last_yesno": "yes", "guest_name": "Ada"}) == \
        "$__last_yesno / Ada"


QUIZ = Workflow.model_validate({
    "name": "quiz", "description": "Play a quiz.", "domain": "fun", "role": "host",
    "slots": [{"name": "num", "type": "integer", "description": "Question number"}],
    "apis": [{"name": "quiz", "returns": ["question"],
              "parameters": {"type": "object", "required": ["num"], "properties": {"num": {"type": "integer"}}}}],
    "answers": [{"name": "ask_number", "template": "Which question number shall we start at?"},
                {"name": "ask_question", "template": "$question"},
                {"name": "offer_next", "template": "Right! Would you like to continue playing?"},
                {"name": "anything_else", "template": "Is there anything else I can do for you?"},
                {"name": "goodbye", "template": "Goodbye!"}],
    "procedure": "[num] = ANSWER.ask_number()\nAPI.quiz(num)\nANSWER.ask_question()\nANSWER.offer_next()\n"
                 "ANSWER.anything_else()\nAPI.quiz(num)\n",
})


def test_yes_to_an_offer_to_continue_runs_the_api_again():
    p = {"executed": ["ask_number", "quiz", "ask_question", "offer_next"], "slots": {"num": 1},
         "results": {"question": "Q1"}, "call_args": [{"api": "quiz", "args": {"num": 1}}]}
    _, prop = decide(QUIZ, p, human("yes"))
    assert prop["kind"] == "tool" and prop["name"] == "quiz"
    _, prop = decide(QUIZ, p, human("no thanks"))
    assert prop["kind"] == "reply"


def test_thanks_after_anything_else_closes_the_conversation():
    p = {"executed": ["ask_number", "quiz", "ask_question", "offer_next", "anything_else"], "slots": {"num": 1},
         "results": {"question": "Q1"}, "call_args": [{"api": "quiz", "args": {"num": 1}}]}
    progress, prop = decide(QUIZ, p, human("No, that's all, thanks"))
    assert prop["kind"] == "reply" and prop["name"] == "goodbye" and progress["done"]


def test_llm_prompt_shows_user_slots_not_bookkeeping():
    prompt = system_prompt(BOOK, {"executed": [], "slots": {"party_size": 4, "__last_yesno": "yes",
                                                             "__rejections": [["x", "y"]]}}, {}, [])
    assert '"party_size": 4' in prompt and "__rejections" not in prompt and "__last_yesno" not in prompt
