"""Closed-loop switching evaluation: the agent's own decisions feed every later turn.

Each dialogue is replayed turn by turn through the *understanding part of the graph* — the very node
functions ``build_agent`` wires (``detector`` → ``router`` → ``retriever`` → ``apply_commands``), in the
graph's order, with the state merged by the graph's own reducers (``graph.state.State``'s annotations).
The stack that results — the active workflow, the interrupted frames, the belief behind each pick —
is what the next turn sees.  Agent turns are the dataset's (the executor's replies are not generated),
so the comparison with the gold labels is turn by turn.  ``tests/test_switch_loop.py`` replays dialogues
through the compiled graph (``interrupt_after=["apply_commands"]``) and gets the same decisions.

The prediction of a turn is the agent's ranking after it: the active workflow first, followed on a
SEARCH turn by the retriever's other candidates, on any other turn by the alternatives the active frame's
belief still holds, most probable first (``believed``: the pick's runners-up as re-verified on every turn
since, the ranking revision acts on); MAP@5 reads that ranking, and ``map_active_only`` the active
workflow alone on turns without a search (the definition before session 22).  An out-of-scope reading
predicts nothing when the dataset has "no task" labels.  Errors are cut into categories (``error_category``).
"""

from __future__ import annotations

import time
import typing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from .datasets import Dialogue, eval_today
from .switch_metrics import TurnRecord

# The graph's understanding part, in the order build_agent wires it.
UNDERSTANDING = ("detector", "router", "retriever", "apply_commands")
ERROR_CATEGORIES = ("wrong pick at the change", "stayed on a wrong pick", "missed change", "needless search",
                    "out of scope")


def _reducers() -> dict[str, Any]:
    from graph.state import State

    hints = typing.get_type_hints(State, include_extras=True)
    out = {}
    for name, hint in hints.items():
        meta = getattr(hint, "__metadata__", ())
        out[name] = meta[0] if meta else None
    return out


def merge(state: dict, update: dict, reducers: dict[str, Any]) -> dict:
    """``update`` merged into ``state`` the way the graph merges a node's return value."""
    out = dict(state)
    for key, value in (update or {}).items():
        reducer = reducers.get(key)
        out[key] = reducer(out.get(key), value) if reducer is not None and key in out else \
            (reducer(None, value) if reducer is not None else value)
    return out


@dataclass
class LoopTurn:
    """One user turn as the agent understood it (closed loop)."""

    dialogue: str
    index: int
    gold: str | None
    prev_gold: str | None
    before: str | None  # the active workflow when the turn arrived (the agent's own)
    active: str | None  # the active workflow after the turn
    decision: str  # STAY | SEARCH
    commands: list[str]
    candidates: list[str]
    out_of_scope: bool
    revised: bool
    first: bool  # the dialogue's first scored user turn
    ms: float


class UnderstandingLoop:
    """Runs the graph's understanding nodes on one conversation at a time."""

    def __init__(self, context):
        from langgraph.runtime import Runtime

        from nodes.apply_commands import apply_commands
        from nodes.detector import detector
        from nodes.retriever import retriever
        from nodes.router import router

        self.context = context
        self.runtime = Runtime(context=context)
        self.nodes = {"detector": detector, "router": router, "retriever": retriever,
                      "apply_commands": apply_commands}
        self.reducers = _reducers()

    def user_turn(self, state: dict, text: str) -> dict:
        from graph.agent import after_detector, after_retriever

        state = merge(state, {"messages": [HumanMessage(text)]}, self.reducers)
        state = merge(state, self.nodes["detector"](state, self.runtime), self.reducers)
        if after_detector(state) == "router":
            state = merge(state, self.nodes["router"](state, self.runtime), self.reducers)
            state = merge(state, self.nodes["retriever"](state, self.runtime), self.reducers)
            if after_retriever(state) == "clarify":
                state = merge(state, clarify_first(state), self.reducers)
        return merge(state, self.nodes["apply_commands"](state, self.runtime), self.reducers)

    def agent_turn(self, state: dict, text: str) -> dict:
        return merge(state, {"messages": [AIMessage(text)]}, self.reducers)


def clarify_first(state: dict) -> dict:
    """The evaluation's user answers a clarification with the first option (no one to ask)."""
    from dialogue.commands import StartFlow, dump
    from graph.state import turn_commands

    options = turn_commands(state)[-1].get("options") or []
    turn = int(state.get("turn") or 0)
    return {"commands": dump([StartFlow(workflow=options[0], turn=turn, source="clarify")])} if options else {}


def teacher_stack(state: dict, gold: str | None, turn: int) -> dict:
    """FlowSwitch's protocol through the same nodes: the previous turn's gold is the active workflow."""
    from dialogue.frames import new_frame
    from graph.state import active_workflow

    if active_workflow(state) == gold:
        return state
    return {**state, "stack": [new_frame(gold, turn)] if gold else []}


def replay(loop: UnderstandingLoop, dlg: Dialogue, teacher: bool = False) -> list[LoopTurn]:
    """The dialogue's user turns as the agent understands them; ``teacher`` = the previous gold is made
    active before each turn (the teacher-forced protocol, same code)."""
    from graph.state import active_workflow, decision, turn_commands

    state: dict = {"messages": []}
    out: list[LoopTurn] = []
    first = True
    for i, turn in enumerate(dlg.turns):
        if turn.speaker != "user":
            state = loop.agent_turn(state, turn.text)
            continue
        if teacher:
            state = teacher_stack(state, turn.prev_gold, int(state.get("turn") or 0))
        before = active_workflow(state)
        t0 = time.perf_counter()
        state = loop.user_turn(state, turn.text)
        ms = (time.perf_counter() - t0) * 1000
        cmds = turn_commands(state)
        kinds = [c.get("command") for c in cmds]
        if not turn.scored:
            continue
        dec = decision(cmds)
        out.append(LoopTurn(dlg.id, i, turn.gold, turn.prev_gold, before, active_workflow(state), dec, kinds,
                            [c["workflow"] for c in state.get("candidates") or []] if dec == "SEARCH"
                            else believed(state),
                            any(k in ("chitchat", "close") for k in kinds), "revise_flow" in kinds, first, ms))
        first = False
    return out


def believed(state: dict) -> list[str]:
    """The agent's ranking on a turn without a search: the active frame's belief (``Frame.belief``, the
    pick's alternatives as re-verified on every turn since), most probable first."""
    stack = state.get("stack") or []
    belief = (stack[-1].get("belief") or {}) if stack else {}
    return sorted(belief, key=lambda n: -belief[n])


def to_record(t: LoopTurn, oos_labels: bool = True) -> TurnRecord:
    """The turn as the switch metrics score it: the active workflow first, then the other candidates."""
    if t.out_of_scope and oos_labels:
        predicted: list[str] = []
    elif t.active is None:
        predicted = []
    else:
        predicted = [t.active] + [c for c in t.candidates if c != t.active][:4]
    searched = t.decision == "SEARCH"
    changed = searched or t.revised or (t.out_of_scope and oos_labels)
    return TurnRecord(t.gold, t.prev_gold, predicted, "SEARCH" if changed else "STAY",
                      bool(t.out_of_scope and oos_labels), t.before, searched, t.ms)


def error_category(t: LoopTurn, oos_labels: bool = True) -> str | None:
    """Why a turn's top-1 is wrong (None when it is right)."""
    rec = to_record(t, oos_labels)
    top = rec.predicted[0] if rec.predicted else None
    if top == t.gold:
        return None
    if t.gold is None or (rec.out_of_scope and oos_labels):
        return "out of scope"
    acted = t.decision == "SEARCH" or t.revised
    if t.gold != t.prev_gold:
        return "wrong pick at the change" if acted else "missed change"
    return "needless search" if acted else "stayed on a wrong pick"


@dataclass
class LoopResult:
    turns: list[LoopTurn] = field(default_factory=list)
    seconds: float = 0.0


def run_loop(dialogues: list[Dialogue], context, progress=None, teacher: bool = False) -> LoopResult:
    loop = UnderstandingLoop(context)
    res = LoopResult()
    t0 = time.perf_counter()
    for dlg in dialogues:
        res.turns.extend(replay(loop, dlg, teacher))
        if progress:
            progress()
    res.seconds = time.perf_counter() - t0
    return res


def loop_metrics(turns: list[LoopTurn], oos_labels: bool = True) -> dict[str, Any]:
    """The switch metrics of a closed-loop run, plus recall without first turns and error shares."""
    from .switch_metrics import compute

    recs = [to_record(t, oos_labels) for t in turns]
    m: dict[str, Any] = compute(recs)
    later = [r for t, r in zip(turns, recs) if not t.first and r.gold_changed]
    m["switch_recall_no_first"] = (sum(r.predicted_change for r in later) / len(later)) if later else float("nan")
    m["revisions_per_turn"] = sum(t.revised for t in turns) / max(1, len(turns))
    m["map_active_only"] = compute([r if t.decision == "SEARCH" else replace(r, predicted=r.predicted[:1])
                                    for t, r in zip(turns, recs)])["map"]
    cats = [error_category(t, oos_labels) for t in turns]
    errors = [c for c in cats if c]
    m["errors"] = len(errors)
    m["error_shares"] = {c: (errors.count(c) / len(errors) if errors else 0.0) for c in ERROR_CATEGORIES}
    m["error_rates"] = {c: errors.count(c) / max(1, len(turns)) for c in ERROR_CATEGORIES}
    return m


def stay_baseline(dialogues: list[Dialogue]) -> dict[str, Any]:
    """Always STAY on the gold previous workflow (the first turn: the gold itself is not known, nothing)."""
    from .switch_metrics import compute

    recs = [TurnRecord(t.gold, t.prev_gold, [t.prev_gold] if t.prev_gold else [], "STAY", False, t.prev_gold, False)
            for d in dialogues for t in d.turns if t.speaker == "user" and t.scored]
    return compute(recs)


# --- the closed-loop report ------------------------------------------------------------------------

# The agent before this evaluation existed: hybrid RRF, no learned ranker, no revision (the "before").
PREVIOUS_DEFAULT = {"ranker": False, "revise": False}
HEADLINE = ("top1", "top3", "map", "map_active_only", "searches_per_turn", "switch_recall", "switch_recall_no_first",
            "revisions_per_turn", "top1_switch_turns", "top1_stay_turns")


def chosen_on_train(switch_model: str = "") -> tuple[str, dict[str, Any]]:
    """(label, Context overrides) of the configuration ``flowdesk train switch`` chose on train."""
    from dialogue.understanding.ranker import load_ranker

    ranker = load_ranker(switch_model or None)
    chosen = (ranker.meta.get("chosen") if ranker is not None else None) or {}
    return chosen.get("label", "Context defaults (no trained model)"), dict(chosen.get("context") or {})


def evaluate_closed(dataset: str, split: str, dialogues: list[Dialogue], lib_dir, cache_dir, out, limit_note: str,
                    show_progress: bool = True, predictions=None) -> dict[str, Any]:
    """Every run of the closed-loop report; ``predictions`` (a path) also gets each run's turns as JSON lines
    (``evals.switch_predictions``; a run whose configuration equals an earlier one's is not repeated)."""
    from graph.context import Context

    from .report import Report

    oos = dataset != "star"
    base = {"library": str(lib_dir), "store_dir": str(cache_dir / f"store-{dataset}-{split}"),
            "detector_mode": "offline", "today": eval_today()}
    default_ctx = Context(**base)
    label, over = chosen_on_train(default_ctx.switch_model)
    runs: dict[str, dict[str, Any]] = {}
    configs = {"default": {}, "best": over, "before": PREVIOUS_DEFAULT, "teacher": {}}
    done: dict[str, str] = {}  # identical Context → reuse the run
    pred_rows: list = []  # evals.switch_predictions.PredictionRow of every run, when asked for
    library = None
    started = time.perf_counter()
    for key, overrides in configs.items():
        ctx = Context(**{**base, **overrides})
        same = next((k for k, c in done.items() if c == repr(ctx) and key != "teacher"), None)
        if same is not None:
            runs[key] = runs[same]
            continue
        prog = None
        if show_progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            prog.start()
            task = prog.add_task(f"closed loop: {key}", total=len(dialogues))
        try:
            res = run_loop(dialogues, ctx, progress=(lambda: prog.advance(task)) if prog else None,
                           teacher=key == "teacher")
        finally:
            if prog:
                prog.stop()
        if predictions is not None:
            from .switch_predictions import rows_of

            library = _library(lib_dir) if library is None else library
            pred_rows += rows_of(key, res.turns, library, oos)
        runs[key] = {**loop_metrics(res.turns, oos), "seconds": res.seconds,
                     "context": {k: getattr(ctx, k) for k in ("retriever", "fusion", "strategy", "context_prior",
                                                              "ranker", "revise")}}
        if key != "teacher":
            done[key] = repr(ctx)
    stay = stay_baseline(dialogues)
    seconds = time.perf_counter() - started
    n_turns = int(runs["default"]["turns"])
    rep = Report(out, f"Live switching, closed loop — {dataset} ({split})")
    rep.text(f"{len(dialogues)} dialogues, {n_turns} scored user turns{f' ({limit_note})' if limit_note else ''}. "
             "**Closed loop**: the agent's own earlier decisions (active workflow, interrupted frames, the belief "
             "behind each pick) feed every later turn, through the graph's understanding nodes (detector → router → "
             "retriever → apply_commands; `evals/switch_loop.py`). Agent turns are the dataset's. Offline policy, "
             f"no LLM. Run time {seconds:.0f} s. Reproduce: `flowdesk eval switch --dataset {dataset} --split {split} "
             "--loop closed`; the FlowSwitch protocol (teacher-forced: the previous turn's gold is active) is "
             "`--loop teacher`.")
    rep.text(f"**default** = the agent's shipped configuration (`graph.context.Context` defaults); **best** = the "
             f"configuration chosen on the train splits by `flowdesk train switch` ({label}); **before** = the agent "
             "before the learned ranker and revision (hybrid RRF, self-generated query, no prior); **always STAY** = "
             "the gold previous workflow on every turn (nothing on a dialogue's first turn); **teacher-forced** = the "
             "default configuration under FlowSwitch's protocol (before each turn the previous turn's gold is made the "
             "active workflow), through the same nodes.")
    headers = ["", "top-1", "top-3", "MAP@5", "MAP@5 (active alone when no search)", "searches/turn", "switch R",
               "switch R (no first turns)",
               "revisions/turn", "top-1 change turns", "top-1 stay turns"]
    rows = [[k, *(runs[k][h] for h in HEADLINE)] for k in ("default", "best", "before")]
    rows.append(["default, teacher-forced (FlowSwitch protocol)", *(runs["teacher"][h] for h in HEADLINE)])
    rows.append(["always STAY (gold previous)", stay["top1"], stay["top3"], stay["map"], stay["map"], 0.0, 0.0, 0.0,
                 0.0, stay["top1_switch_turns"], stay["top1_stay_turns"]])
    rep.table("Closed loop (dev)", headers, rows)
    rep.text("MAP@5 reads the agent's ranking after each turn: the active workflow, then on a search the retriever's "
             "other candidates and on any other turn the alternatives the active pick's belief still holds (re-verified "
             "on every turn; revision acts on them). The column beside it counts the active workflow alone on turns "
             "without a search, as reports before session 22 did. Top-1 is the same under both.")
    rep.table("Where the errors are (share of wrong turns; rate = share of all turns)",
              ["category", *(f"{k} share" for k in ("default", "before")), *(f"{k} rate" for k in ("default", "before"))],
              [[c, runs["default"]["error_shares"][c], runs["before"]["error_shares"][c],
                runs["default"]["error_rates"][c], runs["before"]["error_rates"][c]] for c in ERROR_CATEGORIES])
    if dataset == "sgd":
        rep.text("Targets (SGD dev, closed loop, default): top-1 ≥ 0.85, MAP ≥ 0.88, ≤ 40% searching turns.")
    if dataset == "star":
        rep.text("Target (STAR dev, closed loop, default): top-1 ≥ 0.70.")
    names = ["default", "best", "before", "always STAY"]
    rep.bar_plot("closed_loop", names, {"top-1": [runs["default"]["top1"], runs["best"]["top1"], runs["before"]["top1"],
                                                  stay["top1"]],
                                        "MAP@5": [runs["default"]["map"], runs["best"]["map"], runs["before"]["map"],
                                                  stay["map"]]}, "score", "Closed loop: top-1 and MAP@5")
    rep.bar_plot("errors", list(ERROR_CATEGORIES), {k: [runs[k]["error_rates"][c] for c in ERROR_CATEGORIES]
                                                    for k in ("default", "before")}, "share of turns",
                 "Wrong turns by category (closed loop)")
    summary = {k: runs["default"][k] for k in HEADLINE}
    metrics = {"loop": "closed", "dataset": dataset, "split": split, "dialogues": len(dialogues), "turns": n_turns,
               "summary": summary, "default": runs["default"], "best": {"label": label, **runs["best"]},
               "before": runs["before"], "teacher": runs["teacher"], "always_stay": stay, "seconds": seconds, "sample": limit_note or None}
    if predictions is not None:
        from .switch_predictions import write_rows

        write_rows(Path(predictions), pred_rows)
        metrics["confusions"] = _confusion_tables(rep, pred_rows, library)
        metrics["predictions"] = Path(predictions).name  # the file's name: a report never records a local path
    rep.write(metrics)
    return metrics


def _confusion_tables(rep, rows: list, library) -> dict[str, Any]:
    """The wrong picks of the default and teacher-forced runs by error category and relation to the gold,
    and the twin ceiling (an analysis: top-1 if confusing indistinguishable workflows counted as right)."""
    from .switch_predictions import RELATIONS, summary_of

    out = summary_of([r for r in rows if r.run in ("default", "teacher")], library)
    for run, found in out.items():
        table, ceil = found["confusions"], found["ceiling"]
        cats = [c for c in (*ERROR_CATEGORIES, "all") if c in table]
        total = sum(table.get("all", {}).values()) or 1
        rep.table(f"What the wrong top-1 is, relative to the gold ({run}; counts, share of wrong turns)",
                  ["relation", *cats, "share"],
                  [[rel, *(table[c].get(rel, 0) for c in cats), table.get("all", {}).get(rel, 0) / total]
                   for rel in RELATIONS])
        rep.text(f"Analysis, not a score ({run}): {ceil['gold_has_twin']} of {ceil['turns']} turns have a gold "
                 "that another service's workflow repeats by intent name or description; counting the "
                 f"{ceil['twin_confusions']} confusions between such twins as right would move top-1 from "
                 f"{ceil['top1']:.3f} to {ceil['top1_twins_right']:.3f}.")
    return out


def _library(lib_dir):
    from workflows.library import load_library

    return load_library(lib_dir)
