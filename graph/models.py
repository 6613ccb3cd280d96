"""Chat models per role, from ``provider:model`` strings.

``offline`` means no model: the node uses its deterministic policy.  ``openai:<model>`` (or any
``<provider>:<model>`` with ``base_url`` set) builds a ``ChatOpenAI`` client for an
OpenAI-compatible endpoint.  ``registered:<name>`` returns a model registered in-process with
``register_chat_model`` — how tests inject scripted chat models and how Python users pass a
model object they built themselves.
"""

from __future__ import annotations

import os
from typing import Any

_REGISTRY: dict[str, Any] = {}


class ModelConfigError(ValueError):
    pass


def register_chat_model(name: str, model: Any) -> str:
    """Register a chat model object; returns the spec string that selects it."""
    _REGISTRY[name] = model
    return f"registered:{name}"


def unregister_chat_model(name: str) -> None:
    _REGISTRY.pop(name, None)


def chat_model(spec: str, base_url: str = "", *, field: str = "model") -> Any | None:
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
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=name, base_url=base_url or None, temperature=0,
                      api_key=os.environ.get("OPENAI_API_KEY") or "not-needed", max_retries=2, timeout=60)
