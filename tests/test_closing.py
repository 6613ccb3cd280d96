"""The learned closing detector (``dialogue.understanding.closing``): the bundled model reads the turns that
end the active task where the hand-written markers did not, keeps the ones that stay in it, and the
detector falls back on the markers without a model file."""

from __future__ import annotations

from dataclasses import replace
import pytest
from langchain_core.messages import AIMessage as A
from langchain_core.messages import HumanMessage as H

from dialogue.understanding.closing import FEATURES, MODEL_PATH, load_closing, term_values
from dialogue.understanding.features import lexical_features
from dialogue.understanding.navigation import _closing
from dialogue.understanding.policy_offline import DEFAULT_PARAMS, offline_decide

@pytest.fixture(scope="module")
def desk(agent_context):
    """The demo desk's library and the session's retriever (the bundled library, its store built once)."""
    from graph.resources import get_resources
    from nodes.detector import retriever_scorer

    res = get_resources(agent_context)
    return res.library, retriever_scorer(res.retriever)


SEARCHED = [H("Find me an Italian restaurant downtown"), A("Trattoria Lumi is an Italian place downtown.")]


def _decide(desk, messages, active, params=DEFAULT_PARAMS):
    lib, score = desk
    return offline_decide(messages, active, lib.workflows[active], score, params=params)


def test_the_bundled_model_loads_with_the_features_it_was_fitted_on():
    model = load_closing()
    assert model is not None and tuple(model.features) == FEATURES and len(model.coef) == len(FEATURES)
    assert model.buckets and 0.0 < model.threshold < 1.0 and model.provenance["rows"] > 0
    assert load_closing(str(MODEL_PATH.with_name("no_such_model.json"))) is None


@pytest.mark.parametrize("agent,turn", [
    ("Would you like me to book a table there?", "Maybe another time."),  # no closing marker in it
    ("Would you like me to book a table there?", "not right now, I was just looking"),
    ("Is there anything else I can help you with?", "No, thanks!"),
])
def test_declining_what_comes_next_ends_the_task(desk, agent, turn):
    v = _decide(desk, SEARCHED[:1] + [A(agent), H(turn)], "search_restaurants")
    assert v.action == "STAY" and v.out_of_scope, v.features
    assert v.features["ends_task"] == 1.0 and _closing(v)  # navigation closes the task


@pytest.mark.parametrize("agent,turn", [
    ("For how many people, and on which date and time?", "4 people tomorrow at 19:30"),
    ("For how many people, and on which date and time?", "No, I'm not sure yet"),
    ("Which restaurant would you like?", "no, the other one"),
])
def test_answers_stay_in_the_task(desk, agent, turn):
    v = _decide(desk, [H("I'd like to book a table"), A(agent), H(turn)], "book_table")
    assert not v.out_of_scope, v.features


def test_without_the_model_the_markers_decide(desk):
    markers = replace(DEFAULT_PARAMS, use_closing=False)
    later = SEARCHED[:1] + [A("Would you like me to book a table there?"), H("Maybe another time.")]
    assert not _decide(desk, later, "search_restaurants", markers).out_of_scope  # the markers miss it
    done = SEARCHED[:1] + [A("Anything else?"), H("No, that's all.")]
    assert _decide(desk, done, "search_restaurants", markers).out_of_scope


def test_a_long_agent_message_is_read_by_its_end():
    # the agent's last sentences carry what the user answers; earlier ones neither dilute nor outweigh them
    short = term_values("No thanks", "Anything else?")
    long = term_values("No thanks", "Your table for four is booked at Trattoria Lumi tomorrow at 19:30, "
                                    "and the confirmation was sent. Enjoy. Anything else?")
    assert set(short) <= set(long) and len(long) < len(short) + 8
    model = load_closing()
    feats = lexical_features("No thanks", "Enjoy your dinner. Anything else?")
    assert model.ends("No thanks", "Enjoy your dinner. Anything else?", None, feats)


def test_a_yes_or_no_to_the_procedures_own_condition_is_its_answer(desk):
    from workflows.semantics import condition_key

    # FlowBench-like procedures ask yes/no conditions; "No, don't do that." answers one, it ends nothing
    cond = condition_key("the meeting cannot be canceled")
    msgs = SEARCHED[:1] + [A("Is it: the meeting cannot be canceled? (yes/no)"), H("No, don't do that.")]
    lib, score = desk
    waiting = offline_decide(msgs, "search_restaurants", lib.workflows["search_restaurants"], score, pending=cond)
    assert not waiting.out_of_scope
    nothing_pending = offline_decide(msgs, "search_restaurants", lib.workflows["search_restaurants"], score)
    assert nothing_pending.out_of_scope  # the same words with no condition waiting read as the task's end


def test_i_dont_know_skips_the_question_and_ends_nothing(desk):
    from dialogue.understanding.policy_offline import answers_pending

    # the pending question's answer (SkipQuestion), kept from the detector and from its training rows: a model
    # fitted with such rows read "I don't know" to "Could you tell me the auth token?" as an ending (p 0.84)
    assert answers_pending("I don't know", None) and answers_pending("not sure, sorry", "pin")
    assert not answers_pending("No, thanks!", None) and not answers_pending("No, thanks!", "pin")
    msgs = [H("I'd like to book a table"), A("Could you tell me the auth token?"), H("I don't know")]
    v = _decide(desk, msgs, "book_table")
    assert not v.out_of_scope and not v.features.get("ends_task")
