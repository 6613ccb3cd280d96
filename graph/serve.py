"""``flowdesk serve``: the LangGraph API server (Studio, SDK) made durable and well-behaved.

What ``langgraph dev`` does not give an operator, and this does:

- **Durable threads.** langgraph-api 0.16 loads a custom checkpointer from the ``checkpointer.path``
  key of ``langgraph.json`` (``graph.serve.server_checkpointer``: an import path to a ``BaseCheckpointSaver`` or to an async context
  manager yielding one; it replaces the in-memory saver whose pickles are written only every
  10 s and on a clean exit).  Ours is ``server_checkpointer``: ``graph.checkpoint``'s async saver
  over ``.flowdesk/checkpoints.sqlite`` (or ``FLOWDESK_CHECKPOINT_URL``, a Postgres URL for
  scale-out), committed after every step.  The server's own thread list (the runtime's
  in-memory store, pickled by a 10 s timer) is written through on every change instead
  (``graph.served_threads``), so a SIGKILL loses no thread a client was told exists.
- **One process tree, one owner.** The server runs without the auto-reloader (whose worker
  process kept serving the port after a ``kill -9`` of the main PID), in a child process group of
  this supervisor.  SIGTERM/SIGINT stop the whole group (SIGTERM, then SIGKILL after
  ``STOP_GRACE_SECONDS``); the child gets SIGKILL if the supervisor dies (Linux
  ``PR_SET_PDEATHSIG``), so nothing outlives ``flowdesk serve``.
- **Loopback and a fixed port.** Binds 127.0.0.1 unless ``--host`` says otherwise; a busy port is
  an error (exit 2), never a silent move to another port.

The child is ``python -m graph.serve --child HOST PORT CONFIG``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from graph.checkpoint import (ENV_URL, CheckpointConfigError, CheckpointUnavailableError, open_async_checkpointer,
                              open_checkpointer, resolve_target)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 2034  # not langgraph's 2024
STOP_GRACE_SECONDS = 10.0
ROOT = Path(__file__).resolve().parent.parent


class ServeError(RuntimeError):
    """The server cannot start (busy port, bad configuration); the message says what to change."""


@asynccontextmanager
async def server_checkpointer() -> AsyncIterator[object]:
    """The LangGraph server's checkpointer (``langgraph.json`` → ``checkpointer.path``)."""
    async with open_async_checkpointer(None) as saver:
        yield saver


def port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # Same option as uvicorn, so a port in TIME_WAIT after our own restart counts as free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _busy(host: str, port: int) -> ServeError:
    return ServeError(f"port {port} on {host} is in use; flowdesk serve does not move to another port "
                      f"(choose one with --port, or stop what holds it)")


def load_config(path: Path) -> dict:
    """``langgraph.json`` with graph and checkpointer paths made absolute (the server's cwd may differ)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ServeError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ServeError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(config, dict) or not isinstance(config.get("graphs"), dict) or not config["graphs"]:
        raise ServeError(f"{path}: graphs: expected a mapping of graph name to 'file.py:variable'")

    def absolute(spec: str) -> str:
        file, sep, attr = spec.rpartition(":")
        if sep and (file.startswith(".") or "/" in file):
            return f"{(path.parent / file).resolve()}:{attr}"
        return spec

    config["graphs"] = {name: absolute(str(spec)) for name, spec in config["graphs"].items()}
    cp = config.get("checkpointer")
    if not (isinstance(cp, dict) and cp.get("path")):
        raise ServeError(f"{path}: checkpointer.path is missing; without it the server keeps threads in memory")
    config["checkpointer"] = {**cp, "path": absolute(str(cp["path"]))}
    return config


# --- supervisor ----------------------------------------------------------------------------------

def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: SIGTERM/SIGINT handling below still stops the group


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, checkpoint: str | None = None,
          config: str | os.PathLike = ROOT / "langgraph.json", echo=print) -> int:
    """Run the server until it exits or a SIGTERM/SIGINT arrives; returns the exit code."""
    config_path = Path(config).resolve()
    load_config(config_path)  # fail here, with the file named, rather than in the child
    if not 0 < int(port) < 65536:
        raise ServeError(f"port: {port} is not a TCP port (1-65535)")
    if not port_free(host, port):
        raise _busy(host, port)
    target = resolve_target(checkpoint)
    if "://" in target and not target.startswith(("postgres://", "postgresql://")):
        raise CheckpointConfigError("checkpoint: use a file path or a postgres:// URL")
    if "://" not in target and target != ":memory:":
        target = str(Path(target).resolve())
    # The store must answer before the server starts: otherwise the server dies at startup with a
    # traceback from inside langgraph-api instead of the store's named error (CheckpointUnavailableError).
    try:
        with open_checkpointer(target):
            pass
    except CheckpointUnavailableError as exc:
        reason = str(exc).split("; this turn did not finish")[0]
        raise ServeError(f"{reason}; start it (or fix --checkpoint / {ENV_URL}) and run flowdesk serve again") from None
    env = {**os.environ, ENV_URL: target, "LANGGRAPH_NO_VERSION_CHECK": "true", "LANGGRAPH_CLI_NO_ANALYTICS": "1"}
    child = subprocess.Popen([sys.executable, "-m", "graph.serve", "--child", host, str(port), str(config_path)],
                             env=env, start_new_session=True, preexec_fn=_die_with_parent)
    stopping = {"signal": None}

    def stop(signum, _frame):
        stopping["signal"] = signum
        _signal_group(child.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    echo(f"flowdesk serve: http://{host}:{port} (pid {child.pid}, checkpoints {_shown(target)}); "
         f"Ctrl-C or SIGTERM stops it")
    try:
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if stopping["signal"] is not None:
                    try:
                        code = child.wait(timeout=STOP_GRACE_SECONDS)
                    except subprocess.TimeoutExpired:
                        _signal_group(child.pid, signal.SIGKILL)
                        code = child.wait()
                    break
    finally:
        _signal_group(child.pid, signal.SIGKILL)  # anything the server started and left behind
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0 if stopping["signal"] is not None else code


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _shown(target: str) -> str:
    from workflows.sanitize import redact

    return redact(target)


# --- the server process ----------------------------------------------------------------------------

def _child(host: str, port: int, config_path: Path) -> None:
    import langgraph_api.cli as lg_cli

    from graph import served_threads

    config = load_config(config_path)
    served_threads.install()  # the thread list on disk before a client hears it exists

    def strict_port(h: str, p: int | None) -> int:
        # langgraph-api moves to another free port with a warning; an operator's clients would miss it.
        if p is None or not port_free(h, p):
            raise _busy(h, p or 0)
        return p

    lg_cli._resolve_port = strict_port
    lg_cli.run_server(host=host, port=port, reload=False, graphs=config["graphs"], env=config.get("env"),
                      checkpointer=config["checkpointer"], store=config.get("store"), http=config.get("http"),
                      open_browser=False, server_level="WARNING")


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--child":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        _child(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    except ServeError as exc:
        print(f"flowdesk serve: {exc}", file=sys.stderr)
        sys.exit(2)
