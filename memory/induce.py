"""WISE-Flow induction: logged sessions → verified experience blocks (``memory.experience_store.Block``).

Offline and deterministic (process mining over the logged action sequences), in WISE-Flow's three passes:

1. **Partition.** A trajectory is one workflow instance (events of one thread and frame, in log order):
   its workflow answers (replies that ask for nothing) and its tool calls with result/error (a call the controllers rejected counts as a failed attempt),
   confirmations.  *Clean*: succeeded (the last call went through and a workflow answer or an
   ``outcome`` followed it) without a failed attempt; *recovered*: succeeded after one; *failed*: the rest.
2. **Contrast.** For a recovered run, the actions between its first error and the success (what fixed
   it); for a failed run, the actions clean runs of the same workflow always had and it lacked.
3. **Induce per task.** The directly-follows graph and the most frequent clean path give the workflow
   block (planned steps, entry steps, next steps with counts); for every action, each candidate
   prerequisite — an earlier successful action, a confirmation — is scored on the traces:
   ``support`` (successful runs of the action where it held before), ``confidence`` (their share of the
   action's successful runs) and ``error_share`` (share of the action's *failed* calls where it was
   missing: the absence that precedes errors).  Argument provenance: an argument whose value equals a
   field of an earlier result came from that action (``provides``; a value the log redacted, e.g. a token,
   matches only the same-named field).  Argument values, by the same contrast of failed and successful
   calls (``score_arguments``): an argument whose value *reused* the value another argument had in an
   earlier successful call (``differs``: card_last4 = the PIN just verified), or a date on one side of
   the call's day (``past``/``future``), where successful calls never do so and failed calls do.

**Verification** (the paper leaves it open): a prerequisite is kept when ``support >= min_support`` and
either ``confidence >= min_confidence`` or, with errors to contrast, ``error_share >= min_confidence``
and confidence ≥ 0.5.  An argument prerequisite must be broken at ``min_support`` failed calls and hold
at ``min_confidence`` of the successful ones, and calls that broke it must have failed at that rate
(a value relation the successes also break is no cause of errors).  An action block without a kept
prerequisite is not stored, nor a workflow seen in fewer than ``min_support`` clean runs.

The **LLM variant** (``induce_llm``) follows the paper's prompts — analyse the contrastive trajectories,
draft the workflow JSON (workflows with global prerequisites, entry and planned steps; action blocks
with prerequisites and next steps), reflect and revise — then verifies every prerequisite the model
proposes with the same scores, so a model can add nothing the traces do not bear out; malformed output
falls back to the offline blocks.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from workflows.pdl import BUILTIN_ANSWERS
from workflows.relations import RULE_AGAINST, facts, scalar
from workflows.sanitize import REDACTED

from .events import Event
from .experience_store import Block, Prerequisite, Step

MIN_SUPPORT = 3
MIN_CONFIDENCE = 0.9
TOOL_KINDS = ("tool_result", "tool_error")
KINDS = ("tool_result", "tool_error", "verdict", "interrupt_answer", "reply", "outcome")  # the events induction reads


@dataclass
class Trajectory:
    thread: str
    frame: str
    workflow: str
    steps: list[dict] = field(default_factory=list)  # {"action", "ok", "args", "result", "error", "confirmed"}
    completed: bool = False

    @property
    def calls(self) -> list[dict]:
        return [s for s in self.steps if "ok" in s]


    @property
    def label(self) -> str:
        calls = self.calls
        # succeeded: the last call went through and the workflow answered after it (an outcome, not a question)
        last = max((i for i, s in enumerate(self.steps) if "ok" in s), default=-1)
        answered = any(s.get("reply") for s in self.steps[last + 1:])
        succeeded = bool(calls) and calls[-1]["ok"] and (answered or self.completed)
        if not succeeded:
            return "failed"
        return "recovered" if any(not c["ok"] for c in calls) else "clean"


def trajectories(events: Iterable[Event]) -> list[Trajectory]:
    """Group events into workflow instances (thread, frame).  ``events`` is consumed once, in log order
    (a stream: only the trajectories' steps stay in memory)."""
    by: dict[tuple[str, str], Trajectory] = {}
    confirmed: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in events:
        if not e.frame or not e.workflow:
            continue
        key = (e.thread, e.frame)
        t = by.setdefault(key, Trajectory(e.thread, e.frame, e.workflow))
        if e.kind == "interrupt_answer" and e.data.get("confirmed"):
            confirmed[key].add(e.name)
        elif e.kind in TOOL_KINDS:
            t.steps.append({"action": e.name, "ok": e.kind == "tool_result", "args": e.data.get("args") or {},
                            "result": e.data.get("result") or {}, "error": e.data.get("error") or "",
                            "confirmed": e.name in confirmed[key], "day": e.ts[:10]})
            confirmed[key].discard(e.name)
        elif e.kind == "verdict" and e.data.get("proposal_kind") == "tool" and not e.data.get("ok"):
            # a call the controllers stopped before it reached the tool is a failed attempt too
            t.steps.append({"action": e.name, "ok": False, "args": e.data.get("args") or {}, "result": {},
                            "error": f"rejected: {e.data.get('reason') or ''}", "confirmed": False})
        elif e.kind == "outcome":
            t.completed = True
        elif e.kind == "reply" and e.name and e.name not in BUILTIN_ANSWERS and not e.name.startswith("pattern_") \
                and e.name != "safe_reply" and not e.data.get("asks"):
            t.steps.append({"action": e.name, "reply": True})
    return [by[k] for k in sorted(by, key=lambda k: (by[k].workflow, k))]


def _same(a: Any, b: Any) -> bool:
    return a is not None and b is not None and str(a).strip().lower() == str(b).strip().lower() and str(a).strip() != ""


def _before(t: Trajectory, i: int) -> tuple[set[str], dict[str, dict]]:
    """Actions that succeeded before step ``i`` and their latest results."""
    done, results = set(), {}
    for s in t.steps[:i]:
        if s.get("ok"):
            done.add(s["action"])
            results[s["action"]] = s["result"]
    return done, results


def score_prerequisites(trajs: list[Trajectory], workflow: str, action: str) -> dict[tuple[str, str], Prerequisite]:
    """Every candidate prerequisite of ``action`` with its support, confidence and error share."""
    ok_runs, failed_calls = 0, 0
    held: Counter = Counter()
    held_at_error: Counter = Counter()
    provides: dict[str, Counter] = defaultdict(Counter)
    candidates: set[tuple[str, str]] = set()
    for t in trajs:
        if t.workflow != workflow:
            continue
        seen_ok = False
        for i, s in enumerate(t.steps):
            if s["action"] != action or "ok" not in s:
                continue
            done, results = _before(t, i)
            here = {("action", a) for a in done if a != action}
            if s.get("confirmed"):
                here.add(("confirmation", action))
            if s["ok"] and not seen_ok:  # the first successful call of the run counts once
                seen_ok = True
                ok_runs += 1
                held.update(here)
                candidates |= here
                for arg, value in s["args"].items():
                    for src, res in results.items():
                        if src != action and any(_same(value, v) and (value != REDACTED or k == arg)
                                                 for k, v in res.items() if not isinstance(v, (list, dict))):
                            provides[src][arg] += 1
            elif not s["ok"]:
                failed_calls += 1
                held_at_error.update(here)  # missing at the errors = failed_calls - held there
    # candidates also include what was missing at errors but held in successful runs (the contrast)
    out = {}
    for kind, name in sorted(candidates):
        support = held[(kind, name)]
        miss = failed_calls - held_at_error[(kind, name)]
        prov = sorted(a for a, n in provides.get(name, {}).items() if n >= max(1, support // 2)) if kind == "action" else []
        out[(kind, name)] = Prerequisite(kind=kind, requires=name, provides=prov, support=support,
                                         confidence=round(support / ok_runs, 4) if ok_runs else 0.0,
                                         error_share=round(miss / failed_calls, 4) if failed_calls else 0.0,
                                         errors=miss)
    return out


def score_arguments(trajs: list[Trajectory], workflow: str, action: str) -> dict[tuple[str, str, str], Prerequisite]:
    """Argument-value prerequisites of ``action`` by contrast: every value fact (``workflows.relations``) seen
    at a failed call (a tool error, not a controller's stop) is a candidate rule against it; ``support``/``confidence``:
    the successful calls (with the argument) that kept the rule, ``errors``/``error_share``: the failed
    calls that broke it; ``broken_ok``: the successful calls that broke it (kept apart for ``verified``)."""
    at_ok: Counter = Counter()
    at_err: Counter = Counter()
    with_arg: Counter = Counter()
    failed = 0
    for t in trajs:
        if t.workflow != workflow:
            continue
        done: dict[str, dict] = {}
        for s in t.steps:
            if "ok" not in s:
                continue
            if s["action"] == action and (s["ok"] or not s["error"].startswith("rejected")):
                seen = facts(s["args"], {a: x for a, x in done.items() if a != action}, s.get("day", ""))
                if s["ok"]:
                    at_ok.update(seen)
                    with_arg.update(a for a, v in s["args"].items() if scalar(v) is not None)
                else:
                    failed += 1
                    at_err.update(seen)
            if s["ok"]:
                done[s["action"]] = s["args"]
    out = {}
    for (arg, fact, other), errors in sorted(at_err.items()):
        n_ok = with_arg[arg]
        kept = n_ok - at_ok[(arg, fact, other)]
        out[(arg, RULE_AGAINST[fact], other)] = Prerequisite(
            kind="argument", requires=arg, relation=RULE_AGAINST[fact], other=other, support=kept,
            confidence=round(kept / n_ok, 4) if n_ok else 0.0, errors=errors,
            error_share=round(errors / failed, 4) if failed else 0.0, broken_ok=at_ok[(arg, fact, other)])
    return out


def verified(p: Prerequisite, min_support: int = MIN_SUPPORT, min_confidence: float = MIN_CONFIDENCE) -> bool:
    if p.support < min_support:
        return False
    if p.kind == "argument":  # broken at errors, kept by the successes, and breaking it fails at that rate
        return p.errors >= min_support and p.confidence >= min_confidence \
            and p.errors / (p.errors + p.broken_ok) >= min_confidence
    if p.confidence >= min_confidence:
        return True
    return p.errors >= min_support and p.error_share >= min_confidence and p.confidence >= 0.5


def _path(t: Trajectory) -> tuple[str, ...]:
    """The run's successful tool calls, in order, without immediate repeats."""
    out: list[str] = []
    for s in t.calls:
        if s["ok"] and (not out or out[-1] != s["action"]):
            out.append(s["action"])
    return tuple(out)


def induce(events: Iterable[Event], library: str, *, min_support: int = MIN_SUPPORT,
           min_confidence: float = MIN_CONFIDENCE) -> tuple[list[Block], dict[str, Any]]:
    """Verified blocks from ``events`` (in log order, e.g. ``memory.events.iter_events``; ``library``: the
    library key) and the induction's statistics."""
    seen = [0]

    def counted(stream: Iterable[Event]):
        for e in stream:
            seen[0] += 1
            yield e

    trajs = trajectories(counted(events))
    by_wf: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_wf[t.workflow].append(t)
    blocks: list[Block] = []
    stats: dict[str, Any] = {"events": seen[0], "trajectories": len(trajs), "partition": dict(Counter(t.label for t in trajs)),
                             "candidates": 0, "kept": 0, "workflows": len(by_wf)}
    for wf in sorted(by_wf):
        runs = by_wf[wf]
        clean = [t for t in runs if t.label == "clean"]
        good = [t for t in runs if t.label != "failed"]
        if len(clean) + len([t for t in runs if t.label == "recovered"]) < min_support:
            continue
        paths = Counter(_path(t) for t in clean or good)
        planned = list(max(paths.items(), key=lambda kv: (kv[1], len(kv[0]), kv[0]))[0]) if paths else []
        follows: Counter = Counter()
        entries: Counter = Counter()
        for t in good:
            p = _path(t)
            if p:
                entries[p[0]] += 1
            follows.update(zip(p, p[1:]))
        nexts = [Step(action=f"{a} -> {b}", count=n, condition=f"after {a} succeeded")
                 for (a, b), n in sorted(follows.items(), key=lambda kv: (-kv[1], kv[0]))]
        blocks.append(Block(id=f"{library}:{wf}:workflow", kind="workflow", library=library, workflow=wf,
                            description=f"How {wf} runs in the logged sessions.", planned_steps=planned,
                            entry_steps=[a for a, _ in entries.most_common(3)], next_steps=nexts,
                            support=len(clean), confidence=round(len(clean) / len(runs), 4), sessions=len(runs)))
        actions = sorted({s["action"] for t in runs for s in t.calls})
        for action in actions:
            scored = [*score_prerequisites(runs, wf, action).values(), *score_arguments(runs, wf, action).values()]
            stats["candidates"] += len(scored)
            kept = [p for p in scored if verified(p, min_support, min_confidence)]
            stats["kept"] += len(kept)
            if not kept:
                continue
            errors = Counter(s["error"] for t in runs for s in t.calls if s["action"] == action and not s["ok"])
            desc = _describe(action, kept)
            if errors:
                desc += f" Without it, {action} failed {sum(errors.values())}x (e.g. {errors.most_common(1)[0][0][:120]})."
            blocks.append(Block(id=f"{library}:{wf}:action:{action}", kind="action", library=library, workflow=wf,
                                action=action, description=desc, prerequisites=kept,
                                support=min(p.support for p in kept), confidence=min(p.confidence for p in kept),
                                sessions=len(runs)))
        contrast = contrast_text(runs)
        if contrast:
            blocks.append(Block(id=f"{library}:{wf}:contrast", kind="contrast", library=library, workflow=wf,
                                description=contrast, support=len(runs) - len(clean), sessions=len(runs)))
    return blocks, stats


def _describe(action: str, kept: list[Prerequisite]) -> str:
    parts = [p.requires + (f" (its result gives {', '.join(p.provides)})" if p.provides else "")
             for p in kept if p.kind == "action"]
    parts += ["confirm with the user" for p in kept if p.kind == "confirmation"]
    parts += [f"{p.requires} must not reuse the value of {p.other} (ask the user)" if p.relation == "differs"
              else f"{p.requires} must be a date in the {p.relation} (ask the user)"
              for p in kept if p.kind == "argument"]
    return f"Before {action}: " + ", ".join(parts) + "."


def contrast_text(runs: list[Trajectory]) -> str:
    """WISE-Flow's contrastive pass as text: what recovered runs did after an error, what failed runs lacked."""
    clean_sets = [set(_path(t)) for t in runs if t.label == "clean"]
    always = set.intersection(*clean_sets) if clean_sets else set()
    fixes: Counter = Counter()
    lacks: Counter = Counter()
    for t in runs:
        if t.label == "recovered":
            first = next(i for i, s in enumerate(t.calls) if not s["ok"])
            fixes[" -> ".join(dict.fromkeys(s["action"] for s in t.calls[first + 1:] if s["ok"]))] += 1
        elif t.label == "failed" and always:
            lacks.update(always - set(_path(t)))
    parts = []
    if fixes:
        what, n = fixes.most_common(1)[0]
        parts.append(f"Recovered runs ({sum(fixes.values())}) went on with {what or 'a retry'} after the error ({n}x).")
    if lacks:
        parts.append("Failed runs lacked what every clean run had: "
                     + ", ".join(f"{a} ({n}x)" for a, n in sorted(lacks.items(), key=lambda kv: (-kv[1], kv[0]))) + ".")
    return " ".join(parts)


# --- the LLM variant ------------------------------------------------------------------------------------

ANALYSE = ("You are analysing agent trajectories for the task '{task}'. Below are contrastive pairs of a clean "
           "success and a recovered success or failure, as action sequences with tool errors.\n{pairs}\n"
           "Analyse: which actions, arguments or confirmations must hold before each action; where each argument "
           "value comes from; what the failed runs lacked.")
DRAFT = ("From your analysis, draft the workflow as JSON with keys \"workflows\" (name, description, "
         "global_prerequisite, entry_steps, planned_steps) and \"action_blocks\" (name, is_tool_call, description, "
         "global_prerequisites, scenario_prerequisites, next_steps: [{{\"action\", \"condition\"}}]). Prerequisites "
         "are action names.\nAnalysis:\n{analysis}")
REFLECT = ("Reflect on the draft against the trajectories and revise it: remove prerequisites the clean runs do "
           "not support, add the ones whose absence precedes the errors. Answer with the revised JSON only.\n{draft}")


def _pairs_text(runs: list[Trajectory], limit: int = 4) -> str:
    def show(t: Trajectory) -> str:
        return " ; ".join(f"{s['action']}({'ok' if s['ok'] else 'ERROR: ' + s['error'][:80]})" for s in t.calls)

    clean = [t for t in runs if t.label == "clean"][:limit]
    other = [t for t in runs if t.label != "clean"][:limit]
    return "\n".join(f"- clean: {show(c)}\n  {o.label}: {show(o)}" for c, o in zip(clean, other or clean))


def _json_of(text: str) -> dict | None:
    m = re.search(r"\{.*\}", text or "", re.S)
    if not m:
        return None
    try:
        out = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    return out if isinstance(out, dict) else None


def induce_llm(events: Iterable[Event], library: str, model, *, min_support: int = MIN_SUPPORT,
               min_confidence: float = MIN_CONFIDENCE) -> tuple[list[Block], dict[str, Any]]:
    """The paper's three prompts per task; every proposed prerequisite verified on the traces."""
    events = list(events)
    offline, stats = induce(events, library, min_support=min_support, min_confidence=min_confidence)
    by_wf: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories(events):
        by_wf[t.workflow].append(t)
    out: dict[str, Block] = {b.id: b for b in offline}
    stats["llm"] = {"tasks": 0, "malformed": 0, "proposed": 0, "verified": 0}
    for wf, runs in sorted(by_wf.items()):
        stats["llm"]["tasks"] += 1
        analysis = _ask(model, ANALYSE.format(task=wf, pairs=_pairs_text(runs)))
        draft = _ask(model, DRAFT.format(analysis=analysis))
        revised = _json_of(_ask(model, REFLECT.format(draft=draft))) or _json_of(draft)
        if revised is None:
            stats["llm"]["malformed"] += 1
            continue
        for ab in revised.get("action_blocks") or []:
            if not isinstance(ab, dict) or not ab.get("name"):
                continue
            action = str(ab["name"])
            scored = score_prerequisites(runs, wf, action)
            names = [str(p) for p in (ab.get("global_prerequisites") or []) + (ab.get("scenario_prerequisites") or [])]
            stats["llm"]["proposed"] += len(names)
            kept = [scored[("action", n)] for n in names if ("action", n) in scored
                    and verified(scored[("action", n)], min_support, min_confidence)]
            stats["llm"]["verified"] += len(kept)
            if not kept:
                continue
            bid = f"{library}:{wf}:action:{action}"
            prev = out.get(bid)
            merged = {p.requires: p for p in (prev.prerequisites if prev else [])} | {p.requires: p for p in kept}
            out[bid] = Block(id=bid, kind="action", library=library, workflow=wf, action=action,
                             description=str(ab.get("description") or (prev.description if prev else "")),
                             prerequisites=sorted(merged.values(), key=lambda p: (p.kind, p.requires)),
                             support=min(p.support for p in merged.values()),
                             confidence=min(p.confidence for p in merged.values()), sessions=len(runs), source="llm")
    return sorted(out.values(), key=lambda b: b.id), stats


def _ask(model, prompt: str) -> str:
    from langchain_core.messages import HumanMessage

    reply = model.invoke([HumanMessage(content=prompt)])
    return str(getattr(reply, "content", reply) or "")
