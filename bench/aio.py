"""asyncio benchmark (issue 12): zkrecipes.aio against the threaded FairLock, each in its own process.

    python bench/aio.py                      # make bench: 3 local servers, forceSync=no, about a minute
    python bench/aio.py --smoke --hosts H    # tiny sizes against a running ensemble (tests)

Measures:
- 1,000 tasks waiting on one lock across 10 clients: threads of the process (``threading.active_count()``)
  with the clients started and idle, then with every task waiting; nodes in the queue; watches on the
  servers (4lw ``wchs``, and ``wchc`` sessions watching under the lock) and in kazoo's tables; then every
  task takes the lock in turn, and the wake path of each hand-off is recorded.
- Hand-off wake path, from the watch notification reaching our code (kazoo's event thread calls the
  driver's watcher) to ``acquire`` returning in the waiting task (thread): two sessions take turns, so
  every waiter has just one node ahead and needs no read after the notification. Same for the
  threaded FairLock, in its own process.
- Uncontended acquire+release, wall time and CPU of the calling (loop) thread per operation: aio and
  threaded FairLock each in its own process, both up at once, running blocks of operations in turn.
Writes ``aio.json`` and ``aio.md`` to ``--out`` (default ``bench/results``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
import weakref
from typing import Any, Dict, List, Optional

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kazoo.client import KazooClient  # noqa: E402
from kazoo.protocol.states import EventType  # noqa: E402

from bench import harness  # noqa: E402
from zkrecipes import _kazoo  # noqa: E402
from zkrecipes.testing import four_letter  # noqa: E402

SMOKE = {"tasks": 40, "clients": 4, "handoffs": 20, "ops": 10, "blocks": 2, "reps": 1}
FULL = {"tasks": 1000, "clients": 10, "handoffs": 400, "ops": 50, "blocks": 30, "reps": 3}


def _client(hosts: str, i: int = 0) -> KazooClient:
    c = KazooClient(hosts=harness.hosts_for(hosts, i), randomize_hosts=False, timeout=20.0)
    c.start(60)
    return c


def _summary(xs: List[float]) -> Dict[str, Any]:
    xs = sorted(xs)
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "median_ms": harness.percentile(xs, 0.5) * 1e3, "p90_ms": harness.percentile(xs, 0.9) * 1e3,
            "p99_ms": harness.percentile(xs, 0.99) * 1e3, "min_ms": xs[0] * 1e3}


# -- wake-path instrumentation: stamp the notification where our code first sees it ---------------------
_notified: Dict[Any, float] = {}
_owner: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()  # driver -> its task/thread


def _instrument_aio() -> None:
    from zkrecipes.aio._driver import AioDriver

    init, on_watch = AioDriver.__init__, AioDriver._on_watch

    def __init__(self, *a, **kw):  # type: ignore[no-untyped-def]
        init(self, *a, **kw)
        _owner[self] = asyncio.current_task()

    def _on_watch(self, event):  # type: ignore[no-untyped-def]
        if event.type == EventType.DELETED:
            _notified[_owner[self]] = time.perf_counter()
        on_watch(self, event)

    AioDriver.__init__, AioDriver._on_watch = __init__, _kazoo.on_io_thread(_on_watch)  # where the driver's runs


def _instrument_threaded() -> None:
    from zkrecipes._drive import Driver

    init, on_watch = Driver.__init__, Driver._on_watch

    def __init__(self, *a, **kw):  # type: ignore[no-untyped-def]
        init(self, *a, **kw)
        _owner[self] = threading.get_ident()  # (the driver has __slots__: no attribute of our own)

    def _on_watch(self, event):  # type: ignore[no-untyped-def]
        if event.type == EventType.DELETED:
            _notified[_owner[self]] = time.perf_counter()
        on_watch(self, event)

    Driver.__init__, Driver._on_watch = __init__, _kazoo.on_io_thread(_on_watch)


def _wchc_sessions(hosts: str, full_path: str) -> Dict[str, int]:
    """Per server: how many sessions watch something under ``full_path`` (4lw ``wchc``: a session id
    line, then its watched paths indented)."""
    out = {}
    for s in harness.server_list(hosts):
        host, port = s.rsplit(":", 1)
        sessions, current = set(), None
        for line in four_letter(int(port), "wchc", host=host).splitlines():
            if line.strip().startswith("0x"):
                current = line.strip()
            elif line.strip().startswith(full_path + "/") and current is not None:
                sessions.add(current)
        out[s] = len(sessions)
    return out


# -- workers (each in its own process) --------------------------------------------------------------------
def thousand(args: argparse.Namespace) -> dict:
    """N tasks on C clients wait on one aio.FairLock held by another session, then take it in turn."""
    from zkrecipes import FairLock, aio

    _instrument_aio()
    path = f"/aio-{uuid.uuid4().hex[:8]}"
    holder_client = _client(args.hosts, 0)
    holder = FairLock(holder_client, path)
    assert holder.acquire()
    clients = [_client(args.hosts, i + 1) for i in range(args.clients)]
    base_threads = threading.active_count()
    out: dict = {"tasks": args.tasks, "clients": args.clients, "threads_idle_clients": base_threads}

    async def main() -> None:
        locks = [aio.FairLock(c, path) for c in clients]
        waiting = asyncio.Event()
        started = 0
        wakes: List[float] = []
        inside = 0
        worst = 0

        async def task(i: int) -> None:
            nonlocal started, inside, worst
            lock = locks[i % len(locks)]
            started += 1
            if started == args.tasks:
                waiting.set()
            await lock.acquire()
            t = time.perf_counter()
            t0 = _notified.pop(asyncio.current_task(), None)
            if t0 is not None:
                wakes.append(t - t0)
            inside += 1
            worst = max(worst, inside)
            await asyncio.sleep(0)
            inside -= 1
            await lock.release()

        tasks = [asyncio.create_task(task(i)) for i in range(args.tasks)]
        await waiting.wait()
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + 60
        # every client has queued its one node (the local gate keeps the other tasks in line locally)
        while len(holder_client.get_children(path)) < args.clients + 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        out["threads_all_waiting"] = threading.active_count()
        out["threads_added_by_waiting"] = out["threads_all_waiting"] - base_threads
        out["thread_names_all_waiting"] = sorted({re.sub(r"\d+", "N", t.name) for t in threading.enumerate()})
        out["queue_nodes"] = len(holder_client.get_children(path)) - 1
        full = holder_client.chroot + path
        out["kazoo_data_watches_per_client"] = [
            sum(1 for p, fns in c._data_watchers.items() if fns and p.startswith(full + "/")) for c in clients
        ]
        out["server_sessions_watching_lock"] = await loop.run_in_executor(None, _wchc_sessions, args.hosts, full)
        t0 = time.perf_counter()
        holder.release()
        await asyncio.gather(*tasks)
        out["drain_s"] = time.perf_counter() - t0
        out["max_inside"] = worst
        out["wake"] = _summary(wakes)

    asyncio.run(main())
    out["threads_after"] = threading.active_count()
    for c in clients + [holder_client]:
        c.stop()
        c.close()
    return out


def pingpong(args: argparse.Namespace) -> dict:
    """Two sessions take turns; the waiter always has one node ahead (no read after the notification)."""
    from zkrecipes import FairLock, aio

    path = f"/pp-{uuid.uuid4().hex[:8]}"
    clients = [_client(args.hosts, i) for i in range(2)]
    wakes: List[float] = []
    n = args.handoffs
    if args.impl == "aio":
        from zkrecipes.aio._driver import bridge

        async def result(ar: Any) -> Any:
            if not ar.ready():
                await bridge(asyncio.get_running_loop(), ar)
            return ar.get(block=False)

        _instrument_aio()

        async def main() -> None:
            locks = [aio.FairLock(c, path) for c in clients]
            turn = asyncio.Condition()
            count = 0

            async def player(i: int) -> None:
                nonlocal count
                while True:
                    await locks[i].acquire()
                    t = time.perf_counter()
                    t0 = _notified.pop(asyncio.current_task(), None)
                    if t0 is not None and count > 2:
                        wakes.append(t - t0)
                    async with turn:
                        count += 1
                        mine = count
                        turn.notify_all()
                    done = mine >= n
                    if not done:  # hold until the other player is queued behind us
                        while len(await result(clients[0].get_children_async(path))) < 2:
                            await asyncio.sleep(0.0005)
                    await locks[i].release()
                    if done:
                        return
                    async with turn:
                        await turn.wait_for(lambda mine=mine: count > mine)  # noqa: B023  (count: nonlocal, read live)
                    if count >= n:
                        return

            await asyncio.gather(player(0), player(1))

        asyncio.run(main())
    else:
        _instrument_threaded()
        locks = [FairLock(c, path) for c in clients]
        cond = threading.Condition()
        state = {"count": 0}

        def player(i: int) -> None:
            while True:
                locks[i].acquire()
                t = time.perf_counter()
                t0 = _notified.pop(threading.get_ident(), None)
                if t0 is not None and state["count"] > 2:
                    wakes.append(t - t0)
                with cond:
                    state["count"] += 1
                    mine = state["count"]
                    cond.notify_all()
                done = mine >= n
                if not done:
                    while len(clients[0].get_children(path)) < 2:
                        time.sleep(0.0005)
                locks[i].release()
                if done:
                    return
                with cond:
                    cond.wait_for(lambda mine=mine: state["count"] > mine, timeout=60)
                if state["count"] >= n:
                    return

        threads = [threading.Thread(target=player, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    for c in clients:
        c.stop()
        c.close()
    return {"impl": args.impl, "wake": _summary(wakes), "wake_samples_ms": [w * 1e3 for w in wakes]}


def uncontended(args: argparse.Namespace) -> dict:
    """Serve blocks of ``ops`` uncontended acquire+release on one client: a line ``block`` on stdin runs
    one and prints its per-op wall and calling-thread CPU (µs); ``quit`` ends. The parent alternates
    the two processes block by block, so load drift hits both alike."""
    from zkrecipes import FairLock, aio

    client = _client(args.hosts, 0)
    path = f"/u-{uuid.uuid4().hex[:8]}"

    def report(c0: float, t0: float) -> None:
        print(json.dumps({"wall_us": (time.perf_counter() - t0) / args.ops * 1e6,
                          "cpu_us": (time.thread_time() - c0) / args.ops * 1e6}), flush=True)

    if args.impl == "aio":

        async def main() -> None:
            lock = aio.FairLock(client, path)
            loop = asyncio.get_running_loop()
            for _ in range(20):
                await lock.acquire()
                await lock.release()
            print("ready", flush=True)
            while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "block":
                c0, t0 = time.thread_time(), time.perf_counter()
                for _ in range(args.ops):
                    await lock.acquire()
                    await lock.release()
                report(c0, t0)

        asyncio.run(main())
    else:
        lock = FairLock(client, path)
        for _ in range(20):
            lock.acquire()
            lock.release()
        print("ready", flush=True)
        while sys.stdin.readline().strip() == "block":
            c0, t0 = time.thread_time(), time.perf_counter()
            for _ in range(args.ops):
                lock.acquire()
                lock.release()
            report(c0, t0)
    client.stop()
    client.close()
    return {"impl": args.impl}


def uncontended_pair(hosts: str, cfg: dict) -> Dict[str, Any]:
    """Both contenders up at once, each in its own process, running blocks in turn (order rotated)."""
    procs = {}
    for impl in ("aio", "threaded"):
        procs[impl] = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", "uncontended", "--impl", impl, "--hosts", hosts,
             "--ops", str(cfg["ops"])], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    blocks: Dict[str, List[dict]] = {"aio": [], "threaded": []}
    try:
        for p in procs.values():
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for k in range(cfg["blocks"]):
            for impl in (("aio", "threaded") if k % 2 == 0 else ("threaded", "aio")):
                p = procs[impl]
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write("block\n")
                p.stdin.flush()
                blocks[impl].append(json.loads(p.stdout.readline()))
    finally:
        for p in procs.values():
            if p.stdin is not None:
                p.stdin.write("quit\n")
                p.stdin.close()
            p.wait(60)
    out: Dict[str, Any] = {}
    for impl, bs in blocks.items():
        out[impl] = {"wall_us": _median([b["wall_us"] for b in bs]), "cpu_us": _median([b["cpu_us"] for b in bs]),
                     "blocks": bs}
    pairs = list(zip(blocks["aio"], blocks["threaded"]))
    out["wall_ratio_by_pair"] = [a["wall_us"] / t["wall_us"] for a, t in pairs]
    out["cpu_ratio_by_pair"] = [a["cpu_us"] / t["cpu_us"] for a, t in pairs]
    out["wall_ratio"] = _median(out["wall_ratio_by_pair"])
    out["cpu_ratio"] = _median(out["cpu_ratio_by_pair"])
    return out


WORKERS = {"thousand": thousand, "pingpong": pingpong, "uncontended": uncontended}


def _spawn(what: str, impl: str, hosts: str, cfg: dict) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", what, "--impl", impl, "--hosts", hosts,
           "--tasks", str(cfg["tasks"]), "--clients", str(cfg["clients"]), "--handoffs", str(cfg["handoffs"]),
           "--ops", str(cfg["ops"]), "--blocks", str(cfg["blocks"])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{what}/{impl} worker failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(xs: List[float]) -> Optional[float]:
    xs = sorted(x for x in xs if x is not None)
    return harness.median(xs) if xs else None


def markdown(result: dict) -> str:
    m, t, pp, u = result["meta"], result["thousand"], result["pingpong"], result["uncontended"]
    lines = [
        f"Run {m['started']} · {m['ensemble']} · {m['duration_s']:.0f} s · each contender in its own process",
        "",
        f"**{t['tasks']:,} tasks waiting on one lock across {t['clients']} clients** (one process)",
        "",
        "| measure | value |",
        "|---|---|",
        f"| threads, {t['clients'] + 1} clients started, idle | {t['threads_idle_clients']} |",
        f"| threads, all {t['tasks']:,} tasks waiting | {t['threads_all_waiting']} "
        f"(+{t['threads_added_by_waiting']}: {', '.join(t['thread_names_all_waiting'])}) |",
        f"| nodes in the queue (besides the holder) | {t['queue_nodes']} |",
        f"| kazoo data watches under the lock, per client | {t['kazoo_data_watches_per_client']} |",
        f"| sessions watching under the lock, per server (wchc) | "
        f"{list(t['server_sessions_watching_lock'].values())} |",
        f"| max holders at once while {t['tasks']:,} tasks took turns | {t['max_inside']} |",
        f"| drain: {t['tasks']:,} acquire+release in turn (s) | {t['drain_s']:.2f} |",
        f"| wake path in that run (includes one relist), median / p90 ms | "
        f"{t['wake'].get('median_ms', 0):.3f} / {t['wake'].get('p90_ms', 0):.3f} (n={t['wake']['n']}) |",
        "",
        "**Hand-off wake path**, notification to acquire returning; two sessions take turns (no read after it)",
        "",
        "| impl | median ms | p90 ms | p99 ms | samples |",
        "|---|---|---|---|---|",
    ]
    for impl in ("aio", "threaded"):
        w = pp[impl]
        lines.append(f"| {impl} | {w['median_ms']:.3f} | {w['p90_ms']:.3f} | {w['p99_ms']:.3f} | {w['n']} |")
    lines += [
        "",
        "**Uncontended acquire+release**, two processes up at once running blocks of "
        f"{result['config']['ops']} ops in turn; median block, median of the paired ratios",
        "",
        "| impl | wall µs/op | loop/calling-thread CPU µs/op |",
        "|---|---|---|",
        f"| aio.FairLock | {u['aio']['wall_us']:.0f} | {u['aio']['cpu_us']:.0f} |",
        f"| FairLock (threads) | {u['threaded']['wall_us']:.0f} | {u['threaded']['cpu_us']:.0f} |",
        f"| ratio aio / threaded | {u['wall_ratio']:.3f}x | {u['cpu_ratio']:.3f}x |",
        f"| paired ratios (wall) | {', '.join(f'{r:.2f}' for r in u['wall_ratio_by_pair'])} | |",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = harness.arguments(__doc__)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks that every measure runs")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--impl", default="aio", help=argparse.SUPPRESS)
    for name in FULL:
        ap.add_argument(f"--{name}", type=int, default=None)
    args = ap.parse_args(argv)
    cfg = dict(SMOKE if args.smoke else FULL)
    for name in cfg:
        if getattr(args, name) is not None:
            cfg[name] = getattr(args, name)
    if args.worker:
        for name, value in cfg.items():
            setattr(args, name, value)
        print(json.dumps(WORKERS[args.worker](args)))
        return 0
    record = harness.Run()
    log = harness.logger("aio bench")
    with harness.zookeeper(args.hosts) as (hosts, desc):
        log(f"{cfg['tasks']} tasks on {cfg['clients']} clients")
        thousand_run = _spawn("thousand", "aio", hosts, cfg)
        pp: Dict[str, List[dict]] = {"aio": [], "threaded": []}
        for rep in range(cfg["reps"]):
            order = ["aio", "threaded"] if rep % 2 == 0 else ["threaded", "aio"]
            for impl in order:
                log(f"round {rep + 1}: pingpong {impl}")
                pp[impl].append(_spawn("pingpong", impl, hosts, cfg))
        log(f"uncontended: {cfg['blocks']} blocks of {cfg['ops']} ops each, the two processes in turn")
        uncontended_rows = uncontended_pair(hosts, cfg)
    pingpong_rows = {}
    for impl, runs in pp.items():
        samples = sorted(s / 1e3 for r in runs for s in r["wake_samples_ms"])
        pingpong_rows[impl] = _summary(samples)
    result = {"config": cfg, "thousand": thousand_run, "pingpong": pingpong_rows, "uncontended": uncontended_rows,
              "meta": record.meta(ensemble=desc)}
    harness.write_json(args.out, "aio", result)
    print(harness.write_report(args.out, "aio", result, markdown), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
