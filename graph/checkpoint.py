"""Checkpointer factory: where conversation state (one LangGraph thread per conversation) lives.

``open_checkpointer()`` opens a SQLite checkpointer at ``.flowdesk/checkpoints.sqlite`` (the CLI
and Python default).  A ``postgres://`` / ``postgresql://`` URL — argument or env
``FLOWDESK_CHECKPOINT_URL`` — opens a Postgres checkpointer instead (langgraph-checkpoint-postgres,
a main dependency; tests/test_scaleout.py runs it against a real server).  The graph exported in
``langgraph.json`` is compiled without one: the LangGraph server injects its checkpointer, which
``langgraph.json``'s ``checkpointer.path`` points at ``graph.serve.server_checkpointer`` — the
async twin ``open_async_checkpointer`` over the same SQLite file or Postgres database — so served
threads survive a SIGKILL of the server (``flowdesk serve``).

LangGraph writes a checkpoint after every super-step, each in its own SQLite transaction; the CLI
and the demo run turns with ``durability="sync"`` (``graph.chat.run_turn``), so a process killed in
the middle of a turn loses only the step in flight: on reopening, ``invoke(None, config)`` finishes
that turn, and a new message simply starts the next one.

``ledger_for(checkpointer)`` says where the tool-call ledger (``memory.ledger``) of an agent on that
checkpointer lives: ``ledger.sqlite`` beside a SQLite file, the same PostgreSQL database, or a private
in-memory ledger for an in-memory checkpointer (its threads die with the process, and so do its calls).

A store that stops answering mid-session (a SQLite file locked past the busy timeout or unreadable, a
PostgreSQL server restarting) is ``CheckpointUnavailableError`` at the turn's boundary
(``unavailable(checkpointer, exc)``, raised by ``graph.chat.run_turn``): the location, the cause, and
that the conversation so far is kept.  PostgreSQL savers sit on a connection pool that checks a
connection before lending it, so once the server is back the same saver — and the thread — carry on.
"""

from __future__ import annotations

import os
import uuid
import weakref
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import AsyncIterator, Iterator

DEFAULT_PATH = Path(".flowdesk") / "checkpoints.sqlite"
ENV_URL = "FLOWDESK_CHECKPOINT_URL"


class CheckpointConfigError(ValueError):
    pass


class CheckpointUnavailableError(RuntimeError):
    """The checkpoint store did not answer during a turn; names the store and what to do."""


def store_errors() -> tuple[type[BaseException], ...]:
    """What a checkpoint store that stopped answering raises (not programming errors)."""
    import sqlite3

    errors: list[type[BaseException]] = [sqlite3.OperationalError]
    try:
        import psycopg
        from psycopg_pool import PoolTimeout

        errors += [psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout]
    except ImportError:
        pass
    return tuple(errors)


def unavailable(checkpointer: object | None, exc: BaseException) -> CheckpointUnavailableError:
    from workflows.sanitize import redact

    if isinstance(checkpointer, str):  # a location, before any saver exists
        where = checkpointer
    else:
        try:
            where = _LOCATIONS.get(checkpointer) if checkpointer is not None else None
        except TypeError:
            where = None
    return CheckpointUnavailableError(redact(
        f"checkpoint store {where or type(checkpointer).__name__}: not answering ({type(exc).__name__}: "
        f"{str(exc).strip()[:160]}); this turn did not finish. The conversation so far is kept: once the "
        "store answers again, send the message again (a turn cut off midway is finished first)"))


# checkpointer -> the location it was opened at (open_checkpointer / open_async_checkpointer) or a
# private memory:<name> ledger name
_LOCATIONS: "weakref.WeakKeyDictionary[object, str]" = weakref.WeakKeyDictionary()


def ledger_for(checkpointer: object | None) -> str:
    """The ledger location of an agent on ``checkpointer`` ("" without one: no thread can be replayed)."""
    from memory.ledger import MEMORY_PREFIX, ledger_location

    if checkpointer is None:
        return ""
    try:
        known = _LOCATIONS.get(checkpointer)
    except TypeError:  # not weak-referenceable
        known = None
    if known is None:
        conn = getattr(checkpointer, "conn", None)
        try:  # a SqliteSaver opened elsewhere: its main database file
            rows = conn.execute("PRAGMA database_list").fetchall() if conn is not None else []
            known = next((r[2] for r in rows if r[1] == "main" and r[2]), None)
        except Exception:  # noqa: BLE001 - not SQLite (or async): fall through
            known = None
    if known is None or known == ":memory:":
        known = MEMORY_PREFIX + uuid.uuid4().hex  # in-memory threads: a private in-memory ledger
        _remember(checkpointer, known)
    if known.startswith(MEMORY_PREFIX):
        return known
    return ledger_location(known)


def _remember(saver: object, target: str) -> None:
    try:
        _LOCATIONS[saver] = target
    except TypeError:
        pass


def _is_postgres(target: str) -> bool:
    return target.startswith(("postgres://", "postgresql://"))


def resolve_target(path_or_url: str | os.PathLike | None) -> str:
    """The checkpoint location: the argument, else ``FLOWDESK_CHECKPOINT_URL``, else the default file."""
    return str(path_or_url) if path_or_url not in (None, "") else os.environ.get(ENV_URL) or str(DEFAULT_PATH)


def _sqlite_path(target: str) -> str:
    if "://" in target:
        from workflows.sanitize import redact

        raise CheckpointConfigError(
            f"checkpoint location {redact(target)!r}: use a file path or a postgres:// URL")
    if target != ":memory:":
        path = Path(target)
        if path.is_dir():
            raise CheckpointConfigError(f"checkpoint path {path} is a directory; give a .sqlite file path")
        path.parent.mkdir(parents=True, exist_ok=True)
    return target


@asynccontextmanager
async def open_async_checkpointer(path_or_url: str | os.PathLike | None = None) -> AsyncIterator[object]:
    """The async checkpointer over the same store as ``open_checkpointer`` (for the LangGraph server)."""
    target = resolve_target(path_or_url)
    if _is_postgres(target):
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        import psycopg
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        try:
            await (await psycopg.AsyncConnection.connect(target, connect_timeout=10)).close()
        except psycopg.Error as exc:
            raise unavailable(target, exc) from None

        async with AsyncConnectionPool(target, min_size=1, max_size=8, open=False,
                                       check=AsyncConnectionPool.check_connection,
                                       kwargs={"autocommit": True, "prepare_threshold": 0,
                                               "row_factory": dict_row}) as pool:
            saver = AsyncPostgresSaver(pool)
            _remember(saver, target)
            await saver.setup()
            yield saver
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(_sqlite_path(target)) as saver:
        _remember(saver, target)
        await saver.conn.execute("PRAGMA journal_mode=WAL")
        await saver.setup()
        yield saver


@contextmanager
def open_checkpointer(path_or_url: str | os.PathLike | None = None) -> Iterator[object]:
    """Yield a ready checkpointer; closes its connection on exit.

    ``None`` reads ``FLOWDESK_CHECKPOINT_URL`` and falls back to ``.flowdesk/checkpoints.sqlite``.
    ``":memory:"`` gives a throw-away SQLite checkpointer.
    """
    target = resolve_target(path_or_url)
    if _is_postgres(target):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError as exc:  # a trimmed install
            raise CheckpointConfigError(
                f"{ENV_URL}={target.split('@')[-1]!r} needs the postgres extra: pip install 'flowdesk[postgres]'"
            ) from exc
        import psycopg
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        try:  # the server's own reason now (refused, auth, no such database), not a pool timeout later
            psycopg.connect(target, connect_timeout=10).close()
        except psycopg.Error as exc:
            raise unavailable(target, exc) from None
        # A pool, not one connection: a connection the server dropped (restart, failover) is replaced
        # on the next checkout instead of failing every later turn of the process.
        with ConnectionPool(target, min_size=1, max_size=4, open=True, check=ConnectionPool.check_connection,
                            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}) as pool:
            saver = PostgresSaver(pool)
            _remember(saver, target)
            saver.setup()  # idempotent: creates/migrates the checkpoint tables
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(_sqlite_path(target)) as saver:
        _remember(saver, target)
        # WAL lets a reader (flowdesk chat --trace, a test) look while another process writes, and
        # keeps committed checkpoints intact when a writer is killed mid-transaction.
        saver.conn.execute("PRAGMA journal_mode=WAL")
        saver.setup()
        yield saver
