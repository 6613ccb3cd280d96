"""Two requests in one message: the parts each ranked on their own, the second queued on the stack and
started when the first is finished; values that point into what a lookup returned."""

from __future__ import annotations

from dialogue.commands import ApplyEnv, StartFlow, apply_all
from dialogue.frames import merge_stack, top
from dialogue.understanding.requests import MIN_LEAD, MIN_PROBABILITY, cuts, fitted, is_request, two_requests
from dialogue.understanding.slots import listed, referents, referred_values
from workflows.pdl import Workflow


def _env(turn: int = 1) -> ApplyEnv:
    return ApplyEnv(turn=turn, has_workflow=lambda n: True, finished=lambda f: False, invalidate=lambda f, c: None)


# a ranking that knows two tasks by one word each (logits), the way the retriever node's ranking would
def _rank(text: str):
    low = text.lower()
    return [("track", 2.0 if "where" in low else -2.0), ("cancel", 2.0 if "cancel" in low else -2.0),
            ("other", -2.0)]


def test_two_parts_that_each_pick_their_own_task_are_two_requests_in_the_order_said():
    found = two_requests("where is ORD-7003 and please cancel ORD-7010", "cancel", _rank, lambda t: True)
    assert found is not None
    first, second = found
    assert (first.workflow, first.text) == ("track", "where is ORD-7003")
    assert (second.workflow, second.text) == ("cancel", "please cancel ORD-7010")


def test_a_part_that_picks_no_task_of_its_own_or_is_out_of_scope_makes_one_request():
    # the tail adds a value: its ranking is flat, so its own pick is not confident
    assert two_requests("where is my parcel ORD-7003 and make it quick", "track", _rank, lambda t: True) is None
    assert two_requests("where is ORD-7003 and please cancel ORD-7010", "cancel", _rank,
                        lambda t: "cancel" not in t) is None
    # the whole message's pick must be one of the parts' picks
    assert two_requests("where is ORD-7003 and please cancel ORD-7010", "other", _rank, lambda t: True) is None
    # a part that only sets the scene asks for nothing itself
    assert not is_request("I would be leaving town soon") and is_request("please cancel ORD-7010")
    assert is_request("where is ORD-7003")
    # a new sentence alone is no cut: it mostly gives details
    assert cuts("I forgot my password. customer C-1003 text me") == []


def test_the_threshold_is_the_one_fitted_into_the_model_and_the_former_one_without_it():
    assert fitted({"ranker": {"requests": {"min_probability": 0.35, "min_lead": 0.05}}}) == (0.35, 0.05)
    assert fitted({"ranker": {"weights": {}}}) == fitted(None) == (MIN_PROBABILITY, MIN_LEAD) == (0.5, 0.0)
    # a part whose own pick is about 0.4 sure counts under a threshold fitted below that, not under 0.5
    def rank(text: str):
        return [("track", 1.0 if "where" in text else 0.0), ("cancel", 1.0 if "cancel" in text else 0.0),
                ("other", 0.6), ("more", 0.6)]
    msg = "where is ORD-7003 and please cancel ORD-7010"
    assert two_requests(msg, "cancel", rank, lambda t: True) is None
    assert two_requests(msg, "cancel", rank, lambda t: True, min_probability=0.35) is not None
    # each part must be surer of its pick than the whole message is, by the fitted lead (the whole: about 0.30)
    assert two_requests(msg, "cancel", rank, lambda t: True, min_probability=0.35, min_lead=0.1) is None


def test_a_queued_request_waits_below_the_active_one_and_starts_when_it_is_finished():
    stack = apply_all([], [StartFlow(workflow="track", turn=1), StartFlow(workflow="cancel", queued=True, turn=1)],
                      _env())
    assert [(f["workflow"], f["status"], bool(f.get("queued"))) for f in stack] == \
        [("cancel", "interrupted", True), ("track", "active", False)]
    started = merge_stack(stack, [{"op": "answer", "frame": stack[1]["id"], "answer": "shipped", "asked": [],
                                   "done": False}, {"op": "start", "frame": stack[0]["id"]}])
    assert [(f["workflow"], f["status"], f.get("queued")) for f in started] == [("cancel", "active", False)]
    assert top(stack)["workflow"] == "track"  # the reducer never mutates


RETURNS = Workflow.model_validate({
    "name": "return_item", "description": "Send back an item.", "domain": "retail", "role": "returns",
    "slots": [{"name": "item", "description": "Which item of the order goes back"},
              {"name": "new_date", "type": "date", "description": "New day, YYYY-MM-DD"}],
})


def test_values_that_point_into_what_a_lookup_returned():
    assert referents("item") == ("items", "itemes") and "date" in referents("new_date")
    assert listed("Ceramic vase (€58.00); Table runner (€22.00)") == ["Ceramic vase", "Table runner"]
    assert listed("just one thing") is None
    values = {"items": "Ceramic vase (€58.00); Table runner (€22.00)", "date": "2026-11-27"}
    assert referred_values("the second one", RETURNS, values, ["item"]) == {"item": "Table runner"}
    assert referred_values("send back the table runner, it broke", RETURNS, values, ["item"]) == {"item": "Table runner"}
    assert referred_values("the ceramic vase or the table runner", RETURNS, values, ["item"]) == {}  # two named: neither
    assert referred_values("move it to 8pm same day", RETURNS, values, ["new_date"]) == {"new_date": "2026-11-27"}
    assert referred_values("move it to 8pm", RETURNS, values, ["new_date"]) == {}


def test_a_question_for_what_a_lookup_lists_comes_after_the_lookup():
    from dialogue.execution.interpreter import Interpreter
    from dialogue.execution.policy_offline import decide
    from dialogue.frames import new_frame
    from workflows.library import bundled_library_path, load_library

    wf = load_library(bundled_library_path()).workflows["return_item"]
    interp = Interpreter(wf)
    frame = new_frame("return_item", 1, {"order_id": "ORD-7011", "email": "nadia.okafor@example.com"})
    proposal = decide(wf, interp, frame, {"text": "I want to return something"}, [], [])
    assert (proposal["kind"], proposal["name"]) == ("tool", "verify_order")  # its items are what "item" picks from
    looked_up = {**frame, "executed": ["verify_order"], "results": {"items": "Ceramic vase (€58.00); Lamp (€9.00)"}}
    ask = decide(wf, interp, looked_up, {"text": ""}, [], [])
    assert ask["kind"] == "reply" and set(ask["args"]["slots"]) == {"item", "reason"}  # not the order again
    # without the order's details nothing can be looked up: the question comes first
    bare = decide(wf, interp, new_frame("return_item", 1), {"text": "I want to return something"}, [], [])
    assert bare["kind"] == "reply"


def test_a_workflow_that_does_both_makes_one_request():
    def rank(text: str):  # "both" reads a message naming both tasks, and its first part, best
        low = text.lower()
        scores = dict(_rank(text))
        scores["track"] = -2.0
        scores["both"] = (6.0 if "cancel" in low else 2.0) if "where" in low else -2.0
        return list(scores.items())
    assert two_requests("where is ORD-7003 and please cancel ORD-7010", "both", rank, lambda t: True) is None


def test_the_fit_reads_cuttable_single_requests_and_pairs_joined_by_and():
    from evals.switch_train import requests_accuracy, requests_examples

    firsts = [("where is ORD-7003", "track"), ("please cancel ORD-7010", "cancel"), ("cancel ORD-7011 now", "cancel")]
    more = [("where is ORD-7003 and where is ORD-7004", "track"), ("I would like to see my order", "track")]
    singles, pairs = requests_examples(firsts, more)
    # only a single request that could be read as two is an example of one (the others never split)
    assert singles == [("where is ORD-7003 and where is ORD-7004", "track")]
    # consecutive first requests for different workflows, in the order said
    assert pairs == [("where is ORD-7003 and please cancel ORD-7010", ("track", "cancel"))]
    acc = requests_accuracy(singles, pairs, _rank, lambda t: True, 0.5, 0.0)
    assert acc == {"one": 1.0, "two": 1.0, "mean": 1.0}
    # a lead no part reaches reads every message as one request
    assert requests_accuracy(singles, pairs, _rank, lambda t: True, 0.5, 0.99)["two"] == 0.0
