"""The persistent retrieval store: Chroma collections for domains, roles and workflows.

One document per workflow per representation (text/code/flowchart/summary), one per domain and
role; metadata ``{workflow, domain, role, format, hash}``.  Embeddings come from our ``Embedder``
(never Chroma's default embedding function, which downloads a model).  ``sync(library)`` is
incremental: a document is re-embedded only when its text hash changed; removed ones are deleted.
A persist directory belongs to one process at a time (``fcntl`` lock on ``<store>/.lock``).
With ``chroma_url`` (a ``chroma run`` server) the collections live in the server, which owns its
own directory, so no lock is taken and many processes may share it; the embedding cache stays in
the local store directory.
Chroma is the persistent copy; ``matrix(collection, format)`` gives the in-memory numpy hot path.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import urlsplit

import numpy as np

from workflows.pdl import FORMATS

from .embeddings import Embedder, get_embedder, text_hash

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

COLLECTIONS = ("domains", "roles", "workflows")


def chroma_http_client(url: str):
    """A ``chromadb.HttpClient`` for ``http(s)://host[:port]`` (telemetry off)."""
    import chromadb
    from chromadb.config import Settings

    u = urlsplit(url if "://" in url else f"http://{url}")
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"chroma_url {url!r}: expected http://host:port")
    ssl = u.scheme == "https"
    return chromadb.HttpClient(host=u.hostname, port=u.port or (443 if ssl else 8000), ssl=ssl,
                               settings=Settings(anonymized_telemetry=False))


class StoreUnavailableError(RuntimeError):
    """The Chroma server (``chroma_url``) does not answer; names the URL and what to do."""


def _unavailable(url: str, exc: BaseException) -> StoreUnavailableError:
    from workflows.sanitize import redact

    return StoreUnavailableError(redact(
        f"chroma_url {url}: the Chroma server is not answering ({type(exc).__name__}: {str(exc)[:160]}); "
        "start it (chroma run --path DIR --host 127.0.0.1 --port PORT) or unset FLOWDESK_CHROMA_URL to use "
        "the embedded store"))


class StoreLockedError(RuntimeError):
    def __init__(self, path: Path, pid: int | None):
        self.path, self.pid = path, pid
        who = f"process {pid}" if pid else "another process"
        super().__init__(f"retrieval store {path} is in use by {who} (lock file {path / '.lock'}); "
                         "stop it or use another --store directory")


# --- the one-process-per-directory lock ------------------------------------------------------
_HELD: dict[str, list] = {}  # resolved path -> [fd, refcount]; flock is per open file, so share it
_HELD_LOCK = threading.Lock()


def _read_pid(lock_path: Path) -> int | None:
    try:
        return int(lock_path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def acquire_lock(path: Path, timeout: float = 0.0) -> None:
    path.mkdir(parents=True, exist_ok=True)
    key = str(path.resolve())
    with _HELD_LOCK:
        if key in _HELD:
            _HELD[key][1] += 1
            return
        lock_path = path / ".lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreLockedError(path, _read_pid(lock_path)) from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        _HELD[key] = [fd, 1]


def release_lock(path: Path) -> None:
    key = str(path.resolve())
    with _HELD_LOCK:
        held = _HELD.get(key)
        if not held:
            return
        held[1] -= 1
        if held[1] == 0:
            fcntl.flock(held[0], fcntl.LOCK_UN)
            os.close(held[0])
            del _HELD[key]


# --- documents ------------------------------------------------------------------------------
def render_workflow(workflow, fmt: str) -> str:
    """The text indexed for one representation (the file's own text when given, else rendered).

    A representation given verbatim (an imported dataset's own text, code or flowchart) may never name
    the task — FlowBench's text of "Get food voucher" speaks of a promotion call — so it is indexed
    under the workflow's title, as the rendered ones are (``render_text`` opens with it)."""
    from workflows.render import render

    text = render(workflow, fmt)
    title = workflow.display_name
    if getattr(workflow.representations, fmt, None) and title.casefold() not in text[:200].casefold():
        text = f"{title[:1].upper()}{title[1:]}: {text}"
    return text


def _label(obj) -> str:
    return obj.title or obj.name.replace("_", " ")


def domain_text(domain, role_labels: list[str] | None = None) -> str:
    text = f"{_label(domain)}: {domain.description}"
    if role_labels:  # children's names help when a description is terse
        text += " Roles: " + ", ".join(role_labels) + "."
    return text


def role_text(role, workflow_labels: list[str] | None = None) -> str:
    text = f"{_label(role)}: {role.description}"
    if workflow_labels:
        text += " Workflows: " + ", ".join(workflow_labels) + "."
    return text


@dataclass
class Doc:
    id: str
    text: str
    meta: dict


def library_docs(library, formats: Iterable[str] = FORMATS, enrich_upper: bool = True) -> dict[str, list[Doc]]:
    docs: dict[str, list[Doc]] = {c: [] for c in COLLECTIONS}
    roles_of: dict[str, list[str]] = {}
    wfs_of: dict[str, list[str]] = {}
    if enrich_upper:  # one pass, not a scan of the library per domain/role (50k workflows)
        for r in library.roles.values():
            roles_of.setdefault(r.domain, []).append(_label(r))
        for w in library.workflows.values():
            wfs_of.setdefault(w.role, []).append(w.display_name)
    for d in library.domains.values():
        docs["domains"].append(Doc(f"domain:{d.name}", domain_text(d, roles_of.get(d.name)),
                                   {"domain": d.name, "workflow": "", "role": "", "format": "domain"}))
    for r in library.roles.values():
        docs["roles"].append(Doc(f"role:{r.name}", role_text(r, wfs_of.get(r.name)),
                                 {"domain": r.domain, "role": r.name, "workflow": "", "format": "role"}))
    for fmt in formats:
        for w in library.workflows.values():
            docs["workflows"].append(Doc(f"{fmt}:{w.name}", render_workflow(w, fmt),
                                         {"workflow": w.name, "domain": w.domain, "role": w.role, "format": fmt}))
    return docs


@dataclass
class SyncReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    seconds: float = 0.0
    per_collection: dict = field(default_factory=dict)


@dataclass
class Matrix:
    """One collection/format as arrays: the dense hot path."""

    ids: list[str]
    texts: list[str]
    metas: list[dict]
    vectors: np.ndarray  # (n, dim) float32, L2-normalised


class WorkflowStore:
    """Chroma persist directory (or server) + embedding cache, owned by this process while open."""

    def __init__(self, path: str | Path, embedder: Embedder | str = "minilm", *, base_url: str = "",
                 namespace: str = "", lock_timeout: float = 0.0, chroma_url: str = ""):
        import chromadb
        from chromadb.config import Settings

        self.path = Path(path)
        self.chroma_url = chroma_url
        self._locked = not chroma_url  # the server owns its directory; the lock guards ours only
        if self._locked:
            acquire_lock(self.path, lock_timeout)
        else:
            self.path.mkdir(parents=True, exist_ok=True)  # embedding cache
        try:
            self.embedder = (get_embedder(embedder, base_url=base_url, cache_dir=self.path)
                             if isinstance(embedder, str) else embedder)
            self.client = (chroma_http_client(chroma_url) if chroma_url else
                           chromadb.PersistentClient(path=str(self.path / "chroma"),
                                                     settings=Settings(anonymized_telemetry=False)))
            # A namespace (one per library) lets one store directory hold several libraries.
            self.cols = {c: self.client.get_or_create_collection(
                f"{namespace}-{c}" if namespace else c, embedding_function=None, configuration={"hnsw": {"space": "cosine"}},
                metadata={"embedder": self.embedder.name}) for c in COLLECTIONS}
        except BaseException as exc:
            if self._locked:
                release_lock(self.path)
            if chroma_url and isinstance(exc, Exception) and not isinstance(exc, StoreUnavailableError):
                raise _unavailable(chroma_url, exc) from None
            raise
        self._matrices: dict[tuple[str, str], Matrix] = {}
        self._closed = False

    # -- writing --
    def sync(self, library, formats: Iterable[str] = FORMATS, enrich_upper: bool = True,
             progress: Callable[[str, int, int], None] | None = None) -> SyncReport:
        t0 = time.perf_counter()
        report = SyncReport()
        for name, docs in library_docs(library, formats, enrich_upper).items():
            col = self.cols[name]
            existing = self._get_all(name, None, ["metadatas"])
            old = {i: (m or {}).get("hash") for i, m in zip(existing["ids"], existing["metadatas"])}
            key = self.embedder.name  # a different embedder invalidates every vector
            want = {d.id: d for d in docs}
            todo = [d for d in docs if old.get(d.id) != text_hash(key + "\0" + d.text)]
            gone = [i for i in old if i not in want]
            stats = {"added": sum(1 for d in todo if d.id not in old),
                     "updated": sum(1 for d in todo if d.id in old),
                     "unchanged": len(docs) - len(todo), "removed": len(gone)}
            if gone:
                col.delete(ids=gone)
            batch = 256
            for s in range(0, len(todo), batch):
                chunk = todo[s:s + batch]
                vecs = self.embedder.embed([d.text for d in chunk])
                col.upsert(ids=[d.id for d in chunk], documents=[d.text for d in chunk], embeddings=vecs,
                           metadatas=[{**d.meta, "hash": text_hash(key + "\0" + d.text)} for d in chunk])
                if progress:
                    progress(name, min(s + batch, len(todo)), len(todo))
            if progress and not todo:
                progress(name, 0, 0)
            report.per_collection[name] = stats
            for k, v in stats.items():
                setattr(report, k, getattr(report, k) + v)
        self._matrices.clear()
        report.seconds = time.perf_counter() - t0
        return report

    # -- reading --
    def matrix(self, collection: str, fmt: str | None = None) -> Matrix:
        """All documents of a collection (one representation for workflows) as a numpy matrix."""
        key = (collection, fmt or "")
        m = self._matrices.get(key)
        if m is None:
            where = {"format": fmt} if fmt else None
            got = self._get_all(collection, where, ["embeddings", "metadatas", "documents"])
            order = sorted(range(len(got["ids"])), key=lambda i: got["ids"][i])  # deterministic order
            vectors = (np.asarray(got["embeddings"], dtype=np.float32)[order] if order
                       else np.zeros((0, self.embedder.dim), dtype=np.float32))
            m = self._matrices[key] = Matrix([got["ids"][i] for i in order], [got["documents"][i] for i in order],
                                             [got["metadatas"][i] for i in order], vectors)
        return m

    def _get_all(self, collection: str, where: dict | None, include: list[str], page: int = 5000) -> dict:
        """``collection.get`` in pages: one call over ~30k+ documents fails ("too many SQL variables")."""
        col, out = self.cols[collection], {"ids": [], **{k: [] for k in include}}
        offset = 0
        while True:
            try:
                got = col.get(where=where, include=include, limit=page, offset=offset)
            except Exception as exc:  # noqa: BLE001 - a server gone mid-session: say which and what to do
                if self.chroma_url:
                    raise _unavailable(self.chroma_url, exc) from None
                raise
            out["ids"] += list(got["ids"])
            for k in include:
                if got[k] is not None:
                    out[k] += list(got[k])
            if len(got["ids"]) < page:
                return out
            offset += page

    def chroma_query(self, collection: str, query_vec: np.ndarray, n: int, where: dict | None = None):
        """Top-n through Chroma's HNSW index (the alternative to the numpy hot path)."""
        res = self.cols[collection].query(query_embeddings=[query_vec], n_results=n, where=where,
                                          include=["metadatas", "distances"])
        return [(m, 1.0 - d) for m, d in zip(res["metadatas"][0], res["distances"][0])]

    def count(self, collection: str = "workflows") -> int:
        return self.cols[collection].count()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            close = getattr(self.embedder, "close", None)
            if close:
                close()
            if self._locked:
                release_lock(self.path)

    def __enter__(self) -> "WorkflowStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
