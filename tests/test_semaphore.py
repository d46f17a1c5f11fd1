"""Semaphore against a real 3-server ensemble: N holders at most, all get in, queue order, no herd,
cleanup after timeout/cancel, the max_leases mismatch, session expiry, and local threads' own leases."""

from __future__ import annotations

import threading
import time

import pytest
from kazoo.client import KazooClient
from lockhelpers import FAST_RECONNECT, Acquirer, StateLog, assert_no_watch, children, wait_until

from zkrecipes import FairLock, LeaderElection, LockError, LockLost, ReadWriteLock, Semaphore, _kazoo
from zkrecipes._drive import Driver
from zkrecipes.testing import Partition, expire_session


def watching_all(client, path: str, count: int) -> bool:
    """True once ``client`` has data watches on ``count`` nodes under ``path``."""
    full = client.chroot + path + "/"
    return len([p for p, fns in list(client._data_watchers.items()) if p.startswith(full) and fns]) >= count


class WakeCounter:
    """Counts deletions told to each client's acquire drivers (one per watch notification)."""

    def __init__(self, monkeypatch) -> None:
        self.events: dict = {}
        self._lock = threading.Lock()
        original = Driver._on_watch
        counter = self

        def counting(driver, event):
            with counter._lock:
                counter.events.setdefault(id(driver.client), []).append(event.path)
            return original(driver, event)

        monkeypatch.setattr(Driver, "_on_watch", _kazoo.on_io_thread(counting))  # run where the driver's is

    def count(self, client) -> int:
        with self._lock:
            return len(self.events.get(id(client), []))


# -- validation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad, error", [(0, ValueError), (-1, ValueError), (2.0, TypeError), ("2", TypeError), (True, TypeError),
                   (None, TypeError), (10**7, ValueError)]
)
def test_bad_max_leases_is_refused_before_any_request(bad, error):
    client = KazooClient(hosts="127.0.0.1:1")  # never started: any request would fail differently
    with pytest.raises(error, match="max_leases"):
        Semaphore(client, "/sem", bad)


# -- at most N, and everyone gets in ------------------------------------------------------------------
def test_exactly_n_hold_while_the_others_wait_then_all_get_in(zk, zk_factory):
    n, path = 3, "/peak"
    clients = [zk_factory() for _ in range(8)]
    go = threading.Event()
    acquirers = [Acquirer(Semaphore(c, path, n), hold_until=go, timeout=60) for c in clients]
    wait_until(lambda: len(children(zk, path)) == 8, 20, "every contender queued")
    holders = wait_until(lambda: [a for a in acquirers if a.done.is_set()] if sum(
        a.done.is_set() for a in acquirers) >= n else None, 20, f"{n} holders")
    waiting = [a for a in acquirers if a not in holders]
    # every waiter has set its watches (n each), so had it been eligible it would hold by now
    for a in waiting:
        wait_until(lambda a=a: watching_all(a.lock.client, path, n), 20, "waiter watches its n nearest")
    assert len(holders) == n and all(a.result is True for a in holders)
    assert sum(a.done.is_set() for a in acquirers) == n
    go.set()
    for a in acquirers:
        assert a.wait(60) is True
        assert a.released.wait(30)
    assert children(zk, path) == []


def test_peak_holders_never_exceed_n_among_many_clients(zk_factory):
    n, path, rounds = 2, "/hammer", 6
    state = {"inside": 0, "peak": 0, "done": 0}
    guard = threading.Lock()
    errors: list = []

    def worker(client) -> None:
        sem = Semaphore(client, path, n)
        try:
            for _ in range(rounds):
                with sem:
                    assert sem.is_held
                    with guard:
                        state["inside"] += 1
                        state["peak"] = max(state["peak"], state["inside"])
                    time.sleep(0.005)
                    with guard:
                        state["inside"] -= 1
                        state["done"] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(zk_factory(),)) for _ in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads)
    assert state["done"] == 7 * rounds
    assert 1 <= state["peak"] <= n


def test_leases_are_granted_in_queue_order_and_a_release_wakes_at_most_n(zk, zk_factory, monkeypatch):
    counter = WakeCounter(monkeypatch)
    n, path = 2, "/order"
    holders = [Semaphore(zk_factory(), path, n) for _ in range(n)]
    for h in holders:
        assert h.acquire(timeout=10)
    clients = [zk_factory() for _ in range(5)]
    release = [threading.Event() for _ in clients]
    waiters = []
    for client, rel in zip(clients, release):  # one by one: the queue order is the list order
        waiters.append(Acquirer(Semaphore(client, path, n), hold_until=rel, timeout=60))
        wait_until(lambda c=client: watching_all(c, path, n), 10, "waiter watches its n nearest")
    granted: list = []

    def newly_granted():
        return [w for w in waiters if w.done.is_set() and w not in granted]

    before = sum(counter.count(c) for c in clients)
    holders[0].release()
    first = wait_until(newly_granted, 15, "a waiter granted")
    assert first == [waiters[0]]
    granted += first
    # the release notified at most n waiters, whatever the queue length
    wait_until(lambda: all(watching_all(c, path, n) for c in clients[1:]), 10, "waiters watch again")
    assert 1 <= sum(counter.count(c) for c in clients) - before <= n
    holders[1].release()
    granted += wait_until(newly_granted, 15, "a waiter granted")
    assert granted == waiters[:2]
    for k in range(len(waiters) - n):
        release[k].set()
        assert waiters[k].released.wait(15)
        got = wait_until(newly_granted, 15, "a waiter granted")
        assert got == [waiters[k + n]]
        granted += got
    for rel in release:
        rel.set()
    for w in waiters:
        assert w.released.wait(15)
    assert children(zk, path) == []


# -- cleanup ------------------------------------------------------------------------------------------
def test_timeout_and_cancel_leave_no_node_and_no_watch(zk, zk_factory, zk_ensemble):
    path = "/clean"
    holders = [Semaphore(zk_factory(), path, 2) for _ in range(2)]
    for h in holders:
        assert h.acquire(timeout=10)
    client = zk_factory()
    sem = Semaphore(client, path, 2)
    assert sem.acquire(timeout=0.5) is False
    assert sem.acquire(blocking=False) is False
    assert sem.state == "idle"
    waiter = Acquirer(sem, timeout=60)
    wait_until(lambda: watching_all(client, path, 2), 10, "waiter watches both holders")
    sem.cancel()
    assert waiter.wait(15) is False
    assert len(children(zk, path)) == 2
    assert_no_watch(client, path, zk_ensemble)
    for h in holders:
        h.release()
    assert children(zk, path) == []


# -- the mismatch ---------------------------------------------------------------------------------------
def test_a_newcomer_with_another_max_leases_raises_and_leaves_no_node(zk, zk_factory):
    path = "/mismatch"
    holder = Semaphore(zk, path, 2)
    assert holder.acquire()
    rival = Semaphore(zk_factory(), path, 3)
    with pytest.raises(LockError, match="max_leases 3 disagrees with the holders' 2"):
        rival.acquire(timeout=10)
    assert children(zk, path) == [holder.node.rsplit("/", 1)[1]]
    assert rival.state == "idle"
    same = Semaphore(zk_factory(), path, 2)
    assert same.acquire(timeout=10)  # two leases: both hold
    same.release()
    holder.release()


def test_a_semaphore_refuses_a_path_used_by_a_lock(zk, zk_factory):
    lock = FairLock(zk, "/shared")
    assert lock.acquire()
    sem = Semaphore(zk_factory(), "/shared", 5)
    with pytest.raises(LockError, match="/shared: a Semaphore cannot share this path: child .* FairLock"):
        sem.acquire(timeout=10)
    assert len(children(zk, "/shared")) == 1
    lock.release()


# -- session loss ---------------------------------------------------------------------------------------
def test_session_expiry_makes_the_lease_lost_and_frees_it(zk_factory):
    path = "/expire"
    client = zk_factory(timeout=3.0)
    sem = Semaphore(client, path, 1)
    log = StateLog(sem)
    assert sem.acquire()
    expire_session(client)
    log.wait_for("lost", timeout=10)
    assert sem.lost.wait(5) and sem.state == "lost" and not sem.is_held
    with pytest.raises(LockLost):
        sem.check()
    rival = Semaphore(zk_factory(timeout=3.0), path, 1)
    assert rival.acquire(timeout=10)
    sem.release()  # deletes nothing of the rival's
    assert rival.is_held and rival.client.exists(rival.node) is not None
    rival.release()


# -- threads of one process -----------------------------------------------------------------------------
def test_each_thread_takes_its_own_lease_and_is_reentrant(zk, zk_factory):
    path = "/threads"
    sem = Semaphore(zk, path, 2)
    assert sem.acquire() and sem.acquire()  # reentrant: still one node
    assert len(children(zk, path)) == 1
    mine = sem.node
    other: dict = {}
    got = threading.Event()
    leave = threading.Event()

    def second() -> None:
        other["ok"] = sem.acquire(timeout=10)  # the same object, another thread: a lease of its own
        other["node"], other["state"] = sem.node, sem.state
        got.set()
        leave.wait(30)
        sem.release()

    t = threading.Thread(target=second)
    t.start()
    assert got.wait(15) and other["ok"] and other["state"] == "held"
    assert other["node"] != mine and len(children(zk, path)) == 2
    assert sem.node == mine  # per thread
    third = Semaphore(zk_factory(), path, 2)
    assert third.acquire(timeout=0.3) is False  # both leases are taken by this process's two threads
    leave.set()
    t.join(15)
    sem.release()
    assert sem.is_held  # one level left
    sem.release()
    assert children(zk, path) == [] and sem.state == "idle"
    with pytest.raises(LockError):
        sem.release()


@pytest.mark.parametrize("release_during_cut", [False, True], ids=["release-after-heal", "release-during-cut"])
def test_a_waiter_watching_n_nodes_survives_a_short_cut(zk, zk_factory, zk_ensemble, release_during_cut):
    """A dropped connection: the waiter sets its n watches again (or finds a holder gone) and gets in."""
    path = "/blip"
    holders = [Semaphore(zk, path, 2), Semaphore(zk_factory(), path, 2)]
    for h in holders:
        assert h.acquire(timeout=10)
    with Partition(zk_ensemble.hosts) as partition:
        client = zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)
        finish = threading.Event()
        waiter = Acquirer(Semaphore(client, path, 2), hold_until=finish, timeout=30)
        wait_until(lambda: watching_all(client, path, 2), 10, "the waiter watches both holders")
        sid = client.client_id[0]
        partition.cut()
        wait_until(lambda: not client.connected, 5, "the waiter's connection dropped")
        if release_during_cut:
            holders[1].release()
        partition.heal()
        wait_until(lambda: client.connected, 10, "reconnected")
        assert client.client_id[0] == sid
        if not release_during_cut:
            wait_until(lambda: watching_all(client, path, 2), 10, "watching again")
            assert not waiter.done.is_set()
            holders[1].release()
        assert waiter.wait(15) is True
        assert client.exists(waiter.node).ephemeralOwner == sid
        finish.set()
        assert waiter.released.wait(10)
    holders[0].release()
    assert children(zk, path) == []


@pytest.mark.parametrize("make", [FairLock, lambda zk, p: ReadWriteLock(zk, p).write(), LeaderElection],
                         ids=["fair", "rw-write", "election"])
def test_a_lock_on_a_semaphores_path_is_refused_not_queued_forever(zk, zk_factory, make):
    sem = Semaphore(zk, "/sem-path", 2)
    assert sem.acquire()
    lock = make(zk_factory(), "/sem-path")
    start = lock.campaign if hasattr(lock, "campaign") else lock.acquire
    with pytest.raises(LockError, match=r"/sem-path: a \w+ cannot share this path: child .* Semaphore \(max_leases 2"):
        start(timeout=30)
    assert len(children(zk, "/sem-path")) == 1  # its node deleted
    sem.release()
