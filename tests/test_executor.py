"""The executor on the dialogue stack: the offline policy (``decide``, ``next_proposal``), the message
read into the frame (``read_turn`` / the ``apply_commands`` node: slot filling, going back), the
repair patterns (cancel, side question, resume) and the LLM policy with scripted chat models (tool
call; malformed then valid; fallback to the offline policy).

The harness mirrors a turn: ``read`` is what ``apply_commands`` does with the user's message,
``decide`` what the executor's offline policy proposes, ``answered`` / ``called`` the stack
operations ``respond`` / ``tools`` return; ``run_nodes`` runs the real nodes with the state's reducers.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.runtime import Runtime

from dialogue.commands import dump
from dialogue.execution.interpreter import Interpreter
from dialogue.execution.policy_llm import MAX_RETRIES, propose, system_prompt
from dialogue.execution.policy_offline import called_since_user, decide, next_proposal, rerun_last_api
from dialogue.frames import Frame, fingerprint, merge_stack, new_frame, scope_of, this_turn, top
from dialogue.turn import make_env, read_turn
from dialogue.understanding.navigation import reading_of, turn_commands
from dialogue.understanding.policy_offline import Verdict
from graph.context import Context
from graph.models import register_chat_model, unregister_chat_model
from graph.state import active_workflow, interrupted_workflows
from graph.state import turn_commands as turn_commands_of
from nodes.apply_commands import apply_commands
from nodes.detector import detector
from nodes.executor import executor
from tests.test_pdl_runtime import BOOK, FULL
from workflows.pdl import Workflow
from workflows.semantics import condition_key, render_template


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


QUIZ = Workflow.model_validate({
    "name": "quiz", "description": "Play a quiz.", "domain": "fun", "role": "quizmaster",
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


# --- the harness ---------------------------------------------------------------------------------------

def human(text):
    return [HumanMessage(text)]


def frame(wf: Workflow = BOOK, **fields) -> Frame:
    """A frame of ``wf`` (started in turn 1) with the given fields."""
    return Frame(**{**new_frame(wf.name, 1), **fields})


def read(wf: Workflow, fr: Frame, text: str, turn: int = 1) -> tuple[Frame, list, dict]:
    """What ``apply_commands`` does with the message: the frame after it, the commands, the reading."""
    env = make_env(turn, {wf.name: wf}, {wf.name: Interpreter(wf)})
    reading = reading_of(text)
    stack, added = read_turn([fr], wf, Interpreter(wf), reading, set(), env)
    return top(stack), added, reading


def step(wf: Workflow, fr: Frame, text: str, rejected=(), messages=None) -> tuple[Frame, dict]:
    """One offline turn: the message read into the frame, then the offline policy's proposal."""
    fr, added, reading = read(wf, fr, text)
    reading = {**reading, "slots_given": any(c.command in ("set_slot", "correct_slot") for c in added)}
    return fr, decide(wf, Interpreter(wf), fr, reading, messages or human(text), list(rejected))


def answered(fr: Frame, answer: str, asked=(), done=False) -> Frame:
    """The frame after ``respond`` sent ``answer`` (its stack operation)."""
    return merge_stack([fr], {"op": "answer", "frame": fr["id"], "answer": answer, "asked": list(asked),
                              "done": done})[0]


def called(fr: Frame, api: str, args: dict, result: dict, status="ok", turn=1) -> Frame:
    """The frame after ``tools`` ran ``api`` (its stack operation)."""
    return merge_stack([fr], {"op": "call", "frame": fr["id"], "result": result,
                              "call": {"api": api, "args": dict(args), "status": status, "turn": turn}})[0]


def _library(tmp_path, *workflows: Workflow):
    root = tmp_path / "lib"
    for wf in workflows:
        role = root / wf.domain / wf.role
        role.mkdir(parents=True, exist_ok=True)
        (root / wf.domain / "_domain.yaml").write_text(yaml.safe_dump({"name": wf.domain, "description": "Tests."}))
        (role / "_role.yaml").write_text(yaml.safe_dump({"name": wf.role, "domain": wf.domain, "description": "Tests."}))
        (role / f"{wf.name}.yaml").write_text(yaml.safe_dump(wf.model_dump(mode="json", exclude_defaults=True)))
    return root


@pytest.fixture
def ctx(tmp_path):
    return Context(library=str(_library(tmp_path, BOOK, QUIZ)), store_dir=str(tmp_path / "store"))


def node_state(stack: list[Frame], text: str, commands=(), turn: int = 1, violations=()) -> dict:
    """A thread state at the start of a turn's ``apply_commands`` (the detector has run)."""
    return {"messages": human(text), "turn": turn, "reading": reading_of(text), "stack": list(stack),
            "commands": [{**c, "turn": turn} for c in dump(commands)], "violations": list(violations)}


def run_nodes(state: dict, ctx: Context, *nodes) -> dict:
    """Run the nodes in order, merging each update with the state's reducers."""
    for node in nodes:
        out = node(state, Runtime(context=ctx))
        merged = {**state, **out}
        for field, reducer in (("stack", merge_stack), ("commands", this_turn), ("violations", this_turn)):
            if field in out:
                merged[field] = reducer(state.get(field), out[field])
        state = merged
    return state


# --- the offline policy -------------------------------------------------------------------------------

def test_offline_asks_then_calls_api_with_slots_from_message():
    fr, prop = step(BOOK, frame(), "hi, I want to book a table")
    assert prop == {"kind": "reply", "name": "ask_details", "text": "Which restaurant, for how many people, and when?"}
    fr = answered(fr, "ask_details", ["restaurant", "party_size", "time"])
    fr, prop = step(BOOK, fr, "a table for 4 at Luigi's on Friday at 7")
    assert fr["slots"] == FULL
    assert prop["kind"] == "tool" and prop["name"] == "check_availability" and prop["call_id"]
    assert prop["args"] == {"restaurant": "Luigi's", "party_size": 4, "time": "Friday 19:00"}


def test_offline_reply_fills_template_with_readable_lists():
    fr = frame(executed=["ask_details", "check_availability"], slots=dict(FULL),
               results={"available": False, "alternatives": ["20:00", "21:00", "22:00"]})
    _, prop = step(BOOK, fr, "a table for 4 at Luigi's on Friday at 7")
    assert prop["name"] == "offer_alternatives"
    assert prop["text"] == "Sorry, Friday 19:00 is taken. I can offer 20:00, 21:00 and 22:00."
    assert render_template("$x and $unknown", {"x": [{"name": "A"}]}) == "A and $unknown"


def test_generic_question_names_slot_descriptions():
    fr = answered(frame(slots={"restaurant": "Luigi's"}), "ask_details", ["party_size", "time"])
    _, prop = step(BOOK, fr, "Luigi's")
    # the question for the rest of ask_details' slots is that node again (recorded under its name, so a
    # later request_information in the procedure is not taken as asked already)
    assert prop["name"] == "ask_details" and prop["args"] == {"slots": ["party_size", "time"]}
    assert "number of guests" in prop["text"] and "date and time" in prop["text"]


def test_rejected_proposal_is_not_repeated():
    fr = frame(slots=dict(FULL))
    _, first = step(BOOK, fr, "go")
    assert first["name"] == "check_availability"
    _, second = step(BOOK, fr, "go", rejected=[first])
    assert second != first and second["kind"] == "reply"


def test_next_proposal_offers_the_next_alternative_for_a_rejected_call():
    fr = frame(executed=["ask_details"], slots=dict(FULL))
    interp, rejected, seen = Interpreter(BOOK), [], []
    for _ in range(3):
        prop = next_proposal(BOOK, interp, fr, {}, rejected)
        seen.append(prop)
        rejected.append(prop)
    assert seen[0]["kind"] == "tool" and seen[0]["name"] == "check_availability"
    assert seen[1]["name"] == "request_information" and seen[1]["text"].startswith("Before I check availability")
    assert "party size 4" in seen[1]["text"]
    assert seen[2]["name"] == "answer_out_of_workflow_questions" and "can't do that" in seen[2]["text"]
    assert next_proposal(BOOK, interp, fr, {}, rejected) == seen[2]  # nothing left: the apology stays


def test_every_detail_in_the_first_message_is_used_without_asking_again():
    text = "Book a table at Luigi's for 4 people on Friday at 7 under the name Ada Lovelace"
    fr, prop = step(BOOK, frame(), text)
    assert prop["name"] == "check_availability" and fr["slots"]["guest_name"] == "Ada Lovelace"
    fr = called(fr, "check_availability", prop["args"], {"available": True})
    # the same turn goes on after the tool ran (tools → pre_controller → executor): no new reading
    reading = {**reading_of(text), "slots_given": True}
    prop = decide(BOOK, Interpreter(BOOK), fr, reading, human(text), [])
    assert prop["kind"] == "tool" and prop["name"] == "book" and prop["args"]["guest_name"] == "Ada Lovelace"


def _irreversible_book():
    wf = BOOK.model_copy(deep=True)
    wf.api("book").irreversible = True
    return wf


def test_a_related_message_after_the_end_does_not_book_again():
    done = frame(executed=["ask_details", "check_availability", "request_information", "book", "confirm_booking"],
                 slots={**FULL, "guest_name": "Ada"}, results={"available": True, "booking_id": "B-1"},
                 calls=[{"api": "check_availability", "args": dict(FULL), "status": "ok", "turn": 1},
                        {"api": "book", "args": {**FULL, "guest_name": "Ada"}, "status": "ok", "turn": 2}])
    _, prop = step(_irreversible_book(), done, "the booking name is Ada, a table at Luigi's for 4")
    assert prop["kind"] == "reply"


def test_rerun_after_the_end_happens_once_per_message_and_never_for_irreversible_calls():
    fr = frame(executed=["ask_details", "check_availability", "offer_alternatives"], slots={**FULL, "party_size": 6},
               calls=[{"api": "check_availability", "args": dict(FULL), "status": "ok", "turn": 1}])
    again = rerun_last_api(BOOK, Interpreter(BOOK), fr)
    assert again["name"] == "check_availability" and again["args"]["party_size"] == 6
    # the same call already answered this message (it is the last call now): no loop
    ran = called(fr, "check_availability", again["args"], {"available": False})
    assert rerun_last_api(BOOK, Interpreter(BOOK), ran, called_since_message=True) is None
    msgs = [HumanMessage("6 of us"), AIMessage("", tool_calls=[{"name": "check_availability", "args": {},
                                                                "id": "c1", "type": "tool_call"}])]
    assert called_since_user(msgs) and not called_since_user(msgs[:1])
    wf = BOOK.model_copy(deep=True)
    wf.api("check_availability").irreversible = True
    assert rerun_last_api(wf, Interpreter(wf), fr) is None


def test_control_data_never_fills_templates():
    # the user's yes/no and condition answers are typed fields of the frame / the reading, never values
    key = condition_key("the user wants a window seat")
    fr = frame(slots={"guest_name": "Ada"}, conditions={key: True})
    values = scope_of(fr, reading_of("yes")).values
    assert render_template(f"${key} / $guest_name", values) == f"${key} / Ada"


def test_yes_to_an_offer_to_continue_runs_the_api_again():
    fr = frame(QUIZ, executed=["ask_number", "quiz", "ask_question", "offer_next"], slots={"num": 1},
               results={"question": "Q1"}, calls=[{"api": "quiz", "args": {"num": 1}, "status": "ok", "turn": 1}])
    _, prop = step(QUIZ, fr, "yes")
    assert prop["kind"] == "tool" and prop["name"] == "quiz"
    _, prop = step(QUIZ, fr, "no thanks")
    assert prop["kind"] == "reply"


def test_thanks_after_anything_else_closes_the_conversation():
    fr = frame(QUIZ, executed=["ask_number", "quiz", "ask_question", "offer_next", "anything_else"],
               slots={"num": 1}, results={"question": "Q1"},
               calls=[{"api": "quiz", "args": {"num": 1}, "status": "ok", "turn": 1}])
    _, prop = step(QUIZ, fr, "No, that's all, thanks")
    assert prop["kind"] == "reply" and prop["name"] == "goodbye" and prop["completes"] is True
    assert answered(fr, prop["name"], done=prop["completes"])["status"] == "done"  # what respond records


# --- the message read into the frame (read_turn / apply_commands) -------------------------------------

def test_changed_slot_goes_back_and_reruns_the_api():
    fr = frame(executed=["ask_details", "check_availability", "request_information"], slots=dict(FULL),
               results={"available": True}, asked=["guest_name"],
               calls=[{"api": "check_availability", "args": dict(FULL), "status": "ok", "turn": 1}])
    after, added, _ = read(BOOK, fr, "actually make it 6 people", turn=2)
    assert [(c.command, c.slot, c.value, c.previous) for c in added] == [("correct_slot", "party_size", 6, 4)]
    assert after["slots"]["party_size"] == 6 and "guest_name" not in after["slots"]
    assert after["executed"] == ["ask_details"]  # the check made with 4 people, and what followed, run again
    _, prop = step(BOOK, fr, "actually make it 6 people")
    assert prop["kind"] == "tool" and prop["name"] == "check_availability" and prop["args"]["party_size"] == 6


def test_apply_commands_fills_slots_and_records_the_slot_commands(ctx):
    st = run_nodes(node_state([frame()], "a table for 4 at Luigi's on Friday at 7"), ctx, apply_commands)
    assert top(st["stack"])["slots"] == FULL
    assert {c["slot"] for c in st["commands"] if c["command"] == "set_slot"} == set(FULL)

REPORT = Workflow.model_validate({
    "name": "report_fraud", "description": "Report fraud on an account.", "domain": "bank", "role": "clerk",
    "slots": [{"name": "account", "description": "Account number"}, {"name": "diet", "description": "Allergies"},
              {"name": "report", "description": "What happened", "required": True}],
    "apis": [{"name": "file_report", "returns": ["confirmation"],
              "parameters": {"type": "object", "required": ["report"],
                             "properties": {"account": {"type": "string"}, "report": {"type": "string"}}}}],
    "answers": [{"name": "ask_account", "template": "Can you tell me your account number, please?"},
                {"name": "ask_diet", "template": "Do you have any allergies?"},
                {"name": "ask_report", "template": "What happened?"}],
    "procedure": "[account] = ANSWER.ask_account()\n[diet] = ANSWER.ask_diet()\n[report] = ANSWER.ask_report()\n"
                 "API.file_report(account, report)\n",
})


@pytest.mark.parametrize("text, declined", [
    ("I don't have my account number on me", ["account"]),
    ("no idea, sorry", ["account"]),
    ("no", ["account"]),
    ("what time is it?", []),  # not an answer, not a refusal: asked again
])
def test_a_value_the_user_cannot_give_is_not_asked_again(text, declined):
    fr = frame(REPORT, executed=["ask_account"], asked=["account"])
    after, _, _ = read(REPORT, fr, text)
    assert after.get("declined", []) == declined
    _, prop = step(REPORT, fr, text)
    assert prop["name"] == ("ask_diet" if declined else "ask_account")
    # a bare no to a yes/no question for a free-text value: none, the procedure goes on
    fr = frame(REPORT, executed=["ask_account", "ask_diet"], asked=["diet"], slots={"account": "12345"})
    after, prop = step(REPORT, fr, "Nope, nothing like that.")
    assert after["declined"] == ["diet"] and prop["name"] == "ask_report"
    # a value given later still fills the slot, and is used
    after, _, _ = read(REPORT, frame(REPORT, executed=["ask_account", "ask_diet", "ask_report"], asked=["report"],
                                     declined=["account"]), "my account is 998877 and someone took 500 dollars")
    assert after["slots"].get("account") == "998877"



# --- the executor node: repair patterns ------------------------------------------------------------------

def test_cancellation_stops_the_workflow(ctx):
    text = "never mind, forget it"
    commands = turn_commands(Verdict(action="STAY"), text, 1, active="book_table",
                             active_about=f"book_table {BOOK.description}", asked=[], stacked=[], describe={})
    assert [c.command for c in commands] == ["cancel_flow"] and commands[0].workflow == "book_table"
    st = run_nodes(node_state([frame(executed=["ask_details"])], text, commands), ctx, apply_commands, executor)
    assert st["stack"] == [] and active_workflow(st) is None
    assert st["proposal"]["name"] == "pattern_cancel_flow" and "stopped" in st["proposal"]["text"]


@pytest.mark.parametrize("text,kinds", [
    ("stop, I don't want to do this", ["cancel_flow"]), ("let's start over", ["cancel_flow"]),
    ("operator", ["human_handoff"]), ("this is useless, let me talk to someone", ["human_handoff"]),
    ("never mind the table, I need a hotel in porto instead", ["cancel_flow", "start_flow"]),
    ("ok, back to the table booking", []), ("Forget it, please cancel this.", ["cancel_flow"])])
def test_navigation_said_other_ways(text, kinds):
    commands = turn_commands(Verdict(action="SEARCH", search_query=text), text, 1, active="book_table",
                             active_about=f"book_table {BOOK.description}", asked=["guest_name"], stacked=[],
                             describe={})
    assert [c.command for c in commands] == kinds
    if "start_flow" in kinds:  # the request after giving up is what the router looks for
        assert commands[-1].query == "I need a hotel in porto instead"


@pytest.mark.parametrize("text,finished,kinds", [
    ("ok now where were we with the table?", False, ["resume_flow"]),  # a way back, whatever the state
    ("Alright, let's finish booking the table", False, ["resume_flow"]),
    ("so, the table?", True, ["resume_flow"]),  # the digression is done and the turn names the booking
    ("so, the table?", False, []),  # the digression still runs: a side question to it
    ("thanks!", True, []),  # names no task
    ("what is my balance in savings?", True, [])])  # names the finished task more than the waiting one
def test_going_back_said_other_ways(text, finished, kinds):
    commands = turn_commands(Verdict(action="STAY"), text, 2, active="check_balance",
                             active_about="check_balance Check the balance of a bank account", asked=[],
                             stacked=["book_table"], describe={"book_table": "Book table " + BOOK.description},
                             finished=finished)
    assert [c.command for c in commands] == kinds
    assert all(c.workflow == "book_table" for c in commands)


def test_a_bare_cancel_with_nothing_under_way_starts_nothing():
    def cmds(text, idle=True):
        return [c.command for c in turn_commands(Verdict(action="SEARCH", search_query=text), text, 1, active=None,
                                                 active_about="", asked=[], stacked=[], describe={}, idle=idle)]
    assert cmds("cancel") == ["chitchat"] and cmds("cancel it please") == ["chitchat"]
    assert cmds("cancel my order") == ["start_flow"]  # names what to cancel
    assert cmds("cancel it", idle=False) == ["start_flow"]  # after a task: what it did


def test_cancelling_leaves_the_interrupted_workflow_waiting_and_it_can_be_resumed(ctx):
    below = frame(QUIZ, status="interrupted", executed=["ask_number"], slots={"num": 3}, asked=["num"])
    st = node_state([below, frame(executed=["ask_details"])], "cancel that",
                    [turn_commands(Verdict(action="STAY"), "cancel that", 1, active="book_table",
                                   active_about="book_table", asked=[], stacked=["quiz"], describe={})[0]])
    st = run_nodes(st, ctx, apply_commands, executor)
    assert active_workflow(st) is None and interrupted_workflows(st) == ["quiz"]
    assert "stopped" in st["proposal"]["text"] and st["stack"][0]["slots"] == {"num": 3}
    # the next turn: the detector offers the waiting workflow to "go back", and it comes back as it was
    st = {**st, "messages": [*st["messages"], AIMessage(st["proposal"]["text"]), HumanMessage("ok, back to the quiz")]}
    st = run_nodes(st, ctx, detector)
    assert [c["command"] for c in turn_commands_of(st)] == ["resume_flow"]
    st = run_nodes(st, ctx, apply_commands, executor)
    assert active_workflow(st) == "quiz" and top(st["stack"])["slots"] == {"num": 3}
    assert st["proposal"]["kind"] == "tool" and st["proposal"]["name"] == "quiz"


def test_side_question_gets_out_of_scope_reply_and_reask(ctx):
    fr = frame(executed=["ask_details", "check_availability", "request_information"], slots=dict(FULL),
               results={"available": True}, asked=["guest_name"],
               calls=[{"api": "check_availability", "args": dict(FULL), "status": "ok", "turn": 1}])
    st = run_nodes(node_state([fr], "by the way, do you have parking?"), ctx, apply_commands, executor)
    assert "out_of_scope" in [c["command"] for c in st["commands"]]
    assert "guest_name" not in top(st["stack"])["slots"]  # the question is not taken as the name
    text = st["proposal"]["text"]
    assert text.startswith("I'm afraid I can't help with that here") and "name for the booking" in text


def test_going_back_resumes_with_the_saved_progress_and_asks_the_next_question(ctx):
    booking = frame(status="interrupted", executed=["ask_details"], slots={"restaurant": "Luigi's"},
                    asked=["restaurant", "party_size", "time"])
    text = "let's go back to the table booking, 6 people"
    commands = turn_commands(Verdict(action="STAY"), text, 2, active="quiz", active_about="quiz", asked=[],
                             stacked=["book_table"], describe={"book_table": "Book table " + BOOK.description})
    assert [c.command for c in commands] == ["resume_flow"]
    st = run_nodes(node_state([booking, frame(QUIZ)], text, commands, turn=2), ctx, apply_commands, executor)
    assert active_workflow(st) == "book_table" and interrupted_workflows(st) == ["quiz"]
    # the resumed task reads the values said with the way back ("..., 6 people")
    assert top(st["stack"])["slots"] == {"restaurant": "Luigi's", "party_size": 6}
    text = st["proposal"]["text"]
    assert text.startswith("Sure — back to book table.") and "number of guests" not in text and "time" in text


def test_a_rejected_call_is_proposed_again_once_progress_made_it_valid(ctx):
    slots = {**FULL, "guest_name": "Ada"}
    fr = frame(executed=["ask_details"], slots=dict(slots))
    book = {"kind": "tool", "name": "book", "args": dict(slots), "call_id": "call_x"}

    def rejected(proposal, at):
        return {"controller": "precondition", "ok": False, "reason": "check first", "proposal": proposal,
                "turn": 1, "attempt": 1, "at": at}

    violations = [rejected(book, fingerprint(fr))]
    prop = executor(node_state([fr], "go", violations=violations), Runtime(context=ctx))["proposal"]
    assert prop["name"] == "check_availability"
    # same frame: the rejected calls are not proposed again ...
    violations.append(rejected(prop, fingerprint(fr)))
    prop = executor(node_state([fr], "go", violations=violations), Runtime(context=ctx))["proposal"]
    assert prop["kind"] == "reply"
    # ... but once the check ran, the very same call is valid and proposed again
    fr = called(fr, "check_availability", FULL, {"available": True})
    prop = executor(node_state([fr], "go", violations=violations), Runtime(context=ctx))["proposal"]
    assert prop["kind"] == "tool" and prop["name"] == "book" and prop["args"] == book["args"]


# --- the LLM policy ---------------------------------------------------------------------------------------

def test_llm_tool_call_becomes_proposal_and_prompt_has_pdl():
    model = Scripted(script=[AIMessage("", tool_calls=[{"name": "check_availability", "args": dict(FULL),
                                                        "id": "c1"}])])
    prop = propose(model, BOOK, human("table for 4"), frame(slots=dict(FULL)),
                   {"hints": ["book needs check_availability first"], "experience": "ask names last"}, [])
    assert prop == {"kind": "tool", "name": "check_availability", "args": FULL, "call_id": "c1"}
    system = model.seen[0][0].content
    assert "PROCEDURE:" in system and "book needs check_availability first" in system and "ask names last" in system
    assert {t["function"]["name"] for t in model.tools} == {"check_availability", "book", "reply"}


def test_llm_malformed_then_valid_retries():
    model = Scripted(script=[AIMessage("", tool_calls=[{"name": "teleport", "args": {}, "id": "c1"}]),
                             AIMessage("", tool_calls=[{"name": "reply", "args": {"name": "ask_details",
                                                                                   "text": "Where to?"}, "id": "c2"}])])
    prop = propose(model, BOOK, human("hi"), frame(), {}, [])
    assert prop == {"kind": "reply", "name": "ask_details", "text": "Where to?"}
    assert "not a tool of this workflow" in model.seen[1][-1].content


def test_llm_plain_text_is_llm_reply():
    assert propose(Scripted(script=[AIMessage("Hello!")]), BOOK, human("hi"), frame(), {}, []) == {
        "kind": "reply", "name": "llm_reply", "text": "Hello!"}


def test_llm_keeps_failing_falls_back_to_offline(ctx):
    bad = AIMessage("", tool_calls=[{"name": "teleport", "args": {}, "id": "x"}])
    model = Scripted(script=[bad] * (MAX_RETRIES + 1))
    assert propose(model, BOOK, human("hi"), frame(), {}, []) is None and len(model.seen) == MAX_RETRIES + 1
    assert propose(Scripted(script=[ConnectionError("down")]), BOOK, human("hi"), frame(), {}, []) is None
    # the executor node then proposes what the offline policy decides
    for script in ([bad] * (MAX_RETRIES + 1), [ConnectionError("down")]):
        failing = Scripted(script=list(script))
        spec = register_chat_model("exec-failing", failing)
        try:
            out = executor(node_state([frame()], "hi"),
                           Runtime(context=Context(library=ctx.library, executor_model=spec)))
        finally:
            unregister_chat_model("exec-failing")
        assert failing.seen and out["proposal"]["name"] == "ask_details"


def test_rejections_are_in_the_llm_prompt():
    violations = [{"controller": "dependency", "ok": False, "reason": "book needs check_availability",
                   "proposal": {"kind": "tool", "name": "book", "args": {}}}]
    assert "book needs check_availability" in system_prompt(BOOK, frame(), {}, violations)


def test_llm_prompt_shows_user_slots_not_control_data():
    key = condition_key("the user wants a window seat")
    prompt = system_prompt(BOOK, frame(slots={"party_size": 4}, conditions={key: True}, asked=["time"]), {}, [])
    assert '"party_size": 4' in prompt and key not in prompt


def test_node_uses_registered_model_from_context(ctx):
    st = node_state([frame()], "table for 4 at Luigi's on Friday at 7")
    offline = run_nodes(st, Context(library=ctx.library, executor_model="offline"), apply_commands, executor)
    assert offline["proposal"]["kind"] == "tool" and top(offline["stack"])["slots"]["party_size"] == 4
    spec = register_chat_model("exec-test", Scripted(script=[AIMessage("Happy to help!")]))
    try:
        out = executor(st, Runtime(context=Context(library=ctx.library, executor_model=spec)))
    finally:
        unregister_chat_model("exec-test")
    assert out["proposal"] == {"kind": "reply", "name": "llm_reply", "text": "Happy to help!"}


# --- imported flowcharts: a branch's question asked with the node that leads to it ---------------------

FLOW = Workflow.model_validate({
    "name": "pay_fee", "description": "Pay the apartment fee.", "domain": "housing", "role": "manager",
    "answers": [{"name": "ask_pay_now", "template": "Ask if the user wants to pay now"},
                {"name": "take_payment", "template": "Take the payment."},
                {"name": "remind_later", "template": "Remind the user to pay later."}],
    "procedure": "ANSWER.ask_pay_now()\nif COND(\"Ask if the user wants to pay now -> Pay now\"):\n"
                 "    ANSWER.take_payment()\nelse:\n    ANSWER.remind_later()\n",
})


def test_a_flowchart_branch_is_asked_with_its_node_and_the_yes_no_decides_it():
    fr, prop = step(FLOW, frame(FLOW), "I want to pay my apartment fee")
    assert prop["name"] == "ask_pay_now" and prop["text"].endswith("Is it Pay now? (yes/no)")
    key = prop["args"]["slots"][0]
    fr = answered(fr, "ask_pay_now", asked=[key])
    _, prop = step(FLOW, fr, "No, later please")
    assert prop["name"] == "remind_later"


def test_a_pdl_authors_condition_keeps_its_own_turn():
    wf = FLOW.model_copy(update={"procedure": FLOW.procedure.replace(" -> Pay now", "")})
    _, prop = step(wf, frame(wf), "I want to pay my apartment fee")
    assert prop["name"] == "ask_pay_now" and prop["text"] == "Ask if the user wants to pay now" \
        and "args" not in prop
