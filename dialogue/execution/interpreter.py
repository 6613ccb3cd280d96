"""The offline PDL interpreter: a workflow's procedure read as a state machine over one frame.

Given what has run (``frame.executed``), the filled slots and the returned values, ``next_action``
walks the procedure tree and returns the next node to perform:

- a call whose node already ran is skipped (each run is consumed once, so ``while`` bodies re-run);
- ``[a, b] = ANSWER.x()`` collects slots: when they are all filled (the user gave them early —
  procedure jumping) the question is skipped; ``ANSWER.request_information("slot")`` asks for it;
- an API call is next when reached; missing required parameters (for an API that declares none
  required and no question of the workflow's own for them: the arguments its call passes) turn it
  into a question (asked once);
- ``if``/``while`` conditions are evaluated by ``workflows.semantics`` (the same evaluator the
  controllers use); an undecidable ``COND("...")`` makes the executor ask the user once (the answer
  is recorded in ``frame.conditions``);
- ``while`` loops re-run while their condition holds after the body, at most ``max_loops`` times.

An ``Interpreter`` holds only what is parsed from the workflow (built once per workflow, shared by
every run and thread); each ``next_action`` call walks with a state of its own.

Going back (``invalidate``): when a slot changes after an API used it, that API and everything
executed after it are dropped from ``executed`` so they run again with the new value.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from workflows.pdl import Workflow
from workflows.procedure import Break, Call, If, Procedure, Step, While, iter_calls, iter_steps, parse_procedure
from workflows.semantics import UNKNOWN, Scope, condition_key, evaluate, truthy
from workflows.text import content_words, split_identifier, stemmed

from ..frames import Frame, scope_of

Kind = Literal["api", "answer", "ask", "ask_cond", "done"]


@dataclass
class NextAction:
    kind: Kind
    name: str = ""  # API or ANSWER name ("request_information" for asks)
    args: dict[str, Any] = field(default_factory=dict)  # API arguments
    slots: list[str] = field(default_factory=list)  # slots to ask for / collected by the answer
    condition: str = ""  # natural-language condition to ask about (kind ask_cond)
    cond_key: str = ""  # where the yes/no answer is recorded (Frame.conditions)
    line: int = 0


# words an asking reply and the slot it fills commonly use for the same thing
_SYNONYMS = {"location": ("city", "place", "address", "area"), "city": ("location",), "date": ("day",),
             "day": ("date",), "guests": ("people", "party", "size"), "price": ("cost", "budget"),
             "cost": ("price",), "destination": ("arrival",), "departure": ("origin", "from"),
             "dob": ("birth",), "bedrooms": ("rooms",), "booking": ("reservation",)}


def _split_words(name: str) -> list[str]:
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name or "")]


_FIXED = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*([\w.-]+)")


def fixed_args(comment: str) -> dict[str, str]:
    """``# query_check: RequestType = Check`` above a call fixes that argument (importers write it)."""
    return {k: v for k, v in _FIXED.findall(comment or "")}


def _implied_targets(workflow: Workflow, answer: str) -> list[str]:
    """Slots an ``..._ask_<x>`` ANSWER collects when the procedure does not assign them (imported
    flowcharts): the slot whose name/description shares the most words with the answer's name,
    words of the workflow's own name ignored unless nothing else is left."""
    words = set(_split_words(answer))
    found: list[str] = []
    spec = workflow.answer(answer)
    asks = spec is None or not spec.template or "?" in spec.template  # a reply that only states things asks nothing
    if "ask" in words and asks:
        words.discard("ask")
        own = set(_split_words(workflow.name))
        words = (words - own) or words
        scored = []
        words |= {syn for w in words for syn in _SYNONYMS.get(w, ())}
        for slot in workflow.slots:
            sw = set(_split_words(slot.name)) | set(_split_words(slot.description))
            shared = words & sw
            person = bool(sw & {"customer", "full", "user", "guest", "client", "person", "renter", "patient",
                                "host"})
            if shared == {"name"} and (len(words) > 1 or not person):
                continue  # "name" alone is too weak unless the answer asks for the user's own name
            if shared:
                scored.append((len(shared), person and "name" in words, slot.name))
        scored.sort(reverse=True)
        if scored and (len(scored) == 1 or scored[0][:2] != scored[1][:2]):
            found = [scored[0][2]]
    return found



def message_words(text: str) -> set[str]:
    """Content words, with a 4-letter stem for longer ones so "rain" meets "raining"."""
    return stemmed(content_words(text))


def _vocabulary(wf: Workflow) -> set[str]:
    """Words of the workflow's own definition (names, descriptions, enums, templates)."""
    parts = [wf.name, wf.description, wf.detailed_description]
    parts += [f"{s.name} {s.description} {' '.join(s.enum or [])}" for s in wf.slots]
    parts += [f"{a.name} {a.template}" for a in wf.answers] + [f"{a.name} {a.description}" for a in wf.apis]
    words = message_words(" ".join(split_identifier(p or "") for p in parts))
    return words | {w[:-1] for w in words if w.endswith("s")}


class _BreakLoop(Exception):
    pass


class Interpreter:
    """What is parsed from one workflow (immutable once built); ``next_action`` walks a frame."""

    def __init__(self, workflow: Workflow, max_loops: int = 3):
        self.workflow = workflow
        self.max_loops = max_loops
        self.procedure: Procedure = parse_procedure(workflow.procedure)
        self.lines = tuple((c.line, c.name) for c in self.procedure.calls())
        in_loops = {c.name for st in iter_steps(self.procedure.steps) if isinstance(st, While) for c in iter_calls(st.body)}
        self.static = Counter(c.name for c in self.procedure.calls() if c.kind == "API" and c.name not in in_loops)
        self.implied = {a.name: _implied_targets(workflow, a.name) for a in workflow.answers}
        askers: dict[str, list[str]] = {}
        for c in self.procedure.calls():
            if c.kind == "ANSWER" and c.name != "request_information":
                for t in c.targets:
                    askers.setdefault(t, []).append(c.name)
        for a in workflow.answers:
            for t in self.implied[a.name]:
                if a.name not in askers.setdefault(t, []):
                    askers[t].append(a.name)
        self._askers = askers
        self.vocabulary = frozenset(_vocabulary(workflow))

    def next_action(self, frame: Frame | dict, reading: dict | None = None,
                    skip: set[str] | frozenset = frozenset()) -> NextAction:
        """The next node for ``frame``; ``reading`` is the turn's reading of the user's message (yes/no,
        "I don't know"); ``skip``: replies the caller decided are not due (e.g. a greeting when the user
        went straight to business)."""
        return _Walk(self, frame, reading, skip).run()

    def call_args(self, frame: Frame | dict, name: str, positional: list[str] | None = None,
                  fixed: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
        return _Walk(self, frame, None, frozenset()).call_args(name, positional, fixed)

    def calls_args(self, frame: Frame | dict, calls: list[tuple[str, list[str], dict[str, str]]],
                   values: dict[str, Any] | None = None) -> list[tuple[dict[str, Any], list[str]]]:
        """``call_args`` of several calls (name, positional, fixed) on the same frame, with one walk;
        ``values``: the frame's values view (``workflows.semantics.values_view``), when the caller has it."""
        walk = _Walk(self, frame, None, frozenset()) if values is None else _Walk.for_args(self, frame, values)
        return [walk.call_args(name, positional, fixed) for name, positional, fixed in calls]

    def implied_targets(self, answer: str) -> list[str]:
        return self.implied.get(answer) or _implied_targets(self.workflow, answer)

    def targets(self, answer: str) -> list[str]:
        """The slots the procedure assigns from ``answer`` (``[a, b] = ANSWER.x()``)."""
        return list(dict.fromkeys(t for c in self.procedure.calls() if c.kind == "ANSWER" and c.name == answer
                                  for t in c.targets))

    def askers(self, slot: str) -> list[str]:
        """The workflow's own ANSWERs that collect ``slot`` (assigned in the procedure, or implied by name)."""
        return self._askers.get(slot, [])

    def latest_round(self, executed: list[str]) -> list[str]:
        """An API written once (outside loops) but run again starts a new round of the same request: what
        ran between its first and its last run belongs to earlier rounds and is dropped for the walk."""
        for api, written in self.static.items():
            runs = [i for i, n in enumerate(executed) if n == api]
            if len(runs) > written:
                executed = executed[:runs[0]] + executed[runs[-1]:]
        return executed


class _Walk:
    """One walk of the procedure over one frame (the per-call state an ``Interpreter`` never keeps)."""

    def __init__(self, interp: Interpreter, frame: Frame | dict, reading: dict | None,
                 skip: set[str] | frozenset):
        self.interp = interp
        self.workflow = interp.workflow
        self.max_loops = interp.max_loops
        self._skip = skip
        self._scope: Scope = scope_of(frame, reading)  # type: ignore[arg-type]
        self._executed = list(frame.get("executed") or [])
        self._declined = frozenset(frame.get("declined") or ())
        self._values = self._scope.values
        self._results = self._scope.results
        self._slots = self._scope.slots
        self._lines = interp.lines

    @classmethod
    def for_args(cls, interp: Interpreter, frame: Frame | dict, values: dict[str, Any]) -> "_Walk":
        """A walk that only reads calls' arguments (``call_args``), given the frame's values view: without
        the scope a walk of the procedure needs (the learned executor asks for them on every turn)."""
        walk = cls.__new__(cls)
        walk.interp, walk.workflow = interp, interp.workflow
        walk._values, walk._slots, walk._results = values, frame.get("slots") or {}, frame.get("results") or {}
        return walk

    @cached_property
    def _left(self) -> Counter:
        """Nodes run in the latest round, by count (the walk consumes them; computed only for a walk, not
        for a call's arguments)."""
        return Counter(self.interp.latest_round(list(self._executed)))

    def run(self) -> NextAction:
        try:
            found = self._walk(self.interp.procedure.steps)
        except _BreakLoop:
            found = None
        return found or NextAction("done")

    def askers(self, slot: str) -> list[str]:
        return self.interp.askers(slot)

    def implied_targets(self, answer: str) -> list[str]:
        return self.interp.implied_targets(answer)

    # Each _walk returns the next action, or None when the steps are complete.
    def _walk(self, steps: list[Step]) -> NextAction | None:
        for i, step in enumerate(steps):
            if isinstance(step, Call):
                following = steps[i + 1] if i + 1 < len(steps) else None
                act = None if self._briefing_not_needed(step, following) else self._call(step)
            elif isinstance(step, If):
                act = self._if(step)
            elif isinstance(step, While):
                act = self._while(step)
            elif isinstance(step, Break):
                raise _BreakLoop()
            else:  # Pass
                act = None
            if act is not None:
                return act
        return None

    def _filled(self, name: str) -> bool:
        v = self._slots.get(name, self._results.get(name))
        return v is not None and v != ""

    def _briefing_not_needed(self, call: Call, following: Step | None) -> bool:
        """A statement right before an API call that tells the user what they may give ("I can search by
        name, location or price") is not due when the user already gave some of that call's parameters."""
        if call.kind != "ANSWER" or call.targets or self._left[call.name] > 0:
            return False
        spec = self.workflow.answer(call.name)
        if spec is None or "?" in spec.template or not (isinstance(following, Call) and following.kind == "API"):
            return False
        api = self.workflow.api(following.name)
        fixed = fixed_args(following.comment)
        params = [p for p in (api.param_names if api else following.args) if p not in fixed and self.workflow.slot(p)]
        return any(self._filled(p) for p in params)

    def _moved_past(self, line: int) -> bool:
        """The conversation already ran a node written later in the procedure (and not consumed by the walk):
        the agent or user skipped this reply, so it is not due any more (procedure jumping)."""
        return any(self._left[node] > 0 for ln, node in self._lines if ln > line)

    def _consume(self, node: str) -> bool:
        if self._left[node] > 0:
            self._left[node] -= 1
            return True
        return False

    def _call(self, call: Call) -> NextAction | None:
        wf = self.workflow
        if call.kind == "ANSWER":
            if call.name == "request_information":
                wanted = [a for a in call.args + call.targets if wf.slot(a) or a in wf.value_names] or call.args
                missing = [s for s in dict.fromkeys(wanted) if not self._filled(s)]
                self._consume(call.name)
                return NextAction("ask", "request_information", slots=missing, line=call.line) if missing else None
            targets = call.targets or self.implied_targets(call.name)
            if targets:
                missing = [t for t in targets if not self._filled(t)]
                asked = self._consume(call.name)
                if not missing:
                    return None  # given already (procedure jumping)
                # a question for only the rest is still this node (recorded under its name), so a later
                # ``request_information`` in the procedure is not taken as already asked
                if asked:  # asked, not (fully) answered: ask again in its own words, or precisely for the rest
                    missing = [t for t in missing if t not in self._declined]
                    if not missing:
                        return None  # the user said they cannot give it: go on without it
                    if len(targets) == 1:
                        return NextAction("answer", call.name, slots=missing, line=call.line)
                    return NextAction("ask", call.name, slots=missing, line=call.line)
                if self._moved_past(call.line):
                    return None
                if len(missing) < len(targets):  # part given already: ask only for the rest
                    return NextAction("ask", call.name, slots=missing, line=call.line)
                return NextAction("answer", call.name, slots=missing, line=call.line)
            if self._consume(call.name) or self._moved_past(call.line) or call.name in self._skip:
                return None
            return NextAction("answer", call.name, line=call.line)
        # API
        if self._consume(call.name):
            return None
        args, missing = self.call_args(call.name, call.args, fixed_args(call.comment))
        executed = set(self._executed)
        for slot in missing:
            askers = self.askers(slot)
            if any(a in executed for a in askers):
                continue  # asked once already and not understood: do not ask again, try with what we have
            if askers:
                # a question for several values, some given already (it was passed over when a lookup ran
                # first): asked for the rest only, not in its full words
                rest = [t for t in self.interp.targets(askers[0]) if not self._filled(t)]
                if slot in rest and len(rest) < len(self.interp.targets(askers[0])):
                    return NextAction("ask", askers[0], slots=rest, line=call.line)
                return NextAction("answer", askers[0], slots=[slot], line=call.line)
            if "request_information" not in executed:
                return NextAction("ask", "request_information", slots=missing, line=call.line)
        return NextAction("api", call.name, args=args, line=call.line)

    def call_args(self, name: str, positional: list[str] | None = None,
                  fixed: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
        """Arguments for an API call from slots/results: by parameter name, else by position;
        ``fixed`` values (from the call's comment) win."""
        positional = list(positional or [])
        fixed = fixed or {}
        api = self.workflow.api(name)
        params = api.param_names if api else positional
        required = api.required_params if api else positional
        args: dict[str, Any] = {}
        missing: list[str] = []
        # an API that declares no parameter required says nothing about what it needs: unless the workflow
        # has questions of its own for some of the call's arguments (then those say what it collects), the
        # arguments the procedure's call passes are what it collects
        collects = not required and not any(self.askers(a) for a in positional)
        for i, p in enumerate(params):
            if p in fixed:
                args[p] = fixed[p]
                continue
            source = p if p in self._values else (positional[i] if i < len(positional) else p)
            v = self._values.get(source)
            if v is not None and v != "":
                args[p] = v
            elif p in required or (collects and i < len(positional)):
                # asked for like required ones (once: the call still runs without them when the user has none)
                missing.append(source)
        for p in required:  # required parameters not declared in properties
            if p not in params and not self._filled(p):
                missing.append(p)
        return args, missing

    def _cond(self, test: ast.expr, source: str, line: int) -> tuple[Any, NextAction | None]:
        value = evaluate(test, self._scope)
        if value is UNKNOWN:
            texts = [n.args[0].value for n in ast.walk(test) if isinstance(n, ast.Call)]
            text = texts[0] if texts else source
            return value, NextAction("ask_cond", "request_information", condition=text, cond_key=condition_key(text),
                                     line=line)
        return truthy(value), None

    def _ran_in(self, body: list[Step]) -> int:
        # ``request_information`` is the generic question, asked anywhere: no evidence of a branch
        return sum(1 for c in iter_calls(body) if c.name != "request_information" and self._left[c.name] > 0)

    def _if(self, step: If) -> NextAction | None:
        # the history shows which branch was taken: the one whose nodes already ran (results may have
        # been overwritten by later calls since, so re-judging the condition could pick the other one)
        bodies = [body for _, _, body in step.branches] + [step.orelse]
        ran = [self._ran_in(b) for b in bodies]
        best = max(ran)
        if best > 0 and ran.count(best) == 1:
            return self._walk(bodies[ran.index(best)])
        for test, source, body in step.branches:
            value, ask = self._cond(test, source, step.line)
            if ask:
                return ask
            if value:
                return self._walk(body)
        return self._walk(step.orelse)

    def _while(self, step: While) -> NextAction | None:
        for _ in range(self.max_loops):
            value, ask = self._cond(step.test, step.source, step.line)
            if ask:
                return ask
            if not value:
                return None
            try:
                act = self._walk(step.body)
            except _BreakLoop:
                return None
            if act is not None:
                return act
        return None  # bounded: give up looping and continue after the loop


def invalidate(workflow: Workflow, frame: Frame | dict, changed: dict[str, Any]) -> list[str] | None:
    """Going back: a slot changed after an API used it → that API run and everything after it must run
    again.  Returns the frame's new ``executed`` list, or None when nothing is stale."""
    executed = list(frame.get("executed") or [])
    if not changed or not executed:
        return None
    # the earliest API run whose arguments disagree with the new slot values
    stale_api, nth, seen = None, 0, Counter()
    for rec in frame.get("calls") or []:
        args = rec.get("args") or {}
        api = workflow.api(rec.get("api") or "")
        params = set(api.param_names) if api else set(args)
        # a changed value, or a value the call went without (refining a search after it ran)
        if any(k in params and (k not in args or str(args[k]).strip().lower() != str(v).strip().lower())
               for k, v in changed.items()):
            stale_api, nth = rec.get("api"), seen[rec.get("api")]
            break
        seen[rec.get("api")] += 1
    if stale_api is None or stale_api not in executed:
        return None
    # the n-th run of that API in ``executed`` is the one made with the old value
    runs = [i for i, node in enumerate(executed) if node == stale_api]
    cut = runs[min(nth, len(runs) - 1)]
    return executed[:cut]
