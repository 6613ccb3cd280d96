"""Workflow retrieval (FlowSwitch): BM25 / dense / hybrid retrievers, flat and hierarchical strategies.

``build_retriever(library, context)`` opens (and incrementally updates) the store and returns a
cached ``WorkflowRetriever``.  ``search`` ranks the workflows of the routed pool and returns
``graph.state.Candidate`` dicts.  ``route`` picks the upper layers: domains (D>W), roles (R>W) or
domains then roles inside them (D>R>W), either by embeddings or by an LLM router asked to "select
the top-k most relevant" items, with JSON parsing, retries, and a fallback to embeddings.

Dense scoring runs on an in-memory numpy matrix read once from Chroma (Chroma is the persistent
copy; ``benchmarks/retrieval_scale.py`` measures numpy against Chroma's ``where``-filtered query).

A Chroma server (``chroma_url``) that does not answer — at start-up (after ``CONNECT_ATTEMPTS``
tries) or mid-session (a matrix not yet in memory) — is logged once as the named
``StoreUnavailableError`` and search goes on over BM25 of the library files
(``memory.offline.LibraryDocsStore``); every ``RETRY_SECONDS`` the next search tries the server
again and goes back to it (dense and hybrid) once it answers.  ``degraded`` says which mode is on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from workflows.pdl import FORMATS

from .bm25 import BM25Index, bm25_index
from .offline import LibraryDocsStore
from .store import Matrix, StoreUnavailableError, WorkflowStore

log = logging.getLogger(__name__)

RRF_K = 60
RETRIEVERS = ("bm25", "dense", "hybrid")
STRATEGIES = ("flat", "D>W", "R>W", "D>R>W")
# Chroma server unavailable: tries at start-up (with backoff), then BM25 and a retry this often.
CONNECT_ATTEMPTS = 3
CONNECT_BACKOFF_SECONDS = 0.5
RETRY_SECONDS = 30.0

ROUTER_PROMPT = """You route a customer-service request to the right part of a workflow library.
Given the user's request and a list of candidate {kind}, select the top-{k} most relevant {kind}
to the request, most relevant first. Use only names from the list.
Answer with JSON only, no prose: {{"{kind}": ["name", ...]}}"""


# Above this many rows the matrix-vector product runs with one BLAS thread: OpenBLAS threads
# spin-wait, and on a loaded 2-core machine 5k x 384 took 32 ms with two threads vs 0.8 ms with one.
BLAS_SINGLE_ABOVE = 1000
_BLAS = None


def blas_single_thread():
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()  # discovers the BLAS libraries once; limit() is then ~0.2 ms
    return _BLAS.limit(limits=1, user_api="blas")


def library_namespace(library) -> str:
    """Collection prefix for a library, so one store directory can hold several libraries."""
    root = str(Path(library.root).resolve())
    base = re.sub(r"[^A-Za-z0-9]+", "_", Path(root).name).strip("_")[:40] or "lib"
    return f"{base}-{hashlib.sha1(root.encode()).hexdigest()[:8]}"


def _minmax(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def _ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank of each entry (stable: ties keep document order)."""
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    return ranks


def top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best scores, best first; ties broken by position (deterministic).
    argpartition keeps this O(n) on large pools instead of a full sort."""
    n = len(scores)
    if n > 4 * k:
        part = np.argpartition(-scores, k - 1)[:k]
        kth = scores[part].min()
        part = np.nonzero(scores >= kth)[0]  # every tie of the k-th score, so the order is stable
        return part[np.lexsort((part, -scores[part]))][:k]
    return np.argsort(-scores, kind="stable")[:k]


def fuse(dense: np.ndarray, sparse: np.ndarray, method: str = "rrf", k: int = RRF_K,
         dense_weight: float = 0.5) -> np.ndarray:
    """Hybrid score. rrf: sum of 1/(k+rank) (a document BM25 did not match gets no sparse term);
    score: weighted sum of min-max normalised scores."""
    if method == "rrf":
        fused = 1.0 / (k + _ranks(dense))
        return fused + np.where(sparse > 0, 1.0 / (k + _ranks(sparse)), 0.0)
    if method == "score":
        return dense_weight * _minmax(dense.astype(np.float64)) + (1 - dense_weight) * _minmax(
            sparse.astype(np.float64))
    raise ValueError(f"fusion {method!r} is not 'rrf' or 'score'")


def parse_router_answer(text: str, kind: str, allowed: list[str]) -> list[str] | None:
    """Names from the router's JSON answer, or None when it is malformed or names nothing known."""
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", (text or "").strip())
    m = re.search(r"[\[{].*[\]}]", text, re.S)
    if not m:
        return None
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict):
        data = data.get(kind, data.get(kind.rstrip("s"), data.get("selected")))
    if not isinstance(data, list):
        return None
    lower = {a.lower(): a for a in allowed}
    picked = [lower[str(x).strip().lower()] for x in data if str(x).strip().lower() in lower]
    return list(dict.fromkeys(picked)) or None


class WorkflowRetriever:
    def __init__(self, library, store: WorkflowStore, context, namespace: str | None = None,
                 upper_scoring: str = "blend"):
        self.library, self.store, self.context = library, store, context
        # "description": upper layers scored by their (enriched) descriptions only, as in FlowSwitch;
        # "blend": half description, half the best child workflow (more robust with terse descriptions).
        self.upper_scoring = upper_scoring
        self.namespace = namespace or ""
        self.last_route_source = ""  # "embedding" | "llm" | "embedding-fallback": how the last route was made
        self._lock = threading.Lock()
        self._pools: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._fingerprints: dict[str, str] = {}
        # --- Chroma server unavailable (issue 13): BM25 over the library files, then back ---
        self.degraded = ""  # the named error while searching without the server, else ""
        self._reopen = None  # () -> WorkflowStore: set by build_retriever for a chroma_url store
        self._retry_at = 0.0

    @property
    def dense(self) -> bool:
        return getattr(self.store, "dense", True)

    def _fall_back(self, exc: StoreUnavailableError) -> None:
        """Search without the server from now on (until ``_maybe_reconnect`` finds it again)."""
        with self._lock:
            if self.dense:
                self.store = LibraryDocsStore(self.library, embedder=getattr(self.store, "embedder", None))
                self._pools.clear()
                self._fingerprints.clear()
            elif self.degraded:
                return  # already said
            self.degraded = str(exc)
            self._retry_at = time.monotonic() + RETRY_SECONDS
        log.warning("%s -- workflow search uses BM25 over the library files until the server answers "
                    "(retried every %.0f s)", exc, RETRY_SECONDS)

    def _maybe_reconnect(self) -> None:
        if self.dense or self._reopen is None or time.monotonic() < self._retry_at:
            return
        with self._lock:
            if self.dense or time.monotonic() < self._retry_at:
                return
            self._retry_at = time.monotonic() + RETRY_SECONDS  # one try per period, whatever happens
            try:
                store = self._reopen()
            except StoreUnavailableError:
                return
            self.store, self.degraded = store, ""
            self._pools.clear()
            self._fingerprints.clear()
        log.warning("the Chroma server answers again; workflow search is back on %s", store.chroma_url)

    def _read(self, collection: str, fmt: str | None = None) -> Matrix:
        self._maybe_reconnect()
        try:
            return self.store.matrix(collection, fmt)
        except StoreUnavailableError as exc:
            self._fall_back(exc)
            return self.store.matrix(collection, fmt)
    # --- end Chroma server unavailable ---

    # -- indexes --
    def _matrix(self, fmt: str) -> Matrix:
        if fmt not in FORMATS:
            raise ValueError(f"representation {fmt!r} is not one of {', '.join(FORMATS)}")
        return self._read("workflows", fmt)

    def _columns(self, fmt: str):
        """(workflow, domain, role) arrays aligned with the matrix rows."""
        cols = self._pools.get(fmt)
        if cols is None:
            m = self._matrix(fmt)
            cols = self._pools[fmt] = tuple(np.array([md.get(k, "") for md in m.metas], dtype=object)
                                            for k in ("workflow", "domain", "role"))
        return cols

    def _bm25(self, fmt: str) -> BM25Index:
        m = self._matrix(fmt)
        fp = self._fingerprints.get(fmt)
        if fp is None:  # content fingerprint: the BM25 cache key changes when any document does
            fp = self._fingerprints[fmt] = hashlib.sha1(
                "".join(md.get("hash", "") for md in m.metas).encode()).hexdigest()
        return bm25_index((self.namespace, fmt, fp), m.ids, m.texts, m.metas)

    def embed_query(self, query: str) -> np.ndarray:
        return self.store.embedder.embed([query])[0]

    # -- scoring --
    def _scores(self, query: str, fmt: str, retriever: str, fusion: str,
                rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Scores of the rows in the pool (all rows when None); returns (row indices, scores)."""
        m = self._matrix(fmt)
        if retriever not in RETRIEVERS:
            raise ValueError(f"retriever {retriever!r} is not one of {', '.join(RETRIEVERS)}")
        if not self.dense:
            retriever = "bm25"  # no vectors without the Chroma server
        full = rows is None  # no fancy indexing then: V[rows] would copy the whole matrix per query
        rows = np.arange(len(m.ids)) if full else rows
        dense = sparse = None
        if retriever in ("dense", "hybrid"):
            vecs = m.vectors if full else m.vectors[rows]
            if not len(rows):
                dense = np.zeros(0, np.float32)
            elif len(rows) > BLAS_SINGLE_ABOVE:
                with blas_single_thread():
                    dense = vecs @ self.embed_query(query)
            else:
                dense = vecs @ self.embed_query(query)
        if retriever in ("bm25", "hybrid"):
            # IDF comes from the whole library, so a pool's scores stay comparable to flat search.
            sparse = self._bm25(fmt).scores(query)
            sparse = sparse if full else sparse[rows]
        if retriever == "dense":
            return rows, dense
        if retriever == "bm25":
            return rows, sparse
        return rows, fuse(dense, sparse, fusion)

    def _pool_rows(self, fmt: str, route: dict | None) -> np.ndarray | None:
        if not route:
            return None
        wf, dom, role = self._columns(fmt)
        if route.get("roles"):
            mask = np.isin(role, list(route["roles"]))
        elif route.get("domains"):
            mask = np.isin(dom, list(route["domains"]))
        else:
            return None
        return np.nonzero(mask)[0]

    def search(self, query: str, *, retriever: str | None = None, strategy: str | None = None,
               representation: str | None = None, top_k: int | None = None, route: dict | None = None,
               fusion: str | None = None) -> list[dict]:
        ctx = self.context
        retriever = retriever or ctx.retriever
        strategy = strategy or ctx.strategy
        fmt = representation or ctx.representation
        top_k = top_k or ctx.top_k
        fusion = fusion or ctx.fusion
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
        if route is None and strategy != "flat":
            route = self.route(query, strategy=strategy)
        pool = self._pool_rows(fmt, route)
        if pool is not None and len(pool) == 0:  # a route naming nothing indexed: search everything
            log.info("route %s selects no workflow; searching the whole library", route)
            pool = None
        rows, scores = self._scores(query, fmt, retriever, fusion, pool)
        wf, dom, role = self._columns(fmt)
        retriever = retriever if self.dense else "bm25"  # what was actually scored
        order = top_indices(scores, top_k)
        return [{"workflow": wf[rows[i]], "domain": dom[rows[i]], "role": role[rows[i]],
                 "score": float(scores[i]), "retriever": retriever, "level": strategy} for i in order]

    def scores_for(self, query: str, workflows: list[str], *, retriever: str = "dense",
                   representation: str | None = None) -> dict[str, float]:
        """Raw score of the query against specific workflows (dense cosine or BM25), e.g. the active
        one, for the switch detector.  Unknown names are left out."""
        fmt = representation or self.context.representation
        wf = self._columns(fmt)[0]
        rows = np.nonzero(np.isin(wf, list(workflows)))[0]
        if retriever == "hybrid":
            retriever = "dense"  # fused scores only mean something relative to a whole ranking
        rows, scores = self._scores(query, fmt, retriever, "rrf", rows)
        return {wf[r]: float(s) for r, s in zip(rows, scores)}

    def dense_scores_many(self, texts: list[str], workflows: list[str], *,
                          representation: str | None = None) -> list[dict[str, float]]:
        """Cosine of each text against specific workflows, the texts embedded in one batch (re-verification
        compares a few alternatives on several texts per turn).  Unknown names are left out."""
        fmt = representation or self.context.representation
        wf = self._columns(fmt)[0]
        rows = np.nonzero(np.isin(wf, list(workflows)))[0]
        if not self.dense or not len(rows) or not texts:
            return [{} for _ in texts]
        sims = self._matrix(fmt).vectors[rows] @ self.store.embedder.embed(list(texts)).T
        return [{wf[r]: float(s) for r, s in zip(rows, sims[:, j])} for j in range(len(texts))]

    # -- upper layers --
    def _upper(self, collection: str) -> Matrix:
        return self._read(collection)

    def _embed_pick(self, query: str, collection: str, k: int, within: list[str] | None = None) -> list[str]:
        m = self._upper(collection)
        key = "domain" if collection == "domains" else "role"
        rows = np.arange(len(m.ids))
        if within is not None:
            rows = np.array([i for i, md in enumerate(m.metas) if md.get("domain") in within], dtype=int)
        if len(rows) == 0:
            return []
        if not self.dense:  # no vectors without the Chroma server: BM25 over the descriptions
            fp = hashlib.sha1("".join(m.ids).encode()).hexdigest()
            sims = bm25_index((self.namespace, collection, fp), m.ids, m.texts, m.metas).scores(query)[rows]
            return [m.metas[rows[i]][key] for i in np.argsort(-sims, kind="stable")[:k]]
        q = self.embed_query(query)
        sims = m.vectors[rows] @ q
        if self.upper_scoring == "blend":
            # Short domain/role descriptions embed poorly; blend in the best child workflow's similarity.
            fmt = self.context.representation
            wm = self._matrix(fmt)
            child = self._columns(fmt)[1 if key == "domain" else 2]
            wsims = wm.vectors @ q if len(wm.ids) else np.zeros(0, np.float32)
            best = {}
            for name, s in zip(child, wsims):
                best[name] = max(best.get(name, -1.0), float(s))
            sims = 0.5 * sims + 0.5 * np.array([best.get(m.metas[i][key], 0.0) for i in rows], dtype=np.float32)
        return [m.metas[rows[i]][key] for i in np.argsort(-sims, kind="stable")[:k]]

    def _llm_pick(self, model, query: str, collection: str, k: int, within: list[str] | None,
                  retries: int) -> list[str] | None:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        m = self._upper(collection)
        key = "domain" if collection == "domains" else "role"
        items = [(md[key], text) for md, text in zip(m.metas, m.texts)
                 if within is None or md.get("domain") in within]
        names = [n for n, _ in items]
        if not items:
            return []
        listing = "\n".join(f"- {n}: {t}" for n, t in items)
        messages = [SystemMessage(ROUTER_PROMPT.format(kind=collection, k=k)),
                    HumanMessage(f"Candidate {collection}:\n{listing}\n\nUser request:\n{query}")]
        for attempt in range(retries + 1):
            try:
                reply = model.invoke(messages)
            except Exception as exc:  # an unreachable endpoint must not break the turn
                log.warning("router model failed (%s); using the embedding router", exc)
                return None
            content = reply.content if isinstance(reply.content, str) else str(reply.content)
            picked = parse_router_answer(content, collection, names)
            if picked:
                return picked[:k]
            log.info("router answer %d malformed: %r", attempt + 1, content[:200])
            messages += [AIMessage(content), HumanMessage(
                f'That was not valid. Reply with JSON only, e.g. {{"{collection}": ["{names[0]}"]}}, '
                f"using names from the list.")]
        return None

    def route(self, query: str, *, strategy: str | None = None, top_k_upper: int | None = None,
              router_model: Any = None, retries: int = 2) -> dict[str, list[str]]:
        """Upper layers for a strategy. ``router_model``: a chat model object (the LLM router), or None
        for the embedding router."""
        strategy = strategy or self.context.strategy
        k = top_k_upper or self.context.top_k_upper
        if strategy == "flat":
            self.last_route_source = "flat"
            return {"domains": [], "roles": []}
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
        if isinstance(router_model, str):
            raise TypeError("route(router_model=...) takes a chat model object; build it with graph.models.chat_model")
        source = "llm" if router_model is not None else "embedding"

        def pick(collection: str, within: list[str] | None) -> list[str]:
            nonlocal source
            if router_model is not None:
                got = self._llm_pick(router_model, query, collection, k, within, retries)
                if got is not None:
                    return got
                source = "embedding-fallback"
            return self._embed_pick(query, collection, k, within)

        domains = pick("domains", None) if strategy in ("D>W", "D>R>W") else []
        roles = pick("roles", domains if strategy == "D>R>W" else None) if strategy in ("R>W", "D>R>W") else []
        self.last_route_source = source
        return {"domains": domains, "roles": roles}


_CACHE: dict[tuple, tuple[Any, WorkflowRetriever]] = {}
_CACHE_LOCK = threading.Lock()


def build_retriever(library, context, *, formats=FORMATS, progress=None) -> WorkflowRetriever:
    """Open the store at ``context.store_dir``, bring it up to date with the library, and cache the
    retriever per (library object, store, embedding)."""
    chroma_url = getattr(context, "chroma_url", "")
    key = (id(library), str(Path(context.store_dir).resolve()), context.embedding, getattr(context, "base_url", ""),
           chroma_url)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] is library:
            return hit[1]  # shared by every run: never given a run's settings (callers pass them per call)
        ns = library_namespace(library)

        def open_store(attempts: int = 1) -> WorkflowStore:
            for attempt in range(1, attempts + 1):
                try:
                    # A short wait covers a `flowdesk index` finishing; a long holder gets StoreLockedError.
                    store = WorkflowStore(context.store_dir, context.embedding, base_url=getattr(context, "base_url", ""),
                                          namespace=ns, lock_timeout=5.0, chroma_url=chroma_url)
                    try:
                        store.sync(library, formats=formats, progress=progress)
                    except BaseException:
                        store.close()
                        raise
                    return store
                except StoreUnavailableError:
                    if attempt == attempts:
                        raise
                    time.sleep(CONNECT_BACKOFF_SECONDS * 2 ** (attempt - 1))
            raise AssertionError("unreachable")

        try:
            retr = WorkflowRetriever(library, open_store(CONNECT_ATTEMPTS if chroma_url else 1), context, namespace=ns)
        except StoreUnavailableError as exc:
            retr = WorkflowRetriever(library, LibraryDocsStore(library, formats), context, namespace=ns)
            retr._fall_back(exc)
        if chroma_url:
            retr._reopen = open_store
        _CACHE[key] = (library, retr)  # holding the library keeps id(library) from being reused
        return retr


def clear_cache() -> None:
    """Close every cached retriever's store (tests; releasing a store directory)."""
    with _CACHE_LOCK:
        for _, retr in _CACHE.values():
            retr.store.close()
        _CACHE.clear()
