"""ToolRunner: python bindings (with/without context, timeout, exceptions), http against a local
server, simulate determinism, and schema errors that name the tool and the field."""

from __future__ import annotations

import json
import time

import pytest

from graph.context import Context
from tests.local_http import JsonHandler, serving
from workflows.bindings import ToolRunner, simulate, validate_args
from workflows.pdl import Workflow
from workflows.policy import BindingPolicy
from workflows.sanitize import REDACTED

SEEN: list = []


# --- tool functions the python bindings point at (module "test_bindings") ---------------------------

def plain(a: int, b: int = 0) -> dict:
    return {"sum": a + b}


def with_context(a: int, *, context=None) -> dict:
    SEEN.append(context)
    return {"timeout": context.tool_timeout, "a": a}


def sleepy(a: int) -> dict:
    time.sleep(2)
    return {"a": a}


def broken(a: int) -> dict:
    raise ValueError("database is locked")


def reports_error(a: int) -> dict:
    return {"error": "no such order", "a": a}


def not_a_dict(a: int):
    return [a, a]


def workflow(binding: dict, returns=("sum",), params=None) -> Workflow:
    return Workflow.model_validate({
        "name": "wf", "description": "test", "domain": "d", "role": "r",
        "apis": [{"name": "tool", "parameters": params or {"type": "object", "required": ["a"],
                                                           "properties": {"a": {"type": "integer"}}},
                  "returns": list(returns), "binding": binding}]})


# This module is a tool module only because the tests' policy allows it (as FLOWDESK_TOOL_MODULES would).
POLICY = BindingPolicy(tool_modules=("test_bindings",), http_hosts=("127.0.0.1",))


@pytest.fixture
def runner():
    return ToolRunner(Context(tool_timeout=0.3), policy=POLICY)


def test_python_binding_without_context(runner):
    res = runner.run(workflow({"python": "test_bindings:plain"}), "tool", {"a": 2})
    assert res.ok and res.data == {"sum": 2} and res.error is None and res.elapsed_ms >= 0


def test_python_binding_receives_context_only_when_accepted(runner):
    SEEN.clear()
    res = runner.run(workflow({"python": "test_bindings:with_context"}), "tool", {"a": 1})
    assert res.ok and res.data == {"timeout": 0.3, "a": 1} and SEEN == [runner.context]


def test_python_function_is_imported_once(runner):
    wf = workflow({"python": "test_bindings:plain"})
    runner.run(wf, "tool", {"a": 1})
    fn = runner._functions["test_bindings:plain"]
    runner.run(wf, "tool", {"a": 2})
    assert runner._functions["test_bindings:plain"] is fn


def test_python_timeout_is_an_error(runner):
    start = time.perf_counter()
    res = runner.run(workflow({"python": "test_bindings:sleepy"}), "tool", {"a": 1})
    assert not res.ok and "timed out after 0.3s" in res.error and time.perf_counter() - start < 1.5


def test_python_exception_is_an_error(runner):
    res = runner.run(workflow({"python": "test_bindings:broken"}), "tool", {"a": 1})
    assert not res.ok and res.error == "tool: ValueError: database is locked"


def test_error_key_is_a_failed_call(runner):
    res = runner.run(workflow({"python": "test_bindings:reports_error"}), "tool", {"a": 1})
    assert not res.ok and "no such order" in res.error and res.data["a"] == 1


def test_non_dict_result_is_wrapped(runner):
    assert runner.run(workflow({"python": "test_bindings:not_a_dict"}), "tool", {"a": 3}).data == {"result": [3, 3]}


def test_unknown_api_and_missing_module(runner):
    assert "no such tool" in runner.run(workflow({"python": "test_bindings:plain"}), "nope", {}).error
    res = runner.run(workflow({"python": "no_such_module_xyz:f"}), "tool", {"a": 1})
    assert not res.ok and "binding refused: module 'no_such_module_xyz' is not an allowed tool module" in res.error
    res = ToolRunner(policy=BindingPolicy(tool_modules=("no_such_module_xyz",))).run(
        workflow({"python": "no_such_module_xyz:f"}), "tool", {"a": 1})
    assert not res.ok and "module 'no_such_module_xyz' does not exist" in res.error


def test_schema_errors_name_tool_and_field(runner):
    wf = workflow({"python": "test_bindings:plain"},
                  params={"type": "object", "required": ["a"], "additionalProperties": False,
                          "properties": {"a": {"type": "integer", "minimum": 1}}})
    res = runner.run(wf, "tool", {"a": 0, "zzz": 1})
    assert not res.ok
    assert "tool: field 'a': 0 is less than the minimum of 1" in res.error
    assert "tool: unknown field 'zzz'" in res.error
    assert validate_args(wf.apis[0], {}) == ["tool: missing required field 'a'"]
    assert validate_args(wf.apis[0], "x")[0].startswith("tool: arguments must be an object")


def test_simulate_is_deterministic_per_args():
    wf = workflow({"simulate": True}, returns=("available", "booking_id", "total_price", "note"))
    api = wf.apis[0]
    a, b, c = simulate(wf, api, {"a": 1}), simulate(wf, api, {"a": 1}), simulate(wf, api, {"a": 2})
    assert a == b and set(a) == {"available", "booking_id", "total_price", "note"}
    assert isinstance(a["available"], bool) and a["booking_id"].startswith("BOO-")
    assert isinstance(a["total_price"], float) and isinstance(a["note"], str)
    outs = [simulate(wf, api, {"a": i}) for i in range(20)]
    assert len({o["booking_id"] for o in outs}) == 20 and {o["available"] for o in outs} == {True, False}
    assert a != c


def test_simulate_fixed_values_and_seed(runner):
    wf = workflow({"simulate": {"values": {"available": True}, "seed": 7}}, returns=("available", "ref"))
    res = runner.run(wf, "tool", {"a": 1})
    assert res.ok and res.data["available"] is True
    other = workflow({"simulate": {"values": {"available": True}, "seed": 8}}, returns=("available", "ref"))
    assert runner.run(other, "tool", {"a": 1}).data["ref"] != res.data["ref"]


# --- http against a tiny local server ----------------------------------------------------------------

class _Handler(JsonHandler):
    def do_POST(self):  # noqa: N802
        body = self.body()
        if body.get("a") == 13:
            self.send_json(500, {"detail": "unlucky"})
        elif body.get("a") == 99:
            time.sleep(1.0)
            self.send_json(200, {"late": True})
        else:
            self.send_json(200, {"sum": body["a"] + 1})

    def do_GET(self):  # noqa: N802
        self.send_json(200, {"path": self.path})


@pytest.fixture
def http_url():
    with serving(_Handler) as port:
        yield f"http://127.0.0.1:{port}"


def test_http_binding_json_in_out(runner, http_url):
    res = runner.run(workflow({"http": {"url": f"{http_url}/sum"}}), "tool", {"a": 4})
    assert res.ok and res.data == {"sum": 5}
    res = runner.run(workflow({"http": {"url": f"{http_url}/q", "method": "GET"}}), "tool", {"a": 4})
    assert res.ok and res.data == {"path": "/q?a=4"}


def test_http_non_2xx_is_an_error(runner, http_url):
    res = runner.run(workflow({"http": {"url": f"{http_url}/sum"}}), "tool", {"a": 13})
    assert not res.ok and "HTTP 500" in res.error and "unlucky" in res.error


def test_http_timeout_is_an_error(runner, http_url):
    res = runner.run(workflow({"http": {"url": f"{http_url}/sum", "timeout": 0.2}}), "tool", {"a": 99})
    assert not res.ok and "Timeout" in res.error


# --- least privilege, idempotency keys, secrets -------------------------------------------------------

def keyed(a: int, idempotency_key: str | None = None) -> dict:
    return {"a": a, "key": idempotency_key}


def test_python_binding_outside_the_allowed_modules_never_runs():
    # The default policy (bundled tool modules only) refuses a shell; nothing is imported or called.
    res = ToolRunner(Context()).run(workflow({"python": "os:system"}, params={
        "type": "object", "properties": {"command": {"type": "string"}}}), "tool", {"command": "touch /tmp/x"})
    assert not res.ok and "module 'os' is not an allowed tool module" in res.error
    assert "FLOWDESK_TOOL_MODULES" in res.error


def test_imported_helpers_and_private_names_are_refused():
    policy = BindingPolicy()
    res = ToolRunner(policy=policy).run(workflow({"python": "workflows.demo.tools:connect"}), "tool", {"a": 1})
    assert not res.ok and "imported into 'workflows.demo.tools' from 'workflows.demo.db'" in res.error
    res = ToolRunner(policy=policy).run(workflow({"python": "workflows.demo.tools:_open"}), "tool", {"a": 1})
    assert not res.ok and "private" in res.error


def test_env_tool_modules_allow_a_package(monkeypatch):
    monkeypatch.setenv("FLOWDESK_TOOL_MODULES", "test_bindings, acme.tools")
    policy = BindingPolicy.from_env()
    assert policy.module_allowed("test_bindings") and policy.module_allowed("acme.tools.billing")
    assert policy.module_allowed("workflows.demo.tools") and not policy.module_allowed("acme")
    assert ToolRunner().run(workflow({"python": "test_bindings:plain"}), "tool", {"a": 2}).data == {"sum": 2}


def test_python_tool_receives_the_idempotency_key_only_when_declared(runner):
    res = runner.run(workflow({"python": "test_bindings:keyed"}), "tool", {"a": 1}, idempotency_key="t1:3:call-1")
    assert res.data == {"a": 1, "key": "t1:3:call-1"}
    assert runner.run(workflow({"python": "test_bindings:plain"}), "tool", {"a": 1},
                      idempotency_key="t1:3:call-2").data == {"sum": 1}


class _EchoHandler(JsonHandler):
    """Echoes what it received, and a 401 that repeats the key (as real providers do)."""

    def do_POST(self):  # noqa: N802
        body = self.body()
        if body.get("a") == 401:
            self.send_json(401, {"detail": f"invalid key {self.headers.get('X-Api-Key')} for {self.path}"})
        else:
            self.send_json(200, {"key": self.headers.get("Idempotency-Key"), "api_key": self.headers.get("X-Api-Key"),
                                 "path": self.path})


@pytest.fixture
def echo_port():
    with serving(_EchoHandler) as port:
        yield port


def test_http_sends_idempotency_key_and_resolves_secrets_at_call_time(runner, echo_port, monkeypatch):
    monkeypatch.setenv("ECHO_KEY", "k-9f8e7d6c5b4a")
    wf = workflow({"http": {"url": f"http://127.0.0.1:{echo_port}/x?api_key=${{env:ECHO_KEY}}",
                            "headers": {"X-Api-Key": "${env:ECHO_KEY}"}}})
    res = runner.run(wf, "tool", {"a": 1}, idempotency_key="t:1:c")
    assert res.ok and res.data["key"] == "t:1:c"
    # the server saw the secret; nothing the agent keeps does
    assert "k-9f8e7d6c5b4a" not in json.dumps(res.data) and REDACTED in res.data["api_key"]
    res = runner.run(wf, "tool", {"a": 401})
    assert not res.ok and "HTTP 401" in res.error and "k-9f8e7d6c5b4a" not in res.error
    assert "${env:ECHO_KEY}" in res.error  # the template names where, without the value


def test_http_refuses_hosts_not_allowed_and_literal_secrets(echo_port, monkeypatch):
    wf = workflow({"http": {"url": f"http://127.0.0.1:{echo_port}/x"}})
    res = ToolRunner(Context()).run(wf, "tool", {"a": 1})  # default: no host allowed
    assert not res.ok and "host '127.0.0.1' is not an allowed http host (allowed: none" in res.error
    monkeypatch.setenv("FLOWDESK_HTTP_HOSTS", f"127.0.0.1:{echo_port + 1}")
    assert "not an allowed http host" in ToolRunner().run(wf, "tool", {"a": 1}).error  # other port
    literal = workflow({"http": {"url": f"http://u:hunter22@127.0.0.1:{echo_port}/x?token=abcdef123"}})
    res = ToolRunner(policy=POLICY).run(literal, "tool", {"a": 1})
    assert not res.ok and "literal password" in res.error and "hunter22" not in res.error
    assert "abcdef123" not in res.error


def test_missing_secret_names_the_variable_not_a_value(runner, echo_port, monkeypatch):
    monkeypatch.delenv("NO_SUCH_SECRET_VAR", raising=False)
    wf = workflow({"http": {"url": f"http://127.0.0.1:{echo_port}/x", "headers": {"Authorization": "Bearer ${env:NO_SUCH_SECRET_VAR}"}}})
    res = runner.run(wf, "tool", {"a": 1})
    assert not res.ok and "environment variable NO_SUCH_SECRET_VAR is not set" in res.error
