"""Configuration at the boundary (graph/context.py, graph/models.py): every field typed and ranged
with a named error from Python, the environment and client mappings; one model / base URL / key
variable per LLM role; a role's model alone turns it on; server-side settings stay the operator's;
provider errors come out redacted."""

from __future__ import annotations

import json
import uuid

import pytest

from graph.context import ROLES, SERVER_SIDE, ClientContext, Context, ContextError, client_context
from graph.models import LLMProviderError, register_chat_model, role_model, unregister_chat_model
from tests.local_http import JsonHandler, serving


@pytest.mark.parametrize("kwargs, message", [
    ({"top_k": 0}, "top_k: 0 is too small (must be >= 1)"),
    ({"top_k": "x"}, "top_k: 'x' is not an integer"),
    ({"top_k": 2.5}, "top_k: 2.5 is not an integer"),
    ({"top_k": True}, "top_k: True is not a number"),
    ({"top_k": 10**6}, "top_k: 1000000 is too large"),
    ({"tool_timeout": -1}, "tool_timeout: -1.0 is too small (must be > 0.0)"),
    ({"tool_timeout": 0}, "tool_timeout: 0.0 is too small"),
    ({"tool_timeout": float("nan")}, "tool_timeout: nan is not a finite number"),
    ({"max_attempts": 0}, "max_attempts: 0 is too small (must be >= 1)"),
    ({"retriever": "tfidf"}, "retriever: 'tfidf' is not one of"),
    ({"confirm_irreversible": "maybe"}, "confirm_irreversible: 'maybe' is not a boolean"),
    ({"library": ""}, "library: must not be empty"),
    ({"library": 5}, "library: expected text, got int"),
    ({"chroma_url": "file:///etc"}, "chroma_url: 'file:///etc' is not an http(s):// URL"),
    ({"base_url": "https://me:hunter22@llm.example/v1"}, "base_url: must not hold a password"),
    ({"judge_api_key_env": "sk-live-abcdef"}, "judge_api_key_env: must be the NAME of an environment variable"),
    ({"today": "next week"}, "today: 'next week' is not a date (YYYY-MM-DD)"),
])
def test_bad_values_name_the_field(kwargs, message):
    (name,) = kwargs
    with pytest.raises(ContextError) as exc:
        Context(**kwargs)
    assert str(exc.value).startswith(f"{name}: ") and message in str(exc.value), str(exc.value)
    assert "hunter22" not in str(exc.value) and "sk-live" not in str(exc.value)
    with pytest.raises(ContextError, match=f"^{name}: "):  # a client's mapping (SDK, Studio) too
        client_context(kwargs)


def test_env_values_are_converted_or_named(monkeypatch):
    monkeypatch.setenv("FLOWDESK_TOP_K", "x")
    with pytest.raises(ContextError, match=r"^top_k: 'x' is not an integer \(from FLOWDESK_TOP_K\)$"):
        Context()
    monkeypatch.setenv("FLOWDESK_TOP_K", " 7 ")
    monkeypatch.setenv("FLOWDESK_TOOL_TIMEOUT", "2.5")
    monkeypatch.setenv("FLOWDESK_CONFIRM_IRREVERSIBLE", "off")
    ctx = Context()
    assert (ctx.top_k, ctx.tool_timeout, ctx.confirm_irreversible) == (7, 2.5, False)
    assert Context(top_k="3").top_k == 3  # strings from JSON clients/Studio are converted
    monkeypatch.setenv("FLOWDESK_MAX_ATTEMPTS", "0")
    with pytest.raises(ContextError, match="max_attempts: 0 is too small"):
        Context()


def test_the_desk_date_is_what_relative_dates_are_read_against(tmp_path):
    """``Context.today`` pins the calendar: the bundled desk keeps its own date unless it is set, and a turn's
    "tomorrow" is read against it (evaluations pin it so a figure does not depend on the day it runs)."""
    import datetime as dt

    from dialogue.understanding.slots import find_date
    from graph.resources import get_resources
    from workflows.demo.db import desk_today

    store = str(tmp_path / "store")
    assert get_resources(Context(store_dir=store)).today == desk_today()
    pinned = get_resources(Context(store_dir=store, today="2030-02-27")).today
    assert pinned == dt.date(2030, 2, 27)
    assert find_date("tomorrow please", pinned)[0] == "2030-02-28"


def test_each_role_has_its_own_model_url_and_key_variable(monkeypatch):
    assert {f"{r}_{k}" for r in ROLES for k in ("model", "base_url", "api_key_env")} <= set(Context.__dataclass_fields__)
    monkeypatch.setenv("FLOWDESK_BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("FLOWDESK_JUDGE_MODEL", "openai:judge-model")
    monkeypatch.setenv("FLOWDESK_JUDGE_BASE_URL", "http://127.0.0.1:8001/v1")
    monkeypatch.setenv("FLOWDESK_JUDGE_API_KEY_ENV", "JUDGE_KEY")
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-0123456789abcdef")
    ctx = Context()
    assert ctx.role_settings("judge") == ("openai:judge-model", "http://127.0.0.1:8001/v1", "JUDGE_KEY")
    assert ctx.role_settings("extractor") == ("offline", "http://127.0.0.1:8000/v1", "OPENAI_API_KEY")
    # the key is read when the model is built and is no value of the Context (which is checkpointed)
    assert "sk-judge" not in json.dumps(ctx.__dict__)
    model = role_model(ctx, "judge")
    assert model.model_name == "judge-model" and str(model.openai_api_base) == "http://127.0.0.1:8001/v1"
    assert model.openai_api_key.get_secret_value() == "sk-judge-0123456789abcdef"
    assert role_model(ctx, "extractor") is None
    with pytest.raises(ContextError, match="role: 'wizard' is not one of"):
        ctx.role_settings("wizard")


def test_detector_model_alone_turns_the_llm_detector_on(monkeypatch, agent, agent_context):
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from graph.chat import run_turn

    out = AIMessage(content=json.dumps({"action": "SEARCH", "user_intention": "where is the parcel",
                                        "search_query": "track order: tell the customer where their order is"}))
    spec = register_chat_model("cfg-detector", GenericFakeChatModel(messages=iter([out])))
    try:
        monkeypatch.setenv("FLOWDESK_DETECTOR_MODEL", spec)  # and nothing else
        ctx = Context(store_dir=agent_context.store_dir, db_path=agent_context.db_path)
        assert ctx.detector_mode == "auto"
        r = run_turn(agent, uuid.uuid4().hex[:8], "hmm, about that thing I bought", context=ctx)
        assert r.decision == "SEARCH" and r.active_workflow == "track_order"
    finally:
        unregister_chat_model("cfg-detector")


def test_clients_cannot_change_server_side_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("FLOWDESK_CLIENT_SETTINGS", raising=False)
    assert {"library", "store_dir", "db_path", "chroma_url", "base_url", "judge_base_url"} <= set(SERVER_SIDE)
    for name, value in (("library", str(tmp_path)), ("store_dir", "/tmp/other"), ("db_path", "/etc/x.sqlite"),
                        ("chroma_url", "http://10.0.0.1:8000"), ("executor_base_url", "http://evil.example/v1")):
        with pytest.raises(ContextError, match=f"^{name}: a server-side setting"):
            client_context({name: value})
        with pytest.raises(ContextError, match=f"^{name}: a server-side setting"):
            ClientContext(**{name: value})
    ok = client_context({"retriever": "bm25", "top_k": "3", "library": Context().library})  # same value: fine
    assert (ok.retriever, ok.top_k) == ("bm25", 3)
    with pytest.raises(ContextError, match="^no_such: unknown setting"):
        client_context({"no_such": 1})
    monkeypatch.setenv("FLOWDESK_CLIENT_SETTINGS", "library, store_dir")
    assert client_context({"library": str(tmp_path)}).library == str(tmp_path)
    assert ClientContext(store_dir="/tmp/other").store_dir == "/tmp/other"
    with pytest.raises(ContextError, match="^db_path: a server-side setting"):
        client_context({"db_path": "/etc/x.sqlite"})


class _Echo401(JsonHandler):
    """An OpenAI-compatible endpoint that refuses the key and repeats it, as providers do."""

    def do_POST(self):  # noqa: N802
        self.body()
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        self.send_json(401, {"error": {"message": f"Incorrect API key provided: {key}.",
                                       "type": "invalid_request_error", "code": "invalid_api_key"}})


def test_provider_errors_are_redacted(monkeypatch):
    with serving(_Echo401) as port:
        monkeypatch.setenv("ROUTER_KEY", "key-9Qx7Lm2Vb8Zt")
        ctx = Context(router_model="openai:m", router_base_url=f"http://127.0.0.1:{port}/v1",
                      router_api_key_env="ROUTER_KEY")
        with pytest.raises(LLMProviderError) as exc:
            role_model(ctx, "router").invoke("hello")
        assert "401" in str(exc.value) or "AuthenticationError" in str(exc.value)
        assert "key-9Qx7Lm2Vb8Zt" not in str(exc.value) and "[REDACTED]" in str(exc.value)
        assert exc.value.__cause__ is None and exc.value.__suppress_context__
