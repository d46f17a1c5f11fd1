"""The lab's ``multilock`` trial: two fleets take the same two locks, listed in opposite orders.

Each worker process holds two :class:`~zkrecipes.FairLock` objects on one session, on the paths of
``ml-a`` and ``ml-b`` (each with its own fenced register), and takes both at once with
:class:`~zkrecipes.MultiLock`: even slots list them ``[a, b]``, odd slots ``[b, a]`` -- the two fleets
that deadlock when each takes its list in order. A hold does the zk trial's read-modify-write on both
registers, each fenced by its own lock's token (``multi.tokens``): ``multi.check()``, read both, hold,
``multi.check()``, write both; then ``multi.release()``. The histories record the grant, notices and
release of each lock as a hold of ``ml-a`` and one of ``ml-b``, so :func:`lab.check.check_trial` judges
each path as it judges a FairLock (overlaps, lost increments, grants out of order, notices, orphans).

Deadlocks are counted from the histories (:func:`deadlocks`): every lock's listener records its states
(``waiting``, ``held``, ``idle``, ``lost``) with the worker's pid, and the checker replays them as a
wait-for graph (a process waiting for a lock points to the process holding it). A *deadlock* is a cycle
in that graph, counted once per cycle formed; an *order violation* is a process waiting for ``ml-a``
while it holds ``ml-b`` (the global order, by path, puts ``a`` first whatever the list says). A stall that
forms no cycle is still recorded by the nemesis (``stalls``, with queue snapshots) and, if it outlasts the
run, is a hung worker.
"""

from __future__ import annotations

import glob
import os
import random
import time
from collections import defaultdict

from .check import _load_jsonl, check_trial

IMPLS = ("ml-a", "ml-b")
ORDER = {"ml-a": 0, "ml-b": 1}  # the global order (by path): what every MultiLock takes first
HOLDING, WAITING = ("held",), ("waiting",)
GONE = ("idle", "lost")  # a lock not held and not waited for
GAP = 0.03  # s at least between a hold's register operations (a pause must not freeze one half done)


def run_worker(w) -> None:
    """A ``multilock`` worker: one MultiLock over ``ml-a`` and ``ml-b``, listed per the slot's fleet."""
    from zkrecipes import FairLock, LockLost, MultiLock

    from .fenced import FencedRegister, StaleToken
    from .worker_base import _sid

    client = w.connect()
    root = w.cfg["root"]
    paths = {impl: f"{root}/{impl}" for impl in IMPLS}
    locks = {impl: FairLock(client, paths[impl], identifier=w.ident) for impl in IMPLS}
    current: dict = {}
    for impl, lock in locks.items():
        def on_state(_obj, state: str, impl=impl) -> None:
            w.rec("state", impl=impl, hold=current.get("hold"), req=current.get("req"), state=state)

        lock.add_listener(on_state)
        w.cancels.append(lock.cancel)
    listed = list(IMPLS) if w.slot % 2 == 0 else list(reversed(IMPLS))  # the two fleets
    multi = MultiLock([locks[i] for i in listed])
    regs = {impl: FencedRegister(w.cfg["registers"][impl]) for impl in IMPLS}
    rnd = random.Random(f"{w.cfg['seed']}-multilock")
    n = 0
    while not w.stopping():
        req = f"{w.slot}.{os.getpid()}.ml.{n}"
        n += 1
        current["req"] = req
        for impl in IMPLS:
            w.rec("acquire", impl=impl, req=req, mode="x", listed=listed)
        try:
            ok = multi.acquire(timeout=max(0.01, w.remaining()))
        except Exception as exc:
            for impl in IMPLS:
                w.rec("acquire_error", impl=impl, req=req, error=f"{type(exc).__name__}: {exc}")
            w.stop.wait(0.1)
            continue
        if not ok:
            for impl in IMPLS:
                w.rec("acquire_fail", impl=impl, req=req)
            continue
        current["hold"] = req
        tokens = {impl: locks[impl].token for impl in IMPLS}
        for impl in IMPLS:
            node = locks[impl].node
            # seq: the node's czxid, not its name's number -- ml-b's queue empties often, and its parent (a
            # container node) is then deleted and made again, its names starting at 0 again
            w.rec("grant", impl=impl, req=req, hold=req, mode="x", token=tokens[impl], node=node, seq=tokens[impl],
                  session=_sid(client))
        at = IMPLS[0]
        try:
            if None in tokens.values():
                for impl in IMPLS:
                    w.rec("no_token", impl=impl, hold=req)
                continue
            pause = w.hold_time(rnd)
            seen = {}
            for at in IMPLS:  # a check() and a pause after each read: the nemesis aims just after a read
                multi.check()
                seen[at] = regs[at].read(tokens[at], hold=req, checked=time.monotonic())
                time.sleep(pause / 2 + GAP)
            multi.check()
            checked = time.monotonic()
            for at in IMPLS:
                regs[at].write(tokens[at], seen[at] + 1, hold=req, checked=checked)
            for impl in IMPLS:
                w.rec("done", impl=impl, hold=req)
        except LockLost as exc:
            for impl in IMPLS:
                w.rec("check_fail", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
        except StaleToken as exc:
            w.rec("rejected", impl=at, hold=req, token=tokens[at], error=str(exc))
        finally:
            for impl in IMPLS:
                w.rec("release_start", impl=impl, hold=req)
            try:
                multi.release()
            except Exception as exc:
                for impl in IMPLS:
                    w.rec("release_error", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
            for impl in IMPLS:
                w.rec("release", impl=impl, hold=req, lost=locks[impl].lost.is_set())
            current.pop("hold", None)
    for reg in regs.values():
        reg.close()
    w.close_client(client, list(paths.values()))


# -- the checker side ------------------------------------------------------------------------------------
def _cycle(waits: dict, holders: dict) -> tuple:
    """A cycle in the wait-for graph (``waits``: pid -> locks it waits for; ``holders``: lock -> pids
    holding it) as a sorted tuple of pids, or ``()``."""
    edges = {p: {q for lock in locks for q in holders.get(lock, ()) if q != p} for p, locks in waits.items()}
    for start in edges:
        stack, seen = [(start, (start,))], set()
        while stack:
            p, trail = stack.pop()
            for q in edges.get(p, ()):
                if q == start:
                    return tuple(sorted(trail))
                if q not in seen:
                    seen.add(q)
                    stack.append((q, trail + (q,)))
    return ()


def deadlocks(events: list, ends: dict) -> dict:
    """Replay the lock states of ``events`` (every worker's, sorted by time) as a wait-for graph.

    ``ends``: pid -> when the process ended (its last event, or its kill): its locks are gone then.
    Returns ``{"deadlocks": cycles formed, "order_violations": waits for an earlier lock while holding a
    later one, "findings": [...]}``."""
    held: dict = defaultdict(set)  # lock -> pids holding it
    waits: dict = defaultdict(set)  # pid -> locks it waits for
    mine: dict = defaultdict(set)  # pid -> locks it holds
    timeline = [(e["t"], 0, e) for e in events if e["ev"] == "state" and e.get("impl") in ORDER]
    timeline += [(t, 1, {"pid": pid, "ev": "gone"}) for pid, t in ends.items()]
    timeline.sort(key=lambda x: (x[0], x[1]))
    n_dead = n_order = 0
    findings: list = []
    current: tuple = ()
    for t, _, e in timeline:
        pid = e["pid"]
        if e["ev"] == "gone":
            for lock in mine.pop(pid, set()):
                held[lock].discard(pid)
            waits.pop(pid, None)
        else:
            lock, state = e["impl"], e["state"]
            if state in WAITING:
                waits[pid].add(lock)
                if any(ORDER[h] > ORDER[lock] for h in mine[pid]):
                    n_order += 1
                    findings.append({"what": "order violation", "t": t, "pid": pid, "waits_for": lock,
                                     "holds": sorted(mine[pid])})
            elif state in HOLDING:
                waits[pid].discard(lock)
                mine[pid].add(lock)
                held[lock].add(pid)
            elif state in GONE:
                waits[pid].discard(lock)
                mine[pid].discard(lock)
                held[lock].discard(pid)
        cyc = _cycle({p: s for p, s in waits.items() if s}, held)
        if cyc and cyc != current:
            n_dead += 1
            findings.append({"what": "deadlock", "t": t, "pids": list(cyc)})
        current = cyc
    return {"deadlocks": n_dead, "order_violations": n_order, "findings": findings}


def check(path: str) -> dict:
    """Verdict of one ``multilock`` trial directory: :func:`lab.check.check_trial`'s, plus ``deadlocks`` and
    ``order_violations`` (:func:`deadlocks`) on both entries."""
    res = check_trial(path)
    events = []
    for p in sorted(glob.glob(os.path.join(path, "w-*.jsonl"))):
        events.extend(_load_jsonl(p))
    events.sort(key=lambda e: e["t"])
    ends: dict = {}
    for e in events:
        ends[e["pid"]] = e["t"]
    for f in res["faults"]:
        if f["kind"] == "holder-kill" and f.get("target_pid") in ends:
            ends[f["target_pid"]] = min(ends[f["target_pid"]], f["start"])
    found = deadlocks(events, ends)
    fleets = {tuple(e["listed"]) for e in events if e["ev"] == "acquire" and e.get("listed")}
    for impl in IMPLS:
        if impl not in res["impls"]:
            continue
        t = res["impls"][impl]["totals"]
        t["deadlocks"] = found["deadlocks"]
        t["order_violations"] = found["order_violations"]
        t["fleets"] = sorted(fleets)
        t["findings"] = sorted(t["findings"] + found["findings"], key=lambda f: f["t"])
        t["note"] = (f"{found['deadlocks']} deadlocks, {found['order_violations']} order violations "
                     f"({len(fleets)} fleets: " + ", ".join("[" + ", ".join(f) + "]" for f in sorted(fleets)) + ")")
        if len(fleets) < 2:
            t.setdefault("failed_checks", []).append("only one fleet's order was tried")
    return res
