"""zkrecipes.aio on a real ensemble: exclusion and FIFO among hundreds of tasks, cancel/timeout cleanup,
task ownership, read/write semantics, session loss told on the loop, election handover and run."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Awaitable, Callable, List

import pytest
from lockhelpers import FAST_RECONNECT, LateLink, assert_no_watch, children, full_path

from zkrecipes import FairLock as ThreadedFairLock
from zkrecipes import LeaderElection as ThreadedLeaderElection
from zkrecipes import LockCancelled, LockError, LockLost, LockTimeout, aio
from zkrecipes.testing import Partition, expire_session


def run(coro_fn: Callable[[], Awaitable[Any]], timeout: float = 60.0) -> Any:
    """Run one test body on a fresh event loop, bounded by ``timeout``."""

    async def main() -> Any:
        return await asyncio.wait_for(coro_fn(), timeout)

    return asyncio.run(main())


async def until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Await ``predicate()`` becoming true (polled on the loop, without blocking it), or fail."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.01)


def kids(zk, path: str) -> List[str]:
    """children() as of now: ``zk``'s server first catches up with the leader (another session's
    changes may not have reached it yet)."""
    zk.sync("/")
    return children(zk, path)


class States:
    """A listener recording ``(state, thread)``; ``wait_for`` awaits a state with a deadline."""

    def __init__(self, obj) -> None:
        self.states: List[str] = []
        self.threads: List[int] = []
        self.changed = asyncio.Event()
        obj.add_listener(self)

    def __call__(self, obj, state: str) -> None:
        self.states.append(state)
        self.threads.append(threading.get_ident())
        self.changed.set()

    async def wait_for(self, state: str, since: int = 0, timeout: float = 15.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            for k in range(since, len(self.states)):
                if self.states[k] == state:
                    return k
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"never became {state!r} within {timeout} s (states: {self.states[since:]})")
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass


# -- exclusion and order --------------------------------------------------------------------------
def test_mutual_exclusion_among_hundreds_of_tasks_on_several_clients(zk_factory):
    clients = [zk_factory() for _ in range(4)]

    async def body() -> None:
        locks = [aio.FairLock(c, "/mx") for c in clients]
        inside, most, done = 0, 0, []

        async def worker(i: int) -> None:
            nonlocal inside, most
            async with locks[i % len(locks)] as lock:
                assert lock.is_held and lock.token is not None
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0)  # let other tasks run while we hold
                await asyncio.sleep(0)
                inside -= 1
                done.append(i)

        await asyncio.gather(*(worker(i) for i in range(240)))
        assert most == 1 and sorted(done) == list(range(240))
        assert kids(clients[0], "/mx") == []

    run(body, 120)


def test_fifo_among_hundreds_of_tasks_and_across_clients(zk_factory):
    zk = zk_factory()
    others = [zk_factory() for _ in range(3)]

    async def body() -> None:
        lock = aio.FairLock(zk, "/fifo")
        order: List[str] = []
        holder_ready, let_go = asyncio.Event(), asyncio.Event()

        async def holder() -> None:
            async with lock:
                holder_ready.set()
                await let_go.wait()

        async def local(i: int) -> None:
            async with lock:
                order.append(f"local-{i}")

        async def remote(i: int) -> None:
            async with aio.FairLock(others[i], "/fifo"):
                order.append(f"remote-{i}")

        h = asyncio.create_task(holder())
        await holder_ready.wait()
        tasks = []
        for i in range(200):  # tasks queue for this process's node in arrival order
            tasks.append(asyncio.create_task(local(i)))
            await asyncio.sleep(0)
        for i in range(len(others)):  # other sessions queue in ZooKeeper in creation order
            tasks.append(asyncio.create_task(remote(i)))
            await until(lambda i=i: len(kids(zk, "/fifo")) == i + 2, 10, f"remote {i} queued")
        let_go.set()
        await asyncio.gather(h, *tasks)
        # local tasks wait for this process's gate in arrival order and queue one node at a time, so the
        # holder's release hands over to the sessions already queued in ZooKeeper first, then to the
        # local tasks in their order
        assert order == [f"remote-{i}" for i in range(len(others))] + [f"local-{i}" for i in range(200)]

    run(body, 120)


# -- cancel, timeout, non-blocking: no node, no watch ---------------------------------------------------
def test_timeout_and_nonblocking_miss_leave_no_node_and_no_watch(zk_ensemble, zk_factory):
    holder_client, waiter_client = zk_factory(), zk_factory()
    holder = ThreadedFairLock(holder_client, "/t")
    assert holder.acquire()

    async def body() -> None:
        lock = aio.FairLock(waiter_client, "/t")
        t0 = time.monotonic()
        assert not await lock.acquire(timeout=0.5)
        assert time.monotonic() - t0 >= 0.5
        assert lock.state == "idle" and lock.node is None
        assert not await lock.acquire(blocking=False)
        with pytest.raises(LockTimeout):
            async with lock.hold(timeout=0.2):
                pass
        with pytest.raises(ValueError):
            await lock.acquire(blocking=False, timeout=1)

    run(body)
    assert kids(holder_client, "/t") == [holder.node.rsplit("/", 1)[1]]
    assert_no_watch(waiter_client, "/t", zk_ensemble)
    holder.release()


def test_cancelling_a_waiting_task_deletes_its_node_and_watch(zk_ensemble, zk_factory):
    holder_client, waiter_client = zk_factory(), zk_factory()
    holder = ThreadedFairLock(holder_client, "/c")
    assert holder.acquire()

    async def body() -> None:
        lock = aio.FairLock(waiter_client, "/c")
        task = asyncio.create_task(lock.acquire())
        await until(lambda: len(kids(holder_client, "/c")) == 2, 10, "waiter queued")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(kids(waiter_client, "/c")) == 1  # deleted before the task ended (read by the deleting session: a
        # follower serving another client may not have applied the delete yet)
        assert lock.state == "idle"

    run(body)
    assert_no_watch(waiter_client, "/c", zk_ensemble)
    holder.release()


@pytest.mark.parametrize("contended", [False, True])
def test_a_cancel_landing_while_the_create_is_in_flight_leaves_no_node(zk_ensemble, zk_factory, contended):
    holder_client, waiter_client = zk_factory(), zk_factory()
    holder = ThreadedFairLock(holder_client, "/f")
    if contended:
        assert holder.acquire()
    expected = kids(holder_client, "/f")

    async def body() -> None:
        lock = aio.FairLock(waiter_client, "/f")
        for _ in range(20):
            task = asyncio.create_task(lock.acquire())
            await asyncio.sleep(0)  # the task runs up to its first await: the create is on the wire
            assert lock.state == "waiting"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        # every create is in once a sync sent after them is answered (read on the waiter's own server: the
        # holder's may be a follower that has not applied them yet); an abandoned one is deleted when its
        # reply comes
        await asyncio.get_running_loop().run_in_executor(None, waiter_client.sync, "/f")
        await until(lambda: kids(waiter_client, "/f") == expected, 10, "abandoned creates deleted")

    run(body)
    waiter_client.sync("/f")
    assert kids(waiter_client, "/f") == expected
    assert_no_watch(waiter_client, "/f", zk_ensemble)
    if contended:
        holder.release()


def test_cancel_makes_a_pending_acquire_return_false(zk_ensemble, zk_factory):
    holder_client, waiter_client = zk_factory(), zk_factory()
    holder = ThreadedFairLock(holder_client, "/k")
    assert holder.acquire()

    async def body() -> None:
        lock = aio.FairLock(waiter_client, "/k")
        local = aio.FairLock(waiter_client, "/k")  # waits in the local gate behind the first
        first = asyncio.create_task(lock.acquire())
        await until(lambda: len(kids(holder_client, "/k")) == 2, 10, "waiter queued")
        second = asyncio.create_task(local.acquire())
        await asyncio.sleep(0.05)
        threading.Thread(target=local.cancel).start()  # from another thread
        assert await second is False
        lock.cancel()
        assert await first is False
        assert len(kids(holder_client, "/k")) == 1

    run(body)
    assert_no_watch(waiter_client, "/k", zk_ensemble)
    holder.release()


# -- ownership -------------------------------------------------------------------------------------
def test_holds_are_owned_by_tasks_reentrant_and_one_node_per_process(zk):
    async def body() -> None:
        lock = aio.FairLock(zk, "/own")
        other = aio.FairLock(zk, "/own")
        await lock.acquire()
        await lock.acquire()  # reentrant in the same task
        node = lock.node
        assert lock.is_held and node is not None

        async def intruder() -> None:
            assert not lock.is_held  # held, but not by this task
            with pytest.raises(LockError):
                await lock.release()
            assert not await other.acquire(timeout=0.2)  # another task of this process waits too

        await asyncio.create_task(intruder())
        await lock.release()
        assert lock.is_held
        await lock.release()
        assert not lock.is_held and lock.node is None
        with pytest.raises(LockError):
            await lock.release()

        seen: List[int] = []

        async def user(i: int) -> None:
            async with other if i % 2 else lock:
                seen.append(len(kids(zk, "/own")))

        await asyncio.gather(*(user(i) for i in range(20)))
        assert seen == [1] * 20  # tasks of one process share one node

    run(body)
    with pytest.raises(LockError):
        asyncio.run(aio.FairLock(zk, "/own").release())  # a task that holds nothing


def test_outside_a_task_is_a_clear_error_and_bad_arguments_fail_early(zk):
    with pytest.raises(TypeError):
        aio.FairLock(zk, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        aio.FairLock(zk, "relative")
    with pytest.raises(TypeError):
        aio.FairLock("not a client", "/x")  # type: ignore[arg-type]

    async def body() -> None:
        lock = aio.FairLock(zk, "/bad")
        with pytest.raises(TypeError):
            await lock.acquire(blocking="yes")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            await lock.acquire(timeout=-1)

    run(body)
    assert kids(zk, "/bad") == []


# -- read/write ------------------------------------------------------------------------------------
def test_readers_share_and_a_queued_writer_blocks_later_readers(zk_factory):
    a, b, c = zk_factory(), zk_factory(), zk_factory()

    async def body() -> None:
        r1, r2 = aio.ReadWriteLock(a, "/rw").read(), aio.ReadWriteLock(c, "/rw").read()
        w = aio.ReadWriteLock(b, "/rw").write()
        assert await r1.acquire()
        assert await r2.acquire(timeout=5)  # readers share
        await r2.release()
        got, let_go = asyncio.Event(), asyncio.Event()

        async def writer() -> None:
            async with w:
                got.set()
                await let_go.wait()

        task = asyncio.create_task(writer())
        await until(lambda: len(kids(a, "/rw")) == 2, 10, "writer queued")
        assert not got.is_set()
        assert not await r2.acquire(timeout=0.3)  # behind the queued writer
        later = asyncio.create_task(r2.acquire())
        await r1.release()
        await asyncio.wait_for(got.wait(), 10)
        assert not await r1.acquire(timeout=0.2)  # the writer holds alone
        assert not later.done()
        let_go.set()
        await task
        assert await asyncio.wait_for(later, 10)
        assert w.state == "idle"

    run(body)


def test_read_write_ownership_downgrade_and_upgrade(zk):
    async def body() -> None:
        rw = aio.ReadWriteLock(zk, "/dg")
        await rw.write().acquire()
        await rw.read().acquire()  # downgrade: take the read side, then release the write side
        await rw.write().release()
        assert rw.read().is_held and not rw.write().is_held and rw.write().state == "idle"
        assert len(kids(zk, "/dg")) == 1
        with pytest.raises(LockError):
            await rw.write().acquire()  # upgrade would deadlock
        await rw.read().release()
        assert kids(zk, "/dg") == []

    run(body)


def test_a_task_that_joins_a_live_read_hold_sends_no_request(zk_ensemble, zk_factory):
    """Issue 48 on asyncio: tasks of one loop share one read node; the first joiner lists the queue once,
    later joiners send nothing (counted by a proxy in front of the client's server)."""
    link = LateLink(zk_ensemble.hosts)  # never armed: it counts the replies to this client's requests
    client = zk_factory(hosts=link.hosts)

    async def join() -> None:
        task_read = aio.ReadWriteLock(client, "/join").read()
        assert await task_read.acquire(timeout=10)
        await task_read.release()

    async def body() -> None:
        read = aio.ReadWriteLock(client, "/join").read()
        await read.acquire()
        await asyncio.create_task(join())  # the first joiner looks behind our node
        before = link.replies
        for _ in range(20):
            await asyncio.create_task(join())
        assert link.replies == before, f"{link.replies - before} requests sent by 20 joined reads"
        assert len(kids(zk, "/join")) == 1
        await read.release()
        assert kids(zk, "/join") == []

    zk = zk_factory()
    try:
        run(body)
    finally:
        link.close()


# -- session loss ------------------------------------------------------------------------------------
def test_session_expiry_is_told_on_the_loop_and_check_raises(zk_factory):
    client = zk_factory(timeout=3.0)

    async def body() -> None:
        lock = aio.FairLock(client, "/exp")
        log = States(lock)
        await lock.acquire()
        await lock.check()
        loop_thread = threading.get_ident()
        await asyncio.get_running_loop().run_in_executor(None, expire_session, client)
        await asyncio.wait_for(lock.lost.wait(), 15)
        await log.wait_for("lost")
        assert set(log.threads) == {loop_thread}
        assert lock.state == "lost" and not lock.is_held and lock.token is None
        with pytest.raises(LockLost):
            await lock.check()
        await lock.release()  # only local state: the node went with the session
        assert lock.state == "idle"

    run(body)


def test_a_partition_is_suspended_then_held(zk_ensemble, zk_factory):
    with Partition(zk_ensemble.hosts) as partition:
        client = zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)

        async def body() -> None:
            lock = aio.FairLock(client, "/blip")
            log = States(lock)
            await lock.acquire()
            node, token = lock.node, lock.token
            partition.cut()
            k = await log.wait_for("suspended", timeout=5)
            assert not lock.is_held
            with pytest.raises(LockLost):
                await lock.check()
            partition.heal()
            await log.wait_for("held", since=k, timeout=10)
            assert lock.is_held and not lock.lost.is_set() and lock.node == node and lock.token == token
            await lock.check()
            assert set(log.threads) == {threading.get_ident()}
            await lock.release()

        run(body)


def test_release_during_a_long_cut_reports_the_loss(zk_ensemble, zk_factory):
    """release() without a connection waits until the hold is declared lost (suspended past the session
    timeout), never deletes anything then, and tells the loss: "lost", then "idle"."""
    with Partition(zk_ensemble.hosts) as partition:
        client = zk_factory(hosts=partition.hosts, timeout=3.0, connection_retry=FAST_RECONNECT)

        async def body() -> None:
            lock = aio.FairLock(client, "/cutrel")
            log = States(lock)
            await lock.acquire()
            partition.cut()
            await log.wait_for("suspended", timeout=5)
            t0 = time.monotonic()
            await lock.release()  # the same task (wait_for would run it in another: LockError)
            assert time.monotonic() - t0 < 10
            assert log.states[-2:] == ["lost", "idle"] and lock.lost.is_set()
            assert set(log.threads) == {threading.get_ident()}
            partition.heal()

        run(body)


STALL_CHILD = """
import asyncio, json, sys
from kazoo.client import KazooClient
from zkrecipes import LockLost, aio

hosts, recipe, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])

async def main():
    zk = KazooClient(hosts=hosts, timeout=timeout)
    zk.start(timeout=30)
    if recipe == "election":
        holder = aio.LeaderElection(zk, "/stall")
        assert await holder.campaign(timeout=30)
        held = lambda: holder.is_leader
    else:
        holder = aio.FairLock(zk, "/stall")
        assert await holder.acquire(timeout=30)
        held = lambda: holder.is_held
    print(json.dumps({"node": holder.node}), flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)  # frozen here; resumed and told to go
    if sys.argv[4:] == ["settle"]:  # a short stall: kazoo may reconnect first (check() refuses meanwhile)
        for _ in range(1000):
            if zk.connected:
                break
            await asyncio.sleep(0.01)
    first = held()
    try:
        await holder.check()
        checked = "passed"
    except LockLost as exc:
        checked = "LockLost: " + str(exc)
    for _ in range(500 if checked == "passed" else 0):  # the session thread re-confirms once it runs again
        if held():
            break
        await asyncio.sleep(0.01)
    print(json.dumps({"held": first, "check": checked, "after": held()}), flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize("recipe", ["fair", "election"])
@pytest.mark.parametrize("frozen_past_expiry", [True, False])
def test_a_stalled_process_distrusts_its_hold_until_zookeeper_confirms(
    zk_ensemble, zk_namespace, zk, recipe, frozen_past_expiry
):
    """SIGSTOP a process holding an aio lock: resumed past its session's expiry, its first is_held is
    False and check() raises; after a shorter stall, check() asks ZooKeeper (awaited) and passes."""
    import json
    import os
    import signal
    import subprocess
    import sys

    timeout = 2.0 if frozen_past_expiry else 4.0
    proc = subprocess.Popen([sys.executable, "-c", STALL_CHILD, zk_ensemble.hosts + zk_namespace, recipe,
                             str(timeout)] + ([] if frozen_past_expiry else ["settle"]),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        node = json.loads(proc.stdout.readline())["node"]
        os.kill(proc.pid, signal.SIGSTOP)
        if frozen_past_expiry:
            deadline = time.monotonic() + 20
            while zk.exists(node) is not None:
                assert time.monotonic() < deadline, "the server never expired the frozen session"
                time.sleep(0.05)
        else:
            time.sleep(2.0)  # the fault itself: a 2 s freeze, past the stall limit (4/3 s), not the session
        os.kill(proc.pid, signal.SIGCONT)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        seen = json.loads(proc.stdout.readline())
        if frozen_past_expiry:
            assert seen["held"] is False and seen["check"].startswith("LockLost") and not seen["after"], seen
        else:
            assert seen["check"] == "passed" and seen["after"] is True, seen
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(30)


# -- election ----------------------------------------------------------------------------------------
def test_election_handover_and_run(zk_factory):
    a, b = zk_factory(), zk_factory()

    async def body() -> None:
        e1, e2 = aio.LeaderElection(a, "/el", "one"), aio.LeaderElection(b, "/el", "two")
        log = States(e2)
        assert await e1.campaign()
        assert e1.is_leader and e1.state == "leader"
        second = asyncio.create_task(e2.campaign())
        await until(lambda: len(kids(a, "/el")) == 2, 10, "second candidate queued")
        assert (await e1.leader()).identifier == "one"
        assert [c.identifier for c in await e2.contenders()] == ["one", "two"]
        t1 = e1.token
        await e1.resign()
        assert await asyncio.wait_for(second, 10)
        assert e2.is_leader and e2.token > t1 and not e1.is_leader
        assert log.states == ["candidate", "leader"]
        await e2.check()
        await e2.resign()
        assert e2.state == "idle" and kids(a, "/el") == []

        async def work(x: int) -> int:
            assert e1.is_leader
            await e1.check()
            return x * 2

        assert await e1.run(work, 21) == 42
        assert not e1.is_leader and kids(a, "/el") == []
        async with e2:
            assert e2.is_leader
        assert e2.state == "idle"

    run(body)


def test_cancelling_a_campaign_deletes_its_node(zk_ensemble, zk_factory):
    a, b = zk_factory(), zk_factory()

    async def body() -> None:
        e1, e2 = aio.LeaderElection(a, "/ec"), aio.LeaderElection(b, "/ec")
        assert await e1.campaign()
        assert not await e2.campaign(timeout=0.3)
        task = asyncio.create_task(e2.campaign())
        await until(lambda: len(kids(a, "/ec")) == 2, 10, "queued")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(kids(b, "/ec")) == 1  # read by the client that deleted it (a may read a lagging server)
        third = asyncio.create_task(e2.campaign())
        await until(lambda: len(kids(a, "/ec")) == 2, 10, "queued")
        e2.cancel()
        assert await third is False
        await e1.resign()

    run(body)
    assert kids(a, "/ec") == []
    assert_no_watch(b, "/ec", zk_ensemble)


# -- more recipes and paths ----------------------------------------------------------------------------
def test_exclusive_lock_hands_over_and_leaves_no_watch(zk_ensemble, zk_factory):
    a, b = zk_factory(), zk_factory()

    async def body() -> None:
        first, second = aio.ExclusiveLock(a, "/ex", "one"), aio.ExclusiveLock(b, "/ex", "two")
        assert await first.acquire()
        b.sync("/ex")  # b's server may not have applied a's create yet (ZooKeeper reads are not linearizable)
        assert [c.identifier for c in await second.contenders()] == ["one"]
        assert not await second.acquire(timeout=0.2)
        waiter = asyncio.create_task(second.acquire())
        watched = full_path(b, "/ex/lock")  # a waiter watches the holder's node (its watch is set once the reply came)
        await until(lambda: bool(b._data_watchers.get(watched)), 10, "the waiter watching the lock node")
        assert second.state == "waiting" and not waiter.done()  # queued behind the holder, not granted
        t1 = first.token
        await first.release()
        assert await asyncio.wait_for(waiter, 10)
        assert second.token > t1 and second.is_held  # held by the task that called acquire(): this one
        assert [c.identifier for c in await first.contenders()] == ["two"]
        await second.release()

    run(body)
    assert_no_watch(b, "/ex", zk_ensemble)


def test_tasks_with_timeouts_and_cancels_among_hundreds_leave_nothing_behind(zk_ensemble, zk_factory):
    clients = [zk_factory() for _ in range(3)]

    async def body() -> None:
        locks = [aio.FairLock(c, "/mix") for c in clients]
        got = 0

        async def worker(i: int) -> None:
            nonlocal got
            lock = locks[i % 3]
            if await lock.acquire(timeout=(i % 7) * 0.01 or None):
                try:  # a holder cancelled in its sleep releases too (else later waiters without a timeout hang)
                    got += 1
                    await asyncio.sleep(0.001)
                finally:
                    await lock.release()

        tasks = [asyncio.create_task(worker(i)) for i in range(300)]
        await asyncio.sleep(0.2)
        for t in tasks[::5]:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(r is None or isinstance(r, asyncio.CancelledError) for r in results), results
        assert got > 0
        assert all(lock.state == "idle" for lock in locks)

    run(body, 120)
    assert kids(clients[0], "/mix") == []
    for c in clients:
        assert_no_watch(c, "/mix", zk_ensemble)


def test_cancel_raises_lock_cancelled_from_async_with(zk_factory):
    a, b = zk_factory(), zk_factory()
    holder = ThreadedFairLock(a, "/lc")
    assert holder.acquire()

    async def body() -> None:
        lock = aio.FairLock(b, "/lc")

        async def use() -> None:
            async with lock:
                pytest.fail("must not be entered")

        task = asyncio.create_task(use())
        await until(lambda: len(kids(a, "/lc")) == 2, 10, "queued")
        lock.cancel()
        with pytest.raises(LockCancelled):
            await task

    run(body)
    assert len(kids(a, "/lc")) == 1
    holder.release()


def test_leader_session_expiry_is_told_on_the_loop(zk_factory):
    client = zk_factory(timeout=3.0)

    async def body() -> None:
        election = aio.LeaderElection(client, "/lexp")
        log = States(election)
        assert await election.campaign()
        await asyncio.get_running_loop().run_in_executor(None, expire_session, client)
        await asyncio.wait_for(election.lost.wait(), 15)
        await log.wait_for("lost")
        assert set(log.threads) == {threading.get_ident()}
        assert not election.is_leader and election.token is None
        with pytest.raises(LockLost):
            await election.check()
        await election.resign()
        assert election.state == "idle"

    run(body)


# -- the documented example ----------------------------------------------------------------------------
def test_service_example_runs_as_documented(zk_ensemble, zk_namespace, zk):
    import os
    import pathlib
    import subprocess
    import sys

    example = pathlib.Path(__file__).parent.parent / "docs" / "examples" / "aio_service.py"
    env = {**os.environ, "ZK_HOSTS": zk_ensemble.hosts + zk_namespace}
    proc = subprocess.run([sys.executable, str(example), "/bank"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "all 200 deposits applied; no lost update", proc.stdout
    assert "nightly runs 4" in lines[-2], proc.stdout
    leads = [line for line in lines if "leads, runs the nightly job" in line]
    assert len(leads) == 4 and {line.split(":")[0] for line in leads} == {"instance-0", "instance-1"}, proc.stdout
    zk.sync("/")
    assert kids(zk, "/bank/leader") == []
    assert all(kids(zk, f"/bank/accounts/acct-{n}") == [] for n in range(5))


def test_contenders_read_every_format_like_the_threaded_call(zk):
    ours = ThreadedFairLock(zk, "/mixed", identifier="ours")
    assert ours.acquire()
    try:
        zk.create("/mixed/0f1e2d3c4b5a69788796a5b4c3d2e1f0__lock__", b"kazoo-one", ephemeral=True, sequence=True)

        async def body() -> list:
            return [(c.identifier, c.kind) for c in await aio.FairLock(zk, "/mixed").contenders()]

        got = run(body)
        assert got == [(c.identifier, c.kind) for c in ours.contenders()] == [("ours", "W"), ("kazoo-one", "W")]
    finally:
        ours.release()


@pytest.mark.parametrize("proto,tag", [("kazoo", "__lock__"), ("curator", "-latch-")])
def test_an_election_campaigns_in_the_format_it_was_given(zk, zk_factory, proto, tag):
    theirs = ThreadedLeaderElection(zk_factory(), "/aio-elect", identifier="threads", protocol=proto)
    assert theirs.campaign(timeout=10)

    async def body() -> None:
        e = aio.LeaderElection(zk, "/aio-elect", identifier="task", protocol=proto)
        second = asyncio.create_task(e.campaign(timeout=30))
        await until(lambda: len(kids(zk, "/aio-elect")) == 2, 10, "the task's node")
        assert not second.done()  # queued behind the threaded leader in the same format, not refused
        theirs.resign()
        assert await asyncio.wait_for(second, 30) and tag in (e.node or "")
        await e.resign()

    run(body)
