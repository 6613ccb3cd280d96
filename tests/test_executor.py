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
from nodes.executor import decide, executor, fill_template
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
