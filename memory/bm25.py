"""Sparse retrieval: BM25Okapi (rank-bm25) over the same documents as the dense store.

``tokenize`` lowercases, splits camelCase / snake_case / punctuation and drops English stop
words, so ``bookTable`` and ``book_table`` match "book a table".  ``BM25Index`` keeps the ids and
metadata next to the model; ``bm25_index(key, docs)`` caches one index per (library, format).
"""

from __future__ import annotations

import re
import threading

import numpy as np
from rank_bm25 import BM25Okapi

STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between
both but by can could did do does doing down during each few for from further had has have having he her
here hers herself him himself his how i if in into is it its itself just let me more most my myself no nor
not now of off on once only or other our ours ourselves out over own same she should so some such than
that the their theirs them themselves then there these they this those through to too under until up very
was we were what when where which while who whom why will with would you your yours yourself yourselves
please want need like would could also get go im ive id dont hi hello thanks thank
""".split())

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[A-Za-z0-9]+")


def tokenize(text: str) -> list[str]:
    out = []
    for raw in _WORD.findall(_CAMEL.sub(" ", text or "")):
        tok = raw.lower()
        if tok not in STOP_WORDS and (len(tok) > 1 or tok.isdigit()):
            out.append(tok)
    return out


class BM25Index:
    """BM25Okapi statistics from rank-bm25, scored through an inverted index.

    ``BM25Okapi.get_scores`` walks every document's term dict in Python for each query term
    (O(docs) per term); the postings below touch only the documents that contain the term and
    give the same scores (``tests/test_retrieval.py`` checks this against ``get_scores``).
    """

    def __init__(self, ids: list[str], texts: list[str], metas: list[dict] | None = None):
        self.ids = list(ids)
        self.metas = list(metas) if metas is not None else [{} for _ in ids]
        corpus = [tokenize(t) or ["_empty_"] for t in texts]
        self.model = BM25Okapi(corpus) if corpus else None
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if self.model is not None:
            m = self.model
            # The length-normalised denominator term per document, k1 * (1 - b + b * dl / avgdl).
            self._norm = (m.k1 * (1 - m.b + m.b * np.asarray(m.doc_len, dtype=np.float64) / m.avgdl))
            lists: dict[str, tuple[list[int], list[int]]] = {}
            for i, freqs in enumerate(m.doc_freqs):
                for term, tf in freqs.items():
                    docs, tfs = lists.setdefault(term, ([], []))
                    docs.append(i)
                    tfs.append(tf)
            self._postings = {t: (np.asarray(d, dtype=np.int32), np.asarray(f, dtype=np.float64))
                              for t, (d, f) in lists.items()}

    def __len__(self) -> int:
        return len(self.ids)

    def scores(self, query: str) -> np.ndarray:
        """One BM25 score per document (0 when no query term occurs)."""
        toks = tokenize(query)
        out = np.zeros(len(self.ids), dtype=np.float64)
        if self.model is None or not toks:
            return out.astype(np.float32)
        k1 = self.model.k1
        for term in toks:  # repeated query terms count again, as in rank-bm25
            hit = self._postings.get(term)
            if hit is None:
                continue
            docs, tf = hit
            out[docs] += self.model.idf[term] * (tf * (k1 + 1) / (tf + self._norm[docs]))
        return out.astype(np.float32)


_CACHE: dict[tuple, BM25Index] = {}
_LOCK = threading.Lock()


def bm25_index(key: tuple, ids: list[str], texts: list[str], metas: list[dict] | None = None) -> BM25Index:
    """Cached per key (e.g. (library root, format, content fingerprint))."""
    with _LOCK:
        idx = _CACHE.get(key)
        if idx is None:
            idx = _CACHE[key] = BM25Index(ids, texts, metas)
        return idx
