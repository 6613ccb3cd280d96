"""How an API runs: python / http / simulate bindings behind one ``ToolRunner``.

``ToolRunner(context).run(workflow, api_name, args, idempotency_key=None) -> ToolResult``
validates the arguments against the API's JSON Schema first, checks the binding against the
operator's ``BindingPolicy`` (``workflows.policy``), then dispatches on the binding.  It never
raises for a tool's own failure (bad arguments, refused binding, exception, timeout, HTTP error,
``{"error": ...}`` result, a malformed result JSON cannot hold): those come back as ``ToolResult(ok=False, error=...)`` so the agent can
record them as environment events.

Idempotency: a python tool that declares an ``idempotency_key`` parameter receives the key; an
http tool sends it as the ``Idempotency-Key`` header.  Secrets: http ``${env:NAME}`` references
are resolved only here, at call time; every error text and result passes through
``workflows.sanitize.redact`` so no secret or credentialled URL reaches a trace or a checkpoint.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from jsonschema import Draft202012Validator

from .pdl import Api, Workflow
from .policy import BindingPolicy, BindingRefused
from .sanitize import redact, resolve_env_refs, strip_secrets

IDEMPOTENCY_PARAM = "idempotency_key"
IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass
class ToolResult:
    ok: bool
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    elapsed_ms: float = 0.0


# --- argument validation (also used by the post-decision controller) -----------------------------

def _field_of(err) -> str:
    path = [str(p) for p in err.absolute_path]
    if err.validator == "required":
        # "'x' is a required property" -> the missing field is in the message, not the path
        missing = err.message.split("'")[1] if "'" in err.message else ""
        path.append(missing)
    if err.validator == "additionalProperties":
        extra = err.message.split("'")[1] if "'" in err.message else ""
        path.append(extra)
    return ".".join(p for p in path if p) or "(arguments)"


# a parameters schema's validator, by the schema object's identity (the schema kept beside it, so an id is never
# read for another object): building one costs more than validating with it, and the learned executor checks
# its candidate calls on every turn
_VALIDATORS: dict[int, tuple[Any, Draft202012Validator, Any]] = {}


def _validator(schema: Any) -> Draft202012Validator:
    return _compiled(schema)[1]


def _compiled(schema: Any) -> tuple[Any, Draft202012Validator, Any]:
    """(the schema, its validator, its ``_plain_form``), kept per schema object."""
    hit = _VALIDATORS.get(id(schema))
    if hit is None or hit[0] is not schema:
        if len(_VALIDATORS) > 1024:
            _VALIDATORS.clear()
        hit = _VALIDATORS[id(schema)] = (schema, Draft202012Validator(schema), _plain_form(schema))
    return hit


# What a JSON type name accepts, never more than the validator does (``integer`` takes a bool-free int but not
# 1.0, ``number`` a bool-free int or float: stricter, so a value they turn down goes to the validator)
_PLAIN_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_ANNOTATIONS = frozenset({"description", "title", "examples", "default", "$comment"})


def _plain_form(schema: Any) -> tuple[dict[str, tuple], tuple[str, ...]] | None:
    """A schema that only says "an object whose listed fields have these primitive types (or string values
    from a list), some required" as (field -> (type tests, allowed strings or None), required); None for any
    other schema (it is always read by the validator)."""
    if not isinstance(schema, dict) or schema.get("type") != "object" \
            or set(schema) - {"type", "properties", "required"} - _ANNOTATIONS:
        return None
    props, required = schema.get("properties") or {}, schema.get("required") or []
    if not isinstance(props, dict) or not isinstance(required, list) \
            or not all(isinstance(r, str) for r in required):
        return None
    fields = {}
    for name, sub in props.items():
        if not isinstance(sub, dict) or set(sub) - {"type", "enum"} - _ANNOTATIONS:
            return None
        types = sub.get("type")
        types = [types] if isinstance(types, str) else types
        if not isinstance(types, list) or not types or not all(t in _PLAIN_TYPES for t in types):
            return None
        enum = sub.get("enum")
        if enum is not None and not (isinstance(enum, list) and all(isinstance(e, str) for e in enum)):
            return None
        fields[name] = (tuple(_PLAIN_TYPES[t] for t in types), None if enum is None else frozenset(enum))
    return fields, tuple(required)


def _plainly_valid(form: tuple[dict[str, tuple], tuple[str, ...]] | None, args: dict) -> bool:
    """Whether ``args`` certainly meet a ``_plain_form`` schema (False: unsure, ask the validator)."""
    if form is None:
        return False
    fields, required = form
    for name in required:
        if name not in args:
            return False
    for name, value in args.items():
        rule = fields.get(name)
        if rule is None:
            continue  # (a field the schema does not list: allowed, as without additionalProperties)
        tests, enum = rule
        if not any(t(value) for t in tests):
            return False
        if enum is not None and not (isinstance(value, str) and value in enum):
            return False
    return True


def schema_errors(api: Api, args: Any) -> list[tuple[str, str]]:
    """(field, friendly message naming the tool and the field) per schema problem; [] when valid.  Arguments
    that plainly meet a plain schema (``_plain_form``: typed fields, string lists, required ones) are valid
    without the validator's walk (an eighth of its cost: 2.5 against 20.5 us for a STAR booking call's valid
    arguments; the controllers check the executor's candidate calls on every turn); anything else, and every problem's message, comes from the validator."""
    if not isinstance(args, dict):
        return [("", f"{api.name}: arguments must be an object, got {type(args).__name__}")]
    if _plainly_valid(_compiled(api.parameters)[2], args):
        return []
    return _validator_errors(api, args)


def _validator_errors(api: Api, args: dict) -> list[tuple[str, str]]:
    """``schema_errors`` as the validator alone reads them (the one place their messages are worded)."""
    out = []
    for err in sorted(_validator(api.parameters).iter_errors(args), key=lambda e: list(e.absolute_path)):
        fld = _field_of(err)
        if err.validator == "required":
            out.append((fld, f"{api.name}: missing required field '{fld}'"))
        elif err.validator == "additionalProperties":
            out.append((fld, f"{api.name}: unknown field '{fld}'"))
        else:
            out.append((fld, f"{api.name}: field '{fld}': {err.message}"))
    return out


def validate_args(api: Api, args: Any) -> list[str]:
    """Friendly schema problems, each naming the tool and the field; [] when the call is valid."""
    return [message for _, message in schema_errors(api, args)]


# --- simulate --------------------------------------------------------------------------------------

_BOOL_WORDS = ("available", "success", "ok", "valid", "eligible", "confirmed", "exists", "found", "approved")
_NUM_WORDS = ("count", "amount", "price", "total", "fee", "balance", "cost", "number_of", "quantity")
_ID_WORDS = ("id", "reference", "ref", "code", "number", "token")


def simulate_value(name: str, rng: random.Random) -> Any:
    low = name.lower()
    if low.startswith(("is_", "has_", "can_")) or any(low == w or low.endswith("_" + w) for w in _BOOL_WORDS):
        return rng.random() < 0.5
    if any(w in low for w in _NUM_WORDS):
        return round(rng.uniform(1, 500), 2)
    if any(low == w or low.endswith("_" + w) for w in _ID_WORDS):
        return f"{low[:3].upper()}-{rng.randrange(16**6):06X}"
    words = ("standard", "pending", "approved", "basic", "premium", "morning", "evening")
    return f"{rng.choice(words)} {name.replace('_', ' ')}"


def simulate(workflow: Workflow, api: Api, args: dict) -> dict[str, Any]:
    """Values for ``api.returns``, deterministic per (workflow, api, args[, seed])."""
    opts = api.binding.simulate if isinstance(api.binding.simulate, dict) else {}
    key = json.dumps([workflow.name, api.name, args, opts.get("seed", 0)], sort_keys=True, default=str)
    rng = random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))
    fixed = opts.get("values", {})
    return {r: fixed[r] if r in fixed else simulate_value(r, rng) for r in api.returns}


# --- python ----------------------------------------------------------------------------------------

def _call_with_timeout(fn: Callable[[], Any], timeout: float) -> Any:
    """Run ``fn`` in a daemon thread; a hung tool cannot block the agent past ``timeout``."""
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported as a tool error
            box["exc"] = exc

    t = threading.Thread(target=target, daemon=True, name="flowdesk-tool")
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"timed out after {timeout:g}s")
    if "exc" in box:
        raise box["exc"]
    return box.get("value")


def malformed(data: dict[str, Any]) -> str | None:
    """Why a tool's result cannot be recorded (it reaches checkpoints, the ledger and messages as
    JSON): non-string keys, values JSON cannot hold (objects, sets, NaN); None when it is fine."""
    if any(not isinstance(k, str) for k in data):
        return "keys must be strings"
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return str(exc)[:200]
    return None


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    return {"result": value}


@dataclass(frozen=True)
class _Resolved:
    fn: Callable
    takes_context: bool
    takes_idempotency_key: bool


class ToolRunner:
    """Runs a workflow's APIs through their bindings. One per configuration (see graph.resources).

    ``policy`` defaults to ``BindingPolicy.from_env()`` read when the runner is built."""

    def __init__(self, context: Any = None, policy: BindingPolicy | None = None):
        self.context = context
        self.policy = policy or BindingPolicy.from_env()
        self._functions: dict[str, _Resolved] = {}
        self._lock = threading.Lock()

    @property
    def timeout(self) -> float:
        return float(getattr(self.context, "tool_timeout", 10.0) or 10.0)

    def resolve(self, target: str) -> _Resolved:
        """The allowed function behind ``module:function`` (imported once) and the keywords it takes;
        ``BindingRefused`` when the policy does not allow it."""
        with self._lock:
            if target in self._functions:
                return self._functions[target]
        fn = self.policy.resolve_python(target)
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        resolved = _Resolved(fn, "context" in params, IDEMPOTENCY_PARAM in params)
        with self._lock:
            self._functions[target] = resolved
        return resolved

    def run(self, workflow: Workflow, api_name: str, args: dict | None,
            idempotency_key: str | None = None) -> ToolResult:
        start = time.perf_counter()

        def done(ok: bool, data: dict | None = None, error: str | None = None) -> ToolResult:
            return ToolResult(ok, strip_secrets(data or {}), redact(error) if error else None,
                              (time.perf_counter() - start) * 1000)

        api = workflow.api(api_name)
        if api is None:
            return done(False, error=f"{api_name}: no such tool in workflow {workflow.name!r}")
        if not isinstance(args, (dict, type(None))):
            return done(False, error=f"{api.name}: arguments must be an object, got {type(args).__name__}")
        args = dict(args or {})
        try:
            problems = validate_args(api, args)
        except Exception as exc:  # noqa: BLE001 - e.g. an unresolvable $ref the validator did not catch
            return done(False, error=f"{api.name}: the parameters schema cannot be applied: {type(exc).__name__}: {exc}")
        if problems:
            return done(False, error="; ".join(problems))
        try:
            kind = api.binding.kind
            if kind == "python":
                data = self._run_python(api, args, idempotency_key)
            elif kind == "http":
                data = self._run_http(api, args, idempotency_key)
            else:
                data = simulate(workflow, api, args)
        except BindingRefused as exc:
            return done(False, error=f"{api.name}: binding refused: {exc}")
        except TimeoutError as exc:
            return done(False, error=f"{api.name}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a failing tool is an environment event, not a crash
            return done(False, error=f"{api.name}: {type(exc).__name__}: {exc}")
        problem = malformed(data)
        if problem:
            return done(False, error=f"{api.name}: malformed result: {problem}")
        if data.get("error"):
            return done(False, data, f"{api.name}: {data['error']}")
        return done(True, data)

    def _run_python(self, api: Api, args: dict, idempotency_key: str | None) -> dict:
        r = self.resolve(api.binding.python)
        kwargs = dict(args)
        if r.takes_context:
            kwargs["context"] = self.context
        if r.takes_idempotency_key and idempotency_key is not None:
            kwargs[IDEMPOTENCY_PARAM] = idempotency_key
        return _as_dict(_call_with_timeout(lambda: r.fn(**kwargs), self.timeout))

    def _run_http(self, api: Api, args: dict, idempotency_key: str | None) -> dict:
        import httpx

        b = api.binding.http
        problems = self.policy.http_problems(b.url, b.headers)
        if problems:
            raise BindingRefused("; ".join(f"{f}: {m}" for f, m in problems))
        # Resolved here and only here: the resolved URL/headers never leave this function.
        url = resolve_env_refs(b.url, what=f"{api.name} url")
        headers = {k: resolve_env_refs(v, what=f"{api.name} headers.{k}") for k, v in b.headers.items()}
        if idempotency_key is not None:
            headers[IDEMPOTENCY_HEADER] = idempotency_key
        timeout = min(b.timeout, self.timeout) if self.context is not None else b.timeout
        where = b.url  # the template (with ${env:...} references) is what errors may name
        try:
            # No redirects: a redirect could lead to a host the operator did not allow.
            if b.method in ("GET", "DELETE"):
                resp = httpx.request(b.method, url, params=args, headers=headers, timeout=timeout,
                                     follow_redirects=False)
            else:
                resp = httpx.request(b.method, url, json=args, headers=headers, timeout=timeout,
                                     follow_redirects=False)
        except httpx.HTTPError as exc:
            # httpx puts the request URL (with its resolved secrets) in some messages; name the template.
            raise RuntimeError(f"{type(exc).__name__} calling {where}: {redact(str(exc).replace(url, where))}") from None
        if not 200 <= resp.status_code < 300:
            raise RuntimeError(f"HTTP {resp.status_code} from {where}: {resp.text[:200]}")
        try:
            body = resp.json() if resp.content else {}
        except ValueError:
            raise RuntimeError(f"{where} did not return JSON: {resp.text[:200]!r}") from None
        return _as_dict(body)
