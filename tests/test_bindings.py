"""ToolRunner: python bindings (with/without context, timeout, exceptions), http against a local
server, simulate determinism, and schema errors that name the tool and the field."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from graph.context import Context
from workflows.bindings import ToolRunner, simulate, validate_args
from workflows.pdl import Workflow

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


@pytest.fixture
def runner():
    return ToolRunner(Context(tool_timeout=0.3))


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
    assert not res.ok and "ModuleNotFoundError" in res.error


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

class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if body.get("a") == 13:
            self._send(500, {"detail": "unlucky"})
        elif body.get("a") == 99:
            time.sleep(1.0)
            self._send(200, {"late": True})
        else:
            self._send(200, {"sum": body["a"] + 1})

    def do_GET(self):  # noqa: N802
        self._send(200, {"path": self.path})

    def _send(self, code, payload):
        data = json.dumps(payload).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def http_url():
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


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
