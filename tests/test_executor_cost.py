"""The learned executor's cheaper reading paths (issue 14, per-turn cost) give what the plain computations give:
the classifier's tables and caches (``opinion.Reader``), the intent model's sums, LightGBM's single-row fast
path, the matrix with the opinion in its columns, a call's arguments from a given values view, and the schema
validators kept per schema.  The timings are in ``benchmarks/executor_cost.py`` (ratios, never asserted)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dialogue.execution.opinion import OPINION_FEATURES, OpinionModel, Reader, inputs, text_buckets, text_norm
from dialogue.execution.policy_learned import (BASE_FEATURES, INTENT_FEATURES, TURN_AT, IntentModel, TurnFeatures,
                                               Vectorizer, load_policy)


def _random_model(rng, n_buckets: int = 300, n_classes: int = 7) -> OpinionModel:
    buckets = sorted(rng.choice(1 << 20, size=n_buckets, replace=False).tolist())
    counts = rng.integers(0, 4, size=n_buckets).tolist()
    cols = [int(c) for n in counts for c in sorted(rng.choice(n_classes, size=n, replace=False))]
    return OpinionModel(classes=[f"c{i}" for i in range(n_classes)], buckets=buckets,
                        idf=[float(rng.choice([0.0, 1.0 + rng.random()])) for _ in buckets], counts=counts,
                        cols=cols, vals=rng.integers(-300, 300, size=len(cols)).tolist(),
                        intercept=rng.normal(size=n_classes).round(3).tolist())


def _reference_proba(m: OpinionModel, x) -> np.ndarray:
    """The classifier's probabilities computed the plain way: a dense vector over all buckets, float64."""
    symbols, text = x
    row = {b: i for i, b in enumerate(m.buckets)}
    W = np.zeros((len(m.buckets), len(m.classes)))
    W[np.repeat(np.arange(len(m.buckets)), m.counts), m.cols] = np.asarray(m.vals) / 100
    v = np.zeros(len(m.buckets))
    for b in symbols:  # a symbol counts 1, a kept word its TF-IDF (a bucket may be both: both count)
        if b in row:
            v[row[b]] += 1.0
    norm = text_norm(text)
    for b, tf in text:
        if b in row and m.idf[row[b]]:
            v[row[b]] += tf * m.idf[row[b]] / norm
    z = np.asarray(m.intercept) + v @ W
    z = np.exp(z - z.max())
    return z / z.sum()


def test_the_reader_gives_the_plain_softmax_on_random_models_and_inputs():
    rng = np.random.default_rng(3)
    for trial in range(20):
        m = _random_model(rng)
        reader = m.reader()
        assert isinstance(reader, Reader) and m.reader() is reader  # built once
        for _ in range(10):
            kept = rng.choice(m.buckets, size=6).tolist()
            other = rng.integers(0, 1 << 20, size=4).tolist()  # buckets the model does not keep
            symbols = tuple(sorted(set(kept[:3] + other[:2])))
            text = tuple((int(b), 1.0 + math.log(1 + int(k))) for k, b in enumerate(dict.fromkeys(kept[3:] + other[2:])))
            p = m.proba((symbols, text))
            assert p.dtype == np.float32 and abs(float(p.sum()) - 1) < 1e-5
            assert np.allclose(p, _reference_proba(m, (symbols, text)), rtol=1e-5, atol=1e-6)


def test_the_opinion_features_read_the_plain_probabilities():
    rng = np.random.default_rng(5)
    m = _random_model(rng)
    x = ((m.buckets[0], m.buckets[5]), ((m.buckets[9], 1.5), (m.buckets[11], 1.0)))
    p = _reference_proba(m, x)
    workflow = ("c1", "c2", "c4", "never_seen")
    keys = ["c2", "never_seen", "c4"]
    rows = m.features(x, keys, workflow)
    mass, best = p[[1, 2, 4]].sum(), p[[1, 2, 4]].max()
    for key, row in zip(keys, rows):
        if key == "never_seen":
            assert row[:5] == (-1.0, 0.0, -1.0, 0.0, 0.0)
        else:
            pk = p[int(key[1:])]
            assert row[:5] == pytest.approx((pk, pk / mass, best - pk, float(pk >= best), 1.0), abs=1e-6)
        assert row[5] == pytest.approx(mass, abs=1e-6)
    assert len(rows[0]) == len(OPINION_FEATURES)


def test_the_message_cache_is_keyed_by_identity_and_stays_right():
    """The cache of a message's rows is keyed by its tuple's id: an equal tuple built anew gives the same
    values, a different message never reads another's entry (also after the cache was emptied)."""
    rng = np.random.default_rng(7)
    m = _random_model(rng)
    reader = m.reader()
    sym = (m.buckets[1],)
    text = tuple((b, 1.0) for b in m.buckets[20:25])
    first = m.proba((sym, text)).copy()
    again = m.proba((sym, tuple(list(text))))  # equal, not the same object
    assert np.array_equal(first, again)
    Reader.CACHE, saved = 8, Reader.CACHE
    try:
        for k in range(40):  # more messages than the cache holds: it is emptied on the way
            other = tuple((b, 1.0 + k) for b in m.buckets[30 + k:33 + k])
            assert np.allclose(m.proba((sym, other)), _reference_proba(m, (sym, other)), rtol=1e-5, atol=1e-6)
        assert len(reader.texts) <= 9
    finally:
        Reader.CACHE = saved
    assert np.array_equal(m.proba((sym, text)), first)


def test_text_buckets_still_return_the_same_tuple_for_a_message():
    """What the identity cache relies on to hit (it is right either way, see above)."""
    assert text_buckets("where is my parcel please") is text_buckets("where is my parcel please")
    sym, text = inputs("shop", ["hello"], False, "where is my parcel please")
    assert text is text_buckets("where is my parcel please")


def test_the_intent_models_sums_are_the_plain_ones():
    rng = np.random.default_rng(11)
    names = [f"w={i}" for i in range(50)]
    coef = rng.normal(size=(6, 50)).round(4).tolist()
    im = IntentModel(inputs=names, targets=[f"tok={i}" for i in range(6)], coef=coef, bias=[0.1] * 6)
    for _ in range(20):
        chosen = [names[i] for i in rng.integers(0, 50, size=12)] + ["w=unknown"]
        got = im.vector(chosen)
        rows = sorted({names.index(c) for c in chosen if c in names})
        z = np.asarray(im.bias) + np.asarray(coef)[:, rows].sum(axis=1)
        assert np.allclose(got, 1 / (1 + np.exp(-z)), rtol=1e-5)
        # the float32 sums of ``ndarray.sum`` over the gathered rows (the values the model was used with)
        W = np.asarray(coef, dtype=np.float32).T
        order = [names.index(c) for c in dict.fromkeys(chosen) if c in names]
        z32 = np.asarray(im.bias, dtype=np.float32) + W[order].sum(axis=0)
        assert got == (1.0 / (1.0 + np.exp(-z32))).tolist()


def test_the_single_row_fast_path_gives_lightgbms_scores_exactly():
    policy = load_policy("auto")
    rng = np.random.default_rng(0)
    for rows in (1, 3, 12, 40):
        X = rng.normal(size=(rows, len(policy.features))).astype(np.float32) * 3
        X[:, rng.random(len(policy.features)) < 0.5] = 0.0  # sparse rows, as the token columns are
        assert np.array_equal(policy._predict(X), policy.booster.predict(X, num_threads=1))
    assert policy._predict(np.zeros((0, len(policy.features)), dtype=np.float32)).shape == (0,)
    # the ungated policy scores with the same trees (one copy in memory)
    assert policy.ungated()._predict is policy._predict and policy.ungated().booster is policy.booster


def test_the_vectorizer_puts_each_part_in_its_columns():
    names = BASE_FEATURES + INTENT_FEATURES + OPINION_FEATURES + ["tok=ask", "prev=bye"]
    width = len(BASE_FEATURES) - TURN_AT
    tf = TurnFeatures(rows=[[float(i + 1)] * TURN_AT for i in range(3)],
                      toks=[("tok=ask",), ("prev=bye", "tok=x"), ()], intent=[],
                      turn=[7.0] * width, keys=["a", "b", "c"], state=("t", [], False, ""), workflow_keys=("a",))
    opinion = [(0.1 * i, 0.2, 0.3, 1.0, 1.0, 0.9) for i in range(3)]
    X = Vectorizer(names, ["tok=ask", "gen=x"])(tf, [0.25, 0.5], opinion)
    at = names.index(OPINION_FEATURES[0])
    assert X.shape == (3, len(names))
    assert (X[:, :TURN_AT] == np.asarray([[1.0], [2.0], [3.0]], dtype=np.float32)).all()
    assert (X[:, TURN_AT:len(BASE_FEATURES)] == 7.0).all()
    nb = len(BASE_FEATURES)
    assert X[0, nb:nb + 5].tolist() == [0.25, 0.25, 0.25, -1.0, 1.0]  # "tok=ask": the intent's first target
    assert X[2, nb:nb + 5].tolist() == [-1.0, -1.0, -1.0, -1.0, 0.0]  # no known token
    assert np.allclose(X[:, at:at + len(OPINION_FEATURES)], np.asarray(opinion, dtype=np.float32))
    assert X[0, names.index("tok=ask")] == 1.0 and X[1, names.index("prev=bye")] == 1.0
    # without the intent model and the classifier: their columns stay as a model without them reads them
    X0 = Vectorizer(names, [])(tf, None, None)
    assert X0[0, nb:nb + 5].tolist() == [-1.0, -1.0, -1.0, -1.0, 0.0] and (X0[:, at:at + 6] == 0).all()


def test_call_arguments_from_a_given_values_view_are_the_walks():
    from dialogue.execution.interpreter import Interpreter
    from workflows.library import bundled_library_path, load_library
    from workflows.semantics import values_view

    wf = load_library(bundled_library_path()).workflows["book_table"]
    interp = Interpreter(wf)
    frame = {"slots": {"restaurant": "Casa Fiorella", "party_size": 2}, "results": {"x": {"time": "19:00"}},
             "executed": ["greet"], "calls": []}
    calls = [(api.name, list(api.param_names), {}) for api in wf.apis]
    values = values_view(frame["slots"], frame["results"])
    assert interp.calls_args(frame, calls, values) == interp.calls_args(frame, calls)


def test_schema_validators_are_kept_per_schema_object():
    from workflows import bindings
    from workflows.pdl import Api

    a = Api(name="book", parameters={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    assert bindings.schema_errors(a, {}) == [("n", "book: missing required field 'n'")]
    v = bindings._validator(a.parameters)
    assert bindings._validator(a.parameters) is v and bindings.schema_errors(a, {"n": 2}) == []
    b = Api(name="book", parameters={"type": "object", "properties": {"n": {"type": "string"}}})
    assert bindings._validator(b.parameters) is not v  # another schema, another validator
    assert bindings.schema_errors(b, {"n": 2})[0][0] == "n"
