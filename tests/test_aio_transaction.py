"""transaction() on the asyncio locks, semaphore and election: ``await tx.commit()`` applies while the
hold lives, and raises LockLost with nothing applied once the session expired and another holds."""

from __future__ import annotations

import asyncio

import pytest
from test_aio import States, run
from test_transaction import assert_refused_and_nothing_applied, refused_ops

from zkrecipes import LockError, LockLost, TransactionFailed, aio
from zkrecipes.testing import Partition, expire_session


class Elected:
    """aio.LeaderElection with the acquire/release shape of a lock (for the parametrized test)."""

    def __init__(self, client, path) -> None:
        self.e = aio.LeaderElection(client, path)

    async def acquire(self, timeout=None) -> bool:
        return await self.e.campaign(timeout=timeout)

    async def release(self) -> None:
        await self.e.resign()

    def transaction(self):
        return self.e.transaction()

    def add_listener(self, fn) -> None:
        self.e.add_listener(fn)


RECIPES = {
    "fair": aio.FairLock,
    "exclusive": aio.ExclusiveLock,
    "rw-write": lambda zk, path: aio.ReadWriteLock(zk, path).write(),
    "rw-read": lambda zk, path: aio.ReadWriteLock(zk, path).read(),
    "semaphore": lambda zk, path: aio.Semaphore(zk, path, 1),
    "election": Elected,
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_commits_while_held_and_not_after_expiry_when_another_holds(zk, zk_factory, recipe):
    make = RECIPES[recipe]
    zk.ensure_path("/data")
    client, rival_client = zk_factory(timeout=3.0), zk_factory(timeout=3.0)

    async def body() -> None:
        lock = make(client, "/held")
        log = States(lock)
        assert await lock.acquire(timeout=10)
        tx = lock.transaction()
        assert isinstance(tx, aio.HeldTransaction)
        tx.create("/data/a", b"1")
        tx.set_data("/data", b"x")
        results = await tx.commit()
        assert results[0] == "/data/a" and results[1].version == 1  # kazoo's results, one per op we added
        zk.sync("/data")
        assert zk.get("/data/a")[0] == b"1"

        async with lock.transaction() as tx:  # commits on leaving the block
            tx.create("/data/b", b"2")
        zk.sync("/data")
        assert zk.get("/data/b")[0] == b"2"

        stale = lock.transaction()  # built while held, committed after the hold is gone
        stale.create("/data/late", b"stale")
        stale.set_data("/data", b"stale")
        await asyncio.get_running_loop().run_in_executor(None, expire_session, client)
        await log.wait_for("lost")
        rival = make(rival_client, "/held")
        if recipe == "rw-read":  # readers share: a writer is the one that excludes us
            rival = aio.ReadWriteLock(rival_client, "/held").write()
        assert await rival.acquire(timeout=15)
        with pytest.raises(LockLost):
            await stale.commit()
        with pytest.raises(LockLost):  # a new one too: the hold is lost
            tx2 = lock.transaction()
            tx2.create("/data/late2")
            await tx2.commit()
        zk.sync("/data")
        assert zk.exists("/data/late") is None and zk.exists("/data/late2") is None
        assert zk.get("/data")[0] == b"x"
        await lock.release()
        await rival.release()

    run(body)


@pytest.mark.parametrize("form", ["commit", "async with"])
def test_a_refused_operation_raises_naming_it_and_a_raising_block_commits_nothing(zk, form):
    zk.ensure_path("/data")
    zk.set("/data", b"before")

    async def body() -> None:
        lock = aio.FairLock(zk, "/fail")
        async with lock:
            refused = r"/fail \(/fail/.*\): transaction not applied: operation 2, create\('/missing/parent/c'\), failed"
            with pytest.raises(TransactionFailed, match=refused + " with NoNodeError") as err:
                if form == "commit":
                    tx = lock.transaction()
                    refused_ops(tx)
                    await tx.commit()
                else:
                    async with lock.transaction() as tx:
                        refused_ops(tx)
            assert_refused_and_nothing_applied(zk, err.value)
            assert lock.is_held and lock.state == "held"  # ZooKeeper refused our write, not our hold
            with pytest.raises(RuntimeError):
                async with lock.transaction() as tx:
                    tx.create("/data/c", b"")
                    raise RuntimeError("changed my mind")
        assert zk.exists("/data/c") is None

    run(body)


def test_the_commit_is_refused_without_a_hold_after_release_and_in_sync_form(zk):
    async def body() -> None:
        lock = aio.FairLock(zk, "/refuse")
        with pytest.raises(LockError, match="not held by the calling task"):
            lock.transaction()
        with pytest.raises(LockLost, match="not the leader"):
            aio.LeaderElection(zk, "/refuse-e").transaction()
        await lock.acquire()

        async def other_task() -> None:
            with pytest.raises(LockError, match="not held by the calling task"):
                lock.transaction()

        await asyncio.create_task(other_task())
        tx = lock.transaction()
        with pytest.raises(TypeError, match="async with"):
            with tx:
                pass
        with pytest.raises(TypeError, match="commit"):
            tx.commit_async()
        tx.create("/after-release")
        await lock.release()
        with pytest.raises(LockLost, match="released"):
            await tx.commit()
        assert zk.exists("/after-release") is None

    run(body)


def test_the_loop_keeps_running_while_a_commit_waits_for_its_reply(zk_ensemble, zk_factory):
    """The commit is awaited (kazoo's reply handed to the loop), not a blocking get on the loop's thread:
    with the reply held back (the link frozen, the connection open), other tasks run until it comes.
    (A reply can come back before the commit task first yields, so the link is frozen, not raced.)"""
    with Partition(zk_ensemble.hosts) as link:
        client = zk_factory(hosts=link.hosts)

        async def body() -> None:
            lock = aio.FairLock(client, "/nonblocking")
            async with lock:
                tx = lock.transaction()
                tx.create("/nb", b"")
                link.freeze()
                commit = asyncio.create_task(tx.commit())
                await asyncio.sleep(0.1)  # the loop runs on: a commit that blocked it would hold this up
                assert not commit.done()
                link.heal()
                assert await commit == ["/nb"]
            assert client.exists("/nb") is not None

        run(body)


def test_a_transaction_too_big_for_the_server_is_refused_before_sending_aio(zk):
    zk.create("/abig/config", b"", makepath=True)
    session = zk.client_id[0]

    async def body() -> None:
        lock = aio.FairLock(zk, "/abig/lock")
        async with lock:
            tx = lock.transaction()
            tx.set_data("/abig/config", b"x" * 1_100_000)
            with pytest.raises(ValueError, match="ZooKeeper refuses requests over 1048575 bytes"):
                await tx.commit()
            async with lock.transaction() as small:
                small.set_data("/abig/config", b"ok")
            await lock.check()

    run(body)
    assert zk.get("/abig/config")[0] == b"ok" and zk.client_id[0] == session
