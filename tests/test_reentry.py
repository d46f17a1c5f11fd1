"""Re-entry never reports a hold held that is lost or in doubt, in both fronts, on a real ensemble.

Acquire again, a nested ``with``, ``hold()``, read re-entry and a read under our own write (downgrade) on
a hold whose session expired raise LockLost naming the path and node, and add no level: the outer
release only clears local state (the next holder's node is never touched) and the object acquires
afresh afterwards. While suspended, re-entry raises unless the object tolerates suspension; a process
that stood still past its session's expiry is refused at its first re-entry.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
from lockhelpers import FAST_RECONNECT, RECIPES, StateLog, children, wait_until
from test_aio import States, run
from test_stall import tell

from zkrecipes import FairLock, LockError, LockLost, ReadWriteLock, aio
from zkrecipes.testing import Partition, expire_session

AIO_RECIPES = {
    "fair": aio.FairLock,
    "exclusive": aio.ExclusiveLock,
    "rw-write": lambda zk, path, **kw: aio.ReadWriteLock(zk, path, **kw).write(),
    "semaphore-1": lambda zk, path, **kw: aio.Semaphore(zk, path, 1, **kw),
}


def refused(path: str, node: str, why: str = "lost") -> str:
    return rf"{path}: re-entry refused: the hold \({re.escape(node)}\) is {why}"


def session(client) -> int:
    return client.client_id[0]


@pytest.fixture
def procs():
    started: list = []
    yield started
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
        p.wait(30)


@pytest.fixture
def partition(zk_ensemble):
    with Partition(zk_ensemble.hosts) as p:
        yield p


# -- threads -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["fair", "exclusive", "rw-write", "semaphore-1"])
def test_reentry_into_a_lost_hold_raises_in_every_form_and_the_release_spares_the_next_holder(zk_factory, recipe):
    make = RECIPES[recipe]
    client = zk_factory(timeout=3.0)
    lock = make(client, "/re")
    tolerant = make(client, "/re", tolerate_suspended=True)
    assert lock.acquire()
    node = lock.node
    expire_session(client)
    assert lock.lost.wait(15)

    lost = refused("/re", node)
    with pytest.raises(LockLost, match=lost):
        lock.acquire(timeout=3)
    with pytest.raises(LockLost, match=lost):
        lock.acquire(blocking=False)
    with pytest.raises(LockLost, match=lost):
        tolerant.acquire()  # tolerating suspension is not tolerating loss
    with pytest.raises(LockLost, match=lost):
        with lock:
            pytest.fail("entered a lost hold")
    with pytest.raises(LockLost, match=lost):
        with lock.hold(timeout=3):
            pytest.fail("entered a lost hold")
    assert not lock.is_held and lock.state == "lost"

    rival_client = zk_factory(timeout=3.0)
    rival = make(rival_client, "/re")
    assert rival.acquire(timeout=15)
    lock.release()  # the one level recorded: local state only
    assert lock.state == "idle" and lock.node is None and not lock.is_held
    with pytest.raises(LockError, match="does not hold"):
        lock.release()  # no refused re-entry left a level behind
    stat = rival_client.exists(rival.node)
    assert stat is not None and stat.ephemeralOwner == session(rival_client) and rival.is_held
    rival.release()
    assert lock.acquire(timeout=10) and lock.is_held  # afresh, on the new session
    lock.release()
    assert children(client, "/re") == []


def test_read_reentry_and_a_read_under_a_lost_write_raise(zk_factory):
    client = zk_factory(timeout=3.0)
    rw, shared = ReadWriteLock(client, "/rw"), ReadWriteLock(client, "/rr")
    assert rw.write().acquire()
    assert rw.read().acquire()  # a downgrade under way: read under our own write
    assert shared.read().acquire()
    wnode, rnode = rw.write().node, shared.read().node
    expire_session(client)
    assert rw.write().lost.wait(15) and shared.read().lost.wait(15)

    with pytest.raises(LockLost, match=refused("/rw", wnode)):
        rw.read().acquire()  # downgrade
    with pytest.raises(LockLost, match=refused("/rw", wnode)):
        rw.write().acquire()
    with pytest.raises(LockLost, match=refused("/rr", rnode)):
        shared.read().acquire()  # read re-entry
    with pytest.raises(LockLost, match=refused("/rr", rnode)):
        with shared.read().hold(timeout=3):
            pytest.fail("entered a lost read hold")

    other = zk_factory(timeout=3.0)
    writers = [ReadWriteLock(other, p).write() for p in ("/rw", "/rr")]
    assert all(w.acquire(timeout=15) for w in writers)
    rw.write().release()
    rw.read().release()
    shared.read().release()
    assert not rw.read().is_held and rw.read().state == "idle" and shared.read().state == "idle"
    for w in writers:
        assert other.exists(w.node).ephemeralOwner == session(other) and w.is_held
        w.release()


def test_reentry_while_suspended_raises_unless_tolerated_and_is_granted_once_held_again(zk_factory, partition):
    client = zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)
    lock = FairLock(client, "/sus")
    tolerant = FairLock(client, "/sus", tolerate_suspended=True)
    log = StateLog(lock)
    assert lock.acquire()
    node = lock.node
    partition.cut()
    k = log.wait_for("suspended", timeout=5)
    with pytest.raises(LockLost, match=refused("/sus", node, "uncertain: connection suspended")):
        lock.acquire(timeout=1)
    assert tolerant.acquire(timeout=1)  # the user's explicit choice
    tolerant.release()
    partition.heal()
    log.wait_for("held", since=k, timeout=10)
    assert lock.acquire(timeout=1) and lock.is_held  # certain again: re-entry is granted
    lock.release()
    lock.release()
    assert children(client, "/sus") == []


# -- asyncio -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["fair", "exclusive", "rw-write", "semaphore-1"])
def test_aio_reentry_into_a_lost_hold_raises_in_every_form_and_the_release_spares_the_next_holder(
    zk_factory, recipe
):
    make = AIO_RECIPES[recipe]
    client = zk_factory(timeout=3.0)
    rival_client = zk_factory(timeout=3.0)

    async def body() -> None:
        lock = make(client, "/re")
        tolerant = make(client, "/re", tolerate_suspended=True)
        assert await lock.acquire()
        node = lock.node
        await asyncio.get_running_loop().run_in_executor(None, expire_session, client)
        await asyncio.wait_for(lock.lost.wait(), 15)

        lost = refused("/re", node)
        with pytest.raises(LockLost, match=lost):
            await lock.acquire(timeout=3)
        with pytest.raises(LockLost, match=lost):
            await lock.acquire(blocking=False)
        with pytest.raises(LockLost, match=lost):
            await tolerant.acquire()
        with pytest.raises(LockLost, match=lost):
            async with lock:
                pytest.fail("entered a lost hold")
        with pytest.raises(LockLost, match=lost):
            async with lock.hold(timeout=3):
                pytest.fail("entered a lost hold")
        assert not lock.is_held and lock.state == "lost"

        rival = make(rival_client, "/re")
        assert await rival.acquire(timeout=15)
        await lock.release()
        assert lock.state == "idle" and lock.node is None and not lock.is_held
        with pytest.raises(LockError, match="does not hold"):
            await lock.release()
        stat = rival_client.exists(rival.node)
        assert stat is not None and stat.ephemeralOwner == session(rival_client) and rival.is_held
        await rival.release()
        assert await lock.acquire(timeout=10) and lock.is_held
        await lock.release()

    run(body)
    assert children(client, "/re") == []


def test_aio_read_reentry_and_a_read_under_a_lost_write_raise(zk_factory):
    client = zk_factory(timeout=3.0)
    other = zk_factory(timeout=3.0)

    async def body() -> None:
        rw, shared = aio.ReadWriteLock(client, "/rw"), aio.ReadWriteLock(client, "/rr")
        assert await rw.write().acquire()
        assert await rw.read().acquire()
        assert await shared.read().acquire()
        wnode, rnode = rw.write().node, shared.read().node
        await asyncio.get_running_loop().run_in_executor(None, expire_session, client)
        await asyncio.wait_for(rw.write().lost.wait(), 15)
        await asyncio.wait_for(shared.read().lost.wait(), 15)

        with pytest.raises(LockLost, match=refused("/rw", wnode)):
            await rw.read().acquire()
        with pytest.raises(LockLost, match=refused("/rw", wnode)):
            await rw.write().acquire()
        with pytest.raises(LockLost, match=refused("/rr", rnode)):
            await shared.read().acquire()
        with pytest.raises(LockLost, match=refused("/rr", rnode)):
            async with shared.read():
                pytest.fail("entered a lost read hold")

        writers = [aio.ReadWriteLock(other, p).write() for p in ("/rw", "/rr")]
        for w in writers:
            assert await w.acquire(timeout=15)
        await rw.write().release()
        await rw.read().release()
        await shared.read().release()
        assert rw.read().state == "idle" and shared.read().state == "idle"
        for w in writers:
            assert other.exists(w.node).ephemeralOwner == session(other) and w.is_held
            await w.release()

    run(body)


def test_aio_reentry_while_suspended_raises_unless_tolerated_and_is_granted_once_held_again(zk_factory, partition):
    client = zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)

    async def body() -> None:
        lock = aio.FairLock(client, "/sus")
        tolerant = aio.FairLock(client, "/sus", tolerate_suspended=True)
        log = States(lock)
        assert await lock.acquire()
        node = lock.node
        partition.cut()
        k = await log.wait_for("suspended", timeout=5)
        with pytest.raises(LockLost, match=refused("/sus", node, "uncertain: connection suspended")):
            await lock.acquire(timeout=1)
        assert await tolerant.acquire(timeout=1)
        await tolerant.release()
        partition.heal()
        await log.wait_for("held", since=k, timeout=10)
        assert await lock.acquire(timeout=1) and lock.is_held
        await lock.release()
        await lock.release()

    run(body)
    assert children(client, "/sus") == []


# -- check() in the asyncio front: raises at the call --------------------------------------------------
@pytest.mark.parametrize("kind", ["lock", "semaphore", "election"])
def test_aio_check_raises_at_the_call_awaited_or_not(zk_factory, kind):
    client = zk_factory(timeout=3.0)

    async def body() -> None:
        if kind == "election":
            holder: object = aio.LeaderElection(client, "/chk")
            assert await holder.campaign(timeout=10)
        else:
            holder = aio.FairLock(client, "/chk") if kind == "lock" else aio.Semaphore(client, "/chk", 1)
            assert await holder.acquire(timeout=10)
        gc.collect()  # earlier tests' garbage (a pipe left open warns ResourceWarning) is not this test's
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            holder.check()  # certain: nothing left to await, so nothing warns that it was never awaited
            gc.collect()
        never_awaited = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert not never_awaited, never_awaited
        await holder.check()
        await asyncio.wait_for(holder.check(), 5)  # an awaitable wait_for accepts
        await asyncio.get_running_loop().run_in_executor(None, expire_session, client)
        await asyncio.wait_for(holder.lost.wait(), 15)
        with pytest.raises(LockLost, match="lost: the session ended"):
            holder.check()  # not awaited: raises all the same
        with pytest.raises(LockLost, match="lost: the session ended"):
            await holder.check()

    run(body)


def test_aio_check_raises_at_the_call_while_suspended_unless_tolerated(zk_factory, partition):
    client = zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)

    async def body() -> None:
        lock = aio.FairLock(client, "/chs")
        tolerant = aio.FairLock(client, "/chs", tolerate_suspended=True)
        log = States(lock)
        assert await lock.acquire()
        assert await tolerant.acquire()
        partition.cut()
        k = await log.wait_for("suspended", timeout=5)
        with pytest.raises(LockLost, match="uncertain: connection suspended"):
            lock.check()
        with pytest.raises(LockLost, match="uncertain: connection suspended"):
            await lock.check()
        tolerant.check()
        await tolerant.check()
        partition.heal()
        await log.wait_for("held", since=k, timeout=10)
        lock.check()
        await tolerant.release()
        await lock.release()

    run(body)


# -- a process that stood still past its session's expiry: the first re-entry is refused ---------------
CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from kazoo.client import KazooClient
    from zkrecipes import FairLock, LockLost, aio

    hosts, front, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    zk = KazooClient(hosts=hosts, timeout=timeout)
    zk.start(timeout=30)

    def settle():  # a short stall: kazoo may reconnect first (a re-entry refuses meanwhile: suspended)
        if sys.argv[4:] == ["settle"]:
            import time
            until = time.monotonic() + 10
            while not zk.connected and time.monotonic() < until:
                time.sleep(0.01)

    def outcome(call):
        try:
            return "held" if call() else "missed"
        except LockLost as exc:
            return "LockLost: " + str(exc)

    if front == "threads":
        lock = FairLock(zk, "/stall")
        assert lock.acquire(timeout=30)
        print(json.dumps({"node": lock.node}), flush=True)
        sys.stdin.readline()  # frozen here; resumed and told to go
        settle()
        print(json.dumps({"reentry": outcome(lambda: lock.acquire(timeout=5))}), flush=True)
    else:
        async def main():
            lock = aio.FairLock(zk, "/stall")
            assert await lock.acquire(timeout=30)
            print(json.dumps({"node": lock.node}), flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            settle()
            try:
                got = "held" if await lock.acquire(timeout=5) else "missed"
            except LockLost as exc:
                got = "LockLost: " + str(exc)
            print(json.dumps({"reentry": got}), flush=True)
        asyncio.run(main())
    """
)


@pytest.mark.parametrize("front", ["threads", "aio"])
@pytest.mark.parametrize("frozen_past_expiry", [True, False])
def test_first_reentry_after_a_stall_asks_zookeeper(zk_ensemble, zk_namespace, zk, procs, front,
                                                    frozen_past_expiry):
    """SIGSTOP a holder: resumed after the server expired its session (before its client has heard),
    its first re-entry raises; after a shorter stall ZooKeeper confirms the node and re-entry is granted."""
    timeout = 2.0 if frozen_past_expiry else 4.0
    proc = subprocess.Popen([sys.executable, "-c", CHILD, zk_ensemble.hosts + zk_namespace, front, str(timeout)]
                            + ([] if frozen_past_expiry else ["settle"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    procs.append(proc)
    line = proc.stdout.readline()
    assert line, f"child failed to take the lock (exit {proc.wait(30)})"
    node = json.loads(line)["node"]
    proc.send_signal(signal.SIGSTOP)
    if frozen_past_expiry:
        wait_until(lambda: zk.exists(node) is None, 20, "the server expired the frozen holder's session")
        rival = FairLock(zk, "/stall")
        assert rival.acquire(timeout=20)
    else:
        time.sleep(2.0)  # the fault itself: a 2 s freeze, past the stall limit (4/3 s), not the session
    proc.send_signal(signal.SIGCONT)
    seen = tell(proc)
    if frozen_past_expiry:
        assert seen["reentry"].startswith(f"LockLost: /stall: re-entry refused: the hold ({node})"), seen
        assert zk.exists(rival.node).ephemeralOwner == session(zk)
        rival.release()
    else:
        assert seen["reentry"] == "held", seen
