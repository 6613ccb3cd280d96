"""Pre/post-decision controllers: one accept and one reject test per check, hints, safe replies."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from langgraph.runtime import Runtime

from types import SimpleNamespace

from dialogue.control import checks as _checks
from dialogue.control.checks import CheckEnv
from dialogue.control.safe_reply import SAFE_REPLY
from dialogue.frames import new_frame, scope_of
from graph.context import Context
from graph.resources import get_resources
from nodes import controller as _nodes

C = SimpleNamespace(**{n: getattr(_checks, n) for n in dir(_checks) if n.startswith("check_")},
                    MAX_TOOL_CALLS_PER_TURN=_checks.MAX_TOOL_CALLS_PER_TURN, SAFE_REPLY=SAFE_REPLY,
                    post_controller=_nodes.post_controller, pre_controller=_nodes.pre_controller,
                    route_after_post=_nodes.route_after_post)

WORKFLOW = """
name: book_table
description: Reserve a table at one of our restaurants.
domain: dining
role: host
slots:
  - {name: restaurant, description: the restaurant}
  - {name: party_size, type: integer, description: how many guests}
  - {name: time, description: the date and time}
  - {name: guest_name, description: the name for the booking}
apis:
  - name: check_availability
    description: Is a table free?
    parameters:
      type: object
      required: [restaurant, party_size, time]
      properties: {restaurant: {type: string}, party_size: {type: integer, minimum: 1}, time: {type: string}}
    returns: [available, alternatives]
    binding: {BINDING_CHECK}
  - name: book
    description: Book the table
    parameters:
      type: object
      required: [restaurant, party_size, time, guest_name]
      properties: {restaurant: {type: string}, party_size: {type: integer}, time: {type: string}, guest_name: {type: string}}
    returns: [booking_id]
    precondition: [check_availability]
    irreversible: true
    binding: {BINDING_BOOK}
answers:
  - {name: ask_details, template: "Which restaurant, for how many people, and when?"}
  - {name: offer_alternatives, template: "Sorry, $time is taken. I can offer $alternatives.", precondition: [check_availability]}
  - {name: confirm_booking, template: "Booked! Your reference is $booking_id.", precondition: [book]}
procedure: |
  [restaurant, party_size, time] = ANSWER.ask_details()
  [available, alternatives] = API.check_availability(restaurant, party_size, time)
  if available:
      [guest_name] = ANSWER.request_information("guest_name")
      [booking_id] = API.book(restaurant, party_size, time, guest_name)
      ANSWER.confirm_booking()
  else:
      ANSWER.offer_alternatives()
"""


def make_library(root: Path, check: str = "simulate: true", book: str = "simulate: true") -> Path:
    """A one-workflow library (written by the tests) with the given bindings."""
    role = root / "dining" / "host"
    role.mkdir(parents=True, exist_ok=True)
    (root / "dining" / "_domain.yaml").write_text("name: dining\ndescription: Restaurants.\n")
    (role / "_role.yaml").write_text("name: host\ndomain: dining\ndescription: Takes bookings.\n")
    (role / "book_table.yaml").write_text(textwrap.dedent(WORKFLOW).replace("BINDING_CHECK", check)
                                          .replace("BINDING_BOOK", book))
    return root


@pytest.fixture
def ctx(tmp_path):
    return Context(library=str(make_library(tmp_path / "lib")), store_dir=str(tmp_path / "store"),
                   max_attempts=3, max_api_repeats=2, max_turns=10)


ARGS = {"restaurant": "Luigi", "party_size": 2, "time": "Fri 19:30"}
BOOK = {**ARGS, "guest_name": "Ada"}


def state(**progress) -> dict:
    """A thread state whose active frame holds ``progress`` (``call_args`` are the frame's calls;
    ``attempts`` earlier rejected proposals of this turn)."""
    turn = progress.pop("turn", 1)
    attempts = progress.pop("attempts", 0)
    proposal = progress.pop("proposal", None)
    frame = {**new_frame("book_table", 1), **progress, "calls": progress.pop("call_args", [])}
    frame.pop("call_args", None)
    violations = [{"controller": "x", "ok": False, "reason": "earlier", "turn": turn, "attempt": i + 1, "at": ""}
                  for i in range(attempts)]
    return {"turn": turn, "stack": [frame], "violations": violations, "proposal": proposal, "reading": {}}


def run_check(check, proposal, ctx, **progress):
    st = state(**progress)
    frame = st["stack"][-1]
    wf = get_resources(ctx).library.workflows["book_table"]
    env = CheckEnv(turn=st["turn"], max_turns=ctx.max_turns, max_api_repeats=ctx.max_api_repeats,
                   scope=scope_of(frame), procedure=get_resources(ctx).interpreters["book_table"].procedure)
    return check(proposal, wf, frame, env)


def attempts(st, out) -> int:
    return len({v["attempt"] for v in (st.get("violations") or []) + (out.get("violations") or [])})


def tool(name, args):
    return {"kind": "tool", "name": name, "args": dict(args), "call_id": "c1"}


def reply(name, text):
    return {"kind": "reply", "name": name, "text": text}


CHECKED = dict(executed=["ask_details", "check_availability"],
               results={"available": True, "alternatives": []},
               call_args=[{"api": "check_availability", "args": ARGS, "status": "ok", "turn": 1}])


# --- one accept + one reject per check -------------------------------------------------------------

def test_known_accepts_declared_api_and_answer(ctx):
    assert run_check(C.check_known, tool("check_availability", ARGS), ctx)["ok"]
    assert run_check(C.check_known, reply("ask_details", "Which restaurant?"), ctx)["ok"]


def test_known_rejects_unknown_names(ctx):
    v = run_check(C.check_known, tool("cancel_everything", {}), ctx)
    assert not v["ok"] and "cancel_everything" in v["reason"] and "check_availability" in v["reason"]
    assert not run_check(C.check_known, reply("invented_answer", "hi"), ctx)["ok"]


def test_dependency_accepts_when_precondition_done(ctx):
    assert run_check(C.check_dependency, tool("book", BOOK), ctx, **CHECKED)["ok"]


def test_dependency_rejects_booking_before_check(ctx):
    v = run_check(C.check_dependency, tool("book", BOOK), ctx, executed=["ask_details"])
    assert not v["ok"] and "check_availability" in v["reason"]


def test_dependency_rejects_announcing_a_booking_never_made(ctx):
    v = run_check(C.check_dependency, reply("confirm_booking", "Booked! Your reference is X1."), ctx, **CHECKED)
    assert not v["ok"] and "book" in v["reason"]


def test_dependency_rejects_changed_date_after_check(ctx):
    v = run_check(C.check_dependency, tool("book", {**BOOK, "time": "Sat 20:00"}), ctx, **CHECKED)
    assert not v["ok"] and "time" in v["reason"] and "Fri 19:30" in v["reason"]


def test_branch_accepts_booking_when_available(ctx):
    assert run_check(C.check_branch, tool("book", BOOK), ctx, **CHECKED)["ok"]


def test_branch_rejects_booking_when_not_available(ctx):
    prog = {**CHECKED, "results": {"available": False, "alternatives": ["20:00"]}}
    v = run_check(C.check_branch, tool("book", BOOK), ctx, **prog)
    assert not v["ok"] and "available" in v["reason"]
    # ... and the else branch is the reachable one
    assert run_check(C.check_branch, reply("offer_alternatives", "Sorry"), ctx, **prog)["ok"]


def test_repeat_accepts_below_limit(ctx):
    assert run_check(C.check_repeat, tool("check_availability", ARGS), ctx, **CHECKED)["ok"]


def test_repeat_rejects_past_limit(ctx):
    prog = {**CHECKED, "call_args": CHECKED["call_args"] * 2}
    v = run_check(C.check_repeat, tool("check_availability", ARGS), ctx, **prog)
    assert not v["ok"] and "limit 2" in v["reason"]
    # different arguments are a different call
    assert run_check(C.check_repeat, tool("check_availability", {**ARGS, "party_size": 3}), ctx, **prog)["ok"]


def test_args_accepts_valid_arguments(ctx):
    assert run_check(C.check_args, tool("check_availability", ARGS), ctx)["ok"]


def test_args_rejects_schema_violations_naming_tool_and_field(ctx):
    v = run_check(C.check_args, tool("check_availability", {"restaurant": "Luigi", "party_size": "two"}), ctx)
    assert not v["ok"]
    assert "check_availability" in v["reason"] and "'time'" in v["reason"] and "'party_size'" in v["reason"]


def test_turns_accepts_within_limit(ctx):
    assert run_check(C.check_turns, reply("ask_details", "Which?"), ctx, turn=10)["ok"]


def test_turns_rejects_over_limit(ctx):
    v = run_check(C.check_turns, reply("ask_details", "Which?"), ctx, turn=11)
    assert not v["ok"] and "10" in v["reason"]


def test_template_accepts_filled_text(ctx):
    assert run_check(C.check_template, reply("confirm_booking", "Booked! Your reference is B-1."), ctx)["ok"]


def test_template_rejects_unfilled_vars(ctx):
    v = run_check(C.check_template, reply("confirm_booking", "Booked! Your reference is $booking_id."), ctx)
    assert not v["ok"] and "$booking_id" in v["reason"]


def test_declined_accepts_other_turn_and_rejects_same_turn(ctx):
    prog = {**CHECKED, "call_args": CHECKED["call_args"] + [{"api": "book", "args": BOOK, "status": "cancelled",
                                                                "turn": 1}]}
    v = run_check(C.check_declined, tool("book", BOOK), ctx, **prog)
    assert not v["ok"] and "declined" in v["reason"]
    assert run_check(C.check_declined, tool("book", BOOK), ctx, **{**prog, "turn": 2})["ok"]


# --- the nodes ---------------------------------------------------------------------------------------

def test_post_controller_accepts_and_routes_to_tools(ctx):
    st = state(**CHECKED, proposal=tool("book", BOOK))
    out = C.post_controller(st, Runtime(context=ctx))
    assert "violations" not in out and out["action"]["name"] == "book"
    assert C.route_after_post({**st, **out}) == "tools"


def test_post_controller_fills_template_for_a_named_answer(ctx):
    st = state(**CHECKED, proposal={"kind": "reply", "name": "offer_alternatives"})
    st["stack"][-1]["results"] = {"available": False, "alternatives": ["20:00", "21:00"]}
    st["stack"][-1]["slots"] = {"time": "Fri 19:30"}
    out = C.post_controller(st, Runtime(context=ctx))
    assert out["action"]["text"] == "Sorry, Fri 19:30 is taken. I can offer 20:00 and 21:00."
    assert C.route_after_post({**st, **out}) == "respond"


def test_post_controller_rejects_then_gives_safe_reply(ctx):
    rt = Runtime(context=ctx)
    st = state(executed=["ask_details"], proposal=tool("book", BOOK))
    out = C.post_controller(st, rt)
    assert attempts(st, out) == 1 and out["action"] is None and out["violations"][0]["controller"] == "node_dependency"
    assert C.route_after_post({**st, **out}) == "executor"
    for n in (2, 3):
        st = {**st, "violations": st["violations"] + out["violations"], "proposal": tool("book", BOOK)}
        out = C.post_controller(st, rt)
        assert attempts(st, out) == n
    final = out["action"]
    assert final["kind"] == "reply" and final["name"] == C.SAFE_REPLY and "check availability has to be done first" in final["text"]
    assert len(st["violations"] + out["violations"]) == 3
    assert C.route_after_post({**st, **out}) == "respond"


def test_post_controller_safe_reply_for_missing_args_asks_for_them(ctx):
    st = state(**CHECKED, attempts=2, proposal=tool("book", ARGS))
    out = C.post_controller(st, Runtime(context=ctx))
    assert out["action"]["name"] == "request_information"
    assert out["action"]["args"]["slots"] == ["guest_name"]
    assert "the name for the booking" in out["action"]["text"]


def test_post_controller_over_max_turns_offers_a_human_at_once(ctx):
    st = state(turn=11, proposal=reply("ask_details", "Which restaurant?"))
    out = C.post_controller(st, Runtime(context=ctx))
    assert attempts(st, out) == 1 and "colleague" in out["action"]["text"]


def test_pre_controller_hints(ctx):
    st = state(turn=8, **CHECKED)
    out = C.pre_controller(st, Runtime(context=ctx))
    hints = "\n".join(out["hints"])
    assert set(out) == {"hints"}  # the pre-controller owns the hints and nothing else
    assert "confirm_booking is not callable yet: it needs book" in hints
    assert "check_availability was already called 1x" in hints
    assert "getting long" in hints
    assert "book is not callable yet" not in hints  # check_availability has run


def test_pre_controller_hints_branch_and_fresh_start(ctx):
    out = C.pre_controller(state(turn=1), Runtime(context=ctx))
    hints = "\n".join(out["hints"])
    assert "API book is not callable yet: it needs check_availability first." in hints
    assert "getting long" not in hints
    st = state(**{**CHECKED, "results": {"available": False}})
    hints = "\n".join(C.pre_controller(st, Runtime(context=ctx))["hints"])
    assert "API book is not callable now: `available` is false" in hints


def test_claim_accepts_neutral_free_text(ctx):
    assert run_check(C.check_claim, reply("llm_reply", "Sure, let me check that for you."), ctx, **CHECKED)["ok"]
    done = {**CHECKED, "executed": CHECKED["executed"] + ["book"]}
    assert run_check(C.check_claim, reply("llm_reply", "Booked! Your reference is B-7."), ctx, **done)["ok"]


def test_claim_rejects_free_text_announcing_a_booking_never_made(ctx):
    v = run_check(C.check_claim, reply("llm_reply", "Great news, booked! Your reference is B-7."), ctx, **CHECKED)
    assert not v["ok"] and "confirm_booking" in v["reason"] and "book" in v["reason"]


def test_claim_reads_the_statements_of_an_ask_not_its_questions(ctx):
    """A re-ask after a failed call may share an ANSWER's words in its question; a claim in its
    statements is still caught."""
    ask = {"kind": "reply", "name": "request_information", "args": {"slots": ["guest_name"]},
           "text": "I couldn't book with those details. Booked under which name? Your reference is?"}
    assert run_check(C.check_claim, ask, ctx, **CHECKED)["ok"]
    claim = {**ask, "text": "Booked! Your reference is B-7. Under which name?"}
    v = run_check(C.check_claim, claim, ctx, **CHECKED)
    assert not v["ok"] and "confirm_booking" in v["reason"]
    assert not run_check(C.check_claim, {**ask, "args": {}}, ctx, **CHECKED)["ok"]  # free text: every sentence


def test_repeat_rejects_a_second_successful_irreversible_call(ctx):
    booked = {**CHECKED, "executed": CHECKED["executed"] + ["book"],
              "call_args": CHECKED["call_args"] + [{"api": "book", "args": BOOK, "status": "ok", "turn": 1}]}
    v = run_check(C.check_repeat, tool("book", BOOK), ctx, **booked)
    assert not v["ok"] and "cannot be undone" in v["reason"]
    failed = {**booked, "call_args": CHECKED["call_args"] + [{"api": "book", "args": BOOK, "status": "error"}]}
    assert run_check(C.check_repeat, tool("book", BOOK), ctx, **failed)["ok"]


def test_turn_budget_accepts_a_normal_turn_and_rejects_a_runaway_one(ctx):
    calls = [{"api": "check_availability", "args": {**ARGS, "party_size": i}, "status": "ok", "turn": 1}
             for i in range(C.MAX_TOOL_CALLS_PER_TURN)]
    assert run_check(C.check_turn_budget, tool("check_availability", ARGS), ctx, call_args=calls[:3])["ok"]
    v = run_check(C.check_turn_budget, tool("check_availability", ARGS), ctx, call_args=calls)
    assert not v["ok"] and "limit" in v["reason"]
    out = C.post_controller(state(call_args=calls, proposal=tool("check_availability", ARGS)), Runtime(context=ctx))
    assert out["action"]["kind"] == "reply" and "colleague" in out["action"]["text"]
