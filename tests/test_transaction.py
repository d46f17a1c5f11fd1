"""transaction(): a kazoo transaction that commits only while the hold lives, on every lock, the semaphore
and the election -- and raises LockLost with nothing applied once the session expired and another holds."""

from __future__ import annotations

import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError, RolledBackError
from lockhelpers import StateLog

from zkrecipes import (
    ExclusiveLock,
    FairLock,
    HeldTransaction,
    LeaderElection,
    LockError,
    LockLost,
    ReadWriteLock,
    Semaphore,
)
from zkrecipes.testing import expire_session


class Elected:
    """LeaderElection with the acquire/release shape of a lock (for the parametrized tests)."""

    def __init__(self, client, path) -> None:
        self.e = LeaderElection(client, path)

    def acquire(self, timeout=None) -> bool:
        return self.e.campaign(timeout=timeout)

    def release(self) -> None:
        self.e.resign()

    def transaction(self):
        return self.e.transaction()

    def add_listener(self, fn) -> None:
        self.e.add_listener(fn)


RECIPES = {
    "fair": FairLock,
    "exclusive": ExclusiveLock,
    "rw-write": lambda zk, path: ReadWriteLock(zk, path).write(),
    "rw-read": lambda zk, path: ReadWriteLock(zk, path).read(),
    "semaphore": lambda zk, path: Semaphore(zk, path, 1),
    "election": Elected,
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_commits_while_held_and_not_after_expiry_when_another_holds(zk, zk_factory, recipe):
    make = RECIPES[recipe]
    zk.ensure_path("/data")
    client = zk_factory(timeout=3.0)
    lock = make(client, "/held")
    log = StateLog()
    lock.add_listener(log)
    assert lock.acquire(timeout=10)

    tx = lock.transaction()
    assert isinstance(tx, HeldTransaction)
    tx.create("/data/a", b"1")
    tx.set_data("/data", b"x")
    results = tx.commit()
    assert results[0] == "/data/a" and results[1].version == 1  # kazoo's results, one per op we added
    zk.sync("/data")  # committed through another session, maybe on another server
    assert zk.get("/data/a")[0] == b"1"

    stale = lock.transaction()  # built while held, committed after the hold is gone
    stale.create("/data/late", b"stale")
    stale.set_data("/data", b"stale")
    expire_session(client)
    log.wait_for("lost", timeout=10)
    rival = make(zk_factory(timeout=3.0), "/held")
    if recipe == "rw-read":  # readers share: a writer is the one that excludes us
        rival = ReadWriteLock(zk_factory(timeout=3.0), "/held").write()
    assert rival.acquire(timeout=15)
    with pytest.raises(LockLost):
        stale.commit()
    with pytest.raises(LockLost):  # a new one too: the hold is lost
        tx2 = lock.transaction()
        tx2.create("/data/late2")
        tx2.commit()
    zk.sync("/data")
    assert zk.exists("/data/late") is None and zk.exists("/data/late2") is None
    assert zk.get("/data")[0] == b"x"
    lock.release()
    rival.release()


def test_a_failed_user_op_returns_kazoos_results_and_applies_nothing(zk):
    zk.ensure_path("/data")
    lock = FairLock(zk, "/fail")
    with lock:
        tx = lock.transaction()
        tx.create("/data/b", b"")
        tx.check("/data", 42)  # wrong version
        results = tx.commit()
        assert isinstance(results[0], RolledBackError) and isinstance(results[1], BadVersionError)
        assert zk.exists("/data/b") is None
        tx = lock.transaction()
        tx.create("/data", b"")
        assert isinstance(tx.commit()[0], NodeExistsError)


def test_the_commit_is_refused_after_release_and_without_a_hold(zk, zk_factory):
    lock = FairLock(zk, "/refuse")
    with pytest.raises(LockError, match="not held"):
        lock.transaction()
    with pytest.raises(LockLost, match="not the leader"):
        LeaderElection(zk, "/refuse-e").transaction()
    assert lock.acquire()
    tx = lock.transaction()
    tx.create("/after-release")
    lock.release()
    with pytest.raises(LockLost, match="released"):
        tx.commit()
    assert zk.exists("/after-release") is None
    with pytest.raises(TypeError, match="commit"):
        with lock:
            lock.transaction().commit_async()
