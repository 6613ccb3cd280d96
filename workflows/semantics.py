"""PDL semantics, the one place that says what a workflow's expressions mean at run time.

- **The values view** (``Scope``): what a condition, a template or an API argument can read in one
  workflow instance — returned values, then the user's slots (a slot the user changed wins) — plus
  the turn's facts that are *not* slot values (the user's yes/no, "I don't know", the last message,
  whether the latest API call succeeded, recorded answers to natural-language conditions).
- **Condition evaluation** (``evaluate``): a procedure's ``if``/``while`` tests, evaluated safely on
  the ``ast`` (never ``eval``) with typed coercion, so ``confirmed == True`` holds for ``"yes"`` and
  ``party_size > 4`` for ``"6"`` — for the interpreter, the controllers and the compliance oracle alike.
  ``COND("...")`` (natural language) is judged from the results by polarity, then from a recorded
  yes/no answer, else it is ``UNKNOWN``.
- **Template rendering** (``render_template``): ``$name`` filled from the values view.
"""

from __future__ import annotations

import ast
import hashlib
import re
import string
from dataclasses import dataclass, field
from typing import Any, Mapping

from .pdl import BUILTIN_CONDITION
from .text import NUMBER_WORDS, STOPWORDS, alternative_answer, render_value, words


class _Unknown:
    """A condition nobody can decide yet."""

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:
        raise TypeError("UNKNOWN has no truth value; compare with `is UNKNOWN`")


UNKNOWN: Any = _Unknown()
FALSE_STRINGS = frozenset({"false", "no", "n", "0", "none", "null", "", "failed", "failure"})
TRUE_STRINGS = frozenset({"true", "yes", "y", "1"})


def truthy(value: Any) -> bool:
    if isinstance(value, str):
        v = value.strip().lower()
        if v in TRUE_STRINGS:
            return True
        return v not in FALSE_STRINGS
    if isinstance(value, (list, dict, tuple, set)):
        return len(value) > 0
    return bool(value)


CONDITION_PREFIX = "cond_"


def condition_key(text: str) -> str:
    """Where the user's answer to a natural-language condition is recorded (``Frame.conditions``)."""
    return CONDITION_PREFIX + hashlib.sha1(text.strip().lower().encode()).hexdigest()[:8]


def is_condition_key(name: str) -> bool:
    """``name`` (a frame's ``asked`` entry) is a yes/no condition's key, not a slot's name."""
    return name.startswith(CONDITION_PREFIX)


def values_view(slots: Mapping[str, Any] | None, results: Mapping[str, Any] | None) -> dict[str, Any]:
    """Names a template, a condition or an argument can read: returned values (a record's fields too),
    then the user's slots — a slot the user set is the truth."""
    vals: dict[str, Any] = {}
    for key, val in (results or {}).items():
        vals[key] = val
        if isinstance(val, dict):  # a returned record: its fields are readable by name
            for k, v in val.items():
                vals.setdefault(k, v)
    vals.update(slots or {})
    return vals


@dataclass(frozen=True)
class Scope:
    """What one workflow instance knows at one moment (see the module docstring)."""

    slots: Mapping[str, Any] = field(default_factory=dict)
    results: Mapping[str, Any] = field(default_factory=dict)
    conditions: Mapping[str, bool] = field(default_factory=dict)  # condition_key -> the user's answer
    yesno: bool | None = None  # the latest user reply read as yes / no
    info_missing: bool = False  # the latest user reply says they do not have / know it
    last_message: str = ""
    result_ok: bool | None = None  # the latest API call of this instance succeeded

    @property
    def values(self) -> dict[str, Any]:
        return values_view(self.slots, self.results)


# a placeholder written as an amount of money: after a currency sign ("€$amount", "$$price") or before a
# currency ("$total EUR", "$fee euros")
_MONEY = re.compile(r"(?:[€£¥]|\$\$)\$\{?(\w+)\}?|\$\{?(\w+)\}?\s?(?:[A-Z]{3}|euros?|dollars?|pounds?)\b")


def render_template(template: str, values: Mapping[str, Any]) -> str:
    """``$name`` / ``${name}`` filled for people (lists as "A, B and C", amounts of money with two decimals
    when they have cents: "€67.40"); unknown names stay visible."""
    money = {a or b for a, b in _MONEY.findall(template or "")}
    filled = {k: f"{v:.2f}" if k in money and isinstance(v, float) and not v.is_integer() else render_value(v)
              for k, v in values.items()}
    return string.Template(template or "").safe_substitute(filled)


# --- COND("...") judged from results ---------------------------------------------------------------
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
# words a condition shares with every result name: not evidence that it speaks of that result
_STOP = STOPWORDS | {"user", "users", "query", "api", "result"}
_USER_WORDS = {"user", "customer", "caller", "guest", "they", "he", "she", "wants", "agrees", "confirms",
               "yes", "no", "accepts", "declines", "would", "like"}


def _words(text: str) -> list[str]:
    return words(text.replace("_", " "))


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


def result_polarity(results: Mapping[str, Any]) -> bool | None:
    """Whether returned values state an available/successful outcome ("Unavailable", "Reservation
    Failed" -> False), the latest value that states one deciding; None when none does.  What the
    ``available``/``unavailable`` outcomes of a compiled branch are judged by."""
    for v in reversed(list(results.values())):
        if not isinstance(v, (dict, list)):
            facts = _polarity_facts(str(v))
            if "avail" in facts or "ok" in facts:
                return facts.get("avail", facts.get("ok"))
    return None


# compile_graph writes "(first time, or again after: <labels>)" or, with unlabelled back edges, "(first time, or again)"
_LOOP_HEADER = re.compile(r"\(first time, or again(?: after:|\))", re.I)


_NO_ANSWER = re.compile(r"\b(?:don'?t know|do not know|no idea|give up|not sure|pass|skip|no clue|can'?t say|"
                        r"have no idea|i'?m stumped)\b", re.I)


def _answer_tokens(text: str) -> list[str]:
    return [str(NUMBER_WORDS.get(w, w)) for w in re.findall(r"[a-z0-9]+", text.lower())]


def _says(said: str, expected: str) -> bool:
    """Does the reply give the expected answer: its words in a row, read with numbers as digits and
    spaces not counted ("3" for "three", "air lock" for "airlock"), not as part of another word ("13")."""
    want = "".join(_answer_tokens(expected))
    got = _answer_tokens(said)
    if not want:
        return False
    for i in range(len(got)):
        run = ""
        for w in got[i:]:
            run += w
            if run in (want, want + "s", want + "es"):  # a plural is the same answer
                return True
            if not want.startswith(run):
                break
    return False


def _judge_outcome(label: str, scope: "Scope", question: str = "") -> Any:
    """Compiled flowchart branches read ``"<question> -> <outcome label>"``: judge the outcome."""
    lab = label.strip().lower()
    results = scope.results
    if lab.startswith("info_missing"):
        return bool(scope.info_missing)
    if lab in ("query_success", "query_failure"):
        ok = scope.result_ok
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
        stated = result_polarity(results)
        if stated is not None:
            return stated == (lab == "available")
        ok = scope.result_ok
        return UNKNOWN if ok is None else bool(ok) == (lab == "available")
    if lab in ("correct", "incorrect", "noanswer", "done"):
        said = (scope.last_message or "").lower()
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
        right = any(_says(said, e) for e in expected)
        return right == (lab == "correct")
    if lab in ("yes", "no"):
        yes = scope.yesno if scope.yesno is not None else alternative_answer(question, scope.last_message or "")
        return UNKNOWN if yes is None else yes == (lab == "yes")
    return None  # not a known outcome: judge the text


def judge_condition(text: str, scope: "Scope") -> Any:
    """True/False when the results or a recorded answer decide the condition, else UNKNOWN."""
    results = scope.results
    recorded = scope.conditions.get(condition_key(text))
    if recorded is not None:
        return truthy(recorded)
    if _LOOP_HEADER.search(text):  # a compiled loop header: enter, and re-enter when the body ends normally
        return True
    if " -> " in text:
        question, label = text.rsplit(" -> ", 1)
        judged = _judge_outcome(label, scope, question)
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
    if scope.yesno is not None and (("yes" in want) or set(_words(text)) & _USER_WORDS):
        yes = scope.yesno
        pol = want.get("yes", not negated)
        return yes == pol
    return UNKNOWN




def _coerce(v: Any) -> Any:
    """Typed coercion for comparisons: numeric strings are numbers, yes/true/no/false are booleans."""
    if isinstance(v, str):
        s = v.strip().lower()
        try:
            return float(s)
        except ValueError:
            return {"true": True, "yes": True, "false": False, "no": False}.get(s, s)
    return v


def compare(op: ast.cmpop, a: Any, b: Any, incomparable: Any = UNKNOWN) -> Any:
    """One comparison with typed coercion; ``incomparable`` when the values cannot be compared (yet)."""
    if isinstance(op, (ast.In, ast.NotIn)):
        if isinstance(b, (list, tuple, set)):
            inside = _coerce(a) in [_coerce(x) for x in b]
        else:
            inside = str(a).lower() in str(b or "").lower()
        return inside if isinstance(op, ast.In) else not inside
    if isinstance(op, ast.Is):
        return a is b
    if isinstance(op, ast.IsNot):
        return a is not b
    a, b = _coerce(a), _coerce(b)
    if isinstance(op, ast.Eq):
        return a == b
    if isinstance(op, ast.NotEq):
        return a != b
    try:
        return {ast.Lt: lambda: a < b, ast.LtE: lambda: a <= b, ast.Gt: lambda: a > b,
                ast.GtE: lambda: a >= b}[type(op)]()
    except TypeError:  # None < 3 and the like: the value is not there yet
        return incomparable


def evaluate(node: ast.expr, scope: Scope, *, missing: Any = None) -> Any:
    """A procedure condition's value on ``scope``: a Python value, or ``UNKNOWN``.

    ``missing`` is what a name with no value reads as: ``None`` for the interpreter (an unset slot
    takes the ``else`` branch, and an incomparable value is false), ``UNKNOWN`` for a controller that
    must not block what it cannot tell (both undecidable).  Decided values never differ between the two."""
    values = scope.values
    incomparable = False if missing is None else UNKNOWN

    def ev(n: ast.expr) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            if n.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[n.id]
            return values[n.id] if n.id in values else missing
        if isinstance(n, (ast.List, ast.Tuple)):
            return [ev(e) for e in n.elts]
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            if v is UNKNOWN:
                return UNKNOWN
            if isinstance(n.op, ast.Not):
                return not truthy(v)
            return -v if isinstance(v, (int, float)) else UNKNOWN
        if isinstance(n, ast.BoolOp):
            vals = [ev(v) for v in n.values]
            if isinstance(n.op, ast.And):
                if any(v is not UNKNOWN and not truthy(v) for v in vals):
                    return False
                return UNKNOWN if any(v is UNKNOWN for v in vals) else True
            if any(v is not UNKNOWN and truthy(v) for v in vals):
                return True
            return UNKNOWN if any(v is UNKNOWN for v in vals) else False
        if isinstance(n, ast.Compare):
            left = ev(n.left)
            for op, comp in zip(n.ops, n.comparators):
                right = ev(comp)
                if left is UNKNOWN or right is UNKNOWN:
                    return UNKNOWN
                ok = compare(op, left, right, incomparable)
                if ok is UNKNOWN:
                    return UNKNOWN
                if not ok:
                    return False
                left = right
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == BUILTIN_CONDITION:
            return judge_condition(n.args[0].value, scope)
        return UNKNOWN  # anything the validator let through that we cannot read: undecidable

    return ev(node)


def decided(value: Any) -> bool | None:
    """A condition value as True / False, or None when it is UNKNOWN."""
    return None if value is UNKNOWN else truthy(value)
