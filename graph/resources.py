"""What nodes need at run time, built once per configuration: the library, the retriever,
the tool runner and the chat models.  Nodes never open a store themselves; they call
``get_resources(runtime.context)``.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import Any

from workflows.library import Library, load_library

from .context import Context
from .models import role_model

_CACHE: dict[tuple, "Resources"] = {}
_LOCK = threading.Lock()


class Resources:
    def __init__(self, context: Context):
        self.context = context

    @cached_property
    def library(self) -> Library:
        return load_library(self.context.library)

    @cached_property
    def retriever(self):
        from memory.retrieval import build_retriever

        return build_retriever(self.library, self.context)

    @cached_property
    def tools(self):
        from workflows.bindings import ToolRunner

        return ToolRunner(self.context)

    @cached_property
    def experience(self):
        """WISE-Flow experience store (``search(query, k) -> list[str]``) or None until one is induced."""
        try:
            from memory.experience import open_experience_store
        except ImportError:
            return None
        return open_experience_store(self.context)

    def model(self, role: str) -> Any | None:
        """Chat model for a role (detector, router, executor, ...) or None for the offline policy."""
        return role_model(self.context, role)


def _key(context: Context) -> tuple:
    return (context.library, context.store_dir, context.chroma_url, context.db_path, context.embedding,
            context.retriever, context.fusion, context.strategy, context.representation, context.top_k_upper, context.top_k)


def get_resources(context: Context | None) -> Resources:
    context = context or Context()
    key = _key(context)
    with _LOCK:
        res = _CACHE.get(key)
        if res is None:
            res = _CACHE[key] = Resources(context)
    res.context = context  # thresholds and models may differ per run; the heavy parts are shared
    return res
