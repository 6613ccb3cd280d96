"""The router and retriever graph nodes — route, candidates, the StartFlow / Clarify command that
resolves the turn's search — and what that command does to the dialogue stack (``dialogue.commands``
with the library's own environment): the found workflow is pushed, the unfinished previous one is
interrupted, a finished one is dropped, and taking an interrupted one back leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from dialogue.commands import apply_all
from dialogue.frames import Frame, new_frame
from dialogue.turn import make_env
from graph.context import Context
from graph.models import register_chat_model, unregister_chat_model
from graph.resources import get_resources
from graph.state import State, active_workflow, frame_for, interrupted_workflows
from nodes.retriever import retriever, too_close
from nodes.router import router

LIB = Path(__file__).parent / "fixtures" / "retrieval_library"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("node-store"))


def rt(store_dir: str, **kw) -> Runtime:
    return Runtime(context=Context(library=str(LIB), store_dir=store_dir, **kw))


def frame(workflow: str, **fields) -> Frame:
    return Frame(**{**new_frame(workflow, 1), **fields})


def started(out: dict) -> list[str]:
    """The workflows the node's StartFlow commands name."""
    return [c["workflow"] for c in out.get("commands") or [] if c["command"] == "start_flow"]


def apply(stack: list[Frame], out: dict, store_dir: str, turn: int = 2) -> list[Frame]:
    """The stack after the node's commands (what ``apply_commands`` does first), in the library's env."""
    res = get_resources(Context(library=str(LIB), store_dir=store_dir))
    return apply_all(stack, out.get("commands") or [], make_env(turn, res.library.workflows, res.interpreters))


# --- router ------------------------------------------------------------------------------------------

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


# --- retriever and the stack ----------------------------------------------------------------------------

def test_retriever_starts_the_top_candidate_and_interrupts_the_unfinished_one(store_dir):
    state = {"turn": 2, "search_query": "I need a plane ticket to Rome", "route": {"domains": [], "roles": []},
             "stack": [frame("block_card", executed=["freeze_card"], slots={"card_number": "1234"})]}
    out = retriever(state, rt(store_dir))
    assert out["candidates"][0]["workflow"] == "book_flight"
    [cmd] = out["commands"]
    belief = cmd.pop("belief")  # the learned ranker's log-probabilities over the candidates it weighed
    assert cmd == {"command": "start_flow", "turn": 2, "workflow": "book_flight",
                   "query": "I need a plane ticket to Rome", "source": "retriever",
                   "confidence": round(out["candidates"][0]["score"], 6), "queued": False}
    assert max(belief, key=belief.get) == "book_flight" and all(v <= 0 for v in belief.values())
    stack = apply(state["stack"], out, store_dir)
    after = {"stack": stack}
    assert active_workflow(after) == "book_flight" and interrupted_workflows(after) == ["block_card"]
    assert frame_for(after, "book_flight")["started"] == 2
    assert frame_for(after, "block_card")["slots"] == {"card_number": "1234"}  # its progress is kept


@pytest.mark.parametrize("finished", [{"status": "done"},
                                      {"executed": ["request_information", "book_flight_ticket", "finish"],
                                       "slots": {"destination": "Rome"}}], ids=["done", "procedure-completed"])
def test_finished_workflow_is_dropped_and_the_resumed_one_leaves_the_stack(store_dir, finished):
    waiting = frame("block_card", status="interrupted", executed=["freeze_card"], slots={"card_number": "1234"})
    state = {"turn": 3, "search_query": "I lost my credit card, please stop it",
             "stack": [waiting, frame("book_flight", **finished)]}
    out = retriever(state, rt(store_dir))
    assert started(out) == ["block_card"]
    stack = apply(state["stack"], out, store_dir, turn=3)
    assert [(f["workflow"], f["status"]) for f in stack] == [("block_card", "active")]
    assert stack[0]["id"] == waiting["id"] and stack[0]["executed"] == ["freeze_card"]  # taken back, not restarted


def test_starting_again_the_active_workflow_keeps_its_frame(store_dir):
    current = frame("block_card", executed=["freeze_card"])
    out = retriever({"search_query": "I lost my credit card, please stop it", "stack": [current]}, rt(store_dir))
    [after] = apply([current], out, store_dir)
    assert after.pop("belief")  # the re-found pick's belief is refreshed; the frame and its progress are kept
    assert after == current


def test_retriever_without_query_uses_the_last_user_message(store_dir):
    out = retriever({"messages": [HumanMessage("I forgot my password")]}, rt(store_dir))
    assert started(out) == ["reset_password"]


def test_close_candidates_ask_to_clarify(store_dir):
    # A vague request with a huge margin: every candidate is "close"; the active workflow is left alone.
    state = {"search_query": "card problem", "stack": [frame("rent_car")]}
    out = retriever(state, rt(store_dir, retriever="dense", clarify_margin=10.0, top_k=3))
    [clarify] = out["commands"]
    assert clarify["command"] == "clarify" and len(clarify["options"]) == 3
    assert clarify["options"] == [c["workflow"] for c in out["candidates"]]
    assert apply(state["stack"], out, store_dir) == state["stack"]
    clear = retriever({"search_query": "card problem"}, rt(store_dir, retriever="dense", clarify_margin=1e-9))
    assert [c["command"] for c in clear["commands"]] == ["start_flow"] and started(clear)[0]


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
    out = g.compile().invoke({"messages": [HumanMessage("and my loan?")], "search_query": "how much do I still owe on my loan"},
                             context=Context(library=str(LIB), store_dir=store_dir, strategy="R>W", top_k_upper=1))
    assert out["route"]["roles"] == ["loan_officer"]
    assert started(out) == ["loan_repayment_schedule"]
    assert all(c["level"] == "R>W" and c["role"] == "loan_officer" for c in out["candidates"])


def test_context_prior_prefers_the_role_already_in_use(store_dir):
    # Plain BM25 ranks the mortgage first for this elliptical turn; in a conversation about cards the
    # prior (role in use, as tuned on SGD/STAR train) keeps the card services role on top.
    state = {"search_query": "I want to apply for a new one", "messages": [HumanMessage("I want to apply for a new one")],
             "route": {"domains": [], "roles": []}, "stack": [frame("increase_card_limit")]}
    plain = retriever(state, rt(store_dir, retriever="bm25", ranker=False))
    primed = retriever(state, rt(store_dir, retriever="bm25", ranker=False, context_prior=True))
    assert plain["candidates"][0]["workflow"] == "apply_mortgage"
    assert primed["candidates"][0]["role"] == "card_services"
    assert len(primed["candidates"]) == len(plain["candidates"]) == 5
    learned = retriever(state, rt(store_dir, retriever="bm25"))  # the default: the learned ranker weighs the role too
    assert learned["candidates"][0]["role"] == "card_services"


def test_a_search_after_cancelling_keeps_the_interrupted_workflow_waiting(store_dir):
    # the active workflow was cancelled: the interrupted one is now the stack's last frame, not active
    waiting = frame("block_card", status="interrupted", executed=["freeze_card"])
    state = {"turn": 3, "search_query": "I need a plane ticket to Rome", "stack": [waiting]}
    out = retriever(state, rt(store_dir))
    assert started(out) == ["book_flight"]
    after = {"stack": apply(state["stack"], out, store_dir, turn=3)}
    assert active_workflow(after) == "book_flight" and interrupted_workflows(after) == ["block_card"]
    assert frame_for(after, "block_card")["id"] == waiting["id"]


# --- scope gate --------------------------------------------------------------------------------------

def test_a_turn_far_from_every_workflow_starts_none_unless_the_gate_is_off(store_dir):
    # with nothing active the nearest workflow used to start for anything ("tell me a joke" → a workflow)
    joke = {"messages": [HumanMessage("tell me a joke")]}
    out = retriever(joke, rt(store_dir))
    assert [c["command"] for c in out["commands"]] == ["out_of_scope"] and not started(out)
    assert started(retriever(joke, rt(store_dir, scope_gate=False)))
    # a real request still starts its workflow; inside an open workflow the detector decides, not the gate
    assert started(retriever({"messages": [HumanMessage("I forgot my password")]}, rt(store_dir)))
    inside = {"messages": [HumanMessage("tell me a joke")], "stack": [frame("rent_car")]}
    assert started(retriever(inside, rt(store_dir)))


def test_scope_features_and_gate():
    from dialogue.understanding.scope import FEATURES, ScopeGate, load_scope, scope_features

    words = lambda t: set(t.split())  # noqa: E731
    assert scope_features("book a table", [("book_table", 0.7), ("x", 0.1)], words,
                          lambda n: {"book", "table"}, {"book", "table", "a"}) == pytest.approx((0.7, 2 / 3, 1.0))
    assert scope_features("hi", [], words, lambda n: set()) is None
    gate = ScopeGate((10.0, 0.0), -5.0, 0.5)
    assert gate.in_scope((0.6, 0.0)) and not gate.in_scope((0.4, 0.0)) and gate.in_scope(None)
    bundled = load_scope()
    # a model reads the first of the features (one fitted before a feature was added still loads)
    assert bundled is not None and 2 <= len(bundled.coef) <= len(FEATURES) and 0 < bundled.threshold < 0.5


def test_a_frame_the_turn_cancels_is_not_the_active_one_the_pick_weighs(store_dir, monkeypatch):
    """"never mind the card, I need a plane ticket": the pick weighs the candidates as for an opening request
    (no stay prior for the frame just left), and the cancelled workflow stays a candidate."""
    from dialogue.understanding import ranker

    weighed = []
    scores = ranker.Ranker.scores

    def spy(self, ev, library, active, seen, extra=()):
        weighed.append((active, list(extra)))
        return scores(self, ev, library, active, seen, extra)

    monkeypatch.setattr(ranker.Ranker, "scores", spy)
    current = frame("block_card", executed=["freeze_card"])
    query = "never mind the card, I need a plane ticket to Rome"
    kept = retriever({"turn": 2, "search_query": query, "stack": [current]}, rt(store_dir))
    left = retriever({"turn": 2, "search_query": query, "stack": [current],
                      "commands": [{"command": "cancel_flow", "workflow": "block_card", "turn": 2}]}, rt(store_dir))
    assert weighed[0][0] == "block_card" and weighed[1] == (None, [])
    assert started(left) == ["book_flight"]
    assert "block_card" in [c["workflow"] for c in left["candidates"]]
