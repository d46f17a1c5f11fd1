"""transaction(): a kazoo transaction that commits only while the hold lives, on every lock, the semaphore
and the election -- and raises LockLost with nothing applied once the session expired and another holds."""

from __future__ import annotations

import pytest
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency
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
    TransactionFailed,
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


def refused_ops(tx) -> None:
    """Four operations of which ZooKeeper refuses the third: its parent does not exist."""
    tx.set_data("/data", b"after")
    tx.create("/data/b", b"")
    tx.create("/missing/parent/c", b"")
    tx.delete("/data/b")


def assert_refused_and_nothing_applied(zk, failed: TransactionFailed) -> None:
    assert failed.index == 2 and zk.unchroot(failed.operation.path) == "/missing/parent/c"  # kazoo's operation
    assert isinstance(failed.error, NoNodeError) and failed.__cause__ is failed.error
    assert [type(r) for r in failed.results] == [RolledBackError, RolledBackError, NoNodeError, RuntimeInconsistency]
    zk.sync("/data")
    assert zk.get("/data")[0] == b"before" and zk.exists("/data/b") is None and zk.exists("/missing") is None


@pytest.mark.parametrize("form", ["commit", "with"])
def test_a_refused_operation_raises_naming_it_and_applies_nothing(zk, form):
    zk.ensure_path("/data")
    zk.set("/data", b"before")
    lock = FairLock(zk, "/fail")
    with lock:
        refused = r"/fail \(/fail/.*\): transaction not applied: operation 2, create\('/missing/parent/c'\), failed"
        with pytest.raises(TransactionFailed, match=refused + " with NoNodeError") as err:
            if form == "commit":
                tx = lock.transaction()
                refused_ops(tx)
                tx.commit()
            else:
                with lock.transaction() as tx:
                    refused_ops(tx)
        assert_refused_and_nothing_applied(zk, err.value)
        assert lock.is_held and lock.state == "held"  # ZooKeeper refused our write, not our hold
        tx = lock.transaction()
        tx.create("/data/b", b"")
        tx.check("/data", 42)  # wrong version
        with pytest.raises(TransactionFailed, match=r"operation 1, checkversion\('/data'\), failed with BadVersion"):
            tx.commit()
        assert zk.exists("/data/b") is None
        tx = lock.transaction()
        tx.create("/data", b"")
        with pytest.raises(TransactionFailed, match="operation 0, create") as err:
            tx.commit()
        assert isinstance(err.value.error, NodeExistsError)


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


def test_a_transaction_too_big_for_the_server_is_refused_before_sending(zk):
    # A multi longer than ZooKeeper's packet limit (jute.maxbuffer, 1 MB by default) makes the server drop
    # the connection; kazoo would reconnect and every hold on the client would be suspended meanwhile.
    from zkrecipes._fence import JUTE_MAXBUFFER, MAX_REQUEST_BYTES

    zk.create("/big/config", b"", makepath=True)
    kazoo_states: list = []
    zk.add_listener(kazoo_states.append)
    session = zk.client_id[0]
    lock = FairLock(zk, "/big/lock")
    log = StateLog(lock)
    with lock:
        tx = lock.transaction()
        tx.set_data("/big/config", b"x" * 1_100_000)
        with pytest.raises(ValueError) as info:
            tx.commit()
        msg = str(info.value)
        assert "/big/lock" in msg and str(JUTE_MAXBUFFER) in msg and str(MAX_REQUEST_BYTES) in msg
        assert any(str(n) in msg for n in range(1_100_000, 1_100_200)), msg  # the size, near the value's

        tx = lock.transaction()  # many small operations that add up past the limit
        for i in range(1500):
            tx.create(f"/big/n{i}", b"y" * 700)
        with pytest.raises(ValueError, match=r"\(1500 operations\)"):
            tx.commit()
        assert sorted(zk.get_children("/big")) == ["config", "lock"]  # nothing applied

        tx = lock.transaction()  # just under the limit: sent, and applied
        tx.set_data("/big/config", b"z" * 1_000_000)
        assert tx.commit() == [zk.exists("/big/config")]
        lock.check()
    assert zk.get("/big/config")[0] == b"z" * 1_000_000
    assert zk.connected and zk.client_id[0] == session and kazoo_states == []  # never dropped
    assert "suspended" not in log.states and "lost" not in log.states
