"""A throw-away PostgreSQL cluster for tests (the scale-out and fault suites): Debian's / the system's
``initdb`` + ``pg_ctl`` on a free 127.0.0.1 port in a temp directory, run as the ``postgres`` user
when the tests run as root.  ``stop()`` / ``start()`` take the server away and bring it back on the
same port and data (the fault tests); ``close()`` stops it (by ``pg_ctl``, then by its PID) and
removes the directory.  ``PgCluster.create()`` skips the test with the reason when it cannot run."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bin() -> Path | None:
    for cand in [os.path.dirname(os.path.realpath(shutil.which("initdb") or "")) or None,
                 *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]:
        if cand and all((Path(cand) / b).exists() for b in ("initdb", "pg_ctl", "postgres")):
            return Path(cand)
    return None


class PgCluster:
    def __init__(self, bindir: Path, root: str, as_user: list[str]):
        self.bindir, self.root, self.as_user = bindir, root, as_user
        self.data, self.log = f"{root}/data", f"{root}/postgres.log"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.pid: int | None = None

    @classmethod
    def create(cls) -> "PgCluster":
        try:
            import langgraph.checkpoint.postgres  # noqa: F401
        except ImportError:
            pytest.skip("langgraph-checkpoint-postgres is not installed (pip install -e .)")
        bindir = pg_bin()
        if bindir is None:
            pytest.skip("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; apt-get install postgresql")
        as_user: list[str] = []
        # PostgreSQL refuses to run as root: run it as the `postgres` user in a directory it owns.
        root = tempfile.mkdtemp(prefix="flowdesk-pg-")  # not under pytest's 0700 root-owned tmp dir
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(root)
                pytest.skip("running as root and there is no `postgres` user to run the server as")
            if not shutil.which("runuser"):
                shutil.rmtree(root)
                pytest.skip("running as root and `runuser` is missing")
            os.chown(root, pw.pw_uid, pw.pw_gid)
            as_user = ["runuser", "-u", "postgres", "--"]
        os.chmod(root, 0o700)
        cluster = cls(bindir, root, as_user)
        try:
            subprocess.run([*as_user, str(bindir / "initdb"), "-D", cluster.data, "-U", "postgres", "--auth=trust",
                            "-E", "UTF8", "--no-sync"], check=True, capture_output=True, text=True, timeout=60)
        except subprocess.CalledProcessError as exc:
            shutil.rmtree(root, ignore_errors=True)
            pytest.fail(f"initdb failed: {exc.stdout}{exc.stderr}")
        cluster.start()
        return cluster

    def _pg_ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([*self.as_user, str(self.bindir / "pg_ctl"), "-D", self.data, *args],
                              capture_output=True, text=True, timeout=timeout)

    def start(self) -> None:
        # fsync off: a throw-away cluster; the tests check reopening, not crash safety of Postgres.
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        started = self._pg_ctl("-l", self.log, "-w", "-t", "30", "-o", opts, "start")
        if started.returncode != 0:
            tail = Path(self.log).read_text()[-2000:] if Path(self.log).exists() else ""
            pytest.fail(f"pg_ctl start failed: {started.stdout}{started.stderr}\n{tail}")
        self.pid = int(Path(self.data, "postmaster.pid").read_text().split()[0])

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: no shutdown checkpoint, as after a crash); the data stays."""
        self._pg_ctl("-m", mode, "-w", "-t", "20", "stop")
        if self.pid is not None:
            try:  # fallback: the postmaster by its PID
                os.kill(self.pid, 0)
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.pid = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
