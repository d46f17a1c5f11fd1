"""The measures of issue 7. Each returns plain dicts (rows) for the JSON result.

Contenders are threads of this one Python process, each with its own ZooKeeper session (its own
``KazooClient``) unless a measure says otherwise ("64 threads on one client"). Times are
``time.perf_counter`` differences taken in this process.
"""

from __future__ import annotations

import collections
import cProfile
import itertools
import pstats
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Optional

from kazoo.exceptions import CancelledError, NoNodeError
from kazoo.exceptions import LockTimeout as KazooLockTimeout
from kazoo.recipe.lock import Lock as KazooLock
from kazoo.recipe.lock import ReadLock as KazooReadLock
from kazoo.recipe.lock import WriteLock as KazooWriteLock

from zkrecipes import ExclusiveLock, FairLock, ReadWriteLock, Semaphore

from .harness import Counters, Pool, delta, join_all, median, ratio, rotate, server_watches, summary

FAIR = "zkrecipes FairLock"
EXCL = "zkrecipes ExclusiveLock"
RW_READ = "zkrecipes RW read"
RW_WRITE = "zkrecipes RW write"
K_LOCK = "kazoo Lock"
K_READ = "kazoo ReadLock"
K_WRITE = "kazoo WriteLock"
FLOOR = "floor: create(E|S) + delete"
FLOOR_LIST = "raw: create2(E|S, data) + get_children pipelined + delete"
REDIS = "Redis SET NX PX + Lua release"
REDIS_FSYNC = "Redis SET NX PX + Lua release (appendfsync always)"
HANDOFF_FLOOR = "floor: delete -> watch callback"


class Adapter:
    """acquire(timeout) -> bool / release() / cancel() over a zkrecipes or a kazoo lock."""

    def __init__(self, lock, kazoo: bool) -> None:
        self.lock = lock
        self.kazoo = kazoo

    def acquire(self, timeout: Optional[float] = None) -> bool:
        if not self.kazoo:
            return self.lock.acquire(timeout=timeout)
        try:
            return bool(self.lock.acquire(timeout=timeout))
        except (CancelledError, KazooLockTimeout):
            return False

    def release(self) -> None:
        self.lock.release()

    def cancel(self) -> None:
        self.lock.cancel()


LOCKS: dict = {
    FAIR: lambda c, p: Adapter(FairLock(c, p), False),
    EXCL: lambda c, p: Adapter(ExclusiveLock(c, p), False),
    RW_READ: lambda c, p: Adapter(ReadWriteLock(c, p).read(), False),
    RW_WRITE: lambda c, p: Adapter(ReadWriteLock(c, p).write(), False),
    K_LOCK: lambda c, p: Adapter(KazooLock(c, p), True),
    K_READ: lambda c, p: Adapter(KazooReadLock(c, p), True),
    K_WRITE: lambda c, p: Adapter(KazooWriteLock(c, p), True),
}


# -- what the runs of a measure have in common -----------------------------------------------------


def _per_cycle(cycles: list) -> dict:
    """Over the ``cycles`` (each ``{"requests": by type, "notifications": n}``) of one run: their count,
    notifications per release (mean, min, max; None when no cycle) and requests per cycle (by type, total)."""
    notes = [c["notifications"] for c in cycles]
    req_tot: collections.Counter = collections.Counter()
    for c in cycles:
        req_tot.update(c["requests"])
    nc = max(len(cycles), 1)
    return {
        "cycles": len(cycles),
        "notifications_per_release": sum(notes) / nc,
        "notifications_min": min(notes) if notes else None,
        "notifications_max": max(notes) if notes else None,
        "requests_per_cycle": {k: v / nc for k, v in sorted(req_tot.items())},
        "requests_total_per_cycle": sum(req_tot.values()) / nc,
    }


def _over_runs(mine: list, per: str) -> dict:
    """What a row says of its repeated runs ``mine`` alike: requests ``per`` acquire or cycle by type and in
    total (means), notifications per release (mean), errors (sum), and whether every run ended cleanly."""
    req: collections.Counter = collections.Counter()
    for r in mine:
        req.update({k: v / len(mine) for k, v in r[f"requests_per_{per}"].items()})
    return {
        f"requests_per_{per}": dict(sorted(req.items())),
        f"requests_total_per_{per}": sum(req.values()),
        "notifications_per_release": sum(r["notifications_per_release"] for r in mine) / len(mine),
        "errors": sum(r["errors"] for r in mine),
        "clean_exit": all(r["clean_exit"] for r in mine),
    }


@dataclass
class Ctx:
    pool: Pool
    counters: Counters
    root: str
    log: Callable[[str], None]
    redis: list = field(default_factory=list)  # [(label, port)]
    deadline: Optional[float] = None  # time.monotonic() by which the measures should be done
    _seq: itertools.count = field(default_factory=itertools.count)

    def path(self, name: str) -> str:
        slug = "".join(ch if ch.isalnum() else "_" for ch in name)
        return f"{self.root}/{slug}-{next(self._seq)}"


# -- 1. uncontended -------------------------------------------------------------------------------


def _redis_op(port: int) -> Callable[[], None]:
    import redis

    from .harness import REDIS_RELEASE

    r = redis.Redis(host="127.0.0.1", port=port)
    release = r.register_script(REDIS_RELEASE)
    key = f"bench-lock-{uuid.uuid4().hex}"

    def op() -> None:
        token = uuid.uuid4().hex
        if not r.set(key, token, nx=True, px=30000):
            raise RuntimeError("redis lock unexpectedly taken")
        release(keys=[key], args=[token])

    return op


def uncontended(ctx: Ctx, ops: int, blocks: int) -> dict:
    """Acquire+release on one client, implementations alternating op by op (order rotated every op)."""
    client = ctx.pool.clients[0]
    raw = ctx.path("raw")
    client.ensure_path(raw)

    def floor() -> None:
        client.delete(client.create(f"{raw}/n-", ephemeral=True, sequence=True))

    data = b'{"host":"benchhost","pid":12345,"thread":"MainThread","id":null,"guid":"' + b"0" * 32 + b'"}'

    def floor_list() -> None:
        create = client.create_async(f"{raw}/n-", data, ephemeral=True, sequence=True, include_data=True)
        children = client.get_children_async(raw)
        path, _ = create.get()
        children.get()
        client.delete(path)

    ops_by_name: dict = {FLOOR: floor, FLOOR_LIST: floor_list}
    for name in (FAIR, EXCL, RW_READ, RW_WRITE, K_LOCK, K_READ, K_WRITE):
        lock = LOCKS[name](client, ctx.path(name))

        def op(lock=lock) -> None:
            if not lock.acquire(timeout=30):
                raise RuntimeError("uncontended acquire failed")
            lock.release()

        ops_by_name[name] = op
    for label, port in ctx.redis:
        ops_by_name[label] = _redis_op(port)
    names = list(ops_by_name)
    for name in names:  # warm-up: parents, code paths, connections
        for _ in range(3):
            ops_by_name[name]()
    samples = {n: [[] for _ in range(blocks)] for n in names}
    cpu = collections.Counter()
    requests = {n: collections.Counter() for n in names}
    op_requests = {n: [[] for _ in range(blocks)] for n in names}  # request count of each op
    for b in range(blocks):
        for i in range(ops):
            for name in rotate(names, i + b * 7):
                op = ops_by_name[name]
                before = ctx.counters.snapshot()
                c0 = time.process_time()
                t0 = time.perf_counter()
                op()
                dt = time.perf_counter() - t0
                cpu[name] += time.process_time() - c0
                samples[name][b].append(dt)
                req = delta(before, ctx.counters.snapshot())[0]
                requests[name].update(req)
                op_requests[name][b].append(sum(req.values()))
    floor_blocks = [median(samples[FLOOR][b]) for b in range(blocks)]
    floor_all = summary([x for blk in samples[FLOOR] for x in blk])
    rows = []
    for name in names:
        flat = [x for blk in samples[name] for x in blk]
        s = summary(flat)
        block_ratios = [ratio(median(samples[name][b]), floor_blocks[b]) for b in range(blocks)]
        # ops with the usual number of requests (e.g. without re-creating a reaped container parent)
        counts = [c for blk in op_requests[name] for c in blk]
        usual = collections.Counter(counts).most_common(1)[0][0]
        steady = [x for x, c in zip(flat, counts) if c == usual]
        rows.append(
            {
                "impl": name,
                **s,
                "ratio_to_floor": ratio(s["median_ms"], floor_all["median_ms"]),
                "ratio_to_floor_blocks": block_ratios,
                "usual_requests_per_op": usual,
                "usual_ops": len(steady),
                "usual_median_ms": summary(steady)["median_ms"],
                "usual_ratio_to_floor": ratio(summary(steady)["median_ms"], floor_all["median_ms"]),
                "cpu_us_per_op": cpu[name] / len(flat) * 1e6,
                "requests_per_op": {k: v / len(flat) for k, v in sorted(requests[name].items())},
            }
        )
    ctx.log(f"uncontended: {len(names)} implementations x {ops * blocks} ops")
    return {"anchor": {"impl": FLOOR, **floor_all}, "rows": rows, "ops_per_impl": ops * blocks, "blocks": blocks}


# -- 2. contended handoff and throughput ----------------------------------------------------------


def handoff_floor(ctx: Ctx, clients: list, samples: int) -> list:
    """One client deletes a node a second client watches: delete call -> watch callback, in seconds.

    Pairs cycle over the pool so that every (deleter server, watcher server) combination occurs.
    """
    base = ctx.path("handoff_floor")
    clients[0].ensure_path(base)
    n = len(clients)
    pairs = [(a, b) for a in range(min(3, n)) for b in range(min(3, n), min(6, n))] or [(0, min(1, n - 1))]
    out = []
    for s in range(samples):
        a, b = pairs[s % len(pairs)]
        deleter, watcher = clients[a], clients[b]
        path = deleter.create(f"{base}/n-", ephemeral=True, sequence=True)
        fired = threading.Event()
        box: list = []

        def cb(event, box=box, fired=fired) -> None:
            box.append(time.perf_counter())
            fired.set()

        if watcher.exists(path, watch=cb) is None:
            continue
        t0 = time.perf_counter()
        deleter.delete(path)
        if fired.wait(10):
            out.append(box[0] - t0)
    return out


def contended_run(ctx: Ctx, name: str, clients: list, duration: float, hold: float = 0.0) -> dict:
    """Each client loops acquire -> (hold) -> release on one lock for ``duration`` s."""
    path = ctx.path(f"contended-{name}")
    locks = [LOCKS[name](c, path) for c in clients]
    st = SimpleNamespace(last=None, stop=False, t_start=None, t_end=None, errors=0)
    handoffs: list = []
    self_reacquire = [0]
    acquisitions = [0]
    per_thread = [0] * len(clients)
    go = threading.Event()

    def worker(i: int) -> None:
        lk = locks[i]
        go.wait()
        while not st.stop:
            ok = lk.acquire(timeout=60)
            t1 = time.perf_counter()
            if not ok:
                st.errors += 0 if st.stop else 1  # a cancel at the end of the run is no error
                continue
            prev = st.last
            if not st.stop and prev is not None and t1 >= st.t_start:
                acquisitions[0] += 1
                per_thread[i] += 1
                if prev[1] != i:
                    handoffs.append(t1 - prev[0])
                else:
                    self_reacquire[0] += 1
            if hold:
                time.sleep(hold)
            st.last = (time.perf_counter(), i)
            lk.release()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(clients))]
    for t in threads:
        t.start()
    before = ctx.counters.snapshot()
    st.t_start = time.perf_counter()
    go.set()
    time.sleep(duration)
    st.stop = True
    st.t_end = time.perf_counter()
    after = ctx.counters.snapshot()

    def cancel_all() -> None:
        for lk in locks:
            lk.cancel()

    ok = join_all(threads, 120, cancel_all)
    req, notes = delta(before, after)
    n_acq = max(acquisitions[0], 1)
    return {
        "impl": name,
        "sessions": len(clients),
        "handoffs": handoffs,
        "acquisitions": acquisitions[0],
        "throughput_per_s": acquisitions[0] / (st.t_end - st.t_start),
        "self_reacquire": self_reacquire[0],
        "requests_per_acquire": {k: v / n_acq for k, v in sorted(req.items())},
        "requests_total_per_acquire": sum(req.values()) / n_acq,
        "notifications_per_release": notes / n_acq,
        "min_max_per_session": [min(per_thread), max(per_thread)],
        "errors": st.errors,
        "clean_exit": ok,
    }


def contended(ctx: Ctx, sizes: list, reps: int, duration: float, floor_samples: int) -> dict:
    """Handoff and throughput at N sessions; implementations (and the handoff floor) alternate run by run."""
    impls = [FAIR, EXCL, K_LOCK]
    clients = ctx.pool.grow(max(max(sizes), 6))
    runs: list = []
    floor: list = []
    floor_by_rep: list = [[] for _ in range(reps)]
    for rep in range(reps):
        for j, n in enumerate(sizes):
            for name in rotate(impls + [HANDOFF_FLOOR], rep + j):
                if name == HANDOFF_FLOOR:
                    f = handoff_floor(ctx, clients, floor_samples)
                    floor.extend(f)
                    floor_by_rep[rep].extend(f)
                    continue
                r = contended_run(ctx, name, clients[:n], duration)
                r["rep"] = rep
                runs.append(r)
                ctx.log(
                    f"contended rep {rep} N={n} {name}: {r['acquisitions']} acquisitions, "
                    f"handoff median {summary(r['handoffs'])['median_ms'] or 0:.2f} ms"
                )
    floor_s = summary(floor)
    rows = []
    for n in sizes:
        kazoo_med = summary([h for r in runs if r["impl"] == K_LOCK and r["sessions"] == n for h in r["handoffs"]])
        for name in impls:
            mine = [r for r in runs if r["impl"] == name and r["sessions"] == n]
            hs = summary([h for r in mine for h in r["handoffs"]])
            per_rep = []
            for rep in range(reps):
                a = [r for r in mine if r["rep"] == rep]
                k = [r for r in runs if r["impl"] == K_LOCK and r["sessions"] == n and r["rep"] == rep]
                if a and k:
                    per_rep.append(ratio(median(a[0]["handoffs"]), median(k[0]["handoffs"])))
            rows.append(
                {
                    "impl": name,
                    "sessions": n,
                    "handoff": hs,
                    "ratio_to_handoff_floor": ratio(hs["median_ms"], floor_s["median_ms"]),
                    "ratio_to_kazoo_lock": ratio(hs["median_ms"], kazoo_med["median_ms"]),
                    "ratio_to_kazoo_lock_by_rep": per_rep,
                    "throughput_per_s": median([r["throughput_per_s"] for r in mine]),
                    "throughput_by_rep": [r["throughput_per_s"] for r in mine],
                    "acquisitions": sum(r["acquisitions"] for r in mine),
                    "self_reacquire": sum(r["self_reacquire"] for r in mine),
                    **_over_runs(mine, "acquire"),
                }
            )
    return {
        "mode": "threads in one process, one KazooClient session each",
        "duration_s": duration,
        "reps": reps,
        "anchor": {"impl": HANDOFF_FLOOR, **floor_s},
        "anchor_by_rep": [summary(f)["median_ms"] for f in floor_by_rep],
        "rows": rows,
    }


# -- 3. herd ---------------------------------------------------------------------------------------


def herd_run(ctx: Ctx, name: str, clients: list, handoffs: int, warmup: int, max_seconds: float = 600.0) -> dict:
    """W = len(clients) - 1 waiters behind one holder; every acquirer re-queues after handing off.

    After ``warmup`` acquisitions (queue locks: every participant re-queued once, so each waiter's
    view of the queue is the steady-state one), each release waits until all W others are inside
    acquire and no request is in flight; the requests and notifications counted between two such
    quiet points belong to one release + hand-off + re-queue cycle.

    ``max_seconds`` bounds the run (so ``make bench`` stays within its time): past 60 % of it a warm-up
    is cut short, past all of it measuring stops once one cycle is recorded; both are reported.
    """
    w = len(clients) - 1
    path = ctx.path(f"herd-{name}")
    locks = [LOCKS[name](c, path) for c in clients]
    cond = threading.Condition()
    st = SimpleNamespace(
        inside=0, last=None, count=0, stop=False, unsettled=0, errors=0, warmup=warmup, warmup_cut=False, cut=False
    )
    latencies: list = []
    cycles: list = []
    t0 = time.monotonic()
    watches_before = server_watches(ctx.pool.servers)

    def quiet_snapshot():
        with cond:
            cond.wait_for(lambda: st.inside >= w or st.stop, timeout=120)
        if not ctx.pool.quiet(clients, settle=0.03, timeout=120):
            st.unsettled += 1
        return ctx.counters.snapshot()

    def worker(i: int) -> None:
        lk = locks[i]
        while True:
            with cond:
                if st.stop:
                    return
                st.inside += 1
                cond.notify_all()
            ok = lk.acquire(timeout=300)
            t1 = time.perf_counter()
            with cond:
                st.inside -= 1
                if not ok:
                    if not st.stop:
                        st.errors += 1
                    return
                prev = st.last
                st.count += 1
                n = st.count
                cond.notify_all()
            if st.stop:
                lk.release()
                return
            snap = None
            elapsed = time.monotonic() - t0
            if n < st.warmup and elapsed > 0.6 * max_seconds:
                st.warmup, st.warmup_cut = n, True
            if n >= st.warmup:
                if prev is not None and prev[2] is not None and prev[1] != i:
                    latencies.append(t1 - prev[0])
                snap = quiet_snapshot()
                if prev is not None and prev[2] is not None:
                    req, notes = delta(prev[2], snap)
                    cycles.append({"requests": req, "notifications": notes})
            if elapsed > max_seconds and cycles and n < st.warmup + handoffs + 1:
                st.cut = True
            if n >= st.warmup + handoffs + 1 or st.cut:
                with cond:
                    st.stop = True
                    cond.notify_all()
                lk.release()
                return
            with cond:
                st.last = (time.perf_counter(), i, snap)
                seen = st.count
            lk.release()
            with cond:  # re-queue only after the hand-off, so the releaser never barges
                cond.wait_for(lambda seen=seen: st.count != seen or st.stop, timeout=300)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(clients))]
    for t in threads:
        t.start()
    with cond:
        cond.wait_for(lambda: st.stop, timeout=900)
        st.stop = True
        cond.notify_all()

    def cancel_all() -> None:
        for lk in locks:
            lk.cancel()

    ok = join_all(threads, 300, cancel_all)
    ctx.pool.quiet(clients, settle=0.05, timeout=30)
    watches_after = server_watches(ctx.pool.servers)
    return {
        "impl": name,
        "waiters": w,
        "latencies": latencies,
        **_per_cycle(cycles),
        "server_watches_left": (
            None if watches_before is None or watches_after is None else watches_after - watches_before
        ),
        "unsettled": st.unsettled,
        "warmup_cut": st.warmup_cut,
        "cut_short": st.cut,
        "errors": st.errors,
        "clean_exit": ok,
        "seconds": time.monotonic() - t0,
    }


def _herd_cost(w: int, name: str) -> float:
    """Relative expected duration of a herd run (kazoo's Lock costs the same at any W; the others grow)."""
    return (w + 20) * (0.2 if name == K_LOCK else 1.0)


def herd(ctx: Ctx, sizes: list, handoffs: dict, reps: dict) -> dict:
    """Watch notifications and requests per release, and handoff latency, against the number of waiters."""
    impls = [EXCL, FAIR, K_LOCK]
    clients = ctx.pool.grow(max(sizes) + 1)
    runs = []
    plan = [
        (w, rep, name) for j, w in enumerate(sizes) for rep in range(reps.get(w, 1)) for name in rotate(impls, rep + j)
    ]
    for k, (w, rep, name) in enumerate(plan):
        warmup = 1 if name == EXCL else w + 2
        # share what is left of the time budget among the runs left, by their expected cost
        left = None if ctx.deadline is None else ctx.deadline - time.monotonic()
        weight = sum(_herd_cost(x[0], x[2]) for x in plan[k:])
        allowed = 600.0 if left is None else max(15.0, left * _herd_cost(w, name) / weight)
        r = herd_run(ctx, name, clients[: w + 1], handoffs.get(w, 5), warmup, allowed)
        r["rep"] = rep
        runs.append(r)
        ctx.log(
            f"herd W={w} rep {rep} {name}: {r['notifications_per_release']:.1f} notifications/release, "
            f"{r['requests_total_per_cycle']:.1f} requests/cycle, handoff median "
            f"{summary(r['latencies'])['median_ms'] or 0:.2f} ms ({r['seconds']:.1f} s of {allowed:.0f} allowed"
            + (", warm-up cut short" if r["warmup_cut"] else "")
            + (", measuring cut short" if r["cut_short"] else "")
            + ")"
        )
    rows = []
    for name in impls:
        base = None
        for w in sizes:
            mine = [r for r in runs if r["impl"] == name and r["waiters"] == w]
            lat = summary([x for r in mine for x in r["latencies"]])
            if base is None:
                base = lat["median_ms"]
            rows.append(
                {
                    "impl": name,
                    "waiters": w,
                    "handoff": lat,
                    "ratio_to_smallest_w": ratio(lat["median_ms"], base),
                    "cycles": sum(r["cycles"] for r in mine),
                    **_over_runs(mine, "cycle"),
                    "notifications_min": min(
                        (r["notifications_min"] for r in mine if r["notifications_min"] is not None), default=None
                    ),
                    "notifications_max": max(
                        (r["notifications_max"] for r in mine if r["notifications_max"] is not None), default=None
                    ),
                    "server_watches_left": [r["server_watches_left"] for r in mine],
                    "unsettled": sum(r["unsettled"] for r in mine),
                    "warmup_cut": sum(r["warmup_cut"] for r in mine),
                    "cut_short": sum(r["cut_short"] for r in mine),
                    "seconds": sum(r["seconds"] for r in mine),
                }
            )
    return {"mode": "threads in one process, one KazooClient session each", "sizes": sizes, "rows": rows}


# -- 4. read/write -----------------------------------------------------------------------------------


def readers_peak(ctx: Ctx, name: str, clients: list, timeout: float = 30.0) -> dict:
    """All readers acquire at once and hold until every one holds (or ``timeout``): peak concurrent holders."""
    path = ctx.path(f"peak-{name}")
    locks = [LOCKS[name](c, path) for c in clients]
    cond = threading.Condition()
    st = SimpleNamespace(holders=0, peak=0, all_at=None, failed=0)
    go = threading.Event()
    t0 = [0.0]

    def worker(i: int) -> None:
        go.wait()
        if not locks[i].acquire(timeout=timeout):
            st.failed += 1
            return
        with cond:
            st.holders += 1
            st.peak = max(st.peak, st.holders)
            if st.holders == len(clients):
                st.all_at = time.perf_counter() - t0[0]
            cond.notify_all()
            cond.wait_for(lambda: st.holders == len(clients), timeout=timeout)
        locks[i].release()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(clients))]
    for t in threads:
        t.start()
    t0[0] = time.perf_counter()
    go.set()
    join_all(threads, timeout + 30, lambda: [lk.cancel() for lk in locks], grace=timeout)
    return {
        "impl": name,
        "readers": len(clients),
        "peak": st.peak,
        "failed": st.failed,
        "all_held_after_ms": None if st.all_at is None else st.all_at * 1e3,
    }


def rw_mixed(ctx: Ctx, pair: tuple, clients: list, duration: float, hold: float, think: float, seed: int) -> dict:
    """Each session picks read (90 %) or write (10 %), waits for it, holds ``hold`` s, thinks ~``think`` s."""
    read_name, write_name = pair
    path = ctx.path(f"mixed-{read_name}")
    sides = [(LOCKS[read_name](c, path), LOCKS[write_name](c, path)) for c in clients]
    waits: dict = {"read": [], "write": []}
    st = SimpleNamespace(stop=False, errors=0)
    go = threading.Event()

    def worker(i: int) -> None:
        rnd = random.Random(seed * 1000 + i)
        go.wait()
        while not st.stop:
            kind = "read" if rnd.random() < 0.9 else "write"
            lk = sides[i][0 if kind == "read" else 1]
            t0 = time.perf_counter()
            if not lk.acquire(timeout=60):
                st.errors += 0 if st.stop else 1
                continue
            if not st.stop:
                waits[kind].append(time.perf_counter() - t0)
            time.sleep(hold)
            lk.release()
            time.sleep(rnd.expovariate(1.0 / think) if think else 0)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(clients))]
    for t in threads:
        t.start()
    before = ctx.counters.snapshot()
    go.set()
    time.sleep(duration)
    st.stop = True
    req, notes = delta(before, ctx.counters.snapshot())
    ok = join_all(threads, 120, lambda: [lk.cancel() for s in sides for lk in s])
    n = max(len(waits["read"]) + len(waits["write"]), 1)
    return {
        "impl": read_name.split(" ")[0],
        "waits": waits,
        "errors": st.errors,
        "clean_exit": ok,
        "requests": sum(req.values()) / n,
        "notifications": notes / n,
    }


def writer_starvation(
    ctx: Ctx,
    pair: tuple,
    readers: list,
    writer,
    duration: float,
    reader_hold: float,
    writer_every: float,
    timeout: float,
) -> dict:
    """Readers re-acquire as soon as they release (some reader always holds); a writer asks every
    ``writer_every`` s: its wait, against the reader hold time. A starving lock would time out."""
    read_name, write_name = pair
    path = ctx.path(f"starve-{read_name}")
    rlocks = [LOCKS[read_name](c, path) for c in readers]
    wlock = LOCKS[write_name](writer, path)
    st = SimpleNamespace(stop=False, reads=0)
    waits: list = []
    timeouts = [0]

    def reader(i: int) -> None:
        time.sleep(reader_hold * i / len(readers))  # staggered, so holds overlap
        while not st.stop:
            if rlocks[i].acquire(timeout=60):
                st.reads += 1
                time.sleep(reader_hold)
                rlocks[i].release()

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(len(readers))]
    for t in threads:
        t.start()
    time.sleep(reader_hold * 1.5)
    end = time.monotonic() + duration
    while time.monotonic() < end:
        t0 = time.perf_counter()
        if wlock.acquire(timeout=timeout):
            waits.append(time.perf_counter() - t0)
            wlock.release()
        else:
            timeouts[0] += 1
        time.sleep(writer_every)
    st.stop = True
    ok = join_all(threads, 120, lambda: [lk.cancel() for lk in rlocks])
    return {
        "impl": read_name.split(" ")[0],
        "waits": waits,
        "timeouts": timeouts[0],
        "reads": st.reads,
        "clean_exit": ok,
    }


def read_write(
    ctx: Ctx,
    peak_readers: int,
    peak_reps: int,
    mixed_sessions: int,
    mixed_duration: float,
    mixed_reps: int,
    starve_readers: int,
    starve_duration: float,
    reader_hold: float,
) -> dict:
    pairs = [(RW_READ, RW_WRITE), (K_READ, K_WRITE)]
    clients = ctx.pool.grow(max(peak_readers, mixed_sessions, starve_readers + 1))
    peaks = []
    for rep in range(peak_reps):
        for name in rotate([RW_READ, K_READ], rep):
            r = readers_peak(ctx, name, clients[:peak_readers])
            r["rep"] = rep
            peaks.append(r)
    ctx.log(f"readers peak: {[(p['impl'], p['peak']) for p in peaks]}")
    mixed = []
    for rep in range(mixed_reps):
        for pair in rotate(pairs, rep):
            mixed.append(rw_mixed(ctx, pair, clients[:mixed_sessions], mixed_duration, 0.002, 0.005, rep))
    starve = []
    for rep in range(mixed_reps):
        for pair in rotate(pairs, rep):
            starve.append(
                writer_starvation(
                    ctx,
                    pair,
                    clients[:starve_readers],
                    clients[starve_readers],
                    starve_duration,
                    reader_hold,
                    reader_hold * 2,
                    max(10.0, starve_duration * 4),
                )
            )
    ctx.log("read/write mixes done")
    out_peak = []
    for name in (RW_READ, K_READ):
        mine = [p for p in peaks if p["impl"] == name]
        out_peak.append(
            {
                "impl": name,
                "readers": peak_readers,
                "peak": min(p["peak"] for p in mine),
                "peak_by_rep": [p["peak"] for p in mine],
                "failed": sum(p["failed"] for p in mine),
                "all_held_after_ms": median([p["all_held_after_ms"] for p in mine]),
            }
        )
    out_mixed, out_starve = [], []
    for impl in ("zkrecipes", "kazoo"):
        mine = [m for m in mixed if m["impl"] == impl]
        out_mixed.append(
            {
                "impl": impl,
                "sessions": mixed_sessions,
                "read_wait": summary([x for m in mine for x in m["waits"]["read"]]),
                "write_wait": summary([x for m in mine for x in m["waits"]["write"]]),
                "requests_per_acquire": sum(m["requests"] for m in mine) / len(mine),
                "notifications_per_acquire": sum(m["notifications"] for m in mine) / len(mine),
                "errors": sum(m["errors"] for m in mine),
                "clean_exit": all(m["clean_exit"] for m in mine),
            }
        )
        mine = [s for s in starve if s["impl"] == impl]
        out_starve.append(
            {
                "impl": impl,
                "readers": starve_readers,
                "writer_wait": summary([x for s in mine for x in s["waits"]]),
                "writer_timeouts": sum(s["timeouts"] for s in mine),
                "reads": sum(s["reads"] for s in mine),
                "clean_exit": all(s["clean_exit"] for s in mine),
            }
        )
    return {
        "peak": out_peak,
        "mixed": out_mixed,
        "mixed_setup": {
            "read_fraction": 0.9,
            "hold_ms": 2,
            "think_mean_ms": 5,
            "duration_s": mixed_duration,
            "reps": mixed_reps,
        },
        "starvation": out_starve,
        "starvation_setup": {
            "reader_hold_ms": reader_hold * 1e3,
            "writer_every_ms": reader_hold * 2e3,
            "duration_s": starve_duration,
            "reps": mixed_reps,
        },
    }


# -- 5. one process, one client, many threads ---------------------------------------------------------


def one_client_run(ctx: Ctx, name: str, client, threads_n: int, duration: float, think: float) -> dict:
    path = ctx.path(f"oneclient-{name}")
    locks = [LOCKS[name](client, path) for _ in range(threads_n)]
    st = SimpleNamespace(last=None, stop=False, t_start=0.0, errors=0)
    handoffs: list = []
    per_thread = [0] * threads_n
    go = threading.Event()

    def worker(i: int) -> None:
        go.wait()
        while not st.stop:
            if not locks[i].acquire(timeout=60):
                st.errors += 0 if st.stop else 1
                continue
            t1 = time.perf_counter()
            prev = st.last
            if not st.stop:
                per_thread[i] += 1
                if prev is not None and prev[1] != i:
                    handoffs.append(t1 - prev[0])
            st.last = (time.perf_counter(), i)
            locks[i].release()
            if think:
                time.sleep(think)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads_n)]
    for t in threads:
        t.start()
    before = ctx.counters.snapshot()
    t0 = time.perf_counter()
    go.set()
    time.sleep(duration)
    st.stop = True
    elapsed = time.perf_counter() - t0
    req, notes = delta(before, ctx.counters.snapshot())
    ok = join_all(threads, 120, lambda: [lk.cancel() for lk in locks])
    n = max(sum(per_thread), 1)
    return {
        "impl": name,
        "think": think,
        "handoffs": handoffs,
        "acquisitions": sum(per_thread),
        "throughput_per_s": sum(per_thread) / elapsed,
        "requests_per_acquire": {k: v / n for k, v in req.items()},
        "notifications_per_release": notes / n,
        "min_max_per_thread": [min(per_thread), max(per_thread)],
        "errors": st.errors,
        "clean_exit": ok,
    }


def one_client(ctx: Ctx, threads_n: int, duration: float, reps: int, thinks: tuple = (0.0, 0.001)) -> dict:
    """``threads_n`` threads of this process on one session and one lock: zkrecipes queues one node per
    process (local gate), kazoo one node per thread. ``think``: sleep after each release."""
    impls = [FAIR, EXCL, K_LOCK]
    client = ctx.pool.clients[0]
    runs = []
    for rep in range(reps):
        for think in thinks:
            for name in rotate(impls, rep):
                runs.append(one_client_run(ctx, name, client, threads_n, duration, think))
    ctx.log("one client, many threads done")
    rows = []
    for think in thinks:
        for name in impls:
            mine = [r for r in runs if r["impl"] == name and r["think"] == think]
            rows.append(
                {
                    "impl": name,
                    "threads": threads_n,
                    "think_ms": think * 1e3,
                    "handoff": summary([h for r in mine for h in r["handoffs"]]),
                    "throughput_per_s": median([r["throughput_per_s"] for r in mine]),
                    "throughput_by_rep": [r["throughput_per_s"] for r in mine],
                    "acquisitions": sum(r["acquisitions"] for r in mine),
                    **_over_runs(mine, "acquire"),
                    "min_max_per_thread": [
                        min(r["min_max_per_thread"][0] for r in mine),
                        max(r["min_max_per_thread"][1] for r in mine),
                    ],
                }
            )
    return {
        "mode": f"{threads_n} threads sharing one KazooClient session",
        "duration_s": duration,
        "reps": reps,
        "rows": rows,
    }


# -- profile -----------------------------------------------------------------------------------------


def profile_fairlock(ctx: Ctx, ops: int) -> dict:
    """cProfile (CPU time of the calling thread) of uncontended FairLock acquire+release: per-op microseconds."""
    client = ctx.pool.clients[0]
    lock = FairLock(client, ctx.path("profile"))
    for _ in range(3):
        lock.acquire()
        lock.release()
    prof = cProfile.Profile(time.thread_time)
    c0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(ops):
        prof.enable()
        lock.acquire()
        lock.release()
        prof.disable()
    wall = (time.perf_counter() - t0) / ops
    cpu = (time.process_time() - c0) / ops
    stats = pstats.Stats(prof)
    rows = []
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        short = filename
        for marker in ("site-packages/", "zkrecipes/", "lib/python3"):
            if marker in filename:
                short = (
                    filename.split(marker, 1)[1]
                    if marker != "zkrecipes/"
                    else "zkrecipes/" + filename.split(marker, 1)[1]
                )
                break
        rows.append(
            {
                "function": f"{short}:{line}({func})",
                "calls_per_op": nc / ops,
                "self_us_per_op": tt / ops * 1e6,
                "cumulative_us_per_op": ct / ops * 1e6,
            }
        )
    rows.sort(key=lambda r: -r["cumulative_us_per_op"])
    total = sum(r["self_us_per_op"] for r in rows)
    micro = _micro_costs(client)
    return {
        "ops": ops,
        "timer": "time.thread_time (CPU of the calling thread; profiler overhead included)",
        "profiled_wall_ms_per_op": wall * 1e3,
        "profiled_process_cpu_us_per_op": cpu * 1e6,
        "thread_cpu_us_per_op": total,
        "top": rows[:30],
        "micro_us": micro,
    }


def _micro_costs(client) -> dict:
    """Unprofiled CPU cost (µs per call, best of 5) of pure-Python steps of an acquire+release."""
    import timeit

    from zkrecipes import naming, retry
    from zkrecipes._drive import Driver
    from zkrecipes.session import SessionWatcher

    steps = {
        "uuid.uuid4().hex": lambda: uuid.uuid4().hex,
        "naming.node_data (JSON)": lambda: naming.node_data(None, "0" * 32, "benchhost"),
        "retry.call(trivial fn) (tenacity set-up)": lambda: retry.call(lambda: None),
        "Driver(...) + close() (an uncontended acquire's driver)": lambda: Driver(
            client, None, lambda: False, None
        ).close(),
        "SessionWatcher subscribe + unsubscribe": lambda: _sub_unsub(SessionWatcher.of(client)),
        "kazoo async_result()": lambda: client.handler.async_result(),
        "threading.Event()": threading.Event,
    }
    out = {}
    for label, fn in steps.items():
        try:
            out[label] = min(timeit.repeat(fn, number=2000, repeat=5)) / 2000 * 1e6
        except Exception as exc:  # internals change under the bench: report, do not fail
            out[label] = f"n/a ({type(exc).__name__})"
    return out


def _sub_unsub(watcher) -> None:
    def fn(event):
        return None

    watcher.subscribe(fn)
    watcher.unsubscribe(fn)


def cleanup(ctx: Ctx) -> None:
    """Delete the bench's tree (only needed on an external ensemble)."""
    client = ctx.pool.clients[0] if ctx.pool.clients else None
    if client is None:
        return
    try:
        client.delete(ctx.root, recursive=True)
    except NoNodeError:
        pass


# -- 6. semaphore (issue 14) ----------------------------------------------------------------------
SEM = "zkrecipes Semaphore"
K_SEM = "kazoo Semaphore"


def _kazoo_semaphore(client, path: str, n: int) -> Adapter:
    from kazoo.recipe.lock import Semaphore as KazooSemaphore

    return Adapter(KazooSemaphore(client, path, max_leases=n), True)


SEMAPHORES: dict = {
    SEM: lambda c, p, n: Adapter(Semaphore(c, p, n), False),
    K_SEM: _kazoo_semaphore,
}


def semaphore_run(ctx: Ctx, name: str, n: int, clients: list, handoffs: int, warmup: int, pick: str) -> dict:
    """``n`` holders and W = len(clients) - n waiters, each re-queueing after its release. Each cycle, at a
    quiet point, one holder releases: the ``"oldest"`` (FIFO use) or the ``"newest"`` (the worst case for
    zkrecipes: the most waiters watch it). The handoff is its release() call -> the next grant; the
    requests and notifications counted until the next quiet point are one release + handoff + re-queue."""
    w = len(clients) - n
    path = ctx.path(f"sem-{name}-{n}-{w}-{pick}")
    sems = [SEMAPHORES[name](c, path, n) for c in clients]
    cond = threading.Condition()
    st = SimpleNamespace(holders=collections.deque(), grants=[], stop=False, released_at=None, errors=0, peak=0)
    go = [threading.Event() for _ in clients]

    def worker(i: int) -> None:
        while not st.stop:
            ok = sems[i].acquire(timeout=300)
            t = time.perf_counter()
            with cond:
                if not ok:
                    st.errors += 0 if st.stop else 1
                    return
                st.holders.append(i)
                st.peak = max(st.peak, len(st.holders))
                st.grants.append(t)
                cond.notify_all()
            go[i].wait()
            go[i].clear()
            with cond:
                st.holders.remove(i)
                st.released_at = time.perf_counter()
            sems[i].release()
            if st.stop:
                return

    threads = []
    for i in range(len(clients)):  # queue one by one: the steady state's order from the start
        threads.append(threading.Thread(target=worker, args=(i,), daemon=True))
        threads[-1].start()
        ctx.pool.quiet(clients, settle=0.005, timeout=30)
    latencies: list = []
    cycles: list = []
    t0 = time.monotonic()
    for k in range(warmup + handoffs):
        with cond:
            if not cond.wait_for(lambda: len(st.holders) == n, timeout=120):
                st.errors += 1
                break
            victim, seen = st.holders[0 if pick == "oldest" else -1], len(st.grants)
        ctx.pool.quiet(clients, settle=0.03, timeout=120)
        before = ctx.counters.snapshot()
        go[victim].set()
        with cond:
            if not cond.wait_for(lambda seen=seen: len(st.grants) > seen, timeout=120):
                st.errors += 1
                break
            handoff = st.grants[seen] - st.released_at
        with cond:
            cond.wait_for(lambda: len(st.holders) == n, timeout=120)
        ctx.pool.quiet(clients, settle=0.03, timeout=120)
        if k >= warmup:
            latencies.append(handoff)
            req, notes = delta(before, ctx.counters.snapshot())
            cycles.append({"requests": req, "notifications": notes})
    st.stop = True
    deadline = time.monotonic() + 120
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        for i, sem in enumerate(sems):  # holders release, waiters give up (again, for one that just queued)
            go[i].set()
            sem.cancel()
        for t in threads:
            t.join(0.05)
    ok = not any(t.is_alive() for t in threads)
    return {
        "impl": name,
        "max_leases": n,
        "waiters": w,
        "releaser": pick,
        "handoff_s": latencies,
        **_per_cycle(cycles),
        "peak_holders": st.peak,
        "errors": st.errors,
        "clean_exit": ok,
        "seconds": time.monotonic() - t0,
    }


def semaphore(ctx: Ctx, cases: list, handoffs: int, reps: int = 1) -> dict:
    """Semaphore handoff and watch notifications per release, zkrecipes against kazoo's, alternating run by
    run; ``cases`` are (N, W, releaser) with releaser ``"oldest"`` or ``"newest"``."""
    clients = ctx.pool.grow(max(n + w for n, w, _ in cases))
    runs = []
    for rep in range(reps):
        for j, (n, w, pick) in enumerate(cases):
            for name in rotate([SEM, K_SEM], j + rep):
                r = semaphore_run(ctx, name, n, clients[: n + w], handoffs, warmup=n + w, pick=pick)
                r["latencies"] = r.pop("handoff_s")
                runs.append(r)
                ctx.log(
                    f"semaphore N={n} W={w} {pick} releases, {name} (rep {rep}): "
                    f"{r['notifications_per_release']:.1f} notifications/release, handoff median "
                    f"{summary(r['latencies'])['median_ms'] or 0:.2f} ms, peak holders {r['peak_holders']}"
                )
    rows = []
    for n, w, pick in cases:
        base = None
        for name in (K_SEM, SEM):
            mine = [r for r in runs if (r["impl"], r["max_leases"], r["waiters"], r["releaser"]) == (name, n, w, pick)]
            lat = summary([x for r in mine for x in r["latencies"]])
            if name == K_SEM:
                base = lat["median_ms"]
            rows.append(
                {
                    "impl": name,
                    "max_leases": n,
                    "waiters": w,
                    "releaser": pick,
                    "handoff": lat,
                    "ratio_to_kazoo": ratio(lat["median_ms"], base),
                    "cycles": sum(r["cycles"] for r in mine),
                    **_over_runs(mine, "cycle"),
                    "notifications_min": min(r["notifications_min"] for r in mine),
                    "notifications_max": max(r["notifications_max"] for r in mine),
                    "peak_holders": max(r["peak_holders"] for r in mine),
                }
            )
    return {"mode": "threads in one process, one KazooClient session each", "reps": reps, "rows": rows}


# -- 7. non-blocking tries (issue 38, item 6) -----------------------------------------------------
WRITE_REQUESTS = ("create", "create_container", "delete", "set_data", "multi")  # what goes through the quorum


TRY_LOCKS: dict = {  # impl -> (the lock that tries, the lock another session holds it with meanwhile)
    FAIR: (FairLock, FairLock),
    EXCL: (ExclusiveLock, ExclusiveLock),
    RW_WRITE: (lambda c, p: ReadWriteLock(c, p).write(), lambda c, p: ReadWriteLock(c, p).read()),  # a reader holds
    RW_READ: (lambda c, p: ReadWriteLock(c, p).read(), lambda c, p: ReadWriteLock(c, p).write()),  # a writer holds
    SEM: (lambda c, p: Semaphore(c, p, 1), lambda c, p: Semaphore(c, p, 1)),
    K_LOCK: (KazooLock, KazooLock),
    K_WRITE: (KazooWriteLock, KazooReadLock),
    K_READ: (KazooReadLock, KazooWriteLock),
}


def tries(ctx: Ctx, n: int) -> dict:
    """``acquire(blocking=False)`` on one client, implementations alternating try by try: on a lock another
    session holds (each try fails: requests and writes per failed try), and on a free lock (try + release,
    alternating with a blocking acquire + release of the same object: what the look before the create
    costs). Each lock's parent is made beforehand, persistent, so no parent's re-creation is counted."""
    trier, holder_client = ctx.pool.grow(2)
    locks, holders = {}, {}
    for name, (make, make_holder) in TRY_LOCKS.items():  # one object each, as a fleet of tries would keep
        path = ctx.path(f"try {name}")
        trier.ensure_path(path)
        locks[name], holders[name] = make(trier, path), make_holder(holder_client, path)
    names = list(locks)

    def run(name: str, what: str) -> tuple:
        lock = locks[name]
        before = ctx.counters.snapshot()
        t0 = time.perf_counter()
        got = lock.acquire(timeout=30) if what == "blocking" else lock.acquire(blocking=False)
        dt = time.perf_counter() - t0
        if got:
            lock.release()
        req = delta(before, ctx.counters.snapshot())[0]
        if got != (what != "held"):
            raise RuntimeError(f"{name}: a {what} acquire returned {got}")
        return dt, req

    samples = {(name, what): [] for name in names for what in ("free", "blocking", "held")}
    requests = {key: collections.Counter() for key in samples}
    for phase in (("free", "blocking"), ("held",)):
        if phase == ("held",):
            for name in names:
                if not holders[name].acquire(timeout=30):
                    raise RuntimeError(f"{name}: the holder could not acquire")
        for name in names:  # warm-up: code paths, connections
            for what in phase:
                run(name, what)
        for i in range(n):
            for name in rotate(names, i):
                for what in rotate(list(phase), i):
                    dt, req = run(name, what)
                    samples[name, what].append(dt)
                    requests[name, what].update(req)
    for name in names:
        holders[name].release()
    rows = []
    for name in names:
        row: dict = {"impl": name}
        for what in ("free", "blocking", "held"):
            req = {k: v / n for k, v in sorted(requests[name, what].items())}
            row[what] = {
                **summary(samples[name, what]),
                "requests_per_op": req,
                "requests_total_per_op": sum(req.values()),
                "writes_per_op": sum(v for k, v in req.items() if k in WRITE_REQUESTS),
            }
        rows.append(row)
    ctx.log(f"tries: {len(names)} implementations x {n} tries, free (beside blocking) and held")
    return {"tries_per_impl": n, "rows": rows}
