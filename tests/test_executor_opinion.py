"""The text classifier the learned executor's ranker reads as evidence (dialogue/execution/opinion.py,
evals/train_opinion.py): hashed inputs, the model file's checks, unknown labels, rows that do not depend on
which other candidates are scored, and the cross-fit (no turn scored by a classifier that saw its dialogue;
some by classifiers that never saw its task)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from dialogue.execution.opinion import OPINION_FEATURES, OTHER, OpinionModel, action_key, inputs
from dialogue.execution.policy_learned import (BASE_FEATURES, INTENT_FEATURES, TURN_AT, LearnedPolicy,
                                               PolicyError, PolicyFile, TurnFeatures, Vectorizer)


@dataclass
class _Turn:  # the parts of evals.train_executor.TurnRows the classifier reads
    task: str
    dialogue: int
    tf: TurnFeatures
    gold: int


def _turn(task: str, dialogue: int, executed: list[str], text: str, keys: list[str], gold: int) -> _Turn:
    tf = TurnFeatures(rows=[[0.0] for _ in keys], toks=[() for _ in keys], intent=[], keys=keys,
                      state=(task, executed, False, text), workflow_keys=tuple(keys))
    return _Turn(task, dialogue, tf, gold)


def _turns(task: str = "shop", start: int = 0, n: int = 40) -> list[_Turn]:
    """After a greeting the agent asks for a name unless the user asks where something is (a search)."""
    keys = ["ask_name", "api:search", "bye"]
    out = []
    for d in range(start, start + n):
        out.append(_turn(task, d, ["hello"], "where is my parcel", keys, 1))
        out.append(_turn(task, d, ["hello"], "hi i would like help", keys, 0))
        out.append(_turn(task, d, ["hello", "search"], "thanks that is all", keys, 2))
        out.append(_turn(task, d, ["hello"], "something unusual", keys, -1))  # no candidate: OTHER
    return out


def test_action_keys_and_hashed_inputs():
    assert action_key("api", "book", {"RequestType": "Check", "a": "1"}) == "api:book|RequestType=Check|a=1"
    assert action_key("answer", "ask_name") == "ask_name"
    sym, text = inputs("shop", ["hello", "search"], True, "Where is it? where")
    sym2, text2 = inputs("shop", ["hello", "search"], False, "where is it")
    assert len(sym) == len(sym2) + 1  # the tool-result flag
    assert all(isinstance(b, int) for b in sym) and dict(text)[max(dict(text), key=dict(text).get)] > 1.0  # "where" twice
    assert {b for b, _ in text2} < {b for b, _ in text}  # ("it where": a pair of its own)


def test_the_model_file_checks_its_shapes():
    ok = dict(classes=["a", "b"], buckets=[3, 9], idf=[1.0, 0.0], counts=[1, 1], cols=[1, 0], vals=[50, -20],
              intercept=[0.0, 0.0])
    m = OpinionModel(**ok)
    p = m.proba(((9,), ((3, 1.0),)))  # text bucket 3 (idf 1): +0.5 for "b"; symbol bucket 9: -0.2 for "a"
    assert p[1] / p[0] == pytest.approx(2.718281828 ** (0.5 * 1.0 + 0.2), rel=1e-5)
    for bad in ({"idf": [1.0]}, {"cols": [2, 0]}, {"intercept": [0.0]}, {"vals": [1]}, {"counts": [2, 1]},
                {"counts": [3, -1]}):
        with pytest.raises(ValidationError):
            OpinionModel(**{**ok, **bad})


def test_the_classifier_learns_the_next_action_and_flags_unknown_labels():
    from evals.train_opinion import fit

    model = fit(_turns())
    assert OTHER in model.classes and "api:search" in model.classes
    assert "where" not in json.dumps(model.model_dump())  # bucket numbers, never a word
    keys = ["ask_name", "api:search", "bye", "never_seen"]
    rows = model.features(inputs("shop", ["hello"], False, "where is it"), keys, tuple(keys))
    p, share, gap, top, known, mass = zip(*rows)
    assert max(range(3), key=lambda i: p[i]) == 1 and top[1] == 1.0 and gap[1] == 0.0
    assert known == (1.0, 1.0, 1.0, 0.0) and p[3] == -1.0 and share[3] == 0.0
    assert abs(sum(share[:3]) - 1.0) < 1e-6 and 0 < mass[0] <= 1
    # a row reads the workflow's actions, not the other candidates scored: a subset gives the same rows
    assert model.features(inputs("shop", ["hello"], False, "where is it"), keys[1:2], tuple(keys)) == rows[1:2]
    greet = model.features(inputs("shop", ["hello"], False, "hi i would like help"), keys, tuple(keys))
    assert max(range(3), key=lambda i: greet[i][0]) == 0


def test_cross_fit_never_scores_a_turn_with_a_classifier_that_saw_its_dialogue(monkeypatch):
    import evals.train_opinion as to

    turns = [t for task in range(8) for t in _turns(f"task{task}", task * 100, 25)]
    for t in turns:  # a word of its own per dialogue: each turn's inputs tell its dialogue
        t.tf.state = (*t.tf.state[:3], t.tf.state[3] + f" d{t.dialogue}")
    real_fit, real_features = to.fit, OpinionModel.features
    scored_by = {}

    def recording_fit(train):
        model = real_fit(train)
        model.__dict__["trained_on"] = ({t.dialogue for t in train}, {t.task for t in train})
        return model

    def recording_features(self, x, keys, workflow_keys):
        scored_by[x] = self.__dict__["trained_on"]
        return real_features(self, x, keys, workflow_keys)

    monkeypatch.setattr(to, "fit", recording_fit)
    monkeypatch.setattr(OpinionModel, "features", recording_features)
    used = [t for t in turns if t.gold >= 0]
    rows = to.cross_fit(turns, used)
    assert all(r is not None and len(r) == len(t.tf.keys) for r, t in zip(rows, used))
    dialogues, tasks = zip(*(scored_by[inputs(*t.tf.state)] for t in used))
    assert not any(t.dialogue in ds for t, ds in zip(used, dialogues))
    task_out = {t.dialogue for t, ts in zip(used, tasks) if t.task not in ts}
    assert 0 < len(task_out) < len({t.dialogue for t in used}) / 2


def test_a_policy_file_with_the_classifier_needs_its_columns():
    import lightgbm as lgb
    import numpy as np

    from evals.train_opinion import fit

    names = BASE_FEATURES + INTENT_FEATURES + OPINION_FEATURES
    X = np.random.default_rng(0).normal(size=(40, len(names)))
    booster = lgb.train({"objective": "binary", "verbose": -1, "min_data_in_leaf": 2}, lgb.Dataset(X, X[:, -6] > 0),
                        num_boost_round=2).model_to_string()
    opinion = fit(_turns())
    LearnedPolicy(PolicyFile(format=1, features=names, booster=booster, opinion=opinion))
    with pytest.raises(PolicyError, match="field 'opinion'"):
        LearnedPolicy(PolicyFile(format=1, features=names, booster=booster))
    # the Vectorizer writes the rows' opinions into their columns
    tf = TurnFeatures(rows=[[0.0] * TURN_AT], toks=[()], intent=[], turn=[0.0] * (len(BASE_FEATURES) - TURN_AT))
    X1 = Vectorizer(names, [])(tf, None, [(0.5, 0.25, 0.1, 0.0, 1.0, 0.9)])
    at = names.index("opinion_p")
    assert X1[0, at:at + 6].tolist() == pytest.approx([0.5, 0.25, 0.1, 0.0, 1.0, 0.9])


def test_the_bundled_model_reads_the_classifier_and_holds_no_words():
    from dialogue.execution.policy_learned import DEFAULT_MODEL, load_policy

    policy = load_policy("auto")
    at = len(BASE_FEATURES) + len(INTENT_FEATURES)
    assert policy.model.opinion is not None and policy.features[at:at + len(OPINION_FEATURES)] == OPINION_FEATURES
    assert OTHER in policy.model.opinion.classes and all(" " not in c for c in policy.model.opinion.classes)
    assert "Hello" not in DEFAULT_MODEL.read_text()
    # hashed buckets and weights: the only strings the classifier holds are its action keys
    dumped = policy.model.opinion.model_dump()
    assert [k for k, v in dumped.items() if any(isinstance(x, str) for x in v)] == ["classes"]


def test_two_labels_make_a_softmax_of_two():
    from evals.train_opinion import fit

    turns = [t for t in _turns() if t.gold in (0, 1)]
    model = fit(turns)
    assert model.classes == ["api:search", "ask_name"]
    p = model.proba(inputs("shop", ["hello"], False, "where is my parcel"))
    assert len(p) == 2 and p[0] > 0.5 and abs(float(p.sum()) - 1) < 1e-6
