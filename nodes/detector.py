"""The ``detector`` node (FlowSwitch's workflow-switch detector): reads the user's turn into commands.

STAY keeps the active workflow; SEARCH (a ``StartFlow`` without a workflow, carrying the
self-generated query) sends the turn to the router and the retriever.  Going back to an interrupted
workflow, cancelling, asking for a person, small talk and "I don't know" become their own commands
(``dialogue.understanding.navigation``); a turn that is no language — nothing once normalised, noise,
pasted data — is NotUnderstood and starts nothing.  The policy — offline, LLM or cascade — is
``Context.detector_mode``; the evidence for the offline policy is the library's BM25 ranking.
"""

from __future__ import annotations

import time
from typing import Any

from langgraph.runtime import Runtime

from dialogue.commands import NotUnderstood, dump
from dialogue.frames import interrupted, top
from dialogue.turn import make_env, open_frame
from dialogue.understanding.belief import is_correction, revision_commands
from dialogue.understanding.features import split_history
from dialogue.understanding.navigation import reading_of, turn_commands
from dialogue.understanding.policy_llm import decide
from dialogue.understanding.policy_offline import RETRIEVAL_TOP_K, ScoreFn, learned_params
from dialogue.understanding.ranker import evidence, load_ranker
from dialogue.understanding.slots import restated
from graph.context import Context
from graph.resources import get_resources, model_for
from graph.state import SCHEMA_VERSION, State, decision
from workflows.text import reads_as_language


def retriever_scorer(retriever, top_k: int = RETRIEVAL_TOP_K) -> ScoreFn:
    """Detector evidence from the library retriever's BM25 (flat, cheap: no embedding per turn)."""

    def score(text: str) -> list[tuple[str, float]]:
        cands = retriever.search(text, retriever="bm25", strategy="flat", top_k=top_k)
        return [(c["workflow"], float(c.get("score", 0.0))) for c in cands]

    return score


def dense_scorer(retriever):
    """``(texts, names) -> [{name: cosine}]``: the dense evidence re-verification compares (None without
    vectors)."""
    if not retriever.dense:
        return None
    return lambda texts, names: retriever.dense_scores_many(list(texts), list(names))


def not_language(text: str, turn: int, active: str | None) -> dict[str, Any]:
    """A turn that is no language (``workflows.text.reads_as_language``): NotUnderstood, no search."""
    dumped = dump([NotUnderstood(turn=turn)])
    return {"turn": turn, "version": SCHEMA_VERSION, "reading": reading_of(text), "commands": dumped,
            "search_query": "", "user_intention": "",
            "trace": [{"event": "user", "turn": turn, "text": text, "workflow": active, "decision": decision(dumped),
                       "commands": ["not_understood"], "out_of_scope": True, "policy": "not_language"}]}


def restates(text: str, frame: dict, library) -> bool:
    """The message corrects nothing of the (settled) task ``frame``: it says again values it already holds."""
    wf = library.workflows.get(frame.get("workflow") or "")
    return wf is not None and restated(text, wf, frame.get("slots") or {})


def detector(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    res = get_resources(ctx)
    stack = state.get("stack") or []
    turn = int(state.get("turn") or 0) + 1
    env = make_env(turn, res.library.workflows, res.interpreters, res.today)
    frame = open_frame(stack, env)  # a settled frame's irreversible call is made: the next turn is a new request
    messages = state.get("messages") or []
    if frame is None and (done := top(stack)) is not None and restates(split_history(messages)[0], done, res.library):
        frame = done  # ... unless it only restates what that task used ("wait, I meant B-1008"): it is about that task
    wf = res.library.workflows.get(frame["workflow"]) if frame else None
    active = wf.name if wf is not None else None  # a workflow gone from the library is no longer active
    asked = list(frame.get("asked") or []) if wf is not None else []
    started = time.perf_counter()
    text, _, _ = split_history(messages)
    if not reads_as_language(text, res.known_word, expecting_value=bool(asked)):
        return not_language(text, turn, active)
    model = model_for(ctx, "detector") if ctx.detector_mode != "offline" else None
    # The learned switch model (ranker, belief, detector weights) is on with Context.ranker.
    ranker = load_ranker(ctx.switch_model) if ctx.ranker else None
    params = learned_params(ranker.meta.get("detector") if ranker is not None else None)
    roles = {name: w.role for name, w in res.library.workflows.items()}
    scorer = retriever_scorer(res.retriever)
    finished = wf is not None and env.finished(frame)
    v = decide(messages, active, wf, scorer, ",".join(asked) or None, ctx.detector_mode, model, params, roles=roles,
               finished=finished, filled=frame.get("slots") if frame else None)
    stacked = [f["workflow"] for f in interrupted(stack) if f["workflow"] in res.library.workflows]
    describe = {n: f"{res.library.workflows[n].display_name} {res.library.workflows[n].description}" for n in stacked}
    commands = turn_commands(v, text, turn, active=active, asked=asked, stacked=stacked, describe=describe,
                             active_about=f"{wf.name} {wf.description}" if wf is not None else "",
                             finished=finished, idle=not stack)
    # re-verify the active workflow's pick on this turn (belief) — not once the task has run to its end unless
    # the user says the pick was wrong: its calls are made and answered, and a follow-up ("and the savings
    # one?", "thanks, bye") would only turn it into another task; a new task is a search
    if ctx.revise and wf is not None and not (finished and not is_correction(text)):
        _, agent, _ = split_history(messages)
        ev = evidence(text, agent, scorer(text))
        seen = [f["workflow"] for f in stack]
        commands += revision_commands(ranker, frame, ev, res.library, seen, turn, commands, messages, scorer,
                                      dense_scorer(res.retriever))
    reading = reading_of(text)
    migrated = bool(state.get("turn")) and not state.get("version")
    if migrated:
        reading["migrated"] = True  # a thread checkpointed before the dialogue stack: progress not carried over
    dumped = dump(commands)
    return {
        "turn": turn,
        "version": SCHEMA_VERSION,
        "reading": reading,
        "commands": dumped,
        # what the router looks for: the turn's own request ("never mind X, I need a hotel" -> "I need a hotel")
        "search_query": next((c["query"] for c in dumped if c.get("command") == "start_flow" and c.get("query")),
                             v.search_query) if v.action == "SEARCH" else "",
        "user_intention": v.user_intention,
        "trace": [{"event": "user", "turn": turn, "text": text, "workflow": active, "decision": decision(dumped),
                   "commands": [c["command"] for c in dumped], "out_of_scope": v.out_of_scope,
                   "confidence": round(v.confidence, 3), "policy": v.policy,
                   "elapsed_ms": round((time.perf_counter() - started) * 1000, 2),
                   # what the learned detector read (on the turns its score decides): the training rows
                   **({"detector_row": {k: round(x, 4) for k, x in v.row.items()}} if v.row else {})}],
    }
