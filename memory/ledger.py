"""The tool-call ledger: a durable record of every side effect, for exactly-once tools.

Every tool call has an idempotency key (``call_key(thread, turn, call_id)``).  The ledger records
the key *before* the call and the result *after* it, in a store that survives the process: SQLite
by default (``ledger.sqlite`` beside the checkpoints, see ``ledger_location``), PostgreSQL when
given a ``postgres://`` URL (the same database as the checkpoints, table ``flowdesk_ledger``); the
connection is ``memory.sqlstore``'s, shared with the event log.

API (every method is safe across threads and processes; writes commit before they return)::

    ledger = open_ledger(".flowdesk/ledger.sqlite")      # or "postgresql://...", or ":memory:"
    rec = ledger.begin(key, tool, args, thread=None)     # None: the key is new, the caller runs the tool
                                                          # a LedgerRecord: the key was begun before
    ledger.complete(key, result, ok=True)                 # the outcome, once known
    ledger.get(key) -> LedgerRecord | None
    ledger.pending(thread) -> list[LedgerRecord]          # begun, never completed: outcome unknown
    ledger.records(thread) -> list[LedgerRecord]          # every call of a thread, oldest first
    ledger.close()
    shared_ledger(location) -> Ledger                     # one open ledger per location in a process;
                                                          # "memory:<name>" = a private in-memory ledger

The rule for the caller (the tools node):

1. ``begin`` returns ``None`` → run the tool with the key (python tools receive it as
   ``idempotency_key``, http tools as the ``Idempotency-Key`` header), then ``complete``.
2. ``begin`` returns a record with ``status == "done"`` or ``"failed"`` → do **not** run the tool;
   use ``record.result`` (a replay after a crash gets the recorded outcome).
3. ``begin`` returns a record with ``status == "pending"`` → an earlier attempt began and its outcome
   is unknown (the process died between the call and ``complete``).  Do not repeat an irreversible
   call blindly: reconcile it (ask the tool with the same key — an idempotent tool answers with the
   first outcome — or tell the user), then ``complete``.

Exactly one of several concurrent ``begin`` calls with the same key returns ``None`` (an atomic
insert-if-absent), so two workers replaying the same turn cannot both run the tool.

``args`` and ``result`` are stored through ``workflows.sanitize.redact_data``: a ledger never holds
a secret.  ``thread`` defaults to the part of the key before the first ``:``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from workflows.sanitize import redact, redact_data

from .sqlstore import MEMORY_PREFIX, OpenPerLocation, connect  # noqa: F401 - MEMORY_PREFIX: graph.checkpoint

Status = Literal["pending", "done", "failed"]
TABLE = "flowdesk_ledger"
LEDGER_FILE = "ledger.sqlite"


class LedgerError(RuntimeError):
    """The ledger cannot be opened or used (names the location, never a password)."""


@dataclass(frozen=True)
class LedgerRecord:
    key: str
    thread: str
    tool: str
    args: dict[str, Any]
    status: Status
    result: dict[str, Any] | None
    started_at: float
    finished_at: float | None

    @property
    def unknown_outcome(self) -> bool:
        return self.status == "pending"


def call_key(thread: str, turn: int | str, call_id: str) -> str:
    """The idempotency key of one tool call: stable across a replay of the same turn."""
    return f"{thread}:{turn}:{call_id}"


def ledger_location(checkpoint: str | os.PathLike | None) -> str:
    """Where the ledger of a checkpoint store lives: the same Postgres database, ``ledger.sqlite``
    beside a SQLite checkpoint file, ``:memory:`` for an in-memory checkpointer."""
    target = str(checkpoint) if checkpoint not in (None, "") else ""
    if not target:
        from_env = os.environ.get("FLOWDESK_CHECKPOINT_URL", "")
        target = from_env or str(Path(".flowdesk") / "checkpoints.sqlite")
    if target.startswith(("postgres://", "postgresql://")) or target == ":memory:":
        return target
    return str(Path(target).with_name(LEDGER_FILE))


def _dump(obj: Any) -> str:
    return json.dumps(redact_data(obj), sort_keys=True, default=str)


_SCHEMA = (f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, thread TEXT NOT NULL, tool TEXT NOT NULL, "
           f"args TEXT NOT NULL, status TEXT NOT NULL, result TEXT, started_at DOUBLE PRECISION NOT NULL, "
           f"finished_at DOUBLE PRECISION)",
           f"CREATE INDEX IF NOT EXISTS {TABLE}_thread ON {TABLE} (thread, status)")
_COLS = "key, thread, tool, args, status, result, started_at, finished_at"


class Ledger:
    """The ledger table over a ``memory.sqlstore`` connection (SQLite or PostgreSQL)."""

    def __init__(self, location: str):
        self.location = location
        # FULL: a completed record survives power loss too; every statement is idempotent (insert-if-absent,
        # update to the same outcome, reads), so one retry on a PostgreSQL connection a restart dropped is safe
        self._db = connect(location, what="ledger", error=LedgerError, schema=_SCHEMA, synchronous="FULL", retry=True)

    def _execute(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self._db.run(sql, params)

    def close(self) -> None:
        self._db.close()

    def begin(self, key: str, tool: str, args: dict[str, Any] | None, *, thread: str | None = None) -> LedgerRecord | None:
        """Record that ``tool`` is about to run under ``key``.  ``None`` when the key is new (run the
        tool); else the existing record (do not run it again; see the module docstring)."""
        thread = thread if thread is not None else key.split(":", 1)[0]
        inserted = self._execute(
            f"INSERT INTO {TABLE} (key, thread, tool, args, status, started_at) VALUES (?, ?, ?, ?, 'pending', ?) "
            f"ON CONFLICT (key) DO NOTHING RETURNING key", (key, thread, tool, _dump(args or {}), time.time()))
        if inserted:
            return None
        rec = self.get(key)
        if rec is None:  # deleted between the two statements: cannot happen without an operator
            raise LedgerError(f"ledger {redact(self.location)}: key {key!r} vanished while it was begun")
        return rec

    def complete(self, key: str, result: dict[str, Any] | None, *, ok: bool = True) -> None:
        """Record the outcome of the call begun under ``key`` (idempotent: the first outcome stays)."""
        rows = self._execute(
            f"UPDATE {TABLE} SET status = ?, result = ?, finished_at = ? WHERE key = ? AND status = 'pending' "
            f"RETURNING key", ("done" if ok else "failed", _dump(result or {}), time.time(), key))
        if not rows and self.get(key) is None:
            raise LedgerError(f"ledger {redact(self.location)}: complete({key!r}) without begin")

    def get(self, key: str) -> LedgerRecord | None:
        rows = self._execute(f"SELECT {_COLS} FROM {TABLE} WHERE key = ?", (key,))
        return self._record(rows[0]) if rows else None

    def pending(self, thread: str) -> list[LedgerRecord]:
        """Calls of ``thread`` begun and never completed: their outcome is unknown."""
        rows = self._execute(f"SELECT {_COLS} FROM {TABLE} WHERE thread = ? AND status = 'pending' "
                             f"ORDER BY started_at, key", (thread,))
        return [self._record(r) for r in rows]

    def records(self, thread: str) -> list[LedgerRecord]:
        rows = self._execute(f"SELECT {_COLS} FROM {TABLE} WHERE thread = ? ORDER BY started_at, key", (thread,))
        return [self._record(r) for r in rows]

    @staticmethod
    def _record(row: tuple) -> LedgerRecord:
        key, thread, tool, args, status, result, started, finished = row
        return LedgerRecord(key, thread, tool, json.loads(args), status,
                            json.loads(result) if result is not None else None, float(started),
                            float(finished) if finished is not None else None)

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_SHARED: OpenPerLocation[Ledger] = OpenPerLocation(lambda location: open_ledger(location))  # defined below


def shared_ledger(location: str) -> Ledger:
    """The process's open ledger at ``location`` (opened on first use, kept open: the tools node asks
    for it on every call).  ``memory:<name>`` is an in-memory ledger private to that name — what an
    agent on an in-memory checkpointer gets, so two such agents never see each other's calls."""
    return _SHARED.get(location)


def close_shared_ledgers() -> None:
    """Close every ledger ``shared_ledger`` opened (tests; before a fork: a child opens its own)."""
    _SHARED.close_all()


def open_ledger(location: str | os.PathLike | None = None) -> Ledger:
    """A ledger at a SQLite path, ``:memory:`` or a ``postgres://`` URL (default: beside the
    default checkpoints, ``.flowdesk/ledger.sqlite``)."""
    target = str(location) if location not in (None, "") else ledger_location(None)
    return Ledger(target)
