"""WISE-Flow experience: the event log, induction on real logs, the Chroma experience store across
processes, the online node's hints and the controller's experience check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from dialogue.control.checks import CheckEnv, check_experience
from evals.experience import closure, prereq_scores, underspecify
from graph.agent import build_agent
from graph.chat import run_turn
from graph.checkpoint import open_checkpointer
from graph.context import Context
from graph.resources import get_resources
from memory.events import Event, EventLogError, open_event_log, read_events
from memory.experience_store import Block, ExperienceStore, Prerequisite, library_key
from memory.induce import induce, induce_llm, trajectories
from tests.conftest import copy_store
from workflows.library import bundled_library_path, load_library

ROOT = Path(__file__).resolve().parents[1]
BALANCE = ["I'd like to check my account balance", "customer number {cid}, PIN {pin}, the checking account"]
CUSTOMERS = [("C-1001", "4821"), ("C-1002", "1357"), ("C-1003", "2468")]


def _converse(graph, ctx, thread: str, cid: str, pin: str, extra: tuple[str, ...] = ()) -> list[str]:
    replies = []
    for text in [*BALANCE, *extra]:
        replies += run_turn(graph, thread, text.format(cid=cid, pin=pin), context=ctx,
                            on_interrupt=lambda p: "yes").replies
    return replies


@pytest.fixture(scope="module")
def under(tmp_path_factory) -> Path:
    return underspecify(bundled_library_path(), tmp_path_factory.mktemp("lib") / "under")


@pytest.fixture(scope="module")
def under_store(tmp_path_factory, agent_context) -> str:
    """A copy of the session's store (its embedding cache makes the under-specified library's index quick)."""
    return copy_store(agent_context, tmp_path_factory.mktemp("under-store") / "store")


@pytest.fixture(scope="module")
def logs(tmp_path_factory, under, agent_context, under_store) -> Path:
    """Real logs: check_balance sessions on the complete desk and on the under-specified one."""
    d = tmp_path_factory.mktemp("logs")
    setups = {"complete": replace(agent_context, experience=False),
              "under": Context(library=str(under), db_path=str(d / "under.sqlite"), store_dir=under_store,
                               experience=False)}
    for name, ctx in setups.items():
        with open_checkpointer(d / f"cp-{name}.sqlite") as cp:
            graph = build_agent(ctx, checkpointer=cp)
            for i, (cid, pin) in enumerate(CUSTOMERS):
                # asked for a token it cannot have, the user of the under-specified desk gives none (one who says
                # they cannot give it hears the task cannot go on, and no call is tried: conversations/banking.yaml)
                _converse(graph, ctx, f"{name}-{i}", cid, pin, ("You should have that, not me",) if name == "under" else ())
    return d


def test_event_log_from_python_beside_the_checkpoints(logs):
    events = read_events(logs / "events.sqlite")
    kinds = {e.kind for e in events}
    assert {"user", "decision", "candidates", "proposal", "tool_call", "tool_result", "reply"} <= kinds
    assert {"complete-0", "under-0"} <= {e.thread for e in events}
    call = next(e for e in events if e.kind == "tool_result" and e.thread == "complete-0")
    assert call.workflow == "check_balance" and call.frame and call.name == "verify_identity"
    assert all(e.session == e.thread for e in events)
    # the under-specified desk never verifies: its get_balance attempt is stopped (missing auth_token)
    assert any(e.kind == "verdict" and e.thread == "under-0" and e.name == "get_balance" for e in events)


def test_export_and_bad_jsonl(logs, tmp_path):
    out = tmp_path / "ev.jsonl"
    with open_event_log(logs / "events.sqlite") as log:
        n = log.export_jsonl(out, thread="complete-1")
    lines = out.read_text().splitlines()
    assert n == len(lines) > 3 and all(json.loads(x)["thread"] == "complete-1" for x in lines)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "\n" + '{"thread": "t", "kind": "nonsense"}\n')
    with pytest.raises(EventLogError, match=r"bad.jsonl:2: kind"):
        read_events(bad)


def test_event_log_from_chat(tmp_path, agent_context):
    env = {**os.environ, "FLOWDESK_DB_PATH": str(tmp_path / "demo.sqlite"),
           "FLOWDESK_STORE_DIR": copy_store(agent_context, tmp_path / "store")}
    cp = tmp_path / "cp.sqlite"
    subprocess.run([sys.executable, "-m", "graph.cli", "chat", "--thread", "c1", "--checkpoint", str(cp)],
                   input="where is my order ORD-7001, email amelia.hart@example.com\n", text=True, cwd=ROOT,
                   env=env, capture_output=True, timeout=120, check=False)
    out = tmp_path / "c1.jsonl"
    done = subprocess.run([sys.executable, "-m", "graph.cli", "logs", "export", "--log", str(tmp_path / "events.sqlite"),
                           "--thread", "c1", "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    events = read_events(out)
    assert [e.kind for e in events][:2] == ["user", "decision"]
    assert any(e.kind == "tool_result" and e.name == "track_order" for e in events)


def test_induction_on_real_logs(logs, under):
    events = read_events(logs / "events.sqlite")
    labels = {(t.thread.split("-")[0], t.label) for t in trajectories(events)}
    assert ("complete", "clean") in labels and ("under", "failed") in labels
    key = library_key(load_library(under))
    blocks, stats = induce(events, key)
    assert key == library_key(load_library(bundled_library_path()))  # same tools: the experience carries over
    action = next(b for b in blocks if b.kind == "action" and b.action == "get_balance")
    pre = next(p for p in action.prerequisites if p.requires == "verify_identity")
    assert pre.support == 3 and pre.confidence == 1.0 and pre.provides == ["auth_token"]
    assert pre.errors == 3 and pre.error_share == 1.0  # its absence preceded every failed attempt
    assert any(b.kind == "contrast" and "verify_identity" in b.description for b in blocks)
    assert stats["kept"] <= stats["candidates"]
    # a higher bar keeps weak blocks out; the scores against the removed prerequisites
    assert not [b for b in induce(events, key, min_support=4)[0] if b.kind == "action"]
    scores = prereq_scores(blocks, load_library(bundled_library_path()), load_library(under))
    assert scores["precision"] == 1.0 and "check_balance/get_balance/verify_identity" not in scores["missed"]
    assert len(closure(load_library(bundled_library_path())) - closure(load_library(under))) == scores["removed"]


def test_induce_graph_stores_verified_blocks(logs, under, under_store):
    from graph.induce import build_induce, graph

    assert graph.name == "induce"  # the exported graph (langgraph.json)
    induce_graph = build_induce()

    ctx = Context(library=str(under), db_path=str(logs / "under.sqlite"), store_dir=under_store)
    out = induce_graph.invoke({"logs": str(logs / "events.sqlite")}, context=ctx)
    assert out["stats"]["kept"] >= 1 and out["stored"]["added"] + out["stored"]["updated"] + \
        out["stored"]["unchanged"] == len(out["blocks"])
    again = induce_graph.invoke({"logs": str(logs / "events.sqlite")}, context=ctx)
    assert again["stored"]["unchanged"] == len(out["blocks"])  # incremental: nothing duplicated or rewritten
    key = get_resources(ctx).library_key
    assert any(b.action == "get_balance" for b in get_resources(ctx).experience.blocks(key, "check_balance"))


def test_served_induce_graph_reads_no_client_chosen_path(monkeypatch, tmp_path):
    from graph.context import ContextError
    from graph.induce import graph

    monkeypatch.delenv("FLOWDESK_CLIENT_SETTINGS", raising=False)
    with pytest.raises(ContextError, match="logs: a server-side location"):
        graph.invoke({"logs": "/etc/passwd"})


def test_llm_induction_is_verified_on_the_traces(logs):
    events = read_events(logs / "events.sqlite")
    revised = {"workflows": [{"name": "check_balance", "planned_steps": ["verify_identity", "get_balance"]}],
               "action_blocks": [{"name": "get_balance", "is_tool_call": True, "description": "Verify first.",
                                  "global_prerequisites": ["verify_identity"],
                                  "scenario_prerequisites": ["send_reset_link"]}]}  # unsupported: dropped
    n_tasks = len({t.workflow for t in trajectories(events)})
    model = FakeListChatModel(responses=["analysis", "draft", json.dumps(revised)] * n_tasks)
    blocks, stats = induce_llm(events, "k", model)
    block = next(b for b in blocks if b.action == "get_balance")
    assert [p.requires for p in block.prerequisites] == ["verify_identity"] and block.source == "llm"
    assert stats["llm"]["proposed"] == 2 and stats["llm"]["verified"] == 1
    broken = FakeListChatModel(responses=["?", "not json", "still not json"] * n_tasks)
    blocks2, stats2 = induce_llm(events, "k", broken)  # malformed output: the offline blocks stand
    assert stats2["llm"]["malformed"] == n_tasks and any(b.action == "get_balance" for b in blocks2)


def _block(key: str) -> Block:
    return Block(id=f"{key}:check_balance:action:get_balance", kind="action", library=key, workflow="check_balance",
                 action="get_balance", description="Before get_balance: verify_identity.", support=3, confidence=1.0,
                 prerequisites=[Prerequisite(kind="action", requires="verify_identity", provides=["auth_token"],
                                             support=3, confidence=1.0, error_share=1.0, errors=3)])


def test_store_persists_across_processes(tmp_path):
    from memory.store import WorkflowStore

    with WorkflowStore(tmp_path / "store") as ws:
        store = ExperienceStore(ws.client, ws.embedder)
        assert store.upsert([_block("k1")]) == {"added": 1, "updated": 0, "unchanged": 0}
        assert store.upsert([_block("k1")]) == {"added": 0, "updated": 0, "unchanged": 1}  # incremental
    code = ("import sys; from memory.store import WorkflowStore; from memory.experience_store import ExperienceStore\n"
            "with WorkflowStore(sys.argv[1]) as ws:\n"
            "    print([b.id for b in ExperienceStore(ws.client, ws.embedder).blocks('k1')])")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "k1:check_balance:action:get_balance" in done.stdout


def test_online_node_repairs_the_underspecified_desk(tmp_path, under, under_store):
    ctx = Context(library=str(under), db_path=str(tmp_path / "demo.sqlite"), store_dir=under_store)
    res = get_resources(ctx)
    res.experience.upsert([_block(res.library_key)])
    with open_checkpointer(tmp_path / "cp.sqlite") as cp:
        graph = build_agent(ctx, checkpointer=cp)
        replies = _converse(graph, ctx, "t", "C-1001", "4821")
        state = graph.get_state({"configurable": {"thread_id": "t"}}).values
    assert state["prerequisites"][0]["requires"] == "verify_identity"
    assert "verify_identity" in state["experience"]
    calls = [c["api"] for c in state["stack"][-1]["calls"] if c["status"] == "ok"]
    assert calls[:2] == ["verify_identity", "get_balance"], replies
    # without experience the same desk asks the user for the token it cannot have
    off = replace(ctx, experience=False)
    with open_checkpointer(tmp_path / "cp2.sqlite") as cp:
        replies = _converse(build_agent(off, checkpointer=cp), off, "t2", "C-1001", "4821")
    assert "auth token" in replies[-1].lower()


def test_hints_and_controller_gate_a_missing_verified_prerequisite(under):
    from dialogue.control.hints import hints_for

    wf = load_library(under).workflows["check_balance"]
    pre = ({"workflow": "check_balance", "action": "get_balance", "requires": "verify_identity", "kind": "action",
            "provides": ["auth_token"], "support": 3, "confidence": 1.0},)
    env = CheckEnv(turn=1, max_turns=40, max_api_repeats=3, prerequisites=pre)
    frame = {"workflow": "check_balance", "executed": ["ask_credentials"], "calls": []}
    call = {"kind": "tool", "name": "get_balance", "args": {"account_type": "checking"}}
    verdict = check_experience(call, wf, frame, env)
    assert not verdict["ok"] and verdict["missing"] == ["verify_identity"]
    ask = {"kind": "reply", "name": "request_information", "text": "Your auth token?", "args": {"slots": ["auth_token"]}}
    assert not check_experience(ask, wf, frame, env)["ok"]
    assert any("needs verify_identity first" in h for h in hints_for(wf, frame, env, None))
    verified = {**frame, "calls": [{"api": "verify_identity", "status": "ok", "args": {}}]}
    assert check_experience(call, wf, verified, env)["ok"]
    other = {**frame, "workflow": "transfer_money"}  # learned for another workflow: does not apply
    assert check_experience(call, wf, other, env)["ok"]


def test_event_model_is_documented_and_bounded():
    e = Event(thread="t", kind="tool_error", name="x", data={"auth_token": "tok-4821", "error": "bad"})
    assert set(Event.model_fields) == {"seq", "thread", "session", "ts", "kind", "turn", "workflow", "frame", "name",
                                       "data"}
    log = open_event_log("memory:test-redact")
    log.append([e])
    assert log.events()[0].data["auth_token"] != "tok-4821"  # secrets are redacted before they reach the log


@pytest.mark.server
def test_event_log_on_postgres(tmp_path):
    """With the checkpoints in PostgreSQL the event log is a table in the same database."""
    from pgcluster import PgCluster

    from memory.events import events_location
    from memory.ledger import ledger_location

    pg = PgCluster.create()
    try:
        location = events_location(ledger_location(pg.url))
        assert location == pg.url
        with open_event_log(location) as log:
            log.append([Event(thread="p1", kind="user", data={"text": "hi"}),
                        Event(thread="p1", kind="tool_error", name="x", data={"error": "bad"})])
        assert [e.kind for e in read_events(location)] == ["user", "tool_error"]
        with open_event_log(location) as log:
            assert log.export_jsonl(tmp_path / "p.jsonl", thread="p1") == 2
    finally:
        pg.close()


def _fraud_events(thread: str, pin: str, card: str, ok: bool, day: str = "2026-11-23") -> list[Event]:
    """One report_fraud instance as the log holds it: the identity verified, then the transactions listed."""
    ts = f"{day}T10:00:00.000+00:00"
    common = {"thread": thread, "workflow": "report_fraud", "frame": f"f-{thread}", "ts": ts}
    listed = {"args": {"auth_token": "[REDACTED]", "card_last4": card}}
    return [Event(kind="tool_result", name="verify_identity", data={"args": {"customer_id": "C-1004", "pin": pin},
                                                                     "result": {"customer_name": "J"}}, **common),
            Event(kind="tool_result" if ok else "tool_error", name="list_recent_transactions",
                  data={**listed, **({"result": {"found": True}} if ok else {"error": "no card ending in " + card})},
                  **common),
            *([Event(kind="reply", name="ask_disputed_transactions", data={}, **common)] if ok else [])]


def test_argument_rules_are_induced_by_contrast():
    """A card number that reuses the PIN just verified precedes every error and no success: a verified rule;
    a relation the successes share is no rule."""
    good = [e for i in range(4) for e in _fraud_events(f"ok{i}", "9090", "3309", True)]
    bad = [e for i in range(3) for e in _fraud_events(f"bad{i}", "9090", "9090", False)]
    blocks, _ = induce(good + bad, "k")
    block = next(b for b in blocks if b.action == "list_recent_transactions")
    rule = next(p for p in block.prerequisites if p.kind == "argument")
    assert (rule.requires, rule.relation, rule.other) == ("card_last4", "differs", "verify_identity.pin")
    assert rule.support == 4 and rule.confidence == 1.0 and rule.errors == 3 and rule.broken_ok == 0
    assert "card_last4 must not reuse the value of verify_identity.pin" in block.text
    # the same collision in successful runs too: no cause of the errors, nothing kept
    shared = [e for i in range(4) for e in _fraud_events(f"s{i}", "9090", "9090", True)]
    blocks, _ = induce(good + bad + shared, "k")
    assert not any(p.kind == "argument" for b in blocks for p in b.prerequisites)


def test_argument_rule_asks_again_before_the_call():
    from dialogue.execution.interpreter import Interpreter
    from dialogue.execution.policy_offline import prerequisite_first

    wf = load_library(bundled_library_path()).workflows["report_fraud"]
    rule = {"workflow": "report_fraud", "action": "list_recent_transactions", "requires": "card_last4",
            "kind": "argument", "relation": "differs", "other": "verify_identity.pin", "support": 4, "confidence": 1.0}
    env = CheckEnv(turn=2, max_turns=40, max_api_repeats=3, prerequisites=(rule,))
    frame = {"workflow": "report_fraud", "executed": ["ask_card_details", "verify_identity"], "asked": ["pin"],
             "slots": {"customer_id": "C-1004", "pin": 9090, "card_last4": 9090},
             "results": {"customer_name": "Jonah Weller", "auth_token": "t"},
             "calls": [{"api": "verify_identity", "status": "ok", "args": {"customer_id": "C-1004", "pin": 9090}}]}
    call = {"kind": "tool", "name": "list_recent_transactions", "args": {"auth_token": "t", "card_last4": 9090}}
    verdict = check_experience(call, wf, frame, env)
    assert not verdict["ok"] and verdict["fields"] == ["card_last4"]
    assert check_experience({**call, "args": {"auth_token": "t", "card_last4": 3309}}, wf, frame, env)["ok"]
    # the offline executor asks for the value instead of proposing the call
    interp = Interpreter(wf)
    upcoming = interp.next_action(frame, {})
    assert upcoming.name == "list_recent_transactions"
    ask = prerequisite_first(wf, interp, frame, upcoming, (rule,), [])
    assert ask["name"] == "request_information" and ask["args"]["slots"] == ["card_last4"]
    # asked for it, the user gave it again this turn: their answer stands (given earlier, it does not)
    asked = {**frame, "asked": ["card_last4"]}
    assert not check_experience(call, wf, asked, env)["ok"]
    assert check_experience(call, wf, asked, replace(env, given=("card_last4",)))["ok"]
    assert not check_experience(call, wf, frame, replace(env, given=("card_last4",)))["ok"]  # not asked for
    first_ask = {**frame, "asked": ["customer_id", "pin", "card_last4"]}  # the procedure's question, not a re-ask
    assert not check_experience(call, wf, first_ask, replace(env, given=("card_last4",)))["ok"]
    assert prerequisite_first(wf, interp, asked, upcoming, (rule,), [], ["card_last4"]) is None
    # a date rule: a date of birth after today breaks "past"
    dob = {"workflow": "report_fraud", "action": "verify_identity", "requires": "customer_id", "kind": "argument",
           "relation": "past", "other": "", "support": 4, "confidence": 1.0}
    env = CheckEnv(turn=1, max_turns=40, max_api_repeats=3, prerequisites=(dob,))
    future = {"kind": "tool", "name": "verify_identity", "args": {"customer_id": "2999-01-01", "pin": 1}}
    assert not check_experience(future, wf, {"workflow": "report_fraud"}, env)["ok"]
    past = {**future, "args": {"customer_id": "1985-01-01"}}
    assert check_experience(past, wf, {"workflow": "report_fraud"}, env)["ok"]


def test_tool_errors_by_kind(tmp_path):
    from evals.experience import tool_errors

    where = {"thread": "t", "workflow": "report_fraud", "frame": "f1"}
    failed = {"args": {"card_last4": 9090}, "error": "no card"}
    with open_event_log(tmp_path / "events.sqlite") as log:
        log.append([Event(kind="tool_error", name="list_recent_transactions", data=failed, **where),
                    Event(kind="tool_error", name="list_recent_transactions", data=failed, **where),
                    Event(kind="verdict", name="get_balance", data={"proposal_kind": "tool", "ok": False,
                                                                      "controller": "argument_schema"}, **where),
                    Event(kind="verdict", name="get_balance", data={"proposal_kind": "tool", "ok": False,
                                                                      "controller": "api_repetition"}, **where)])
    got = tool_errors(tmp_path / "events.sqlite")
    assert (got["failed"], got["rejected"], got["total"]) == (2, 1, 3)  # a loop guard's stop is no tool error
    assert got["by"] == {"report_fraud / list_recent_transactions / error": 1,
                         "report_fraud / list_recent_transactions / repeat": 1,
                         "report_fraud / get_balance / stopped: argument_schema": 1}
