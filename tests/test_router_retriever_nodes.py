"""The router and retriever graph nodes: route, candidates, clarify, active workflow and the stack."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from graph.context import Context
from graph.models import register_chat_model, unregister_chat_model
from graph.state import State
from nodes.retriever import retriever, too_close
from nodes.router import router

LIB = Path(__file__).parent / "fixtures" / "retrieval_library"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("node-store"))


def rt(store_dir: str, **kw) -> Runtime:
    return Runtime(context=Context(library=str(LIB), store_dir=store_dir, **kw))


def test_router_flat_is_empty(store_dir):
    assert router({"search_query": "lost card"}, rt(store_dir)) == {"route": {"domains": [], "roles": []}}


def test_router_embedding_routes(store_dir):
    out = router({"search_query": "my card was stolen, block it"}, rt(store_dir, strategy="D>R>W", top_k_upper=1))
    assert out["route"] == {"domains": ["banking"], "roles": ["card_services"]}


def test_router_uses_the_configured_llm(store_dir):
    spec = register_chat_model("node-router", FakeListChatModel(responses=['{"roles": ["helpdesk"]}']))
    try:
        out = router({"search_query": "my password does not work"},
                     rt(store_dir, strategy="R>W", top_k_upper=1, router_model=spec))
    finally:
        unregister_chat_model("node-router")
    assert out["route"] == {"domains": [], "roles": ["helpdesk"]}


def test_retriever_activates_the_top_candidate_and_pushes_the_unfinished_one(store_dir):
    state = {"search_query": "I need a plane ticket to Rome", "route": {"domains": [], "roles": []},
             "active_workflow": "block_card", "progress": {"block_card": {"executed": ["freeze_card"], "done": False}},
             "workflow_stack": []}
    out = retriever(state, rt(store_dir))
    assert out["active_workflow"] == "book_flight" and out["candidates"][0]["workflow"] == "book_flight"
    assert out["workflow_stack"] == ["block_card"] and out["clarify"] == []


def test_finished_workflow_is_not_pushed_and_resumed_one_leaves_the_stack(store_dir):
    state = {"search_query": "I lost my credit card, please stop it", "active_workflow": "book_flight",
             "progress": {"book_flight": {"done": True}}, "workflow_stack": ["block_card"]}
    out = retriever(state, rt(store_dir))
    assert out["active_workflow"] == "block_card" and out["workflow_stack"] == []


def test_retriever_without_query_uses_the_last_user_message(store_dir):
    out = retriever({"messages": [HumanMessage("I forgot my password")]}, rt(store_dir))
    assert out["active_workflow"] == "reset_password"


def test_close_candidates_ask_to_clarify(store_dir):
    # A vague request with a huge margin: every candidate is "close"; the active workflow is left alone.
    out = retriever({"search_query": "card problem", "active_workflow": "rent_car"},
                    rt(store_dir, retriever="dense", clarify_margin=10.0, top_k=3))
    assert len(out["clarify"]) == 3 and "active_workflow" not in out
    clear = retriever({"search_query": "card problem"}, rt(store_dir, retriever="dense", clarify_margin=1e-9))
    assert clear["clarify"] == [] and clear["active_workflow"]


def test_too_close():
    c = [{"workflow": "a", "score": 0.50}, {"workflow": "b", "score": 0.48}, {"workflow": "c", "score": 0.30}]
    assert too_close(c, 0.05) == ["a", "b"]
    assert too_close(c, 0.01) == [] and too_close(c, 0.0) == [] and too_close(c[:1], 1.0) == []


def test_nodes_inside_a_langgraph_graph(store_dir):
    g = StateGraph(State, context_schema=Context)
    g.add_node("router", router)
    g.add_node("retriever", retriever)
    g.add_edge(START, "router")
    g.add_edge("router", "retriever")
    g.add_edge("retriever", END)
    out = g.compile().invoke({"messages": [HumanMessage("hi")], "search_query": "how much do I still owe on my loan"},
                             context=Context(library=str(LIB), store_dir=store_dir, strategy="R>W", top_k_upper=1))
    assert out["route"]["roles"] == ["loan_officer"]
    assert out["active_workflow"] == "loan_repayment_schedule"
    assert all(c["level"] == "R>W" and c["role"] == "loan_officer" for c in out["candidates"])


def test_context_prior_prefers_the_role_already_in_use(store_dir):
    # Plain BM25 ranks the mortgage first for this elliptical turn; in a conversation about cards the
    # prior (role in use, as tuned on SGD/STAR train) keeps the card services role on top.
    state = {"search_query": "I want to apply for a new one", "messages": [HumanMessage("I want to apply for a new one")],
             "route": {"domains": [], "roles": []}, "active_workflow": "increase_card_limit",
             "progress": {"increase_card_limit": {"executed": [], "done": False}}, "workflow_stack": []}
    plain = retriever(state, rt(store_dir, retriever="bm25"))
    primed = retriever(state, rt(store_dir, retriever="bm25", context_prior=True))
    assert plain["candidates"][0]["workflow"] == "apply_mortgage"
    assert primed["candidates"][0]["role"] == "card_services"
    assert len(primed["candidates"]) == len(plain["candidates"]) == 5
