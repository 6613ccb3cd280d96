"""The demo tools on a real SQLite file: seeding is idempotent (also across two processes), every
workflow's procedure runs end to end against the tools on its happy and unhappy paths, the
tools have real effects, and user mistakes come back as ``{"error": ...}`` without changing data."""

from __future__ import annotations

import ast
import importlib
import string
import subprocess
import sys
from pathlib import Path

import pytest

from graph.context import Context
from workflows.bindings import ToolRunner
from workflows.demo import tools
from workflows.demo.db import connect, ensure_db, table_counts
from workflows.library import bundled_library_path, load_library
from workflows.procedure import Call, If, parse_procedure

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lib():
    return load_library(bundled_library_path())


@pytest.fixture
def ctx(tmp_path):
    path = tmp_path / "demo.sqlite"
    ensure_db(path)
    return Context(db_path=str(path))


def call(lib, ctx, workflow: str, api_name: str, **args) -> dict:
    """Call a tool through the workflow's binding and check it honours the API's ``returns``."""
    api = lib.get(workflow).api(api_name)
    module, _, name = api.binding.python.partition(":")
    out = getattr(importlib.import_module(module), name)(**args, context=ctx)
    if not out.get("error"):
        assert set(out) == set(api.returns), f"{api_name} returned {sorted(out)}, declared {api.returns}"
    return out


def query(ctx, sql: str, *args):
    conn = connect(ctx.db_path)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


# --- seeding ----------------------------------------------------------------------------------------

def test_seeding_is_idempotent(tmp_path):
    path = tmp_path / "d.sqlite"
    ensure_db(path)
    first = table_counts(path)
    ensure_db(path)
    assert table_counts(path) == first
    assert first["restaurants"] >= 10 and first["orders"] >= 10 and first["customers"] >= 6 and first["hotels"] >= 6


def test_older_seed_is_replaced(tmp_path):
    path = tmp_path / "old.sqlite"
    ensure_db(path)
    fresh = table_counts(path)
    conn = connect(path)
    conn.execute("UPDATE meta SET value='northwind-0'")
    conn.execute("DELETE FROM bookings WHERE id=1001")
    conn.close()
    from workflows.demo import db

    db._ensured.clear()  # a new process would not remember having checked this file
    ensure_db(path)
    assert table_counts(path) == fresh


def test_two_processes_seed_once(tmp_path):
    path = tmp_path / "race.sqlite"
    code = "import sys; from workflows.demo.db import ensure_db; ensure_db(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path)], cwd=REPO) for _ in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    reference = tmp_path / "single.sqlite"
    ensure_db(reference)
    assert table_counts(path) == table_counts(reference)


def test_default_path_comes_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWDESK_DB_PATH", str(tmp_path / "env.sqlite"))
    assert tools.search_restaurants(cuisine="thai", area="any")["found"]
    assert (tmp_path / "env.sqlite").exists()


# --- every procedure, end to end -----------------------------------------------------------------------

def walk(lib, ctx, workflow: str, user: dict) -> tuple[str, str]:
    """Interpret the procedure with ``user`` answering every slot; return (last answer, its text)."""
    wf = lib.get(workflow)
    values: dict = {}
    done: list[str] = []
    said: list[str] = []

    def run(steps) -> None:
        for st in steps:
            if isinstance(st, If):
                for test, _src, body in st.branches:
                    if eval(compile(ast.Expression(test), "<cond>", "eval"), {}, dict(values)):
                        run(body)
                        break
                else:
                    run(st.orelse)
                continue
            assert isinstance(st, Call)
            node = wf.api(st.name) or wf.answer(st.name)
            if node is not None:
                missing = set(node.precondition) - set(done)
                assert not missing, f"{workflow}: {st.name} ran before {missing}"
            if st.kind == "ANSWER":
                for slot in st.targets or st.args:
                    values[slot] = user[slot]
                if wf.answer(st.name):
                    said.append(st.name)
            else:
                out = call(lib, ctx, workflow, st.name, **{p: values[a] for p, a in zip(node.param_names, st.args)})
                assert not out.get("error"), f"{workflow}.{st.name}: {out['error']}"
                values.update({t: out[r] for t, r in zip(st.targets, node.returns)})
            done.append(st.name)

    run(parse_procedure(wf.procedure).steps)
    last = said[-1]
    return last, string.Template(wf.answer(last).template).substitute(values)


SCENARIOS = [
    ("search_restaurants", dict(cuisine="italian", area="any"), "list_restaurants", "Trattoria Lumi"),
    ("search_restaurants", dict(cuisine="thai", area="harbour"), "no_restaurants", "thai"),
    ("book_table", dict(restaurant="Sakura Lane", party_size=2, date="December 11", time="19:00",
                        guest_name="Ada Park"), "confirm_booking", "on Fri 11 Dec 2026 at 19:00 under Ada Park. "
                                                                   "Your reference is B-1011"),
    ("book_table", dict(restaurant="Trattoria Lumi", party_size=2, date="2026-12-05", time="19:30"),
     "offer_alternatives", "17:30"),
    ("change_booking", dict(booking_id="B-1004", new_date="2026-12-06", new_time="19:00"), "confirm_change",
     "Sun 6 Dec 2026 at 19:00"),
    ("change_booking", dict(booking_id="B-1006", new_date="2026-12-06", new_time="19:00"), "booking_not_active",
     "cancelled"),
    ("change_booking", dict(booking_id="B-1005", new_date="2026-12-19", new_time="20:00"), "offer_alternatives",
     "Free times that day: 18:00, 21:30, 22:00"),
    ("cancel_booking", dict(booking_id="b1005"), "confirm_cancellation", "Casa Fiorella"),
    ("cancel_booking", dict(booking_id="B-1006"), "booking_not_active", "already cancelled"),
    ("track_order", dict(order_id="ORD-7003", email="tomas.l@example.com"), "in_transit", "NP5512039877"),
    ("track_order", dict(order_id="ORD-7002", email="Amelia.Hart@example.com"), "delivered", "2026-11-06"),
    ("track_order", dict(order_id="7001", email="amelia.hart@example.com"), "being_prepared", "2026-11-25"),
    ("track_order", dict(order_id="ORD-7007", email="jonah.weller@example.com"), "other_status", "cancelled"),
    ("cancel_order", dict(order_id="ORD-7010", email="oskar.brandt@example.com", reason="changed_mind"),
     "confirm_order_cancelled", "€153.0"),
    ("cancel_order", dict(order_id="ORD-7012", email="lucia.romero@example.com", reason="found_cheaper"),
     "already_shipped", "already shipped"),
    ("cancel_order", dict(order_id="ORD-7002", email="amelia.hart@example.com", reason="changed_mind"),
     "cannot_cancel", "delivered"),
    ("return_item", dict(order_id="ORD-7011", email="nadia.okafor@example.com", item="vase", reason="faulty"),
     "confirm_return", "€58.0"),
    ("return_item", dict(order_id="ORD-7011", email="nadia.okafor@example.com", item="the runner, it is faulty",
                         reason="faulty"), "confirm_return", "€22.0"),
    ("return_item", dict(order_id="ORD-7004", email="tomas.l@example.com", item="wool scarf",
                         reason="no_longer_needed"), "return_not_possible", "window closed"),
    ("refund_order", dict(order_id="ORD-7008", email="elena.marsh@example.com", reason="item_returned"),
     "confirm_refund", "€95.0"),
    ("refund_order", dict(order_id="ORD-7009", email="elena.marsh@example.com", reason="item_returned"),
     "already_refunded", "Elena Marsh"),
    ("refund_order", dict(order_id="ORD-7003", email="tomas.l@example.com", reason="never_arrived"),
     "refund_not_possible", "still in transit"),
    ("refund_order", dict(order_id="ORD-7006", email="priya.raman@example.com", reason="never_arrived"),
     "confirm_refund", "€229.0"),
    ("check_balance", dict(customer_id="C-1001", pin="4821", account_type="savings"), "tell_balance", "12050.0"),
    ("check_balance", dict(customer_id="C-1002", pin="1357", account_type="savings"), "no_such_account", "Tomas"),
    ("reset_password", dict(customer_id="C-1003", date_of_birth="1992-07-21", channel="email"),
     "confirm_reset_sent", "p***@example.com"),
    ("reset_password", dict(customer_id="C-1004", date_of_birth="1985-02-28", channel="sms"), "account_locked",
     "branch"),
    ("update_address", dict(customer_id="C-1005", pin="3141", new_address="7 Meadow Lane, Northwind NW9 2ZZ"),
     "confirm_with_card_warning", "21 Chapel Street"),
    ("update_address", dict(customer_id="C-1002", pin="1357", new_address="12 Pier Road, Northwind NW7 4XY"),
     "confirm_address_change", "3 Harbour Steps"),
    ("block_card", dict(customer_id="C-1002", pin="1357", card_last4="1180", reason="lost"), "confirm_block",
     "2026-11-25"),
    ("block_card", dict(customer_id="C-1003", pin="2468", card_last4="7781", reason="stolen"), "already_blocked",
     "credit card"),
    ("report_fraud", dict(customer_id="C-1002", pin="1357", card_last4="1180", transaction_ids="TX-5007"),
     "confirm_fraud_case", "€430.0"),
    ("report_fraud", dict(customer_id="C-1004", pin="9090", card_last4="3309"), "no_recent_transactions", "3309"),
    ("transfer_money", dict(customer_id="C-1001", pin="4821", from_account="savings", amount=500),
     "confirm_transfer", "€11550.0"),
    ("transfer_money", dict(customer_id="C-1007", pin="5602", from_account="checking", amount=1000),
     "insufficient_funds", "€442.08"),
    ("search_hotels", dict(city="lisbon", check_in="2026-12-04", nights=2, guests=2), "list_hotels",
     "Hotel Azulejo"),
    ("search_hotels", dict(city="seville", check_in="2026-12-10", nights=2, guests=3), "no_hotels", "seville"),
    ("book_hotel", dict(hotel="Hotel Azulejo", room_type="double", check_in="2026-12-04", nights=2,
                        guest_name="Ada Park"), "confirm_reservation", "Fri 4 Dec 2026 to Sun 6 Dec 2026"),
    ("book_hotel", dict(hotel="Hotel Giralda Garden", room_type="double", check_in="2026-12-10", nights=2),
     "room_unavailable", "no double room"),
]


@pytest.mark.parametrize("workflow,user,answer,snippet", SCENARIOS, ids=[f"{s[0]}-{s[2]}" for s in SCENARIOS])
def test_procedure_runs_against_the_tools(lib, ctx, workflow, user, answer, snippet):
    last, text = walk(lib, ctx, workflow, user)
    assert last == answer, text
    assert snippet in text


def test_every_workflow_and_answer_is_exercised(lib):
    covered = {(w, a) for w, _, a, _ in SCENARIOS}
    assert {w for w, _ in covered} == set(lib.workflows)
    for wf in lib.workflows.values():
        proc = parse_procedure(wf.procedure)
        final = {c.name for c in proc.calls() if c.kind == "ANSWER" and not c.targets and wf.answer(c.name)}
        assert final <= {a for w, a in covered if w == wf.name}, f"{wf.name}: untested outcomes"


# --- real effects and server-side rules ----------------------------------------------------------------

def test_booking_lifecycle(lib, ctx):
    slot = dict(restaurant="Maison Verte", party_size=4, date="2026-12-19", time="19:00")
    assert call(lib, ctx, "book_table", "check_availability", **slot) == {"available": True, "alternatives": ""}
    ref = call(lib, ctx, "book_table", "book", **slot, guest_name="Ada Park")["booking_id"]
    found = call(lib, ctx, "cancel_booking", "find_booking", booking_id=ref)
    assert found == {"restaurant": "Maison Verte", "date": "2026-12-19", "time": "19:00", "party_size": 4,
                     "status": "confirmed"}
    # Maison Verte has one 4-seat table: the slot (and the next 90 minutes) are now taken
    again = call(lib, ctx, "book_table", "check_availability", **slot)
    assert again["available"] is False and "21:00" in again["alternatives"]
    err = call(lib, ctx, "book_table", "book", **slot, guest_name="Someone Else")
    assert "no table" in err["error"]
    assert call(lib, ctx, "cancel_booking", "cancel_booking", booking_id=ref) == {"cancelled": True}
    assert call(lib, ctx, "cancel_booking", "find_booking", booking_id=ref)["status"] == "cancelled"
    assert call(lib, ctx, "book_table", "check_availability", **slot)["available"] is True
    assert "already cancelled" in call(lib, ctx, "cancel_booking", "cancel_booking", booking_id=ref)["error"]


def test_reschedule_frees_the_old_time(lib, ctx):
    # B-1002 holds a 4-seat table at Trattoria Lumi 19:30; moving it frees 19:30 for a party of 4
    before = call(lib, ctx, "book_table", "check_availability", restaurant="Trattoria Lumi", party_size=4,
                  date="2026-12-05", time="19:30")
    assert before["available"] is False
    assert call(lib, ctx, "change_booking", "check_new_time", booking_id="B-1002", new_date="2026-12-06",
                new_time="18:00")["available"]
    call(lib, ctx, "change_booking", "reschedule_booking", booking_id="B-1002", new_date="2026-12-06",
         new_time="18:00")
    assert call(lib, ctx, "book_table", "check_availability", restaurant="Trattoria Lumi", party_size=4,
                date="2026-12-05", time="19:30")["available"]
    assert query(ctx, "SELECT date, time FROM bookings WHERE id=1002")[0][:] == ("2026-12-06", "18:00")


def test_order_verify_then_refund(lib, ctx):
    verified = call(lib, ctx, "refund_order", "verify_order", order_id="ORD-7005", email="priya.raman@example.com")
    assert verified["status"] == "delivered" and verified["total"] == 45.0
    check = call(lib, ctx, "refund_order", "check_refund_eligibility", order_id="ORD-7005", reason="charged_twice")
    assert check == {"eligible": True, "amount": 45.0, "why_not": ""}
    out = call(lib, ctx, "refund_order", "refund_order", order_id="ORD-7005", email="priya.raman@example.com",
               reason="charged_twice")
    assert out["amount_refunded"] == 45.0 and out["refund_id"].startswith("RF-")
    assert query(ctx, "SELECT amount, reason FROM refunds WHERE order_id='ORD-7005'")[0][:] == (45.0, "charged_twice")
    again = call(lib, ctx, "refund_order", "check_refund_eligibility", order_id="ORD-7005", reason="charged_twice")
    assert again["eligible"] is False
    # the server re-checks eligibility: a second refund is refused
    assert "cannot be refunded" in call(lib, ctx, "refund_order", "refund_order", order_id="ORD-7005",
                                        email="priya.raman@example.com", reason="charged_twice")["error"]


def test_cancelled_order_is_refunded_and_cannot_be_cancelled_twice(lib, ctx):
    out = call(lib, ctx, "cancel_order", "cancel_order", order_id="ORD-7001", email="amelia.hart@example.com",
               reason="ordered_by_mistake")
    assert out == {"refund_amount": 103.0}
    assert query(ctx, "SELECT status, refunded FROM orders WHERE id='ORD-7001'")[0][:] == ("cancelled", 103.0)
    assert "only orders that have not shipped" in call(
        lib, ctx, "cancel_order", "cancel_order", order_id="ORD-7001", email="amelia.hart@example.com",
        reason="changed_mind")["error"]


def test_return_marks_the_item_and_blocks_a_second_return(lib, ctx):
    call(lib, ctx, "return_item", "create_return", order_id="ORD-7011", email="nadia.okafor@example.com",
         item="Table runner", reason="not_as_described")
    assert query(ctx, "SELECT status FROM orders WHERE id='ORD-7011'")[0][0] == "return_requested"
    assert call(lib, ctx, "return_item", "check_return_eligibility", order_id="ORD-7011",
                item="table runner")["eligible"] is False
    # the other item of the order can still go back
    assert call(lib, ctx, "return_item", "check_return_eligibility", order_id="ORD-7011", item="vase")["eligible"]


def test_card_block_and_tokens(lib, ctx):
    token = call(lib, ctx, "block_card", "verify_identity", customer_id="c-1001", pin="4821")["auth_token"]
    assert call(lib, ctx, "block_card", "block_card", auth_token=token, card_last4="9032", reason="stolen")["blocked"]
    assert query(ctx, "SELECT status, block_reason FROM cards WHERE last4='9032'")[0][:] == ("blocked", "stolen")
    assert call(lib, ctx, "block_card", "get_card_status", auth_token=token, card_last4="9032")["card_status"] == \
        "blocked"
    # block_card needs a token from verify_identity: the server refuses without one
    assert "verify" in call(lib, ctx, "block_card", "block_card", auth_token="AUTH-FORGED", card_last4="4417",
                            reason="lost")["error"]
    # a token only reaches its own customer's cards
    assert "no card ending in 1180" in call(lib, ctx, "block_card", "get_card_status", auth_token=token,
                                            card_last4="1180")["error"]


def test_transfer_moves_money_both_ways(lib, ctx):
    token = call(lib, ctx, "transfer_money", "verify_identity", customer_id="C-1003", pin="2468")["auth_token"]
    out = call(lib, ctx, "transfer_money", "transfer_funds", auth_token=token, from_account="checking", amount=204.12)
    assert out["new_balance"] == 5000.0
    bal = dict(query(ctx, "SELECT type, balance FROM accounts WHERE customer_id='C-1003'"))
    assert bal == {"checking": 5000.0, "savings": 1004.12}
    assert "less than" in call(lib, ctx, "transfer_money", "transfer_funds", auth_token=token,
                               from_account="savings", amount=5000)["error"]


def test_hotel_rooms_run_out(lib, ctx):
    stay = dict(hotel="Ribeira Suites", room_type="suite", check_in="2026-12-21", nights=2)
    # two suites, one already taken 2026-12-20..24: one booking fits, the next does not
    assert call(lib, ctx, "book_hotel", "check_room_availability", **stay)["available"]
    assert call(lib, ctx, "book_hotel", "book_room", **stay, guest_name="Ada Park")["reservation_id"].startswith("H-")
    assert call(lib, ctx, "book_hotel", "check_room_availability", **stay)["available"] is False
    assert "no suite room free" in call(lib, ctx, "book_hotel", "book_room", **stay, guest_name="Bo")["error"]


@pytest.mark.parametrize("workflow,api,args,message", [
    ("refund_order", "verify_order", dict(order_id="ORD-9999", email="x@example.com"), "no order ORD-9999"),
    ("refund_order", "verify_order", dict(order_id="ORD-7005", email="someone@example.com"), "does not match"),
    ("book_table", "check_availability", dict(restaurant="Nowhere Diner", party_size=2, date="2026-12-05",
                                              time="19:00"), "unknown restaurant"),
    ("book_table", "book", dict(restaurant="Sakura Lane", party_size=12, date="2026-12-05", time="19:00",
                                guest_name="A"), "largest table seats 4"),
    ("book_table", "book", dict(restaurant="Sakura Lane", party_size=2, date="2026-12-05", time="16:00",
                                guest_name="A"), "18:00 to 21:30"),
    ("book_table", "book", dict(restaurant="Sakura Lane", party_size=2, date="2025-12-05", time="19:00",
                                guest_name="A"), "in the past"),
    ("book_table", "check_availability", dict(restaurant="Sakura Lane", party_size=2, date="some day soon",
                                              time="19:00"), "YYYY-MM-DD"),
    ("cancel_booking", "find_booking", dict(booking_id="B-4242"), "no booking B-4242"),
    ("block_card", "verify_identity", dict(customer_id="C-1001", pin="0000"), "PIN does not match"),
    ("block_card", "verify_identity", dict(customer_id="C-9999", pin="1234"), "no customer C-9999"),
    ("return_item", "check_return_eligibility", dict(order_id="ORD-7011", item="sofa"), "no single item"),
    ("book_hotel", "check_room_availability", dict(hotel="Casa do Douro", room_type="suite",
                                                   check_in="2026-12-05", nights=2), "no suite rooms"),
    ("reset_password", "verify_personal_details", dict(customer_id="C-1001", date_of_birth="1990-01-01"),
     "date of birth does not match"),
])
def test_user_mistakes_are_error_results_and_change_nothing(lib, ctx, workflow, api, args, message):
    before = table_counts(ctx.db_path)
    out = call(lib, ctx, workflow, api, **args)
    assert set(out) == {"error"} and message in out["error"]
    assert table_counts(ctx.db_path) == before


def test_tool_runner_runs_the_bindings(lib, ctx):
    runner = ToolRunner(ctx)
    wf = lib.get("book_table")
    ok = runner.run(wf, "check_availability", dict(restaurant="Kiko Ramen Bar", party_size=2, date="2026-12-01",
                                                   time="12:30"))
    assert ok.ok and ok.data == {"available": True, "alternatives": ""}
    failed = runner.run(lib.get("refund_order"), "verify_order", dict(order_id="ORD-1", email="a@b.c"))
    assert not failed.ok and "no order ORD-1" in failed.error
    bad_schema = runner.run(wf, "check_availability", dict(restaurant="Kiko Ramen Bar", party_size="two",
                                                           date="2026-12-01", time="12:30"))
    assert not bad_schema.ok and "party_size" in bad_schema.error


@pytest.mark.parametrize("said,resolved", [
    ("2026-12-04", "2026-12-04"), ("today", "2026-11-20"), ("tomorrow", "2026-11-21"), ("Friday", "2026-11-20"),
    ("next Tuesday", "2026-11-24"), ("4 December", "2026-12-04"), ("Dec 4th", "2026-12-04"),
    ("March 3", "2027-03-03"), ("November 2", "2027-11-02"),
])
def test_dates_people_say_are_resolved_against_the_desk_calendar(lib, ctx, said, resolved):
    ref = call(lib, ctx, "book_table", "book", restaurant="Kiko Ramen Bar", party_size=2, date=said, time="1pm",
               guest_name="Ada Park")["booking_id"]
    found = call(lib, ctx, "cancel_booking", "find_booking", booking_id=ref)
    assert (found["date"], found["time"]) == (resolved, "13:00")


def test_desk_calendar_can_be_moved(lib, ctx, monkeypatch):
    monkeypatch.setenv("FLOWDESK_DEMO_TODAY", "2027-01-10")
    out = call(lib, ctx, "book_table", "check_availability", restaurant="Kiko Ramen Bar", party_size=2,
               date="2026-12-20", time="12:00")
    assert "in the past" in out["error"]
    # ORD-7011 (delivered 2026-11-17) is now outside its 30-day return window
    assert call(lib, ctx, "return_item", "check_return_eligibility", order_id="ORD-7011", item="vase")[
        "eligible"] is False
