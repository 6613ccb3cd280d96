"""Kill harness for tests/test_faults_kill.py: SIGKILL real processes running a turn with an
irreversible tool, recover as the README says, and check for exactly one side effect.

Run as a script (``python tests/fault_kill_server.py --dir D --store S --kills N --out R.json``).  It
loads the agent's resources once, then for every trial forks a *worker* process that runs a booking
conversation on a SQLite checkpointer (the real graph, real tools, real ledger) and dies by SIGKILL at
one point of the booking turn:

- ``event:<k>`` — at the k-th boundary of the turn (every node update and every checkpoint the
  stream reports, across the turn and its confirmation);
- ``tool:before`` / ``tool:after`` — inside the irreversible tool, before the real ``book_table`` runs
  (the ledger has begun the call) or right after it committed the booking (the ledger has not
  completed it);
- ``timer:<s>`` — the harness kills the worker ``s`` seconds after the turn started.

A second forked process then recovers as documented: while ``get_state(config).tasks`` is set it
answers a pending confirmation again ("yes") or finishes the turn with ``invoke(None)``; a message the
thread never stored (killed before its first checkpoint) is sent again; then the user writes "thanks".  The trial passes when the demo database holds exactly one booking for the trial's
guest and the thread's assistant messages mention its reference exactly once (one mention in all).

Forking after the resources are loaded keeps a trial under a second; every process opens its own
checkpointer, ledger and database connections after the fork (none is open in the harness then), and
every text the retriever embeds is embedded before the first fork, so no child writes a shared cache.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import sys
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIRST = ("Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jude", "Kai", "Lena", "Milo")
LAST = ("Archer", "Baker", "Carter", "Dalton", "Ellis", "Fisher", "Garner", "Hughes", "Irving", "Jensen",
        "Keller", "Lawson", "Morgan")
START_DAY = date(2027, 1, 4)


def guest_of(i: int) -> str:
    return f"{FIRST[i % len(FIRST)]} {LAST[(i // len(FIRST)) % len(LAST)]}"


def day_of(i: int) -> str:
    return (START_DAY + timedelta(days=i)).isoformat()


def book_text(i: int) -> str:
    return f"Book a table at Casa Fiorella for 2 on {day_of(i)} at 19:00"


class Harness:
    def __init__(self, work: Path, store: str, confirm: bool):
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from graph.context import Context

        self.work = work
        self.db = str(work / "demo.sqlite")
        self.checkpoints = str(work / "checkpoints.sqlite")
        # experience off: its node asks Chroma each turn, and a Chroma client (a Rust runtime with its own
        # threads) cannot be used in a child forked after the parent opened it — the child would hang.
        self.context = Context(store_dir=store, db_path=self.db, confirm_irreversible=confirm, experience=False)

    # --- processes -----------------------------------------------------------------------------------
    def _agent(self, saver):
        from graph.agent import build_agent

        return build_agent(self.context, checkpointer=saver)

    def warm(self, trials: int) -> None:
        """Load everything a worker needs, and run each trial's first message here (not under test)."""
        from langchain_core.messages import HumanMessage

        from graph.checkpoint import open_checkpointer
        from graph.resources import get_resources
        from memory.ledger import close_shared_ledgers

        res = get_resources(self.context)
        res.retriever, res.interpreters, res.known_word  # noqa: B018 - load once, before any fork
        with open_checkpointer(self.checkpoints) as saver:
            agent = self._agent(saver)
            for i in range(trials):
                agent.invoke({"messages": [HumanMessage(book_text(i))]}, self.config(i))
            # the texts recovery sends, embedded now (a child never writes the shared embedding cache)
            warm = {"configurable": {"thread_id": "warm-up"}}
            for text in ("thanks", "yes"):
                agent.invoke({"messages": [HumanMessage(text)]}, warm)
        close_shared_ledgers()

    @staticmethod
    def config(i: int) -> dict:
        return {"configurable": {"thread_id": f"kill-{i}"}}

    def victim(self, i: int, mode: str, go_fd: int) -> None:
        """The worker under test: the trial's booking turn, dying at ``mode``."""
        from langchain_core.messages import HumanMessage
        from langgraph.types import Command

        import workflows.demo.tools as demo_tools
        from graph.checkpoint import open_checkpointer

        kind, _, arg = mode.partition(":")
        if kind == "tool":
            real = demo_tools.book_table

            def book_table(*a, **k):
                if arg == "before":
                    os.kill(os.getpid(), signal.SIGKILL)
                out = real(*a, **k)
                os.kill(os.getpid(), signal.SIGKILL)  # committed; the ledger never hears of it
                return out

            book_table.__signature__ = real.__signature__
            book_table.__module__ = real.__module__
            demo_tools.book_table = book_table
        boundary = int(arg) if kind == "event" else -1
        seen = 0
        with open_checkpointer(self.checkpoints) as saver:
            agent = self._agent(saver)
            config = self.config(i)
            os.write(go_fd, b"go")
            began = time.perf_counter()
            payload = {"messages": [HumanMessage(guest_of(i))]}
            while True:
                pending = False
                for mode_, chunk in agent.stream(payload, config, stream_mode=["updates", "checkpoints"]):
                    if seen == boundary:
                        os.kill(os.getpid(), signal.SIGKILL)
                    seen += 1
                    if mode_ == "updates" and "__interrupt__" in chunk:
                        pending = True
                if not pending:
                    break
                payload = Command(resume="yes")
        Path(self.work / f"events-{i}.txt").write_text(f"{seen} {time.perf_counter() - began:.3f}")
        os._exit(3 if boundary >= seen else 0)  # 3: the boundary was past the turn's end (not killed)

    def recover(self, i: int, out: str, policy: str = "readme") -> None:
        """Recovery as the README says (``readme``: finish the turn, resend a message the thread never
        got) or its short form (``next``: just the next message), then "thanks"; writes what the user
        was told."""
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.types import Command

        from graph.checkpoint import open_checkpointer

        with open_checkpointer(self.checkpoints) as saver:
            agent = self._agent(saver)
            config = self.config(i)
            steps: list[str] = []
            first = agent.get_state(config)
            seen = {"next": list(first.next), "tasks": [t.name for t in first.tasks], "messages": len(first.values.get("messages") or []),
                    "step": first.metadata.get("step") if first.metadata else None}

            def finish_turn() -> None:
                for _ in range(5):
                    state = agent.get_state(config)
                    if not state.tasks:  # not `next`: it leaves out tasks whose writes were saved
                        return
                    if state.interrupts:
                        steps.append("resume-yes")
                        agent.invoke(Command(resume="yes"), config)
                    else:
                        steps.append("invoke-none")
                        agent.invoke(None, config)

            if policy == "readme":
                finish_turn()
            said = [m.content for m in agent.get_state(config).values["messages"] if isinstance(m, HumanMessage)]
            if policy == "readme" and guest_of(i) not in said:  # killed before the message's first checkpoint: never received
                steps.append("resend")
                agent.invoke({"messages": [HumanMessage(guest_of(i))]}, config)
                finish_turn()
            agent.invoke({"messages": [HumanMessage("thanks")]}, config)
            messages = agent.get_state(config).values["messages"]
        with sqlite3.connect(self.db) as conn:
            rows = conn.execute("SELECT id FROM bookings WHERE guest_name=? AND date=?",
                                (guest_of(i), day_of(i))).fetchall()
        refs = [f"B-{r[0]}" for r in rows]
        told = [m.content for m in messages if isinstance(m, AIMessage) and any(r in (m.content or "") for r in refs)]
        mentions = sum((m.content or "").count(r) for m in messages if isinstance(m, AIMessage) for r in refs)
        Path(out).write_text(json.dumps({"bookings": len(rows), "told": mentions, "steps": steps,
                                         "replies": told, "found": seen}))
        os._exit(0)

    # --- one trial -----------------------------------------------------------------------------------
    def trial(self, i: int, mode: str) -> dict:
        mode, _, policy = mode.partition("@")
        policy = policy or "readme"
        read_fd, go_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(read_fd)
            try:
                self.victim(i, mode, go_fd)
            except BaseException as exc:  # noqa: BLE001 - report, never fall back into the harness
                print(f"worker {i} {mode}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                os._exit(4)
        os.close(go_fd)
        os.read(read_fd, 2)
        started = time.perf_counter()
        if mode.startswith("timer:"):
            time.sleep(max(0.0, float(mode.split(":")[1]) - (time.perf_counter() - started)))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
        os.close(read_fd)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        result_file = str(self.work / f"trial-{i}.json")
        pid2 = os.fork()
        if pid2 == 0:
            try:
                self.recover(i, result_file, policy)
            except BaseException as exc:  # noqa: BLE001
                print(f"recovery {i} {mode}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                os._exit(4)
        _, status2 = os.waitpid(pid2, 0)
        result = json.loads(Path(result_file).read_text()) if Path(result_file).exists() else {}
        return {"trial": i, "mode": mode, "recovery": policy, "killed": killed, "worker_exit": exit_code,
                "recovery_ok": os.WIFEXITED(status2) and os.WEXITSTATUS(status2) == 0, **result}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--kills", type=int, default=100,
                    help="SIGKILLs to deliver: every boundary and tool point once, then kills at random moments")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--no-confirm", action="store_true", help="irreversible tools run without a confirmation")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    h = Harness(work, args.store, confirm=not args.no_confirm)
    room = int(1.5 * args.kills) + 12  # threads prepared: trial 0 calibrates, some timer kills miss
    started = time.perf_counter()
    h.warm(room)
    warm_s = time.perf_counter() - started
    calib = h.trial(0, "event:100000")  # nothing killed: counts the turn's boundaries and times it
    boundaries, turn_s = (work / "events-0.txt").read_text().split()
    boundaries, turn_s = int(boundaries), float(turn_s)
    modes = [f"event:{k}" for k in range(boundaries)] + ["tool:before", "tool:after", "tool:before@next",
                                                         "tool:after@next"]
    rng = random.Random(args.seed)
    results = [calib]
    n = 0
    while n < room - 1 and (n < len(modes) or sum(r["killed"] for r in results) < args.kills):
        # after the boundaries: the harness kills at a random moment of the turn, and every other
        # trial recovers by the next message alone (no invoke(None), no resent message)
        mode = modes[n] if n < len(modes) else \
            f"timer:{rng.uniform(0.0, 0.9 * turn_s):.3f}" + ("@next" if n % 2 else "")
        n += 1
        results.append(h.trial(n, mode))
    kills = [r for r in results[1:] if r["killed"]]
    # README recovery: the booking the user asked for, exactly once, told once.  Next message only: at
    # most one booking, and the user told about it exactly when it exists (a turn killed before the
    # user's "yes" was stored has no booking: the agent asks again).
    bad = [r for r in results if not r.get("recovery_ok") or (
        (r.get("bookings"), r.get("told")) != (1, 1) if r["recovery"] == "readme"
        else r.get("bookings", 2) > 1 or r.get("told") != r.get("bookings"))]
    summary = {"trials": len(results) - 1, "kills": len(kills), "boundaries": boundaries,
               "duplicate_side_effects": sum(max(0, r.get("bookings", 0) - 1) for r in results),
               "missing_side_effects": sum(1 for r in results if r.get("bookings") == 0 and r["recovery"] == "readme"),
               "told_wrong": sum(1 for r in results if r.get("told") != r.get("bookings")),
               "next_message_recoveries": sum(1 for r in results if r["recovery"] == "next"),
               "reported_by_next_message": sum(1 for r in results if r["recovery"] == "next" and r.get("told")),
               "failures": len(bad),
               "seconds": round(time.perf_counter() - started, 1), "warm_seconds": round(warm_s, 1),
               "calibration_turn_seconds": round(turn_s, 2)}
    Path(args.out).write_text(json.dumps({"summary": summary, "results": results}, indent=1))
    print(json.dumps(summary))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
