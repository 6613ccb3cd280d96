"""graph/served_threads.py without a server: the runtime's mutating operations are wrapped once, each
returns only after a write of the store that holds its change (one write for operations finishing
together), the file reloads, and the timer thread's flush is a no-op.  The SIGKILL test with the
real server is tests/test_serve.py."""

from __future__ import annotations

import asyncio
import threading
import types

from langgraph.checkpoint.memory import PersistentDict

from graph import served_threads


def _fake_ops(store: PersistentDict):
    """Stand-ins with the runtime's shape (static coroutine methods on three classes)."""

    class Threads:
        @staticmethod
        async def put(conn, thread_id):
            store["threads"].append(thread_id)
            await asyncio.sleep(0)
            return thread_id

        @staticmethod
        async def get(conn, thread_id):  # a read: not wrapped
            return thread_id

    class Runs:
        @staticmethod
        async def put(conn, run_id):
            store["runs"].append(run_id)
            raise RuntimeError("after the change")  # written all the same

    return types.SimpleNamespace(Threads=Threads, Runs=Runs, Assistants=type("Assistants", (), {}))


def test_each_change_is_on_disk_when_the_operation_returns(tmp_path):
    path = str(tmp_path / "ops.pckl")
    store = PersistentDict(filename=path)
    store.update(threads=[], runs=[])
    ops = _fake_ops(store)
    writes = []
    real_dump = served_threads.pickle.dump
    try:
        served_threads.pickle.dump = lambda obj, f, protocol: (writes.append(1), real_dump(obj, f, protocol))
        assert served_threads.install(ops, store) == ["Threads.put", "Runs.put"]
        assert served_threads.install(ops, store) == []  # once only

        def on_disk() -> dict:
            again = PersistentDict(filename=path)
            again.load()
            return dict(again)

        async def scenario():
            await asyncio.gather(*(ops.Threads.put(None, f"t{i}") for i in range(20)))
            assert on_disk()["threads"] == [f"t{i}" for i in range(20)]
            assert len(writes) == 1  # twenty operations finishing together: one write
            try:
                await ops.Runs.put(None, "r1")
            except RuntimeError:
                pass
            assert on_disk()["runs"] == ["r1"]
            assert await ops.Threads.get(None, "t1") == "t1" and len(writes) == 2

        asyncio.run(scenario())
        store["threads"].append("late")
        flusher = threading.Thread(target=store.sync)  # the runtime's timer thread
        flusher.start()
        flusher.join()
        assert "late" not in on_disk()["threads"]
    finally:
        served_threads.pickle.dump = real_dump
