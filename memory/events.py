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
history is here; the connection (SQLite/PostgreSQL) is ``memory.sqlstore``'s.  API::

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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

from pydantic import BaseModel, Field, ValidationError

from workflows.sanitize import redact_data

from .sqlstore import MEMORY_PREFIX, POSTGRES, OpenPerLocation, connect

TABLE = "flowdesk_events"
EVENTS_FILE = "events.sqlite"
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
    if not loc or loc.startswith((*POSTGRES, MEMORY_PREFIX)):
        return loc
    if loc == ":memory:":
        return MEMORY_PREFIX + "default"
    return str(Path(loc).with_name(EVENTS_FILE))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _schema(postgres: bool) -> tuple[str, ...]:
    seq = "BIGSERIAL PRIMARY KEY" if postgres else "INTEGER PRIMARY KEY AUTOINCREMENT"
    return (f"CREATE TABLE IF NOT EXISTS {TABLE} (seq {seq}, thread TEXT NOT NULL, session TEXT NOT NULL, "
            f"ts TEXT NOT NULL, kind TEXT NOT NULL, turn INTEGER NOT NULL, workflow TEXT NOT NULL, "
            f"frame TEXT NOT NULL, name TEXT NOT NULL, data TEXT NOT NULL)",
            f"CREATE INDEX IF NOT EXISTS {TABLE}_thread ON {TABLE} (thread, seq)")


_COLS = "seq, thread, session, ts, kind, turn, workflow, frame, name, data"


class EventLog:
    """Append-only log over a ``memory.sqlstore`` connection (SQLite or PostgreSQL)."""

    def __init__(self, location: str):
        self.location = location
        # NORMAL: a committed append survives a crash of the process (WAL), an OS crash may lose the last few —
        # the log records, it decides nothing (the ledger, which does, syncs fully); no retry: an append whose
        # commit was acknowledged on a dropped connection would be logged twice
        self._db = connect(location, what="event log", error=EventLogError,
                           schema=_schema(location.startswith(POSTGRES)),
                           synchronous="NORMAL")

    def close(self) -> None:
        self._db.close()

    def append(self, events: Iterable[Event]) -> int:
        rows = [(e.thread, e.session or e.thread, e.ts or _now(), e.kind, int(e.turn), e.workflow, e.frame, e.name,
                 json.dumps(redact_data(e.data), sort_keys=True, default=str, ensure_ascii=False)) for e in events]
        if rows:
            self._db.run(f"INSERT INTO {TABLE} (thread, session, ts, kind, turn, workflow, frame, name, data) "
                         f"VALUES ({', '.join(['?'] * 9)})", many=rows)
        return len(rows)

    def events(self, thread: str | None = None, since: str | None = None,
               kinds: Iterable[str] | None = None) -> list[Event]:
        """Events in append order; ``since``: an ISO date/time (events at or after it); ``kinds``: only those."""
        where, params = [], []
        if kinds:
            where.append(f"kind IN ({', '.join(['?'] * len(set(kinds)))})")
            params += sorted(set(kinds))
        if thread:
            where.append("thread = ?")
            params.append(thread)
        if since:
            where.append("ts >= ?")
            params.append(since)
        sql = f"SELECT {_COLS} FROM {TABLE}" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY seq"
        return [self._event(r) for r in self._db.run(sql, tuple(params))]

    def stream(self, kinds: Iterable[str] | None = None, page: int = 2000) -> Iterator[Event]:
        """All events (optionally only ``kinds``) in append order, read ``page`` rows at a time."""
        after, wanted = 0, sorted(set(kinds)) if kinds else []
        cond = f" AND kind IN ({', '.join(['?'] * len(wanted))})" if wanted else ""
        while True:
            rows = self._db.run(f"SELECT {_COLS} FROM {TABLE} WHERE seq > ?{cond} ORDER BY seq LIMIT {int(page)}",
                                (after, *wanted))
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
        return int(self._db.run(f"SELECT COUNT(*) FROM {TABLE}")[0][0])

    def __enter__(self) -> "EventLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_event_log(location: str | os.PathLike) -> EventLog:
    return EventLog(str(location))


_SHARED: OpenPerLocation[EventLog] = OpenPerLocation(open_event_log)


def shared_event_log(location: str) -> EventLog:
    """The process's open log at ``location`` (kept open: the graph appends on every step)."""
    return _SHARED.get(location)


def close_shared_event_logs() -> None:
    _SHARED.close_all()


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
    if not src.startswith((*POSTGRES, MEMORY_PREFIX)) and not Path(src).is_file():
        raise EventLogError(f"{src}: no such event log (give an events.sqlite, a postgres:// URL or a .jsonl export)")
    log = shared_event_log(src) if src.startswith(MEMORY_PREFIX) else open_event_log(src)
    try:
        yield from log.stream(wanted)
    finally:
        if not src.startswith(MEMORY_PREFIX):
            log.close()
