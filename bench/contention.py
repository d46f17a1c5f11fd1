"""Contention benchmark (issues 30 and 40): one lock path, N contenders, four implementations in one run.

    python bench/contention.py                  # make bench: N = 10, 100, 1,000; 5 s warm-up + 20 s each
    python bench/contention.py --quick          # the same sizes, 2 s warm-up + 6 s windows
    python bench/contention.py --smoke --hosts H    # tiny N, about a second each (tests)
    python bench/contention.py --layouts spawned    # one layout only (default: forked,spawned)
    python bench/contention.py --report-only    # re-render contention.md / .png from contention.json

Every contender loops acquire -> 0.2 ms of busy work -> release on one lock path until the window ends.
N = processes x contenders per process: 10 = 10 x 1, 100 = 20 x 5, 1,000 = 50 x 20. Each process has one
ZooKeeper session (a ``KazooClient``; for Curator one ``CuratorFramework`` per JVM shared by its threads,
as Curator's documentation asks), default session timeout 10 s, so kazoo pings every ~3 s and a hand-off
that waits for a heartbeat shows as a ~3 s maximum. Contenders per process are threads, except for
``zkrecipes.aio.FairLock`` (asyncio tasks on one loop). Each contender has its own lock object.

Two layouts of the Python fleets, both in every run (``--layouts``): *forked*, the fleet's processes forked
(``multiprocessing``'s fork) from one pool process that has imported kazoo and zkrecipes and runs no thread;
*spawned*, each process its own interpreter (``sys.executable bench/contention.py --worker``) started by
this driver. Curator's JVMs are processes of their own, so Curator runs once per N, as *spawned*.

The *floor*, at the start of every N: a raw kazoo client sets an exists watch on a node, another
process's client deletes it; delete() call to the start of the watch function on the watcher's event
thread (and to kazoo's socket read of the notification), a few hundred times.

The implementations run one after the other on fresh paths, the order of layouts and of implementations
rotating per N (and repetition), each fleet in its own processes (Curator: JVMs running
bench/CuratorContender.java), on a 3-node forceSync=no loopback ensemble started here (or ``--hosts``).
Every grant is timed in the contender on CLOCK_MONOTONIC (``time.monotonic_ns()``; ``System.nanoTime()``
in Java, the same clock on Linux): acquire call, acquire return, release call, release return. From
those, over the grants whose acquire returned inside the measured window:

- grants/s; *hand-off* = the previous holder's ``release()`` call to the next holder's ``acquire()``
  return (grants in order of acquire return), p50 / p90 / p99 / max; its p50 over the floor's p50;
- *wait* = ``acquire()`` call to return (max, p99); ``release()`` call to return (max);
- grants per contender (min / median / max over all N contenders, zero included);
- *overlaps*: holds (acquire return .. release call) that intersect an earlier one; must be 0;
- for the Python fleets, the *split* of each hand-off between processes at the watch notification that
  woke the next holder's process (stamped bench-side on its kazoo client): server part and client part.

Targets (issues 30 and 40), per layout and N, reported as met / not met, never as tests: no hand-off
above 100 ms; p99 hand-off at or below kazoo's Lock; grants/s at or above kazoo's; hand-off p50 within
1.5x the floor's p50; at 1,000 contenders p99 within 2x p50. Writes ``contention.json``,
``contention.md`` and ``contention.png`` to ``--out`` (default ``bench/results``).

Diagnosis: ``ZKRECIPES_BENCH_NO_NUDGER=1`` in the environment turns zkrecipes' nudging of overdue replies
off in the zkrecipes fleets (what a hand-off costs with and without it; never for a report).
``ZKRECIPES_BENCH_RUNQ=1`` has each threaded contender (FairLock, kazoo's Lock) read its thread's run-queue
wait (``/proc/thread-self/schedstat``) around every acquire(); the split then gives that wait's p50/p99
(``runq``) and its median over the tail's hand-offs (``tail.runq_p50_ms``) in contention.json.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402
from bench.harness import Proc, cell  # noqa: E402
from zkrecipes.testing import _java  # noqa: E402

HERE = Path(__file__).resolve().parent
JAVA_SOURCE = HERE / "CuratorContender.java"
JAVA_OPTS = ("-Xms16m", "-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")

FAIR, AIO, KAZOO, CURATOR = "zkrecipes FairLock", "zkrecipes aio FairLock", "kazoo Lock", "Curator InterProcessMutex"
IMPLS = (FAIR, AIO, KAZOO, CURATOR)
OURS = (FAIR, AIO)
BASELINE = KAZOO
HANDOFF_LIMIT_MS = 100.0
FLOOR_LIMIT = 1.5  # hand-off p50 over the floor's p50 (issue 40)
FORKED, SPAWNED = "forked", "spawned"
LAYOUTS = (FORKED, SPAWNED)
SLOW_NS = 1_000_000_000  # hand-offs and releases longer than this are listed one by one

FULL = {"sizes": [[10, 1], [20, 5], [50, 20]], "warmup_s": 5.0, "window_s": 20.0, "reps": 1, "floor_reps": 300,
        "floor_warmup": 200}
QUICK = {"sizes": [[10, 1], [20, 5], [50, 20]], "warmup_s": 2.0, "window_s": 6.0, "reps": 1, "floor_reps": 200,
         "floor_warmup": 200}
SMOKE = {"sizes": [[2, 2]], "warmup_s": 0.5, "window_s": 1.5, "reps": 1, "floor_reps": 20, "floor_warmup": 3}


log = harness.logger("contention")


# -- the contender processes ----------------------------------------------------------------------


def stamp_notifications(client: Any, reads: List[int], events: List[int]) -> None:
    """Stamp every watch notification ``client`` receives on CLOCK_MONOTONIC: when kazoo's I/O thread reads
    it off the socket (``reads``) and when kazoo's event thread starts a watch function for it (``events``).
    Bench-side wrapping of this client's ``ConnectionHandler._read_watch_event`` and handler's
    ``dispatch_callback`` (kazoo 2.9-2.11), outside zkrecipes' own (a client our recipes will use is
    attended first); no library code is touched. One list append per stamp. For our recipes' watches,
    which kazoo's I/O thread runs itself, ``events`` is when that thread starts the watch function."""
    from kazoo.protocol.states import Callback

    conn, handler, mono = client._connection, client.handler, time.monotonic_ns
    read_watch, dispatch = conn._read_watch_event, handler.dispatch_callback

    def read_watch_event(buffer: Any, offset: int) -> Any:
        reads.append(mono())
        return read_watch(buffer, offset)

    def dispatch_callback(callback: Any) -> Any:
        if callback.type == "watch":
            func = callback.func

            def stamped(*args: Any) -> Any:
                events.append(mono())
                return func(*args)

            if getattr(func, "_zkrecipes_io_thread", False):  # zkrecipes runs it on the I/O thread: let it
                stamped._zkrecipes_io_thread = True  # type: ignore[attr-defined]
            callback = Callback("watch", stamped, callback.args)
        return dispatch(callback)

    conn._read_watch_event = read_watch_event
    handler.dispatch_callback = dispatch_callback


def _connect(hosts: str, index: int, session: float, reads: List[int], events: List[int], ours: bool = False) -> Any:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=harness.hosts_for(hosts, index), randomize_hosts=False, timeout=session)
    if ours:
        from zkrecipes import _kazoo

        _kazoo.attend(client)  # as the recipe would, but under the stamps
    stamp_notifications(client, reads, events)
    client.start(60)
    return client


def _run_delay() -> int:
    """ns this thread has spent runnable but waiting for a CPU so far (Linux's schedstat)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1])


RUNQ = bool(os.environ.get("ZKRECIPES_BENCH_RUNQ"))  # diagnosis: see the module docstring


def _contend(lock: Any, start_ns: int, end_ns: int, work_ns: int) -> List[Tuple[int, ...]]:
    """One thread's loop: (acquire call, acquire return, release call, release return) per grant, and with
    ``RUNQ`` the ns the thread waited for a CPU inside that acquire() call."""
    mono = time.monotonic_ns
    time.sleep(max(0.0, (start_ns - mono()) / 1e9))
    grants: List[Tuple[int, ...]] = []
    while mono() < end_ns:
        q = _run_delay() if RUNQ else 0
        a = mono()
        lock.acquire()
        b = mono()
        if RUNQ:
            q = _run_delay() - q
        while mono() - b < work_ns:  # the holder's work
            pass
        c = mono()
        lock.release()
        grants.append((a, b, c, mono(), q) if RUNQ else (a, b, c, mono()))
    return grants


async def _contend_aio(make: Callable[[], Any], start_ns: int, end_ns: int, work_ns: int) -> List[Tuple[int, ...]]:
    """One task's loop, as :func:`_contend`."""
    lock = make()
    mono = time.monotonic_ns
    await asyncio.sleep(max(0.0, (start_ns - mono()) / 1e9))
    grants = []
    while mono() < end_ns:
        a = mono()
        await lock.acquire()
        b = mono()
        while mono() - b < work_ns:
            pass
        c = mono()
        await lock.release()
        grants.append((a, b, c, mono()))
    return grants


def _contenders(client: Any, impl: str, path: str, threads: int, start_ns: int, end_ns: int,
                work_ns: int) -> List[str]:
    """Run one process's contenders on ``client``; its output lines: ``g K A B C D`` per grant (ns),
    ``error K MESSAGE`` per contender that failed."""
    results: Dict[int, Any] = {}
    if impl == AIO:
        from zkrecipes.aio import FairLock as AioFairLock

        async def fleet() -> List[Any]:
            return await asyncio.gather(
                *(_contend_aio(lambda: AioFairLock(client, path), start_ns, end_ns, work_ns) for _ in range(threads)),
                return_exceptions=True,
            )

        results = dict(enumerate(asyncio.run(fleet())))
    else:
        if impl == FAIR:
            from zkrecipes import FairLock

            def make() -> Any:
                return FairLock(client, path)
        else:
            from kazoo.recipe.lock import Lock

            def make() -> Any:
                return Lock(client, path)

        def run(k: int) -> None:
            try:
                results[k] = _contend(make(), start_ns, end_ns, work_ns)
            except Exception as e:  # reported, counted as an error of the run
                results[k] = e

        harness.in_threads(run, threads)
    out = []
    for k, r in sorted(results.items()):
        if isinstance(r, BaseException):
            out.append(f"error {k} {r!r}".replace("\n", " "))
        else:
            out.extend(f"g {k} " + " ".join(map(str, g)) for g in r)
    return out


def _one_process(impl: str, hosts: str, path: str, index: int, threads: int, session: float, work_us: int,
                 ready: Callable[[], None], go: Callable[[], Optional[str]]) -> List[str]:
    """One process of a Python fleet: connect, ``ready()``, wait for ``go()`` (``go T0 END``), run the
    contenders; its output lines, then the notification stamps (``n`` reads, ``e`` events) and ``pp PID
    PARENT``."""
    reads: List[int] = []
    events: List[int] = []
    if impl in OURS and os.environ.get("ZKRECIPES_BENCH_NO_NUDGER"):  # diagnosis only: see --help
        from zkrecipes import _kazoo

        _kazoo.NUDGE_AFTER = 1e9  # never a nudge, so never a wake-up for one
    client = _connect(hosts, index, session, reads, events, ours=impl in OURS)
    try:
        ready()
        line = (go() or "").split()
        if not line or line[0] != "go":
            return ["error - no go"]
        del reads[:], events[:]  # only the run's notifications
        out = _contenders(client, impl, path, threads, int(line[1]), int(line[2]), work_us * 1000)
        stamps = [" ".join(["n", *map(str, reads)]), " ".join(["e", *map(str, events)])]
        return out + stamps + [f"pp {os.getpid()} {os.getppid()}"]  # which process started this one
    finally:
        client.stop()
        client.close()


def worker(args: argparse.Namespace) -> int:
    """One process of a Python fleet in the ``spawned`` layout: its own interpreter, talking on stdio."""
    out = _one_process(args.worker, args.hosts, args.path, args.index, args.threads, args.session, args.work_us,
                       lambda: print("ready", flush=True), sys.stdin.readline)
    print("\n".join(out + ["done"]), flush=True)
    return 0


def _forked(conn: Any, args: argparse.Namespace, index: int) -> None:
    """A child of the pool (``forked`` layout): as :func:`worker`, talking on a pipe to the pool."""
    out = _one_process(args.pool, args.hosts, args.path, index, args.threads, args.session, args.work_us,
                       lambda: conn.send("ready"), conn.recv)
    conn.send(out)
    conn.close()


def pool(args: argparse.Namespace) -> int:
    """The pool process of the ``forked`` layout: import everything, then fork ``--procs`` children (no
    thread runs here, so none is half-copied); say ``ready`` once all are connected, pass ``go`` on, and
    print every child's lines as ``p INDEX LINE``, then ``done``."""
    import multiprocessing

    import kazoo.client  # noqa: F401  (imported once, here: the children inherit the modules)
    import kazoo.recipe.lock  # noqa: F401

    import zkrecipes  # noqa: F401
    import zkrecipes.aio  # noqa: F401

    if threading.active_count() != 1:  # a thread here would be copied half-way into every child
        print(f"the pool runs threads before forking: {threading.enumerate()!r}", file=sys.stderr, flush=True)
        return 2
    ctx = multiprocessing.get_context("fork")
    conns, kids = [], []
    for i in range(args.procs):
        mine, theirs = ctx.Pipe()
        kid = ctx.Process(target=_forked, args=(theirs, args, i), daemon=True)
        kid.start()
        theirs.close()
        conns.append(mine)
        kids.append(kid)
    for i, c in enumerate(conns):
        if not c.poll(240) or c.recv() != "ready":
            print(f"forked contender {i} did not get ready", file=sys.stderr, flush=True)
            return 2
    print("ready", flush=True)
    go = sys.stdin.readline()
    for c in conns:
        c.send(go)
    for i, c in enumerate(conns):
        sys.stdout.write("".join(f"p {i} {line}\n" for line in c.recv()))
    print("done", flush=True)
    for kid in kids:
        kid.join(30)
    return 0


def curator_classpath(java_dir: str = "/usr/share/java") -> Tuple[Optional[str], str]:
    """``(classpath, "")`` with JAVA_SOURCE compiled (the kit's one compile-and-cache helper), or ``(None, why)``."""
    return _java.curator_classpath(JAVA_SOURCE, java_dir)


def _argv(impl: str, hosts: str, path: str, i: int, threads: int, session: float, work_us: int,
          classpath: Optional[str]) -> List[str]:
    if impl == CURATOR:
        assert classpath is not None
        java = shutil.which("java") or "java"
        return [java, *JAVA_OPTS, "-cp", classpath, "CuratorContender", harness.hosts_for(hosts, i), path, str(threads),
                str(int(session * 1000)), str(work_us)]
    return [sys.executable, os.path.abspath(__file__), "--worker", impl, "--hosts", hosts, "--path", path,
            "--index", str(i), "--threads", str(threads), "--session", str(session), "--work-us", str(work_us)]


def _pool_argv(impl: str, hosts: str, path: str, procs: int, threads: int, session: float, work_us: int) -> List[str]:
    return [sys.executable, os.path.abspath(__file__), "--pool", impl, "--hosts", hosts, "--path", path,
            "--procs", str(procs), "--threads", str(threads), "--session", str(session), "--work-us", str(work_us)]


def fleet_layout(impl: str, layout: str) -> str:
    """The layout a fleet really runs in: Curator's JVMs are always processes of their own."""
    return SPAWNED if impl == CURATOR else layout


def run_fleet(impl: str, hosts: str, path: str, procs: int, threads: int, cfg: Dict[str, Any],
              classpath: Optional[str], layout: str = "spawned") -> Dict[str, Any]:
    """Start ``procs`` x ``threads`` contenders of ``impl`` on ``path`` in ``layout``, run them, return the row."""
    forked = fleet_layout(impl, layout) == FORKED
    if forked:
        fleet = [Proc(_pool_argv(impl, hosts, path, procs, threads, cfg["session_s"], cfg["work_us"]))]
    else:
        fleet = [Proc(_argv(impl, hosts, path, i, threads, cfg["session_s"], cfg["work_us"], classpath))
                 for i in range(procs)]
    try:
        deadline = time.monotonic() + 240
        for p in fleet:
            p.wait_line("ready", deadline)
        start_ns = time.monotonic_ns() + 200_000_000 + procs * 2_000_000  # every "go" is read by then
        w0 = start_ns + int(cfg["warmup_s"] * 1e9)
        w1 = w0 + int(cfg["window_s"] * 1e9)
        for p in fleet:
            p.send(f"go {start_ns} {w1}")
        deadline = time.monotonic() + (w1 - time.monotonic_ns()) / 1e9 + cfg["drain_s"]
        for p in fleet:
            p.wait_line("done", deadline)
    finally:
        for p in fleet:
            p.stop()
    if forked:
        lines = [(int(i), rest) for i, rest in (ln.split(" ", 2)[1:] for ln in fleet[0].lines if ln.startswith("p "))]
    else:
        lines = [(i, ln) for i, p in enumerate(fleet) for ln in p.lines]
    grants: List[Tuple[str, int, int, int, int]] = []
    runq: Dict[Tuple[str, int], int] = {}  # (contender, acquire return) -> its run-queue wait, with RUNQ
    errors: List[str] = []
    reads: Dict[str, List[int]] = {}
    events: Dict[str, List[int]] = {}
    parents = set()
    for i, line in lines:
        parts = line.split(" ", 2)
        if parts[0] == "g":
            a, b, c, d, *q = (int(x) for x in parts[2].split())  # ns, both languages
            grants.append((f"{i}:{parts[1]}", a, b, c, d))
            if q:
                runq[(f"{i}:{parts[1]}", b)] = q[0]
        elif parts[0] == "error":
            errors.append(f"process {i}: {line}")
        elif parts[0] in ("n", "e"):
            (reads if parts[0] == "n" else events)[str(i)] = sorted(int(x) for x in line.split()[1:])
        elif parts[0] == "pp":
            parents.add(int(parts[2]))
    contenders = [f"{i}:{k}" for i in range(procs) for k in range(threads)]
    row = analyse(grants, contenders, w0, w1)
    if reads:  # the Python fleets stamp their watch notifications
        row["split"] = split(grants, w0, w1, reads, events, runq)
    row.update({"impl": impl, "layout": fleet_layout(impl, layout), "n": procs * threads, "processes": procs,
                "per_process": threads, "errors": len(errors), "error_samples": errors[:3],
                "parents": sorted(parents)})  # the Python fleets' parent pids: the pool, or this driver
    return row


# -- the floor: delete() call to the watch notification in another process ------------------------


def floor_watcher(args: argparse.Namespace) -> int:
    """The floor's watcher (own interpreter, server 0 first): on ``arm R`` create node R, set an exists
    watch on it, say ``armed R``; when the notification comes, say ``w R READ EVENT`` (its socket read and
    the start of the watch function, ns)."""
    reads: List[int] = []
    events: List[int] = []
    client = _connect(args.hosts, 0, args.session, reads, events)
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            word, r = line.split()
            if word != "arm":
                break
            path, fired = f"{args.path}/n{r}", threading.Event()
            client.create(path)
            client.exists(path, watch=lambda _event, fired=fired: fired.set())
            print(f"armed {r}", flush=True)
            if fired.wait(30):
                print(f"w {r} {reads[-1]} {events[-1]}", flush=True)
            else:
                print(f"w {r} lost", flush=True)
    finally:
        client.stop()
        client.close()
    return 0


def floor_deleter(args: argparse.Namespace) -> int:
    """The floor's deleter (own interpreter): one session per server; on ``del R`` delete node R through
    server R mod size, say ``d R CALL RETURN`` (ns)."""
    from kazoo.client import KazooClient

    clients = [KazooClient(hosts=harness.hosts_for(args.hosts, k), randomize_hosts=False, timeout=args.session)
               for k in range(len(harness.server_list(args.hosts)))]
    for c in clients:
        c.start(60)
    print("ready", flush=True)
    mono = time.monotonic_ns
    try:
        for line in sys.stdin:
            word, r = line.split()
            if word != "del":
                break
            client = clients[int(r) % len(clients)]
            t = mono()
            client.delete(f"{args.path}/n{r}")
            print(f"d {r} {t} {mono()}", flush=True)
    finally:
        for c in clients:
            c.stop()
            c.close()
    return 0


def measure_floor(hosts: str, path: str, reps: int, warm: int, session: float) -> Dict[str, Any]:
    """The floor: a raw kazoo client's delete() call in one process to the watch notification in another,
    ``reps`` times after ``warm`` unrecorded ones; the deleter goes through each server in turn, so the
    share of same-server notifications is about that of a fleet's hand-offs."""
    me = [sys.executable, os.path.abspath(__file__), "--hosts", hosts, "--path", path, "--session", str(session)]
    watcher, deleter = Proc(me + ["--floor", "watcher"]), Proc(me + ["--floor", "deleter"])
    servers = len(harness.server_list(hosts))
    notify, read, delete = [], [], []
    by_server: Dict[bool, List[int]] = {True: [], False: []}
    lost = 0
    try:
        deadline = time.monotonic() + 120
        watcher.wait_line("ready", deadline)
        deleter.wait_line("ready", deadline)
        for r in range(warm + reps):
            deadline = time.monotonic() + 60
            watcher.send(f"arm {r}")
            watcher.wait_line(f"armed {r}", deadline)
            deleter.send(f"del {r}")
            d = deleter.wait_for(lambda line, r=r: line.startswith(f"d {r} "), f"d {r}", deadline).split()
            w = watcher.wait_for(lambda line, r=r: line.startswith(f"w {r} "), f"w {r}", deadline).split()
            if r < warm:
                continue
            if w[2] == "lost":
                lost += 1
                continue
            call = int(d[2])
            notify.append(int(w[3]) - call)
            read.append(int(w[2]) - call)
            delete.append(int(d[3]) - call)
            by_server[r % servers == 0].append(int(w[3]) - call)
        watcher.send("stop 0")
        deleter.send("stop 0")
    finally:
        watcher.stop()
        deleter.stop()
    out = _dist(notify)
    out.update({"read": _dist(read), "delete": _dist(delete), "lost": lost,
                "same_server_p50_ms": _dist(by_server[True])["p50_ms"],
                "other_server_p50_ms": _dist(by_server[False])["p50_ms"]})
    return out


# -- the measures ---------------------------------------------------------------------------------


def _ms(ns: float) -> float:
    return ns / 1e6


_dist = harness.dist_ms


def analyse(grants: Sequence[Tuple[str, int, int, int, int]], contenders: Sequence[str], w0: int,
            w1: int) -> Dict[str, Any]:
    """The row of one run from its grants ``(contender, acquire call, acquire return, release call,
    release return)`` in ns; the window is [w0, w1) of acquire returns."""
    ordered = sorted(grants, key=lambda g: g[2])
    overlaps, held_until = 0, None
    for g in ordered:  # a hold is [acquire return, release call]: inside the real hold, so no false alarm
        if held_until is not None and g[2] < held_until:
            overlaps += 1
        held_until = g[3] if held_until is None else max(held_until, g[3])
    handoffs, waits, releases, inside = [], [], [], []
    for i, g in enumerate(ordered):
        if not w0 <= g[2] < w1:
            continue
        inside.append(g)
        waits.append(g[2] - g[1])
        releases.append(g[4] - g[3])
        if i > 0:
            handoffs.append(g[2] - ordered[i - 1][3])
    slow = []  # every hand-off or release over 1 s, with what the previous holder's release did meanwhile
    for i, g in enumerate(ordered):
        if w0 <= g[2] < w1 and i > 0 and g[2] - ordered[i - 1][3] > SLOW_NS:
            prev = ordered[i - 1]
            slow.append({"kind": "hand-off", "ms": _ms(g[2] - prev[3]), "at_s": (prev[3] - w0) / 1e9,
                         "from": prev[0], "to": g[0], "release_ms": _ms(prev[4] - prev[3]),
                         "same_process": prev[0].split(":")[0] == g[0].split(":")[0]})
        if w0 <= g[2] < w1 and g[4] - g[3] > SLOW_NS:
            slow.append({"kind": "release", "ms": _ms(g[4] - g[3]), "at_s": (g[3] - w0) / 1e9, "from": g[0],
                         "next_acquired_after_ms": _ms(ordered[i + 1][2] - g[3]) if i + 1 < len(ordered) else None})
    per = collections.Counter(g[0] for g in inside)
    counts = sorted(per.get(c, 0) for c in contenders)
    window_s = (w1 - w0) / 1e9
    h = _dist(handoffs)
    return {
        "grants": len(inside),
        "grants_per_s": len(inside) / window_s,
        "handoff": h,
        "handoffs_over_100ms": sum(1 for x in handoffs if x > HANDOFF_LIMIT_MS * 1e6),
        "handoffs_over_1s": sum(1 for x in handoffs if x > 1e9),
        "wait": _dist(waits),
        "release": _dist(releases),
        "per_contender": {"min": counts[0], "median": harness.percentile(counts, 0.5), "max": counts[-1],
                          "zero": sum(1 for c in counts if c == 0)},
        "overlaps": overlaps,
        "grants_total": len(ordered),
        "granted": len({g[0] for g in ordered}),  # contenders granted at least once in the whole run
        "slow": slow,
    }


def split(grants: Sequence[Tuple[str, int, int, int, int]], w0: int, w1: int, reads: Dict[str, List[int]],
          events: Dict[str, List[int]], runq: Optional[Dict[Tuple[str, int], int]] = None) -> Dict[str, Any]:
    """Split each hand-off between processes at the watch notification that woke the next holder's process:
    the latest notification its kazoo I/O thread read between the previous holder's release() call and the
    acquire() return. *server*: release() call -> notification read (the delete, the server, the wire);
    *client*: notification read -> acquire() return, itself split at the start of the watch function on
    kazoo's event thread into *dispatch* (I/O thread -> event thread; zkrecipes' watch functions run on the
    I/O thread itself, so theirs is the read's own remainder) and *after event* (the recipe's work,
    including any read it sends, to the acquire return). ``reads`` and ``events`` (ns, ascending) are per
    process. Hand-offs inside one process (``local``) need no notification; ``unmatched`` ones had none
    (the next holder found the lock free in its own listing). *tail*: the medians of the parts over the
    matched hand-offs at or above the p99 of all hand-offs in the window, which is where the tail's time goes.
    With ``runq`` (``ZKRECIPES_BENCH_RUNQ``): the next holder's thread's wait for a CPU inside its acquire()."""
    ordered = sorted(grants, key=lambda g: g[2])
    parts: Dict[str, List[int]] = {"server": [], "client": [], "dispatch": [], "after_event": []}
    matched: List[Tuple[int, int, int, Optional[int], Optional[int]]] = []  # (hand-off, server, client, dispatch, runq)
    every: List[int] = []
    local = unmatched = 0
    for prev, g in zip(ordered, ordered[1:]):
        if not w0 <= g[2] < w1:
            continue
        every.append(g[2] - prev[3])
        proc = g[0].split(":")[0]
        if proc == prev[0].split(":")[0]:
            local += 1
            continue
        rs = reads.get(proc, [])
        j = bisect.bisect_right(rs, g[2]) - 1
        if j < 0 or rs[j] < prev[3]:
            unmatched += 1
            continue
        read = rs[j]
        es = events.get(proc, [])
        m = bisect.bisect_left(es, read)
        event = es[m] if m < len(es) and es[m] <= g[2] else None
        parts["server"].append(read - prev[3])
        parts["client"].append(g[2] - read)
        if event is not None:
            parts["dispatch"].append(event - read)
            parts["after_event"].append(g[2] - event)
        matched.append((g[2] - prev[3], read - prev[3], g[2] - read, None if event is None else event - read,
                        None if runq is None else runq.get((g[0], g[2]))))
    out: Dict[str, Any] = {name: _dist(v) for name, v in parts.items()}
    out.update({"matched": len(matched), "local": local, "unmatched": unmatched})
    cut = harness.percentile(sorted(every), 0.99) if every else None
    tail = [m for m in matched if cut is not None and m[0] >= cut]

    def med(values: List[Optional[int]]) -> Optional[float]:
        s = sorted(v for v in values if v is not None)
        return _ms(harness.percentile(s, 0.5)) if s else None

    out["tail"] = {"n": len(tail), "of": sum(1 for x in every if cut is not None and x >= cut),
                   "handoff_p50_ms": med([m[0] for m in tail]), "server_p50_ms": med([m[1] for m in tail]),
                   "client_p50_ms": med([m[2] for m in tail]), "dispatch_p50_ms": med([m[3] for m in tail])}
    if runq:
        out["runq"] = _dist([m[4] for m in matched if m[4] is not None])
        out["tail"]["runq_p50_ms"] = med([m[4] for m in tail])
    return out


def targets(rows: List[Dict[str, Any]], sizes: List[int]) -> List[Dict[str, Any]]:
    """Issues 30 and 40's targets per layout, N (and repetition) for each zkrecipes front, against kazoo's
    Lock in the same layout and the floor of the same N."""
    out = []
    by = {(r["rep"], r.get("layout", SPAWNED), r["n"], r["impl"]): r for r in rows}
    order = sorted(by.items(), key=lambda kv: (kv[0][0], _layout_rank(kv[0][1]), kv[0][2], IMPLS.index(kv[0][3])))
    for (rep, layout, n, impl), r in order:
        if impl not in OURS:
            continue
        base = by.get((rep, layout, n, BASELINE))
        h = r["handoff"]
        checks: List[Tuple[str, Any, Any, Optional[bool]]] = [
            ("max hand-off (ms)", h["max_ms"], HANDOFF_LIMIT_MS,
             None if h["max_ms"] is None else h["max_ms"] <= HANDOFF_LIMIT_MS)
        ]
        if base is not None and base["handoff"]["p99_ms"] is not None and h["p99_ms"] is not None:
            b99, bgps = base["handoff"]["p99_ms"], base["grants_per_s"]
            checks.append(("hand-off p99 (ms) <= kazoo's", h["p99_ms"], b99, h["p99_ms"] <= b99))
            checks.append(("grants/s >= kazoo's", r["grants_per_s"], bgps, r["grants_per_s"] >= bgps))
        ratio = r.get("handoff_to_floor")
        if ratio is not None:
            checks.append(("hand-off p50 / floor p50", ratio, FLOOR_LIMIT, ratio <= FLOOR_LIMIT))
        if n == max(sizes) and n >= 1000 and h["p50_ms"] is not None:
            checks.append(("hand-off p99 <= 2x p50 (ms)", h["p99_ms"], 2 * h["p50_ms"], h["p99_ms"] <= 2 * h["p50_ms"]))
        out.extend({"rep": rep, "layout": layout, "n": n, "impl": impl, "target": what, "measured": measured,
                    "limit": limit, "met": met} for what, measured, limit, met in checks)
    return out


def _layout_rank(layout: str) -> int:
    return LAYOUTS.index(layout) if layout in LAYOUTS else len(LAYOUTS)


def _row_key(r: Dict[str, Any]) -> Tuple[int, int, int, int]:
    return (r["n"], r["rep"], _layout_rank(r.get("layout", SPAWNED)), IMPLS.index(r["impl"]))


# -- report ---------------------------------------------------------------------------------------


_f = cell


def markdown(result: Dict[str, Any]) -> str:
    m, cfg = result["meta"], result["config"]
    reps = cfg["reps"]

    def rep_of(r: Dict[str, Any]) -> str:
        return f" rep {r['rep'] + 1}" if reps > 1 else ""

    lines = [
        harness.run_line(m),
        "",
        f"One lock path; every contender loops acquire -> {cfg['work_us'] / 1000:g} ms busy work -> release; "
        f"{cfg['warmup_s']:g} s warm-up, then {cfg['window_s']:g} s measured; session timeout {cfg['session_s']:g} s; "
        "one session per process (threads, or asyncio tasks for the aio front; Curator: one CuratorFramework "
        "per JVM). Hand-off: previous holder's release() call to the next holder's acquire() return. "
        "Layouts: *forked*, the processes of a fleet forked from one pool process that imported kazoo and "
        "zkrecipes; *spawned*, each process its own interpreter started by this driver (Curator's JVMs are "
        "always spawned, so Curator has one row per N). Floor: a raw kazoo client's delete() call to the "
        "watch function's start in another process's client (exists watch), measured at the start of each "
        "N. Load avg: the machine's 1-minute load average before -> after the row (it has "
        f"{m['machine']['cpus']} CPUs, shared with the ensemble and with other work).",
        "",
    ]
    if result.get("curator_absent"):
        lines += [f"Curator: absent ({result['curator_absent']}).", ""]
    floors = result.get("floors") or []
    if floors:
        lines += ["| N | floor: delete() -> watch function p50 / p90 / p99 / max (ms) | -> socket read p50 (ms) "
                  "| same server / other server p50 (ms) | delete() call to return p50 (ms) | repetitions | lost |",
                  "|---|---|---|---|---|---|---|"]
        for fl in sorted(floors, key=lambda f: (f["n"], f["rep"])):
            lines.append(
                f"| {fl['n']:,}{rep_of(fl)} | {_f(fl['p50_ms'], '{:.2f}')} / {_f(fl['p90_ms'], '{:.2f}')} / "
                f"{_f(fl['p99_ms'], '{:.2f}')} / {_f(fl['max_ms'], '{:.2f}')} | {_f(fl['read']['p50_ms'], '{:.2f}')} "
                f"| {_f(fl['same_server_p50_ms'], '{:.2f}')} / {_f(fl['other_server_p50_ms'], '{:.2f}')} "
                f"| {_f(fl['delete']['p50_ms'], '{:.2f}')} | {fl['n_samples']} | {fl['lost']} |")
        lines.append("")
    lines += [
        "| N (procs x per proc) | layout | implementation | grants/s | hand-off p50 / p90 / p99 / **max** (ms) "
        "| p50 / floor | hand-offs > 100 ms | max wait (ms) | max release (ms) "
        "| grants per contender min / median / max | overlaps | errors | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = sorted(result["rows"], key=_row_key)
    for r in rows:
        h, pc = r["handoff"], r["per_contender"]
        n = f"{r['n']:,} ({r['processes']}x{r['per_process']})" + rep_of(r)
        load = " -> ".join(f"{x:.0f}" for x in r["loadavg"]) if r.get("loadavg") else "—"
        lines.append(
            f"| {n} | {r.get('layout', SPAWNED)} | {r['impl']} | {r['grants_per_s']:.0f} | {_f(h['p50_ms'])} / "
            f"{_f(h['p90_ms'])} / {_f(h['p99_ms'])} / **{_f(h['max_ms'], '{:,.1f}')}** | "
            f"{_f(r.get('handoff_to_floor'), '{:.2f}x')} | {r['handoffs_over_100ms']} | "
            f"{_f(r['wait']['max_ms'], '{:,.1f}')} | {_f(r['release']['max_ms'], '{:,.1f}')} | "
            f"{pc['min']} / {pc['median']:g} / {pc['max']} | {r['overlaps']} | {r['errors']} | {load} |"
        )
    splits = [r for r in rows if r.get("split")]
    if splits:
        lines += ["", "Hand-offs between processes split at the watch notification that woke the next holder's "
                  "process (stamped bench-side on its kazoo client): *server* = release() call -> notification "
                  "read by kazoo's I/O thread; *client* = that read -> acquire() return, of which *dispatch* = "
                  "I/O thread -> start of the watch function on kazoo's event thread. *Tail*: medians over the "
                  "split hand-offs at or above the row's hand-off p99. Local: hand-offs inside one process; "
                  "no watch: the next holder found the lock free without one.", "",
                  "| N | layout | implementation | split / local / no watch | server p50 / p99 (ms) "
                  "| client p50 / p99 (ms) | dispatch p50 / p99 (ms) | tail: n, hand-off / server / client / "
                  "dispatch p50 (ms) |", "|---|---|---|---|---|---|---|---|"]
        for r in splits:
            s, t = r["split"], r["split"]["tail"]
            lines.append(
                f"| {r['n']:,}{rep_of(r)} | {r['layout']} | {r['impl']} | {s['matched']} / {s['local']} / "
                f"{s['unmatched']} | {_f(s['server']['p50_ms'], '{:.2f}')} / {_f(s['server']['p99_ms'], '{:.2f}')} "
                f"| {_f(s['client']['p50_ms'], '{:.2f}')} / {_f(s['client']['p99_ms'], '{:.2f}')} "
                f"| {_f(s['dispatch']['p50_ms'], '{:.2f}')} / {_f(s['dispatch']['p99_ms'], '{:.2f}')} "
                f"| {t['n']} of {t['of']}: {_f(t['handoff_p50_ms'], '{:.2f}')} / {_f(t['server_p50_ms'], '{:.2f}')} "
                f"/ {_f(t['client_p50_ms'], '{:.2f}')} / {_f(t['dispatch_p50_ms'], '{:.2f}')} |")
    slow = [(r, e) for r in rows for e in r.get("slow", [])]
    if slow:
        lines += ["", "Hand-offs and releases over 1 s (*at*: seconds into the window of the release call; "
                  "contenders as process:thread):", ""]
        for r, e in slow:
            where = f"N = {r['n']:,} {r.get('layout', SPAWNED)} {r['impl']}" + rep_of(r)
            if e["kind"] == "hand-off":
                lines.append(f"- {where}: hand-off {e['ms']:,.0f} ms at {e['at_s']:.1f} s, {e['from']} -> {e['to']}"
                             f"{' (same process)' if e['same_process'] else ''}; that release() returned after "
                             f"{e['release_ms']:,.1f} ms")
            else:
                nxt = e["next_acquired_after_ms"]
                lines.append(f"- {where}: release() of {e['from']} took {e['ms']:,.0f} ms at {e['at_s']:.1f} s; "
                             f"the next holder's acquire() returned {_f(nxt, '{:,.1f}')} ms after the call")
    lines += ["", "### Targets (issues 30 and 40; reported, not tested)", "",
              "| N | layout | implementation | target | measured | limit | met |", "|---|---|---|---|---|---|---|"]
    for t in result["targets"]:
        n = f"{t['n']:,}" + rep_of(t)
        fmt = "{:,.0f}" if "grants" in t["target"] else "{:.2f}x" if "floor" in t["target"] else "{:,.1f}"
        met = "—" if t["met"] is None else ("yes" if t["met"] else "**no**")
        measured, limit = _f(t["measured"], fmt), _f(t["limit"], fmt)
        layout = t.get("layout", SPAWNED)
        lines.append(f"| {n} | {layout} | {t['impl']} | {t['target']} | {measured} | {limit} | {met} |")
    return "\n".join(lines) + "\n"


def plot(result: Dict[str, Any], path: str) -> Optional[str]:
    """Write the plot: per layout, grants/s and hand-off p50 (with the floor) / p90 / p99 / max against N for
    every implementation; return why not (no matplotlib) or None."""
    plt = harness.pyplot()
    if plt is None:
        return harness.NO_MATPLOTLIB
    from matplotlib import ticker

    rows = [r for r in result["rows"] if r["rep"] == 0]
    layouts = sorted({r.get("layout", SPAWNED) for r in rows}, key=_layout_rank)
    sizes = sorted({r["n"] for r in rows})
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    floors = {f["n"]: f["p50_ms"] for f in result.get("floors") or [] if f["rep"] == 0 and f["p50_ms"]}
    panels = [("grants/s", lambda r: r["grants_per_s"]), ("hand-off p50 (ms)", lambda r: r["handoff"]["p50_ms"]),
              ("hand-off p90 (ms)", lambda r: r["handoff"]["p90_ms"]),
              ("hand-off p99 (ms)", lambda r: r["handoff"]["p99_ms"]),
              ("hand-off max (ms)", lambda r: r["handoff"]["max_ms"])]
    fig, axes = plt.subplots(len(layouts), len(panels), figsize=(20, 4.2 * len(layouts)), squeeze=False)
    for li, layout in enumerate(layouts):
        for ax, (title, get) in zip(axes[li], panels):
            for impl in impls:
                # Curator runs spawned only: drawn dotted in the other layouts' panels, for reference
                found = {r["n"]: r for r in rows if r["impl"] == impl
                         and (r.get("layout", SPAWNED) == layout or impl == CURATOR)}
                pts = [(n, get(found[n])) for n in sizes if n in found and get(found[n]) is not None]
                if pts:
                    other = impl == CURATOR and layout != SPAWNED
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], ":" if other else "-", marker="o",
                            label=f"{impl} (spawned)" if other else impl)
            if "p50" in title and floors:
                ax.plot(sorted(floors), [floors[n] for n in sorted(floors)], "--", color="black", marker="x",
                        label="floor (delete -> notification)")
            if "max" in title:
                ax.axhline(HANDOFF_LIMIT_MS, color="black", linestyle="--", linewidth=1, label="target: 100 ms")
            ax.set_xscale("log")
            ax.set_xticks(sizes)
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
            ax.set_xlabel("N contenders", fontsize=9)
            ax.set_title(f"{layout}: {title}", fontsize=10)
            if title != "grants/s":
                ax.set_yscale("log")
                ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                ax.yaxis.set_minor_formatter(ticker.NullFormatter())
            if title in ("hand-off p50 (ms)", "hand-off max (ms)"):
                ax.legend(fontsize=7, loc="upper left")
    harness.save_figure(plt, fig, path, 80, f"One lock, N contenders (session {result['config']['session_s']:g} s) · "
                        f"{harness.stamp(result['meta'])}", fontsize=10)
    return None


# -- main -----------------------------------------------------------------------------------------


def run(hosts: str, cfg: Dict[str, Any], impls: Sequence[str], classpath: Optional[str],
        layouts: Sequence[str] = LAYOUTS) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Every N: the floor first, then each layout's fleets (layouts and implementations in rotating order).
    Returns the rows and the floors."""
    rows, floors = [], []
    with harness.admin(hosts, "contention") as (admin, root):
        for rep in range(cfg["reps"]):
            for k, (procs, per) in enumerate(cfg["sizes"]):
                n = procs * per
                fpath = f"{root}/floor-{n}-{rep}"
                admin.ensure_path(fpath)
                fl = measure_floor(hosts, fpath, cfg["floor_reps"], cfg["floor_warmup"], cfg["session_s"])
                fl.update({"rep": rep, "n": n, "n_samples": fl.pop("n")})
                floors.append(fl)
                log(f"N = {n}: floor p50 {_f(fl['p50_ms'], '{:.2f}')} p99 {_f(fl['p99_ms'], '{:.2f}')} ms "
                    f"over {fl['n_samples']}")
                blocks = [(lay, [i for i in impls if fleet_layout(i, lay) == lay]) for lay in layouts]
                if CURATOR in impls and SPAWNED not in layouts:  # its JVMs run spawned whatever is asked
                    blocks[0][1].append(CURATOR)
                for layout, mine in harness.rotate(blocks, rep + k):
                    for impl in harness.rotate(mine, rep + k):  # the order rotates: drift hits all alike
                        path = f"{root}/{impl.split()[-1].lower()}-{layout}-{n}-{rep}"
                        admin.ensure_path(path)  # persistent: never reaped while a fleet starts
                        log(f"N = {n} ({procs} x {per}) {fleet_layout(impl, layout)} {impl}")
                        load = os.getloadavg()[0]
                        row = run_fleet(impl, hosts, path, procs, per, cfg, classpath, layout)
                        h = row["handoff"]
                        row.update({"rep": rep, "loadavg": [load, os.getloadavg()[0]], "floor_p50_ms": fl["p50_ms"],
                                    "handoff_to_floor": harness.ratio(h["p50_ms"], fl["p50_ms"])})
                        log(f"  {row['grants_per_s']:.0f} grants/s, hand-off p50 {_f(h['p50_ms'])} p99 "
                            f"{_f(h['p99_ms'])} max {_f(h['max_ms'])} ms, overlaps {row['overlaps']}, "
                            f"errors {row['errors']}")
                        rows.append(row)
    return rows, floors


def main(argv: Optional[List[str]] = None) -> int:
    ap = harness.arguments(__doc__)
    ap.add_argument("--quick", action="store_true", help="the same sizes with 2 s warm-up + 6 s windows")
    ap.add_argument("--smoke", action="store_true", help="tiny N and windows: checks that the tool runs")
    ap.add_argument("--reps", type=int, help="repetitions of every run (default 1)")
    ap.add_argument("--sizes", help="comma-separated N, a subset of 10,100,1000 (default all)")
    ap.add_argument("--session", type=float, default=10.0, help="session timeout in seconds (default 10)")
    ap.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS), metavar="IMPL")
    ap.add_argument("--layouts", default=",".join(LAYOUTS),
                    help="comma-separated, of forked (a fleet's processes forked from one pool process) and "
                         "spawned (each its own interpreter); default both")
    ap.add_argument("--report-only", action="store_true", help="re-render contention.md/.png from contention.json")
    ap.add_argument("--worker", choices=IMPLS, help=argparse.SUPPRESS)
    ap.add_argument("--pool", choices=OURS + (KAZOO,), help=argparse.SUPPRESS)
    ap.add_argument("--floor", choices=("watcher", "deleter"), help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--procs", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--work-us", type=int, default=200, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.pool:
        return pool(args)
    if args.floor:
        return floor_watcher(args) if args.floor == "watcher" else floor_deleter(args)
    if args.report_only:
        print(harness.write_report(args.out, "contention", harness.read_json(args.out, "contention"), markdown, plot))
        return 0
    if args.session <= 0:
        ap.error(f"--session must be positive, got {args.session!r}")
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    bad = [x for x in layouts if x not in LAYOUTS]
    if bad or not layouts or len(set(layouts)) != len(layouts):
        ap.error(f"--layouts takes forked and/or spawned, comma-separated, each once; got {args.layouts!r}")
    cfg = dict(SMOKE if args.smoke else QUICK if args.quick else FULL)
    if args.reps is not None:
        if args.reps < 1:
            ap.error(f"--reps must be at least 1, got {args.reps!r}")
        cfg["reps"] = args.reps
    if args.sizes:
        wanted = {int(n) for n in args.sizes.split(",")}
        cfg["sizes"] = [pt for pt in cfg["sizes"] if pt[0] * pt[1] in wanted]
        if not cfg["sizes"]:
            ap.error(f"--sizes names none of the configured N: {args.sizes!r}")
    cfg.update({"session_s": args.session, "work_us": 200, "drain_s": 120.0, "layouts": layouts})
    impls = list(args.impls)
    classpath, curator_absent = harness.curator(impls, CURATOR, JAVA_SOURCE, log)
    record = harness.Run("contention.py", argv, with_machine=True)
    with harness.zookeeper(args.hosts, log) as (hosts, desc):
        zk_version = harness.server_version(harness.server_list(hosts))
        rows, floors = run(hosts, cfg, impls, classpath, layouts)
    result = {
        "config": cfg,
        "impls": impls,
        "curator_absent": curator_absent,
        "rows": rows,
        "floors": floors,
        "meta": record.meta(ensemble=desc, zookeeper=zk_version, smoke=args.smoke, quick=args.quick, pid=os.getpid()),
    }
    result["targets"] = targets(rows, [p * t for p, t in cfg["sizes"]])
    harness.write_json(args.out, "contention", result)
    print(harness.write_report(args.out, "contention", result, markdown, plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
