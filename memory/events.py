"""The session event log: every event of every session, durable and append-only, outside the checkpoints.

One ``Event`` per thing that happened (the documented JSON object of ``flowdesk logs export``)::

    {"seq": 17, "thread": "t1", "session": "t1", "ts": "2026-11-23T16:40:02.113+00:00",
     "kind": "tool_error", "turn": 2, "workflow": "transfer_money", "frame": "f3", "name": "check_funds",
     "data": {"args": {...}, "error": "auth_token is not valid; ..."}}

``kind`` is one of ``KINDS``: ``user`` (the user's message), ``decision`` (the detector's STAY/SEARCH,
commands and query), ``candidates`` (ranked workflows), ``experience`` (blocks injected), ``proposal``
(the executor's), ``verdict`` (a post-decision rejection or safe reply), ``tool_call``, ``tool_result``,
``tool_error``, ``tool_cancelled``, ``interrupt`` (a question to the user, e.g. a confirmation),
``interrupt_answer``, ``reply`` (the agent's), ``outcome`` (a workflow instance completed) and
``recovered`` (calls a crash left unreported, settled).  ``frame`` is the dialogue-stack frame id: one
workflow instance, the unit a WISE-Flow trajectory is made of.  ``data`` passes through
``workflows.sanitize.redact_data``: no secret reaches the log.

Where it lives (``events_location``): ``events.sqlite`` beside the SQLite checkpoints (WAL, one
committed transaction per append), the same PostgreSQL database as the checkpoints (table
``flowdesk_events``) when ``FLOWDESK_CHECKPOINT_URL`` is a ``postgres://`` URL, or ``memory:<name>``
beside an in-memory checkpointer.  The graph state keeps only the latest events (``trace``); the full
history is here.  API::

    log = open_event_log(".flowdesk/events.sqlite")   # or "postgresql://...", or "memory:x"
    log.append([Event(...), ...])                     # seq/ts filled in
    log.events(thread=None, since=None) -> list[Event]
    log.export_jsonl(path, thread=None, since=None) -> int
    read_events(path_or_location) -> list[Event]      # a JSONL export or a log location
    iter_events(path_or_location, kinds=None)         # the same as a stream, optionally only some kinds
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

from pydantic import BaseModel, Field, ValidationError

from workflows.sanitize import redact, redact_data

TABLE = "flowdesk_events"
EVENTS_FILE = "events.sqlite"
MEMORY_PREFIX = "memory:"
KINDS = ("user", "decision", "candidates", "experience", "proposal", "verdict", "tool_call", "tool_result",
         "tool_error", "tool_cancelled", "interrupt", "interrupt_answer", "reply", "outcome", "recovered")
Kind = Literal["user", "decision", "candidates", "experience", "proposal", "verdict", "tool_call", "tool_result",
               "tool_error", "tool_cancelled", "interrupt", "interrupt_answer", "reply", "outcome", "recovered"]


class EventLogError(RuntimeError):
    """The event log cannot be opened, read or written (names the location or file and line)."""


class Event(BaseModel):
    """One logged event (one JSON object per line in an export)."""

    seq: int = 0  # position in the log (assigned on append; export order)
    thread: str  # conversation (checkpoint thread) id
    session: str = ""  # session id (the run's ``configurable.session_id``; default: the thread)
    ts: str = ""  # ISO-8601 UTC time of the append
    kind: Kind
    turn: int = 0  # the user turn it belongs to
    workflow: str = ""  # the active workflow ("" = none)
    frame: str = ""  # the workflow instance (dialogue-stack frame id)
    name: str = ""  # API or ANSWER name, when the event is about one
    data: dict[str, Any] = Field(default_factory=dict)


def events_location(ledger_or_checkpoint: str) -> str:
    """The event log beside a ledger/checkpoint location: same Postgres database, ``events.sqlite``
    in the same directory, or the same ``memory:`` name."""
    loc = str(ledger_or_checkpoint or "")
    if not loc or loc.startswith(("postgres://", "postgresql://", MEMORY_PREFIX)):
        return loc
    if loc == ":memory:":
        return MEMORY_PREFIX + "default"
    return str(Path(loc).with_name(EVENTS_FILE))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class EventLog:
    """Append-only log over SQLite or PostgreSQL (the SQL is shared; subclasses give the connection)."""

    _param = "?"
    _cols = "seq, thread, session, ts, kind, turn, workflow, frame, name, data"

    def __init__(self, location: str):
        self.location = location
        self._lock = threading.Lock()

    def _execute(self, sql: str, params: tuple = (), many: list[tuple] | None = None) -> list[tuple]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def append(self, events: Iterable[Event]) -> int:
        rows = [(e.thread, e.session or e.thread, e.ts or _now(), e.kind, int(e.turn), e.workflow, e.frame, e.name,
                 json.dumps(redact_data(e.data), sort_keys=True, default=str, ensure_ascii=False)) for e in events]
        if rows:
            p = self._param
            self._execute(f"INSERT INTO {TABLE} (thread, session, ts, kind, turn, workflow, frame, name, data) "
                          f"VALUES ({', '.join([p] * 9)})", many=rows)
        return len(rows)

    def events(self, thread: str | None = None, since: str | None = None,
               kinds: Iterable[str] | None = None) -> list[Event]:
        """Events in append order; ``since``: an ISO date/time (events at or after it); ``kinds``: only those."""
        where, params = [], []
        if kinds:
            where.append(f"kind IN ({', '.join([self._param] * len(set(kinds)))})")
            params += sorted(set(kinds))
        if thread:
            where.append(f"thread = {self._param}")
            params.append(thread)
        if since:
            where.append(f"ts >= {self._param}")
            params.append(since)
        sql = f"SELECT {self._cols} FROM {TABLE}" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY seq"
        return [self._event(r) for r in self._execute(sql, tuple(params))]

    def stream(self, kinds: Iterable[str] | None = None, page: int = 2000) -> Iterator[Event]:
        """All events (optionally only ``kinds``) in append order, read ``page`` rows at a time."""
        after, wanted = 0, sorted(set(kinds)) if kinds else []
        cond = f" AND kind IN ({', '.join([self._param] * len(wanted))})" if wanted else ""
        while True:
            rows = self._execute(f"SELECT {self._cols} FROM {TABLE} WHERE seq > {self._param}{cond} ORDER BY seq "
                                 f"LIMIT {int(page)}", (after, *wanted))
            for r in rows:
                yield self._event(r)
            if len(rows) < page:
                return
            after = rows[-1][0]

    @staticmethod
    def _event(r: tuple) -> Event:
        return Event(seq=r[0], thread=r[1], session=r[2], ts=r[3], kind=r[4], turn=r[5], workflow=r[6], frame=r[7],
                     name=r[8], data=json.loads(r[9]))

    def export_jsonl(self, path: str | Path, thread: str | None = None, since: str | None = None) -> int:
        events = self.events(thread, since)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            for e in events:
                fh.write(e.model_dump_json() + "\n")
        return len(events)

    def count(self) -> int:
        return int(self._execute(f"SELECT COUNT(*) FROM {TABLE}")[0][0])

    def __enter__(self) -> "EventLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SqliteEventLog(EventLog):
    _schema = (f"CREATE TABLE IF NOT EXISTS {TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT, thread TEXT NOT NULL, "
               f"session TEXT NOT NULL, ts TEXT NOT NULL, kind TEXT NOT NULL, turn INTEGER NOT NULL, "
               f"workflow TEXT NOT NULL, frame TEXT NOT NULL, name TEXT NOT NULL, data TEXT NOT NULL)")

    def __init__(self, location: str):
        super().__init__(location)
        target = ":memory:" if location.startswith(MEMORY_PREFIX) else location
        if target != ":memory:":
            path = Path(target)
            if path.is_dir():
                raise EventLogError(f"event log {path} is a directory; give a .sqlite file path")
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(target, timeout=30, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL: a committed append survives a crash of the process (WAL), an OS crash may lose the last
            # few — the log records, it decides nothing (the ledger, which does, syncs fully)
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(self._schema)
            self._conn.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_thread ON {TABLE} (thread, seq)")
        except sqlite3.Error as exc:
            raise EventLogError(f"event log {location}: {exc}") from None

    def _execute(self, sql: str, params: tuple = (), many: list[tuple] | None = None) -> list[tuple]:
        with self._lock:
            try:
                if many is not None:
                    with self._conn:  # one transaction for the batch
                        self._conn.execute("BEGIN")
                        self._conn.executemany(sql, many)
                    return []
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise EventLogError(f"event log {self.location}: {exc}") from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class PostgresEventLog(EventLog):
    _param = "%s"
    _schema = (f"CREATE TABLE IF NOT EXISTS {TABLE} (seq BIGSERIAL PRIMARY KEY, thread TEXT NOT NULL, "
               f"session TEXT NOT NULL, ts TEXT NOT NULL, kind TEXT NOT NULL, turn INTEGER NOT NULL, "
               f"workflow TEXT NOT NULL, frame TEXT NOT NULL, name TEXT NOT NULL, data TEXT NOT NULL)")

    def __init__(self, url: str):
        super().__init__(url)
        import psycopg

        try:
            self._conn = psycopg.connect(url, autocommit=True)
            self._conn.execute(self._schema)
            self._conn.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_thread ON {TABLE} (thread, seq)")
        except psycopg.Error as exc:
            raise EventLogError(f"event log {redact(url)}: {redact(exc)}") from None

    def _execute(self, sql: str, params: tuple = (), many: list[tuple] | None = None) -> list[tuple]:
        import psycopg

        with self._lock:
            try:
                if self._conn.closed:  # the server went away and came back
                    self._conn = psycopg.connect(self.location, autocommit=True)
                if many is not None:
                    with self._conn.transaction(), self._conn.cursor() as cur:
                        cur.executemany(sql, many)
                    return []
                cur = self._conn.execute(sql, params)
                return cur.fetchall() if cur.description else []
            except psycopg.Error as exc:
                raise EventLogError(f"event log {redact(self.location)}: {redact(exc)}") from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()


_SHARED: dict[str, EventLog] = {}
_SHARED_LOCK = threading.Lock()


def open_event_log(location: str | os.PathLike) -> EventLog:
    target = str(location)
    if target.startswith(("postgres://", "postgresql://")):
        return PostgresEventLog(target)
    if "://" in target:
        raise EventLogError(f"event log {redact(target)!r}: use a file path, a postgres:// URL or memory:<name>")
    return SqliteEventLog(target)


def shared_event_log(location: str) -> EventLog:
    """The process's open log at ``location`` (kept open: the graph appends on every step)."""
    with _SHARED_LOCK:
        log = _SHARED.get(location)
        if log is None:
            log = _SHARED[location] = open_event_log(location)
        return log


def close_shared_event_logs() -> None:
    with _SHARED_LOCK:
        for log in _SHARED.values():
            log.close()
        _SHARED.clear()


def read_events(source: str | Path) -> list[Event]:
    """Events from a JSONL export (``*.jsonl``) or a log location (SQLite file, postgres URL).
    A bad line raises ``EventLogError`` naming the file, line and field."""
    return list(iter_events(source))


def iter_events(source: str | Path, kinds: Iterable[str] | None = None) -> Iterator[Event]:
    """``read_events`` as a stream, optionally only some kinds (induction reads a log of any size in
    bounded memory)."""
    src, wanted = str(source), set(kinds) if kinds else None
    if src.endswith((".jsonl", ".json")):
        path = Path(src)
        if not path.is_file():
            raise EventLogError(f"{src}: no such file")
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    event = Event.model_validate_json(line)
                except ValidationError as exc:
                    err = exc.errors()[0]
                    where = ".".join(str(p) for p in err.get("loc", ())) or "line"
                    raise EventLogError(f"{src}:{n}: {where}: {err.get('msg')}") from None
                if wanted is None or event.kind in wanted:
                    yield event
        return
    if not src.startswith(("postgres://", "postgresql://", MEMORY_PREFIX)) and not Path(src).is_file():
        raise EventLogError(f"{src}: no such event log (give an events.sqlite, a postgres:// URL or a .jsonl export)")
    log = shared_event_log(src) if src.startswith(MEMORY_PREFIX) else open_event_log(src)
    try:
        yield from log.stream(wanted)
    finally:
        if not src.startswith(MEMORY_PREFIX):
            log.close()
