"""The learned turn <-> workflow word association (``dialogue.understanding.assoc``, ``evals.assoc_train``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

# A tiny synthetic library: each workflow's own text shares no word with how its users ask for it below.
WORKFLOWS = {
    "x__SearchHotel": ("Search for a hotel", [("city", "City of the hotel")], "lodging"),
    "x__FindFlight": ("Find a flight between two airports", [("origin", "Departure airport")], "travel"),
    "x__ReserveTable": ("Reserve a table at a restaurant", [("party", "Number of diners")], "food"),
    "x__PlaySong": ("Play a song on a speaker", [("artist", "Performer of the song")], "music"),
}
ASKS = {
    "x__SearchHotel": ["somewhere to stay tonight", "a place to sleep near downtown", "need lodging to stay two nights"],
    "x__FindFlight": ["i must fly to denver", "get me a plane ticket to boston", "fly out early on a plane"],
    "x__ReserveTable": ["dinner for four tonight", "somewhere to eat dinner", "we want to eat lunch outside"],
    "x__PlaySong": ["put on some music", "i wanna hear some tunes", "music by my favourite band"],
}


def _library():
    wfs = {n: SimpleNamespace(name=n, description=d, role=n, domain=dom, apis=[],
                              slots=[SimpleNamespace(name=s, description=t, enum=None) for s, t in slots])
           for n, (d, slots, dom) in WORKFLOWS.items()}
    return SimpleNamespace(workflows=wfs)


def _examples(library):
    from dialogue.understanding.assoc import turn_words, workflow_words

    libs = {"x": {n: (workflow_words(wf), f"x:{wf.role}", wf.domain) for n, wf in library.workflows.items()}}
    exs = [("x", turn_words(text), gold) for gold, texts in ASKS.items() for text in texts for _ in range(5)]
    return exs, libs


def test_a_fitted_association_ranks_the_associated_workflow_first():
    from dialogue.understanding.assoc import ASSOC, candidate_features
    from evals.assoc_train import fit_assoc

    library = _library()
    model = fit_assoc(*_examples(library))
    names = list(WORKFLOWS)
    for text, gold in [("any place to stay near the station?", "x__SearchHotel"),
                       ("i need to fly tomorrow", "x__FindFlight"),
                       ("where can we eat dinner", "x__ReserveTable"),
                       ("some music please", "x__PlaySong")]:
        feats = dict(zip(names, candidate_features(model, text, names, library)))
        assert max(names, key=lambda n: feats[n]["assoc_z"]) == gold, text
        assert feats[gold]["assoc_gap"] > 0 > max(f["assoc_gap"] for n, f in feats.items() if n != gold)
        assert set(feats[gold]) == set(ASSOC)


def test_unknown_words_give_zero():
    from dialogue.understanding.assoc import candidate_features, turn_words, workflow_words
    from evals.assoc_train import fit_assoc

    library = _library()
    model = fit_assoc(*_examples(library))
    names = list(WORKFLOWS)
    assert all(model.score(turn_words("zorblax quuxification"), workflow_words(wf)) == 0.0
               for wf in library.workflows.values())
    assert candidate_features(model, "zorblax quuxification", names, library) == \
        [{"assoc_z": 0.0, "assoc_gap": 0.0}] * len(names)
    assert candidate_features(None, "somewhere to stay", names, library)[0] == {"assoc_z": 0.0, "assoc_gap": 0.0}


def test_a_service_left_out_of_the_fit_is_never_seen():
    """Cross-fitting: the model fitted without a service neither learns from its users' words nor from its
    workflow's words, so a turn only that service's users say scores 0 against every workflow."""
    from dialogue.understanding.assoc import turn_words, workflow_words
    from evals.assoc_train import fit_assoc, service_folds

    library = _library()
    exs, libs = _examples(library)
    model = fit_assoc(exs, libs, leave_out=frozenset({"x:x__PlaySong"}))
    said = turn_words("tunes")
    assert all(model.score(said, workflow_words(wf)) == 0.0 for wf in library.workflows.values())
    assert fit_assoc(exs, libs).score(said, workflow_words(library.workflows["x__PlaySong"])) > 0
    folds = service_folds([f"x:{n}" for n in WORKFLOWS] * 2, 3)
    assert sorted(folds) == sorted(f"x:{n}" for n in WORKFLOWS) and set(folds.values()) == {0, 1, 2}


def test_the_model_file_validates(tmp_path):
    from dialogue.understanding.assoc import AssocModel, load_assoc
    from dialogue.understanding.model_files import ModelFileError
    from evals.assoc_train import fit_assoc

    model = fit_assoc(*_examples(_library()))
    path = tmp_path / "assoc_model.json"
    path.write_text(model.model_dump_json(), encoding="utf-8")
    loaded = load_assoc(str(path))
    assert loaded == model and loaded.weights and all(isinstance(k, int) for k in loaded.weights)
    assert load_assoc(str(tmp_path / "absent.json")) is None
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"weights": {"pair": "strong"}}), encoding="utf-8")
    with pytest.raises(ModelFileError, match=r"bad\.json: field 'weights"):
        load_assoc(str(bad))
    assert AssocModel().score(("stay",), ("hotel",)) == 0.0


def test_the_pick_model_reads_the_association_only_when_fitted_with_it(tmp_path):
    """``Ranker.scores`` fills ``ASSOC`` from the association file the pick section names (rows from
    ``ranker.features`` leave them at 0), so a pick fitted on them orders a search by the association."""
    import random

    from dialogue.understanding.ranker import FEATURES, ROW_FEATURES, Ranker, evidence
    from evals.assoc_train import fit_assoc
    from evals.switch_train import fit_pick

    library = _library()
    path = tmp_path / "assoc_model.json"
    path.write_text(fit_assoc(*_examples(library)).model_dump_json(), encoding="utf-8")
    rng = random.Random(0)
    X, y, g = [], [], []
    for t in range(200):  # the gold is the candidate the association favours most
        gold = rng.randrange(4)
        for c in range(4):
            f = dict.fromkeys(ROW_FEATURES, 0.0)
            f["assoc_z"] = rng.random() + (1.5 if c == gold else 0.0)
            f["lex_norm"] = rng.random()
            X.append([f[k] for k in ROW_FEATURES])
            y.append(int(c == gold))
            g.append(t)
    pick = {**fit_pick(X, y, g), "blend": 1.0, "assoc": str(path)}
    ranker = Ranker(tuple(0.0 for _ in FEATURES), 0.0, meta={"ranker": {"pick": pick}}).picker()
    assert ranker.assoc == str(path)
    names = list(WORKFLOWS)
    ev = evidence("somewhere to stay tonight", "", [(n, 1.0) for n in reversed(names)])
    assert ranker.scores(ev, library, None, [])[0][0] == "x__SearchHotel"
    ev = evidence("i must fly out", "", [(n, 1.0) for n in names])
    assert ranker.scores(ev, library, None, [])[0][0] == "x__FindFlight"


def test_the_relative_features_divide_by_at_least_the_floor():
    """A turn whose few known words leave the candidates near-tied is not blown apart into large gaps: the sd is
    taken as at least the model's floor (a high quantile of the train turns' spread), a wider spread is kept."""
    from dialogue.understanding.assoc import relative

    tied = [0.02, 0.0, 0.01]
    assert max(z for z, _ in relative(tied)) > 1.0
    assert max(abs(z) for z, _ in relative(tied, 2.0)) < 0.02
    assert max(g for _, g in relative(tied, 2.0)) == pytest.approx(0.005)
    wide = [6.0, 0.0, 3.0]  # sd 2.45, above the floor
    assert relative(wide, 2.0) == relative(wide)
    assert relative([1.0, 1.0], 2.0) == [(0.0, 0.0)] * 2


def test_candidate_models_get_the_association_beside_them(tmp_path):
    """The closed-loop choices (reviser, detector, configuration) score candidate models written to the cache:
    the association file the model's pick names must be copied beside them, else every candidate is scored with
    a pick that silently lacks it (session 13: the reviser was refitted on such a pick)."""
    from pathlib import Path

    import typer

    from dialogue.understanding.ranker import _load
    from evals.switch_train import candidates_dir

    home = tmp_path / "home"
    home.mkdir()
    model = home / "switch_model.json"
    model.write_text(json.dumps({"ranker": {"pick": {"assoc": "a.json"}}}), encoding="utf-8")
    (home / "a.json").write_text('{"marker": 1}', encoding="utf-8")
    tmp = candidates_dir(tmp_path / "cache", model)
    assert (tmp / "a.json").read_text(encoding="utf-8") == '{"marker": 1}'
    # a candidate written there resolves the association to the copy, as the ranker reads it
    cand = tmp / "cand.json"
    cand.write_text(model.read_text(encoding="utf-8"), encoding="utf-8")
    assert Path(_load(str(cand)).meta["_dir"]) / "a.json" == (tmp / "a.json").resolve()
    (home / "a.json").unlink()
    with pytest.raises(typer.BadParameter):
        candidates_dir(tmp_path / "cache2", model)
