"""Two requests in one message: the parts each ranked on their own, the second queued on the stack and
started when the first is finished; values that point into what a lookup returned."""

from __future__ import annotations

from dialogue.commands import ApplyEnv, StartFlow, apply_all
from dialogue.frames import merge_stack, top
import math

import pytest
from pydantic import ValidationError

from dialogue.understanding.requests import (CUT_FEATURES, MIN_LEAD, MIN_PROBABILITY, RequestsModel, ThresholdRule,
                                             cut_features, cuts, is_request, rule_of, two_requests)
from dialogue.understanding.ranker import log_softmax
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


def test_model_files_before_the_classifier_keep_the_threshold_rule_they_stored():
    assert rule_of({"ranker": {"requests": {"min_probability": 0.35, "min_lead": 0.05}}}) == ThresholdRule(0.35, 0.05)
    assert rule_of({"ranker": {"weights": {}}}) == rule_of(None) == ThresholdRule(MIN_PROBABILITY, MIN_LEAD)
    assert (MIN_PROBABILITY, MIN_LEAD) == (0.5, 0.0)
    # a part whose own pick is about 0.4 sure counts under a threshold stored below that, not under 0.5
    msg = "where is ORD-7003 and please cancel ORD-7010"
    assert two_requests(msg, "cancel", _flat_rank, lambda t: True) is None
    assert two_requests(msg, "cancel", _flat_rank, lambda t: True, ThresholdRule(0.35)) is not None
    # each part must be surer of its pick than the whole message is, by the stored lead (the whole: about 0.30)
    assert two_requests(msg, "cancel", _flat_rank, lambda t: True, ThresholdRule(0.35, 0.1)) is None


def _flat_rank(text: str):  # each part's own pick is only about 0.4 sure: two rivals stay close
    return [("track", 1.0 if "where" in text else 0.0), ("cancel", 1.0 if "cancel" in text else 0.0),
            ("other", 0.6), ("more", 0.6)]


def _classifier(**coef: float) -> RequestsModel:
    """A classifier that weighs only the named cut features (unit scale, centred at 0)."""
    n = len(CUT_FEATURES)
    return RequestsModel(features=list(CUT_FEATURES), mean=[0.0] * n, scale=[1.0] * n,
                         coef=[coef.get(k, 0.0) for k in CUT_FEATURES], intercept=-1.0)


def test_the_classifier_reads_where_the_picks_stand_not_how_sure_they_are():
    msg = "where is ORD-7003 and please cancel ORD-7010"
    # two parts whose picks each lead their own ranking and stand first and second in the whole's
    rule = _classifier(head_rank=-2.0, tail_rank=-2.0, top_two_are_parts=4.0)
    found = two_requests(msg, "cancel", _flat_rank, lambda t: True, rule)
    assert found is not None and [r.workflow for r in found] == ["track", "cancel"]
    assert max(r.probability for r in found) < MIN_PROBABILITY  # the former rule would read one request
    # the same rankings on a sharper scale (logits x 4): the same ranks, the same decision
    sharp = lambda t: [(n, 4 * s) for n, s in _flat_rank(t)]  # noqa: E731
    assert two_requests(msg, "cancel", sharp, lambda t: True, rule) is not None
    # a part whose pick stands low in the whole message's ranking adds to the other request: one request
    assert two_requests(msg, "cancel", _flat_rank, lambda t: True, _classifier(head_rank=-2.0, tail_rank=-2.0)) is None


def test_cut_features_are_ranks_gaps_and_marks_of_the_three_rankings():
    head, tail = "where is ORD-7003", "please cancel ORD-7010"
    whole = log_softmax(_rank(f"{head} and {tail}"))
    f = cut_features(head, tail, log_softmax(_rank(head)), log_softmax(_rank(tail)), whole)
    assert set(f) == set(CUT_FEATURES)
    assert f["head_rank"] + f["tail_rank"] == 1.0 and f["top_two_are_parts"] == 1.0 and f["whole_is_part"] == 1.0
    assert f["head_margin"] == pytest.approx(4.0) and f["cross_head"] == 1.0  # cancel: second in the head's ranking
    assert f["head_question"] == 1.0 and f["tail_request"] == 1.0
    assert f["head_words"] == pytest.approx(math.log(4))  # where, is, ORD, 7003
    # the same under a shift of every logit (a softmax's log-probabilities do not move)
    shifted = cut_features(head, tail, log_softmax([(n, s + 7) for n, s in _rank(head)]),
                           log_softmax([(n, s - 3) for n, s in _rank(tail)]), whole)
    assert shifted == pytest.approx(f)


def test_the_stored_classifier_is_validated():
    n = len(CUT_FEATURES)
    good = {"features": list(CUT_FEATURES), "mean": [0.0] * n, "scale": [1.0] * n, "coef": [0.0] * n,
            "intercept": 0.0, "cuts": {"rows": 3}}
    assert isinstance(rule_of({"ranker": {"requests": good}}), RequestsModel)
    with pytest.raises(ValidationError):
        rule_of({"ranker": {"requests": {**good, "coef": [0.0]}}})
    with pytest.raises(ValidationError):
        RequestsModel.model_validate({**good, "features": ["probability", *CUT_FEATURES[1:]]})
    with pytest.raises(ValidationError):
        RequestsModel.model_validate({**good, "threshold": 1.0})


def test_the_bundled_model_decides_with_a_classifier():
    import json

    from dialogue.understanding.ranker import MODEL_PATH

    rule = rule_of(json.loads(MODEL_PATH.read_text(encoding="utf-8")))
    assert isinstance(rule, RequestsModel) and rule.features == list(CUT_FEATURES)


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
    # an item named by most of its words; its price or size numbers are no part of its name
    shop = {"items": "Trail running shoes, size 39 (€119.95); Ceramic vase (€30.00)"}
    assert referred_values("I'd like to send back the running shoes", RETURNS, shop, ["item"]) == \
        {"item": "Trail running shoes, size 39"}
    assert referred_values("the vase please", RETURNS, shop, ["item"]) == {"item": "Ceramic vase"}
    assert referred_values("the shoes and the vase", RETURNS, shop, ["item"]) == {}  # both mentioned: neither
    assert referred_values("size 39", RETURNS, shop, ["item"]) == {}
    one = {"items": "Trail running shoes, size 39 (€119.95)"}  # a one-item order lists no semicolon
    assert referred_values("the trail running shoes", RETURNS, one, ["item"]) == {"item": "Trail running shoes, size 39"}
    assert referred_values("they're too small", RETURNS, one, ["item"]) == {}


def test_an_asked_reference_pointed_at_in_a_listing_is_its_id():
    """"the unknown merchant one" to "which transactions?" names the listed transaction: its reference goes to
    the id slot (``transaction_ids`` points into ``transactions``), not the words that point at it."""
    from dialogue.understanding.slots import referents, slot_commands

    fraud = Workflow.model_validate({
        "name": "report_fraud", "description": "Dispute card transactions.", "domain": "d", "role": "r",
        "slots": [{"name": "transaction_ids", "type": "string",
                   "description": "References of the disputed transactions, e.g. TX-5003, TX-5004"}]})
    assert "transactions" in referents("transaction_ids") and "orders" in referents("order_id")
    listing = "TX-5006 2026-11-10 Corner Grocer €52.10; TX-5007 2026-11-12 Unknown Merchant €430.00"
    frame = {"slots": {}, "results": {"transactions": listing}}
    cmds, _ = slot_commands("the unknown merchant one, 430 euros", fraud, frame, ["transaction_ids"], 3)
    assert [(c.slot, c.value) for c in cmds] == [("transaction_ids", "TX-5007")]
    cmds, _ = slot_commands("TX-5006", fraud, frame, ["transaction_ids"], 3)
    assert [(c.slot, c.value) for c in cmds] == [("transaction_ids", "TX-5006")]


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
    from types import SimpleNamespace as NS

    from evals.switch_train import fit_requests_model, requests_accuracy, requests_cuts, requests_examples

    firsts = [("where is ORD-7003", "track"), ("please cancel ORD-7010", "cancel"), ("cancel ORD-7011 now", "cancel")]
    more = [("where is ORD-7003 and where is ORD-7004", "track"), ("I would like to see my order", "track")]
    singles, pairs = requests_examples(firsts, more)
    # only a single request that could be read as two is an example of one (the others never split)
    assert singles == [("where is ORD-7003 and where is ORD-7004", "track")]
    # consecutive first requests for different workflows, in the order said
    assert pairs == [("where is ORD-7003 and please cancel ORD-7010", ("track", "cancel"))]
    # of a dialogue: its first request with its next turn on the same workflow (a detail: one request) and
    # with its later request for another workflow (two)
    turn = lambda text, gold: NS(speaker="user", scored=True, gold=gold, text=text)  # noqa: E731
    dlg = NS(turns=[turn("where is ORD-7003?", "track"), turn("could you check it by email please", "track"),
                    turn("ok. Please cancel ORD-7010 then", "cancel")])
    more_singles, more_pairs = requests_examples([], [], [dlg])
    assert more_singles == [("where is ORD-7003? and could you check it by email please", "track")]
    assert more_pairs == [("where is ORD-7003? and ok. Please cancel ORD-7010 then", ("track", "cancel"))]
    messages = requests_cuts(singles, pairs, _rank, lambda t: True)
    assert requests_accuracy(messages, ThresholdRule()) == {"one": 1.0, "two": 1.0, "mean": 1.0,
                                                            "messages": {"one": 1, "two": 1}}
    # a lead no part reaches reads every message as one request
    assert requests_accuracy(messages, ThresholdRule(0.5, 0.99))["two"] == 0.0


def test_the_classifier_is_fitted_on_the_cuts_that_make_the_gold_two_requests():
    from dialogue.understanding.requests import Cut, Request

    from evals.switch_train import fit_requests_model, requests_accuracy

    def cut(first: str, second: str, tail_rank: float) -> Cut:
        f = dict.fromkeys(CUT_FEATURES, 0.0) | {"tail_rank": tail_rank}
        return Cut(Request("a", first, 0.4), Request("b", second, 0.4), {first: -1.0, second: -2.0}, f)

    # two requests: the tail's pick stands second in the whole's ranking; one request: it stands far down
    twos = [([cut("track", "cancel", 1.0)], ("track", "cancel")), ([cut("pay", "block", 1.0)], ("pay", "block"))]
    ones = [([cut("track", "refund", 5.0)], None), ([cut("book", "search", 4.0)], None)]
    # a cut of a two-request message whose picks are not the gold ones is a cut not to take
    wrong = [([cut("track", "refund", 5.0), cut("track", "cancel", 1.0)], ("track", "cancel"))]
    messages = (twos + ones + wrong) * 3
    fit = fit_requests_model(messages)
    assert fit["cuts"] == {"rows": 18, "two": 9}
    rule = RequestsModel.model_validate(fit)
    assert fit["coef"][CUT_FEATURES.index("tail_rank")] < 0
    assert requests_accuracy(messages, rule)["mean"] == 1.0
    assert requests_accuracy(messages, ThresholdRule())["two"] == 0.0  # every part 0.4 sure: the former rule splits none
