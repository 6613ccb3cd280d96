"""What nodes need at run time, built once per configuration and never changed afterwards: the
library, the repair patterns, one parsed interpreter per workflow, the retriever, the tool runner and
the chat models.  Nodes call ``get_resources(runtime.context)``; two runs with different contexts get
different ``Resources`` (the cache key is every field the resources are built from), and no run's
settings are ever written onto a shared object.
"""

from __future__ import annotations

import datetime as dt
import threading
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from langgraph.config import get_config

from workflows.library import Library, bundled_library_path, bundled_patterns_path, load_library
from workflows.pdl import Workflow

from .context import Context
from .models import role_model

_CACHE: dict[tuple, "Resources"] = {}
_LOCK = threading.Lock()
MODEL_ROLES = ("detector", "router", "executor")
# the Context fields the resources are built from (the rest are per-run thresholds nodes read directly)
_BUILT_FROM = ("library", "store_dir", "chroma_url", "db_path", "embedding", "tool_timeout", "base_url", "today")
_MODELS: dict[tuple[str, str, str, str], Any] = {}


class Resources:
    """Immutable after construction; the heavy parts (index, embedder) load on first use, once."""

    def __init__(self, settings: Mapping[str, Any]):
        self.settings = MappingProxyType(dict(settings))
        self._lock = threading.Lock()

    @cached_property
    def library(self) -> Library:
        return load_library(self.settings["library"])

    @cached_property
    def patterns(self) -> Library:
        return load_library(bundled_patterns_path())

    @cached_property
    def interpreters(self) -> Mapping[str, Any]:
        """One parsed procedure per workflow (library and patterns), shared by every run."""
        from dialogue.execution.interpreter import Interpreter

        wfs = {**self.patterns.workflows, **self.library.workflows}
        return MappingProxyType({name: Interpreter(wf) for name, wf in wfs.items()})

    @cached_property
    def library_words(self) -> frozenset[str]:
        """Every library workflow's words (the scope gate's library coverage), once per library."""
        return frozenset().union(*(self.interpreters[n].vocabulary for n in self.library.workflows))

    @cached_property
    def known_word(self):
        """Is a (lower-case) word one the agent knows: a word of the library or the patterns (stems
        included) or a common word of the embedding model's vocabulary (``memory.embeddings``)?"""
        from memory.embeddings import common_words

        library = frozenset().union(*(i.vocabulary for i in self.interpreters.values()))
        common = common_words()
        return lambda w: w in common or w in library or f"{w[:4]}~" in library

    def workflow(self, name: str | None) -> Workflow | None:
        if not name:
            return None
        return self.library.workflows.get(name) or self.patterns.workflows.get(name)

    @cached_property
    def retriever(self):
        from memory.retrieval import build_retriever

        with self._lock:
            return build_retriever(self.library, Context(**{k: self.settings[k] for k in
                                                            ("library", "store_dir", "chroma_url", "embedding",
                                                             "base_url")}), progress=index_progress())


    @cached_property
    def experience(self):
        """The experience store (``memory.experience_store``) in the retriever's Chroma client — the same
        embedded directory or server as the workflow representations; None when search runs without
        Chroma (degraded to the library files)."""
        from memory.experience_store import ExperienceStore

        store = getattr(self.retriever, "store", None)
        if getattr(store, "client", None) is None:
            return None
        with self._lock:
            return ExperienceStore(store.client, store.embedder)

    @cached_property
    def embed(self):
        """The retriever's sentence embeddings (texts -> L2-normalised rows, cached), for an enum option a
        user names in other words (``dialogue.understanding.enums``); None when search runs without them."""
        embedder = getattr(getattr(self.retriever, "store", None), "embedder", None)
        return embedder.embed if embedder is not None else None

    @cached_property
    def library_key(self) -> str:
        from memory.experience_store import library_key

        return library_key(self.library)

    @cached_property
    def today(self) -> dt.date | None:
        """The date the user's relative dates ("tomorrow", "the 6th") are read against: ``Context.today`` when
        set, else the calendar the library's tools keep — the demo desk's fixed date
        (``workflows.demo.db.desk_today``) for the bundled library — else None, the machine's date."""
        if self.settings["today"]:
            return dt.date.fromisoformat(self.settings["today"])
        if Path(self.settings["library"]).resolve() != bundled_library_path().resolve():
            return None
        from workflows.demo.db import desk_today

        return desk_today()

    @cached_property
    def tools(self):
        from workflows.bindings import ToolRunner

        return ToolRunner(Context(db_path=self.settings["db_path"], tool_timeout=self.settings["tool_timeout"]))


def model_for(context: Context | None, role: str) -> Any | None:
    """The chat model of a role (detector, router, executor) under ``context``, or None for the offline
    policy.  Built once per (spec, endpoint) and shared; a run's models never touch ``Resources``."""
    context = context or Context()
    key = (role, *context.role_settings(role))
    with _LOCK:
        if key not in _MODELS or key[1].startswith("registered:"):
            _MODELS[key] = role_model(context, role)
        return _MODELS[key]


def ledger_of(context: Context | None):
    """The run's tool-call ledger (``memory.ledger``; one open ledger per location in the process,
    shared by every configuration), or None when the run has none (no checkpointer: nothing can
    replay a call).  Not part of ``Resources``: agents on different checkpointers share the index."""
    from memory.ledger import shared_ledger

    location = context.ledger if context is not None else ""
    return shared_ledger(location) if location else None


def get_resources(context: Context | None) -> Resources:
    context = context or Context()
    settings = {name: getattr(context, name) for name in _BUILT_FROM}
    key = tuple(sorted(settings.items()))
    with _LOCK:
        res = _CACHE.get(key)
        if res is None:
            res = _CACHE[key] = Resources(settings)
    return res


def clear_resources() -> None:
    """Forget every built configuration (tests that change a library on disk)."""
    with _LOCK:
        _CACHE.clear()


def index_progress():
    """A progress callback for the first index build of a library (it can take a while): a rich bar on
    an interactive terminal, else None.  The callback's shape is ``memory.store``'s."""
    import sys

    if not sys.stderr.isatty():
        return None
    from rich.console import Console

    console = Console(stderr=True)
    state = {"shown": False}

    def report(collection: str, done: int, total: int) -> None:
        if total and not state["shown"]:
            console.print("[dim]Indexing the workflow library for search (first use only)...[/]")
            state["shown"] = True
        if total:
            console.print(f"[dim]  {collection}: {done}/{total} documents embedded[/]")

    return report


def thread_of_run() -> str | None:
    """The run's thread id (None outside a checkpointed run: nothing can replay its calls)."""
    try:
        thread = (get_config().get("configurable") or {}).get("thread_id")
    except RuntimeError:  # called outside a graph run
        return None
    return str(thread) if thread not in (None, "") else None
