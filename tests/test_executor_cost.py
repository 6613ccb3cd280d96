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


# --- the candidates' features, the passed-over ANSWERs, the branch guards (session 15) ----------------------

from bisect import bisect_right  # noqa: E402

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402

from dialogue.execution.policy_learned import (_NO_API, _cwords, _filled, _messages_since_user,  # noqa: E402
                                               _passed_over_answers, _said,
                                               _said_words, _since, _values, action_key, candidates, features,
                                               view_of)
from workflows.text import last_user_text  # noqa: E402


def _plain_features(wf: Workflow, interp: Interpreter, frame: Frame | dict, reading: dict, messages: list[BaseMessage],
             cands: list[Candidate], n_candidates: int | None = None, values: dict | None = None) -> TurnFeatures:
    """``policy_learned.features`` as session 14 wrote it (each value computed in the loop, per row and turn)."""
    view = view_of(wf, interp)
    executed = list(frame.get("executed") or [])
    values = _values(frame) if values is None else values
    calls = [c for c in frame.get("calls") or [] if c.get("status") != "cancelled"]
    message = last_user_text(messages)
    low = message.lower()
    said = _said(message)
    user_words = _cwords(message)
    n_user_words = len(user_words)
    since_user, last_type, prev_text = _messages_since_user(messages)
    prev_words = _cwords(prev_text)
    last = executed[-1] if executed else ""
    is_api, asks = view.apis, view.asks
    last_line = view.lines.get(last, 0)
    first_after = bisect_right(view.sorted_lines, last_line)  # the first line after the last node's
    line_pos = view.line_pos
    pending = list(frame.get("asked") or [])  # what the last question asked for
    wf_slots = view.slot_names
    last_ok = (1.0 if calls[-1].get("status", "ok") == "ok" else 0.0) if calls else -1.0
    items = next((len(v) for v in reversed(list((frame.get("results") or {}).values()))
                  if isinstance(v, list)), 0)
    turn = [
        min(len(executed), 30), sum(1 for m in messages if getattr(m, "type", "") == "human"), since_user,
        float(last_type == "tool"), float(last in is_api), last_ok, len(calls),
        _since(executed, lambda n: n in is_api), _since(executed, lambda n: n in asks),
        said[0], float(reading.get("yesno") is True), float(reading.get("yesno") is False),
        float(bool(reading.get("info_missing"))), *said[1:],
        (sum(_filled(values, s) for s in wf_slots) / len(wf_slots)) if wf_slots else 0.0,
        len(cands) if n_candidates is None else n_candidates, items,
    ]
    prev_tokens = tuple(["prev=" + t for t in (view.tokens.get(last) or (["__api__"] if last in is_api else []))])
    rules_kind = cands[0].kind if cands else None
    rows, toks, keys = [], [], []
    runs: dict[str, int] = {}
    last_at: dict[str, int] = {}
    for k, n in enumerate(reversed(executed)):
        runs[n] = runs.get(n, 0) + 1
        last_at.setdefault(n, k)  # nodes run: how many steps ago they last ran (``_since``)
    before_last = executed[-2] if len(executed) > 1 else None
    last_tokens = set(view.tokens.get(last) or ())
    n_last_tokens = len(last_tokens)
    n_prev_words = len(prev_words)
    done = set(executed)
    statics, all_targets, n_lines, sqrt = view.statics, view.targets, view.n_lines, math.sqrt
    # (the loop below runs for a dozen candidates on every scored turn: ``_filled`` and ``_sim_n`` inlined, the
    # same expressions, and ``1.0 if x else 0.0`` for ``float(x)``: the same values without a call)
    for c in cands:
        node, kind = c.name, c.kind
        st = statics.get((kind, node)) or view.static(wf, kind, node)
        api, tvars = st.api, st.tvars
        targets = all_targets.get(node, []) if kind == "answer" else list(c.missing) if kind == "request" else []
        line = c.site.line if c.site else st.line
        if api is not None:
            params = [p for p in api.param_names if p not in c.fixed]
            filled = sum(1 for p in params if p in c.args)
            mine = [r for r in calls if r.get("api") == node]
            variant = [r for r in mine if all(str((r.get("args") or {}).get(k)) == v for k, v in c.fixed.items())]
            last_args = (mine[-1].get("args") or {}) if mine else {}
            new_info = sum(1 for p, v in c.args.items() if p not in c.fixed and str(last_args.get(p)) != str(v))
            api_f = [filled / len(params) if params else 1.0, len(c.missing), len(mine), len(variant), new_info,
                     float(bool(mine) and {k: str(v) for k, v in last_args.items()}
                           == {k: str(v) for k, v in c.args.items()}),
                     c.site.index if c.site else 0,
                     (1.0 if variant[-1].get("status", "ok") == "ok" else 0.0) if variant else -1.0,
                     float(bool(calls) and calls[-1] in variant),
                     float(bool(calls) and calls[-1] in mine and calls[-1] not in variant
                           and calls[-1].get("status", "ok") == "ok")]
        else:
            api_f = _NO_API
        if targets:
            missing_t = [t for t in targets if (v := values.get(t)) is None or v == ""]
            given = 1.0 if any((v := values.get(t)) is not None and v != "" and str(v).lower() in low
                               for t in targets) else 0.0
            pending_t = 1.0 if any(t in pending for t in targets) else 0.0
        else:
            missing_t, given, pending_t = targets, 0.0, 0.0
        words, name_words = st.words, st.name_words
        rows.append([*st.kind,
            1.0 if c.is_rules else 0.0, 1.0 if rules_kind is not None and kind == rules_kind else 0.0,
            runs.get(node, 0), 1.0 if last == node else 0.0, 1.0 if before_last == node else 0.0,
            last_at.get(node, -1),
            *st.head, (sum((v := values.get(t)) is not None and v != "" for t in tvars) / len(tvars)) if tvars else 1.0,
            *st.template,
            1.0 if st.precond_set <= done else 0.0, len(st.precond),
            len(targets), len(missing_t), given, pending_t, 1.0 if targets and not missing_t else 0.0,
            line / n_lines, (line - last_line) / n_lines if line else 0.0, 1.0 if line > last_line else 0.0,
            line_pos[line] - first_after if line > last_line and line in line_pos else 99,
            1.0 if line > 0 else 0.0,
            *api_f,
            len(user_words & words) / sqrt(n_user_words * len(words)) if n_user_words and words else 0.0,
            len(user_words & name_words) / sqrt(n_user_words * len(name_words)) if n_user_words and name_words else 0.0,
            len(prev_words & words) / sqrt(n_prev_words * len(words)) if n_prev_words and words else 0.0,
            len(last_tokens & st.token_set) / sqrt(n_last_tokens * len(st.token_set))
            if n_last_tokens and st.token_set else 0.0,
        ])
        if kind == "api":
            toks.append(st.toks + tuple(["tok=" + str(v).lower() for v in c.fixed.values()]) + prev_tokens)
            keys.append(action_key(kind, node, c.fixed))
        else:
            toks.append(st.toks + prev_tokens)
            keys.append(node)  # (``action_key`` of a reply)
    prev2 = executed[-2] if len(executed) > 1 else ""
    intent = [*_said_words(low), *prev_tokens,
              *["prev2=" + t for t in (view.tokens.get(prev2) or (["__api__"] if prev2 in is_api else []))],
              f"ctx=since_user_{min(since_user, 3)}", f"ctx=last_{last_type or 'none'}",
              f"ctx=api_{'none' if last_ok < 0 else 'ok' if last_ok else 'empty'}"]
    return TurnFeatures(rows, toks, intent, turn, keys, (wf.name, executed, last_type == "tool", message),
                        view.keys)


def _random_states(seed: int, n: int):
    """Frames of the bundled library's workflows with random histories: nodes run (preconditions or not),
    values given, empty or missing, results with records and lists, calls that succeeded, failed or were
    cancelled, slots asked for, and messages whose words carry some of the values."""
    import random

    from dialogue.execution.interpreter import Interpreter
    from dialogue.execution.policy_offline import decide
    from workflows.library import bundled_library_path, load_library

    rng = random.Random(seed)
    library = load_library(bundled_library_path())
    names = sorted(library.workflows)
    words = ["yes", "no", "please", "tomorrow", "7pm", "two", "table", "card", "thanks", "bye", "hi", "?"]
    for _ in range(n):
        wf = library.workflows[rng.choice(names)]
        interp = Interpreter(wf)
        nodes = [a.name for a in wf.answers] + [a.name for a in wf.apis]
        slots = [s.name for s in wf.slots]
        picked = [s for s in slots if rng.random() < 0.5]
        slot_values = {s: rng.choice(["", None, "two", "7pm", f"v{rng.randint(0, 9)}", 2]) for s in picked}
        results = {}
        for api in wf.apis:
            if rng.random() < 0.3:
                results[api.name] = rng.choice([{r: f"r{rng.randint(0, 3)}" for r in api.returns},
                                                [{"x": 1}] * rng.randint(0, 3), "ok"])
        calls = [{"api": rng.choice([a.name for a in wf.apis]), "status": rng.choice(["ok", "error", "cancelled"]),
                  "args": {s: v for s, v in slot_values.items() if rng.random() < 0.5}}
                 for _ in range(rng.randint(0, 3))] if wf.apis else []
        frame = {"workflow": wf.name, "executed": [rng.choice(nodes) for _ in range(rng.randint(0, 6))],
                 "slots": slot_values, "results": results, "calls": calls,
                 "asked": rng.sample(slots, k=min(len(slots), rng.randint(0, 2)))}
        text = " ".join(rng.choice(words + [str(v) for v in slot_values.values() if v]) for _ in range(rng.randint(0, 8)))
        messages = rng.choice([[HumanMessage(text)], [HumanMessage("hello"), AIMessage("How can I help?"),
                                                      HumanMessage(text)],
                               [HumanMessage(text), AIMessage("One moment."),
                                ToolMessage("{}", tool_call_id="c1")], []])
        reading = {"yesno": rng.choice([True, False, None]), "info_missing": rng.random() < 0.2}
        rules = decide(wf, interp, frame, reading, messages, [])
        yield wf, interp, frame, reading, messages, rules


def test_the_features_are_the_plain_loops_on_random_states():
    """``features`` (what depends on the node read from its ``_Static``, membership in the turn's filled
    names) gives exactly the rows, tokens, keys, turn and intent inputs of the plain loop."""
    n = 0
    for wf, interp, frame, reading, messages, rules in _random_states(1, 400):
        cands = candidates(wf, interp, frame, rules, messages)
        for subset in (cands, cands[::2]):
            got = features(wf, interp, frame, reading, messages, subset, len(cands))
            want = _plain_features(wf, interp, frame, reading, messages, subset, len(cands))
            assert got == want
            n += len(subset)
    assert n > 2000  # (the states gave candidates of every kind to compare)


def _answer_leaves_collection(name, view, executed, collecting):
    """The gate's rule for one ANSWER, as written before the set form: while the rules collect values, an ANSWER
    that asks for none of them; else one that collects values and ran before."""
    targets = view.target_sets.get(name, frozenset())
    if collecting and collecting.isdisjoint(targets):
        return True
    return bool(targets) and name in executed


def test_the_passed_over_answers_are_those_the_rule_names():
    """``_passed_over_answers``' set is, ANSWER by ANSWER, what the rule (``_answer_leaves_collection`` above) and
    the reply just given say (with and without a gate; the view's kept sets reused across turns)."""
    import random

    rng = random.Random(4)
    for wf, interp, frame, reading, messages, rules in _random_states(2, 300):
        view = view_of(wf, interp)
        done = frozenset(frame["executed"])
        last = frame["executed"][-1] if frame["executed"] else None
        slots = [s.name for s in wf.slots]
        collecting = set(rng.sample(slots, k=min(len(slots), rng.randint(0, 2))))
        for gate in (True, False):
            skip = _passed_over_answers(view, done, last, collecting if gate else None)
            for a in wf.answers:
                want = a.name == last or bool(gate and _answer_leaves_collection(a.name, view, done, collecting))
                assert (a.name in skip) == want


def test_the_choice_is_the_same_with_the_plain_features(monkeypatch):
    """The policy's choices and scores on random states are those it makes with the plain loop."""
    from dialogue.execution import policy_learned

    policy = load_policy("auto")
    states = list(_random_states(3, 150))
    fast = [(policy.choice(*s, []), [x for _, x in policy.scored(*s)]) for s in states]
    monkeypatch.setattr(policy_learned, "features", _plain_features)
    plain = [(policy.choice(*s, []), [x for _, x in policy.scored(*s)]) for s in states]
    strip = lambda r: ({k: v for k, v in r[0][0].items() if k != "call_id"}, r[0][1], r[1])  # noqa: E731
    assert [strip(r) for r in fast] == [strip(r) for r in plain]


def test_the_branch_guards_are_kept_per_procedure_and_name():
    from dialogue.control.checks import _guards, guards_of
    from workflows.library import bundled_library_path, load_library

    for wf in load_library(bundled_library_path()).workflows.values():
        from dialogue.execution.interpreter import Interpreter

        procedure = Interpreter(wf).procedure
        for node in [a.name for a in wf.answers] + [a.name for a in wf.apis] + ["no_such_node"]:
            want = [list(p) for p in _guards(procedure.steps, node, [])]
            assert [list(p) for p in guards_of(procedure, node)] == want
            assert guards_of(procedure, node) is guards_of(procedure, node)  # kept


def test_the_predictor_reads_read_only_and_empty_matrices():
    policy = load_policy("auto")
    X = np.random.default_rng(2).normal(size=(5, len(policy.features))).astype(np.float32)
    X.flags.writeable = False  # (no writable buffer: the addresses come from ``ndarray.ctypes``)
    assert np.array_equal(policy._predict(X), policy.booster.predict(X, num_threads=1))
    assert policy._predict(np.zeros((0, len(policy.features)), dtype=np.float32)).shape == (0,)


def test_text_buckets_are_the_terms_buckets():
    """``text_buckets`` (the CRC continued from a term's prefix and first word) gives the buckets of the terms'
    strings, in the same order, on random texts (punctuation, case, repeats, non-ASCII words)."""
    import random

    from dialogue.execution.opinion import _WORD, _bucket

    def plain(text):
        words = _WORD.findall(text.lower())
        counts = {}
        for term in (*words, *(a + " " + b for a, b in zip(words, words[1:]))):
            b = _bucket("t=" + term)
            counts[b] = counts.get(b, 0) + 1
        return tuple((b, 1.0 + math.log(n)) for b, n in counts.items())

    rng = random.Random(6)
    vocab = ["the", "a", "Table", "for", "two", "7pm", "café", "über", "I'm", "no", "yes", "?", "!", "...", "x"]
    for _ in range(500):
        text = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 30)))
        assert text_buckets.__wrapped__(text) == plain(text)
    assert text_buckets("") == () and text_buckets("ok ok") == plain("ok ok")


def test_plainly_valid_arguments_are_those_the_validator_accepts():
    """``schema_errors`` without the validator's walk for plain schemas gives exactly what the validator says,
    on the bundled library's schemas and on synthetic ones (type lists, string lists, required fields, the
    keywords the plain form does not read), with values of every JSON type (bools, 1.0, None, extra fields)."""
    import random

    from workflows import bindings
    from workflows.library import bundled_library_path, load_library
    from workflows.pdl import Api

    apis = [api for wf in load_library(bundled_library_path()).workflows.values() for api in wf.apis]
    synthetic = [
        {"type": "object", "properties": {"a": {"type": ["string", "integer"]}, "b": {"type": "number"},
                                          "c": {"type": "boolean"}, "d": {"type": "null"}}, "required": ["a"]},
        {"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "y"]},
                                          "b": {"type": ["string", "integer"], "enum": ["1", "z"]}}},
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 2}}, "required": ["a"]},
        {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
        {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}},
        {"type": "object", "properties": {"a": {"type": "integer", "description": "n"}}, "required": ["a", "b"]},
    ]
    apis += [Api(name=f"s{i}", parameters=schema) for i, schema in enumerate(synthetic)]
    rng = random.Random(8)
    values = ["x", "y", "z", "1", "", 0, 1, 2, -3, 1.0, 2.5, True, False, None, [], ["x"], {}, {"k": 1}]
    plain_seen = 0
    for api in apis:
        names = list((api.parameters.get("properties") or {})) + ["a", "b", "extra"]
        plain_seen += bindings._compiled(api.parameters)[2] is not None
        for _ in range(60):
            args = {n: rng.choice(values) for n in names if rng.random() < 0.7}
            assert bindings.schema_errors(api, args) == bindings._validator_errors(api, args), (api.parameters, args)
    assert plain_seen >= len(apis) // 2  # (most schemas take the plain form: the comparison covers it)



def _numpy_matrix(vec, tf, probs, opinion=None):
    """The Vectorizer's matrix as session 15 built it with numpy's slices (kept verbatim as the reference)."""
    n, nc, nb, ni, width = len(tf.rows), TURN_AT, len(BASE_FEATURES), len(INTENT_FEATURES), vec.width
    X = np.zeros((n, width), dtype=np.float32)
    if not n:
        return X
    no = len(OPINION_FEATURES) if opinion is not None and vec._opinion_at >= 0 else 0
    turn = tuple(tf.turn)
    values, flat = [], []
    put = values.extend
    for r, (row, ts) in enumerate(zip(tf.rows, tf.toks)):
        idx, gen, at = vec._plan(ts)
        put(row)
        if probs is not None:
            g = probs[gen] if gen >= 0 else -1.0
            if idx:
                ps = [probs[i] for i in idx]
                put((max(ps), sum(ps) / len(ps), min(ps), g, len(ps)))
            else:
                put((-1.0, -1.0, -1.0, g, 0.0))
        else:
            put((-1.0, -1.0, -1.0, -1.0, 0.0))
        if no:
            put(opinion[r])
        if at:
            base = r * width
            flat.extend([base + j for j in at])
    w = nc + ni + no
    own = np.array(values, dtype=np.float32).reshape(n, w)
    X[:, :nc] = own[:, :nc]
    X[:, nc:nb] = turn
    if no and vec._opinion_at == nb + ni:
        X[:, nb:nb + ni + no] = own[:, nc:]
    else:
        X[:, nb:nb + ni] = own[:, nc:nc + ni]
        if no:
            X[:, vec._opinion_at:vec._opinion_at + no] = own[:, nc + ni:]
    X.reshape(-1)[flat] = 1.0
    return X


def _same_matrix(got, want):
    assert got.dtype == np.float32 and got.shape == want.shape and got.flags.c_contiguous and got.flags.writeable
    assert got.tobytes() == want.tobytes()  # bit for bit (NaN and -0.0 included)


def test_the_vectorizer_is_the_numpy_build_on_random_turns():
    """The ``array('f')`` build gives numpy's matrix bit for bit: random rows of ints, floats that round in float32,
    tiny, huge, -0.0, infinities and NaN; with and without the intent model and the opinion, the opinion's columns
    after the intent's (the model file's order) or elsewhere; token columns known or not; no rows."""
    rng = np.random.default_rng(11)
    specials = [0, 1, -1, 99, True, 0.0, -0.0, 1e-45, 1e-40, 3.4e38, 1 / 3, 0.1, 2.0 ** -149, 1.0 + 2.0 ** -24,
                1.0 + 3 * 2.0 ** -24, math.inf, -math.inf, math.nan, 16777217]
    tokens = ["tok=ask", "tok=bye", "gen=x", "prev=bye", "tok=__api__", "tok=unknown"]

    def number():
        k = rng.integers(0, 4)
        return (specials[rng.integers(0, len(specials))] if k == 0 else int(rng.integers(-50, 50)) if k == 1
                else float(rng.normal(scale=10.0 ** rng.integers(-8, 8))))

    for trial in range(200):
        joined = trial % 3 != 0
        names = BASE_FEATURES + INTENT_FEATURES + (OPINION_FEATURES if joined else []) + ["tok=ask", "tok=bye"]
        names += ["prev=bye", "tok=__api__"] + ([] if joined else OPINION_FEATURES) + ["gen=x"]
        vec = Vectorizer(names, ["tok=ask", "gen=x", "tok=bye", "tok=__api__"])
        n = int(rng.integers(0, 15))
        tf = TurnFeatures(rows=[[number() for _ in range(TURN_AT)] for _ in range(n)],
                          toks=[tuple(rng.choice(tokens, size=rng.integers(0, 4)).tolist()) for _ in range(n)],
                          intent=[], turn=[number() for _ in range(len(BASE_FEATURES) - TURN_AT)])
        probs = None if trial % 5 == 0 else [float(x) for x in rng.random(4)]
        opinion = None if trial % 7 == 0 else [tuple(number() for _ in OPINION_FEATURES) for _ in range(n)]
        _same_matrix(vec(tf, probs, opinion), _numpy_matrix(vec, tf, probs, opinion))
    # a row or an opinion of the wrong length is an error, not a shifted matrix
    vec = Vectorizer(BASE_FEATURES + INTENT_FEATURES + OPINION_FEATURES, [])
    turn = [0.0] * (len(BASE_FEATURES) - TURN_AT)
    with pytest.raises(ValueError):
        vec(TurnFeatures(rows=[[0.0] * (TURN_AT - 1)], toks=[()], intent=[], turn=turn), None, None)
    with pytest.raises(ValueError):
        vec(TurnFeatures(rows=[[0.0] * TURN_AT], toks=[()], intent=[], turn=turn), None, [(0.0,) * 5])


def test_the_vectorizer_is_the_numpy_build_on_the_policys_turns():
    """On the bundled model's turns (random states of the demo library): the same matrices, so the same scores."""
    policy = load_policy("auto")
    n = 0
    for wf, interp, frame, reading, messages, rules in _random_states(5, 200):
        tf = features(wf, interp, frame, reading, messages, candidates(wf, interp, frame, rules, messages))
        op = policy._opinion
        probs = policy.model.intent.vector(tf.intent)
        opinion = op.features(inputs(*tf.state), tf.keys, tf.workflow_keys)
        X = policy._vectorize(tf, probs, opinion)
        _same_matrix(X, _numpy_matrix(policy._vectorize, tf, probs, opinion))
        assert np.array_equal(policy._predict(X), policy.booster.predict(X, num_threads=1))
        n += len(tf.rows)
    assert n > 500
