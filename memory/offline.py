"""The retrieval store's stand-in while the Chroma server (``chroma_url``) is away: BM25 only.

Owns what the retriever reads when its Chroma server does not answer: the same documents
(``store.library_docs``: one per workflow per representation, one per domain and role), built
from the library files in memory, with no vectors (``dense = False``).  Dense vectors live in
the server, so there is nothing dense to fall back to; BM25 over the same texts needs nothing
but the library.  ``memory.retrieval.WorkflowRetriever`` switches to this store on a
``StoreUnavailableError`` and back to the server once it answers again.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from workflows.pdl import FORMATS

from .embeddings import text_hash
from .store import Matrix, library_docs


class LibraryDocsStore:
    """``WorkflowStore.matrix`` over the library's documents, without a server and without vectors."""

    dense = False  # the retriever scores BM25 only while this store is in use

    def __init__(self, library, formats: Iterable[str] = FORMATS, embedder=None):
        self.embedder = embedder  # kept so a caller that embeds a query still can; never needed here
        self._docs = library_docs(library, formats)
        self._matrices: dict[tuple[str, str], Matrix] = {}

    def matrix(self, collection: str, fmt: str | None = None) -> Matrix:
        key = (collection, fmt or "")
        m = self._matrices.get(key)
        if m is None:
            docs = sorted((d for d in self._docs[collection] if fmt is None or d.meta.get("format") == fmt),
                          key=lambda d: d.id)  # the order WorkflowStore.matrix uses: same rows either way
            m = self._matrices[key] = Matrix([d.id for d in docs], [d.text for d in docs],
                                             [{**d.meta, "hash": text_hash(d.text)} for d in docs],
                                             np.zeros((len(docs), 0), dtype=np.float32))
        return m

    def close(self) -> None:
        pass
