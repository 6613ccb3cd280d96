"""Runtime configuration of the agent (LangGraph ``context_schema``), read from the environment.

Every field can be set by an environment variable named ``FLOWDESK_<FIELD>`` (upper case), by
LangGraph Studio's configuration panel, or in Python with ``Context(...)``.  Models are
``provider:model`` strings (``openai:gpt-4o-mini``) or ``offline`` for the deterministic policies.

Owns the configuration boundary:

- **Validation.** Every field is checked for its type and range when a ``Context`` is built (from
  Python, the environment, Studio or the SDK): ``top_k=0``, ``top_k='x'``, ``FLOWDESK_TOP_K=x``,
  a negative ``tool_timeout`` or ``max_attempts=0`` raise ``ContextError`` naming the field first
  (``top_k: ...``).  Strings from the environment or a JSON client are converted (``"5"`` → 5).
- **LLM roles.** Each role in ``ROLES`` has ``<role>_model``, ``<role>_base_url`` (empty = the
  shared ``base_url``) and ``<role>_api_key_env`` (empty = the shared ``api_key_env``): the *name* of
  the environment variable that holds the key — a key itself is never a Context value, because
  Contexts reach checkpoints and traces.  Setting a role's model turns the role on
  (``detector_mode`` defaults to ``auto``: the LLM when ``detector_model`` is set, else offline).
- **Server-side settings.** ``SERVER_SIDE`` fields (library, stores, database paths, URLs, key
  variable names) belong to the operator: ``client_context(mapping)`` validates a client's mapping
  and refuses those fields unless ``FLOWDESK_CLIENT_SETTINGS`` lists them (``*`` = all);
  ``ClientContext`` is the same rule as a ``context_schema`` for the served graph.
"""

from __future__ import annotations

import math
import os
import re
import typing
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Mapping

from workflows.library import bundled_library_path
from workflows.sanitize import redact

ROLES = ("detector", "router", "executor", "inducer", "extractor", "user_simulator", "judge")
ENV_CLIENT_SETTINGS = "FLOWDESK_CLIENT_SETTINGS"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class ContextError(ValueError):
    """A configuration value is unusable; the message starts with the field name (``top_k: ...``)."""


def env_name(field_name: str) -> str:
    return f"FLOWDESK_{field_name.upper()}"


def _role_url(role: str):
    return field(default="", metadata={"kind": "url", "description": (
        f"OpenAI-compatible endpoint of the {role.replace('_', ' ')} model (empty = base_url).")})


def _role_key(role: str):
    return field(default="", metadata={"kind": "env_name", "description": (
        f"Name of the environment variable holding the {role.replace('_', ' ')} model's API key "
        f"(empty = api_key_env).")})


@dataclass(kw_only=True)
class Context:
    """Runtime configuration. Environment: FLOWDESK_<FIELD>, e.g. FLOWDESK_RETRIEVER=bm25.

    Field metadata: ``min``/``max`` bound numbers (``min_exclusive`` for > 0); ``kind`` = ``url``
    (empty or http(s)://, no credentials), ``env_name`` (an environment variable's name), ``path``
    (non-empty), ``ledger`` (empty, a file path, ``memory:<name>`` or a postgres:// URL)."""

    library: str = field(default=str(bundled_library_path()),
                         metadata={"description": "Workflow library directory (domain/role/workflow.yaml).",
                                   "kind": "path"})
    store_dir: str = field(default=".flowdesk/store",
                           metadata={"description": "Chroma persist directory and embedding cache.", "kind": "path"})
    chroma_url: str = field(default="", metadata={
        "description": "Chroma server (`chroma run`), e.g. http://127.0.0.1:8000; empty = embedded store in store_dir.",
        "kind": "url"})
    db_path: str = field(default=".flowdesk/demo.sqlite",
                         metadata={"description": "SQLite database behind the demo library's tools.", "kind": "path"})
    ledger: str = field(default="", metadata={
        "description": "Tool-call ledger for exactly-once side effects: a SQLite file, a postgres:// URL or "
                       "memory:<name>; empty = beside the agent's checkpoints (ledger.sqlite, or the same "
                       "PostgreSQL database).", "kind": "ledger"})
    # A desk whose tools keep their own calendar (the bundled demo's database) reads relative dates against it;
    # evaluations pin it for dataset libraries, so their figures do not depend on the day they run.
    today: str = field(default="", metadata={"kind": "date", "description": (
        "The desk's calendar date (YYYY-MM-DD) that relative dates ('tomorrow', 'on Friday', 'the 6th') are "
        "read against; empty = the bundled demo desk's own date for the bundled library (FLOWDESK_DEMO_TODAY moves "
        "it together with the desk database's calendar), else the machine's.")})
    detector_model: str = field(default="offline", metadata={"description": "Switch detector: offline | provider:model."})
    router_model: str = field(default="offline", metadata={"description": "Domain/role router: offline | provider:model."})
    executor_model: str = field(default="offline", metadata={"description": "PDL executor: offline | provider:model."})
    # auto by default: the bundled ranker overrides the procedure only where its Gate (calibrated on train)
    # allows: on workflows whose node names it knows and by a margin at which the procedure's step was
    # almost never the logged agent's; elsewhere the interpreter decides (sessions do not drop with it).
    executor_policy: str = field(default="auto", metadata={"kind": "executor_policy", "description": (
        "Offline executor policy: auto (default: the bundled learned ranker "
        "dialogue/execution/models/executor_policy.json when the file is present, else the interpreter) | "
        "interpreter (the PDL interpreter alone) | learned:PATH (a ranker from `flowdesk train executor`; "
        "`learned:` alone = the bundled model). The ranker only re-orders the actions the workflow allows "
        "now and calls no tool the procedure does not put there; the controllers check its choice.")})
    inducer_model: str = field(default="offline", metadata={"description": "Workflow inducer: offline | provider:model."})
    extractor_model: str = field(default="offline", metadata={"description": "Slot extractor: offline | provider:model."})
    user_simulator_model: str = field(default="offline", metadata={
        "description": "Simulated user for session evaluations: offline | provider:model."})
    judge_model: str = field(default="offline", metadata={"description": "Evaluation judge: offline | provider:model."})
    base_url: str = field(default="", metadata={
        "description": "OpenAI-compatible endpoint for every model without its own <role>_base_url (optional).",
        "kind": "url"})
    api_key_env: str = field(default="OPENAI_API_KEY", metadata={
        "description": "Name of the environment variable holding the API key of every model without its own "
                       "<role>_api_key_env (the key itself is never configuration).", "kind": "env_name"})
    detector_base_url: str = _role_url("detector")
    detector_api_key_env: str = _role_key("detector")
    router_base_url: str = _role_url("router")
    router_api_key_env: str = _role_key("router")
    executor_base_url: str = _role_url("executor")
    executor_api_key_env: str = _role_key("executor")
    inducer_base_url: str = _role_url("inducer")
    inducer_api_key_env: str = _role_key("inducer")
    extractor_base_url: str = _role_url("extractor")
    extractor_api_key_env: str = _role_key("extractor")
    user_simulator_base_url: str = _role_url("user_simulator")
    user_simulator_api_key_env: str = _role_key("user_simulator")
    judge_base_url: str = _role_url("judge")
    judge_api_key_env: str = _role_key("judge")
    detector_mode: Literal["auto", "offline", "llm", "cascade"] = field(
        default="auto", metadata={"description": "auto (the LLM when detector_model is set, else offline), offline "
                                                 "policy, LLM, or LLM only when the offline policy is unsure."})
    embedding: str = field(default="minilm", metadata={"description": "minilm (bundled, offline) | openai:<model>."})
    retriever: Literal["bm25", "dense", "hybrid"] = field(default="hybrid", metadata={"description": "Workflow retriever."})
    fusion: Literal["rrf", "score"] = field(default="rrf", metadata={"description": "Hybrid fusion: reciprocal rank or normalised score."})
    strategy: Literal["flat", "D>W", "R>W", "D>R>W"] = field(default="flat", metadata={"description": "Hierarchical retrieval strategy."})
    representation: Literal["text", "code", "flowchart", "summary"] = field(
        default="text", metadata={"description": "Workflow representation that is indexed and searched."})
    top_k_upper: int = field(default=3, metadata={"description": "Domains/roles kept at the upper levels.",
                                                  "min": 1, "max": 50})
    top_k: int = field(default=5, metadata={"description": "Workflows returned by the retriever.", "min": 1, "max": 100})
    # SGD train (reports/switch-sgd-train-fusion): score fusion 0.794 top-1 vs RRF 0.789; with the prior
    # 0.839 vs 0.813.  On the demo desk's compliance sessions RRF does better (offline success 0.945 vs
    # 0.930), so RRF stays the default.  The prior is off by default: it rewards staying in the services
    # already used (as SGD dialogues do) and can outvote a clear winner when a user digresses across domains.
    context_prior: bool = field(default=False, metadata={
        "description": "Re-rank search results with the conversation's context (active role, roles used before). "
                       "Tuned on BM25/dense/score-fused scores; RRF's compressed scores let the prior dominate."})
    # The learned ranker (dialogue/understanding/switch_model.json, fitted on SGD/STAR train by
    # `flowdesk train switch`) orders the retriever's candidates and keeps a belief that later turns
    # can revise; the closed-loop evaluation chose it on the train splits (reports/switch-*).
    ranker: bool = field(default=True, metadata={
        "description": "Use the learned switch model: its detector weights, and its ranker to order search results."})
    revise: bool = field(default=True, metadata={
        "description": "Re-verify the active workflow on later turns and revise a pick the evidence overturns."})
    # With no active workflow, a turn far from every workflow (dialogue/understanding/scope.py, fitted on
    # SGD/STAR train by `flowdesk train scope`) is answered with what the desk covers instead of starting
    # the nearest workflow ("tell me a joke" once started a balance check).
    scope_gate: bool = field(default=True, metadata={
        "description": "With no active workflow and the offline detector, turn away requests the library does not "
                       "serve (the bundled scope model) instead of starting the nearest workflow."})
    switch_model: str = field(default="", metadata={
        "description": "The switch ranker's weights file ('' = the bundled dialogue/understanding/switch_model.json)."})
    clarify_margin: float = field(default=0.0, metadata={
        "description": "Ask a clarifying question when the top-2 fused scores differ by less than this (0 = never).",
        "min": 0.0, "max": 1000.0})
    max_attempts: int = field(default=3, metadata={"description": "Rejected proposals per turn before a safe reply.",
                                                   "min": 1, "max": 20})
    max_api_repeats: int = field(default=3, metadata={"description": "Identical API calls allowed per workflow instance.",
                                                      "min": 1, "max": 100})
    max_turns: int = field(default=40, metadata={"description": "Session length limit (user turns).", "min": 1,
                                                 "max": 100_000})
    tool_timeout: float = field(default=10.0, metadata={"description": "Seconds a tool call may take.", "min": 0.0,
                                                        "min_exclusive": True, "max": 3600.0})
    confirm_irreversible: bool = field(default=True, metadata={
        "description": "Ask the user (LangGraph interrupt) before an irreversible tool runs."})
    # On by default: the node is a no-op until `flowdesk induce` stored verified blocks for this library
    # version, and a block only adds a prerequisite the PDL lacks (reports/experience).
    experience: bool = field(default=True, metadata={
        "description": "Inject WISE-Flow experience (verified blocks from `flowdesk induce`) when the store holds some."})
    event_log: str = field(default="", metadata={
        "description": "Session event log: a SQLite file, a postgres:// URL, memory:<name> or 'off'; empty = beside "
                       "the agent's checkpoints (events.sqlite, or the same PostgreSQL database).", "kind": "ledger"})
    disabled_checks: str = field(default="", metadata={
        "description": "Post-decision checks switched off, comma-separated names (evaluations' ablations; 'all' = every check)."})

    @property
    def disabled_check_names(self) -> frozenset[str]:
        from dialogue.control.checks import CHECKS

        names = {n.strip() for n in self.disabled_checks.split(",") if n.strip()}
        return frozenset(CHECKS) if "all" in names else frozenset(names)

    def __post_init__(self) -> None:
        # Environment overrides only fields left at their class default; then every value is checked.
        for f in fields(self):
            value, source = getattr(self, f.name), ""
            if _same(value, f.default):
                raw = os.environ.get(env_name(f.name))
                if raw not in (None, ""):
                    value, source = raw, env_name(f.name)
            setattr(self, f.name, _coerce(f, value, source))

    def role_settings(self, role: str) -> tuple[str, str, str]:
        """``(model spec, base URL, API-key variable name)`` of an LLM role, shared values filled in."""
        if role not in ROLES:
            raise ContextError(f"role: {role!r} is not one of {list(ROLES)}")
        return (getattr(self, f"{role}_model"), getattr(self, f"{role}_base_url") or self.base_url,
                getattr(self, f"{role}_api_key_env") or self.api_key_env)


# Fields an operator owns: a client of the served graph cannot change them (see client_context).
SERVER_SIDE = ("library", "store_dir", "db_path", "ledger", "event_log", "executor_policy", "today", "chroma_url", "base_url", "api_key_env",
               *(f"{r}_base_url" for r in ROLES), *(f"{r}_api_key_env" for r in ROLES))
_HINTS = typing.get_type_hints(Context)
_FIELDS = {f.name: f for f in fields(Context)}


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _coerce(f, value: Any, source: str = "") -> Any:
    """``value`` as the field's type, within its range; ``ContextError`` naming the field otherwise."""
    name, hint, meta = f.name, _HINTS[f.name], f.metadata
    origin = f" (from {source})" if source else ""

    def fail(msg: str) -> ContextError:
        return ContextError(f"{name}: {msg}{origin}")

    shown = redact(repr(value))[:80]
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise fail(f"{shown} is not one of {list(choices)}")
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        raise fail(f"{shown} is not a boolean (true/false)")
    if hint in (int, float):
        if isinstance(value, bool):
            raise fail(f"{shown} is not a number")
        try:
            if hint is int:
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                number = value if isinstance(value, int) else int(str(value).strip())
            else:
                number = float(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError, OverflowError):
            raise fail(f"{shown} is not {'an integer' if hint is int else 'a number'}") from None
        if isinstance(number, float) and not math.isfinite(number):
            raise fail(f"{shown} is not a finite number")
        low, high = meta.get("min"), meta.get("max")
        if low is not None and (number < low or (meta.get("min_exclusive") and number == low)):
            raise fail(f"{number} is too small (must be {'>' if meta.get('min_exclusive') else '>='} {low})")
        if high is not None and number > high:
            raise fail(f"{number} is too large (must be <= {high})")
        return number
    # strings
    if not isinstance(value, str):
        raise fail(f"expected text, got {type(value).__name__}")
    if "\x00" in value or len(value) > 4096:
        raise fail("must be at most 4096 characters without NUL")
    kind = meta.get("kind")
    if kind == "path" and not value.strip():
        raise fail("must not be empty")
    if kind == "url" and value:
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(value)
        except ValueError:
            raise fail(f"{shown} is not a URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise fail(f"{shown} is not an http(s):// URL")
        if parts.password:
            raise fail("must not hold a password; give credentials through an *_api_key_env variable")
    if kind == "ledger" and value:
        if value.startswith(("postgres://", "postgresql://")):
            return value
        if "://" in value:
            raise fail(f"{shown} is not a file path, a postgres:// URL or memory:<name>")
        if not value.startswith("memory:") and os.path.isdir(value):
            raise fail(f"{shown} is a directory; give a .sqlite file path")
    if kind == "date" and value:
        import datetime as dt

        try:
            dt.date.fromisoformat(value)
        except ValueError:
            raise fail(f"{shown} is not a date (YYYY-MM-DD)") from None
    if kind == "executor_policy" and value not in ("interpreter", "auto") and not value.startswith("learned:"):
        raise fail(f"{shown} is not 'interpreter', 'auto' or 'learned:PATH'")
    if kind == "env_name" and value and not _ENV_NAME.match(value):
        # Never echo it: someone may have pasted the key itself here.
        raise fail("must be the NAME of an environment variable (letters, digits, _), not the key itself")
    return value


def client_settings_allowed() -> set[str]:
    """Server-side fields the operator lets clients set (``FLOWDESK_CLIENT_SETTINGS``, ``*`` = all)."""
    raw = {p.strip() for p in os.environ.get(ENV_CLIENT_SETTINGS, "").split(",") if p.strip()}
    return set(SERVER_SIDE) if "*" in raw else raw & set(SERVER_SIDE)


def client_context(mapping: Mapping[str, Any] | None, *, allowed: set[str] | None = None,
                   base: Context | None = None) -> Context:
    """A ``Context`` from a client's mapping (SDK ``context=``, Studio panel), validated.

    Unknown keys and bad values raise ``ContextError`` naming the field.  A server-side field
    (``SERVER_SIDE``) whose value differs from the operator's (``base``, default ``Context()``)
    is refused unless ``allowed`` (default ``FLOWDESK_CLIENT_SETTINGS``) lists it."""
    mapping = dict(mapping or {})
    unknown = sorted(k for k in mapping if k not in _FIELDS)
    if unknown:
        raise ContextError(f"{unknown[0]}: unknown setting (known: {', '.join(_FIELDS)})")
    base = base or Context()
    allowed = client_settings_allowed() if allowed is None else allowed
    for name in SERVER_SIDE:
        if name in mapping and name not in allowed:
            value = _coerce(_FIELDS[name], mapping[name])
            if value != getattr(base, name):
                raise ContextError(f"{name}: a server-side setting; clients cannot change it (the operator can "
                                   f"allow it with {ENV_CLIENT_SETTINGS}={name})")
    values = {f.name: getattr(base, f.name) for f in fields(Context)}
    values.update(mapping)
    return Context(**values)


class ClientContext(Context):
    """``context_schema`` of the served graph: LangGraph builds it from the client's mapping
    (``ClientContext(**mapping)``), so the client rules of ``client_context`` apply there too."""

    def __post_init__(self) -> None:
        super().__post_init__()
        base, allowed = Context(), client_settings_allowed()
        for name in SERVER_SIDE:
            if name not in allowed and getattr(self, name) != getattr(base, name):
                raise ContextError(f"{name}: a server-side setting; clients cannot change it (the operator can "
                                   f"allow it with {ENV_CLIENT_SETTINGS}={name})")
