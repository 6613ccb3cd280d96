"""The switch detector: offline decisions on hand-written turns (own small library, real retriever),
the LLM path with scripted chat models (retries, fallback), the cascade, and the graph node."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage as A
from langchain_core.messages import HumanMessage as H

from dialogue.understanding.policy_llm import decide, parse_decision
from dialogue.understanding.policy_offline import DEFAULT_PARAMS, offline_decide
from dialogue.understanding.query import self_generated_query
from nodes.detector import retriever_scorer

LIB = {
    "retail/_domain.yaml": "name: retail\ndescription: Online shop customer service for orders and returns.\n",
    "retail/orders/_role.yaml": "name: orders\ndomain: retail\ndescription: Handles orders after purchase.\n",
    "retail/orders/track_order.yaml": """name: track_order
description: Track an order and tell the customer where the delivery is and when it arrives.
domain: retail
role: orders
slots:
  - {name: order_id, type: string, description: Order number}
""",
    "retail/orders/cancel_order.yaml": """name: cancel_order
description: Cancel an order that has not shipped yet and refund the payment.
domain: retail
role: orders
slots:
  - {name: order_id, type: string, description: Order number}
  - {name: reason, type: enum, enum: [changed mind, found cheaper, too slow], description: Why cancel}
""",
    "retail/orders/return_item.yaml": """name: return_item
description: Return a delivered item for a refund or an exchange and print a return label.
domain: retail
role: orders
""",
    "dining/_domain.yaml": "name: dining\ndescription: Restaurants and table reservations.\n",
    "dining/host/_role.yaml": "name: host\ndomain: dining\ndescription: Restaurant host who books tables.\n",
    "dining/host/book_table.yaml": """name: book_table
description: Reserve a table at a restaurant for a party size, date and time.
domain: dining
role: host
slots:
  - {name: party_size, type: integer, description: Number of guests}
""",
}


def write_library(root: Path) -> Path:
    for rel, text in LIB.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from graph.context import Context
    from memory.retrieval import build_retriever
    from workflows.library import load_library

    root = tmp_path_factory.mktemp("detector")
    lib_dir = write_library(root / "lib")
    lib = load_library(lib_dir)
    ctx = Context(library=str(lib_dir), store_dir=str(root / "store"), db_path=str(root / "db.sqlite"))
    return lib, ctx, retriever_scorer(build_retriever(lib, ctx))


def _decide(setup, messages, active, **kw):
    lib, _, score = setup
    return decide(messages, active, lib.workflows.get(active) if active else None, score, **kw)


def test_answer_to_the_agents_question_stays(setup):
    v = _decide(setup, [H("Where is my order?"), A("Sure, what is your order number?"), H("It is 12345")],
                "track_order")
    assert v.action == "STAY" and not v.out_of_scope and v.confidence > 0.7


def test_enum_answer_stays(setup):
    v = _decide(setup, [H("I want to cancel my order"), A("Why would you like to cancel?"), H("found cheaper")],
                "cancel_order")
    assert v.action == "STAY"


def test_explicit_switch_searches_with_a_flowswitch_query(setup):
    v = _decide(setup, [H("Where is my order?"), A("Sure, what is your order number?"),
                        H("actually I want to cancel my order instead")], "track_order")
    assert v.action == "SEARCH"
    assert v.search_query.startswith("Potential Name of the workflow: ")
    assert "Task description of the workflow:" in v.search_query and "cancel my order" in v.search_query
    assert "the action you need to take to solve the task: cancel my order" in v.search_query


def test_greeting_without_workflow_is_out_of_scope(setup):
    v = _decide(setup, [H("Hello there!")], None)
    assert v.action == "STAY" and v.out_of_scope


def test_closing_after_anything_else_is_out_of_scope(setup):
    v = _decide(setup, [H("Where is my order?"), A("It arrives tomorrow. Anything else?"), H("No, that's all.")],
                "track_order")
    assert v.action == "STAY" and v.out_of_scope


def test_first_request_searches(setup):
    v = _decide(setup, [H("Hi, I need to return a jacket I bought")], None)
    assert v.action == "SEARCH" and "return a jacket" in v.search_query


def test_accepting_an_offer_for_another_workflow_searches(setup):
    v = _decide(setup, [H("Where is my order?"), A("It arrives tomorrow. Would you like to book a table to "
                                                   "celebrate?"), H("Yes please")], "track_order")
    assert v.action == "SEARCH" and "book a table" in v.search_query


def test_elliptical_turn_query_uses_context():
    feats = {"accepts_offer": 0.0, "content_words": 1.0, "offer_text": ""}
    q = self_generated_query("that one", "Which order?", ["I want to return my blue jacket"], feats)
    assert "return my blue jacket" in q


# --- LLM policy -------------------------------------------------------------------------------------

VALID = '{"action": "SEARCH", "search_query": "Potential Name of the workflow: Cancel order, ...", ' \
        '"user_intention": "cancel the order"}'


def test_parse_decision_finds_json_in_prose():
    d = parse_decision('Sure! Here it is: {"action": "STAY", "search_query": "", "user_intention": "answer"} ok')
    assert d.action == "STAY"
    with pytest.raises(ValueError):
        parse_decision('{"action": "MAYBE"}')


def test_llm_retries_malformed_output_then_parses(setup):
    model = FakeListChatModel(responses=["I think you should search.", VALID])
    v = _decide(setup, [H("Where is my order?"), A("Order number?"), H("It is 12345")], "track_order",
                mode="llm", model=model)
    assert v.policy == "llm" and v.action == "SEARCH" and v.search_query.startswith("Potential Name")
    assert v.features["llm_attempts"] == 2


def test_llm_always_malformed_falls_back_to_offline(setup):
    model = FakeListChatModel(responses=["nope", "{bad json", '{"action": "MAYBE"}', VALID])
    v = _decide(setup, [H("Where is my order?"), A("Order number?"), H("It is 12345")], "track_order",
                mode="llm", model=model)
    assert v.policy == "offline-fallback" and v.action == "STAY"  # the offline verdict, not the 4th answer
    assert v.features["llm_attempts"] == 3


def test_cascade_calls_the_llm_only_when_unsure(setup):
    confident = [H("Where is my order?"), A("What is your order number?"), H("12345")]
    model = FakeListChatModel(responses=[VALID])
    v = _decide(setup, confident, "track_order", mode="cascade", model=model)
    assert v.policy == "cascade-offline" and v.action == "STAY"
    lib, _, score = setup
    off = offline_decide(confident, "track_order", lib.workflows["track_order"], score)
    v = _decide(setup, confident, "track_order", mode="cascade", model=model,
                cascade_threshold=off.confidence + 0.01)
    assert v.policy == "cascade-llm" and v.action == "SEARCH"


def test_llm_prompt_names_the_active_workflow(setup):
    from dialogue.understanding.prompts import llm_prompt

    lib, _, _ = setup
    p = llm_prompt([H("Where is my order?"), A("Order number?"), H("12345")], lib.workflows["track_order"])
    assert "track_order" in p and "New user turn: 12345" in p and "Agent: Order number?" in p


# --- the node ---------------------------------------------------------------------------------------

def test_node_writes_the_contract_fields(setup):
    from types import SimpleNamespace

    from nodes.detector import detector

    _, ctx, _ = setup
    from graph.state import decision

    state = {"messages": [H("I need to cancel my order")], "stack": [], "turn": 2, "version": 2}
    out = detector(state, SimpleNamespace(context=ctx))
    assert decision(out["commands"]) == "SEARCH" and out["turn"] == 3
    assert [c["command"] for c in out["commands"]] == ["start_flow"] and out["commands"][0]["turn"] == 3
    assert out["search_query"].startswith("Potential Name") and out["user_intention"]
    assert out["trace"][0]["event"] == "user" and out["trace"][0]["text"] == "I need to cancel my order"


# --- the bundled library: new slot values stay, other tasks search ---------------------------------

BUNDLED = Path(__file__).resolve().parents[1] / "workflows" / "library"


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    from graph.context import Context
    from memory.retrieval import build_retriever
    from workflows.library import load_library

    root = tmp_path_factory.mktemp("bundled")
    lib = load_library(BUNDLED)
    ctx = Context(library=str(BUNDLED), store_dir=str(root / "store"), db_path=str(root / "db.sqlite"))
    return lib, retriever_scorer(build_retriever(lib, ctx))


BOOKING = [H("I'd like to book a table at Trattoria Lumi"),
           A("For how many people, and on which date and time?"), H("4 people tomorrow at 19:30"),
           A("Shall I book Trattoria Lumi for 4 tomorrow at 19:30?")]


def _bundled(bundled, messages, active):
    lib, score = bundled
    return offline_decide(messages, active, lib.workflows[active], score)


@pytest.mark.parametrize("turn", ["make it 20:30", "then let's do Dec 6 instead", "change the party size to 6",
                                  "actually, 6 people rather than 4"])
def test_new_value_for_an_active_slot_stays(bundled, turn):
    v = _bundled(bundled, BOOKING + [H(turn)], "book_table")
    assert v.action == "STAY" and not v.out_of_scope, v.features


def test_new_date_while_changing_a_booking_stays(bundled):
    msgs = [H("I need to move my booking B-1001"), A("To which day and time?"), H("Friday at 19:00"),
            A("Moving B-1001 to Friday at 19:00, shall I go ahead?"), H("hmm, then let's do Dec 6 instead")]
    assert _bundled(bundled, msgs, "change_booking").action == "STAY"


@pytest.mark.parametrize("turn", ["can you also track my order?", "Where is my parcel? Please track order ORD-7001"])
def test_naming_another_workflows_task_searches(bundled, turn):
    v = _bundled(bundled, BOOKING + [H(turn)], "book_table")
    assert v.action == "SEARCH"
    lib, score = bundled
    assert score(v.search_query)[0][0] == "track_order"


@pytest.mark.parametrize("turn", ["Oh wait, before that: where is my order ORD-7002? My email is a@example.com",
                                  "Hold on, what's the status of my order ORD-7002?"])
def test_digression_while_a_question_is_pending_searches(bundled, turn):
    # The agent asked for the guest's name; the user asks about an order instead (a digression).
    msgs = BOOKING[:2] + [H(turn)]
    assert _bundled(bundled, msgs, "book_table").action == "SEARCH"


def test_moving_an_existing_booking_searches_from_a_new_booking(bundled):
    msgs = [H("Please book a table at Sakura Lane"), A("You're booked. Your reference is B-1002. Anything else?"),
            H("Yes, I also need to change my other booking B-1001 to next week")]
    assert _bundled(bundled, msgs, "book_table").action == "SEARCH"


def test_thanks_mid_task_wraps_up_inside_the_workflow(bundled):
    v = _bundled(bundled, BOOKING + [H("Yes please."), A("Booked, reference B-1003."),
                                     H("Thanks, that's all I needed.")], "book_table")
    assert v.action == "STAY" and not v.out_of_scope
    v = _bundled(bundled, BOOKING + [H("Yes please."), A("Booked. Anything else?"), H("No thanks, bye")],
                 "book_table")
    assert v.action == "STAY" and v.out_of_scope


def test_a_slot_question_is_not_an_offer():
    from dialogue.understanding.features import lexical_features

    assert not lexical_features("19:30", "Great. Also, what time would you like?")["accepts_offer"]
    assert lexical_features("yes", "Found it. Would you like to reserve a table?")["accepts_offer"]


def test_accepting_a_booking_offer_while_searching_shifts_the_intent_verb(bundled):
    lib, _ = bundled
    from dialogue.understanding.features import lexical_features

    f = lexical_features("Yes please", "Saffron Court is Indian. Would you like me to book a table there?",
                         lib.workflows["search_restaurants"])
    assert f["accepts_offer"] and f["verb_shift"] == 1.0
    f = lexical_features("Yes please", "Would you like me to search again?", lib.workflows["search_restaurants"])
    assert f["verb_shift"] == 0.0


def test_context_rerank_prefers_the_conversations_roles_and_verbs(bundled):
    from dialogue.understanding.prior import Prior, context_rerank

    lib, _ = bundled
    # refund_order (returns_desk) narrowly beats cancel_order, but the user is in order_support.
    ranking = [("refund_order", 1.0), ("cancel_order", 0.95), ("book_table", 0.5)]
    out = context_rerank(ranking, lib, "track_order", [], "stop it please")
    assert [n for n, _ in out][:2] == ["cancel_order", "refund_order"]
    # A role used earlier in the conversation beats an unused role of the same domain.
    out = context_rerank(ranking, lib, "book_table", ["track_order"], "stop it please")
    assert out[0][0] == "cancel_order"
    # Nothing known about the conversation: the ranking is kept.
    assert [n for n, _ in context_rerank(ranking, lib, None, [], "x")] == [n for n, _ in ranking]
    # The intent verb splits two workflows of the active role.
    ranking = [("search_restaurants", 1.0), ("book_table", 0.9)]
    out = context_rerank(ranking, lib, "search_restaurants", [], "reserve it", Prior(verb=0.2))
    assert out[0][0] == "book_table"
    assert context_rerank(ranking, lib, "search_restaurants", [], "reserve it", Prior(verb=0.0))[0][0] == \
        "search_restaurants"


# --- the learned detector: context features and trees ---------------------------------------------------

def test_context_features_read_the_agents_question_and_the_active_workflows_place(bundled):
    from dialogue.understanding.features import context_features, foreign_share, lexical_features

    lib, _ = bundled
    wf = lib.workflows["book_table"]
    agent = "For how many people, and on which date and time?"
    feats = lexical_features("4 people tomorrow", agent, wf, "party_size")
    foreign = foreign_share("4 people tomorrow", wf)
    row = context_features("4 people tomorrow", agent, feats, wf, "party_size",
                           [("track_order", 8.0), ("book_table", 4.0), ("cancel_order", 2.0)], "book_table", 1, foreign)
    assert row["agent_question"] == 1.0 and row["pending"] == 1.0 and row["numberish"] == 1.0
    assert row["question"] == 0.0 and row["position"] == 1.0 and row["words"] == 3.0
    assert row["active_rank"] == 2.0 and row["active_rel"] == 0.5 and row["top_z"] > row["active_z"]
    absent = context_features("4 people tomorrow", agent, feats, wf, None, [("track_order", 8.0)], "book_table", 0,
                              foreign)
    assert absent["active_rank"] == 2.0 and absent["active_rel"] == 0.0
    # the active workflow leads the best other one on the turn's own ranking; the turn fills an open slot
    assert row["other_z"] == row["top_z"] and row["active_lead"] < 0
    assert row["fills_open"] == 1.0 and row["fills_any"] == 1.0 and row["wrapped_up"] == 0.0
    leads = context_features("4 people tomorrow", agent, feats, wf, "party_size",
                             [("book_table", 8.0), ("track_order", 4.0), ("cancel_order", 2.0)], "book_table", 1,
                             foreign, filled={"party_size": 4, "date": "tomorrow"})
    assert leads["active_lead"] > 0 and leads["other_z"] < leads["active_z"]
    assert leads["fills_open"] == 0.0 and leads["fills_any"] == 1.0  # the values it gives are already filled


def test_context_features_read_a_finished_task_from_the_frame_or_the_agents_words(bundled):
    from dialogue.understanding.features import context_features, lexical_features

    lib, _ = bundled
    wf = lib.workflows["track_order"]
    turn, said = "thanks! btw can I cancel it?", "Order ORD-7003 is on its way with Northpost."

    def wrapped(agent: str, finished: bool) -> float:
        feats = lexical_features(turn, agent, wf, None)
        return context_features(turn, agent, feats, wf, None, [], "track_order", 2, 1.0, finished)["wrapped_up"]

    assert wrapped(said, finished=True) == 1.0  # the frame says so, whatever the agent's words
    assert wrapped(said, finished=False) == 0.0
    assert wrapped("Your order has been cancelled. Is there anything else I can help with?", finished=False) == 1.0


def test_a_request_after_a_finished_task_is_searched_without_its_turns(bundled):
    lib, score = bundled
    msgs = [H("where is my order ORD-7003?"), A("Could you tell me the email address used for the order?"),
            H("tomas.l@example.com"), A("Order ORD-7003 is on its way with Northpost."),
            H("thanks! btw can I cancel it?")]
    wf = lib.workflows["track_order"]
    going = offline_decide(msgs, "track_order", wf, score)
    done = offline_decide(msgs, "track_order", wf, score, finished=True,
                          params=replace(DEFAULT_PARAMS, record_row=True))
    assert "where is my order" in going.self_query  # elliptical ("it"): the earlier turns say what it is
    assert "where is my order" not in done.self_query and "cancel" in done.self_query
    assert done.row["wrapped_up"] == 1.0


def _trees_on(feature: str, rows: int = 200) -> str:
    """A small LightGBM detector whose probability of SEARCH follows one feature (label = feature > 1)."""
    import lightgbm as lgb
    import numpy as np

    from dialogue.understanding.policy_offline import DETECTOR_FEATURES

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 3, size=(rows, len(DETECTOR_FEATURES)))
    y = (X[:, DETECTOR_FEATURES.index(feature)] > 1.5).astype(int)
    model = lgb.LGBMClassifier(n_estimators=20, min_child_samples=5, verbose=-1, n_jobs=1)
    model.fit(X, y, feature_name=list(DETECTOR_FEATURES))
    return model.booster_.model_to_string()


def test_learned_trees_replace_the_linear_score_and_old_models_keep_it(bundled):
    from dialogue.understanding.policy_offline import DETECTOR_FEATURES, learned_params

    lib, score = bundled
    linear = {"weights": {"request": 1.0, "cue": 0.5, "verb_shift": 1.5, "done": 0.0, "offer_retrieval": 1.5,
                          "retrieval": 1.5, "answer": -1.0}, "bias": 0.0, "threshold": 2.0}
    msgs = BOOKING + [H("what about the weather there, is it sunny?")]
    old = offline_decide(msgs, "book_table", lib.workflows["book_table"], score, params=learned_params(linear))
    assert "probability" not in old.features and "score" in old.features
    assert old.row == {}  # a linear detector neither computes nor records the trees' row ...
    recorded = offline_decide(msgs, "book_table", lib.workflows["book_table"], score,
                              params=learned_params({**linear, "record_row": True}))
    assert set(recorded.row) == set(DETECTOR_FEATURES)  # ... unless asked to (training the trees)
    assert (recorded.action, recorded.features["score"]) == (old.action, old.features["score"])
    # trees that search on a long turn and stay on a short one, whatever the linear score says
    params = learned_params({**linear, "trees": {"booster": _trees_on("short"), "threshold": 0.5}})
    assert params.trees and params.tree_threshold == 0.5
    v = offline_decide(msgs, "book_table", lib.workflows["book_table"], score, params=params)
    assert v.row["short"] == 0.0 and v.features["probability"] < 0.5 and v.action == "STAY"
    params = learned_params({**linear, "trees": {"booster": _trees_on("words"), "threshold": 0.5}})
    v = offline_decide(msgs, "book_table", lib.workflows["book_table"], score, params=params)
    assert v.row["words"] > 1.5 and v.features["probability"] > 0.5 and v.action == "SEARCH"
    # as a veto the same trees only overrule the linear score's searches: where it stays, they cannot search
    staying = {**linear, "threshold": v.features["score"] + 1.0}
    vetoing = learned_params({**staying, "trees": {"booster": _trees_on("words"), "threshold": 0.5, "mode": "veto"}})
    assert vetoing.tree_mode == "veto" and params.tree_mode == "replace"  # older files: the trees decide alone
    assert offline_decide(msgs, "book_table", lib.workflows["book_table"], score, params=vetoing).action == "STAY"
    searching = {**linear, "threshold": v.features["score"] - 1.0}
    vetoing = learned_params({**searching, "trees": {"booster": _trees_on("short"), "threshold": 0.5, "mode": "veto"}})
    assert offline_decide(msgs, "book_table", lib.workflows["book_table"], score, params=vetoing).action == "STAY"
    vetoing = learned_params({**searching, "trees": {"booster": _trees_on("words"), "threshold": 0.5, "mode": "veto"}})
    assert offline_decide(msgs, "book_table", lib.workflows["book_table"], score, params=vetoing).action == "SEARCH"
