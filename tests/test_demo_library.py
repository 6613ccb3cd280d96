"""The bundled Northwind Service Desk library: it loads cleanly, its bindings match its tools,
its templates and procedures only use declared names, and its procedures are regular enough for
the offline state-machine executor (slots first, API results assigned in ``returns`` order,
every branch ends by informing the user)."""

from __future__ import annotations

import importlib
import inspect

import pytest

from workflows.library import bundled_library_path, load_library
from workflows.pdl import BUILTIN_ANSWERS
from workflows.procedure import Call, If, While, iter_calls, parse_procedure


@pytest.fixture(scope="module")
def lib():
    return load_library(bundled_library_path())


def _fn(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def test_library_loads_with_expected_shape(lib):
    stats = lib.stats()
    assert stats["workflows"] >= 14 and stats["domains"] >= 3 and stats["roles"] >= 6
    for role in lib.roles.values():
        assert role.domain in lib.domains
        assert len(lib.workflows_of(role.name)) >= 2, f"role {role.name} has fewer than 2 workflows"


def test_every_binding_resolves_to_a_matching_function(lib):
    for wf in lib.workflows.values():
        for api in wf.apis:
            assert api.binding.kind == "python", f"{wf.name}.{api.name} is not bound to a demo tool"
            fn = _fn(api.binding.python)
            params = inspect.signature(fn).parameters
            ctx = params.get("context")
            assert ctx is not None and ctx.kind is inspect.Parameter.KEYWORD_ONLY and ctx.default is None, \
                f"{api.binding.python} needs a keyword-only context=None"
            key = params.get("idempotency_key")  # every demo tool honours the agent's idempotency key
            assert key is not None and key.kind is inspect.Parameter.KEYWORD_ONLY and key.default is None, \
                f"{api.binding.python} needs a keyword-only idempotency_key=None"
            names = [n for n in params if n not in ("context", "idempotency_key")]
            assert set(names) == set(api.param_names), f"{wf.name}.{api.name}: {names} vs {api.param_names}"
            for req in api.required_params:
                assert params[req].default is inspect.Parameter.empty, f"{req} of {api.binding.python} has a default"
            # the call the runner makes binds without error
            inspect.signature(fn).bind(**{n: None for n in api.param_names}, context=None)


def test_shared_tools_are_declared_consistently(lib):
    """An API bound to the same function in several workflows has the same parameters and returns."""
    seen: dict[str, tuple] = {}
    for wf in lib.workflows.values():
        for api in wf.apis:
            sig = (tuple(api.param_names), tuple(api.required_params), tuple(api.returns))
            assert seen.setdefault(api.binding.python, sig) == sig, f"{wf.name}.{api.name} differs elsewhere"


def test_templates_use_only_declared_names(lib):
    for wf in lib.workflows.values():
        declared = {s.name for s in wf.slots}
        for api in wf.apis:
            declared |= set(api.returns) | set(api.param_names)
        for ans in wf.answers:
            unknown = set(ans.variables) - declared
            assert not unknown, f"{wf.name}.{ans.name} uses undeclared {sorted(unknown)}"


def test_answers_wait_for_the_values_they_show(lib):
    """An answer showing a returned value lists (transitively) the API that returns it."""
    for wf in lib.workflows.values():
        slots = {s.name for s in wf.slots}
        for ans in wf.answers:
            before: set[str] = set()
            todo = list(ans.precondition)
            while todo:
                n = todo.pop()
                if n not in before:
                    before.add(n)
                    node = wf.api(n) or wf.answer(n)
                    todo.extend(node.precondition if node else [])
            returned = {r for n in before if wf.api(n) for r in wf.api(n).returns}
            for var in ans.variables:
                if var not in slots:
                    assert var in returned, f"{wf.name}.{ans.name} shows ${var} without a precondition returning it"


def _ends_with_answer(steps) -> bool:
    if not steps:
        return False
    last = steps[-1]
    if isinstance(last, Call):
        return last.kind == "ANSWER" and last.name not in BUILTIN_ANSWERS
    if isinstance(last, If):
        return all(_ends_with_answer(body) for _, _, body in last.branches) and _ends_with_answer(last.orelse)
    return False


def test_procedures_are_regular(lib):
    for wf in lib.workflows.values():
        proc = parse_procedure(wf.procedure)
        slots = {s.name for s in wf.slots}
        first = proc.steps[0]
        assert isinstance(first, Call) and first.kind == "ANSWER" and first.targets, f"{wf.name}: first step"
        assert set(first.targets) <= slots, f"{wf.name}: first step must collect slots"
        required = {s.name for s in wf.slots if s.required}
        collected = {t for c in iter_calls(proc.steps) if c.kind == "ANSWER" for t in c.targets}
        collected |= {a for c in iter_calls(proc.steps) if c.name == "request_information" for a in c.args}
        assert required <= collected, f"{wf.name}: slots never collected: {required - collected}"
        assert _ends_with_answer(proc.steps), f"{wf.name}: a branch does not end by informing the user"
        assert not any(isinstance(s, While) for s in proc.steps)
        called = set()
        for call in iter_calls(proc.steps):
            if call.kind != "API":
                continue
            api = wf.api(call.name)
            called.add(api.name)
            assert call.args == api.param_names, f"{wf.name}.{api.name}: args {call.args} vs {api.param_names}"
            assert call.targets == api.returns, f"{wf.name}.{api.name}: targets {call.targets} vs {api.returns}"
        assert called == {a.name for a in wf.apis}, f"{wf.name}: declared APIs the procedure never calls"
        used = {c.name for c in iter_calls(proc.steps) if c.kind == "ANSWER"}
        assert {a.name for a in wf.answers} <= used, f"{wf.name}: answers never used"


@pytest.mark.parametrize("workflow,api,needs", [
    ("book_table", "book", "check_availability"),
    ("book_hotel", "book_room", "check_room_availability"),
    ("refund_order", "refund_order", "verify_order"),
    ("cancel_order", "cancel_order", "verify_order"),
    ("block_card", "block_card", "verify_identity"),
    ("transfer_money", "transfer_funds", "check_funds"),
    ("change_booking", "reschedule_booking", "check_new_time"),
    ("report_fraud", "open_fraud_case", "verify_identity"),
])
def test_business_preconditions(lib, workflow, api, needs):
    wf = lib.get(workflow)
    deps, todo = set(), [api]
    while todo:
        for d in wf.api(todo.pop()).precondition:
            if d not in deps:
                deps.add(d)
                if wf.api(d):
                    todo.append(d)
    assert needs in deps
    assert wf.api(api).irreversible


def test_read_only_apis_are_not_irreversible(lib):
    for wf in lib.workflows.values():
        for api in wf.apis:
            if api.name.startswith(("check_", "find_", "verify_", "search_", "get_", "list_", "track_")):
                assert not api.irreversible, f"{wf.name}.{api.name}"


def test_close_pairs_exist_and_are_told_apart(lib):
    pairs = [("search_restaurants", "book_table"), ("change_booking", "cancel_booking"),
             ("cancel_order", "return_item"), ("return_item", "refund_order"), ("block_card", "report_fraud"),
             ("search_hotels", "book_hotel"), ("check_balance", "transfer_money")]
    for a, b in pairs:
        wa, wb = lib.get(a), lib.get(b)
        assert wa.domain == wb.domain and wa.description != wb.description
        # a close pair tells the reader when to use the other one — from one side at least: a pointer's own words
        # are indexed with the workflow, and return_item's "for money back without sending anything (damaged on
        # arrival, lost, double charge) use refund_order" drew refund requests to returns (session 24's probes)
        assert b in wa.detailed_description or a in wb.detailed_description, f"{a}/{b} do not point at each other"
