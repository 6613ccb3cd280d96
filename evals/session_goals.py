"""Goals for simulated users, generated from a workflow library and its tools' environment, with the
gold outcome of each goal measured by running the workflow's procedure against the real tools.

- **Slot values** come from the PDL (enum values, ``e.g. X`` examples in descriptions, numeric ranges) and
  from the tools' SQLite database: a slot is matched to a column by name (``email`` ↔ ``*.email``,
  ``order_id`` ↔ ``orders.id``, ``card_last4`` ↔ ``cards.last4``); values of slots matched to related
  tables come from related rows (the same customer's card), so a goal is coherent.
- **Gold**: each candidate goal is played by the offline PDL interpreter (``dialogue.execution``) with the
  real tools on a scratch copy of the database; the path it takes (its terminal ANSWER) names the branch
  the goal exercises, and the run gives the gold tool calls, the database change and the information the
  user must receive (the API-returned values of the terminal ANSWER).  Each goal is played twice on fresh
  copies: tables and arguments that differ between the two plays are volatile (random tokens) and are
  not compared.
- One goal per (workflow, branch) is kept — the first found in a seeded order.
"""

from __future__ import annotations

import random
import re
import shutil
import sqlite3
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from workflows.library import Library
from workflows.pdl import Slot, Workflow
from workflows.semantics import render_template, values_view

MAX_CANDIDATES = 80  # candidate goals tried per workflow
MAX_BRANCH_PLAYS = 24  # plays per candidate exploring the answers to natural-language conditions
CREDENTIAL = re.compile(r"token|session|secret|password", re.I)  # names of values that are session state


@dataclass
class Gold:
    """What happens when the goal's procedure is followed exactly."""

    path: list[str]  # API and ANSWER nodes in order
    calls: list[tuple[str, dict[str, Any]]]  # successful API calls (volatile arguments removed)
    terminal: str  # the last ANSWER
    info: list[str]  # values the user must receive (rendered as the agent renders them)
    diff: dict[str, list[str]]  # table -> sorted rows added/removed (volatile tables removed)
    irreversible: list[str] = field(default_factory=list)  # irreversible APIs on the path
    volatile: list[str] = field(default_factory=list)  # changed tables left out of ``diff`` (session state)


@dataclass
class Goal:
    """One task for a simulated user: a workflow, the slot values it knows, the outcome it should get."""

    workflow: str
    title: str  # what the user wants, in words (the workflow's title)
    slots: dict[str, Any]
    slot_specs: dict[str, dict[str, Any]]  # name -> {"description", "type", "enum"}
    branch: str  # the terminal ANSWER the gold run reached
    gold: Gold
    alternatives: dict[str, list[Any]] = field(default_factory=dict)  # other plausible values per slot
    declined: Gold | None = None  # the gold when the user refuses the first irreversible action
    terminals: list[str] = field(default_factory=list)  # every ANSWER that ends a path of the workflow
    # the user's answers to the procedure's natural-language conditions on this branch (imported flowcharts:
    # "Ask if the user wants to pay now -> Pay now"): condition key -> (condition text, yes/no)
    conditions: dict[str, tuple[str, bool]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.workflow}:{self.branch}"


# --- the environment: tables, columns and values ---------------------------------------------------------

def _tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name != 'meta'")]
    return {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in names}


def _singular(word: str) -> str:
    return word[:-1] if word.endswith("s") else word


def match_column(slot: str, tables: dict[str, list[str]]) -> tuple[str, str] | None:
    """The (table, column) a slot's values come from, by name: an exact column name, ``<table>_<col>``
    (``order_id`` → orders.id), a column the slot name ends with (``card_last4`` → cards.last4)."""
    name = slot.lower()
    singular = _singular(name)
    for t, cols in tables.items():  # <table>_<col>, e.g. order_id, customer_id, transaction_ids
        for c in cols:
            for key in (name, singular):
                if key == f"{_singular(t)}_{c}" or (key.endswith(f"_{c}") and _singular(t).endswith(key[:-len(c) - 1])):
                    return t, c
    for t, cols in tables.items():  # a column of the same name in a table the slot names (cards.last4)
        for c in cols:
            if name.endswith(c) and name.startswith(_singular(t).split("_")[-1]):
                return t, c
    for t, cols in tables.items():  # a table of such things: item -> order_items.name
        if t.endswith(f"_{name}s") or t == f"{name}s":
            if "name" in cols:
                return t, "name"
    hits = [(t, c) for t, cols in tables.items() for c in cols if c == name]
    return min(hits, key=lambda tc: len(tables[tc[0]])) if hits else None


def _example_prefix(slot: Slot) -> str:
    """``B-`` from "Booking reference, e.g. B-1001" when the column holds the bare number."""
    m = re.search(r"e\.g\.\s*([A-Za-z]+-)\d", slot.description or "")
    return m.group(1) if m else ""


def _links(conn: sqlite3.Connection, tables: dict[str, list[str]]) -> dict[tuple[str, str], tuple[str, str]]:
    """Foreign keys: (table, column) -> (referenced table, column)."""
    out = {}
    for t in tables:
        for row in conn.execute(f"PRAGMA foreign_key_list({t})"):
            out[(t, row[3])] = (row[2], row[4] or "id")
    return out


def _related_rows(conn, table: str, anchor_table: str, anchor: dict, links) -> list[dict]:
    """Rows of ``table`` linked to the anchor row by a foreign key (either way) or a shared key column."""
    conn.row_factory = sqlite3.Row
    for (t, c), (rt, rc) in links.items():
        if t == table and rt == anchor_table and rc in anchor:
            return [dict(r) for r in conn.execute(f"SELECT * FROM {table} WHERE {c}=?", (anchor[rc],))]
        if t == anchor_table and rt == table and c in anchor:
            return [dict(r) for r in conn.execute(f"SELECT * FROM {table} WHERE {rc}=?", (anchor[c],))]
    for (t, c), (rt, rc) in links.items():  # two hops: cards -> customers <- card_transactions
        if t == table and (rt, rc) and any(t2 == anchor_table and rt2 == rt for (t2, _), (rt2, _) in links.items()):
            via = next(c2 for (t2, c2), (rt2, _) in links.items() if t2 == anchor_table and rt2 == rt)
            return [dict(r) for r in conn.execute(f"SELECT * FROM {table} WHERE {c}=?", (anchor.get(via),))]
    shared = [c for c in anchor if c.endswith("_id") and c in [x for x in _cols(conn, table)]]
    if shared:
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table} WHERE {shared[0]}=?", (anchor[shared[0]],))]
    return [dict(r) for r in conn.execute(f"SELECT * FROM {table}")]


def _cols(conn, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


# --- values without a column ---------------------------------------------------------------------------

def _range(text: str, default: tuple[int, int]) -> tuple[int, int]:
    m = re.search(r"\((\d+)\s*-\s*(\d+)\)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else default


def generated_values(slot: Slot, rng: random.Random, today: date, free_text: bool = False) -> list[Any]:
    """Plausible values for a slot the database does not hold: enum values, dates after the desk's today,
    seating times, counts and amounts, a postal address, a person's name.  ``free_text`` (a library without
    a database, e.g. FlowBench's simulated tools): any other slot too — its description's example, digits
    for a phone or a number, else a few words naming it."""
    if slot.enum:
        return list(slot.enum)
    low = slot.name.lower()
    if slot.type == "date" or "date" in low or low in ("check_in",):
        return [(today + timedelta(days=d)).isoformat() for d in rng.sample(range(8, 70), 6)]
    if slot.type == "time" or low.endswith("time") and slot.type == "string":
        return [f"{h}:{m:02d}" for h in range(12, 22) for m in (0, 30)]
    if slot.type == "integer":
        lo, hi = _range(slot.description, (1, 6))
        return list(range(lo, min(hi, lo + 7) + 1))
    if slot.type == "number":
        return [20, 50, 150, 400, 900, 2500, 20000]
    if free_text:  # a library without a database: the description's own example first
        text = f"{low.replace('_', ' ')} {slot.description}".lower()
        # the description's own example is a value the workflow's tools take ('13 digits, such as "828190..."')
        # ('for example, "No. 23, Xiangshan Road"', 'One example of it is "05A11"', 'default is "Yes"')
        if m := re.search(r"(?:e\.g\.|such as|for example|default|like|example of it is|examples?)\s*[,:]?\s*(?:is\s+)?"
                          r"[\"“']([^\"”']+)[\"”']", slot.description or "", re.I):
            return [m.group(1).strip()]
        # unquoted: "e.g. Chongqing", "For example, Chongqing.", "Here is one of its examples, No. 15, 4th Floor, …"
        if m := re.search(r"(?:e\.g\.|for example|examples)\s*[,:]?\s*([^\"();]+?)\s*(?:[;)]|\.?$)",
                          slot.description or "", re.I):
            return [m.group(1).strip()]
    if "address" in low:
        streets = ["Elm Street", "Birch Road", "Harbour Lane", "Mill Court", "Station Road", "Cedar Avenue"]
        return [f"{rng.randint(2, 90)} {s}, Northwind NW{rng.randint(1, 9)} {rng.randint(1, 9)}"
                f"{rng.choice('ABDEFGH')}{rng.choice('JKLMNPQ')}" for s in streets]
    if "name" in low:
        return ["Ada Lovelace", "Grace Hopper", "Alan Turing", "Katherine Johnson", "Edsger Dijkstra",
                "Barbara Liskov", "Donald Knuth", "Margaret Hamilton"]
    if not free_text:
        return []
    if re.search(r"phone|mobile", text):
        return [f"13{rng.randrange(10**9):09d}" for _ in range(6)]
    if re.search(r"\b(?:number|id|code|digits?)\b", text):
        return [str(rng.randrange(10**5, 10**6)) for _ in range(6)]
    return [f"{w} {slot.name.replace('_', ' ')}" for w in ("my", "the usual", "a new", "the same")]


# --- playing the procedure (the gold) ------------------------------------------------------------------

def snapshot(db: str | Path) -> dict[str, list[str]]:
    conn = sqlite3.connect(str(db))
    try:
        return {t: sorted(repr(tuple(r)) for r in conn.execute(f"SELECT * FROM {t}"))
                for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


def db_diff(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per table, the rows added (+) and removed (-)."""
    from collections import Counter

    out = {}
    for t in sorted(set(before) | set(after)):
        b, a = Counter(before.get(t, [])), Counter(after.get(t, []))
        rows = sorted([f"+{r}" for r in (a - b).elements()] + [f"-{r}" for r in (b - a).elements()])
        if rows:
            out[t] = rows
    return out


def play(wf: Workflow, slots: dict[str, Any], db: str, decline: bool = False, max_steps: int = 40,
         conditions: dict[str, tuple[str, bool]] | None = None, needed: list | None = None
         ) -> tuple[bool, list[str], list[tuple[str, dict]], dict[str, Any]]:
    """Follow the procedure with ``slots`` and the real tools on ``db``: (completed without a tool error or
    a missing value, path, calls, values).  ``decline``: stop at the first irreversible API.
    ``conditions``: the answers to natural-language conditions (key -> (text, yes/no)); a condition they
    do not answer stops the play and is appended to ``needed`` as (key, text)."""
    from dialogue.execution.interpreter import Interpreter
    from dialogue.frames import new_frame
    from graph.context import Context
    from workflows.bindings import ToolRunner

    interp = Interpreter(wf)
    runner = ToolRunner(Context(db_path=db))
    frame = new_frame(wf.name, 0, slots)
    path, calls = [], []
    for _ in range(max_steps):
        nxt = interp.next_action(frame)
        if nxt.kind == "done":
            return True, path, calls, values_view(frame["slots"], frame["results"])
        if nxt.kind == "api":
            api = wf.api(nxt.name)
            if decline and api is not None and api.irreversible:
                return True, path, calls, values_view(frame["slots"], frame["results"])
            # with an idempotency key per call, as the agent's tools node passes one: the tools' own
            # bookkeeping of keys then differs between the two plays and is not taken for the outcome
            res = runner.run(wf, nxt.name, nxt.args, idempotency_key=f"gold-{uuid.uuid4().hex}")
            if not res.ok:
                return False, path, calls, {}
            frame["results"] = {**frame["results"], **res.data}
            calls.append((nxt.name, dict(nxt.args)))
        elif nxt.kind == "answer":
            pass
        elif nxt.kind == "ask_cond" and nxt.cond_key in (conditions or {}):
            frame["conditions"] = {**(frame.get("conditions") or {}), nxt.cond_key: conditions[nxt.cond_key][1]}
            continue
        elif nxt.kind == "ask_cond" and needed is not None:
            needed.append((nxt.cond_key, nxt.condition))
            return False, path, calls, {}
        else:  # the procedure asks for something the goal does not hold
            return False, path, calls, {}
        frame["executed"] = [*frame["executed"], nxt.name]
        path.append(nxt.name)
    return False, path, calls, {}


def measure_gold(wf: Workflow, slots: dict[str, Any], pristine: Path, work: Path,
                 decline: bool = False, conditions: dict[str, tuple[str, bool]] | None = None,
                 needed: list | None = None) -> Gold | None:
    """Play the goal twice on fresh copies; None when it does not run through (``needed``: see ``play``)."""
    plays = []
    for i in range(2):
        db = work / f"gold{i}.sqlite"
        shutil.copy(pristine, db)
        before = snapshot(db)
        ok, path, calls, values = play(wf, slots, str(db), decline, conditions=conditions, needed=needed)
        if not ok or not path:
            return None
        plays.append((path, calls, values, db_diff(before, snapshot(db))))
    (path, calls, values, diff), (_, calls2, values2, diff2) = plays
    # session state is not the outcome: rows holding a credential an API returned (an auth token) and
    # tables whose change differs between two identical plays
    secrets = [str(v) for vals in (values, values2) for k, v in vals.items()
               if CREDENTIAL.search(k) and isinstance(v, str) and v]
    stable = {t: rows for t, rows in diff.items() if diff2.get(t) == rows
              and not any(sec in r for r in rows for sec in secrets)}
    # arguments that differ between the plays, and credentials (traces show them redacted), are not compared
    clean_calls = [(n, {k: v for k, v in a.items() if a2.get(k) == v and not CREDENTIAL.search(k)})
                   for (n, a), (_, a2) in zip(calls, calls2)]
    answers = [n for n in path if wf.answer(n) is not None]
    terminal = answers[-1] if answers else ""
    info: list[str] = []
    if terminal and not decline:
        ans = wf.answer(terminal)
        returned = {r for a in wf.apis for r in a.returns}
        for var in ans.variables:
            if var in returned and var in values and values[var] not in (None, ""):
                shown = render_template("$" + var, {var: values[var]})
                if shown and (var not in slots):
                    info.append(shown)
    irreversible = [n for n, _ in calls if (wf.api(n) and wf.api(n).irreversible)]
    if decline:
        nxt_irrev = [a.name for a in wf.apis if a.irreversible]
        irreversible = nxt_irrev
    return Gold(path, clean_calls, terminal, info, stable, irreversible, sorted(set(diff) - set(stable)))


def terminal_answers(wf: Workflow) -> set[str]:
    """ANSWERs that end a path of the procedure (the last call of a branch or of the procedure)."""
    from workflows.procedure import Call, If, While, parse_procedure

    out: set[str] = set()

    def last(steps) -> None:
        if not steps:
            return
        st = steps[-1]
        if isinstance(st, Call) and st.kind == "ANSWER":
            out.add(st.name)
        elif isinstance(st, If):
            for _t, _s, body in st.branches:
                last(body)
            last(st.orelse)
        elif isinstance(st, While):
            last(st.body)

    last(parse_procedure(wf.procedure).steps)
    return out


# --- goals ---------------------------------------------------------------------------------------------

def candidate_slots(wf: Workflow, conn: sqlite3.Connection, rng: random.Random, today: date,
                    free_text: bool = False) -> dict[str, Any]:
    """One coherent assignment of the workflow's slots."""
    conn.row_factory = sqlite3.Row
    tables = _tables(conn)
    links = _links(conn, tables)
    # the database records the past: a new request's dates, times and amounts are generated for half the
    # candidates (a date of birth or an existing booking's time must come from the rows)
    fresh = rng.random() < 0.5  # half the candidates take dates, times and amounts from the rows
    mapped = {s.name: match_column(s.name, tables) for s in wf.slots
              if not s.enum and not (fresh and s.type in ("date", "time", "number"))}
    mapped = {k: v for k, v in mapped.items() if v}
    used = {t for t, _ in mapped.values()}
    for slot, (t, c) in list(mapped.items()):  # an exact-name column of a table the other slots use
        better = [u for u in used if u != t and c in tables[u] and c == slot]
        if better:
            mapped[slot] = (better[0], c)
    by_table: dict[str, list[str]] = {}
    for slot, (t, _c) in mapped.items():
        by_table.setdefault(t, []).append(slot)
    values: dict[str, Any] = {}
    anchor_table, anchor = None, None
    for t in sorted(by_table, key=lambda t: (-len(by_table[t]), t)):
        rows = ([dict(r) for r in conn.execute(f"SELECT * FROM {t}")] if anchor is None
                else _related_rows(conn, t, anchor_table, anchor, links))
        if not rows:
            return {}
        row = rng.choice(rows)
        if anchor is None:
            anchor_table, anchor = t, row
        for slot in by_table[t]:
            spec = wf.slot(slot) if hasattr(wf, "slot") else next(s for s in wf.slots if s.name == slot)
            v = row[mapped[slot][1]]
            if spec.type == "string" and slot.endswith("s") and not mapped[slot][1].endswith("s"):
                # a plural slot over a singular column (transaction_ids ~ id): several related values
                same = [r[mapped[slot][1]] for r in rows]
                v = ", ".join(map(str, rng.sample(same, min(len(same), rng.choice([1, 2])))))
            prefix = _example_prefix(spec)
            values[slot] = f"{prefix}{v}" if prefix and not str(v).startswith(prefix) else v
            if spec.type == "integer" and str(values[slot]).isdigit() and not str(values[slot]).startswith("0"):
                values[slot] = int(values[slot])
    for s in wf.slots:
        if s.name not in values:
            pool = generated_values(s, rng, today, free_text)
            if not pool:
                return {}
            values[s.name] = rng.choice(pool)
            if s.type == "integer":
                values[s.name] = int(values[s.name])
    return values


def alternatives(wf: Workflow, goal_slots: dict[str, Any], conn, rng: random.Random, today: date,
                 free_text: bool = False) -> dict[str, list]:
    """Other plausible values per slot (what a user may say by mistake before correcting it)."""
    out = {}
    for _ in range(6):
        other = candidate_slots(wf, conn, rng, today, free_text)
        for k, v in other.items():
            if v != goal_slots.get(k):
                out.setdefault(k, [])
                if v not in out[k]:
                    out[k].append(v)
    return out


def branch_golds(wf: Workflow, slots: dict[str, Any], pristine: Path, work: Path, limit: int = MAX_BRANCH_PLAYS
                 ) -> list[tuple[Gold, dict[str, tuple[str, bool]]]]:
    """The golds of ``slots`` with every way of answering the natural-language conditions the procedure
    asks (depth first, at most ``limit`` plays): (gold, the condition answers it took)."""
    out, todo, plays = [], [{}], 0
    while todo and plays < limit:
        conds = todo.pop()
        plays += 1
        needed: list = []
        gold = measure_gold(wf, slots, pristine, work, conditions=conds, needed=needed)
        if needed:
            key, text = needed[0]
            todo += [{**conds, key: (text, False)}, {**conds, key: (text, True)}]
        elif gold is not None:
            out.append((gold, conds))
    return out


def generate_goals(library: Library, db: str | Path, seed: int = 0, workflows: list[str] | None = None,
                   today: date | None = None, free_text: bool = False) -> list[Goal]:
    """One goal per (workflow, branch) reachable with values from the environment (``free_text``: slots
    the database does not hold get generated values — a library of simulated tools)."""
    from workflows.demo.db import desk_today

    today = today or desk_today()
    work = Path(tempfile.mkdtemp(prefix="flowdesk-goals-"))
    pristine = work / "pristine.sqlite"
    shutil.copy(db, pristine)
    goals: list[Goal] = []
    try:
        conn = sqlite3.connect(str(pristine))
        for name in sorted(workflows or library.workflows):
            wf = library.workflows[name]
            rng = random.Random(f"{seed}:{name}")
            found: dict[str, Goal] = {}
            leaves = terminal_answers(wf)
            # simulated tools answer whatever values they get: a few candidates show every branch
            for _ in range(3 if free_text else MAX_CANDIDATES):
                if leaves and leaves <= set(found):
                    break
                slots = candidate_slots(wf, conn, rng, today, free_text)
                if not slots:
                    continue
                for gold, conds in branch_golds(wf, slots, pristine, work):
                    if not gold.terminal or gold.terminal in found:
                        continue
                    if conds and len({repr(c) for c in gold.calls}) < len(gold.calls):
                        continue  # a "try again" answered yes for ever: the loop ran out, no user does that
                    specs = {s.name: {"description": s.description or s.name.replace("_", " "), "type": s.type,
                                      "enum": list(s.enum or [])} for s in wf.slots}
                    declined = measure_gold(wf, slots, pristine, work, decline=True, conditions=conds) \
                        if gold.irreversible else None
                    found[gold.terminal] = Goal(name, wf.title or name.replace("_", " "), slots, specs, gold.terminal,
                                                gold, alternatives(wf, slots, conn, rng, today, free_text), declined,
                                                sorted(leaves), conds)
            goals += [found[k] for k in sorted(found)]
        conn.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return goals
