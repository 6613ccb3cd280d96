"""The learned executor policy (dialogue/execution/policy_learned.py): model-file loading and its errors,
the candidate generator and features on the demo desk's frames, the executor node's hook, the controllers
as the hard gate for a learned choice (an adversarial ranker trained to prefer invalid actions), the text
classifier baseline, and training + evaluation commands on a STAR sample (data-marked)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from dialogue.control.checks import CheckEnv, run_checks
from dialogue.execution.interpreter import Interpreter
from dialogue.execution.policy_learned import (BASE_FEATURES, DEFAULT_MODEL, INTENT_FEATURES, LearnedPolicy,
                                               PolicyError, candidates, features, load_policy)
from dialogue.execution.policy_offline import decide, same
from dialogue.frames import Frame, new_frame, scope_of, top
from dialogue.turn import make_env, read_turn
from dialogue.understanding.navigation import reading_of
from graph.context import Context
from workflows.library import bundled_library_path, load_library

DATA = Path(os.environ.get("FLOWDESK_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")


@pytest.fixture(scope="module")
def demo():
    return load_library(bundled_library_path())


def _state(wf, text: str, executed: list[str] | None = None):
    """The frame after reading ``text`` (as ``apply_commands`` does), the reading, the messages and the
    offline policy's proposal."""
    interp = Interpreter(wf)
    fr = Frame(**{**new_frame(wf.name, 1), "executed": list(executed or [])})
    reading = reading_of(text)
    stack, added = read_turn([fr], wf, interp, reading, set(), make_env(1, {wf.name: wf}, {wf.name: interp}))
    fr = top(stack)
    reading = {**reading, "slots_given": any(c.command in ("set_slot", "correct_slot") for c in added)}
    messages = [HumanMessage(text)]
    return interp, fr, reading, messages, decide(wf, interp, fr, reading, messages, [])


def test_policy_specs_and_bad_model_files(tmp_path):
    assert load_policy("interpreter") is None
    with pytest.raises(PolicyError, match="nope.json: no such model file"):
        load_policy(f"learned:{tmp_path / 'nope.json'}")
    with pytest.raises(PolicyError, match="executor_policy: 'bogus'"):
        load_policy("bogus")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": 1, "features": [], "booster": "x"}))
    with pytest.raises(PolicyError, match=r"bad\.json: field 'features'"):
        LearnedPolicy.load(bad)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format": 1, "features": ["something_else"], "booster": "x"}))
    with pytest.raises(PolicyError, match=r"old\.json: field 'features'"):
        LearnedPolicy.load(old)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(PolicyError, match=r"broken\.json"):
        LearnedPolicy.load(broken)


def test_the_bundled_model_is_the_gated_default_and_is_small_and_textless():
    from evals.train_executor import GATE_RULES_RIGHT

    assert Context().executor_policy == "auto"  # the bundled model where its file is present
    assert load_policy("interpreter") is None
    assert DEFAULT_MODEL.is_file() and DEFAULT_MODEL.stat().st_size < 2 * 1024 * 1024
    for spec in ("auto", "learned:"):
        policy = load_policy(spec)
        assert isinstance(policy, LearnedPolicy)
    assert policy.features[:len(BASE_FEATURES) + len(INTENT_FEATURES)] == BASE_FEATURES + INTENT_FEATURES
    # the default overrides the procedure only where its calibrated gate allows (sessions stay as good)
    gate = policy.model.gate
    assert gate is not None and gate.min_margin > 0 and 0 < gate.min_familiarity <= 1 \
        and gate.rules_right <= GATE_RULES_RIGHT
    # provenance is counts and names of tasks, never dialogue text
    assert set(policy.model.trained_on) >= {"dataset", "split", "turns", "dialogues", "tasks"}
    assert all(isinstance(v, (int, str, list)) for v in policy.model.trained_on.values())


def test_the_fast_predictor_scores_as_lightgbm_does():
    """The ranker calls LightGBM's C predictor directly (a third of its cost saved); the scores are the
    wrapper's, for one row, many rows and a matrix of the wrong width (which falls back to the wrapper)."""
    import numpy as np
    from lightgbm.basic import LightGBMError

    policy = load_policy("auto")
    rng = np.random.default_rng(0)
    for rows in (1, 7, 40):
        X = rng.normal(size=(rows, len(policy.features))).astype(np.float32) * 3
        assert np.allclose(policy._predict(X), policy.booster.predict(X, num_threads=1), rtol=0, atol=1e-9)
    with pytest.raises(LightGBMError, match="number of features"):
        policy._predict(np.zeros((2, len(policy.features) + 1), dtype=np.float32))


def test_candidates_are_the_actions_allowed_now(demo):
    wf = demo.workflows["book_table"]
    interp, fr, reading, messages, rules = _state(wf, "I'd like a table at Casa Fiorella for 2")
    cands = candidates(wf, interp, fr, rules, messages)
    assert cands[0].is_rules and cands[0].proposal == rules
    names = {(c.kind, c.name) for c in cands}
    assert ("api", "check_availability") in names
    assert ("api", "book") not in names  # its precondition (check_availability) has not run
    ran = set(fr.get("executed") or [])
    offered = {n for k, n in names if k == "answer"} | {rules.get("name")}
    assert {a.name for a in wf.answers if set(a.precondition) <= ran} <= offered
    assert "confirm_booking" not in offered  # its precondition (book) has not run
    # date and time are still missing: the rules' own question asks for them (no generic duplicate)
    assert cands[0].name == "ask_booking_details" and ("request", "request_information") not in names
    tf = features(wf, interp, fr, reading, messages, cands)
    assert len(tf.rows) == len(cands) and all(len(tf.row(i)) == len(BASE_FEATURES) for i in range(len(cands)))
    # token features never carry the workflow's own name words
    assert not {t.split("=", 1)[1] for ts in tf.toks for t in ts if t.startswith("tok=")} & {"book", "table"}
    col = BASE_FEATURES.index
    api = cands.index(next(c for c in cands if c.kind == "api" and c.name == "check_availability"))
    assert tf.row(api)[col("req_missing")] == 2 and tf.row(api)[col("params_filled")] == 0.5


def test_the_user_just_gave_this_slot_and_the_yes_no_reading(demo):
    wf = demo.workflows["book_table"]
    interp, fr, reading, messages, rules = _state(wf, "Casa Fiorella, 2 people, 2026-12-23 at 19:00",
                                                  executed=["ask_booking_details"])
    cands = candidates(wf, interp, fr, rules, messages)
    tf = features(wf, interp, fr, reading, messages, cands)
    ask = cands.index(next(c for c in cands if c.name == "ask_booking_details"))
    assert tf.row(ask)[BASE_FEATURES.index("target_just_given")] == 1.0
    assert tf.row(ask)[BASE_FEATURES.index("last_is_this")] == 1.0
    interp, fr, reading, messages, rules = _state(wf, "yes please")
    cands = candidates(wf, interp, fr, rules, messages)
    row = features(wf, interp, fr, reading, messages, cands).row(0)
    assert (row[BASE_FEATURES.index("user_yes")], row[BASE_FEATURES.index("user_no")]) == (1.0, 0.0)


def test_the_ranker_calls_no_tool_the_workflow_keeps(demo):
    """Calls stay where the procedure puts them: never an irreversible API, none after a result arrived
    this turn, none while the rules still collect a slot that call does not take, no repeat of a call
    that succeeded with the same arguments; the rules' own call is always a candidate."""
    from langchain_core.messages import ToolMessage

    from dialogue.execution.policy_learned import ranker_may_call

    wf = demo.workflows["return_item"]
    check, create = wf.api("check_return_eligibility"), wf.api("create_return")
    args = {"order_id": "ORD-7011", "item": "the ceramic vase"}
    assert ranker_may_call(check, args, set(), {"calls": []})
    assert not ranker_may_call(check, args, {"reason"}, {"calls": []})  # the reason is collected first
    assert not ranker_may_call(check, args, set(), {"calls": [{"api": check.name, "args": args, "status": "ok"}]})
    assert ranker_may_call(check, args, set(), {"calls": [{"api": check.name, "args": args, "status": "error"}]})
    refund = demo.workflows["refund_order"].api("refund_order")
    assert refund.irreversible and not ranker_may_call(refund, {"order_id": "ORD-7011"}, set(), {"calls": []})
    interp, fr, reading, messages, rules = _state(wf, "I want to return the ceramic vase from order ORD-7011")
    after = messages + [ToolMessage("{}", tool_call_id="c1")]
    for msgs, offered in ((messages, True), (after, False)):
        cands = candidates(wf, interp, {**fr, "executed": ["ask_return_details", "verify_order"]},
                           {"kind": "reply", "name": "x"}, msgs)
        assert any(c.kind == "api" and c.name == check.name for c in cands) is offered
        assert not any(c.kind == "api" and c.name == create.name for c in cands)


def test_a_call_the_rules_make_now_is_made(demo):
    policy = load_policy("auto")
    wf = demo.workflows["book_table"]
    interp, fr, reading, messages, rules = _state(wf, "A table at Casa Fiorella for 2 on 2026-12-23 at 19:00")
    assert rules["kind"] == "tool" and policy.choice(wf, interp, fr, reading, messages, rules, []) == (rules, 0)


def test_choose_never_returns_a_rejected_proposal(demo):
    policy = load_policy("auto")
    wf = demo.workflows["book_table"]
    interp, fr, reading, messages, rules = _state(wf, "I'd like a table at Casa Fiorella for 2 on 2026-12-23 at 19:00")
    first = policy.choose(wf, interp, fr, reading, messages, rules, [])
    second = policy.choose(wf, interp, fr, reading, messages, rules, [first])
    assert not same(second, first)


@pytest.fixture(scope="module")
def adversarial_model(tmp_path_factory, demo):
    """A real ranker trained to prefer a call whose required arguments are missing (what no wizard does)."""
    from evals.train_executor import TurnRows, candidate_label, fit

    wf = demo.workflows["book_table"]
    turns = []
    for i, text in enumerate(["hi", "Casa Fiorella for 2", "tomorrow at 19:00", "a table please", "Alice Smith",
                              "2026-12-23", "for four", "at 20:00"] * 8):
        interp, fr, reading, messages, rules = _state(wf, text)
        cands = candidates(wf, interp, fr, rules, messages)
        tf = features(wf, interp, fr, reading, messages, cands)
        bad = next((k for k, c in enumerate(cands) if c.kind == "api" and c.missing), None)
        if bad is not None:
            turns.append(TurnRows(f"task{i % 3}", i, tf, bad, "query", [candidate_label(c) for c in cands]))
    assert len(turns) >= 16
    # no Gate: the tests below are about the controllers, which must stop whatever the ranker prefers
    policy = fit(turns, rounds=30, min_tasks=1, info={"dataset": "adversarial"}, gate=False)
    return policy.save(tmp_path_factory.mktemp("adv") / "adversarial.json")


def test_the_gate_keeps_the_procedure_on_unfamiliar_workflows_and_small_margins(demo, adversarial_model):
    """The ranker replaces the rules' proposal only on a workflow whose node names it knows and by a margin
    calibrated on train (``Gate``); otherwise the procedure's step stands."""
    from dialogue.execution.policy_learned import Gate

    wf = demo.workflows["book_table"]
    base = LearnedPolicy.load(adversarial_model)
    interp, fr, reading, messages, rules = _state(wf, "A table at Casa Fiorella for 2 please")
    # ungated, it prefers the call without date and time (the controllers' pre-check then vetoes it)
    assert base.choice(wf, interp, fr, reading, messages, rules, [])[1] >= 1

    def gated(**kw):
        gate = Gate(**{"min_familiarity": 0.0, "min_margin": -1e9, "precision": 0.5, "rules_right": 0.05,
                       "overrides": 0.3, **kw})
        return LearnedPolicy(base.model.model_copy(update={"gate": gate}), "gated")

    # gated, a call while the rules collect a value it takes (date, time) is not even tried
    proposal, vetoed = gated().choice(wf, interp, fr, reading, messages, rules, [])
    assert vetoed == 0 and proposal.get("kind") != "tool"
    assert gated(min_familiarity=1.0).familiar(wf, interp) is False  # no tok= word of book_table is known
    # gated, the rules' step stands before any learned choice is even tried
    assert gated(min_familiarity=1.0).choice(wf, interp, fr, reading, messages, rules, []) == (rules, 0)
    assert gated(min_margin=1e9).choice(wf, interp, fr, reading, messages, rules, []) == (rules, 0)
    # a rejected rules' proposal is never the answer: the ranker's next choice is taken, whatever the margin
    assert not same(gated(min_margin=1e9).choose(wf, interp, fr, reading, messages, rules, [rules]), rules)


def test_the_gate_is_calibrated_on_held_out_scores():
    """Margin: the smallest one above which the rules' step was the logged action at most 2% of the time;
    familiarity: the lowest a training task reaches with the vocabulary of the other tasks."""
    from types import SimpleNamespace

    from evals.train_executor import TurnRows, calibrate

    def turn(task, gold, toks):
        tf = SimpleNamespace(toks=[["tok=__request__"], *([f"tok={w}" for w in ws] + [f"gen={n}"] for n, ws in toks)],
                             rows=[[0.0]] * (1 + len(toks)), intent=[])
        return TurnRows(task, 0, tf, gold)

    names = [("ask_x", ["ask"]), ("inform_y", ["inform"])]
    turns = [turn(t, g, names) for t in ("a", "b", "c") for g in (0, 1, 2)] * 10
    # margins 3 (the override right), 2 (right), 1 (the rules' step was the logged one)
    scores = [[0.0, 3.0, 0.0] if t.gold == 1 else [0.0, 0.0, 2.0] if t.gold == 2 else [0.0, 1.0, 0.0]
              for t in turns]
    gate = calibrate(turns, scores, min_tasks=2)
    assert gate.min_margin == 2.0 and gate.rules_right == 0.0 and gate.precision == 1.0
    assert gate.min_familiarity == 1.0  # ask and inform name answers of the two other tasks
    assert calibrate(turns, scores, min_tasks=3).min_familiarity == 0.0


def test_the_controllers_precheck_vetoes_an_invalid_learned_choice(demo, adversarial_model):
    wf = demo.workflows["book_table"]
    policy = LearnedPolicy.load(adversarial_model)
    interp, fr, reading, messages, rules = _state(wf, "A table at Casa Fiorella for 2 please")
    best = policy.rank(wf, interp, fr, reading, messages, rules)[0]
    assert (best.kind, best.name) == ("api", "check_availability") and best.missing  # no date, no time
    proposal, vetoed = policy.choice(wf, interp, fr, reading, messages, rules, [])
    assert vetoed >= 1 and proposal.get("kind") != "tool"
    env = CheckEnv(turn=1, max_turns=50, max_api_repeats=3, scope=scope_of(fr, reading), procedure=interp.procedure)
    assert all(v["ok"] for v in run_checks(proposal, wf, fr, env))


@pytest.mark.parametrize("precheck", [True, False])
def test_learned_choice_is_gated_by_the_controllers(agent, agent_context, adversarial_model, monkeypatch, precheck):
    """The adversarial ranker prefers an availability check without date and time.  With the policy's own pre-check
    it proposes an allowed action instead; with the pre-check switched off the invalid choice reaches the
    post-controller, which rejects it: either way the user never sees it and no tool runs out of order."""
    import dialogue.execution.policy_learned as learned
    from graph.chat import run_turn

    if not precheck:
        monkeypatch.setattr(learned, "allowed_now", lambda *a: True)
    ctx = type(agent_context)(**{**agent_context.__dict__, "executor_policy": f"learned:{adversarial_model}"})
    r = run_turn(agent, uuid.uuid4().hex[:8], "I'd like to book a table at Trattoria Lumi for 2 people", context=ctx)
    gated = [v for v in r.violations if v["controller"] == "argument_schema"
             and (v.get("proposal") or {}).get("name") == "check_availability"]
    assert bool(gated) is (not precheck)
    assert not r.tool_calls  # no call ran without its arguments
    assert r.reply.strip()


def test_text_classifier_baseline_learns_from_symbols_and_words():
    from evals.text_baseline import TextClassifier

    def x(prev, text):
        return {"task": "t", "prev1": prev, "prev2": "<none>", "done": [prev], "kb": prev == "q", "text": text}

    inputs = [x("q", "ok"), x("hello", "where is it"), x("q", "fine"), x("hello", "where now")] * 5
    labels = ["inform", "query", "inform", "query"] * 5
    clf = TextClassifier().fit(inputs, labels)
    assert clf.predict([x("q", "ok"), x("hello", "where")]) == ["inform", "query"]


@pytest.mark.data
def test_train_and_evaluate_on_a_star_sample(tmp_path):
    if not (DATA / "star" / "dialogues.jsonl.gz").exists():
        pytest.skip(f"STAR data not found under {DATA} (set FLOWDESK_DATA)")
    from typer.testing import CliRunner

    from evals.cli import app, train_app

    model = tmp_path / "policy.json"
    r = CliRunner().invoke(train_app, ["executor", "--dataset", "star", "--data", str(DATA), "--limit", "40",
                                       "--rounds", "30", "--out", str(model)])
    assert r.exit_code == 0, r.output
    policy = LearnedPolicy.load(model)
    assert policy.model.trained_on["dialogues"] >= 30
    assert "Hello" not in model.read_text()  # weights and generic names only
    out = tmp_path / "report"
    r = CliRunner().invoke(app, ["next-action", "--dataset", "star", "--data", str(DATA), "--limit", "12",
                                 "--model", f"learned:{model}", "--text", "--out", str(out)])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "metrics.json").read_text())
    for name in ("offline", "learned", "text", "baseline"):
        assert 0 <= m["overall"][name]["weighted_f1"] <= 1
    assert m["summary"]["weighted_f1"] == m["overall"]["offline"]["weighted_f1"]  # the existing keys stay
    assert m["summary"]["learned_weighted_f1"] == m["overall"]["learned"]["weighted_f1"]
    assert 0 <= m["summary"]["learned_vetoed_share"] <= 1


def test_verified_experience_gates_the_learned_choice_like_the_pdl():
    """A call whose learned prerequisite has not succeeded, or a question for a value that prerequisite's
    result provides, is not a learned choice (the interpreter's proposal stands instead)."""
    from dialogue.execution.policy_learned import _against_experience

    frame = {"workflow": "transfer_money", "calls": []}
    prereq = [{"workflow": "transfer_money", "action": "transfer", "requires": "verify_identity", "kind": "action",
               "provides": ["session_token"]}]
    call = {"kind": "tool", "name": "transfer", "args": {}}
    ask = {"kind": "reply", "name": "request_information", "args": {"slots": ["session_token"]}}
    assert _against_experience(call, prereq, frame) and _against_experience(ask, prereq, frame)
    assert not _against_experience(call, (), frame)  # no experience: nothing to gate
    done = {**frame, "calls": [{"api": "verify_identity", "status": "ok", "args": {}}]}
    assert not _against_experience(call, prereq, done) and not _against_experience(ask, prereq, done)


def test_the_ranker_is_not_called_when_nothing_could_replace_the_rules_proposal(demo):
    """The ranker's cost: when every candidate but the rules' proposal is one the gated policy passes over
    whatever its score (here: the rules collect credentials, nothing else asks for them), ``choice`` returns
    the rules' proposal without features or a model call — the decision scoring would have made."""
    from dialogue.execution.policy_learned import Gate, _leaves_collection, asked_slots, view_of

    wf = demo.workflows["check_balance"]
    interp, fr, reading, messages, rules = _state(wf, "hi")
    base = load_policy("auto")
    gate = Gate(min_familiarity=0.0, min_margin=-1e9, precision=0.5, rules_right=0.05, overrides=0.3)
    gated = LearnedPolicy(base.model.model_copy(update={"gate": gate}), "gated")
    collecting = set(asked_slots(rules, view_of(wf, interp), fr["slots"]))
    others = [c for c in gated.rank(wf, interp, fr, reading, messages, rules) if not c.is_rules]
    assert collecting and others and all(_leaves_collection(c, view_of(wf, interp), [], collecting) for c in others)
    calls = []

    def counted(policy):
        scores = policy.scores
        policy.scores = lambda tf: (calls.append(policy.source), scores(tf))[1]
        return policy

    assert counted(gated).choice(wf, interp, fr, reading, messages, rules, []) == (rules, 0) and not calls
    # without a gate nothing is passed over: the ranker scores (and may choose another step)
    counted(base.ungated()).choice(wf, interp, fr, reading, messages, rules, [])
    assert calls


def test_a_rerun_of_a_lookup_that_succeeded_is_ranked_not_forced(demo):
    """A call the rules make with what the user gave is made (``choice`` returns it unscored); a call that
    only repeats the last succeeded call of its API — the same arguments, plus at most values the user never
    gave (its own results filled them) — is ranked against the other actions instead."""
    from dialogue.execution.policy_learned import rerun

    call = {"api": "q", "args": {"city": "Rome", "RequestType": "Check"}, "status": "ok"}
    again = {"kind": "tool", "name": "q", "args": {"city": "rome ", "RequestType": "Check", "price": 5}}
    assert rerun(again, {"calls": [call], "slots": {"city": "Rome"}})
    assert not rerun(again, {"calls": [], "slots": {}})  # a first call
    assert not rerun(again, {"calls": [{**call, "status": "error"}], "slots": {}})  # a failed call is re-checked
    assert not rerun(again, {"calls": [call], "slots": {"price": 5}})  # the user gave a value it went without
    assert not rerun({**again, "args": {"city": "Paris", "RequestType": "Check"}}, {"calls": [call], "slots": {}})
    assert not rerun({**again, "args": {"city": "Rome", "RequestType": "Book"}}, {"calls": [call], "slots": {}})
    assert not rerun({**again, "args": {"RequestType": "Check"}}, {"calls": [call], "slots": {}})  # a value dropped
    assert not rerun({**again, "name": "other"}, {"calls": [call], "slots": {}})

    wf = demo.workflows["book_table"]
    interp, fr, reading, messages, rules = _state(wf, "A table at Casa Fiorella for 2 on 2026-12-23 at 19:00")
    assert rules["kind"] == "tool"
    policy = load_policy("auto").ungated()
    calls = []
    scores = policy.scores
    policy.scores = lambda tf: (calls.append(1), scores(tf))[1]
    try:
        assert policy.choice(wf, interp, fr, reading, messages, rules, []) == (rules, 0) and not calls
        done = {**fr, "calls": [{"api": rules["name"], "args": dict(rules["args"]), "status": "ok"}]}
        policy.choice(wf, interp, done, reading, messages, rules, [])
        assert calls  # the ranker was asked
    finally:
        del policy.scores
