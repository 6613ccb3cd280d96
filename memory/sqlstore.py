"""The SQL connection the durable records share: embedded SQLite or PostgreSQL, one table owner per module.

The tool-call ledger (``memory.ledger``) and the session event log (``memory.events``) each own a table
and its SQL; this module owns what is the same for both — opening the connection (a SQLite file in WAL
mode, ``:memory:``/``memory:<name>``, or a ``postgres://`` URL), creating the schema, running statements
under a lock (the threads of a process share one connection), the placeholder style (statements are
written with ``?``), reconnecting after a PostgreSQL restart, turning driver errors into the owner's named
error (a URL passes through ``redact``: never a password), and one open store per location in a process::

    db = connect(location, what="ledger", error=LedgerError, schema=[...], synchronous="FULL", retry=True)
    db.run("SELECT ... WHERE key = ?", (key,)) -> list[tuple]
    db.run("INSERT ...", many=[(...), ...])             # one transaction for the batch
    db.close()
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Callable, Generic, Sequence, TypeVar

from workflows.sanitize import redact

MEMORY_PREFIX = "memory:"
POSTGRES = ("postgres://", "postgresql://")


class SqlDb:
    """One connection; ``run`` is safe across threads.  ``what`` names the owner in errors ("ledger")."""

    def __init__(self, location: str, what: str, error: type[Exception]):
        self.location = location
        self.what = what
        self.error = error
        self._lock = threading.Lock()

    def fail(self, exc: BaseException | str) -> Exception:
        return self.error(f"{self.what} {redact(self.location)}: {redact(exc)}")

    def run(self, sql: str, params: tuple = (), many: list[tuple] | None = None) -> list[tuple]:
        raise NotImplementedError

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class SqliteDb(SqlDb):
    def __init__(self, location: str, what: str, error: type[Exception], schema: Sequence[str], synchronous: str):
        super().__init__(location, what, error)
        target = ":memory:" if location.startswith(MEMORY_PREFIX) or location == ":memory:" else location
        if target != ":memory:":
            path = Path(target)
            if path.is_dir():
                raise error(f"{what} {path} is a directory; give a .sqlite file path")
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # autocommit (isolation_level=None): every statement is its own committed transaction
            self._conn = sqlite3.connect(target, timeout=30, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={synchronous}")
            for stmt in schema:
                self._conn.execute(stmt)
        except sqlite3.Error as exc:
            raise self.fail(exc) from None

    def run(self, sql: str, params: tuple = (), many: list[tuple] | None = None) -> list[tuple]:
        with self._lock:
            try:
                if many is not None:
                    with self._conn:  # one transaction for the batch
                        self._conn.execute("BEGIN")
                        self._conn.executemany(sql, many)
                    return []
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self.fail(exc) from None


class PostgresDb(SqlDb):
    def __init__(self, url: str, what: str, error: type[Exception], schema: Sequence[str], retry: bool):
        super().__init__(url, what, error)
        import psycopg

        self._retry = retry
        try:
            self._conn = psycopg.connect(url, autocommit=True)
            for stmt in schema:
                self._conn.execute(stmt)
        except psycopg.Error as exc:
            raise self.fail(exc) from None

    def run(self, sql: str, params: tuple = (), many: list[tuple] | None = None) -> list[tuple]:
        import psycopg

        sql = sql.replace("?", "%s")
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._conn.closed:  # the server went away and came back: a new connection
                        self._conn = psycopg.connect(self.location, autocommit=True)
                    if many is not None:
                        with self._conn.transaction(), self._conn.cursor() as cur:
                            cur.executemany(sql, many)
                        return []
                    cur = self._conn.execute(sql, params)
                    return cur.fetchall() if cur.description else []
                except psycopg.OperationalError as exc:
                    # A connection the server dropped (restart, failover) is only known broken once used: with
                    # ``retry`` (an owner whose statements are all idempotent) one retry on a new connection.
                    if not self._retry or attempt == 2 or not self._conn.closed:
                        raise self.fail(exc) from None
                except psycopg.Error as exc:
                    raise self.fail(exc) from None
        raise AssertionError("unreachable")


def connect(location: str, *, what: str, error: type[Exception], schema: Sequence[str],
            synchronous: str = "FULL", retry: bool = False) -> SqlDb:
    """A SQLite file, ``:memory:``/``memory:<name>`` (a private in-memory database) or a ``postgres://`` URL.
    ``synchronous``: SQLite's durability (FULL survives power loss; NORMAL a crash of the process);
    ``retry``: retry a statement once on a PostgreSQL connection the server dropped."""
    target = str(location)
    if target.startswith(POSTGRES):
        return PostgresDb(target, what, error, schema, retry)
    if "://" in target:
        raise error(f"{what} location {redact(target)!r}: use a file path or a postgres:// URL (or memory:<name>)")
    return SqliteDb(target, what, error, schema, synchronous)


T = TypeVar("T")


class OpenPerLocation(Generic[T]):
    """One open store per location in a process (the graph uses it on every step: it stays open)."""

    def __init__(self, opener: Callable[[str], T]):
        self._opener = opener
        self._open: dict[str, T] = {}
        self._lock = threading.Lock()

    def get(self, location: str) -> T:
        with self._lock:
            store = self._open.get(location)
            if store is None:
                store = self._open[location] = self._opener(location)
            return store

    def close_all(self) -> None:
        """Close every store opened here (tests; before a fork: a child opens its own)."""
        with self._lock:
            for store in self._open.values():
                store.close()
            self._open.clear()
