"""Importers: the Mermaid parser/compiler on hand-written charts, each importer on hand-written
fixtures, and (``@pytest.mark.data``) the three real datasets imported into a temp dir."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from workflows.importers.flowbench import KNOWN_UNUSED_APIS, compile_flowbench, import_flowbench, node_title
from workflows.importers.mermaid import MermaidError, compile_graph, dominators, parse_mermaid, NodeAction
from workflows.importers.sgd import import_sgd, workflow_name
from workflows.importers.star import answer_to_star_label, attach_outcomes, import_star, star_label_to_answer
from workflows.library import check_library, load_library
from workflows.pdl import Api
from workflows.procedure import If, While, iter_steps, parse_procedure

REPO = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    return Path(os.environ.get("FLOWDESK_DATA") or REPO.parent / "shared" / "data")


# --- mermaid: parser ------------------------------------------------------------------------------

CHART = """：
flowchart TD
S0(Start)--Order a pizza-->A1>Subgoal: find the menu
Description: call getMenu to list pizzas, sizes [S, M, L] included]
A1--Menu found-->A2{Does the user like a pizza?}
A2 -->|yes| A3[Subgoal: confirm the order
Description: call placeOrder]
A2 -- no --> A4[Say goodbye]
A1--Menu not found-->A4
A3 --> A5[Thank the user] --> A6((Done))
X1 & X2 --> A6

The auxiliary parameter information in the workflow is as follows:
"size": "Pizza size, S/M/L"
"""


def test_parser_shapes_edges_and_prose():
    chart = parse_mermaid(CHART)
    assert chart.direction == "TD"
    assert chart.nodes["S0"].shape == "round" and chart.nodes["S0"].text == "Start"
    assert chart.nodes["A1"].shape == "asymmetric"
    assert chart.nodes["A1"].text.endswith("sizes [S, M, L] included")  # nested brackets kept, multi-line
    assert chart.nodes["A2"].shape == "decision"
    assert chart.nodes["A6"].shape == "circle" and chart.nodes["A6"].text == "Done"
    edges = {(e.src, e.dst, e.label) for e in chart.edges}
    assert ("S0", "A1", "Order a pizza") in edges
    assert ("A2", "A3", "yes") in edges and ("A2", "A4", "no") in edges  # |label| and -- label -->
    assert ("A3", "A5", "") in edges and ("A5", "A6", "") in edges  # chain
    assert ("X1", "A6", "") in edges and ("X2", "A6", "") in edges  # & group
    assert "The" not in chart.nodes and "size" not in chart.nodes  # prose after the chart is not a node
    assert chart.start() == "S0"


def test_parser_reports_unclosed_shape():
    with pytest.raises(MermaidError, match="unclosed"):
        parse_mermaid("flowchart TD\nA[never closed --> B[x]")


def test_node_title_splits_goal_and_description():
    assert node_title("Subgoal: find it\nDescription: look  around") == ("find it", "look around")
    assert node_title("Current goal: Ask again\nTell the user why") == ("Ask again", "Tell the user why")
    assert node_title("Inform the user that the insurance\nis not valid") == (
        "Inform the user that the insurance is not valid", "")


# --- mermaid: compiler ----------------------------------------------------------------------------

def _compile(src: str, apis: dict[str, str]):
    """Compile with nodes whose text names an API calling it, other nodes answering."""
    chart = parse_mermaid(src)

    def action(node):
        if node.id == chart.start():
            return NodeAction(question="request")
        called = [a for a in apis if a in node.text]
        if called:
            return NodeAction([f"[{apis[a]}] = API.{a}()" for a in called], called, node.text)
        return NodeAction([f"ANSWER.a_{node.id}()"], [f"a_{node.id}"], node.text)

    return compile_graph(chart, action, set(apis))


def test_compile_branches_and_merges():
    src = """flowchart TD
    S(Start) --> A[call lookup]
    A -->|found| B{pick one?}
    A -->|missing| D[Sorry]
    B -->|first| C[call book]
    B -->|second| C
    B -->|none| D
    C --> E[call notify]
    """
    out = _compile(src, {"lookup": "r1", "book": "r2", "notify": "r3"})
    proc = parse_procedure(out.procedure)  # the result is a valid PDL procedure
    top = [s for s in proc.steps if isinstance(s, If)]
    assert len(top) == 1 and len(top[0].branches) == 1 and top[0].orelse  # found / else missing
    assert 'COND("call lookup -> found")' in out.procedure
    assert 'elif COND("pick one? -> second")' in out.procedure and "# none" in out.procedure
    # the merge node C is written in both branches that reach it
    assert [c.name for c in proc.calls()].count("book") == 2
    assert out.loops == [] and out.unreachable == []
    assert out.preconditions["book"] == ["lookup"] and out.preconditions["notify"] == ["lookup", "book"]
    assert out.preconditions["a_D"] == ["lookup"]


def test_compile_loops_become_while_with_pass_and_break():
    src = """flowchart TD
    S(Start) --> A[call search]
    A -->|none| B[Change criteria?]
    B -->|yes| A
    B -->|no| Z[Bye]
    A -->|some| C[call book]
    C -->|failed| D[Try another time?]
    D -->|again| C
    D -->|new search| A
    D -->|stop| Z
    C -->|ok| Y[Done]
    """
    out = _compile(src, {"search": "hits", "book": "ok"})
    proc = parse_procedure(out.procedure)
    loops = [s for s in iter_steps(proc.steps) if isinstance(s, While)]
    assert [w.source for w in loops] == ['COND("call search (first time, or again after: yes; new search)")',
                                         'COND("call book (first time, or again after: again)")']
    assert out.loops == ["A", "C"]
    text = out.procedure
    assert "pass  # back to: call search" in text  # innermost loop repeats
    assert "pass  # back to: call book" in text
    assert "break  # back to: call search (the enclosing loop repeats)" in text  # outer loop from inner
    assert text.count("break  # the flow ends here") >= 3  # Bye/Done inside loops end them
    # book is dominated by search even though a loop returns to search
    assert out.preconditions == {"search": [], "a_B": ["search"], "a_Z": ["search"], "book": ["search"],
                                 "a_D": ["search", "book"], "a_Y": ["search", "book"]}


def test_dominators_on_diamond():
    chart = parse_mermaid("flowchart TD\nS(Start)-->A\nA-->B\nA-->C\nB-->D\nC-->D\n")
    dom = dominators(chart)
    assert dom["D"] == {"S", "A", "D"} and dom["B"] == {"S", "A", "B"}


def test_flowbench_node_compilation_calls_named_tools():
    apis = [Api(name="getMenu", returns=["menu"]), Api(name="placeOrder", parameters={
        "type": "object", "properties": {"size": {"type": "string"}}}, returns=["order_id"])]
    compiled, answers = compile_flowbench(CHART, apis, ["getMenu", "placeOrder"])
    assert "[menu] = API.getMenu()" in compiled.procedure
    assert "[order_id] = API.placeOrder(size)" in compiled.procedure
    assert compiled.preconditions["placeOrder"] == ["getMenu"]
    names = [a.name for a in answers]
    assert "say_goodbye" in names and "thank_the_user" in names
    goodbye = next(a for a in answers if a.name == "say_goodbye")
    assert goodbye.precondition == ["getMenu"]  # both paths to it pass through getMenu
    assert not any(a.name.endswith("_reply") for a in answers)  # tool nodes that do not speak


def test_flowbench_tool_node_that_speaks_gets_a_reply_answer():
    chart = "flowchart TD\nS(Start)-->A>Subgoal: Quote\nDescription: Ask for the route, call getFee, inform the user of the fee]"
    compiled, answers = compile_flowbench(chart, [Api(name="getFee", returns=["fee"])], ["getFee"])
    assert [a.name for a in answers] == ["quote_reply"]
    assert compiled.procedure.splitlines()[-2:] == ["[fee] = API.getFee()", "ANSWER.quote_reply()"]
    assert compiled.preconditions["quote_reply"] == ["getFee"]


# --- importers on hand-written fixtures ----------------------------------------------------------

def _write_flowbench(root: Path) -> Path:
    fs = root / "flowswitch"
    (fs / "data").mkdir(parents=True)
    (fs / "pools").mkdir()
    row = {
        "uuid": "u-1", "domain": "Food & Drink", "role": "pizza_clerk", "scenario": "Order a pizza",
        "apis": [
            {"api_name": "getMenu", "api_description": "List pizzas", "input_parameters": {},
             "output_parameters": {"menu": {"type": "array", "description": "pizzas"}}},
            {"api_name": "placeOrder", "api_description": "Order", "input_parameters": {
                "size": {"type": "string", "description": "S/M/L", "required": True},
                "extra_cheese": {"type": "bool", "description": "more cheese", "required": False}},
             "output_parameters": {"order_id": {"type": "string", "description": "id"}}},
            {"api_name": "unusedTool", "api_description": "never named", "input_parameters": {},
             "output_parameters": {}},
        ],
        "workflow": {"text": "Text form.", "code": "code form", "flowchart": CHART, "summary": "Order pizzas."},
    }
    (fs / "data" / "workflow_final.jsonl").write_text(json.dumps(row) + "\n")
    (fs / "pools" / "domain_desc.json").write_text(json.dumps({"Food & Drink": "Food things."}))
    (fs / "pools" / "role_desc.json").write_text(json.dumps({"pizza_clerk": "Sells pizza."}))
    return root


def test_flowbench_importer_on_fixture(tmp_path):
    data = _write_flowbench(tmp_path / "data")
    root = import_flowbench(data, tmp_path / "lib")
    lib = load_library(root)
    wf = lib.get("order_a_pizza")
    assert (wf.title, wf.domain, wf.role, wf.description) == ("Order a pizza", "food_drink", "pizza_clerk", "Order pizzas.")
    assert "uuid:u-1" in wf.tags and wf.representations.flowchart == CHART
    assert wf.api("placeOrder").parameters["required"] == ["size"]
    assert wf.api("placeOrder").parameters["properties"]["extra_cheese"]["type"] == "boolean"
    assert wf.slot("size").required and wf.slot("extra_cheese").type == "boolean"
    assert all(a.binding.kind == "simulate" for a in wf.apis)
    assert "unusedTool" not in wf.procedure  # reported, not invented
    assert lib.domains["food_drink"].title == "Food & Drink" and lib.roles["pizza_clerk"].description == "Sells pizza."
    # the Flowchart's YAML uses block scalars for multi-line text
    assert "procedure: |" in Path(wf.source).read_text()


def test_flowbench_importer_names_the_line_of_a_broken_flowchart(tmp_path):
    data = _write_flowbench(tmp_path / "data")
    path = data / "flowswitch" / "data" / "workflow_final.jsonl"
    row = json.loads(path.read_text())
    row["workflow"]["flowchart"] = "flowchart TD\nS(Start)-->A[never closed"
    path.write_text(path.read_text() + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"workflow_final.jsonl:2: field workflow.flowchart \(Order a pizza\)"):
        import_flowbench(data, tmp_path / "lib")


def test_sgd_importer_on_fixture(tmp_path):
    schema = [{"service_name": "Pizza_1", "description": "Order pizza", "slots": [
        {"name": "size", "description": "Size", "is_categorical": True, "possible_values": ["S", "M", "L"]},
        {"name": "topping", "description": "Topping", "is_categorical": False, "possible_values": []},
        {"name": "price", "description": "Price", "is_categorical": False, "possible_values": []}],
        "intents": [{"name": "OrderPizza", "description": "Order a pizza", "is_transactional": True,
                     "required_slots": ["size"], "optional_slots": {"topping": "cheese"},
                     "result_slots": ["size", "topping", "price"]}]}]
    (tmp_path / "sgd" / "dev").mkdir(parents=True)
    (tmp_path / "sgd" / "dev" / "schema.json").write_text(json.dumps(schema))
    lib = load_library(import_sgd(tmp_path / "sgd", tmp_path / "lib", "dev"))
    wf = lib.get(workflow_name("Pizza_1", "OrderPizza"))
    assert wf.name == "Pizza_1__OrderPizza" and (wf.domain, wf.role, wf.title) == ("Pizza", "Pizza_1", "OrderPizza")
    assert wf.slot("size").enum == ["S", "M", "L"] and not wf.slot("topping").required
    api = wf.api("OrderPizza")
    assert api.irreversible and api.returns == ["size", "topping", "price"] and api.required_params == ["size"]
    assert "Order pizza" in wf.detailed_description
    steps = [c.name for c in parse_procedure(wf.procedure).calls()]
    assert steps == ["request_information", "OrderPizza", "inform_results"]


STAR_TASK = {
    "task": "pizza_order",
    "replies": {"hello": "Hi!", "pizza_ask_size": "Which size?", "pizza_ask_confirm": "Order the {size:s}?",
                "pizza_done": "Ordered, total {price:d}.", "pizza_failed": "Sorry.", "anything_else": "Anything else?",
                "query_check": "Query Check", "query_book": "Query Book", "yes": "Yes", "no": "No",
                "available": "Available", "unavailable": "Unavailable",
                "query_success": "Succeeded", "query_failure": "Failed", "out_of_scope": "I am only able to sell pizza."},
    "graph": {"hello": "pizza_ask_size", "pizza_ask_size": "query_check", "available": "pizza_ask_confirm",
              "unavailable": "pizza_failed", "yes": "query_book", "no": "pizza_ask_size",
              "query_success": "pizza_done", "query_failure": "pizza_failed", "pizza_done": "anything_else"},
}
STAR_API = {"input": [{"Name": "Size", "Type": "Categorical", "Categories": ["Small", "Large"]},
                      {"Name": "CustomerName", "Type": "ShortString"},
                      {"Name": "RequestType", "Type": "RequestType", "Categories": ["Check", "Book"]}],
            "output": [{"Name": "Price", "Type": "Integer", "Min": 5, "Max": 9},
                       {"Name": "Size", "Type": "Categorical", "Categories": ["Small", "Large"]}],
            "required": ["Size", "RequestType"], "db": "pizza", "function": "pizza_order", "returns_count": False}


def _write_star(root: Path) -> Path:
    (root / "star" / "tasks" / "pizza_order").mkdir(parents=True)
    (root / "star" / "apis" / "apis").mkdir(parents=True)
    (root / "star" / "apis" / "dbs").mkdir(parents=True)
    (root / "star" / "tasks" / "pizza_order" / "pizza_order.json").write_text(json.dumps(STAR_TASK))
    (root / "star" / "apis" / "apis" / "pizza_order.json").write_text(json.dumps(STAR_API))
    (root / "star" / "apis" / "dbs" / "pizza.json").write_text(json.dumps(
        [{"Name": "Crust", "Type": "Categorical", "Categories": ["thin", "thick"]}]))
    return root / "star"


def test_star_outcomes_attach_to_query_and_question():
    got = attach_outcomes(STAR_TASK["graph"], STAR_TASK["replies"])
    assert got == {"query_check": ["available", "unavailable"], "query_book": ["query_success", "query_failure"],
                   "pizza_ask_confirm": ["yes", "no"]}


def test_star_label_mapping_round_trips():
    for label in ("hotel_ask_hotel", "ask name?", "L_x", "if", "a-b_c", "2nd", "naïve"):
        name = star_label_to_answer(label)
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and answer_to_star_label(name) == label
    assert star_label_to_answer("hotel_ask_hotel") == "hotel_ask_hotel"


def test_star_importer_and_kb_tool_on_fixture(tmp_path):
    from workflows.bindings import ToolRunner
    from workflows.importers import star_kb

    star = _write_star(tmp_path / "data")
    try:
        lib = load_library(import_star(star, tmp_path / "lib"))
        wf = lib.get("pizza_order")
        assert wf.api("pizza_order").binding.python == "workflows.importers.star_kb:pizza_order"
        assert {a.name for a in wf.answers} >= {"hello", "pizza_ask_size", "pizza_done", "anything_else"}
        assert wf.answer("pizza_done").template == "Ordered, total ${Price}."
        assert wf.answer("pizza_ask_confirm").template == "Order the ${Size}?"
        assert wf.answer("pizza_done").precondition == ["pizza_order"]
        assert 'COND("pizza_order query check result -> available")' in wf.procedure
        assert 'COND("Order the [size]? -> yes")' in wf.procedure
        assert wf.slot("Size").enum == ["Small", "Large"] and wf.slot("Size").required
        runner = ToolRunner()
        ok = runner.run(wf, "pizza_order", {"Size": "small", "RequestType": "Check", "CustomerName": "Ann"})
        assert ok.ok and ok.data["Size"] == "Small" and 5 <= ok.data["Price"] <= 9 and ok.data["Crust"] in ("thin", "thick")
        again = runner.run(wf, "pizza_order", {"Size": "small", "RequestType": "Check", "CustomerName": "Ann"})
        assert again.data == ok.data  # deterministic
        bad = runner.run(wf, "pizza_order", {"Size": "Huge", "RequestType": "Check"})
        assert not bad.ok and "Huge" in bad.error
        ranged = star_kb.query("pizza_order", Price="api.is_at_least(8)")
        assert ranged["Price"] in (8, 9)
        assert "error" in star_kb.query("pizza_order", Price="api.is_at_most(2)")
    finally:
        star_kb._registered = None
        star_kb._spec.cache_clear()


def test_star_kb_takes_values_as_the_api_input_spec_spells_them(tmp_path):
    """A KB value spec may store a field otherwise than the API takes it (an hour as an integer, its end
    bound a rule over another field): the API's input spec decides what a caller may pass."""
    from workflows.importers import star_kb

    root = tmp_path / "star"
    (root / "apis" / "apis").mkdir(parents=True)
    (root / "apis" / "dbs").mkdir(parents=True)
    (root / "apis" / "apis" / "visit.json").write_text(json.dumps({
        "input": [{"Name": "StartTimeHour", "Type": "Categorical", "Categories": ["7 pm", "8 pm"]},
                  {"Name": "PatientName", "Type": "ShortString"}],
        "output": [{"Name": "Message", "Type": "ShortString"}], "db": "agenda"}))
    (root / "apis" / "dbs" / "agenda.json").write_text(json.dumps([
        {"Name": "StartTimeHour", "Type": "Integer", "Min": 0, "Max": 23},
        {"Name": "EndTimeHour", "Type": "Integer", "Min": '!lambda p: p["StartTimeHour"] + 2'}]))
    star_kb.register_data_dir(root)
    try:
        got = star_kb.query("visit", StartTimeHour="8 pm", PatientName="Ann")
        assert "error" not in got and got["StartTimeHour"] == "8 pm"
        assert "error" in star_kb.query("visit", StartTimeHour="9 pm")
        assert star_kb.returned_fields("visit") == {"Message", "StartTimeHour", "EndTimeHour"}
    finally:
        star_kb._registered = None
        star_kb._spec.cache_clear()


# --- the real datasets ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    data = data_dir()
    if not (data / "flowswitch").is_dir() or not (data / "star").is_dir() or not (data / "sgd").is_dir():
        pytest.skip(f"datasets not found in {data} (set FLOWDESK_DATA)")
    out = tmp_path_factory.mktemp("imported")
    start = time.perf_counter()
    roots = {"flowbench": import_flowbench(data / "flowswitch", out / "flowbench"),
             "star": import_star(data, out / "star"),
             "sgd": import_sgd(data, out / "sgd", "train")}
    elapsed = time.perf_counter() - start
    checked = {k: check_library(v) for k, v in roots.items()}
    return {"data": data, "roots": roots, "checked": checked, "elapsed": elapsed,
            "total": time.perf_counter() - start}


@pytest.mark.data
def test_real_imports_are_valid(imported):
    for name, (lib, issues) in imported["checked"].items():
        assert issues == [], f"{name}: " + "\n".join(map(str, issues[:5]))
    stats = {k: lib.stats() for k, (lib, _) in imported["checked"].items()}
    assert (stats["flowbench"]["workflows"], stats["flowbench"]["roles"], stats["flowbench"]["domains"]) == (51, 22, 6)
    assert stats["flowbench"]["apis"] == 109
    assert stats["star"]["workflows"] == 24 and stats["sgd"]["workflows"] == 53


@pytest.mark.data
def test_real_flowbench_apis_appear_in_their_procedures(imported):
    lib, _ = imported["checked"]["flowbench"]
    missing = {}
    for wf in lib.workflows.values():
        called = {c.name for c in parse_procedure(wf.procedure).calls() if c.kind == "API"}
        absent = {a.name for a in wf.apis} - called
        if absent:
            missing[wf.name] = absent
        assert all(a.binding.kind == "simulate" for a in wf.apis)
    assert missing == KNOWN_UNUSED_APIS
    rows = [json.loads(x) for x in (imported["data"] / "flowswitch" / "data" / "workflow_final.jsonl").open()]
    names = {t[5:]: w.name for w in lib.workflows.values() for t in w.tags if t.startswith("uuid:")}
    assert len(names) == 51 and all(lib.get(names[r["uuid"]]).title == r["scenario"] for r in rows)
    assert all(lib.get(names[r["uuid"]]).representations.code == r["workflow"]["code"] for r in rows)
    # spot checks against the flowchart text: booking/signing needs the search/identity step first
    assert lib.get("search_for_apartments").api("apartmentSigning").precondition == ["searchApartment"]
    assert lib.get("make_an_appointment_to_view_a_home").api("fixTime").precondition == ["getRoomInfo"]
    assert lib.get("book_a_hotel_room").api("bookHotel").precondition == ["checkHotelAvailability"]
    # two entry branches (inquiry / payment): neither tool requires the other
    gas = lib.get("gas_fee_inquiry_and_payment")
    assert gas.api("lookMeter").precondition == [] and gas.api("getPayLink").precondition == []


@pytest.mark.data
def test_real_sgd_names_follow_the_rule(imported):
    lib, _ = imported["checked"]["sgd"]
    schema = json.loads((imported["data"] / "sgd" / "train" / "schema.json").read_text())
    expected = {f"{s['service_name']}__{i['name']}" for s in schema for i in s["intents"]}
    assert set(lib.workflows) == expected
    wf = lib.get("Restaurants_1__ReserveRestaurant")
    assert (wf.domain, wf.role, wf.title) == ("Restaurants", "Restaurants_1", "ReserveRestaurant")
    assert wf.apis[0].irreversible


@pytest.mark.data
def test_real_star_tool_runs_in_a_fresh_process(imported):
    lib, _ = imported["checked"]["star"]
    assert set(lib.workflows) == {p.name for p in (imported["data"] / "star" / "tasks").iterdir() if p.is_dir()}
    script = textwrap.dedent(f"""
        import json
        from workflows.bindings import ToolRunner
        from workflows.library import load_library
        wf = load_library({str(imported['roots']['star'])!r}).get("hotel_search")
        res = ToolRunner().run(wf, "hotel_search", {{"Cost": "cheap", "AverageRating": 4}})
        print(json.dumps({{"ok": res.ok, "data": res.data, "error": res.error}}))
    """)
    env = {**os.environ, "FLOWDESK_DATA": str(imported["data"])}
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["ok"], res["error"]
    assert res["data"]["Cost"] == "Cheap" and res["data"]["AverageRating"] == 4 and res["data"]["items"]
    bank = lib.get("bank_balance")
    assert bank.answer("bank_inform_balance").template == "Your current balance is ${BankBalance} in credit."
    assert bank.answer("bank_inform_balance").precondition == ["bank_balance"]
    # the wizard interface's generic closings, in every task (bank_balance's spec lists neither)
    for wf in lib.workflows.values():
        assert wf.answer("goodbye_1") is not None and wf.answer("goodbye_2") is not None, wf.name
    assert bank.answer("goodbye_2").template == "Thank you and goodbye." and bank.answer("goodbye_2").precondition == []


def test_flowbench_enumerations_become_slot_enums():
    from workflows.importers.flowbench import enum_values

    assert enum_values("The preferred cuisine. Enumeration type, [Shandong cuisine, Sichuan cuisine]") == \
        ["Shandong cuisine", "Sichuan cuisine"]
    assert enum_values('Main currency, enumeration type, ["USD", "EUR"]') == ["USD", "EUR"]
    assert enum_values("Conference number, default \"23898856536\"") is None


def test_star_kb_reads_hours_and_relative_bounds_without_evaluating_them():
    from workflows.importers.star_kb import _bound, _canon

    hours = {"Type": "Integer", "Min": 0, "Max": 23}
    assert (_canon(hours, "4 pm"), _canon(hours, "12 am"), _canon(hours, "7")) == (16, 0, 7)
    end = {"Type": "Integer", "Min": '!lambda p: p["StartTimeHour"] + 2', "Max": "!lambda p: __import__('os')"}
    assert _bound(end, "Min", 0, {"StartTimeHour": 16}) == 18 and _bound(end, "Max", 100, {}) == 100
