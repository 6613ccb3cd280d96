"""Concurrent threads against the served agent (`flowdesk serve`): cross-thread leaks and per-turn latency.

Starts ``flowdesk serve`` on a free 127.0.0.1 port (never 2024) with its durable SQLite checkpointer,
then drives it with the LangGraph SDK: first one conversation at a time (the single-thread figure),
then ``--threads`` conversations at once.  Every conversation books a table under its own guest name
and date (three turns: the request, the name, "yes" to the confirmation), so each thread's data is
unique; a leak is any message or interrupt of one thread that holds another thread's name or date.
Writes ``report.md``, ``metrics.json`` (headline under ``summary``) and ``latency.png`` to ``--out``;
``--kills FILE`` adds the summary of a kill-suite run (tests/fault_kill_server.py ``--out``).
``--server-kills N`` then SIGKILLs the server N times (alternately right after a finished turn and a
thread created just before the kill, and while a turn is in flight), restarts it on the same port and
counts threads and turns lost or doubled.  The server is stopped by its process group (the one it
started), SIGTERM then SIGKILL.

    .venv/bin/python benchmarks/serve_concurrency.py --threads 50 --out reports/faults
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIRST = ("Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jude")
LAST = ("Archer", "Baker", "Carter", "Dalton", "Ellis", "Fisher", "Garner", "Hughes", "Irving", "Jensen",
        "Keller", "Lawson")


def free_port() -> int:
    """A free 127.0.0.1 port chosen by the OS (never 2024, the LangGraph default others may use)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 2024:
            return port


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def conversation_data(i: int) -> tuple[str, str]:
    guest = f"{FIRST[i % len(FIRST)]} {LAST[(i // len(FIRST)) % len(LAST)]}"
    day = (date(2027, 6, 1) + timedelta(days=i)).isoformat()
    return guest, day


def converse(client, i: int) -> dict:
    """One booking conversation; per-turn latencies and everything the thread holds afterwards."""
    guest, day = conversation_data(i)
    thread = client.threads.create()["thread_id"]
    turns = [{"input": {"messages": [{"role": "user", "content": f"Book a table at Casa Fiorella for 2 on {day} "
                                                                 "at 19:00"}]}},
             {"input": {"messages": [{"role": "user", "content": guest}]}},
             {"command": {"resume": "yes"}}]
    latencies, errors = [], []
    for turn in turns:
        started = time.perf_counter()
        try:
            client.runs.wait(thread, "agent", **turn)
        except Exception as exc:  # noqa: BLE001 - counted and reported, the benchmark goes on
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
        latencies.append((time.perf_counter() - started) * 1000)
    state = client.threads.get_state(thread)
    texts = [str(m.get("content", "")) for m in (state.get("values") or {}).get("messages", [])]
    return {"i": i, "thread": thread, "guest": guest, "day": day, "latencies_ms": latencies, "errors": errors,
            "texts": texts, "booked": any("Your reference is B-" in t and guest in t for t in texts)}


def leaks(results: list[dict]) -> int:
    """Messages of one thread naming another thread's guest or date."""
    marks = {r["i"]: (r["guest"], r["day"]) for r in results}
    count = 0
    for r in results:
        for text in r["texts"]:
            for j, (guest, day) in marks.items():
                if j != r["i"] and (guest in text or day in text):
                    count += 1
    return count


def build_index(store_dir: str) -> None:
    """Build the store before the server starts (a store belongs to one process at a time)."""
    from graph.context import Context
    from graph.resources import clear_resources, get_resources
    from memory.retrieval import clear_cache

    get_resources(Context(store_dir=store_dir)).retriever  # noqa: B018
    clear_cache()
    clear_resources()


def start_server(work: Path, port: int, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "graph.cli", "serve", "--port", str(port), "--checkpoint",
                             str(work / "checkpoints.sqlite")], cwd=work, env=env, start_new_session=True,
                            stdout=open(work / "server.log", "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"flowdesk serve exited with {proc.returncode}: "
                               f"{(work / 'server.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ok", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.3)
    stop_server(proc)
    raise RuntimeError(f"flowdesk serve on port {port} did not answer /ok within 180 s")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # the process group it started, nothing else
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the process group it started, nothing else
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def server_kills(client, work: Path, port: int, env: dict, server: subprocess.Popen, n: int, seed: int = 13
                 ) -> tuple[dict, subprocess.Popen]:
    """SIGKILL the server ``n`` times; after each restart every thread a client was told exists must be
    there, every answered turn kept, and a turn in flight either answered after the restart or lost
    (counted), never doubled."""
    import random

    rng = random.Random(seed)
    stats = {"server_kills": 0, "threads_created": 0, "threads_lost": 0, "turns_answered_before_kill": 0,
             "turns_lost": 0, "turns_in_flight": 0, "in_flight_finished_after_restart": 0, "turns_doubled": 0,
             "restart_seconds": []}
    for k in range(n):
        in_flight = k % 2 == 1
        guest, day = conversation_data(20_000 + k)
        request = f"Book a table at Casa Fiorella for 2 on {day} at 19:00"
        thread = client.threads.create()["thread_id"]
        stats["threads_created"] += 1
        if in_flight:
            client.runs.create(thread, "agent", input={"messages": [{"role": "user", "content": request}]})
            time.sleep(rng.uniform(0.0, 1.0))  # somewhere inside the turn (about 1 s on this machine)
            stats["turns_in_flight"] += 1
            fresh = None
        else:
            client.runs.wait(thread, "agent", input={"messages": [{"role": "user", "content": request}]})
            stats["turns_answered_before_kill"] += 1
            fresh = client.threads.create()["thread_id"]
            stats["threads_created"] += 1
        kill_group(server)
        stats["server_kills"] += 1
        began = time.perf_counter()
        server = start_server(work, port, env)
        stats["restart_seconds"].append(round(time.perf_counter() - began, 1))
        for t in [thread] + ([fresh] if fresh else []):
            try:
                client.threads.get(t)
            except Exception:  # noqa: BLE001 - a 404: the thread was lost
                stats["threads_lost"] += 1
        try:
            for run in client.runs.list(thread):  # a run cut off is re-queued by the server: let it end
                if run["status"] in ("pending", "running"):
                    client.runs.join(thread, run["run_id"])
            msgs = (client.threads.get_state(thread).get("values") or {}).get("messages", [])
        except Exception:  # noqa: BLE001
            msgs = []
        humans = [m for m in msgs if m.get("type") == "human" and m.get("content") == request]
        answered = len(msgs) >= 2 and msgs[-1].get("type") == "ai"
        stats["turns_doubled"] += max(0, len(humans) - 1)
        if not (humans and answered):
            stats["turns_lost"] += 1
        elif in_flight:
            stats["in_flight_finished_after_restart"] += 1
    return stats, server


def summarise(results: list[dict]) -> dict:
    lat = [x for r in results for x in r["latencies_ms"]]
    return {"conversations": len(results), "turns": len(lat), "p50_ms": round(percentile(lat, 0.5), 1),
            "p95_ms": round(percentile(lat, 0.95), 1), "max_ms": round(max(lat), 1) if lat else None,
            "errors": sum(len(r["errors"]) for r in results), "booked": sum(r["booked"] for r in results)}


def plot(single: list[dict], many: list[dict], path: Path, threads: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    data = [[x for r in single for x in r["latencies_ms"]], [x for r in many for x in r["latencies_ms"]]]
    ax.boxplot(data, whis=(5, 95), showfliers=True)
    ax.set_xticks([1, 2], ["1 thread at a time", f"{threads} threads at once"])
    ax.set_ylabel("latency per turn (ms)")
    ax.set_title("flowdesk serve: per-turn latency (whiskers p5-p95)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=50)
    ap.add_argument("--single", type=int, default=5, help="conversations run one at a time first")
    ap.add_argument("--store", default="", help="a built store directory to use (default: build one)")
    ap.add_argument("--kills", default="", help="a kill-suite JSON (tests/fault_kill_server.py --out) to report")
    ap.add_argument("--server-kills", type=int, default=0, help="SIGKILLs of the server afterwards (0: none)")
    ap.add_argument("--out", default="reports/faults")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="flowdesk-serve-bench-"))
    store = args.store or str(work / "store")
    if not args.store:
        build_index(store)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLOWDESK_STORE_DIR": store,
           "FLOWDESK_DB_PATH": str(work / "demo.sqlite"), "LANGGRAPH_NO_VERSION_CHECK": "true",
           "ANONYMIZED_TELEMETRY": "False", "LANGGRAPH_CLI_NO_ANALYTICS": "1"}
    env.pop("FLOWDESK_CHECKPOINT_URL", None)
    port = free_port()
    server = start_server(work, port, env)
    try:
        from langgraph_sdk import get_sync_client

        client = get_sync_client(url=f"http://127.0.0.1:{port}", timeout=300)
        converse(client, 10_000)  # warm-up (first run loads the graph's resources in the server)
        single = [converse(client, i) for i in range(args.single)]
        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.threads) as pool:
            many = list(pool.map(lambda i: converse(client, i), range(args.single, args.single + args.threads)))
        wall = time.perf_counter() - began
        killed = None
        if args.server_kills:
            killed, server = server_kills(client, work, port, env, server, args.server_kills)
    finally:
        stop_server(server)
    one, lots = summarise(single), summarise(many)
    leaked = leaks(single + many)
    kills = json.loads(Path(args.kills).read_text())["summary"] if args.kills else None
    summary = {"threads": args.threads, "cross_thread_leaks": leaked, "p95_ms_single": one["p95_ms"],
               f"p95_ms_{args.threads}_threads": lots["p95_ms"], "p50_ms_single": one["p50_ms"],
               f"p50_ms_{args.threads}_threads": lots["p50_ms"], "errors": one["errors"] + lots["errors"],
               "booked": f"{lots['booked']}/{args.threads}",
               "turns_per_second_concurrent": round(lots["turns"] / wall, 2)}
    if kills:
        summary.update({"kills": kills["kills"], "duplicate_side_effects": kills["duplicate_side_effects"],
                        "kill_failures": kills["failures"]})
    if killed:
        summary.update({"server_kills": killed["server_kills"], "served_threads_lost": killed["threads_lost"],
                        "served_turns_lost": killed["turns_lost"], "served_turns_doubled": killed["turns_doubled"]})
    plot(single, many, out / "latency.png", args.threads)
    metrics = {"summary": summary, "single": one, "concurrent": lots, "kill_suite": kills, "server_kills": killed,
               "machine": {"cpus": os.cpu_count(), "load_avg_1m_after": round(os.getloadavg()[0], 2)}}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    rows = [f"| 1 thread at a time ({args.single} conversations) | {one['turns']} | {one['p50_ms']} | {one['p95_ms']} "
            f"| {one['errors']} |",
            f"| {args.threads} threads at once | {lots['turns']} | {lots['p50_ms']} | {lots['p95_ms']} | "
            f"{lots['errors']} |"]
    kill_text = ""
    if kills:
        kill_text = (f"\n## SIGKILL during a turn with an irreversible tool (tests/fault_kill_server.py)\n\n"
                     f"{kills['kills']} kills over {kills['trials']} trials ({kills['boundaries']} node/checkpoint "
                     f"boundaries, in-tool kills before and after the commit, random moments); duplicate "
                     f"side effects: **{kills['duplicate_side_effects']}**, missing: {kills['missing_side_effects']}, "
                     f"user not told exactly once: {kills['told_wrong']}, failed trials: {kills['failures']}; "
                     f"{kills['reported_by_next_message']} of {kills['next_message_recoveries']} next-message "
                     f"recoveries reported the interrupted booking.\n")
    if killed:
        kill_text += (f"\n## SIGKILL of the server (`--server-kills {args.server_kills}`)\n\n"
                      f"{killed['server_kills']} SIGKILLs of `flowdesk serve`'s process group, each followed by a "
                      f"restart on the same port (median {statistics.median(killed['restart_seconds']):.0f} s to "
                      f"answer `/ok`): threads created {killed['threads_created']}, lost **{killed['threads_lost']}** "
                      f"({killed['turns_answered_before_kill']} of them created just before the kill); turns answered before a kill "
                      f"{killed['turns_answered_before_kill']}, turns in flight at the kill "
                      f"{killed['turns_in_flight']} ({killed['in_flight_finished_after_restart']} finished by the "
                      f"restarted server); turns lost **{killed['turns_lost']}**, turns doubled "
                      f"**{killed['turns_doubled']}**.\n")
    (out / "report.md").write_text(f"""# Faults: concurrent threads on `flowdesk serve`{' and SIGKILL recovery' if kills else ''}

`{' '.join(['python', 'benchmarks/serve_concurrency.py', '--threads', str(args.threads), '--out', str(args.out)]
          + (['--kills', args.kills] if args.kills else [])
          + (['--server-kills', str(args.server_kills)] if args.server_kills else []))}` — the LangGraph API server on the durable SQLite
checkpointer, offline policies, real tools; each conversation books a table under its own name and date
(request, name, "yes" to the confirmation).  Machine: {os.cpu_count()} cores shared with other work
(1-minute load average after the run: {os.getloadavg()[0]:.1f}).

| mode | turns | p50 ms/turn | p95 ms/turn | errors |
|---|---|---|---|---|
{chr(10).join(rows)}

Cross-thread leaks (a message of one thread naming another thread's guest or date): **{leaked}**.
Bookings confirmed in the concurrent run: {lots['booked']}/{args.threads}; throughput
{summary['turns_per_second_concurrent']} turns/s.
{kill_text}
![latency](latency.png)
""")
    print(json.dumps(summary))
    lost = killed and (killed["threads_lost"] or killed["turns_doubled"])
    return 0 if leaked == 0 and not summary["errors"] and not lost else 1


if __name__ == "__main__":
    sys.exit(main())
