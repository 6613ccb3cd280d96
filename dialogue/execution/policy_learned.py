"""The learned offline executor policy: a ranker, trained on conversation logs, that re-ranks the
actions the workflow allows now.  This module owns the candidate generator, the features, the model
file format and loading, and the one hook the executor node calls (``LearnedPolicy.choose``, after ``policy_offline.decide``).

Candidates (``candidates``): the rules' own proposal (the interpreter plus the executor's reply
rules), the interpreter's procedure-next node, every ANSWER of the workflow whose preconditions ran, every API call site of
the procedure whose preconditions ran (one per fixed-argument variant, ``# query_check: RequestType =
Check``) that the ranker may call on its own (``ranker_may_call``: before any result this turn, no
irreversible API, nothing the rules are still collecting for later, no repeat of a call that
succeeded), a question for the slots an API still misses (unless the rules already ask them), and the
out-of-workflow reply.

Features are relative to the workflow and name no task or service, so a model carries to workflows it
never saw: is this the rules' choice (the procedure's next node unless a reply rule spoke); how far
the node stands after the last executed one in the procedure; did it run before and how long ago;
does it ask for a slot still missing, one the user just gave, one pending; did the last API call just
return, with something or nothing; turns since the last question; how many of an API's parameters are filled and did any change
since its last call; the words of the node's name that several workflows share (``ask``, ``inform``,
``nothing_found``, ``bye``; words of the workflow's own name are dropped) and those of the previous
node ("what agents do after this kind of node"); the overlap of the user's last message with the
node's own template; and, when the model file holds one, a text classifier's opinion of the candidate's action
(``opinion``: its probability after the task, the history and the user's words; unknown for an action it never
saw as a label, so a new workflow's tasks run on the features above).  The model is a LightGBM ranker
(``evals/train_executor.py`` fits it; ``flowdesk train executor``).

Guarantees: the ranker only orders candidates.  Its choice skips proposals the post-controller already
rejected this turn and those the controllers' proposal checks (``PROPOSAL_CHECKS``) turn down, and the
graph's ``post_controller`` still checks every proposal before a tool or the user sees it.  The model's
``Gate`` (calibrated on train) says when its choice may replace the rules' at all.  The default
(``Context.executor_policy = "auto"``) uses the bundled model when its file is present;
``interpreter`` lets the interpreter decide alone.

State: the active frame (``dialogue.frames.Frame``: executed, slots, results, calls, asked) and the
turn's reading (``yesno``, ``info_missing``) — the same inputs as ``policy_offline.decide``.

Model file (JSON, ``PolicyFile``): format version, the feature names (base features then token
features), training provenance (counts only, never dialogue text), the LightGBM model string and the
text classifier (hashed buckets and weights, never a word).
"""

from __future__ import annotations

import math
import re
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable

from langchain_core.messages import BaseMessage
from pydantic import BaseModel, Field, ValidationError

from workflows.pdl import TEMPLATE_VAR, Workflow
from workflows.semantics import values_view
from workflows.text import content_words, last_user_text, message_text, stemmed

from ..experience import provider_of, unmet
from ..frames import Frame, scope_of
from .interpreter import Interpreter, NextAction, fixed_args
from .opinion import OPINION_FEATURES, OpinionModel, action_key, inputs as opinion_inputs
from .policy_offline import CLOSING_USER, GOODBYE, GREETING_ONLY, called_since_user, same
from .replies import OOW, new_call_id, proposal_for, question_for

FORMAT_VERSION = 1
DEFAULT_MODEL = Path(__file__).resolve().parent / "models" / "executor_policy.json"
KINDS = ("api", "answer", "request", "oow")
TOKEN_PREFIXES = ("tok=", "prev=", "gen=")

# Base features, in order (token features follow in the model file's list).
BASE_FEATURES = [
    # the candidate
    *(f"kind_{k}" for k in KINDS), "is_rules", "rules_kind_same",
    "n_run", "last_is_this", "prev2_is_this", "since_this",
    "has_question", "n_vars", "vars_filled", "vars_from_results", "template_words", "precond_ok", "n_precond",
    "n_targets", "n_missing_targets", "target_just_given", "target_pending", "targets_filled",
    "line_rel", "dist_last", "after_last", "next_rank", "in_procedure",
    "params_filled", "req_missing", "api_calls", "variant_calls", "new_info", "args_same_as_last",
    "variant_index", "variant_status", "last_call_this_variant", "last_call_other_variant_ok",
    "sim_user_template", "sim_user_name", "sim_prev_template", "prev_words_shared",
    # the turn (the same for every candidate: the ranker crosses them with the candidate's; from here on,
    # ``TURN_AT``, a matrix's columns are ``TurnFeatures.turn`` broadcast over its rows)
    "n_exec", "n_user", "since_user", "last_msg_tool", "api_just_ran", "last_api_ok", "n_api_calls",
    "since_api", "since_ask", "user_question", "user_yes", "user_no", "user_info_missing", "user_closing",
    "user_goodbye", "user_greeting", "user_words", "slots_filled", "n_candidates", "n_results",
]
TURN_AT = BASE_FEATURES.index("n_exec")  # the first of the turn's features

# What the user's message (and the node before) says about the kind of action due next: a logistic
# model over the message's words predicts which shared name words (``ask``, ``bye``, ``__api__``...) the
# wizard's next action has; a candidate scores by the probabilities of its own words.
INTENT_FEATURES = ["intent_max", "intent_mean", "intent_min", "intent_gen", "intent_n"]


class IntentModel(BaseModel):
    """One-vs-rest logistic regressions: binary input features -> shared name words of the next action."""

    inputs: list[str] = Field(description="input features: w=<word> of the user's message, prev=<token>, ctx=...")
    targets: list[str] = Field(description="token features of candidates (tok=..., gen=...)")
    coef: list[list[float]] = Field(description="targets x inputs weights")
    bias: list[float]

    def vector(self, inputs: list[str]) -> list[float]:
        """The targets' probabilities, in ``targets`` order."""
        import numpy as np

        tables = self.__dict__.get("_tables")
        if tables is None:  # inputs x targets weights (C-ordered: an input's row is contiguous, so the gather
            # below reads a few cache lines, not one per weight), the bias, the inputs' rows (built once)
            tables = self.__dict__["_tables"] = (np.ascontiguousarray(np.asarray(self.coef, dtype=np.float32).T),
                                                 np.asarray(self.bias, dtype=np.float32),
                                                 {n: i for i, n in enumerate(self.inputs)})
        W, b, col = tables
        idx = [j for x in dict.fromkeys(inputs) if (j := col.get(x)) is not None]
        # (``np.add.reduce``: what ``ndarray.sum`` calls, without its Python wrapper; the same float32 sums; the
        # rows by ``take`` of an index array, not ``W[list]``: the same rows, without fancy indexing's walk over
        # a Python list, a third cheaper on a turn's cold caches)
        z = b + np.add.reduce(W.take(np.array(idx, dtype=np.intp), axis=0), axis=0) if idx else b.copy()
        # 1 / (1 + exp(-z)) in place: the same float32 operations, without an array per step
        np.negative(z, out=z)
        np.exp(z, out=z)
        z += 1.0
        return np.divide(1.0, z, out=z).tolist()


class Gate(BaseModel):
    """When the ranker's choice replaces the rules' proposal, calibrated on the training logs by
    ``flowdesk train executor`` (``evals/train_executor.py``: ``calibrate``).  The ranker predicts what a
    logged agent did next; the rules follow the procedure, which is what completes a user's goal on a
    library the ranker never saw.  So it overrides them only where it has earned it: on a workflow whose
    node names it knows (``familiarity``: the share of the workflow's ANSWER nodes with a name word among the
    model's token features, at least the lowest a training task reaches when left out of the vocabulary),
    and only by a score margin above which, on cross-fitted training turns, the procedure's step was
    rarely what the logged agent did (``rules_right``, at most ``evals.train_executor.GATE_RULES_RIGHT``).
    A gated ranker also leaves two steps to the procedure (``_leaves_collection``): while the rules
    collect values nothing but another way of asking for one of them, no question the workflow already
    asked.  Why: whole sessions with simulated users
    dropped with the ungated ranker (its early calls and re-ordered questions lost FlowBench and STAR
    goals) and do not with the gate (README, "Next action on STAR").  ``order`` (off unless the file sets it; on
    in the bundled model and in files trained since session 17, ``evals.train_executor.GATE_ORDER``) lets the
    ranker choose which of the pending call's values to ask first (``pending_collection``): +0.013 weighted F1
    on STAR dev; STAR sessions 0.472 -> 0.464 in session 16, held (0.473 -> 0.475) once the slot reader keeps
    a name the user volunteers beside the asked values (``slots.volunteered_name``; docs/EXPERIMENTS.md)."""

    min_familiarity: float = Field(ge=0, le=1, description="abstain on a workflow less familiar than this")
    min_margin: float = Field(description="score(best) - score(rules' proposal) needed to override")
    precision: float = Field(ge=0, le=1, description="cross-fitted train: share of kept overrides that were right")
    rules_right: float = Field(ge=0, le=1, description="cross-fitted train: share where the rules' step was")
    overrides: float = Field(ge=0, le=1, description="cross-fitted train: share of turns overridden")
    order: bool = Field(default=False, description=(
        "while the rules ask a value, the ranker may ask instead any value the procedure still collects for the "
        "same pending call (``pending_collection``); off: only another way of asking the rules' own"))


class PolicyFile(BaseModel):
    """The model file written by ``flowdesk train executor``."""

    format: int = Field(description="FORMAT_VERSION of the writer")
    features: list[str] = Field(min_length=1, description="columns: BASE_FEATURES, INTENT_FEATURES, "
                                "OPINION_FEATURES (with ``opinion``), token features")
    booster: str = Field(min_length=1, description="LightGBM model (Booster.model_to_string)")
    intent: IntentModel | None = Field(default=None, description="the message -> next action words model")
    trained_on: dict[str, Any] = Field(default_factory=dict, description="provenance: dataset, split, counts")
    gate: Gate | None = Field(default=None, description="when to override the rules (None: the best-ranked wins)")
    opinion: OpinionModel | None = Field(default=None, description="the text classifier read as evidence "
                                         "(``dialogue.execution.opinion``; None: no OPINION_FEATURES)")


class PolicyError(ValueError):
    """A model file that cannot be used (names the file and the field)."""


# --- per-workflow static view (cached) ---------------------------------------------------------------

@lru_cache(maxsize=4096)
def _cwords(text: str) -> frozenset[str]:
    """Content words with a 4-letter stem (so "rain" meets "raining"), as the model was trained with
    (cached: a user's message is read again at each of the agent's actions that follow it)."""
    return frozenset(stemmed(content_words(text)))


@lru_cache(maxsize=4096)
def _said(message: str) -> tuple[float, ...]:
    """The turn features read from the user's last message alone: a question mark, closing, goodbye,
    greeting only, its length in words (cached like ``_cwords``)."""
    return (float("?" in message), float(bool(CLOSING_USER.search(message))), float(bool(GOODBYE.search(message))),
            float(bool(GREETING_ONLY.match(message))) if message else 0.0, min(len(message.split()), 60))


@lru_cache(maxsize=4096)
def _said_words(low: str) -> tuple[str, ...]:
    """The intent model's word inputs of a (lower-cased) message (cached like ``_cwords``)."""
    return tuple("w=" + w for w in _INTENT_WORD.findall(low))


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()) if w]


@dataclass
class _Site:
    """An API call site of the procedure (its fixed arguments make a variant)."""

    name: str
    args: list[str]
    fixed: dict[str, str]
    line: int
    index: int  # order among the sites of the same API


@dataclass
class _View:
    n_lines: int
    lines: dict[str, int]  # node -> first line it is called on
    sorted_lines: list[int]  # the lines nodes are called on, ascending (each line's position: ``line_pos``)
    sites: list[_Site]
    tokens: dict[str, list[str]]  # answer -> name words shared across workflows (own-name words dropped)
    targets: dict[str, list[str]]  # answer -> slots it collects
    words: dict[str, set[str]]  # answer -> content words of its template
    name_words: dict[str, set[str]]  # answer -> content words of its name and targets' descriptions
    returns: set[str]
    apis: frozenset = frozenset()  # the workflow's API names
    asks: frozenset = frozenset()  # nodes that ask the user for something (request_information included)
    statics: dict = field(default_factory=dict)  # (kind, node) -> _Static, filled on first use
    line_pos: dict = field(default_factory=dict)  # line -> its index in ``sorted_lines``
    target_sets: dict = field(default_factory=dict)  # answer -> frozenset of ``targets``
    params: dict = field(default_factory=dict)  # API -> frozenset of its parameter names
    api_of: dict = field(default_factory=dict)  # API name -> the workflow's Api (``Workflow.api``)
    slot_names: tuple = ()  # the workflow's slots, in order
    answer_steps: tuple = ()  # per ANSWER, in order: (name, its ``seen`` key, its preconditions, its targets)
    keys: tuple = ()  # every action's ``opinion.action_key`` (ANSWERs, API sites, the question, the OOW reply)
    collectors: frozenset = frozenset()  # the ANSWERs with targets
    apart: dict = field(default_factory=dict)  # values collected -> the ANSWERs asking for none of them
    pending: dict = field(default_factory=dict)  # values asked -> what the procedure collects for their call

    def __post_init__(self) -> None:
        self.line_pos = {ln: i for i, ln in enumerate(self.sorted_lines)}
        self.target_sets = {a: frozenset(t) for a, t in self.targets.items()}
        self.collectors = frozenset(a for a, t in self.target_sets.items() if t)

    def static(self, wf: Workflow, kind: str, node: str) -> "_Static":
        """What a candidate's features read from the workflow alone (the same in every turn)."""
        st = self.statics.get((kind, node))
        if st is None:
            ans = wf.answer(node) if kind == "answer" else None
            api = wf.api(node) if kind == "api" else None
            template = ans.template if ans else ""
            tvars = list(ans.variables) if ans else []
            st = self.statics[(kind, node)] = _Static(
                api=api, tvars=tvars, precond=list(ans.precondition if ans else api.precondition if api else []),
                kind=[float(kind == k) for k in KINDS], line=self.lines.get(node, 0),
                words=self.words.get(node, set()), name_words=self.name_words.get(node, set()),
                precond_set=frozenset(ans.precondition if ans else api.precondition if api else ()),
                head=[float("?" in template), len(tvars)], template=[
                    float(any(v in self.returns for v in tvars)), min(len(template.split()), 60)],
                token_set=set(self.tokens.get(node) or ()),
                toks=(tuple(["tok=" + w for w in self.tokens.get(node, [])] + ["gen=" + node]) if kind == "answer"
                      else ("tok=__api__",) if kind == "api" else ("tok=__" + kind + "__",)))
            st.kind_t, st.n_precond, st.n_tvars = tuple(st.kind), len(st.precond), len(st.tvars)
            st.n_words, st.n_name_words, st.n_tokens = len(st.words), len(st.name_words), len(st.token_set)
            st.targets = self.targets.get(node, []) if kind == "answer" else []
            st.line_rel, st.in_procedure = st.line / self.n_lines, 1.0 if st.line > 0 else 0.0
        return st


@dataclass
class _Static:
    api: Any
    kind: list[float]  # one-hot over KINDS
    line: int  # the first line the node is called on (0: none; an API site has its own)
    words: set[str]  # content words of an answer's template (``_View.words``)
    name_words: set[str]  # ... of its name and targets (``_View.name_words``)
    tvars: list[str]
    precond: list[str]
    head: list[float]  # "?" in the template, number of its variables
    template: list[float]  # a variable an API returns, template length
    token_set: set[str]  # the node's shared name words (``_View.tokens``)
    toks: tuple[str, ...]  # token features (an API candidate adds its fixed values)
    precond_set: frozenset = frozenset()  # ``precond`` as a set
    # what ``features`` reads of the node on every turn, precomputed (the same values): the one-hot kind,
    # the number of preconditions, of the template's variables, of the content words, of the shared name words;
    # an ANSWER's targets (``_View.targets``) and, for a node without a site of its own, its line's
    # ``line_rel`` and ``in_procedure``
    kind_t: tuple = ()
    n_precond: int = 0
    n_tvars: int = 0
    n_words: int = 0
    n_name_words: int = 0
    n_tokens: int = 0
    targets: list = field(default_factory=list)
    line_rel: float = 0.0
    in_procedure: float = 0.0


_VIEWS: dict[tuple[str, str], _View] = {}


def view_of(wf: Workflow, interp: Interpreter) -> _View:
    key = (wf.name, wf.procedure)
    if key in _VIEWS:
        return _VIEWS[key]
    calls = interp.procedure.calls()
    lines: dict[str, int] = {}
    sites: list[_Site] = []
    seen: dict[str, int] = {}
    for c in calls:
        lines.setdefault(c.name, c.line)
        if c.kind == "API":
            fixed = fixed_args(c.comment)
            if not any(s.name == c.name and s.fixed == fixed for s in sites):
                sites.append(_Site(c.name, list(c.args), fixed, c.line, seen.get(c.name, 0)))
                seen[c.name] = seen.get(c.name, 0) + 1
    own = set(_words(wf.name)) | set(_words(wf.domain))
    targets, tokens, words, name_words = {}, {}, {}, {}
    for a in wf.answers:
        found = [t for c in calls if c.kind == "ANSWER" and c.name == a.name for t in c.targets]
        targets[a.name] = list(dict.fromkeys(found)) or interp.implied_targets(a.name)
        tokens[a.name] = [w for w in _words(a.name) if w not in own and not w.isdigit()]
        words[a.name] = _cwords(TEMPLATE_VAR.sub(" ", a.template or ""))
        descs = " ".join((wf.slot(t).description or t) if wf.slot(t) else t for t in targets[a.name])
        name_words[a.name] = _cwords(" ".join(tokens[a.name]) + " " + descs)
    returns = {r for api in wf.apis for r in api.returns}
    v = _View(max([c.line for c in calls] or [1]), lines, sorted({c.line for c in calls}), sites, tokens, targets,
              words, name_words, returns, frozenset(a.name for a in wf.apis),
              frozenset({a for a, t in targets.items() if t} | {"request_information"}),
              params={api.name: frozenset(api.param_names) for api in wf.apis},
              api_of={api.name: api for api in reversed(wf.apis)}, slot_names=tuple(s.name for s in wf.slots),
              answer_steps=tuple((a.name, ("answer", a.name), frozenset(a.precondition), tuple(targets[a.name]))
                                 for a in wf.answers),
              keys=tuple(dict.fromkeys([*(a.name for a in wf.answers), *(action_key("api", s.name, s.fixed) for s in sites),
                                        "request_information", OOW])))
    _VIEWS[key] = v
    return v


# --- candidates ----------------------------------------------------------------------------------------

@dataclass(slots=True)
class Candidate:
    """One action allowed now; ``build`` makes its proposal (only for the ones that get chosen)."""

    kind: str  # KINDS
    name: str  # ANSWER / API name (request_information, OOW for the generic ones)
    fixed: dict = field(default_factory=dict)  # an API variant's fixed arguments
    args: dict = field(default_factory=dict)  # an API call's arguments
    missing: list[str] = field(default_factory=list)  # required parameters / target slots not filled
    site: _Site | None = None
    proposal: dict | None = None  # set for the rules' own proposal
    is_rules: bool = False
    build: Callable[[], dict] | None = None
    for_api: str = ""  # a question's: the API whose missing values it asks (``choice`` checks its branch)

    def make(self) -> dict:
        if self.proposal is None:
            self.proposal = self.build() if self.build else {}
        return self.proposal

    @property
    def signature(self) -> tuple:
        if self.kind == "api":
            return ("api", self.name, tuple(sorted(self.fixed.items())))
        return (self.kind, self.name)


_NO_ARGS = MappingProxyType({})  # the fixed values and arguments of a reply candidate (read-only: shared)


def _filled(values: dict, name: str) -> bool:
    v = values.get(name)
    return v is not None and v != ""


def _values(frame: Frame | dict) -> dict:
    return values_view(frame.get("slots"), frame.get("results"))


def candidates(wf: Workflow, interp: Interpreter, frame: Frame | dict, rules: dict,
               messages: list[BaseMessage], values: dict | None = None) -> list[Candidate]:
    """The actions allowed now, the rules' proposal first (``values``: the frame's, when the caller has them)."""
    return _candidates(wf, interp, frame, rules, messages, values)[0]


def _candidates(wf: Workflow, interp: Interpreter, frame: Frame | dict, rules: dict, messages: list[BaseMessage],
                values: dict | None = None, skip_answers: frozenset[str] | set[str] = frozenset(),
                asked: set[str] | None = None) -> tuple[list[Candidate], int]:
    """``candidates``, without the ANSWER candidates named in ``skip_answers`` (a caller that would never
    choose them need not build them), and how many were skipped; ``asked``: the rules' ``asked_slots``, when
    the caller has them."""
    values = _values(frame) if values is None else values
    view = view_of(wf, interp)
    executed = set(frame.get("executed") or [])
    out: list[Candidate] = []
    seen: set[tuple] = set()

    def add(c: Candidate) -> None:
        if c.signature not in seen:
            seen.add(c.signature)
            out.append(c)

    rk = "api" if rules.get("kind") == "tool" else (
        "oow" if rules.get("name") == OOW else "request" if rules.get("name") == "request_information" else "answer")
    rfixed = {}
    if rk == "api":
        site = next((s for s in view.sites if s.name == rules.get("name")
                     and all(str((rules.get("args") or {}).get(k)) == v for k, v in s.fixed.items())), None)
        rfixed = site.fixed if site else {}
    add(Candidate(rk, rules.get("name") or "", fixed=rfixed, args=dict(rules.get("args") or {}) if rk == "api" else {},
                  proposal=rules, is_rules=True,
                  site=next((s for s in view.sites if s.name == rules.get("name") and s.fixed == rfixed), None)))
    # calls the ranker may make on its own (see ``ranker_may_call``); the rules' own call is always there
    open_calls = not called_since_user(messages)
    if asked is None:
        asked = set(asked_slots(rules, view, values))
    sites = [(s, api) for s in view.sites if (api := view.api_of.get(s.name)) is not None
             and all(p in executed for p in api.precondition)]
    for (s, api), (args, missing) in zip(sites, interp.calls_args(frame, [(s.name, s.args, s.fixed)
                                                                          for s, _ in sites], values)):
        if open_calls and ranker_may_call(api, args, asked, frame):
            add(Candidate("api", s.name, fixed=s.fixed, args=args, missing=missing, site=s,
                          build=lambda n=s.name, a=args: {"kind": "tool", "name": n, "args": a,
                                                          "call_id": new_call_id()}))
        slots = [m for m in missing if m in view.slot_names] or missing
        if missing and not set(slots) <= asked:  # the rules' own question (in the workflow's words) asks it
            add(Candidate("request", "request_information", missing=slots, for_api=s.name,
                          build=lambda sl=slots: {"kind": "reply", "name": "request_information",
                                                  "text": question_for(wf, sl), "args": {"slots": sl}}))
    skipped = 0
    for name, key, precondition, targets in view.answer_steps:  # (``add`` inlined: a dozen per turn)
        if key in seen or not precondition <= executed:
            continue  # the controllers' dependency check would turn it down (and it saves the features)
        seen.add(key)
        if name in skip_answers:
            skipped += 1
            continue
        miss = [t for t in targets if (v := values.get(t)) is None or v == ""]  # (``_filled`` inlined)
        out.append(Candidate("answer", name, _NO_ARGS, _NO_ARGS, miss,
                             build=lambda n=name, m=miss: proposal_for(wf, NextAction("answer", n, slots=m), values)))
    add(Candidate("oow", OOW, build=_oow_reply))
    return out, skipped


def _oow_reply() -> dict:
    return {"kind": "reply", "name": OOW,
            "text": "I'm sorry, I can't help with that here. Is there anything else I can help with?"}


def asked_slots(rules: dict, view: _View, values: dict) -> list[str]:
    """The slots the rules' proposal asks for: a question's, or the unfilled targets of an ANSWER that
    collects slots ([] for any other proposal)."""
    if rules.get("kind") != "reply":
        return []
    slots = list((rules.get("args") or {}).get("slots") or [])
    return slots or [t for t in view.targets.get(rules.get("name") or "", []) if not _filled(values, t)]


def ranker_may_call(api, args: dict, asked: set[str], frame: Frame | dict) -> bool:
    """Whether the ranker may call ``api`` with ``args`` instead of the rules' proposal (the turn has no
    tool result yet: a result that just arrived is answered as the procedure says).  Real agents query as
    soon as they have enough ("query early"), but a side effect happens only where the procedure puts it:
    never an irreversible API; never while the rules ask for something this call does not take (the
    procedure collects it first, e.g. a return's reason before its eligibility check); never a call
    that already succeeded with exactly these arguments (it would return the same result)."""
    if api.irreversible or not asked <= set(api.param_names):
        return False
    return not any(c.get("api") == api.name and c.get("status", "ok") == "ok" and (c.get("args") or {}) == args
                   for c in frame.get("calls") or [])


# --- features ------------------------------------------------------------------------------------------

def _sim_n(a: set[str], n_a: int, b: set[str]) -> float:
    """``_sim`` with ``n_a = len(a)`` given (``a`` is the same for every candidate of a turn)."""
    return len(a & b) / math.sqrt(n_a * len(b)) if n_a and b else 0.0


def _sim(a: set[str], b: set[str]) -> float:
    return _sim_n(a, len(a), b)


def _since(seq: list[str], pred: Callable[[str], bool]) -> int:
    for k, node in enumerate(reversed(seq)):
        if pred(node):
            return k
    return -1


def _messages_since_user(messages: list[BaseMessage]) -> tuple[int, str, str]:
    """(wizard messages since the user's last one, type of the last message, the wizard's last words)."""
    n, last_type, prev_text = 0, "", ""
    for m in reversed(messages or []):
        t = getattr(m, "type", "")
        last_type = last_type or t
        if t == "human":
            break
        n += 1
        if t == "ai" and not prev_text:
            prev_text = message_text(m)
    return n, last_type, prev_text


def _n_user(messages: list[BaseMessage]) -> int:
    """How many of the messages are the user's (``type`` "human"), read in one C-level pass."""
    try:
        return list(map(_TYPE, messages)).count("human")
    except AttributeError:  # (a message without a type: not the user's)
        return sum(1 for m in messages if getattr(m, "type", "") == "human")


_TYPE = attrgetter("type")
_INTENT_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")  # the intent model's words of a message
_NO_API = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0)  # the API features of a reply


@dataclass
class TurnFeatures:
    """A turn's candidates as features: the candidates' own base features (BASE_FEATURES up to
    ``TURN_AT``), the turn's (the rest of BASE_FEATURES, the same for every candidate: held once and
    broadcast into the matrix), token features per candidate, and the inputs of the intent model."""

    rows: list[list[float]]
    toks: list[tuple[str, ...]]
    intent: list[str]
    turn: list[float] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # each candidate's ``opinion.action_key``
    state: tuple = ()  # what the text classifier reads: (task, executed, a tool result just arrived, user text)
    workflow_keys: tuple = ()  # ``_View.keys``

    def row(self, i: int) -> list[float]:
        """Candidate ``i``'s base features (BASE_FEATURES order)."""
        return self.rows[i] + self.turn


def features(wf: Workflow, interp: Interpreter, frame: Frame | dict, reading: dict, messages: list[BaseMessage],
             cands: list[Candidate], n_candidates: int | None = None, values: dict | None = None) -> TurnFeatures:
    """The features of ``cands`` (the rules' proposal first); ``n_candidates``: how many actions the turn
    allows when ``cands`` are only those the caller will score (a feature of the turn)."""
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
    # the names with a value (``_filled``), once per turn: each row below reads them by membership
    filled = {k for k, v in values.items() if v is not None and v != ""}
    turn = [
        min(len(executed), 30), _n_user(messages), since_user,
        float(last_type == "tool"), float(last in is_api), last_ok, len(calls),
        _since(executed, lambda n: n in is_api), _since(executed, lambda n: n in asks),
        said[0], float(reading.get("yesno") is True), float(reading.get("yesno") is False),
        float(bool(reading.get("info_missing"))), *said[1:],
        (sum(map(filled.__contains__, wf_slots)) / len(wf_slots)) if wf_slots else 0.0,
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
    pending_set = set(pending)
    statics, n_lines, sqrt = view.statics, view.n_lines, math.sqrt
    # (the loop below runs for a dozen candidates on every scored turn: ``_filled`` and ``_sim_n`` inlined, the
    # same expressions; what depends on the node alone read from its ``_Static``; membership in ``filled`` for
    # ``_filled``; ``1.0 if x else 0.0`` for ``float(x)``: the same values with fewer calls.  The plain loop it
    # replaces is kept as the reference in ``tests/test_executor_cost.py``)
    for c in cands:
        node, kind = c.name, c.kind
        st = statics.get((kind, node)) or view.static(wf, kind, node)
        api, tvars, n_tvars = st.api, st.tvars, st.n_tvars
        targets = st.targets if kind == "answer" else list(c.missing) if kind == "request" else []
        site = c.site
        if site is None:
            line, line_rel, in_procedure = st.line, st.line_rel, st.in_procedure
        else:
            line = site.line
            line_rel, in_procedure = line / n_lines, 1.0 if line > 0 else 0.0
        if api is not None:
            params = [p for p in api.param_names if p not in c.fixed]
            filled_params = sum(1 for p in params if p in c.args)
            mine = [r for r in calls if r.get("api") == node]
            variant = [r for r in mine if all(str((r.get("args") or {}).get(k)) == v for k, v in c.fixed.items())]
            last_args = (mine[-1].get("args") or {}) if mine else {}
            new_info = sum(1 for p, v in c.args.items() if p not in c.fixed and str(last_args.get(p)) != str(v))
            api_f = [filled_params / len(params) if params else 1.0, len(c.missing), len(mine), len(variant), new_info,
                     float(bool(mine) and {k: str(v) for k, v in last_args.items()}
                           == {k: str(v) for k, v in c.args.items()}),
                     site.index if site else 0,
                     (1.0 if variant[-1].get("status", "ok") == "ok" else 0.0) if variant else -1.0,
                     float(bool(calls) and calls[-1] in variant),
                     float(bool(calls) and calls[-1] in mine and calls[-1] not in variant
                           and calls[-1].get("status", "ok") == "ok")]
        else:
            api_f = _NO_API
        if targets:
            missing_t = [t for t in targets if t not in filled]
            given = 0.0
            if len(missing_t) < len(targets):  # (a target the user has not given cannot be in the message)
                for t in targets:
                    if t in filled and str(values[t]).lower() in low:
                        given = 1.0
                        break
            pending_t = 0.0 if pending_set.isdisjoint(targets) else 1.0
            n_targets, n_missing, targets_filled = len(targets), len(missing_t), 0.0 if missing_t else 1.0
        else:
            n_targets = n_missing = 0
            given = pending_t = targets_filled = 0.0
        n_words, n_name_words, n_tokens = st.n_words, st.n_name_words, st.n_tokens
        rows.append([*st.kind_t,
            1.0 if c.is_rules else 0.0, 1.0 if rules_kind is not None and kind == rules_kind else 0.0,
            runs.get(node, 0), 1.0 if last == node else 0.0, 1.0 if before_last == node else 0.0,
            last_at.get(node, -1),
            *st.head, (sum(map(filled.__contains__, tvars)) / n_tvars) if n_tvars else 1.0,
            *st.template,
            1.0 if st.precond_set <= done else 0.0, st.n_precond,
            n_targets, n_missing, given, pending_t, targets_filled,
            line_rel, (line - last_line) / n_lines if line else 0.0, 1.0 if line > last_line else 0.0,
            line_pos[line] - first_after if line > last_line and line in line_pos else 99,
            in_procedure,
            *api_f,
            len(user_words & st.words) / sqrt(n_user_words * n_words) if n_user_words and n_words else 0.0,
            len(user_words & st.name_words) / sqrt(n_user_words * n_name_words)
            if n_user_words and n_name_words else 0.0,
            len(prev_words & st.words) / sqrt(n_prev_words * n_words) if n_prev_words and n_words else 0.0,
            len(last_tokens & st.token_set) / sqrt(n_last_tokens * n_tokens) if n_last_tokens and n_tokens else 0.0,
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


class Vectorizer:
    """The model's matrix of a turn: base features, INTENT_FEATURES (max / mean / min of the intent
    model's probabilities of a candidate's own words, ``prev=`` words excluded; that of its ``gen=`` word;
    how many), then one column per token feature the model knows.  What a token list selects is looked
    up once (the lists repeat from turn to turn); training and the policy build their matrices here."""

    def __init__(self, names: list[str], targets: list[str]):
        self.width = len(names)
        self._columns = {n: i for i, n in enumerate(names)}
        self._targets = {t: i for i, t in enumerate(targets)}
        self._plans: dict[tuple, tuple[list[int], int, list[int]]] = {}
        self._opinion_at = self._columns.get(OPINION_FEATURES[0], -1)  # -1: a model without the classifier
        self._zeros = array("f", bytes(4 * self.width))  # a row of zeros (``__call__`` copies it)

    def _plan(self, toks: tuple) -> tuple[list[int], int, list[int]]:
        toks = tuple(toks)
        plan = self._plans.get(toks)
        if plan is None:
            at = self._targets
            idx = [at[t] for t in toks if t in at and not t.startswith("prev=")]
            gen = next((at[t] for t in toks if t.startswith("gen=") and t in at), -1)
            plan = self._plans[toks] = (idx, gen, [j for t in toks if (j := self._columns.get(t)) is not None])
        return plan

    def __call__(self, tf: TurnFeatures, probs: list[float] | None, opinion: list[tuple[float, ...]] | None = None):
        """``probs``: ``IntentModel.vector`` of the turn (None without an intent model); ``opinion``: each
        row's ``OPINION_FEATURES`` (``OpinionModel.features``; None without the classifier)."""
        import numpy as np

        n, nc, nb, ni, width = len(tf.rows), TURN_AT, len(BASE_FEATURES), len(INTENT_FEATURES), self.width
        if not n:
            return np.zeros((0, width), dtype=np.float32)
        no = len(OPINION_FEATURES) if opinion is not None and self._opinion_at >= 0 else 0
        turn = tuple(tf.turn)
        if len(turn) != nb - nc:
            raise ValueError(f"{len(turn)} turn features, the model has {nb - nc}")
        # The matrix is written in a float32 buffer of the standard library (``array('f')``) that numpy then
        # adopts, not through numpy's slices: a turn's matrix took nine numpy calls (zeros, the conversion, a
        # reshape, five slice assignments, a scatter), and each costs a few microseconds more than its work
        # when the caches are cold, as they are on a turn (the eval's and the product's: the rest of the turn
        # runs between two choices).  One row template — zeros, the turn's columns (the same in every row)
        # converted once — repeated for the rows; each row's own base columns, then its intent and opinion
        # columns (adjacent in the model file's order: one assignment), converted by ``array('f')`` (each
        # Python number's double cast to float32, as ``np.array(..., dtype=np.float32)`` casts it: the same
        # values); its token columns set to 1 (5-10 us a scored turn less in the eval).  The numpy version it
        # replaces is the reference in ``tests/test_executor_cost.py``.
        template = array("f", self._zeros)  # (a copy)
        template[nc:nb] = array("f", turn)
        buf = template * n
        plans, oa = self._plans, self._opinion_at
        joined = no and oa == nb + ni  # the intent's and the opinion's columns adjacent (the model file's order)
        base = 0
        for r, (row, ts) in enumerate(zip(tf.rows, tf.toks)):
            idx, gen, at = plans.get(ts) or self._plan(ts)
            if len(row) != nc:
                raise ValueError(f"{len(row)} base values in row {r}, the model has {nc}")
            buf[base:base + nc] = array("f", row)
            if probs is not None:
                g = probs[gen] if gen >= 0 else -1.0
                if idx:
                    ps = [probs[i] for i in idx]
                    intent = (max(ps), sum(ps) / len(ps), min(ps), g, len(ps))
                else:
                    intent = (-1.0, -1.0, -1.0, g, 0.0)
            else:
                intent = _NO_INTENT
            if no:
                op = opinion[r]
                if len(op) != no:
                    raise ValueError(f"{len(op)} opinion values in row {r}, the model has {no}")
                if joined:
                    buf[base + nb:base + nb + ni + no] = array("f", intent + tuple(op))
                else:
                    buf[base + nb:base + nb + ni] = array("f", intent)
                    buf[base + oa:base + oa + no] = array("f", op)
            else:
                buf[base + nb:base + nb + ni] = array("f", intent)
            for j in at:
                buf[base + j] = 1.0
            base += width
        return np.frombuffer(buf, dtype=np.float32).reshape(n, width)


_NO_INTENT = (-1.0, -1.0, -1.0, -1.0, 0.0)  # INTENT_FEATURES without an intent model



def familiarity(answer_tokens: dict[str, list[str]], features: set[str] | list[str]) -> float:
    """The share of a workflow's ANSWER nodes (name -> shared name words, ``_View.tokens``) with a word
    among the model's token features: how much of the workflow the ranker has seen names like."""
    known = set(features)
    if not answer_tokens:
        return 0.0
    return sum(any("tok=" + w in known for w in ws) for ws in answer_tokens.values()) / len(answer_tokens)


# --- the policy ----------------------------------------------------------------------------------------

class LearnedPolicy:
    """A trained ranker over the candidates; ``choose`` is the executor's hook."""

    def __init__(self, model: PolicyFile, source: str = "", booster: tuple | None = None):
        """``booster``: (Booster, its predictor) of a policy over the same model file (``ungated``: one copy of
        the trees in memory, not two competing for the cache)."""
        import lightgbm as lgb

        if model.format != FORMAT_VERSION:
            raise PolicyError(f"{source}: field 'format': version {model.format}, this code reads {FORMAT_VERSION}")
        if model.features[:len(BASE_FEATURES) + len(INTENT_FEATURES)] != BASE_FEATURES + INTENT_FEATURES:
            raise PolicyError(f"{source}: field 'features': the base features differ from this code's; retrain "
                              "with `flowdesk train executor`")
        at = len(BASE_FEATURES) + len(INTENT_FEATURES)
        if (model.opinion is not None) != (model.features[at:at + len(OPINION_FEATURES)] == OPINION_FEATURES):
            raise PolicyError(f"{source}: field 'opinion': the classifier and its features come together")
        self.model, self.source, self.features = model, source, model.features
        if booster is None:
            self.booster = lgb.Booster(model_str=model.booster)
            self._predict = _predictor(self.booster)
        else:
            self.booster, self._predict = booster
        self._known = set(model.features)
        self._vectorize = Vectorizer(model.features, model.intent.targets if model.intent else [])
        self._familiar: dict[tuple[str, str], float] = {}  # per workflow (a cache: the policy is shared)
        # a gated choice may ask the pending call's values in its own order (``Gate.order``, ``pending_collection``)
        self.order = bool(model.gate and model.gate.order)
        # the classifier's tables, built with the booster (not in the first turn's cost)
        self._opinion = model.opinion.reader() if model.opinion is not None else None

    @classmethod
    def load(cls, path: str | Path) -> "LearnedPolicy":
        path = Path(path)
        if not path.is_file():
            raise PolicyError(f"{path}: no such model file (train one with `flowdesk train executor`)")
        try:
            model = PolicyFile.model_validate_json(path.read_text(encoding="utf-8"))
        except ValidationError as e:
            err = e.errors()[0]
            raise PolicyError(f"{path}: field '{'.'.join(map(str, err['loc'])) or '(file)'}': {err['msg']}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise PolicyError(f"{path}: {e}") from None
        return cls(model, str(path))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model.model_dump_json(), encoding="utf-8")
        return path

    def scores(self, tf: TurnFeatures):
        return self._predict(self.matrix(tf))

    def matrix(self, tf: TurnFeatures):
        opinion = self._opinion
        return self._vectorize(tf, self.model.intent.vector(tf.intent) if self.model.intent else None,
                               opinion.features(opinion_inputs(*tf.state), tf.keys, tf.workflow_keys)
                               if opinion is not None else None)

    def ungated(self) -> "LearnedPolicy":
        """The same ranker without its ``Gate`` (the evaluation scores both; built once)."""
        if self.model.gate is None:
            return self
        if "_ungated" not in self.__dict__:
            self._ungated = LearnedPolicy(self.model.model_copy(update={"gate": None}), self.source + " (ungated)",
                                          booster=(self.booster, self._predict))
        return self._ungated

    def familiar(self, wf: Workflow, interp: Interpreter) -> bool:
        """Whether the gate lets the ranker choose on ``wf`` at all (see ``Gate``)."""
        if self.model.gate is None:
            return True
        key = (wf.name, wf.procedure)
        if key not in self._familiar:
            self._familiar[key] = familiarity(view_of(wf, interp).tokens, self._known)
        return self._familiar[key] >= self.model.gate.min_familiarity

    def scored(self, wf: Workflow, interp: Interpreter, frame: Frame | dict, reading: dict,
               messages: list[BaseMessage], rules: dict, found=None,
               n_candidates: int | None = None, values: dict | None = None) -> list[tuple[Candidate, float]]:
        """The candidates with their scores, best first (the rules' proposal is ``is_rules``); ``found``:
        ``candidates``' answer for this very state, when the caller already has it (``n_candidates``: how
        many the turn allows, when ``found`` holds only some of them; ``values``: the frame's)."""
        cands = found or candidates(wf, interp, frame, rules, messages, values)
        s = self.scores(features(wf, interp, frame, reading, messages, cands, n_candidates, values))
        s = s.tolist()  # (Python floats: the same values, cheaper to index than the array)
        return [(cands[i], s[i]) for i in sorted(range(len(cands)), key=lambda i: (-s[i], i))]

    def rank(self, wf: Workflow, interp: Interpreter, frame: Frame | dict, reading: dict,
             messages: list[BaseMessage], rules: dict) -> list[Candidate]:
        """The candidates, best first."""
        return [c for c, _ in self.scored(wf, interp, frame, reading, messages, rules)]

    def choose(self, wf: Workflow, interp: Interpreter, frame: Frame | dict, reading: dict,
               messages: list[BaseMessage], rules: dict, rejected: list[dict], prerequisites=()) -> dict:
        """The executor's hook: the proposal to make instead of the rules' (see ``choice``)."""
        return self.choice(wf, interp, frame, reading, messages, rules, rejected, prerequisites)[0]

    def choice(self, wf: Workflow, interp: Interpreter, frame: Frame | dict, reading: dict,
               messages: list[BaseMessage], rules: dict, rejected: list[dict],
               prerequisites=()) -> tuple[dict, int]:
        """The best-ranked candidate that was not rejected in this turn and that the controllers' checks of
        the proposal itself allow (the rules' proposal when none is), and how many better-ranked
        candidates those checks vetoed (the evaluation reports it).  The workflow keeps two decisions:
        a call the rules make now is made (the user gave what it needs; one that only re-runs a succeeded call,
        ``rerun``, is ranked like any other step), and the reply just given is not repeated while the rules move
        on.  Verified experience (``prerequisites``, ``dialogue.experience``)
        gates like the PDL: no call whose learned prerequisite has not succeeded, no question for a value
        such a prerequisite's result provides.  Pure: the policy is shared."""
        if rules.get("kind") == "tool" and not any(same(rules, r) for r in rejected) and not rerun(rules, frame):
            return rules, 0  # the workflow's call with what the user gave: run it (see ``candidates``)
        rules_rejected = any(same(rules, r) for r in rejected)
        if not rules_rejected and not self.familiar(wf, interp):
            return rules, 0  # a workflow unlike the training ones: the procedure decides (``Gate``)
        vetoed = 0
        executed = frame.get("executed") or []
        view = view_of(wf, interp)
        gate = self.model.gate
        margin = gate.min_margin if gate else -math.inf
        # the values the rules are collecting (none to keep when their proposal was rejected)
        values = _values(frame)
        asked = asked_slots(rules, view, values)
        collecting = set(asked) if gate and not rules_rejected else set()
        # which of them to ask first: any value the procedure collects for the same pending call (``order``)
        askable = pending_collection(view, collecting, values) if self.order and collecting else collecting

        done = frozenset(executed)
        last = executed[-1] if executed else None

        def passed_over(c: Candidate) -> bool:  # never the rules' proposal
            return not c.is_rules and bool(gate and _leaves_collection(c, view, done, collecting, askable)
                                           or c.kind != "api" and c.name == last)

        # only what could be chosen is built and scored (the ranker's cost): a passed-over candidate — one
        # that leaves the rules' collection (``_leaves_collection``) or repeats the reply just given (a loop)
        # — is never taken, and a row's score does not depend on the other rows (the number of candidates,
        # a turn feature, counts them all), so the order of the rest is the same
        cands, skipped = _candidates(wf, interp, frame, rules, messages, values,
                                     _passed_over_answers(view, done, last, askable if gate else None), set(asked))
        # (an ANSWER that is not the rules' proposal is among ``cands`` only when ``_passed_over_answers`` let
        # it through, and ``passed_over`` reads the same of it: not asked again)
        eligible = [c for c in cands if c.kind == "answer" or not passed_over(c)]
        if not rules_rejected and len(eligible) == 1:
            return rules, 0  # nothing could replace the rules' proposal: no need to score
        env = None  # check_env's, built for the first candidate the checks look at (the same for all)
        ranked = self.scored(wf, interp, frame, reading, messages, rules, eligible, len(cands) + skipped, values)
        base = next((s for c, s in ranked if c.is_rules), math.inf)
        for c, score in ranked:
            if not c.is_rules and score - base < margin and not rules_rejected:
                return rules, vetoed  # not sure enough to leave the procedure (``Gate``)
            p = c.make()
            if not p or any(same(p, r) for r in rejected):
                continue
            if c.is_rules:
                return p, vetoed
            if env is None:
                env = check_env(frame, reading, interp)
            if allowed_now(p, wf, interp, frame, reading, env) and not _against_experience(p, prerequisites, frame) \
                    and not _asks_in_vain(c, interp, env):
                return p, vetoed
            vetoed += 1
        return rules, vetoed


def _predictor(booster) -> Callable[[Any], Any]:
    """``booster.predict(X, num_threads=1)`` for a float32 matrix, without the Python wrapper's per-call
    set-up (it rebuilds a predictor and re-parses the parameters on every call: a third of the ranker's
    cost on a dozen rows).  Row by row through LightGBM's single-row fast path (``FastConfig``: the
    parameters parsed and the predictor built once, at load): 63 against 69 us per matrix for one
    ``LGBM_BoosterPredictForMat`` call, which still re-parses them and builds a predictor on every call
    (the ranker's matrices of a 1-in-10 STAR dev sample, caches flushed between calls as in a turn).  The same trees summed in the same order, so the same scores (checked in
    ``tests/test_executor_learned.py``); the matrix call when the fast path is missing, the wrapper when
    the C library exposes neither."""
    import ctypes
    import weakref

    import numpy as np

    try:
        from lightgbm.basic import _LIB, _c_str, _safe_call

        fn, handle, n_features = _LIB.LGBM_BoosterPredictForMat, booster._handle, booster.num_feature()
    except (ImportError, AttributeError):
        return lambda X: booster.predict(X, num_threads=1)
    params = _c_str("num_threads=1")
    # the constant arguments, built once: float32 (C_API_DTYPE_FLOAT32 = 0), row-major, normal scores
    # (C_API_PREDICT_NORMAL = 0), all iterations; the arrays' addresses as plain pointers (``ndarray.ctypes.data``:
    # a third of the cost of ``data_as``, the function declares no argument types)
    f32, cols, row_major, normal, start, all_iters = (ctypes.c_int(0), ctypes.c_int32(n_features), ctypes.c_int(1),
                                                       ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(-1))
    fast = ctypes.c_void_p()
    n_out = ctypes.c_int64(0)
    addressof, c_char = ctypes.addressof, ctypes.c_char
    try:
        # a function object of our own (``lib[name]`` is not the library's shared one), with its argument types
        # declared, so a row's address passes as a plain int (no pointer object per row)
        row_fn = _LIB["LGBM_BoosterPredictForMatSingleRowFast"]
        row_fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p]
        row_fn.restype = ctypes.c_int
        _safe_call(_LIB.LGBM_BoosterPredictForMatSingleRowFastInit(handle, normal, start, all_iters, f32, cols,
                                                                    params, ctypes.byref(fast)))
        fast_at = fast.value
    except Exception:  # (an older library: one matrix call per turn)
        row_fn = None
    n_out_ref = ctypes.byref(n_out)

    def predict(X):
        X = np.ascontiguousarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != n_features:
            return booster.predict(X, num_threads=1)
        rows = X.shape[0]
        out = np.empty(rows, dtype=np.float64)
        if row_fn is not None:
            if not rows:
                return out
            stride = X.strides[0]
            try:  # the arrays' addresses (a quarter of the cost of ``ndarray.ctypes.data``, which builds a helper)
                at, to = addressof(c_char.from_buffer(X)), addressof(c_char.from_buffer(out))
            except (TypeError, ValueError):  # (a read-only array)
                at, to = X.ctypes.data, out.ctypes.data
            for i in range(rows):
                if row_fn(fast_at, at + i * stride, n_out_ref, to + 8 * i):
                    _safe_call(-1)  # (raises LightGBM's error)
            return out
        _safe_call(fn(handle, ctypes.c_void_p(X.ctypes.data), f32, ctypes.c_int32(rows), cols, row_major,
                      normal, start, all_iters, params, ctypes.byref(n_out), ctypes.c_void_p(out.ctypes.data)))
        return out

    if row_fn is not None:  # the fast path's handle is freed with the function that holds it
        weakref.finalize(predict, _LIB.LGBM_FastConfigFree, fast)
    return predict


def _leaves_collection(c: Candidate, view: _View, executed: frozenset[str] | list[str], collecting: set[str],
                       askable: set[str] | None = None) -> bool:
    """Steps a gated ranker leaves to the procedure (``Gate``), where logged agents' habits cost a user's
    goal: while the rules collect values, anything but another way of asking for one of them (a call
    would run without them, another reply leaves the collection), and a question this workflow already
    asked (asked again out of the procedure's order, it loops).  Banning only the call during a collection
    predicts logged agents better (1-in-10 STAR dev sample: weighted F1 0.596 against 0.558) but loses
    users' goals: STAR sessions 0.444 -> 0.392, fewer calls made (tool executions per gold call 0.76 -> 0.59)
    while the ranker replied instead of asking (FlowBench, demo and compliance unchanged); letting a reply
    through only when the user's last message asks something: 0.567 on the sample, STAR sessions 0.438.
    ``askable`` (default ``collecting``): the values a question may ask instead (``pending_collection``); a
    call is still held by what the rules ask now."""
    if c.kind == "api":
        return bool(collecting & view.params.get(c.name, frozenset()))
    askable = collecting if askable is None else askable
    if c.kind == "answer":
        return c.name in _passed_over_answers(view, frozenset(executed), None, askable)
    # the rules are collecting values: only another way of asking for one of them
    return bool(askable) and askable.isdisjoint(c.missing)


def pending_collection(view: _View, asked: set[str], values: dict) -> set[str]:
    """The values a gated ranker may ask for while the rules ask ``asked``: those still missing that the
    procedure collects (an ANSWER's targets, on a line before the call) for the pending call — the first API
    site in the procedure that takes every asked value.  The rules ask them one by one in the chart's order;
    logged agents ask the same values in their own order (STAR's authentication questions), and any order
    gathers the same arguments before the call runs (a call is still held by what the rules ask now).
    ``asked`` itself when no site takes them all (nothing asked: nothing collected)."""
    if not asked:
        return set()
    key = frozenset(asked)
    cached = view.pending.get(key)
    if cached is None:
        site = next((s for s in sorted(view.sites, key=attrgetter("line"))
                     if key <= view.params.get(s.name, frozenset())), None)
        if site is None:
            cached = key
        else:
            before = {t for a, ts in view.target_sets.items() if 0 < view.lines.get(a, 0) < site.line for t in ts}
            cached = key | (view.params.get(site.name, frozenset()) & before)
        if len(view.pending) > 256:  # (bounded: the collections a workflow asks for are few)
            view.pending.clear()
        view.pending[key] = cached
    return set(asked) | {v for v in cached if (x := values.get(v)) is None or x == ""}


def _passed_over_answers(view: _View, done: frozenset[str], last: str | None,
                         collecting: set[str] | None) -> set[str]:
    """The ANSWERs ``passed_over`` passes over, by name (``collecting``: None without a gate): the reply just
    given and, with a gate, those ``_leaves_collection`` leaves to the procedure — while the rules collect
    values, every ANSWER that asks for none of them (the same for a workflow and a collection, so kept on the
    view), and an ANSWER that collects values and ran before.  The one statement of that rule for ANSWERs, a
    set built from the view's sets instead of a test per ANSWER and turn."""
    out = {last}
    if collecting is None:
        return out
    if collecting:
        key = frozenset(collecting)
        apart = view.apart.get(key)
        if apart is None:
            if len(view.apart) > 256:  # (bounded: the collections a workflow asks for are few)
                view.apart.clear()
            apart = view.apart[key] = frozenset(a for a, t in view.target_sets.items() if key.isdisjoint(t))
        out |= apart
    out |= view.collectors & done
    return out


def rerun(rules: dict, frame: Frame | dict) -> bool:
    """Whether the rules' call only repeats the last call of its API, which succeeded, with nothing the user
    gave since: every argument is the last call's, or one that call went without which the user never gave (a
    value its own results filled).  The rules re-run a lookup so when the user speaks after the flow ended; such
    a call is not one the user gave what it needs for, so the ranker ranks it against the other actions (STAR
    train, gold history: the logged agent made 43% of these 1,263 calls of the rules, 70% of their other 3,800)."""
    mine = [c for c in frame.get("calls") or [] if c.get("api") == rules.get("name")]
    if not mine or mine[-1].get("status", "ok") != "ok":
        return False
    last, slots, args = mine[-1].get("args") or {}, frame.get("slots") or {}, rules.get("args") or {}
    if any(k not in args for k in last):
        return False
    return all((str(v).strip().lower() == str(last[k]).strip().lower()) if k in last else not _filled(slots, k)
               for k, v in args.items())


def _asks_in_vain(c: Candidate, interp: Interpreter, env) -> bool:
    """A question for the values of a call on a procedure branch that does not apply ("the name for the
    booking" once the room turned out not to be free): the call it prepares cannot run."""
    if not c.for_api:
        return False
    from ..control.checks import blocked_by_branch

    return blocked_by_branch(interp.procedure, c.for_api, env.scope) is not None


def _against_experience(proposal: dict, prerequisites, frame: Frame | dict) -> bool:
    if not prerequisites:
        return False
    if proposal.get("kind") == "tool":
        return bool(unmet(prerequisites, frame, proposal.get("name") or ""))
    return provider_of(prerequisites, frame, (proposal.get("args") or {}).get("slots") or ()) is not None


# the post-controller's checks that read only the proposal, the workflow and the frame
PROPOSAL_CHECKS = ("unknown_node", "node_dependency", "procedure_branch", "argument_schema", "answer_template")


def check_env(frame: Frame | dict, reading: dict, interp: Interpreter):
    """What ``allowed_now``'s checks read besides the proposal (no limits: the post-controller keeps them)."""
    from ..control.checks import CheckEnv

    return CheckEnv(turn=0, max_turns=1 << 30, max_api_repeats=1 << 30, scope=scope_of(frame, reading),
                    procedure=interp.procedure)


def allowed_now(proposal: dict, wf: Workflow, interp: Interpreter, frame: Frame | dict, reading: dict,
                env=None) -> bool:
    """The post-controller's checks of the proposal itself (known node, preconditions, procedure branch,
    argument schema, filled template).  The post-controller runs them again, with the others (session
    length, repeats, declined calls), on whatever is proposed.  ``env``: ``check_env``'s, when the
    caller checks several proposals on the same state."""
    from ..control.checks import CHECKS

    env = env or check_env(frame, reading, interp)
    return all(CHECKS[name](proposal, wf, frame, env)["ok"] for name in PROPOSAL_CHECKS)


INTERPRETER = "interpreter"


@lru_cache(maxsize=8)
def _cached(path: str, mtime: float) -> LearnedPolicy:
    return LearnedPolicy.load(path)


def load_policy(spec: str) -> LearnedPolicy | None:
    """``interpreter`` → None; ``learned:PATH`` → that model (a clear error when it cannot be used);
    ``auto``/empty → the bundled model when its file is present, else None (the interpreter)."""
    spec = (spec or "auto").strip()
    if spec == INTERPRETER:
        return None
    if spec == "auto":
        if not DEFAULT_MODEL.is_file():
            return None
        path = DEFAULT_MODEL
    elif spec.startswith("learned:"):
        path = Path(spec[len("learned:"):]).expanduser()
        if not str(path) or spec == "learned:":
            path = DEFAULT_MODEL
    else:
        raise PolicyError(f"executor_policy: {spec!r} is not 'auto', 'interpreter' or 'learned:PATH'")
    if not path.is_file():
        raise PolicyError(f"executor_policy: {path}: no such model file (train one with `flowdesk train executor`)")
    return _cached(str(path.resolve()), path.stat().st_mtime)

