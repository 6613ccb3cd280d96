"""The offline, deterministic extractor: one task's conversations -> one PDL workflow (process mining).

1. Traces: each conversation's agent steps in order (a named action, or an API call with its arguments
   and result), consecutive repeats merged (a re-run query keeps its last result), with the user's
   words right after each step.
2. Nodes: steps performed in at least ``node_support`` of the task's conversations, and rarer ones (down to
   ``ordered_support``) that hold a fixed place in the order of those (a question asked only when the user
   had not said it already) unless another task performs them more often.  Closings are left out: a step
   ending nearly every conversation it appears in, when the desk shares it or it follows no one step
   (a farewell closes whatever came before; a call's own outcome that ends the conversation stays).
3. Directly-follows graph over the traces projected onto those nodes; an edge stays when it holds
   ``edge_min`` transitions and ``edge_share`` of its source's outgoing ones.  *Skip* edges (a -> c
   where some b is usually between them and a -> b -> c are edges: the user gave the answer early, so
   the agent skipped b) are dropped, as in a transitive reduction of the eventually-follows order.
4. Branches: a node with several successors keeps a successor only when the data explain it —
   after an API call by its result (empty vs found: ``query_success``/``query_failure``; else the
   value of one returned field the API is documented to return, written as a real PDL test
   ``Field in [...]``; else whether the result states a good or bad outcome, ``available``/
   ``unavailable`` as ``semantics.result_polarity`` reads it at run time), after a question by
   the user's answer: whether it contains a value the latest call returned (``correct``/``incorrect``),
   else its yes/no as the executor's own detector reads it (``polarity``, passed in), else (no detector)
   the word most specific to the answers that led there.
   Unexplained successors are dropped; the most frequent one is the default (``else``).  An outcome
   left as a dead end rejoins where its sibling outcome closes, when conversations go that way.
5. The workflow: slots and API parameters from the call arguments (types from the values, required
   when given in most calls, constant ones fixed per call node as ``# node: Arg = value``; described
   in words with the spelling of values written with digits quoted, enums when their values form a
   closed set of words); the slot an asking reply collects =
   the argument whose later value the user's reply contains most often (lower confidence bound);
   ANSWER templates = the agent's most frequent phrasing with slot/result values replaced by
   ``${Name}``; the procedure compiled from the graph by ``importers.mermaid.compile_graph`` (loops,
   merges, preconditions from dominating API calls).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..importers.common import escape_template
from ..importers.mermaid import Edge, Flowchart, Node, NodeAction, compile_graph, pystr
from ..pdl import BUILTIN_ANSWERS, Answer, Api, Binding, Slot, Workflow
from ..semantics import result_polarity
from ..text import split_identifier
from .transcripts import ApiCall, Transcript

START, END = "__start__", "__end__"
FAILURE, SUCCESS = "query_failure", "query_success"  # the PDL runtime's outcome words for API results


@dataclass
class MiningConfig:
    node_support: float = 0.12  # share of conversations that must perform a step for it to be a node
    edge_share: float = 0.1  # share of a node's outgoing transitions an edge needs
    edge_min: int = 2  # and at least this many transitions
    skip_order: float = 0.6  # b is "between" a and c when a precedes b and b precedes c this often
    branch_gain: float = 0.05  # a result test must predict the successor this much better than the majority
    answer_gain: float = 0.2  # so must the user's answer (words are noisier than returned values)
    answer_support: float = 0.02  # replies used this often are ANSWERs even outside the procedure
    slot_share: float = 0.3  # an asking reply collects an argument its answers contain this often (lower bound)
    enum_max: int = 12  # an argument with at most this many distinct values, each repeated, is an enum
    enum_closed: int = 30  # so is one with at most this many whose values recur ``enum_recur`` times on average
    enum_recur: float = 10.0
    example_share: float = 0.5  # free-text values this often written with digits and more: quote their spelling
    examples: int = 3  # (this many of the most frequent)
    param_share: float = 0.1  # an argument given this often is a parameter
    required_share: float = 0.85  # an argument given this often is a required parameter
    fixed_share: float = 0.9  # an argument with one value this often at a call node is fixed there
    fixed_min: int = 5  # (over at least this many calls: one conversation fixes nothing)
    pooled: float = 0.5  # a step common to the desk needs only this share of node_support here
    ordered_support: float = 0.03  # a rarer step with a fixed place in the order needs only this share
    ordered_share: float = 0.9  # (it precedes, or follows, each kept step this often)
    closing: float = 0.9  # a step ending this share of the conversations performing it is a closing
    closing_min: int = 5  # (over at least this many conversations)
    closing_pred: float = 0.5  # and following no one step in more than this share of its runs
    rejoin: bool = True  # a call's dead-end outcome rejoins where its sibling outcome closes (see mine_graph)
    loops: bool = True  # a transition back to a step the conversation already ran is a loop edge, not an order


@dataclass
class StepOcc:
    """One step performed in one conversation."""

    name: str
    text: str = ""
    api: ApiCall | None = None
    reply: str = ""  # the user's words after the step, before the agent's next step
    prior: dict[str, Any] = field(default_factory=dict)  # values known when it ran (args + results so far)
    last_result: dict[str, Any] = field(default_factory=dict)  # what the latest API call before it returned


@dataclass
class MinedGraph:
    nodes: dict[str, int]  # node -> conversations performing it
    api_of: dict[str, str]  # API-call node -> API name
    edges: dict[tuple[str, str], int]  # kept edges -> transitions
    labels: dict[tuple[str, str], str] = field(default_factory=dict)  # branch edge -> outcome label
    tests: dict[tuple[str, str], str] = field(default_factory=dict)  # branch edge -> PDL test
    start: str = ""
    conversations: int = 0

    def reachable(self) -> list[str]:
        seen, order, todo = set(), [], [self.start]
        while todo:
            n = todo.pop()
            if n in seen or n not in self.nodes:
                continue
            seen.add(n)
            order.append(n)
            todo.extend(b for (a, b) in self.edges if a == n)
        return order


def traces(transcripts: Iterable[Transcript]) -> list[list[StepOcc]]:
    out = []
    for t in transcripts:
        steps: list[StepOcc] = []
        known: dict[str, Any] = {}
        last: dict[str, Any] = {}
        for turn in t.turns:
            if turn.speaker == "user":
                if steps:
                    steps[-1].reply = (steps[-1].reply + " " + turn.text).strip()
                continue
            name = turn.step
            if name is None:
                continue
            if turn.api is not None:
                known.update({k: v for k, v in turn.api.args.items() if v not in (None, "")})
            occ = StepOcc(name, turn.text, turn.api, prior=dict(known), last_result=dict(last))
            if turn.api is not None:
                last = dict(turn.api.result or {})
                known.update(last)
            if steps and steps[-1].name == name:
                if turn.api is not None:  # a re-run call: the branch follows its last result
                    steps[-1].api = turn.api
                continue
            steps.append(occ)
        if steps:
            out.append(steps)
    return out


def _first_positions(seq: list[str]) -> dict[str, int]:
    pos: dict[str, int] = {}
    for i, n in enumerate(seq):
        pos.setdefault(n, i)
    return pos


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool)) and len(str(v)) <= 60


def _result_split(occs: list[tuple[StepOcc, str]], gain: float, fields: set[str] | None = None
                  ) -> tuple[str, dict[str, set]] | None:
    """The result feature that best predicts the successor: ("", {succ: {"empty"|"found"}}) or
    (field, {succ: {values}}); None when nothing beats the majority by ``gain``.  ``fields``: the fields
    the API is documented to return (None = unknown); a branch never tests a field the API does not
    return, however often the recorded results held it."""
    succ = Counter(s for _, s in occs)
    base = succ.most_common(1)[0][1] / len(occs)
    feats: dict[str, list[tuple[Any, str]]] = defaultdict(list)
    for o, s in occs:
        res = (o.api.result if o.api else None) or {}
        feats[""].append(("found" if res else "empty", s))
        for k, v in res.items():
            if _scalar(v) and (fields is None or k in fields):
                feats[k].append((v, s))
    best = None
    for f, pairs in feats.items():
        if len(pairs) < 0.8 * len(occs) and f:
            continue
        by_val: dict[Any, Counter] = defaultdict(Counter)
        for v, s in pairs:
            by_val[v][s] += 1
        if len(by_val) < 2 or len(by_val) > 8:
            continue
        acc = sum(c.most_common(1)[0][1] for c in by_val.values()) / len(occs)
        if acc - base >= gain and (best is None or acc > best[0] + 1e-9 or (abs(acc - best[0]) < 1e-9 and f == "")):
            mapping: dict[str, set] = defaultdict(set)
            for v, c in by_val.items():
                mapping[c.most_common(1)[0][0]].add(v)
            best = (acc, f, dict(mapping))
    return (best[1], best[2]) if best else None


def _binary_split(feats: list[tuple[bool | None, str]], gain: float, labels: tuple[str, str]
                  ) -> dict[str, str] | None:
    """``{successor: labels[0] | labels[1]}`` when a true/false feature of each transition (None = not
    known; those follow the majority) predicts the successor better than the majority by ``gain``."""
    by: dict[bool, Counter] = {True: Counter(), False: Counter()}
    for f, s in feats:
        if f is not None:
            by[f][s] += 1
    if not by[True] or not by[False]:
        return None
    s_t, s_f = by[True].most_common(1)[0][0], by[False].most_common(1)[0][0]
    if s_t == s_f:
        return None
    counts = Counter(s for _, s in feats)
    major = counts.most_common(1)[0][0]
    acc = sum((major if f is None else (s_t if f else s_f)) == s for f, s in feats) / len(feats)
    return {s_t: labels[0], s_f: labels[1]} if acc - counts[major] / len(feats) >= gain else None


def _polarity_split(occs: list[tuple[StepOcc, str]], gain: float, polarity: Callable[[str], bool | None]
                    ) -> dict[str, str] | None:
    """``{successor: "yes"|"no"}`` by the user's yes/no (as ``polarity`` reads it, the executor's own
    reading)."""
    return _binary_split([(polarity(o.reply) if o.reply else None, s) for o, s in occs], gain, ("yes", "no"))


def _outcome_split(occs: list[tuple[StepOcc, str]], gain: float) -> dict[str, str] | None:
    """``{successor: "available"|"unavailable"}`` by whether the call's recorded result states a good or a
    bad outcome (``semantics.result_polarity``: "Unavailable", "Reservation Failed").  The branch then
    reads the outcome the running API states in its own words — the fallback when no documented field
    explains the successor."""
    return _binary_split([(result_polarity((o.api.result if o.api else None) or {}), s) for o, s in occs], gain,
                         ("available", "unavailable"))


def _match_split(occs: list[tuple[StepOcc, str]], gain: float) -> dict[str, str] | None:
    """``{successor: "correct"|"incorrect"}`` by whether the user's reply contains a value the latest API
    call returned (an expected answer, a code)."""
    def hit(o: StepOcc) -> bool:
        low = o.reply.lower()
        return any(_scalar(v) and not isinstance(v, bool) and len(str(v)) >= 2 and str(v).lower() in low
                   for v in o.last_result.values())
    return _binary_split([(hit(o), s) for o, s in occs], gain, ("correct", "incorrect"))


def _answer_split(occs: list[tuple[StepOcc, str]], gain: float) -> dict[str, str] | None:
    """The word most specific to the user's answers leading to each successor; None when those words do
    not predict the successor better than the majority by ``gain``."""
    by_succ: dict[str, list[set[str]]] = defaultdict(list)
    for o, s in occs:
        by_succ[s].append(_tokens(o.reply))
    if len(by_succ) < 2:
        return None
    df_all = Counter(w for sets in by_succ.values() for ws in sets for w in ws)
    n_all = len(occs)
    words: dict[str, str] = {}
    for s, sets in by_succ.items():
        df = Counter(w for ws in sets for w in ws)
        n = len(sets)

        def score(w: str) -> float:  # smoothed log-odds of the word inside vs outside this successor
            inside = (df[w] + 0.5) / (n + 1)
            outside = (df_all[w] - df[w] + 0.5) / (n_all - n + 1)
            return math.log(inside / outside) * min(1.0, df[w] / max(2.0, 0.2 * n))
        cands = [w for w in df if df[w] >= 2]
        if cands:
            words[s] = max(cands, key=lambda w: (round(score(w), 6), -len(w), w))  # ties: the shorter word
    if len(set(words.values())) < len(words) or len(words) < 2:
        return None
    # accuracy of "the successor whose word the reply contains (else the majority)"
    major = Counter(s for _, s in occs).most_common(1)[0][0]
    hit = 0
    for o, s in occs:
        toks = _tokens(o.reply)
        guess = next((t for t, w in words.items() if w in toks and t != major), major)
        hit += guess == s
    base = Counter(s for _, s in occs).most_common(1)[0][1] / n_all
    return words if hit / n_all - base >= gain else None


def step_key(o: StepOcc) -> str:
    """A step's identity across tasks: API-call steps of different APIs differ even when named alike."""
    return f"{o.name}@{o.api.name}" if o.api is not None else o.name


def step_support(trs: list[list[StepOcc]]) -> dict[str, float]:
    """Share of the conversations performing each step (by ``step_key``)."""
    c = Counter(k for tr in trs for k in {step_key(o) for o in tr})
    return {k: v / max(1, len(trs)) for k, v in c.items()}


def common_steps(supports: dict[str, dict[str, float]], shared: float = 0.25, support: float = 0.1,
                 at_least: int = 3) -> dict[str, float]:
    """Steps a ``shared`` share of the tasks, and ``at_least`` tasks, perform (in ``support`` of their
    conversations) -> their mean support over all tasks: how often the desk does it, a steadier estimate
    than one task's.  A desk of one or two tasks has no common steps: every step is its own."""
    tasks = max(1, len(supports))
    keys = {k for sup in supports.values() for k in sup}
    return {k: sum(sup.get(k, 0.0) for sup in supports.values()) / tasks for k in keys
            if sum(1 for sup in supports.values() if sup.get(k, 0.0) >= support) >= max(at_least, shared * tasks)}


def foreign_steps(supports: dict[str, dict[str, float]], ratio: float = 2.5, shared: float = 0.25,
                  support: float = 0.1) -> dict[str, set[str]]:
    """Per task, the steps another task performs ``ratio`` times more often: they leaked in from
    conversations that moved to another task without saying so, and are not this task's steps.
    A step that a ``shared`` share of the tasks perform (in ``support`` of their conversations) is common
    to the desk (a greeting, asking the name): it belongs to every task that performs it."""
    common = common_steps(supports, shared, support)
    out: dict[str, set[str]] = {}
    for task, sup in supports.items():
        out[task] = {k for k, v in sup.items() if k not in common
                     and any(o.get(k, 0.0) >= ratio * v for t, o in supports.items() if t != task)}
    return out


def mine_graph(trs: list[list[StepOcc]], config: MiningConfig | None = None,
               exclude: set[str] = frozenset(), polarity: Callable[[str], bool | None] | None = None,
               common: dict[str, float] | None = None,
               outputs: Callable[[str], set[str] | None] | None = None,
               contested: set[str] = frozenset()) -> MinedGraph:
    """``exclude``: step keys that are not this task's (``foreign_steps``); ``polarity``: reads a user
    reply as yes (True) / no (False) / neither (None) — when given, answer branches are yes/no branches
    (what the offline executor can judge); without it, each is labelled by its most specific word;
    ``outputs(api)``: the fields an API is documented to return (None = unknown); ``contested``: step
    names another task performs more often (no rare step of this one)."""
    cfg = config or MiningConfig()
    n_conv = len(trs)
    whole = trs  # the conversations as they ran: what ends them includes a foreign farewell
    trs = [[o for o in tr if step_key(o) not in exclude] for tr in trs]
    support = Counter(n for tr in trs for n in {o.name for o in tr})
    api_of: dict[str, str] = {}
    for tr in trs:
        for o in tr:
            if o.api is not None:
                api_of.setdefault(o.name, o.api.name)
    # a step common to the desk is judged by the desk's support when this task's own is thin
    kept = {n for n, c in support.items() if c >= cfg.node_support * n_conv
            or (c >= cfg.pooled * cfg.node_support * n_conv and (common or {}).get(n, 0.0) >= cfg.node_support)}
    if cfg.ordered_support < cfg.node_support:
        # a rarer step with a fixed place in the order of the kept ones (a question asked only when the
        # user had not said it already, an outcome of one call) is the procedure's, not an aside — unless
        # another task performs it more often (``contested``: the user's other request leaking in)
        first = [_first_positions([o.name for o in tr]) for tr in trs]

        def fixed_place(n: str) -> bool:
            pairs = 0
            for m in kept:
                ab = sum(1 for p in first if n in p and m in p and p[n] < p[m])
                ba = sum(1 for p in first if n in p and m in p and p[m] < p[n])
                if ab + ba >= cfg.fixed_min:
                    pairs += 1
                    if max(ab, ba) < cfg.ordered_share * (ab + ba):
                        return False
            return pairs > 0
        kept |= {n for n, c in support.items() if n not in kept and c >= cfg.ordered_support * n_conv
                 and n not in contested and fixed_place(n)}
    if cfg.closing < 1.0:
        # a closing: a step that ends nearly every conversation it appears in (the farewell, whether the desk
        # shares it or the task has its own) — conversation management, not the task's procedure.  Judged
        # only on ``closing_min`` conversations: in a handful, every last step would look like a farewell.
        ends = Counter(tr[-1].name for tr in whole if tr)
        pred: dict[str, Counter] = defaultdict(Counter)  # the step each run of a step follows
        for tr in whole:
            for x, y in zip(tr, tr[1:]):
                pred[y.name][x.name] += 1

        def closes(n: str) -> bool:
            # a farewell the desk shares is one; a task's own closes whatever came before it — a step that
            # mostly follows the same one (the result of a call) is the procedure's own last step even
            # when it ends the conversation
            return (support[n] >= cfg.closing_min and ends[n] >= cfg.closing * support[n]
                    and (bool((common or {}).get(n))
                         or max(pred[n].values(), default=0) <= cfg.closing_pred * sum(pred[n].values())))
        kept = {n for n in kept if not closes(n)}
    # project the traces onto the kept nodes (merging repeats again)
    proj: list[list[StepOcc]] = []
    for tr in trs:
        p: list[StepOcc] = []
        for o in tr:
            if o.name not in kept:
                if p:  # the user's words after a dropped step still answer the kept step before it
                    p[-1] = StepOcc(p[-1].name, p[-1].text, p[-1].api, (p[-1].reply + " " + o.reply).strip(), p[-1].prior,
                                    p[-1].last_result)
                continue
            if p and p[-1].name == o.name:
                if o.api is not None:
                    p[-1].api = o.api
                continue
            p.append(o)
        if p:
            proj.append(p)
    dfg: Counter = Counter()
    back: Counter = Counter()  # transitions to a step the conversation already ran
    follow: dict[tuple[str, str], list[StepOcc]] = defaultdict(list)
    before: Counter = Counter()  # (a, b): conversations where a's first run precedes b's
    for p in proj:
        names = [START] + [o.name for o in p] + [END]
        seen: set[str] = set()
        for i in range(len(names) - 1):
            a, b = names[i], names[i + 1]
            again = a in seen  # this run of a repeats an earlier one
            seen.add(a)
            if cfg.loops and (b in seen or again) and b != END:
                # a re-run (the user asked again, changed a constraint): the first run of a step that
                # goes back to one already run is a loop edge, counted apart from the order; the
                # repeated segment after it (a run again -> a step run before) is neither
                if b not in seen:
                    pass  # a new step after a repeated one: an order edge all the same
                elif again:
                    continue
                else:
                    back[a, b] += 1
            dfg[a, b] += 1
            if 0 < i < len(names) - 1:
                follow[a, b].append(p[i - 1])
        pos = _first_positions(names[1:-1])
        for a in pos:
            for b in pos:
                if pos[a] < pos[b]:
                    before[a, b] += 1
    out_total = Counter()
    for (a, _), c in dfg.items():
        out_total[a] += c
    edges = {(a, b): c for (a, b), c in dfg.items()
             if c >= cfg.edge_min and c >= cfg.edge_share * out_total[a] and a != b}

    def precedes(a: str, b: str) -> bool:
        if a == START or b == END:
            return True
        ab, ba = before[a, b], before[b, a]
        return ab + ba > 0 and ab / (ab + ba) >= cfg.skip_order

    def drop_skips(edges: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
        """Skip edges: a -> c with a kept a -> b -> c where b usually lies between them."""
        succs = defaultdict(set)
        for a, b in edges:
            succs[a].add(b)
        skips = set()
        for (a, c) in edges:
            for b in succs[a]:
                if b not in (c, END) and c in succs[b] and precedes(a, b) and precedes(b, c):
                    skips.add((a, c))
                    break
        return {e: c for e, c in edges.items() if e not in skips}

    edges = drop_skips(edges)
    # a loop edge: one that mostly goes back to a step already run
    loop = {e for e, c in back.items() if c > 0.5 * dfg[e]}
    # the start: the step that opens the conversations it appears in most reliably (ties: the more used)
    opens = Counter(p[0].name for p in proj)
    present = Counter(n for p in proj for n in {o.name for o in p})
    start = max(kept, key=lambda n: (round(opens[n] / present[n], 2), present[n]), default="")
    graph = MinedGraph(nodes={n: support[n] for n in kept}, api_of=api_of, start=start, conversations=n_conv,
                       edges={e: c for e, c in edges.items() if START not in e and END not in e})
    # branches: keep the successors the data explain
    for a in list(graph.nodes):
        outs = [b for (x, b) in graph.edges if x == a]
        if len(outs) < 2:
            continue
        occs = [(o, b) for b in outs for o in follow[a, b]]
        if a in api_of:
            split = _result_split(occs, cfg.branch_gain, outputs(api_of[a]) if outputs else None)
            if split is not None:
                f, mapping = split
                for b in outs:
                    vals = mapping.get(b)
                    if not vals:
                        graph.edges.pop((a, b))
                    elif f == "":
                        graph.labels[a, b] = SUCCESS if "found" in vals else FAILURE
                    else:
                        vs = sorted(vals, key=str)
                        graph.labels[a, b] = f"{f} is {' or '.join(map(str, vs))}"
                        graph.tests[a, b] = f"{f} in [{', '.join(pystr(str(v)) for v in vs)}]"
                continue
            words = _outcome_split(occs, cfg.branch_gain)  # no documented field explains it: the stated outcome
        else:
            words = _match_split(occs, cfg.branch_gain) or (  # a returned value is as precise as a result test
                _polarity_split(occs, cfg.answer_gain, polarity) if polarity is not None
                else _answer_split(occs, cfg.answer_gain))
        if words is not None:
            for b in outs:
                if words.get(b):
                    graph.labels[a, b] = words[b]
                else:
                    graph.edges.pop((a, b))
            continue
        top = max(outs, key=lambda b: graph.edges[a, b])  # unexplained: the usual way only
        for b in outs:
            if b != top:
                graph.edges.pop((a, b))
    # a loop nobody explained (no result or answer decides it) is a re-run, not the procedure
    for e in loop:
        if e in graph.edges and e not in graph.labels:
            graph.edges.pop(e)
    # every node reachable: a node left without a way in is attached through its most used incoming
    # transition from a reachable node that either ends (b follows it) or has one successor c that b
    # may precede (b is written between them: an optional step, skipped by the executor when its slot
    # is filled).  Never as an unexplained branch: the executor could not decide it.  Nor inline after a
    # call when b is another outcome of that call (``other_outcome``): it would be said after every call.
    def other_outcome(b: str, c: str) -> bool:
        """After b the conversations rarely go on to c directly: b is not a step between the call and c."""
        return dfg[b, c] < 0.5 * sum(n for (x, _), n in dfg.items() if x == b)

    while True:
        reach = set(graph.reachable())
        loose = [n for n in graph.nodes if n not in reach]
        cands = sorted(((c, a, b) for (a, b), c in dfg.items() if a in reach and b in loose), reverse=True)
        placed = False
        for _, a, b in cands:
            nxt = [c for (x, c) in graph.edges if x == a]
            if not nxt:
                graph.edges[a, b] = dfg[a, b]
            elif len(nxt) == 1 and (a, nxt[0]) not in graph.labels and not (a in api_of and other_outcome(b, nxt[0])) \
                    and (dfg[b, nxt[0]] > 0 or precedes(b, nxt[0])) \
                    and all(y == nxt[0] for (x, y) in graph.edges if x == b):
                graph.edges[b, nxt[0]] = graph.edges.pop((a, nxt[0]))
                graph.edges[a, b] = dfg[a, b]
            else:
                continue
            placed = True
            break
        if not placed:
            break
    # the outcomes of one call rejoin (block structure, as an inductive miner's exclusive choice): an
    # outcome the graph leaves as a dead end goes on to where its sibling outcome ends the procedure, when
    # conversations take that way too — after a failed booking the agent closes as after a successful one
    if cfg.rejoin:
        for a in [x for x in api_of if x in graph.nodes]:
            outs = [b for (x, b) in graph.edges if x == a and (x, b) in graph.labels]
            ends = {b: [c for (x, c) in graph.edges if x == b] for b in outs}
            for b in outs:
                if ends[b]:
                    continue
                for s in outs:
                    if s != b and len(ends[s]) == 1 and not any(x == ends[s][0] for (x, _) in graph.edges) \
                            and dfg[b, ends[s][0]] >= cfg.edge_min:
                        graph.edges[b, ends[s][0]] = dfg[b, ends[s][0]]
                        break
    # a choice nobody explained cannot be decided by an executor: the usual way only
    for a in {x for (x, _) in graph.edges}:
        plain = [b for (x, b) in graph.edges if x == a and (x, b) not in graph.labels]
        if len(plain) > 1:
            top = max(plain, key=lambda b: graph.edges[a, b])
            for b in plain:
                if b != top:
                    graph.edges.pop((a, b))
    graph.nodes = {n: c for n, c in graph.nodes.items() if n in set(graph.reachable())}
    return graph


# --- the workflow ----------------------------------------------------------------------------------

def _type_of(values: list[Any]) -> str:
    if values and all(isinstance(v, bool) for v in values):
        return "boolean"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "integer"
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "number"
    return "string"


def _slot(name: str, values: list[Any], cfg: MiningConfig) -> Slot:
    """A slot from an argument's values.  An enum when the values form a closed set: few distinct strings,
    each given repeatedly, or a larger set of words whose every value recurs on average ``enum_recur`` times
    (the hours a desk books, its venues; not numbers: recurring account numbers are still codes) — the agent
    then reads the value in the spelling the API was given.
    The description is the argument's name in words (``PatientName`` -> "Patient name"): the slot reader
    judges what a value may be (a person's name, a time) from it."""
    kind = _type_of(values)
    counts = Counter(str(v) for v in values)
    words = split_identifier(name).strip()
    description = (words[:1].upper() + words[1:].lower()) if words else name
    if kind == "string" and 2 <= len(counts) and (
            (len(counts) <= cfg.enum_max and min(counts.values()) >= 2 and len(values) >= 5 * len(counts))
            or (len(counts) <= cfg.enum_closed and len(values) >= cfg.enum_recur * len(counts)
                and all(re.search(r"[A-Za-z]", v) for v in counts))):  # recurring numbers are codes, not a set
        return Slot(name=name, description=description, type="enum", enum=sorted(_spellings(values)),
                    required=False)
    if kind == "string":
        description += _written_examples(counts, cfg)
    return Slot(name=name, description=description, type={"boolean": "boolean", "integer": "integer",
                                                          "number": "number"}.get(kind, "string"), required=False)


def _spellings(values: list[Any]) -> Counter:
    """The values' counts, each value under its most frequent spelling: agents type " Ben", "ben" and
    "Ben" for one value, and an enum of all three would hand the API whichever the reader meets first."""
    raw = Counter(str(v).strip() for v in values)
    spelt: dict[str, str] = {}
    for v, _ in sorted(raw.items(), key=lambda kv: (-kv[1], kv[0])):
        spelt.setdefault(v.casefold(), v)
    out: Counter = Counter()
    for v, c in raw.items():
        out[spelt[v.casefold()]] += c
    return out


def _written_examples(counts: Counter, cfg: MiningConfig) -> str:
    """``, e.g. "4 pm", "6 pm"`` when the values are written with digits mixed with words or signs (a time
    as "4 pm", a date as "31/06/1996" or "15th"): the API was given them in that spelling, and a slot
    reader that sees the spelling keeps it rather than its own normal form ("16:00", which the API does
    not know).  Plain numbers and words need no example."""
    mixed = [v for v in counts if re.search(r"\d", v) and re.search(r"[^\d]", v.strip())]
    if sum(counts[v] for v in mixed) < cfg.example_share * sum(counts.values()):
        return ""
    top = sorted(mixed, key=lambda v: (-counts[v], v))[:cfg.examples]
    return ", e.g. " + ", ".join(f'"{v.strip()}"' for v in top)


def _abstract(text: str, values: dict[str, Any]) -> str:
    """The reply with known values replaced by ``${Name}`` (longest values first)."""
    out = escape_template(text.strip())
    pairs = sorted(((str(v), k) for k, v in values.items() if _scalar(v) and len(str(v).strip()) >= 2
                    and not isinstance(v, bool)), key=lambda p: -len(p[0]))
    for value, name in pairs:
        out = re.sub(r"(?<![\w$])" + re.escape(escape_template(value)) + r"(?!\w)", "${" + name + "}", out,
                     flags=re.I)
    return out


def _squash(text: str) -> str:
    """Lower case letters and digits only: "10pm" holds "10 pm", "Dr Morgan" holds "Dr. Morgan"."""
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def _lower_bound(hits: int, n: int, z: float = 1.64) -> float:
    """Wilson's lower bound of a share: 7 of 7 replies is weaker evidence than 54 of 57."""
    if n <= 0:
        return 0.0
    p = hits / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)


def _ident_value(v: Any) -> bool:
    return bool(re.fullmatch(r"[\w.-]+", str(v)))


def build_workflow(name: str, transcripts: list[Transcript], config: MiningConfig | None = None, *,
                   domain: str = "general", role: str = "", description: str = "",
                   binding_for: Callable[[str], Binding | None] | None = None,
                   exclude: set[str] = frozenset(), polarity: Callable[[str], bool | None] | None = None,
                   common: dict[str, float] | None = None,
                   outputs: Callable[[str], set[str] | None] | None = None,
                   contested: set[str] = frozenset()) -> tuple[Workflow, MinedGraph]:
    cfg = config or MiningConfig()
    trs = traces(transcripts)
    if not trs:
        raise ValueError(f"task {name!r}: no conversation performs any agent step (no action or api)")
    graph = mine_graph(trs, cfg, exclude, polarity, common, outputs, contested)
    trs = [[o for o in tr if step_key(o) not in exclude] for tr in trs]
    occs: dict[str, list[StepOcc]] = defaultdict(list)
    for tr in trs:
        for o in tr:
            occs[o.name].append(o)

    # APIs, parameters and fixed arguments per call node
    calls: dict[str, list[ApiCall]] = defaultdict(list)
    for n, api in graph.api_of.items():
        calls[api].extend(o.api for o in occs[n] if o.api is not None)
    fixed: dict[str, dict[str, Any]] = {}
    for n, api in graph.api_of.items():
        args = [o.api.args for o in occs[n] if o.api is not None]
        fx = {}
        for k in {k for a in args for k in a}:
            vals = Counter(str(a[k]) for a in args if k in a)
            v, c = vals.most_common(1)[0]
            if c >= cfg.fixed_share * len(args) and c >= cfg.fixed_min and _ident_value(v):
                fx[k] = v
        fixed[n] = fx
    apis: list[Api] = []
    slot_vals: dict[str, list[Any]] = defaultdict(list)
    api_nodes = [n for n in graph.nodes if n in graph.api_of]
    for api, cs in sorted(calls.items()):
        if not any(graph.api_of[n] == api for n in api_nodes):
            continue
        keys = Counter(k for c in cs for k in c.args)
        props, required = {}, []
        always_fixed = {k for k in keys if all(k in fixed[n] for n in api_nodes if graph.api_of[n] == api)}
        for k, cnt in keys.items():
            if cnt < cfg.param_share * len(cs):
                continue  # an argument given by mistake now and then is not a parameter
            vals = [c.args[k] for c in cs if k in c.args]
            props[k] = {"type": _type_of(vals), "description": k}
            if k not in always_fixed:
                slot_vals[k].extend(vals)
                if cnt >= cfg.required_share * len(cs):
                    required.append(k)
        documented = outputs(api) if outputs else None
        returns = Counter(k for c in cs for k in (c.result or {}) if documented is None or k in documented)
        params: dict = {"type": "object", "properties": props}
        if required:
            params["required"] = sorted(required)
        binding = (binding_for(api) if binding_for else None) or Binding(simulate=True)
        apis.append(Api(name=api, description=f"The {api.replace('_', ' ')} service, as the conversations call it.",
                        parameters=params, returns=sorted(k for k, c in returns.items() if c >= 0.1 * len(cs)),
                        binding=binding))
    api_names = {a.name for a in apis}
    slots = [_slot(k, v, cfg) for k, v in sorted(slot_vals.items())]
    slot_names = {s.name for s in slots}

    # answers: every reply used often enough (the procedure's nodes and the others)
    answer_nodes = [n for n, os_ in occs.items() if n not in graph.api_of
                    and (n in graph.nodes or len({id(o) for o in os_}) >= cfg.answer_support * len(trs))]
    rename = {n: (n + "_reply" if n in api_names or n in BUILTIN_ANSWERS else n) for n in answer_nodes}
    answers: list[Answer] = []
    rate: dict[tuple[str, str], float] = {}  # (answer, argument): share of its replies holding the later value
    known = slot_names | {r for a in apis for r in a.returns} | {p for a in apis for p in a.param_names}
    for n in sorted(answer_nodes):
        texts = Counter()
        hits: Counter = Counter()
        asked = 0
        for tr in trs:
            for i, o in enumerate(tr):
                if o.name != n:
                    continue
                if o.text:  # only names the workflow defines (a value from a leaked step's call is text)
                    texts[_abstract(o.text, {k: v for k, v in o.prior.items() if k in known})] += 1
                later = next((x.api.args for x in tr[i + 1:] if x.api is not None), {})
                if o.reply and later:
                    asked += 1
                    low = _squash(o.reply)
                    for k, v in later.items():
                        if k in slot_names and _scalar(v) and len(_squash(str(v))) >= 2 and _squash(str(v)) in low:
                            hits[k] += 1
        for k, c in hits.items():
            rate[n, k] = _lower_bound(c, asked)
        template = texts.most_common(1)[0][0] if texts else n.replace("_", " ")
        answers.append(Answer(name=rename[n], template=template))
    # each argument is collected by the reply whose answers hold it most often (one argument per reply)
    targets: dict[str, str] = {}
    for (n, k), r in sorted(rate.items(), key=lambda kv: -kv[1]):
        if r >= cfg.slot_share and n not in targets and k not in targets.values():
            targets[n] = k

    # the procedure
    chart = Flowchart()
    for n in graph.reachable():
        chart.nodes[n] = Node(n, n)
    for (a, b), _ in sorted(graph.edges.items(), key=lambda kv: (kv[0][0], kv[1])):
        if a in chart.nodes and b in chart.nodes:
            chart.edges.append(Edge(a, b, graph.labels.get((a, b), ""), graph.tests.get((a, b), "")))
    # the usual successor last: compile_graph writes it as the ``else`` branch
    chart.edges.sort(key=lambda e: (not e.label and not e.test, graph.edges.get((e.src, e.dst), 0)))

    def action(node: Node) -> NodeAction:
        n = node.id
        if n in graph.api_of:
            api = next(a for a in apis if a.name == graph.api_of[n])
            fx = fixed.get(n, {})
            params = api.param_names
            call = f"API.{api.name}({', '.join(p for p in params if p not in fx)})"
            lines = [f"# {n}" + (": " + ", ".join(f"{k} = {v}" for k, v in sorted(fx.items())) if fx else "")]
            lines.append(f"[{', '.join(api.returns)}] = {call}" if api.returns else call)
            return NodeAction(lines, [api.name], f"{n.replace('_', ' ')} result")
        target = targets.get(n)
        line = f"[{target}] = ANSWER.{rename[n]}()" if target else f"ANSWER.{rename[n]}()"
        return NodeAction([line], [rename[n]], n.replace("_", " "))

    if not chart.nodes:
        raise ValueError(f"task {name!r}: no step is frequent enough to form a workflow "
                         f"(node_support {cfg.node_support} of {len(trs)} conversations)")
    compiled = compile_graph(chart, action, api_names)
    for ans in answers:
        ans.precondition = compiled.preconditions.get(ans.name, [])
    tags = ["source:extracted", f"extracted_from:{len(trs)}"] + [f"extracted_label:{v}={k}" for k, v in rename.items() if k != v]
    title = name.replace("_", " ").capitalize()
    wf = Workflow(name=name, title=title, description=description or f"{title}.", domain=domain,
                  role=role or f"{domain}_agent", slots=slots, apis=apis, answers=answers,
                  procedure=compiled.procedure, tags=tags)
    return wf, graph
