"""Retrieval memory: incremental Chroma store, the store lock, BM25/dense/hybrid retrievers, the
four FlowSwitch strategies, fusion, the LLM router (scripted models) and the query builders."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from graph.context import Context
from graph.models import chat_model, register_chat_model, unregister_chat_model
from memory.bm25 import tokenize
from memory.queries import build_query
from memory.retrieval import build_retriever, fuse, parse_router_answer
from memory.store import StoreLockedError, WorkflowStore, render_workflow
from workflows.library import load_library
from workflows.pdl import FORMATS

LIB = Path(__file__).parent / "fixtures" / "retrieval_library"
REPO = Path(__file__).resolve().parents[1]

# Hand-written user requests and the workflow each one needs (none repeats a workflow's wording).
QUERIES = {
    "I lost my credit card, please stop it": "block_card",
    "my card got stolen yesterday": "block_card",
    "there's a payment on my statement I never made": "dispute_charge",
    "can I get a higher credit limit on my card": "increase_card_limit",
    "I want to buy a house and need a home loan": "apply_mortgage",
    "how much do I still owe on my loan": "loan_repayment_schedule",
    "I need a plane ticket to Berlin next Friday": "book_flight",
    "cancel my hotel room booking": "cancel_hotel_reservation",
    "I need a car for my holiday": "rent_car",
    "I forgot my password and can't log in": "reset_password",
    "my computer broke, I need a new laptop": "order_laptop",
}


@pytest.fixture(scope="module")
def library():
    return load_library(LIB)


@pytest.fixture(scope="module")
def retr(library, tmp_path_factory):
    ctx = Context(library=str(LIB), store_dir=str(tmp_path_factory.mktemp("store")), top_k_upper=1)
    return build_retriever(library, ctx)


# --- store -------------------------------------------------------------------------------------
def test_store_sync_is_incremental(tmp_path):
    lib_dir = tmp_path / "lib"
    shutil.copytree(LIB, lib_dir)
    with WorkflowStore(tmp_path / "store") as store:
        first = store.sync(load_library(lib_dir))
        assert (first.added, first.unchanged) == (3 + 4 + 40, 0)  # domains, roles, 10 workflows x 4 formats
        assert store.count("workflows") == 40
        assert store.sync(load_library(lib_dir)).added == 0
        # Change one workflow, remove another: only those documents move.
        before = {f: render_workflow(load_library(lib_dir).workflows["rent_car"], f) for f in FORMATS}
        wf = lib_dir / "travel" / "travel_agent" / "rent_car.yaml"
        wf.write_text(wf.read_text().replace("Rent a car for a trip.", "Hire a vehicle for a journey."))
        (lib_dir / "it_support" / "helpdesk" / "order_laptop.yaml").unlink()
        after = load_library(lib_dir)
        changed = sum(before[f] != render_workflow(after.workflows["rent_car"], f) for f in FORMATS)
        assert changed >= 2  # at least text and summary show the description
        rep = store.sync(after)
        assert rep.per_collection["workflows"] == {"added": 0, "updated": changed, "unchanged": 36 - changed,
                                                   "removed": 4}
        assert rep.per_collection["roles"]["updated"] == 1  # helpdesk lists its workflows, one fewer now
        assert store.count("workflows") == 36
        assert "Hire a vehicle" in " ".join(store.matrix("workflows", "text").texts)


def test_store_reopens_from_disk_without_embedding(tmp_path, library):
    with WorkflowStore(tmp_path) as store:
        store.sync(library)
    with WorkflowStore(tmp_path) as store:
        rep = store.sync(library)
        assert rep.added == rep.updated == 0 and rep.unchanged == 47
        assert store.embedder.misses == 0


def test_store_reads_large_collections_in_pages(retr, library):
    # Chroma fails one get() over ~30k documents; reading in pages must return every document once.
    got = retr.store._get_all("workflows", {"format": "text"}, ["metadatas"], page=3)
    assert sorted(m["workflow"] for m in got["metadatas"]) == sorted(library.workflows)
    assert len(set(got["ids"])) == len(got["ids"]) == 10


_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from memory.store import acquire_lock, release_lock
    acquire_lock(Path(sys.argv[1]))
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    release_lock(Path(sys.argv[1]))
""")


def _hold_lock(path: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), str(seconds)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_process_gets_a_clear_lock_error(tmp_path):
    proc = _hold_lock(tmp_path, 30)
    try:
        with pytest.raises(StoreLockedError) as err:
            WorkflowStore(tmp_path)
        assert err.value.pid == proc.pid
        assert str(proc.pid) in str(err.value) and str(tmp_path) in str(err.value)
    finally:
        proc.kill()
        proc.wait()


def test_waiting_for_the_lock_succeeds_once_released(tmp_path):
    proc = _hold_lock(tmp_path, 0.5)
    t0 = time.monotonic()
    with WorkflowStore(tmp_path, lock_timeout=20) as store:
        assert time.monotonic() - t0 >= 0.2 and store.count() == 0
    proc.wait()


# --- retrievers and strategies -----------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["flat", "D>W", "R>W", "D>R>W"])
@pytest.mark.parametrize("retriever", ["bm25", "dense", "hybrid"])
def test_every_strategy_and_retriever_finds_the_workflow(retr, retriever, strategy):
    for query, gold in QUERIES.items():
        got = retr.search(query, retriever=retriever, strategy=strategy)
        assert got[0]["workflow"] == gold, (query, [c["workflow"] for c in got])
        assert got[0]["retriever"] == retriever and got[0]["level"] == strategy
        assert [c["score"] for c in got] == sorted((c["score"] for c in got), reverse=True)


def test_candidates_carry_domain_and_role(retr):
    top = retr.search("my card got stolen yesterday", top_k=3)[0]
    assert (top["workflow"], top["domain"], top["role"]) == ("block_card", "banking", "card_services")
    assert len(retr.search("anything at all", top_k=3)) == 3


def test_route_restricts_the_pool(retr):
    # A card question forced into the travel role can only return travel workflows.
    got = retr.search("I lost my credit card", route={"domains": [], "roles": ["travel_agent"]}, top_k=5)
    assert {c["role"] for c in got} == {"travel_agent"} and len(got) == 3
    assert retr.route("I lost my credit card", strategy="D>R>W") == {"domains": ["banking"], "roles": ["card_services"]}
    assert retr.route("x", strategy="flat") == {"domains": [], "roles": []}


@pytest.mark.parametrize("fmt", ["text", "code", "flowchart", "summary"])
def test_every_representation_is_searchable(retr, fmt):
    assert retr.search("cancel my hotel room booking", representation=fmt)[0]["workflow"] == "cancel_hotel_reservation"


def test_scores_for_specific_workflows(retr):
    s = retr.scores_for("I need a plane ticket", ["book_flight", "reset_password", "no_such_workflow"])
    assert set(s) == {"book_flight", "reset_password"} and s["book_flight"] > s["reset_password"]


def test_unknown_names_are_rejected(retr):
    with pytest.raises(ValueError, match="strategy"):
        retr.search("x", strategy="W>D")
    with pytest.raises(ValueError, match="retriever"):
        retr.search("x", retriever="splade")


# --- fusion ------------------------------------------------------------------------------------
def test_rrf_and_score_fusion_differ_as_designed():
    dense = np.array([0.9, 0.5, 0.1])
    sparse = np.array([0.0, 10.0, 9.0])
    rrf = fuse(dense, sparse, "rrf")
    # rrf: doc0 1/61 (BM25 did not match it), doc1 1/62+1/61, doc2 1/63+1/62
    assert np.allclose(rrf, [1 / 61, 1 / 62 + 1 / 61, 1 / 63 + 1 / 62])
    assert list(np.argsort(-rrf)) == [1, 2, 0]
    score = fuse(dense, sparse, "score")  # 0.5 * minmax(dense) + 0.5 * minmax(sparse)
    assert np.allclose(score, [0.5, 0.25 + 0.5, 0.45])
    assert list(np.argsort(-score)) == [1, 0, 2]
    with pytest.raises(ValueError):
        fuse(dense, sparse, "max")


@pytest.mark.parametrize("fusion", ["rrf", "score"])
def test_hybrid_search_with_each_fusion(retr, fusion):
    for query, gold in QUERIES.items():
        assert retr.search(query, retriever="hybrid", fusion=fusion)[0]["workflow"] == gold


def test_tokenizer_splits_identifiers_and_drops_stop_words():
    assert tokenize("I want to bookTable for the cancel_hotel_reservation") == [
        "book", "table", "cancel", "hotel", "reservation"]


# --- LLM router --------------------------------------------------------------------------------
class Recording:
    """A scripted chat model that records every prompt it receives."""

    def __init__(self, responses: list[str]):
        self.inner = FakeListChatModel(responses=responses)
        self.prompts: list[list] = []

    def invoke(self, messages):
        self.prompts.append(list(messages))
        return self.inner.invoke(messages)


def test_llm_router_retries_after_a_malformed_answer(retr):
    model = Recording(["Sure! The best role is card services.", '```json\n{"roles": ["card_services"]}\n```'])
    route = retr.route("my card got stolen", strategy="R>W", top_k_upper=1, router_model=model)
    assert route == {"domains": [], "roles": ["card_services"]} and retr.last_route_source == "llm"
    system = model.prompts[0][0]
    assert isinstance(system, SystemMessage) and "select the top-1 most relevant roles" in system.content
    assert "travel_agent" in model.prompts[0][1].content  # the candidates are listed
    assert len(model.prompts) == 2 and "not valid" in model.prompts[1][-1].content


def test_llm_router_falls_back_to_embeddings(retr):
    model = Recording(['{"roles": ["pizza_chef"]}', "no idea", "[]"])
    route = retr.route("my card got stolen", strategy="R>W", top_k_upper=1, router_model=model)
    assert len(model.prompts) == 3  # first try + 2 retries
    assert retr.last_route_source == "embedding-fallback"
    assert route == retr.route("my card got stolen", strategy="R>W", top_k_upper=1, router_model=None)


def test_router_takes_model_objects_not_specs(retr):
    """memory receives model objects; building a model from a spec is the graph layer's job."""
    with pytest.raises(TypeError):
        retr.route("my card got stolen", strategy="R>W", top_k_upper=1, router_model="openai:gpt-4o-mini")


def test_llm_router_d_r_w_through_a_registered_model(retr):
    model = Recording(['{"domains": ["travel"]}', '{"roles": ["travel_agent"]}'])
    spec = register_chat_model("test-router", model)
    try:
        route = retr.route("I need a rental car", strategy="D>R>W", top_k_upper=2,
                           router_model=chat_model(spec, field="router_model"))
    finally:
        unregister_chat_model("test-router")
    assert route == {"domains": ["travel"], "roles": ["travel_agent"]}
    # The role question only lists roles of the chosen domain.
    assert "card_services" not in model.prompts[1][1].content


def test_parse_router_answer_variants():
    allowed = ["banking", "travel"]
    assert parse_router_answer('["Travel", "banking", "moon"]', "domains", allowed) == ["travel", "banking"]
    assert parse_router_answer('{"domains": ["banking"]}', "domains", allowed) == ["banking"]
    assert parse_router_answer("{not json}", "domains", allowed) is None
    assert parse_router_answer('{"domains": ["moon"]}', "domains", allowed) is None


# --- query builders ----------------------------------------------------------------------------
HISTORY = [SystemMessage("system prompt"), HumanMessage("u1"), AIMessage("a1"), HumanMessage("u2"),
           AIMessage("a2"), ToolMessage("tool output", tool_call_id="c1"), AIMessage("a2b"), HumanMessage("u3"),
           AIMessage("a3")]


def test_query_builders():
    assert build_query("Full", HISTORY) == "User: u1\nAgent: a1\nUser: u2\nAgent: a2\nAgent: a2b\nUser: u3\nAgent: a3"
    assert build_query("Last1", HISTORY) == "User: u3\nAgent: a3"
    assert build_query("Last2", HISTORY) == "User: u2\nAgent: a2\nAgent: a2b\nUser: u3\nAgent: a3"
    assert build_query("Last3", HISTORY) == build_query("Full", HISTORY)
    assert build_query("Last3", HISTORY[:5]) == "User: u1\nAgent: a1\nUser: u2\nAgent: a2"  # fewer turns: all
    assert build_query("SelfGen", HISTORY, self_gen="Potential Name of the workflow: x") == (
        "Potential Name of the workflow: x")
    assert build_query("SelfGen", HISTORY) == build_query("Last1", HISTORY)
    with pytest.raises(ValueError):
        build_query("Last9", HISTORY)


def test_bm25_inverted_index_matches_rank_bm25(library):
    from memory.bm25 import BM25Index

    texts = [f"{w.name} {w.description} {w.detailed_description}" for w in library.workflows.values()]
    idx = BM25Index(list(library.workflows), texts)
    for query in [*QUERIES, "card card limit", "nothing matches zzz"]:
        ref = idx.model.get_scores(tokenize(query)) if tokenize(query) else np.zeros(len(texts))
        assert np.allclose(idx.scores(query), ref, rtol=1e-5, atol=1e-6), query


def test_scale_benchmark_smoke(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("retrieval_scale", REPO / "benchmarks" / "retrieval_scale.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = bench.run([50], tmp_path, library=str(LIB), queries=5, repeat=1)
    (row,) = report["results"]
    assert row["workflows"] == 50 and row["numpy_dense_matches_exact"] == 1.0
    assert set(row["latency_ms"]) >= {"dense", "bm25", "hybrid", "dense_chroma_hnsw"}
    assert all(v["p50"] > 0 and v["baseline_p50"] > 0 for v in row["latency_ms"].values())
    assert "| 50 | hybrid |" in (tmp_path / "retrieval_scale.md").read_text()


def test_a_verbatim_representation_is_indexed_under_the_workflows_title():
    from workflows.pdl import Representations, Workflow

    wf = Workflow(name="get_food_voucher", title="Get Food Voucher", description="A promotion call.",
                  domain="d", role="r", representations=Representations(text="The caller offers 6% off."))
    assert render_workflow(wf, "text") == "Get Food Voucher: The caller offers 6% off."
    from workflows.render import render

    assert render_workflow(wf, "summary") == render(wf, "summary")  # a rendered form is indexed as rendered
