"""``flowdesk train executor``: fits the learned executor policy (``dialogue/execution/policy_learned.py``)
on logs.

Data: STAR wizard actions replayed with the gold history (``evals/datasets/star_actions.py``, the same
teacher-forced frames as ``flowdesk eval next-action``).  At every action the offline policy proposes
(``dialogue.execution.policy_offline.decide``), the learned policy's own candidate generator lists the allowed
actions and their features; the candidate whose STAR label is the wizard's is the positive (turns whose
gold action is not among the candidates — a label the task's flowchart lacks — teach nothing and are
left out of the fit).  Token features (words of node names) are kept when they occur in at least
``MIN_TASKS`` training tasks, so nothing specific to one task enters the model.

Model: LightGBM ``lambdarank`` (one query group per turn), and its ``Gate`` (when the ranker may override
the rules) from the scores of a 2-fold cross-fit of the same ranker (``calibrate``).  ``extract`` runs
once; ``fit`` is called again on subsets for the leave-one-task-out models and the learning curve.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import typer

from evals.datasets.star_actions import candidate_label, replay
from workflows.extraction.star import iter_dialogues, star_dir

MIN_TASKS = 3
# 100 trees of 15 leaves: the ranker's cost per scored turn is mostly its trees (300 x 31 before, the same
# dev accuracy within 0.003 on a 1-in-10 sample, a third of the predict time).
PARAMS = {"objective": "lambdarank", "learning_rate": 0.15, "num_leaves": 15, "min_data_in_leaf": 40,
          "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0,
          "lambdarank_truncation_level": 5, "eval_at": [1], "verbose": -1, "seed": 7, "num_threads": 2}
ROUNDS = 100


@dataclass
class TurnRows:
    """One wizard action's candidates: base rows, token features, which one is gold (-1: none)."""

    task: str
    dialogue: int
    tf: Any  # dialogue.execution.policy_learned.TurnFeatures
    gold: int
    gold_label: str = ""
    labels: list[str] = field(default_factory=list)  # each candidate's STAR label


@dataclass
class Extracted:
    turns: list[TurnRows] = field(default_factory=list)
    seconds: float = 0.0

    def tasks(self) -> list[str]:
        return sorted({t.task for t in self.turns})


def turn_rows(step) -> TurnRows:
    from dialogue.execution.policy_learned import candidates, features
    from dialogue.execution.policy_offline import decide

    rules = decide(step.wf, step.interp, step.frame, step.reading, step.messages, [])
    cands = candidates(step.wf, step.interp, step.frame, rules, step.messages)
    tf = features(step.wf, step.interp, step.frame, step.reading, step.messages, cands)
    labels = [candidate_label(c) for c in cands]
    gold = labels.index(step.gold) if step.gold in labels else -1
    return TurnRows(step.task, step.dialogue, tf, gold, step.gold, labels)


_LIB = None


def _init_worker(library_dir: str) -> None:
    global _LIB
    from workflows.library import load_library

    _LIB = load_library(library_dir)
    _INTERPS.clear()


_INTERPS: dict = {}  # interpreters of the worker's library, built once per workflow


def _extract_dialogue(d: dict) -> list[TurnRows]:
    return [turn_rows(s) for s in replay(d, _LIB, _INTERPS)]


def extract(data: Path, split: str, library_dir: Path, limit: int = 0, every: int = 1, workers: int = 2) -> Extracted:
    """Candidates and features of every wizard action of ``split`` (in parallel over dialogues)."""
    t0 = time.perf_counter()
    dialogues = list(iter_dialogues(star_dir(data) / "dialogues.jsonl.gz", split, limit, every))
    out = Extracted()
    if workers > 1 and len(dialogues) > 50:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(workers, initializer=_init_worker, initargs=(str(library_dir),)) as pool:
            for part in pool.imap(_extract_dialogue, dialogues, chunksize=20):
                out.turns.extend(part)
    else:
        _init_worker(str(library_dir))
        for d in dialogues:
            out.turns.extend(_extract_dialogue(d))
    out.seconds = time.perf_counter() - t0
    return out


def _tasks_of(turns: list[TurnRows], items) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for t in turns:
        for x in items(t):
            out[x].add(t.task)
    return out


def vocabulary(turns: list[TurnRows], min_tasks: int = MIN_TASKS) -> list[str]:
    """Token features seen in at least ``min_tasks`` tasks' candidates (sorted for a stable file)."""
    tasks_of = _tasks_of(turns, lambda t: {tok for ts in t.tf.toks for tok in ts})
    return sorted(tok for tok, tasks in tasks_of.items() if len(tasks) >= min_tasks)


INTENT_MIN_GOLD = 30  # a target word must name the gold action this often


def _intent_design(turns: list[TurnRows], inputs: list[str]):
    from scipy.sparse import csr_matrix

    col = {x: i for i, x in enumerate(inputs)}
    rows, cols = [], []
    for r, t in enumerate(turns):
        for j in {col[x] for x in t.tf.intent if x in col}:
            rows.append(r)
            cols.append(j)
    return csr_matrix(([1.0] * len(rows), (rows, cols)), shape=(len(turns), len(inputs)), dtype="float32")


def _intent_fit(turns: list[TurnRows], inputs: list[str], targets: list[str]):
    """(coef, bias) of one logistic regression per target word (constant bias when a class is absent)."""
    import math

    import numpy as np
    from sklearn.linear_model import LogisticRegression

    X = _intent_design(turns, inputs)
    coef, bias = [], []
    for tgt in targets:
        y = np.array([tgt in t.tf.toks[t.gold] for t in turns], dtype=int)
        if y.min() == y.max():
            rate = min(max(y.mean(), 1e-3), 1 - 1e-3)
            coef.append(np.zeros(len(inputs)))
            bias.append(math.log(rate / (1 - rate)))
            continue
        lr = LogisticRegression(C=0.5, max_iter=300).fit(X, y)
        coef.append(lr.coef_[0])
        bias.append(float(lr.intercept_[0]))
    return np.asarray(coef), np.asarray(bias)


def _intent_model(turns: list[TurnRows], vocab: list[str], min_tasks: int):
    """The intent model (inputs seen in ``min_tasks`` tasks; targets: vocabulary words naming gold often)."""
    from dialogue.execution.policy_learned import IntentModel

    in_tasks = _tasks_of(turns, lambda t: set(t.tf.intent))
    inputs = sorted(x for x, ts in in_tasks.items() if len(ts) >= min_tasks)
    known = set(vocab)
    counts: dict[str, int] = defaultdict(int)
    for t in turns:
        for tok in t.tf.toks[t.gold]:
            if tok in known and not tok.startswith("prev="):
                counts[tok] += 1
    targets = sorted(tok for tok, n in counts.items() if n >= INTENT_MIN_GOLD)
    return inputs, targets, IntentModel


# An override of the procedure must be where logged agents rarely did the procedure's step: at most this
# share of the overrides at or above the gate's margin had the rules' proposal as the logged action
# (cross-fitted train).  0.02 (the margin 2.0) kept the procedure's step where the ranker was right more often
# than not: dev wF1 0.531 against 0.557 at 0.10 (1-in-10 sample), with the same sessions on FlowBench, the demo
# and a STAR sample; what protects a user's goal is the familiarity gate and ``_leaves_collection``.
GATE_RULES_RIGHT = 0.1
# ``Gate.order`` in the files trained here: the gated ranker may ask the pending call's values in its own order.
# On since session 17, once the slot reader keeps a name the user volunteers beside the asked values (STAR dev
# sample 0.602 -> 0.613, STAR sessions 0.476 -> 0.475 with the reader's fix, main 0.473; docs/EXPERIMENTS.md).
GATE_ORDER = True


def _answer_tokens(turns: list[TurnRows]) -> dict[str, dict[str, list[str]]]:
    """Per task, its ANSWER candidates' shared name words (``_View.tokens``, read back from the features)."""
    out: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for t in turns:
        for ts in t.tf.toks:
            gen = next((x[4:] for x in ts if x.startswith("gen=")), None)
            if gen is not None:
                out[t.task][gen] = [x[4:] for x in ts if x.startswith("tok=")]
    return out


def calibrate(turns: list[TurnRows], scores: list, min_tasks: int, rules_right: float = GATE_RULES_RIGHT,
              order: bool = GATE_ORDER):
    """The ``Gate`` from training turns and their cross-fitted scores (each from a ranker that did not see
    the turn's dialogue).  Familiarity: every training task, with the vocabulary rebuilt from the other
    tasks (as a new task meets it), must pass.  Margin: the smallest score margin over the rules' proposal
    such that, of the overrides at or above it, the rules' proposal was the logged action at most
    ``rules_right`` of the time."""
    import numpy as np

    from dialogue.execution.policy_learned import Gate, familiarity

    tokens = _answer_tokens(turns)
    fam = []
    for task, answers in tokens.items():
        others = [t for t in turns if t.task != task]
        fam.append(familiarity(answers, vocabulary(others, min_tasks)) if others else 1.0)
    rows = []  # (margin, the override is the logged action, the rules' proposal is)
    for t, s in zip(turns, scores):
        best = int(np.argmax(s))
        if best != 0:  # candidate 0 is the rules' proposal
            rows.append((float(s[best] - s[0]), best == t.gold, t.gold == 0))
    min_margin, prec, kept_rules = math.inf, 0.0, 0.0
    if rows:
        rows.sort(reverse=True)
        n = np.arange(1, len(rows) + 1)
        top = np.cumsum([r[1] for r in rows]) / n
        rul = np.cumsum([r[2] for r in rows]) / n
        m = np.asarray([r[0] for r in rows])
        ends = np.append(m[1:] < m[:-1], True)  # a cut between equal margins cannot be made
        ok = np.nonzero((rul <= rules_right) & ends)[0]
        if len(ok):  # the largest set of the most confident overrides that meets the bound
            k = int(ok.max())
            min_margin, prec, kept_rules = rows[k][0], float(top[k]), float(rul[k])
    return Gate(min_familiarity=round(min(fam, default=0.0), 4),
                min_margin=round(min_margin, 6) if min_margin < math.inf else 1e9,
                precision=round(prec, 4), rules_right=round(kept_rules, 4),
                overrides=round(sum(r[0] >= min_margin for r in rows) / max(len(turns), 1), 4), order=order)


def _round(a) -> list:
    return [round(float(x), 4) for x in a]


def fit(turns: list[TurnRows], rounds: int = ROUNDS, info: dict | None = None, min_tasks: int = MIN_TASKS,
        folds: int = 2, gate: bool = True, opinion: bool = True, order: bool = GATE_ORDER):
    """A ``LearnedPolicy`` trained on ``turns`` (those with a gold candidate).  The intent model's
    probabilities the ranker learns from are cross-fitted (each fold's from a model that did not see its
    dialogues), so the ranker trusts them as much as they deserve on new dialogues.  With ``gate`` the
    ranker is also cross-fitted the same way and its held-out scores calibrate the ``Gate`` (``calibrate``).
    With ``opinion`` the ranker also reads a text classifier's probability of each candidate's action
    (``evals/train_opinion.py``: cross-fitted for the training rows, fitted on all of ``turns`` for the file).
    ``order``: the Gate's ``order`` (``GATE_ORDER``)."""
    import lightgbm as lgb
    import numpy as np

    from dialogue.execution.policy_learned import BASE_FEATURES, FORMAT_VERSION, INTENT_FEATURES, OPINION_FEATURES, \
        LearnedPolicy, PolicyFile, Vectorizer
    from evals import train_opinion

    used = [t for t in turns if t.gold >= 0 and len(t.tf.rows) > 1]
    if not used:
        raise ValueError("no training turn has its gold action among the candidates")
    opinion = opinion and len({train_opinion.label_of(t) for t in turns}) > 1  # a classifier needs two labels
    vocab = vocabulary(used, min_tasks)
    names = BASE_FEATURES + INTENT_FEATURES + (OPINION_FEATURES if opinion else []) + vocab
    inputs, targets, IntentModel = _intent_model(used, vocab, min_tasks)
    probs: list[list[float] | None] = [None] * len(used)
    intent = None
    if inputs and targets:
        fold_of = {d: i % folds for i, d in enumerate(sorted({t.dialogue for t in used}))}
        for k in range(folds):
            train = [t for t in used if fold_of[t.dialogue] != k]
            held = [i for i, t in enumerate(used) if fold_of[t.dialogue] == k]
            coef, bias = _intent_fit(train, inputs, targets)
            part = IntentModel(inputs=inputs, targets=targets, coef=coef.tolist(), bias=bias.tolist())
            for i in held:
                probs[i] = part.vector(used[i].tf.intent)
        coef, bias = _intent_fit(used, inputs, targets)
        keep = [j for j in range(len(inputs)) if np.abs(coef[:, j]).max() >= 1e-3]  # drop inert inputs
        intent = IntentModel(inputs=[inputs[j] for j in keep], targets=targets,
                             coef=[_round(row[keep]) for row in coef], bias=_round(bias))
    vectorize = Vectorizer(names, targets if intent else [])
    opinions = train_opinion.cross_fit(turns, used) if opinion else [None] * len(used)
    X = np.vstack([vectorize(t.tf, p, o) for t, p, o in zip(used, probs, opinions)])
    y = np.zeros(len(X), dtype=np.float32)
    pos, groups, starts = 0, [], []
    for t in used:
        y[pos + t.gold] = 1.0
        starts.append(pos)
        pos += len(t.tf.rows)
        groups.append(len(t.tf.rows))

    def train(turn_ids):
        rows = np.concatenate([np.arange(starts[i], starts[i] + groups[i]) for i in turn_ids])
        ds = lgb.Dataset(X[rows], y[rows], group=[groups[i] for i in turn_ids],
                         feature_name=[f"f{i}" for i in range(len(names))], free_raw_data=True)
        return lgb.train(dict(PARAMS), ds, num_boost_round=rounds)

    booster = train(range(len(used)))
    the_gate = None
    if gate:  # the ranker's scores on dialogues it did not see (cross-fitted), for the Gate
        scores: list = [None] * len(used)
        fold_of = {d: i % folds for i, d in enumerate(sorted({t.dialogue for t in used}))}
        for k in range(folds):
            held = [i for i, t in enumerate(used) if fold_of[t.dialogue] == k]
            rest = [i for i, t in enumerate(used) if fold_of[t.dialogue] != k]
            if not held or not rest:
                continue
            part = train(rest)
            for i in held:
                scores[i] = part.predict(X[starts[i]:starts[i] + groups[i]], num_threads=1)
        kept = [(t, sc) for t, sc in zip(used, scores) if sc is not None]
        the_gate = calibrate([t for t, _ in kept], [sc for _, sc in kept], min_tasks, order=order)
    meta = dict(info or {})
    meta.update({"turns": len(used), "tasks": sorted({t.task for t in used}),
                 "dialogues": len({t.dialogue for t in used}), "rounds": rounds, "min_tasks": min_tasks,
                 "intent_inputs": len(intent.inputs) if intent else 0,
                 "intent_targets": len(intent.targets) if intent else 0, "opinion": opinion})
    return LearnedPolicy(PolicyFile(format=FORMAT_VERSION, features=names, booster=booster.model_to_string(),
                                    intent=intent, trained_on=meta, gate=the_gate,
                                    opinion=train_opinion.fit(turns) if opinion else None), source="(trained in memory)")


def star_library_dir(data: Path) -> Path:
    """The 24 STAR task flowcharts imported as a PDL library (cached next to the other imports)."""
    from evals.datasets.star import library

    root = star_dir(data).parent  # the data directory that holds star/
    return library(root, Path(".flowdesk/eval") / "star")


def train_command(
    dataset: str = typer.Option("star", "--dataset", help="Dataset (only star)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Data directory (default: $FLOWDESK_DATA or ../shared/data)."),
    split: str = typer.Option("train", "--split", help="train | dev | all (DialogueID % 5: train 1,2; dev 3,4)."),
    out: Path = typer.Option(..., "--out", help="Model file to write (JSON)."),
    limit: int = typer.Option(0, "--limit", help="At most this many dialogues (0 = all)."),
    every: int = typer.Option(1, "--every", help="Keep every n-th dialogue (a sample)."),
    exclude: str = typer.Option("", "--exclude", help="Comma-separated tasks left out (zero-shot models); "
                                                      "zero-shot = the evaluation's zero-shot tasks."),
    rounds: int = typer.Option(ROUNDS, "--rounds", help="Boosting rounds."),
    opinion: bool = typer.Option(True, "--opinion/--no-opinion", help="The ranker also reads a text classifier's "
                                 "probability of each candidate (stored in the model file)."),
    gate_order: bool = typer.Option(GATE_ORDER, "--gate-order/--no-gate-order", help="The gate lets the ranker "
                                    "ask the pending call's values in its own order (Gate.order)."),
) -> None:
    """Train the learned executor policy (a LightGBM ranker over the workflow's allowed actions)."""
    from evals.next_action import checked_star_args

    data = checked_star_args(dataset, split, data)
    lib = star_library_dir(data)
    ex = extract(data, split, lib, limit, every)
    from evals.next_action import ZERO_SHOT_TASKS

    left_out = {t.strip() for t in exclude.split(",") if t.strip()}
    if "zero-shot" in left_out:
        left_out = (left_out - {"zero-shot"}) | set(ZERO_SHOT_TASKS)
    turns = [t for t in ex.turns if t.task not in left_out]
    policy = fit(turns, rounds, {"dataset": dataset, "split": split, "every": every, "excluded": sorted(left_out)},
                 opinion=opinion, order=gate_order)
    path = policy.save(out)
    meta = policy.model.trained_on
    typer.echo(f"{path}: {meta['turns']} turns of {meta['dialogues']} dialogues, {len(meta['tasks'])} tasks, "
               f"{len(policy.features)} features ({ex.seconds:.0f} s extraction); "
               f"{path.stat().st_size / 1024:.0f} KiB")


def sample_turns(turns: list[TurnRows], dialogues: int, seed: int = 0) -> list[TurnRows]:
    """The turns of ``dialogues`` dialogues drawn at random (learning curves)."""
    ids = sorted({t.dialogue for t in turns})
    keep = set(random.Random(seed).sample(ids, min(dialogues, len(ids))))
    return [t for t in turns if t.dialogue in keep]


def summary(ex: Extracted) -> dict[str, Any]:
    n = len(ex.turns)
    return {"turns": n, "with_gold": sum(t.gold >= 0 for t in ex.turns), "seconds": round(ex.seconds, 1),
            "mean_candidates": (sum(len(t.tf.rows) for t in ex.turns) / n) if n else 0.0}
