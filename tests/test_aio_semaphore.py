"""aio.Semaphore on a real ensemble: at most N holders among many tasks over several clients, all get in,
queue order and at most N notified per release, cancel/timeout cleanup (no node, no watch), the
max_leases mismatch, a lease per task (reentrant), and session expiry told on the loop."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Dict, List

import pytest
from kazoo.client import KazooClient
from lockhelpers import assert_no_watch
from test_aio import States, kids, run, until

from zkrecipes import LockError, LockLost, LockTimeout, _kazoo, aio
from zkrecipes import Semaphore as ThreadedSemaphore
from zkrecipes.aio._driver import AioDriver
from zkrecipes.testing import expire_session


def watching(client, path: str) -> int:
    """How many nodes under ``path`` ``client`` has data watches on."""
    full = client.chroot + path + "/"
    return len([p for p, fns in list(client._data_watchers.items()) if p.startswith(full) and fns])


def name(node: str) -> str:
    return node.rsplit("/", 1)[1]


# -- validation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, error", [(0, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError),
                                        (None, TypeError)])
def test_bad_max_leases_is_refused_before_any_request(bad, error):
    client = KazooClient(hosts="127.0.0.1:1")  # never started: any request would fail differently
    with pytest.raises(error, match="max_leases"):
        aio.Semaphore(client, "/sem", bad)


# -- at most N, and everyone gets in ------------------------------------------------------------------
def test_peak_holders_is_n_among_many_tasks_over_several_clients(zk_factory):
    n, total, path = 3, 60, "/peak"
    clients = [zk_factory() for _ in range(4)]

    async def body() -> None:
        sems = [aio.Semaphore(c, path, n) for c in clients]
        inside, peak, finished = 0, 0, 0
        done: List[int] = []

        async def worker(i: int) -> None:
            nonlocal inside, peak, finished
            async with sems[i % len(sems)] as sem:
                assert sem.is_held and sem.state == "held" and sem.token is not None
                inside += 1
                peak = max(peak, inside)
                # stay until n hold at once (or every task still running holds): N must be reached
                await until(lambda: inside == n or total - finished == inside, 20, "n holders at once")
                inside -= 1
                finished += 1
                done.append(i)

        await asyncio.gather(*(worker(i) for i in range(total)))
        assert peak == n and sorted(done) == list(range(total))
        assert kids(clients[0], path) == []

    run(body, 180)


def test_leases_go_in_queue_order_and_a_release_notifies_at_most_n(zk_ensemble, zk_factory, monkeypatch):
    n, path = 2, "/order"
    told: Dict[int, int] = {}
    original = AioDriver._on_watch

    @_kazoo.on_io_thread  # run where the driver's is
    def counting(driver, event):  # kazoo's I/O thread: one call per watch notification
        told[id(driver.client)] = told.get(id(driver.client), 0) + 1
        return original(driver, event)

    monkeypatch.setattr(AioDriver, "_on_watch", counting)
    holder_clients = [zk_factory() for _ in range(n)]
    holders = [ThreadedSemaphore(c, path, n) for c in holder_clients]  # the threaded class: one queue
    for h in holders:
        assert h.acquire(timeout=10)
    clients = [zk_factory() for _ in range(2)]

    async def body() -> None:
        sems = [aio.Semaphore(c, path, n) for c in clients]
        order: List[int] = []
        let_go = [asyncio.Event() for _ in range(6)]

        async def waiter(i: int) -> None:
            async with sems[i % 2]:
                order.append(i)
                await let_go[i].wait()

        tasks = []
        for i in range(6):  # one by one: the queue order is the creation order
            tasks.append(asyncio.create_task(waiter(i)))
            await until(lambda i=i: len(kids(clients[0], path)) == n + i + 1, 10, f"waiter {i} queued")
        # each waiting task watches its n nearest nodes ahead: three tasks per client, 6 paths each
        await until(lambda: [watching(c, path) for c in clients] == [6, 6], 10, "waiters watch")
        before = sum(told.values())
        holders[0].release()
        await until(lambda: order == [0], 10, "the first waiter granted")
        await until(lambda: [watching(c, path) for c in clients] == [4, 6], 10, "the new holder's watch gone")
        assert 1 <= sum(told.values()) - before <= n  # not the whole queue
        holders[1].release()
        await until(lambda: order == [0, 1], 10, "the second waiter granted")
        for i in range(4):
            let_go[i].set()
            await until(lambda i=i: order == list(range(i + 3)), 10, f"waiter {i + 2} granted")
        for ev in let_go:
            ev.set()
        await asyncio.gather(*tasks)

    run(body, 120)
    assert kids(holder_clients[0], path) == []
    for c in clients:
        assert_no_watch(c, path, zk_ensemble)


# -- cleanup ------------------------------------------------------------------------------------------
def test_timeout_cancel_and_task_cancel_leave_no_node_and_no_watch(zk_ensemble, zk_factory):
    path = "/clean"
    holders = [ThreadedSemaphore(zk_factory(), path, 2) for _ in range(2)]
    for h in holders:
        assert h.acquire(timeout=10)
    held = sorted(name(h.node) for h in holders)
    client = zk_factory()

    async def body() -> None:
        sem = aio.Semaphore(client, path, 2)
        t0 = time.monotonic()
        assert await sem.acquire(timeout=0.4) is False
        assert time.monotonic() - t0 >= 0.4
        assert await sem.acquire(blocking=False) is False
        with pytest.raises(LockTimeout):
            async with sem.hold(timeout=0.2):
                pass
        assert sem.state == "idle" and sem.node is None and kids(client, path) == held

        waiting = asyncio.create_task(sem.acquire())  # cancelled as a task: CancelledError, node gone
        await until(lambda: watching(client, path) == 2, 10, "the waiter watches both holders")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert kids(client, path) == held

        waiting = asyncio.create_task(sem.acquire())  # sem.cancel() from another thread: False
        await until(lambda: watching(client, path) == 2, 10, "the waiter watches both holders")
        threading.Thread(target=sem.cancel).start()
        assert await asyncio.wait_for(waiting, 10) is False
        assert kids(client, path) == held

        for _ in range(10):  # cancelled while the create is in flight: deleted when its reply comes
            task = asyncio.create_task(sem.acquire())
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await until(lambda: kids(client, path) == held, 10, "abandoned creates deleted")
        assert sem.state == "idle"

    run(body)
    assert kids(client, path) == held
    assert_no_watch(client, path, zk_ensemble)
    for h in holders:
        h.release()


# -- the mismatch ---------------------------------------------------------------------------------------
def test_a_newcomer_with_another_max_leases_raises_and_leaves_no_node(zk_ensemble, zk, zk_factory):
    path = "/mismatch"
    holder = ThreadedSemaphore(zk, path, 2)
    assert holder.acquire()
    client = zk_factory()

    async def body() -> None:
        rival = aio.Semaphore(client, path, 3)
        with pytest.raises(LockError, match="max_leases 3 disagrees with the holders' 2"):
            await rival.acquire(timeout=10)
        assert rival.state == "idle" and rival.node is None
        assert kids(client, path) == [name(holder.node)]
        with pytest.raises(ValueError, match="max_leases 2 disagrees with 3"):
            aio.Semaphore(client, path, 2)  # one process, one client and path: one max_leases while rival lives
        del rival
        gc.collect()
        same = aio.Semaphore(client, path, 2)
        assert await same.acquire(timeout=10)  # two leases: both hold
        await same.release()

    run(body)
    assert_no_watch(client, path, zk_ensemble)
    holder.release()
    assert kids(zk, path) == []


def test_a_semaphore_refuses_a_path_used_by_a_lock(zk, zk_factory):
    client = zk_factory()

    async def body() -> None:
        async with aio.FairLock(zk, "/shared"):
            with pytest.raises(LockError, match="/shared: a Semaphore cannot share this path: child .* FairLock"):
                await aio.Semaphore(client, "/shared", 5).acquire(timeout=10)
            assert len(kids(zk, "/shared")) == 1

    run(body)


# -- a lease per task ---------------------------------------------------------------------------------
def test_each_task_takes_its_own_lease_reentrant_and_shared_by_its_objects(zk, zk_factory):
    path = "/tasks"

    async def body() -> None:
        sem = aio.Semaphore(zk, path, 2)
        other_object = aio.Semaphore(zk, path, 2)
        assert await sem.acquire() and await sem.acquire()  # reentrant: still one node
        assert await other_object.acquire()  # another object in the same task: the same lease
        assert len(kids(zk, path)) == 1 and other_object.node == sem.node
        await other_object.release()
        mine, my_token = sem.node, sem.token
        assert sem.is_held and sem.state == "held"
        got, leave = asyncio.Event(), asyncio.Event()
        seen: Dict[str, object] = {}

        async def second() -> None:
            assert sem.state == "idle" and not sem.is_held and sem.node is None  # not this task's lease
            with pytest.raises(LockError):
                await sem.release()
            with pytest.raises(LockError):
                await sem.check()
            assert await sem.acquire(timeout=10)  # the same object, another task: a lease of its own
            seen.update(node=sem.node, token=sem.token, state=sem.state)
            got.set()
            await leave.wait()
            await sem.release()

        task = asyncio.create_task(second())
        await asyncio.wait_for(got.wait(), 15)
        assert seen["state"] == "held" and seen["node"] != mine and seen["token"] != my_token
        assert len(kids(zk, path)) == 2 and sem.node == mine and sem.token == my_token  # per task
        third = aio.Semaphore(zk_factory(), path, 2)
        assert await third.acquire(timeout=0.3) is False  # both leases: this process's two tasks
        async def third_task() -> bool:
            return await sem.acquire(timeout=0.3)

        assert not await asyncio.create_task(third_task())  # nor a third task here
        leave.set()
        await task
        await sem.release()
        assert sem.is_held  # one level left
        await sem.release()
        assert kids(zk, path) == [] and sem.state == "idle" and sem.node is None
        with pytest.raises(LockError):
            await sem.release()

    run(body)


def test_outside_a_task_there_is_no_lease(zk):
    sem = aio.Semaphore(zk, "/outside", 3)
    assert sem.node is None and sem.token is None and not sem.is_held and sem.state == "idle"
    assert sem.max_leases == 3 and "max_leases=3" in repr(sem)
    with pytest.raises(LockError, match="/outside: Semaphore released by a caller that does not hold it"):
        asyncio.run(sem.release())  # a task that holds nothing


# -- session loss ---------------------------------------------------------------------------------------
def test_session_expiry_makes_the_lease_lost_told_on_the_loop(zk_factory):
    path = "/expire"
    client = zk_factory(timeout=3.0)
    rival_client = zk_factory(timeout=3.0)

    async def body() -> None:
        sem = aio.Semaphore(client, path, 1)
        log = States(sem)
        assert await sem.acquire()
        await sem.check()
        await asyncio.get_running_loop().run_in_executor(None, expire_session, client)
        await asyncio.wait_for(sem.lost.wait(), 15)
        await log.wait_for("lost")
        assert set(log.threads) == {threading.get_ident()}
        assert sem.state == "lost" and not sem.is_held and sem.token is None
        with pytest.raises(LockLost):
            await sem.check()
        rival = aio.Semaphore(rival_client, path, 1)
        assert await rival.acquire(timeout=10)  # the lease went with the session
        await sem.release()  # deletes nothing of the rival's
        assert sem.state == "idle"
        assert rival.is_held and rival_client.exists(rival.node) is not None
        await rival.release()

    run(body)
