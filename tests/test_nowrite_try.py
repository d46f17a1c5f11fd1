"""A try that writes nothing (issue 38, item 6), and who holds (``Contender.holding``, item 5), on a real
ensemble and both fronts.

``acquire(blocking=False)`` and ``acquire(timeout=0)`` on a lock whose queue already shows it held return
False after one listing: no create, no delete (the parent's ``cversion``, which counts its children's
creates and deletes, does not move), no node left. A free lock's try creates as before; many tries at
once never hold together and leave no node; a path with another recipe's nodes is still refused.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, List

import pytest
from lockhelpers import Acquirer, children, wait_until

import zkrecipes
from bench import harness
from zkrecipes import LockError, _kazoo, aio

P = "/try"
LEASES = 2
FRONTS = ["threaded", "aio"]
WRITES = {"create", "create_container", "delete", "set_data", "multi"}

# recipe -> (the lock that tries, on a front's module; the holders that make it held, threaded)
CASES: "Dict[str, tuple[Callable[[Any, Any], Any], List[Callable[[Any], Any]]]]" = {
    "fair": (lambda m, c: m.FairLock(c, P), [lambda c: zkrecipes.FairLock(c, P)]),
    "write": (lambda m, c: m.ReadWriteLock(c, P).write(), [lambda c: zkrecipes.ReadWriteLock(c, P).read()]),
    "read": (lambda m, c: m.ReadWriteLock(c, P).read(), [lambda c: zkrecipes.FairLock(c, P)]),  # a writer
    "semaphore": (lambda m, c: m.Semaphore(c, P, LEASES), [lambda c: zkrecipes.Semaphore(c, P, LEASES)] * LEASES),
    "exclusive": (lambda m, c: m.ExclusiveLock(c, P), [lambda c: zkrecipes.ExclusiveLock(c, P)]),
}


def attempt(front: str, lock: Any, release: bool = True, **kwargs: Any) -> bool:
    """``lock.acquire(**kwargs)`` on its front (asyncio: in a task of its own), released again if held."""
    if front == "threaded":
        got = lock.acquire(**kwargs)
        if got and release:
            lock.release()
        return bool(got)

    async def go() -> bool:
        got = await lock.acquire(**kwargs)
        if got and release:
            await lock.release()
        return bool(got)

    return asyncio.run(go())


class Counted:
    """The requests one client sends (by wire type), less the nudges our seam may add to a slow reply."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.counters = harness.Counters()
        harness.instrument(client, self.counters)

    def __enter__(self) -> "Counted":
        self._before = self.counters.snapshot()
        self._nudges = _kazoo.heard(self.client).nudges
        return self

    def __exit__(self, *exc: object) -> None:
        req, _ = harness.delta(self._before, self.counters.snapshot())
        nudges = _kazoo.heard(self.client).nudges - self._nudges
        if nudges:
            req["exists"] = req.get("exists", 0) - nudges
        self.requests = {k: v for k, v in req.items() if v}
        self.writes = sum(v for k, v in self.requests.items() if k in WRITES)


def cversion(zk: Any) -> int:
    zk.sync(P)
    return int(zk.exists(P).cversion)


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("recipe", sorted(CASES))
def test_a_try_on_a_held_lock_is_one_listing_and_no_write(zk, zk_factory, recipe, front):
    make, holders = CASES[recipe]
    held = [h(zk_factory()) for h in holders]
    for h in held:
        assert h.acquire(timeout=10)
    before, queue = cversion(zk), children(zk, P)
    trier = zk_factory()
    count = Counted(trier)
    for kwargs in ({"blocking": False}, {"timeout": 0}):
        with count:
            assert attempt(front, make(aio if front == "aio" else zkrecipes, trier), **kwargs) is False
        assert count.requests == {"get_children": 1} and count.writes == 0, (kwargs, count.requests)
    assert cversion(zk) == before  # no child created or deleted: the ensemble saw no write of ours
    assert children(zk, P) == queue  # nothing left behind
    for h in held:
        h.release()


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("recipe", sorted(CASES))
def test_a_try_on_a_free_lock_reads_then_creates_and_holds(zk, zk_factory, recipe, front):
    make, _ = CASES[recipe]
    zk.ensure_path(P)  # a persistent parent: never reaped, so no create of a parent is counted
    trier = zk_factory()
    lock = make(aio if front == "aio" else zkrecipes, trier)
    count = Counted(trier)
    with count:
        assert attempt(front, lock, blocking=False)
    # the look, then the create and its listing (one round trip), then the release's delete
    assert count.requests == {"get_children": 2, "create": 1, "delete": 1}, count.requests
    assert children(zk, P) == []


def test_a_try_is_refused_by_another_recipes_nodes_and_writes_nothing(zk, zk_factory):
    def refused(front: str, lock: Any, found: str, maker: str) -> None:
        before, queue = cversion(zk), children(zk, P)
        with pytest.raises(LockError, match=f"{P}: an? .* cannot share this path: child '{found}' is a node of "
                                            f"{maker}.*Nothing was written"):
            attempt(front, lock, blocking=False)
        assert cversion(zk) == before and children(zk, P) == queue

    sem = zkrecipes.Semaphore(zk_factory(), P, LEASES)
    assert sem.acquire(timeout=10)
    (lease,) = children(zk, P)
    refused("threaded", zkrecipes.FairLock(zk_factory(), P), lease, "a Semaphore")
    refused("aio", aio.ExclusiveLock(zk_factory(), P), lease, "a Semaphore")
    sem.release()
    excl = zkrecipes.ExclusiveLock(zk_factory(), P)
    assert excl.acquire(timeout=10)
    refused("aio", aio.ReadWriteLock(zk_factory(), P).read(), "lock", "an ExclusiveLock")
    refused("threaded", zkrecipes.Semaphore(zk_factory(), P, LEASES), "lock", "an ExclusiveLock")
    excl.release()
    assert children(zk, P) == []


RACE = {  # recipe -> (the lock each contender tries, how many may hold at once)
    "fair": (lambda m, c: m.FairLock(c, P), 1),
    "exclusive": (lambda m, c: m.ExclusiveLock(c, P), 1),
    "semaphore": (lambda m, c: m.Semaphore(c, P, LEASES), LEASES),
    "write": (lambda m, c: m.ReadWriteLock(c, P).write(), 1),
}


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("recipe", sorted(RACE))
def test_tries_at_once_never_overlap_and_leave_no_node(zk, zk_factory, recipe, front):
    make, most = RACE[recipe]
    n, rounds = 5, 12
    clients = [zk_factory() for _ in range(n)]
    inside, peak, wins, lock = [0], [0], [0], threading.Lock()
    start = threading.Barrier(n) if front == "threaded" else None

    def enter() -> None:
        with lock:
            inside[0] += 1
            wins[0] += 1
            peak[0] = max(peak[0], inside[0])

    def leave() -> None:
        with lock:
            inside[0] -= 1

    def contender(client: Any) -> None:
        obj = make(zkrecipes, client)
        assert start is not None
        start.wait(10)
        for _ in range(rounds):
            if obj.acquire(blocking=False):
                enter()
                time.sleep(0.002)  # held a moment: the others try meanwhile
                leave()
                obj.release()

    if front == "threaded":
        threads = [threading.Thread(target=contender, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
    else:
        async def task(client: Any) -> None:
            obj = make(aio, client)
            for _ in range(rounds):
                if await obj.acquire(blocking=False):
                    enter()
                    await asyncio.sleep(0.002)  # held a moment: the others try meanwhile
                    leave()
                    await obj.release()

        async def all_tasks() -> None:
            await asyncio.wait_for(asyncio.gather(*(task(c) for c in clients)), 60)

        asyncio.run(all_tasks())
    assert 1 <= peak[0] <= most and wins[0] >= 1
    assert children(zk, P) == []  # no orphan


@pytest.mark.parametrize("front", FRONTS)
def test_contenders_say_who_holds_in_a_queue_of_readers_and_writers(zk, zk_factory, front):
    rw = [zkrecipes.ReadWriteLock(zk_factory(), P) for _ in range(4)]
    assert rw[0].read().acquire(timeout=10) and rw[1].read().acquire(timeout=10)
    writer = Acquirer(rw[2].write(), timeout=30)  # waits for the readers
    wait_until(lambda: len(children(zk, P)) == 3, 10, "the writer queued")
    reader = Acquirer(rw[3].read(), timeout=30)  # waits for the writer
    wait_until(lambda: len(children(zk, P)) == 4, 10, "the last reader queued")
    observer = (aio if front == "aio" else zkrecipes).ReadWriteLock(zk_factory(), P)
    got = observer.contenders() if front == "threaded" else asyncio.run(observer.contenders())
    assert [(c.kind, c.holding) for c in got] == [("R", True), ("R", True), ("W", False), ("R", False)]
    assert [c.holding for c in zkrecipes.FairLock(zk_factory(), P).contenders()] == [True, True, False, False]
    rw[2].write().cancel()
    rw[3].read().cancel()
    assert writer.wait() is False and reader.wait() is False
    rw[0].read().release()
    rw[1].read().release()


@pytest.mark.parametrize("front", FRONTS)
def test_contenders_say_which_leases_and_which_exclusive_node_hold(zk, zk_factory, front):
    mod = aio if front == "aio" else zkrecipes

    def look(obj: Any) -> List[Any]:
        return obj.contenders() if front == "threaded" else asyncio.run(obj.contenders())

    sems = [zkrecipes.Semaphore(zk_factory(), P, LEASES) for _ in range(LEASES + 1)]
    for s in sems[:LEASES]:
        assert s.acquire(timeout=10)
    waiter = Acquirer(sems[-1], timeout=30)
    wait_until(lambda: len(children(zk, P)) == LEASES + 1, 10, "the third lease queued")
    assert [c.holding for c in look(mod.Semaphore(zk_factory(), P, LEASES))] == [True] * LEASES + [False]
    sems[-1].cancel()
    assert waiter.wait() is False
    for s in sems[:LEASES]:
        s.release()
    excl = zkrecipes.ExclusiveLock(zk_factory(), "/excl")
    assert excl.acquire(timeout=10)
    (c,) = look(mod.ExclusiveLock(zk_factory(), "/excl"))
    assert c.node == "lock" and c.holding
    excl.release()
    assert look(mod.ExclusiveLock(zk_factory(), "/excl")) == []


@pytest.mark.parametrize("front", FRONTS)
def test_a_leases_try_with_another_max_leases_is_refused_without_writing(zk, zk_factory, front):
    holder = zkrecipes.Semaphore(zk_factory(), P, LEASES)
    assert holder.acquire(timeout=10)  # one of two leases: the path is not full
    before, queue = cversion(zk), children(zk, P)
    other = (aio if front == "aio" else zkrecipes).Semaphore(zk_factory(), P, LEASES + 1)
    with pytest.raises(LockError, match=f"max_leases {LEASES + 1} disagrees with the holders' {LEASES}"):
        attempt(front, other, blocking=False)
    assert cversion(zk) == before and children(zk, P) == queue
    holder.release()
