"""The offline PDL interpreter: a workflow's procedure read as a state machine over ``progress``.

Given what has run (``progress.executed``), the filled slots and the returned values, ``next_action``
walks the procedure tree and returns the next node to perform:

- a call whose node already ran is skipped (each run is consumed once, so ``while`` bodies re-run);
- ``[a, b] = ANSWER.x()`` collects slots: when they are all filled (the user gave them early —
  procedure jumping) the question is skipped; ``ANSWER.request_information("slot")`` asks for it;
- an API call is next when reached; missing required parameters turn it into a question;
- ``if``/``while`` conditions are evaluated safely on the ast (slots + results, never ``eval``);
  ``COND("...")`` is judged from results by keyword polarity, then from a recorded yes/no reply,
  else it is *unknown* and the executor asks the user once (answer stored as ``__cond_<hash>``);
- ``while`` loops re-run while their condition holds after the body, at most ``max_loops`` times.

Going back (``invalidate``): when a slot changes after an API used it, that API and everything
executed after it are dropped from ``executed`` so they run again with the new value.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from workflows.pdl import BUILTIN_CONDITION, Workflow
from workflows.procedure import Break, Call, If, Procedure, Step, While, iter_calls, iter_steps, parse_procedure

Kind = Literal["api", "answer", "ask", "ask_cond", "done"]
UNKNOWN = object()  # a condition nobody can decide yet
FALSE_STRINGS = {"false", "no", "n", "0", "none", "null", "", "failed", "failure"}
TRUE_STRINGS = {"true", "yes", "y", "1"}
YESNO_SLOT = "__last_yesno"  # the user's latest yes/no reply (set by slot filling)


@dataclass
class NextAction:
    kind: Kind
    name: str = ""  # API or ANSWER name ("request_information" for asks)
    args: dict[str, Any] = field(default_factory=dict)  # API arguments
    slots: list[str] = field(default_factory=list)  # slots to ask for / collected by the answer
    condition: str = ""  # natural-language condition to ask about (kind ask_cond)
    cond_slot: str = ""  # where the yes/no answer is stored
    line: int = 0


INTERNAL_PREFIX = "__"  # bookkeeping slots (yes/no, branch answers, last message): never user data


def is_internal(name: str) -> bool:
    return str(name).startswith(INTERNAL_PREFIX)


def public_values(values: dict[str, Any]) -> dict[str, Any]:
    """Values a reply template or an API argument may use: bookkeeping slots left out."""
    return {k: v for k, v in values.items() if not is_internal(k)}


def cond_slot(text: str) -> str:
    return "__cond_" + hashlib.sha1(text.strip().lower().encode()).hexdigest()[:8]


def truthy(value: Any) -> bool:
    if isinstance(value, str):
        v = value.strip().lower()
        if v in TRUE_STRINGS:
            return True
        return v not in FALSE_STRINGS
    if isinstance(value, (list, dict, tuple, set)):
        return len(value) > 0
    return bool(value)


# --- COND("...") judged from results -------------------------------------------------------------
_NEG_WORDS = {"not", "no", "never", "nothing", "none", "without", "isn't", "aren't", "doesn't", "don't",
              "didn't", "wasn't", "cannot", "can't", "won't"}
# word -> (concept, polarity); lets "unavailable" contradict "available", "failed" contradict "succeeded"
_POLAR = {
    "available": ("avail", True), "unavailable": ("avail", False), "free": ("avail", True),
    "success": ("ok", True), "succeeded": ("ok", True), "successful": ("ok", True), "succeeds": ("ok", True),
    "confirmed": ("ok", True), "successfully": ("ok", True), "scheduled": ("ok", True), "booked": ("ok", True),
    "reserved": ("ok", True), "unable": ("ok", False), "ok": ("ok", True), "found": ("ok", True), "failed": ("ok", False),
    "failure": ("ok", False), "fail": ("ok", False), "fails": ("ok", False), "unsuccessful": ("ok", False),
    "error": ("ok", False), "invalid": ("valid", False), "valid": ("valid", True), "correct": ("valid", True),
    "incorrect": ("valid", False), "wrong": ("valid", False), "matches": ("valid", True),
    "yes": ("yes", True), "agrees": ("yes", True), "agree": ("yes", True), "confirms": ("yes", True),
    "accepts": ("yes", True), "wants": ("yes", True), "no": ("yes", False), "declines": ("yes", False),
    "refuses": ("yes", False), "rejects": ("yes", False),
}
_POLAR.update({"conflicting": ("avail", False), "conflict": ("avail", False), "taken": ("avail", False),
               "full": ("avail", False), "booked": ("ok", True)})
_STEMS = [("unsuccessful", "unsuccess"), ("success", "success"), ("failed", "fail"), ("unavailable", "unavail"),
          ("available", "avail"), ("confirmed", "confirm")]
_STOP = {"the", "a", "an", "is", "are", "was", "be", "to", "of", "and", "or", "if", "it", "user", "users",
         "s", "that", "this", "for", "in", "on", "with", "has", "have", "does", "do", "query", "api", "result"}
_USER_WORDS = {"user", "customer", "caller", "guest", "they", "he", "she", "wants", "agrees", "confirms",
               "yes", "no", "accepts", "declines", "would", "like"}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower().replace("_", " "))


def _polarity_facts(text: str) -> dict[str, bool]:
    """concept -> polarity stated by a short text ("not available" -> avail False)."""
    facts: dict[str, bool] = {}
    words = _words(text)
    for i, w in enumerate(words):
        if w not in _POLAR:  # stems: "successfuly", "failing", "unsuccessfully"
            w = next((k for k, stem in _STEMS if w.startswith(stem)), w)
        if w in _POLAR:
            concept, pol = _POLAR[w]
            if any(p in _NEG_WORDS for p in words[max(0, i - 2):i]):
                pol = not pol
            facts[concept] = pol
    return facts


LAST_MESSAGE_SLOT = "__last_message"  # the user's latest message (outcome conditions compare answers with it)
INFO_MISSING_SLOT = "__info_missing"  # the user's latest reply said they do not have/know it
RESULT_OK_SLOT = "__result_ok"  # the latest API call returned something (set by the caller)
# compile_graph writes "(first time, or again after: <labels>)" or, with unlabelled back edges, "(first time, or again)"
_LOOP_HEADER = re.compile(r"\(first time, or again(?: after:|\))", re.I)


_NO_ANSWER = re.compile(r"\b(?:don'?t know|do not know|no idea|give up|not sure|pass|skip|no clue|can'?t say|"
                        r"have no idea|i'?m stumped)\b", re.I)


def _judge_outcome(label: str, values: dict[str, Any], results: dict[str, Any]) -> Any:
    """Compiled flowchart branches read ``"<question> -> <outcome label>"``: judge the outcome."""
    lab = label.strip().lower()
    if lab.startswith("info_missing"):
        return truthy(values.get(INFO_MISSING_SLOT, False))
    if lab in ("query_success", "query_failure"):
        ok = values.get(RESULT_OK_SLOT)
        facts = {}
        for v in results.values():
            if not isinstance(v, (dict, list)):
                facts.update(_polarity_facts(str(v)))
        if "ok" in facts:
            ok = facts["ok"] if ok is None else (ok and facts["ok"])
        if ok is None:
            return UNKNOWN
        return bool(ok) == (lab == "query_success")
    if lab in ("available", "unavailable"):
        for v in reversed(list(results.values())):
            if not isinstance(v, (dict, list)):
                facts = _polarity_facts(str(v))
                if "avail" in facts or "ok" in facts:
                    return facts.get("avail", facts.get("ok")) == (lab == "available")
        ok = values.get(RESULT_OK_SLOT)
        return UNKNOWN if ok is None else bool(ok) == (lab == "available")
    if lab in ("correct", "incorrect", "noanswer", "done"):
        said = str(values.get(LAST_MESSAGE_SLOT) or "").lower()
        if not said:
            return UNKNOWN
        expected = [str(v).lower() for k, v in results.items() if isinstance(v, str) and len(v) > 2
                    and k.lower() in ("answer", "solution", "code", "expected", "value")]
        if lab == "done":
            return bool(re.search(r"\b(?:done|stop|enough|that'?s all|no more|quit)\b", said))
        no_answer = bool(_NO_ANSWER.search(said))
        if lab == "noanswer":
            return no_answer
        if no_answer:  # "no idea" is neither right nor wrong: the no-answer branch takes it
            return False
        if not expected:
            return UNKNOWN
        right = any(e in said for e in expected)
        return right == (lab == "correct")
    if lab in ("yes", "no"):
        if values.get(YESNO_SLOT) is None:
            return UNKNOWN
        return truthy(values[YESNO_SLOT]) == (lab == "yes")
    return None  # not a known outcome: judge the text


def judge_condition(text: str, values: dict[str, Any], results: dict[str, Any]) -> Any:
    """True/False when the results or a recorded answer decide the condition, else UNKNOWN."""
    recorded = values.get(cond_slot(text))
    if recorded is not None:
        return truthy(recorded)
    if _LOOP_HEADER.search(text):  # a compiled loop header: enter, and re-enter when the body ends normally
        return True
    if " -> " in text:
        question, label = text.rsplit(" -> ", 1)
        judged = _judge_outcome(label, values, results)
        if judged is not None:
            return judged
        text = label.replace("_", " ")
    want = _polarity_facts(text)
    content = [w for w in _words(text) if w not in _STOP and w not in _NEG_WORDS]
    negated = any(w in _NEG_WORDS for w in _words(text))
    # 1. results stating the same concept ("Available", "Reservation Confirmed", "query_failure")
    for value in reversed(list(results.values())):
        if isinstance(value, (dict, list)):
            continue
        facts = _polarity_facts(str(value))
        shared = [c for c in want if c in facts and c != "yes"]
        if shared:
            return all(facts[c] == want[c] for c in shared)
    # a boolean result whose name the condition mentions ("the flight is available" + available=True)
    for name, value in results.items():
        if isinstance(value, (bool, int, str)) and not isinstance(value, dict):
            name_words = set(_words(name)) - _STOP
            if name_words and name_words <= set(content) | set(_words(text)):
                v = truthy(value)
                return (not v) if negated else v
    # 2. a yes/no question the user just answered ("if the user confirms", COND("yes"))
    if values.get(YESNO_SLOT) is not None and (("yes" in want) or set(_words(text)) & _USER_WORDS):
        yes = truthy(values[YESNO_SLOT])
        pol = want.get("yes", not negated)
        return yes == pol
    return UNKNOWN


# words an asking reply and the slot it fills commonly use for the same thing
_SYNONYMS = {"location": ("city", "place", "address", "area"), "city": ("location",), "date": ("day",),
             "day": ("date",), "guests": ("people", "party", "size"), "price": ("cost", "budget"),
             "cost": ("price",), "destination": ("arrival",), "departure": ("origin", "from"),
             "dob": ("birth",), "bedrooms": ("rooms",), "booking": ("reservation",)}


def _split_words(name: str) -> list[str]:
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name or "")]


class _Eval:
    """Safe evaluation of a parsed condition over slots + results."""

    def __init__(self, values: dict[str, Any], results: dict[str, Any]):
        self.values, self.results = values, results

    def __call__(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return {"True": True, "False": False, "None": None}.get(node.id, self.values.get(node.id))
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self(e) for e in node.elts]
        if isinstance(node, ast.UnaryOp):
            v = self(node.operand)
            if v is UNKNOWN:
                return UNKNOWN
            if isinstance(node.op, ast.Not):
                return not truthy(v)
            return -v if isinstance(v, (int, float)) else None
        if isinstance(node, ast.BoolOp):
            vals = [self(v) for v in node.values]
            if isinstance(node.op, ast.And):
                if any(v is not UNKNOWN and not truthy(v) for v in vals):
                    return False
                return UNKNOWN if any(v is UNKNOWN for v in vals) else True
            if any(v is not UNKNOWN and truthy(v) for v in vals):
                return True
            return UNKNOWN if any(v is UNKNOWN for v in vals) else False
        if isinstance(node, ast.Compare):
            left = self(node.left)
            for op, comp in zip(node.ops, node.comparators):
                right = self(comp)
                if left is UNKNOWN or right is UNKNOWN:
                    return UNKNOWN
                if not _compare(op, left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == BUILTIN_CONDITION:
            return judge_condition(node.args[0].value, self.values, self.results)
        raise ValueError(f"unsupported condition node {type(node).__name__}")


def _norm(v: Any) -> Any:
    if isinstance(v, str):
        s = v.strip().lower()
        try:
            return float(s)
        except ValueError:
            return {"true": True, "yes": True, "false": False, "no": False}.get(s, s)
    return v


def _compare(op: ast.cmpop, a: Any, b: Any) -> bool:
    if isinstance(op, (ast.In, ast.NotIn)):
        inside = _norm(a) in [_norm(x) for x in (b or [])] if isinstance(b, list) else str(a).lower() in str(b or "").lower()
        return inside if isinstance(op, ast.In) else not inside
    if isinstance(op, ast.Is):
        return a is b
    if isinstance(op, ast.IsNot):
        return a is not b
    a, b = _norm(a), _norm(b)
    try:
        return {ast.Eq: a == b, ast.NotEq: a != b}.get(type(op)) if isinstance(op, (ast.Eq, ast.NotEq)) else {
            ast.Lt: lambda: a < b, ast.LtE: lambda: a <= b, ast.Gt: lambda: a > b, ast.GtE: lambda: a >= b}[type(op)]()
    except TypeError:  # None < 3 and the like: the value is not there yet
        return False


_FIXED = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*([\w.-]+)")


def fixed_args(comment: str) -> dict[str, str]:
    """``# query_check: RequestType = Check`` above a call fixes that argument (importers write it)."""
    return {k: v for k, v in _FIXED.findall(comment or "")}


class _BreakLoop(Exception):
    pass


class Interpreter:
    """Walks one workflow's procedure against a progress record."""

    def __init__(self, workflow: Workflow, max_loops: int = 3):
        self.workflow = workflow
        self.max_loops = max_loops
        self.procedure: Procedure = parse_procedure(workflow.procedure)
        self._implied: dict[str, list[str]] = {}
        self._lines = [(c.line, c.name) for c in self.procedure.calls()]
        in_loops = {c.name for st in iter_steps(self.procedure.steps) if isinstance(st, While) for c in iter_calls(st.body)}
        self._static = Counter(c.name for c in self.procedure.calls() if c.kind == "API" and c.name not in in_loops)
        self._askers: dict[str, list[str]] | None = None
        self._skip: set[str] | frozenset = frozenset()

    def values(self, progress: dict) -> dict[str, Any]:
        # slots override results: a slot the user changed is the truth
        values = {**(progress.get("results") or {}), **(progress.get("slots") or {})}
        calls = progress.get("call_args") or []
        if calls and RESULT_OK_SLOT not in values:
            values[RESULT_OK_SLOT] = calls[-1].get("status", "ok") == "ok"
        return values

    def next_action(self, progress: dict, skip: set[str] | frozenset = frozenset()) -> NextAction:
        """``skip``: replies the caller decided are not due (e.g. a greeting when the user went straight to business)."""
        self._skip = skip
        self._left = Counter(self.latest_round(list(progress.get("executed") or [])))
        self._values = self.values(progress)
        self._results = progress.get("results") or {}
        self._executed = list(progress.get("executed") or [])
        self._slots = progress.get("slots") or {}
        try:
            found = self._walk(self.procedure.steps)
        except _BreakLoop:
            found = None
        return found or NextAction("done")

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

    def implied_targets(self, answer: str) -> list[str]:
        """Slots an ``..._ask_<x>`` ANSWER collects when the procedure does not assign them (imported
        flowcharts): the slot whose name/description shares the most words with the answer's name,
        words of the workflow's own name ignored unless nothing else is left."""
        if answer in self._implied:
            return self._implied[answer]
        words = set(_split_words(answer))
        found: list[str] = []
        spec = self.workflow.answer(answer)
        asks = spec is None or not spec.template or "?" in spec.template  # a reply that only states things asks nothing
        if "ask" in words and asks:
            words.discard("ask")
            own = set(_split_words(self.workflow.name))
            words = (words - own) or words
            scored = []
            words |= {syn for w in words for syn in _SYNONYMS.get(w, ())}
            for slot in self.workflow.slots:
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
        self._implied[answer] = found
        return found

    def _filled(self, name: str) -> bool:
        v = self._slots.get(name, self._results.get(name))
        return v is not None and v != ""

    def latest_round(self, executed: list[str]) -> list[str]:
        """An API written once (outside loops) but run again starts a new round of the same request: what
        ran between its first and its last run belongs to earlier rounds and is dropped for the walk."""
        for api, written in self._static.items():
            runs = [i for i, n in enumerate(executed) if n == api]
            if len(runs) > written:
                executed = executed[:runs[0]] + executed[runs[-1]:]
        return executed

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
                if asked:  # asked, not (fully) answered: ask again in its own words, or precisely for the rest
                    if len(targets) == 1:
                        return NextAction("answer", call.name, slots=missing, line=call.line)
                    return NextAction("ask", "request_information", slots=missing, line=call.line)
                if self._moved_past(call.line):
                    return None
                if len(missing) < len(targets):  # part given already: ask only for the rest
                    return NextAction("ask", "request_information", slots=missing, line=call.line)
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
                return NextAction("answer", askers[0], slots=[slot], line=call.line)
            if "request_information" not in executed:
                return NextAction("ask", "request_information", slots=missing, line=call.line)
        return NextAction("api", call.name, args=args, line=call.line)

    def askers(self, slot: str) -> list[str]:
        """The workflow's own ANSWERs that collect ``slot`` (assigned in the procedure, or implied by name)."""
        if self._askers is None:
            self._askers = {}
            for c in self.procedure.calls():
                if c.kind == "ANSWER" and c.name != "request_information":
                    for t in c.targets:
                        self._askers.setdefault(t, []).append(c.name)
            for a in self.workflow.answers:
                for t in self.implied_targets(a.name):
                    if a.name not in self._askers.setdefault(t, []):
                        self._askers[t].append(a.name)
        return self._askers.get(slot, [])

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
        for i, p in enumerate(params):
            if p in fixed:
                args[p] = fixed[p]
                continue
            source = p if p in self._values else (positional[i] if i < len(positional) else p)
            v = None if is_internal(source) or is_internal(p) else self._values.get(source)
            if v is not None and v != "":
                args[p] = v
            elif p in required:
                missing.append(source)
        for p in required:  # required parameters not declared in properties
            if p not in params and not self._filled(p):
                missing.append(p)
        return args, missing

    def _cond(self, test: ast.expr, source: str, line: int) -> tuple[Any, NextAction | None]:
        value = _Eval(self._values, self._results)(test)
        if value is UNKNOWN:
            texts = [n.args[0].value for n in ast.walk(test) if isinstance(n, ast.Call)]
            text = texts[0] if texts else source
            return value, NextAction("ask_cond", "request_information", condition=text, cond_slot=cond_slot(text),
                                     line=line)
        return truthy(value), None

    def _ran_in(self, body: list[Step]) -> int:
        return sum(1 for c in iter_calls(body) if self._left[c.name] > 0)

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


def next_action(workflow: Workflow, progress: dict, max_loops: int = 3) -> NextAction:
    return Interpreter(workflow, max_loops).next_action(progress or {})


def invalidate(workflow: Workflow, progress: dict, changed: dict[str, Any]) -> list[str]:
    """Going back: a slot changed after an API used it → drop that API run and everything after it
    from ``executed`` (they must run again). Returns the dropped nodes; mutates ``progress``."""
    executed = list(progress.get("executed") or [])
    call_args = progress.get("call_args") or []
    if not changed or not executed:
        return []
    # the earliest API run whose arguments disagree with the new slot values
    stale_api, nth, seen = None, 0, Counter()
    for rec in call_args:
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
        return []
    # the n-th run of that API in ``executed`` is the one made with the old value
    runs = [i for i, node in enumerate(executed) if node == stale_api]
    cut = runs[min(nth, len(runs) - 1)]
    dropped = executed[cut:]
    progress["executed"] = executed[:cut]
    progress["done"] = False
    return dropped
