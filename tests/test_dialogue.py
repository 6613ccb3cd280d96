"""The dialogue layer: one condition evaluator, the stack reducer, the commands, the check registry,
and immutable resources under concurrent runs with different contexts."""

from __future__ import annotations

import ast
import concurrent.futures as cf
import dataclasses
import uuid

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from dialogue.commands import ApplyEnv, CancelFlow, ResumeFlow, SetSlot, StartFlow, apply_all, parse
from dialogue.control.checks import CHECKS, CheckEnv, run_checks
from dialogue.frames import merge_stack, new_frame, this_turn, top
from graph.state import active_workflow, interrupted_workflows
from nodes.tools import confirmed
from workflows.semantics import UNKNOWN, Scope, decided, evaluate
from workflows.text import yes_no


def _cond(src: str):
    return ast.parse(src, mode="eval").body


@pytest.mark.parametrize("src,slots,expected", [
    ("confirmed == True", {"confirmed": "yes"}, True),
    ("party_size > 4", {"party_size": "6"}, True),
    ("party_size > 4", {"party_size": 3}, False),
    ("kind in ['lost', 'stolen']", {"kind": "Stolen"}, True),
])
def test_interpreter_and_controller_modes_agree_on_decided_values(src, slots, expected):
    scope = Scope(slots=slots)
    assert decided(evaluate(_cond(src), scope)) is expected  # the interpreter's mode
    assert decided(evaluate(_cond(src), scope, missing=UNKNOWN)) is expected  # the controllers' mode


def test_controller_mode_abstains_where_the_interpreter_takes_the_else_branch():
    assert evaluate(_cond("party_size > 4"), Scope(), missing=UNKNOWN) is UNKNOWN
    assert evaluate(_cond("party_size > 4"), Scope()) is False


def _env(turn=1, done=frozenset()):
    return ApplyEnv(turn=turn, has_workflow=lambda n: n in {"a", "b", "c"},
                    finished=lambda f: f["workflow"] in done, invalidate=lambda f, changed: None)


def test_start_interrupt_resume_cancel():
    stack = apply_all([], [StartFlow(workflow="a", turn=1)], _env())
    stack = apply_all(stack, [SetSlot(slot="x", value=1, turn=1)], _env())
    stack = apply_all(stack, [StartFlow(workflow="b", turn=2)], _env(2))
    assert active_workflow({"stack": stack}) == "b" and interrupted_workflows({"stack": stack}) == ["a"]
    stack = apply_all(stack, [ResumeFlow(workflow="a", turn=3)], _env(3))
    assert top(stack)["workflow"] == "a" and top(stack)["slots"] == {"x": 1}
    assert interrupted_workflows({"stack": stack}) == ["b"]
    stack = apply_all(stack, [CancelFlow(workflow="a", turn=4)], _env(4))
    assert top(stack) is None and interrupted_workflows({"stack": stack + [new_frame("c", 4)]}) == ["b"]


def test_a_finished_workflow_is_dropped_not_interrupted():
    stack = apply_all([], [StartFlow(workflow="a", turn=1)], _env())
    stack = apply_all(stack, [StartFlow(workflow="b", turn=2)], _env(2, done=frozenset({"a"})))
    assert [f["workflow"] for f in stack] == ["b"]


def test_commands_round_trip_and_unresolved_search_changes_nothing():
    c = StartFlow(query="find me a table", turn=2)
    assert parse(c.model_dump()) == c
    assert apply_all([], [c], _env()) == []
    with pytest.raises(Exception):
        parse({"command": "no_such_command"})


def test_stack_reducer_applies_operations_without_mutating():
    frame = new_frame("a", 1)
    old = [frame]
    new = merge_stack(old, [{"op": "call", "frame": frame["id"], "result": {"ok": 1},
                             "call": {"api": "x", "args": {}, "status": "ok", "turn": 1}}])
    new = merge_stack(new, {"op": "answer", "frame": frame["id"], "answer": "done_msg", "asked": ["y"], "done": True})
    assert new[0]["executed"] == ["x", "done_msg"] and new[0]["results"] == {"ok": 1} and new[0]["status"] == "done"
    assert old[0]["executed"] == [] and old[0]["status"] == "active"
    with pytest.raises(ValueError):
        merge_stack(old, {"op": "bogus"})


def test_per_turn_lists_keep_the_newest_turn():
    assert this_turn([{"turn": 1, "a": 1}], [{"turn": 2, "b": 2}]) == [{"turn": 2, "b": 2}]
    assert this_turn([{"turn": 2, "a": 1}], [{"turn": 2, "b": 2}]) == [{"turn": 2, "a": 1}, {"turn": 2, "b": 2}]


def test_checks_are_a_registry_switched_off_through_the_context():
    from graph.context import Context

    env = CheckEnv(turn=1, max_turns=40, max_api_repeats=3)
    bad = {"kind": "tool", "name": "nope", "args": {}}
    assert any(not v["ok"] for v in run_checks(bad, None, {}, env))
    off = Context(disabled_checks="all").disabled_check_names
    assert off == frozenset(CHECKS) and run_checks(bad, None, {}, env, off) == []


def test_one_yes_no_reading():
    assert yes_no("yes please") is True and yes_no("no thanks") is False and yes_no("Casa Fiorella") is None
    assert confirmed("yes, go ahead") and not confirmed("no, wait") and not confirmed("hmm")


@pytest.mark.slow
def test_concurrent_runs_with_different_contexts_never_see_each_others_settings(agent_context, tmp_path):
    """20 runs on one compiled graph, half on the bundled library with hybrid retrieval, half on a
    one-workflow library with BM25: each finds only its own library's workflows."""
    import shutil

    from graph.agent import build_agent
    from workflows.library import bundled_library_path

    small = tmp_path / "small"
    src = bundled_library_path() / "retail"
    shutil.copytree(src, small / "retail")
    for role in (small / "retail").iterdir():
        if role.is_dir():
            for f in role.glob("*.yaml"):
                if f.name != "_role.yaml" and f.stem != "track_order":
                    f.unlink()
    # the scope gate off there too: a table request is far from the only workflow, which is the point here
    other = dataclasses.replace(agent_context, library=str(small), retriever="bm25",
                                store_dir=str(tmp_path / "store-small"), scope_gate=False)
    graph = build_agent(checkpointer=InMemorySaver())

    def run(i: int) -> tuple[int, str | None]:
        ctx = other if i % 2 else agent_context
        cfg = {"configurable": {"thread_id": uuid.uuid4().hex}}
        out = graph.invoke({"messages": [HumanMessage("I want to book a table at Casa Fiorella for 2")]}, cfg,
                           context=ctx)
        return i, active_workflow(out)

    with cf.ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, range(20)))
    for i, wf in results:
        assert wf == ("track_order" if i % 2 else "book_table"), (i, wf)


def test_an_instruction_is_not_taken_as_the_free_text_answer():
    """"back to my booking" while the agent waits for a name is navigation, not the guest's name."""
    from dialogue.execution.interpreter import Interpreter
    from dialogue.turn import make_env, read_turn
    from dialogue.understanding.navigation import reading_of
    from workflows.library import bundled_library_path, load_library

    lib = load_library(bundled_library_path())
    wf = lib.workflows["book_table"]
    interps = {wf.name: Interpreter(wf)}
    frame = {**new_frame("book_table", 1), "asked": ["guest_name"],
             "slots": {"restaurant": "Casa Fiorella", "party_size": 2}}
    env = make_env(2, lib.workflows, interps)
    for text, taken in (("back to my booking", False), ("can you check my balance", False), ("Alice Smith", True)):
        stack, _ = read_turn([frame], wf, interps[wf.name], reading_of(text), set(), env)
        assert ("guest_name" in stack[-1]["slots"]) is taken, text
