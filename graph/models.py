"""Chat models per role, from ``provider:model`` strings.

``offline`` means no model: the node uses its deterministic policy.  ``openai:<model>`` (or any
``<provider>:<model>`` with ``base_url`` set) builds a ``ChatOpenAI`` client for an
OpenAI-compatible endpoint.  ``registered:<name>`` returns a model registered in-process with
``register_chat_model`` — how tests inject scripted chat models and how Python users pass a
model object they built themselves.

``role_model(context, role)`` builds a role's model from its own settings
(``Context.role_settings``: model, base URL, name of the API-key variable).  The key is read from
that variable here, registered with ``workflows.sanitize`` for redaction, and never stored in the
Context.  Provider errors (a 401 that echoes the key, a URL with credentials) are re-raised as
``LLMProviderError`` with the text redacted, so they cannot reach logs, traces or checkpoints.
"""

from __future__ import annotations

import os
from typing import Any

from workflows.sanitize import redact, register_secret

_REGISTRY: dict[str, Any] = {}


class ModelConfigError(ValueError):
    pass


class LLMProviderError(RuntimeError):
    """A chat model's provider failed; the message is redacted (no key, no credentialled URL)."""


def register_chat_model(name: str, model: Any) -> str:
    """Register a chat model object; returns the spec string that selects it."""
    _REGISTRY[name] = model
    return f"registered:{name}"


def unregister_chat_model(name: str) -> None:
    _REGISTRY.pop(name, None)


def chat_model(spec: str, base_url: str = "", *, field: str = "model", api_key_env: str = "OPENAI_API_KEY") -> Any | None:
    spec = (spec or "offline").strip()
    if spec == "offline":
        return None
    provider, sep, name = spec.partition(":")
    if not sep or not name:
        raise ModelConfigError(f"{field}: {spec!r} is not 'offline' or 'provider:model' (e.g. openai:gpt-4o-mini)")
    if provider == "registered":
        if name not in _REGISTRY:
            raise ModelConfigError(f"{field}: no chat model registered under {name!r}")
        return _REGISTRY[name]
    if provider not in ("openai", "vllm", "ollama", "llamacpp", "compatible") and not base_url:
        raise ModelConfigError(f"{field}: provider {provider!r} needs base_url (any OpenAI-compatible endpoint)")
    key = os.environ.get(api_key_env or "OPENAI_API_KEY") or ""
    register_secret(key)
    return _redacting_chat_openai()(model=name, base_url=base_url or None, temperature=0,
                                    api_key=key or "not-needed", max_retries=2, timeout=60)


def role_model(context: Any, role: str) -> Any | None:
    """The chat model of an LLM role (``graph.context.ROLES``) or None for its offline policy."""
    spec, base_url, key_env = context.role_settings(role)
    return chat_model(spec, base_url, field=f"{role}_model", api_key_env=key_env)


_CLASS: list = []


def _redacting_chat_openai():
    """``ChatOpenAI`` whose provider errors come out redacted (built once, on first use)."""
    if _CLASS:
        return _CLASS[0]
    from langchain_openai import ChatOpenAI

    def guard(method):
        def call(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - re-raised, redacted
                raise LLMProviderError(redact(f"{type(exc).__name__}: {exc}")) from None
        return call

    def guard_async(method):
        async def call(self, *args, **kwargs):
            try:
                return await method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                raise LLMProviderError(redact(f"{type(exc).__name__}: {exc}")) from None
        return call

    def guard_stream(method):
        def call(self, *args, **kwargs):
            try:
                yield from method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                raise LLMProviderError(redact(f"{type(exc).__name__}: {exc}")) from None
        return call

    # _generate/_agenerate/_stream are where the HTTP call happens (invoke, batch, structured output).
    cls = type("RedactingChatOpenAI", (ChatOpenAI,), {
        "_generate": guard(ChatOpenAI._generate), "_agenerate": guard_async(ChatOpenAI._agenerate),
        "_stream": guard_stream(ChatOpenAI._stream)})
    _CLASS.append(cls)
    return cls
