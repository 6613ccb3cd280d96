"""The offline MiniLM embedder (numpy forward pass) and the content-hash embedding cache."""

from __future__ import annotations

import numpy as np
import pytest

from memory.embeddings import CachedEmbedder, MiniLMEmbedder, get_embedder
from tests.local_http import JsonHandler, serving


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return get_embedder("minilm")


def test_matches_the_published_reference_vector(minilm):
    # First values of sentence-transformers/all-MiniLM-L6-v2("This is an example sentence") (torch reference).
    ref = [0.0676569, 0.0634956, 0.0487131, 0.0793050, 0.0374480, 0.0026528]
    v = minilm.embed(["This is an example sentence"])[0]
    assert np.allclose(v[:6], ref, atol=2e-4)


def test_shape_norm_and_determinism(minilm):
    texts = ["reset my password", "book a table for two", ""]
    a, b = minilm.embed(texts), minilm.embed(texts)
    assert a.shape == (3, 384) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(a, b)


def test_padding_does_not_change_a_sentence(minilm):
    # Alone vs batched with a much longer sentence: the attention mask must hide the padding.
    short = "cancel my hotel booking"
    alone = minilm.embed([short])[0]
    batched = minilm.embed([short, "a much longer sentence " * 30])[0]
    assert np.allclose(alone, batched, atol=1e-5)


def test_similar_sentences_are_closer_than_unrelated_ones(minilm):
    v = minilm.embed(["How do I reset my password?", "I forgot my login password",
                      "What is the weather in Paris tomorrow?"])
    assert v[0] @ v[1] > 0.6 > v[0] @ v[2] + 0.3


def test_long_text_is_truncated_not_rejected(minilm):
    v = minilm.embed(["word " * 2000])
    assert v.shape == (1, 384) and np.isfinite(v).all()


class _Counting:
    name, dim = "counting", 4

    def __init__(self):
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        out = np.array([[len(t), t.count("a"), 1.0, 0.5] for t in texts], dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_cache_embeds_each_text_once_and_persists(tmp_path):
    inner = _Counting()
    cache = CachedEmbedder(inner, tmp_path / "emb.sqlite", shared_memory=False)
    first = cache.embed(["alpha", "beta", "alpha"])
    assert inner.calls == [["alpha", "beta"]]
    assert np.array_equal(cache.embed(["beta", "alpha"]), first[[1, 0]])
    assert len(inner.calls) == 1
    cache.close()
    # A new process (new object) reads the vectors from SQLite instead of embedding again.
    again = CachedEmbedder(inner, tmp_path / "emb.sqlite", shared_memory=False)
    assert np.array_equal(again.embed(["alpha", "gamma"])[0], first[0])
    assert inner.calls[-1] == ["gamma"]
    again.close()


def test_unknown_embedding_spec_is_rejected():
    with pytest.raises(ValueError, match="minilm"):
        get_embedder("word2vec")


def test_openai_compatible_embeddings_through_a_local_server():
    """OpenAIEmbedder against a tiny OpenAI-compatible /v1/embeddings server on 127.0.0.1."""
    seen = []

    class Handler(JsonHandler):
        def do_POST(self):  # noqa: N802
            body = self.body()
            seen.append((self.path, body))
            data = [{"object": "embedding", "index": i, "embedding": [float(len(t)), 1.0, 0.0]}
                    for i, t in enumerate(body["input"])]
            self.send_json(200, {"object": "list", "data": data, "model": body["model"],
                                 "usage": {"prompt_tokens": 1, "total_tokens": 1}})

    with serving(Handler) as port:
        emb = get_embedder("openai:test-embed", base_url=f"http://127.0.0.1:{port}/v1")
        v = emb.embed(["abc", "abcdef"])
        assert emb.name == "openai:test-embed" and v.shape == (2, 3) and emb.dim == 3
        assert np.allclose(np.linalg.norm(v, axis=1), 1.0)
        assert v[1][0] > v[0][0]  # longer text, larger first component after normalisation
        assert seen[0][0] == "/v1/embeddings" and seen[0][1]["model"] == "test-embed"
