"""The learned workflow ranker: which workflow a turn is about, given retrieval and the conversation.

One model serves both the pick on a SEARCH turn (the retriever node re-ranks its candidates with it)
and the re-verification of the active workflow on later turns (``dialogue.understanding.belief``).
Its features name no service, task or dataset, so the weights carry to unseen libraries:

- retrieval evidence: the configured retriever's and BM25's score (relative to the best), reciprocal
  rank, margin over the best other candidate;
- structure of the conversation: is it the active workflow, the active one's role/domain, a role
  used earlier, an unused role of a domain already used (near-duplicate services);
- what the turn says about the candidate: its intent verb group (find / transact / play) matches or
  clashes, the turn names its task, mentions its enum values or slot words, accepts an offer whose
  verb fits it; the agent's last message mentions its slot words;
- the candidate's place in its role (pick model only, ``ROLE_PLACE``): does it commit something (an
  irreversible API), does its role also hold workflows that do not, does the turn ask rather than request.

The weights are a logistic regression fitted on the training splits only (SGD train, STAR train) by
``flowdesk train switch``; ``switch_model.json`` beside this module holds them (weights, no data).
A second set over the same features, the verifier's (``Ranker.verify``), is fitted on the turns the
detector stays on: there the evidence is an answer and the agent's question, not a request, and the
slot words, enum values and offers weigh differently than at a search.
The pick model (``ranker.pick``: LightGBM lambdarank over ``PICK_FEATURES``, monotone in what the turn
says of a candidate, ``flowdesk train switch --pick-only``), blended with the linear logits by a share
chosen closed loop on train dialogues its rows never read (``--pick-blend-only``; the folds of the training rows
that leave services out read every search turn with the gold previous workflow active), orders a SEARCH turn's
candidates instead
(``Ranker.picker``; the bundled model has one).  It reads retrieval relative to the library (z-scores over the
candidate rankings), never a cosine or a cosine difference: trees cut on those fitted to SGD/STAR's libraries
misread a small desk's and FlowBench's.  The dense z-score divides by at least a floor fitted on train and
stored with the model (``Ranker.den_floor``): a small desk's few near-tied candidates would otherwise be
blown apart into large gaps (``reports/switch-train-pick``).  A pick model fitted with ``--pick-assoc`` also reads
a learned association between the turn's words and each candidate's own words (``dialogue.understanding.assoc``,
``ASSOC``, relative to the turn's candidates) from the association file its pick section names; the bundled one
does (session 13, ``assoc_model.json``: better on SGD/STAR dev closed loop, one demo conversation test lost).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from workflows.text import content_words, stemmed

from .assoc import ASSOC, candidate_features, load_assoc
from .features import (OFFER_CLAUSE, QUESTION, REQUEST, _WORD, _mentions, _slot_values, _spread, _z,
                       lexical_features, name_words, names_task, verb_groups)

MODEL_PATH = Path(__file__).with_name("switch_model.json")
DEPTH = 10  # candidates taken from each ranking

FEATURES = (
    "ret_norm", "ret_rr", "ret_top", "ret_margin", "lex_norm", "lex_rr", "lex_top", "lex_margin",
    "den_raw", "den_rr", "den_top", "den_margin",
    "is_active", "same_role", "same_domain", "seen_role", "seen_workflow", "unseen_sibling",
    "verb_match", "verb_clash", "names_task", "enum_hit", "slot_hit", "offer_fit", "agent_slot_hit",
    # graded overlap (used by the gradient-boosted pick model; the linear weights leave them at 0)
    "enum_count", "slot_share", "name_share", "agent_slot_share",
)
# Library-relative retrieval evidence, for the pick model only: a cosine's scale depends on the library
# (a small desk's or FlowBench's best match scores lower than an SGD service's), so trees cut on a raw
# cosine or on a cosine difference do not carry to another library; z-scores over the candidate rankings do.
RELATIVE = ("den_z", "lex_z")
# Pick-model evidence of what the turn says of a candidate's own text: the share of the turn's content words its
# description and task name hold (``desc_share``), and with its slots' names and descriptions (``vocab_share``);
# it separates near-duplicate tasks of one domain (search vs reserve) that a whole-workflow embedding blurs.
OWN_WORDS = ("desc_share", "vocab_share")
# Pick-model evidence of a candidate's place in its role: does it commit something (an irreversible API — a
# booking, a purchase, a transfer), does its role also hold workflows that do not (a search or a check that
# comes before a commitment), and does the turn ask for information rather than request an action.  A request
# that enters a role rarely opens with the commitment: on SGD train, four in five first requests into a role
# holding both kinds go to the one that commits nothing (nine in ten of those asked as a question), while
# the retrieval and word evidence of "I need a rental car" or "how much is in my savings?" barely tells the
# search from the reservation, the balance from the transfer.  The trees learn how far that prior goes.
ROLE_PLACE = ("commits", "role_mixed", "turn_asks")
# The columns of a training row (``evals.switch_train.training_rows``): the features, and the spread of the
# turn's dense scores, from which the pick model's sd floor is fitted (``Ranker.den_floor``).
# The learned word association's score relative to the turn's candidates (``dialogue.understanding.assoc``):
# ``features`` leaves them at 0, ``Ranker.scores`` fills them for a pick model that reads them (fitted with
# ``--pick-assoc``, the rows' feature carried in as ``evals.assoc_train.assoc_for_pick`` does).
ROW_FEATURES = FEATURES + RELATIVE + ("den_sd",) + OWN_WORDS + ASSOC + ROLE_PLACE
# The pick model's columns: every feature but the cosine and its margin, plus the relative ones (the association's
# only in a pick fitted with it: ``evals.switch_train.fit_pick`` leaves out columns the rows never fill).
PICK_FEATURES = (tuple(k for k in FEATURES if k not in ("den_raw", "den_margin")) + RELATIVE + OWN_WORDS + ASSOC
                 + ROLE_PLACE)


@dataclass(frozen=True)
class Evidence:
    """What one turn offers for ranking workflows."""

    text: str  # the user's turn
    agent: str = ""  # the agent's message before it
    retrieval: tuple[tuple[str, float], ...] = ()  # the configured retriever's ranking, best first
    lexical: tuple[tuple[str, float], ...] = ()  # BM25's ranking, best first
    dense: tuple[tuple[str, float], ...] = ()  # the dense retriever's ranking (cosine), best first; () = unknown
    offer: str = ""  # the offer the turn accepts ("" when none)


def evidence(text: str, agent: str, retrieval: Sequence[tuple[str, float]],
             lexical: Sequence[tuple[str, float]] | None = None,
             dense: Sequence[tuple[str, float]] = ()) -> Evidence:
    feats = lexical_features(text, agent)
    offer = ""
    if feats["accepts_offer"] and feats.get("offer_text"):
        m = OFFER_CLAUSE.search(str(feats["offer_text"]))
        offer = m.group(1) if m else str(feats["offer_text"])
    lexical = retrieval if lexical is None else lexical
    return Evidence(text, agent or "", tuple(map(tuple, retrieval[:DEPTH])), tuple(map(tuple, lexical[:DEPTH])),
                    tuple(map(tuple, dense[:DEPTH])), offer)


def _rank_info(ranking: Sequence[tuple[str, float]], name: str) -> tuple[float, float, float, float]:
    """(score / top, 1 / (1 + rank), is top, margin over the best other) of ``name`` in a ranking."""
    if not ranking or ranking[0][1] <= 0:
        return 0.0, 0.0, 0.0, 0.0
    top = ranking[0][1]
    for i, (n, s) in enumerate(ranking):
        if n == name:
            other = next((s2 for n2, s2 in ranking if n2 != name), 0.0)
            return s / top, 1.0 / (1 + i), float(i == 0), (s - other) / top
    return 0.0, 0.0, 0.0, -1.0


def _slot_words(wf) -> set[str]:
    return {w for s in wf.slots for w in re.findall(r"[a-z]+", re.sub(r"(?<=[a-z])(?=[A-Z])", " ",
                                                                       s.name).lower().replace("_", " "))
            if len(w) > 2 and w not in ("new", "the", "type", "name", "number")}


# A description's negated clause says what the workflow is *not* for ("cancel an order that has not shipped
# yet"): its words are left out of the workflow's own words, or they would speak for it.
NEGATED = re.compile(r"\b(?:not|no|never|nothing|without)\b[^.;,:!?]*|\w+n't\b[^.;,:!?]*", re.I)


@lru_cache(maxsize=4096)
def _own_words(description: str, name: str, slots: tuple[tuple[str, str], ...]) -> tuple[frozenset, frozenset]:
    """(stemmed content words of a workflow's description and task name, the same with its slots' names and
    descriptions)."""
    desc = stemmed(content_words(" ".join([NEGATED.sub(" ", description), *name_words(name)])))
    words = set(desc)
    for slot, text in slots:
        slot_words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", slot).replace("_", " ")
        words |= stemmed(content_words(f"{slot_words} {NEGATED.sub(' ', text)}"))
    return frozenset(desc), frozenset(words)


def features(name: str, ev: Evidence, library, active: str | None, seen: Sequence[str],
             den_floor: float = 0.0) -> dict[str, float]:
    """The features of one candidate workflow for one turn (``ROW_FEATURES``); ``den_floor``: the least sd
    ``den_z`` divides by (``Ranker.den_floor``)."""
    wfs = library.workflows
    wf = wfs.get(name)
    act = wfs.get(active) if active else None
    used = [wfs[n] for n in seen if n in wfs] + ([act] if act is not None else [])
    f: dict[str, float] = {}
    f["ret_norm"], f["ret_rr"], f["ret_top"], f["ret_margin"] = _rank_info(ev.retrieval, name)
    f["lex_norm"], f["lex_rr"], f["lex_top"], f["lex_margin"] = _rank_info(ev.lexical, name)
    if ev.dense:  # cosine is absolute: the raw value, not relative to the best
        top = ev.dense[0][1]
        raw = next((s for n, s in ev.dense if n == name), None)
        _, f["den_rr"], f["den_top"], margin = _rank_info(ev.dense, name)
        f["den_raw"] = float(raw) if raw is not None else float(ev.dense[-1][1])
        other = next((s for n, s in ev.dense if n != name), top)
        f["den_margin"] = (f["den_raw"] - other) if raw is not None else -1.0
        spread = _spread(ev.dense)
        f["den_z"] = _z(spread, f["den_raw"], den_floor)
        f["den_sd"] = spread[1]
    if ev.lexical:  # a candidate outside BM25's list scores as its last
        f["lex_z"] = _z(_spread(ev.lexical), next((s for n, s in ev.lexical if n == name), ev.lexical[-1][1]))
    f["is_active"] = float(name == active)
    if wf is None:
        return {k: f.get(k, 0.0) for k in ROW_FEATURES}
    roles = {w.role for w in used}
    f["same_role"] = float(act is not None and wf.role == act.role)
    f["same_domain"] = float(act is not None and wf.domain == act.domain)
    f["seen_role"] = float(wf.role in roles)
    f["seen_workflow"] = float(name in seen)
    f["unseen_sibling"] = float(wf.role not in roles and wf.domain in {w.domain for w in used})
    low = ev.text.lower()
    tokens = set(_WORD.findall(low))
    verbs = verb_groups(name_words(name))
    said = verb_groups(tokens)
    f["verb_match"] = float(bool(said & verbs))
    f["verb_clash"] = float(bool(said) and bool(verbs) and not said & verbs)
    f["names_task"] = float(names_task(ev.text, name))
    enums = sum(1 for v in set(_slot_values(wf)) if len(v) > 3 and v not in ("true", "false")
                and re.search(rf"\b{re.escape(v)}\b", low))
    f["enum_hit"] = float(enums > 0)
    f["enum_count"] = math.log1p(enums)
    words = _slot_words(wf)
    hits = sum(1 for w in words if _mentions(w, tokens))
    f["slot_hit"] = float(hits > 0)
    f["slot_share"] = hits / len(words) if words else 0.0
    task = name_words(name)
    f["name_share"] = sum(1 for w in task if _mentions(w, tokens)) / len(task) if task else 0.0
    offer_verbs = verb_groups(_WORD.findall(ev.offer.lower())) if ev.offer else set()
    f["offer_fit"] = float(bool(offer_verbs & verbs)) - float(bool(offer_verbs) and not offer_verbs & verbs)
    agent_tokens = content_words(ev.agent) if ev.agent else set()
    agent_hits = sum(1 for w in words if _mentions(w, agent_tokens)) if agent_tokens else 0
    f["agent_slot_hit"] = float(agent_hits > 0)
    f["agent_slot_share"] = agent_hits / len(words) if words else 0.0
    f["commits"] = float(_commits(wf))
    f["role_mixed"] = float(len({_commits(w) for w in wfs.values() if w.role == wf.role}) > 1)
    f["turn_asks"] = float(bool(QUESTION.search(ev.text)) and not REQUEST.search(ev.text))
    said_words = stemmed(content_words(ev.text))
    if said_words:
        desc, vocab = _own_words(wf.description, name, tuple((s.name, s.description) for s in wf.slots))
        f["desc_share"] = len(said_words & desc) / len(said_words)
        f["vocab_share"] = len(said_words & vocab) / len(said_words)
    return {k: f.get(k, 0.0) for k in ROW_FEATURES}


def _commits(wf) -> bool:
    """Does the workflow commit something (an irreversible API)?"""
    return any(api.irreversible for api in wf.apis)


def candidates(ev: Evidence, extra: Sequence[str] = ()) -> list[str]:
    """The workflows worth scoring: both rankings' top ``DEPTH`` and ``extra`` (active, alternatives)."""
    names = ([n for n, _ in ev.retrieval[:DEPTH]] + [n for n, _ in ev.lexical[:DEPTH]]
             + [n for n, _ in ev.dense[:DEPTH]] + list(extra))
    return [n for n in dict.fromkeys(names) if n]


@dataclass(frozen=True)
class Ranker:
    """A logistic model over ``FEATURES``; ``revise_margin`` and ``decay`` drive the belief."""

    weights: tuple[float, ...]
    bias: float
    revise_margin: float = 3.0
    decay: float = 1.0
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # The re-verification weights (``dialogue.understanding.belief``): fitted on the turns the detector
    # stays on, where the evidence is the user's answer and the agent's question, not a request.
    verify: tuple[float, ...] = ()
    # The pick model (LightGBM lambdarank scores over ``FEATURES``; '' = the linear weights): the retriever's
    # order at a SEARCH turn (``picker``).  The belief's re-verification and the reviser keep the linear scores.
    booster: str = field(default="", repr=False)
    # The booster's share of a pick's score, (1 - blend) * linear logit + blend * booster score: chosen closed
    # loop on held-out train dialogues (``evals.switch_train.choose_blend``); the trees alone keep a small desk's
    # active workflow against a digression the linear half's wider retrieval evidence hears (docs/EXPERIMENTS.md).
    blend: float = 1.0
    # The pick model's floor on the sd of the turn's dense scores (``den_z``), fitted on train and stored with
    # it (``evals.switch_train.den_sd_floor``): a small desk's few near-tied candidates spread less than nearly
    # every train turn's, and a z-score over them would blow tiny cosine differences into large gaps.
    den_floor: float = 0.0
    # The association model the pick model reads (``ASSOC``; the file its pick section names, beside the model
    # file; '' = none).
    assoc: str = ""

    def logit(self, f: dict[str, float]) -> float:
        return self.bias + sum(w * f.get(k, 0.0) for k, w in zip(FEATURES, self.weights))

    def picker(self) -> "Ranker":
        """The ranker that orders the candidates of a SEARCH turn (the boosted pick model when fitted)."""
        pick = (self.meta.get("ranker") or {}).get("pick") or {}
        if not pick.get("booster") or self.booster:
            return self
        files = beside(self.meta, Path(self.meta.get("_dir", MODEL_PATH.parent)))
        return replace(self, booster=pick["booster"], blend=float(pick.get("blend", 1.0)),
                       den_floor=float(pick.get("den_sd_floor", 0.0)), assoc=str(files[0]) if files else "")

    def verifier(self) -> "Ranker":
        """The ranker that re-verifies a pick on a STAY turn (itself when no verify weights were fitted)."""
        if not self.verify:
            return self
        return Ranker(self.verify, 0.0, self.revise_margin, self.decay, self.meta)

    def scores(self, ev: Evidence, library, active: str | None, seen: Sequence[str],
               extra: Sequence[str] = ()) -> list[tuple[str, float]]:
        """Candidates with their logits, best first."""
        names = [n for n in candidates(ev, extra) if n in library.workflows]
        rows = [features(n, ev, library, active, seen, self.den_floor) for n in names]
        if self.booster and rows:
            import numpy as np

            # one thread: a few dozen rows per turn, where LightGBM's thread pool costs more than it saves;
            # the columns are the booster's own (models fitted before ``PICK_FEATURES`` read ``FEATURES``)
            booster = _booster(self.booster)
            if set(ASSOC) & set(booster.feature_name()):
                for f, a in zip(rows, candidate_features(load_assoc(self.assoc), ev.text, names, library)):
                    f.update(a)
            raw = booster.predict(np.array([[f[k] for k in booster.feature_name()] for f in rows]),
                                  raw_score=True, num_threads=1)
            out = [(n, (1.0 - self.blend) * self.logit(f) + self.blend * float(s))
                   for n, s, f in zip(names, raw, rows)]
        else:
            out = [(n, self.logit(f)) for n, f in zip(names, rows)]
        return sorted(out, key=lambda x: -x[1])


@lru_cache(maxsize=4)
def _booster(model: str):
    import lightgbm as lgb

    return lgb.Booster(model_str=model)


def log_softmax(scores: Sequence[tuple[str, float]]) -> dict[str, float]:
    if not scores:
        return {}
    top = max(s for _, s in scores)
    z = top + math.log(sum(math.exp(s - top) for _, s in scores))
    return {n: s - z for n, s in scores}


def beside(meta: dict, folder: Path) -> list[Path]:
    """The files a switch model's contents ``meta`` name, which lie beside the model file in ``folder``
    wherever it is (its pick's word association): the one place that knows a model is more than one file."""
    pick = (meta.get("ranker") or {}).get("pick") or {}
    return [folder / pick["assoc"]] if pick.get("assoc") else []


def load_ranker(path: str | None = None) -> Ranker | None:
    """The model in ``path`` ('' / None: the bundled one); None when the file is absent (the agent then
    ranks by retrieval alone)."""
    return _load(str(Path(path) if path else MODEL_PATH))


@lru_cache(maxsize=8)
def _load(path: str) -> Ranker | None:
    p = Path(path)
    if not p.is_file():
        return None
    # the files a model names (its pick's association) lie beside it, wherever it is
    data = {**json.loads(p.read_text(encoding="utf-8")), "_dir": str(p.resolve().parent)}
    ranker = data.get("ranker") or {}
    weights = ranker.get("weights") or {}
    verify = ranker.get("verify") or {}
    return Ranker(tuple(float(weights.get(k, 0.0)) for k in FEATURES), float(ranker.get("bias", 0.0)),
                  float(ranker.get("revise_margin", 3.0)), float(ranker.get("decay", 1.0)), data,
                  tuple(float(verify.get(k, 0.0)) for k in FEATURES) if verify else ())
