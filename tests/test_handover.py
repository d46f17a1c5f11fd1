"""Hand-over (issue 38): with ``owner="object"`` a hold belongs to the lock object, as in kazoo,
``threading.Lock`` and ``asyncio.Lock``: any thread or task may release, check or read it; another acquire
of the same object waits its turn (a try or a timeout returns False, issue 46); each object is a node of
its own; no reaper applies; a collected object's hold is released."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from typing import Any, Callable, List

import pytest
from kazoo.client import KazooClient
from lockhelpers import RECIPES, children, wait_until

import zkrecipes
from zkrecipes import FairLock, LockError, ReadWriteLock, Semaphore, _reaper, aio


def _on_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a thread of its own that ends before this returns; its result (or its exception)."""
    out: List[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # raised in the caller
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the thread did not end"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


@pytest.mark.parametrize("name", ["fair", "exclusive", "rw-write", "rw-read", "semaphore-1"])
def test_a_hold_taken_on_one_thread_is_released_on_another(zk, name):
    path = f"/handover-{name}"
    lock = RECIPES[name](zk, path, owner="object")
    assert _on_thread(lambda: lock.acquire(timeout=10)) is True  # the acquiring thread ends here
    (node,) = children(zk, path)
    _reaper.reap_ended()  # what the reaper thread does each second: an object's hold is no thread's
    other = RECIPES[name](zk, path)
    if other.acquire(blocking=False):  # another object's acquire reaps this gate too (a reader joins)
        other.release()
    assert children(zk, path)[0] == node and lock.is_held and lock.state == "held"
    assert lock.node == f"{path}/{node}" and lock.token == zk.exists(lock.node).czxid
    lock.check()
    _on_thread(lock.check)
    assert _on_thread(lambda: (lock.is_held, lock.token)) == (True, lock.token)
    lock.release()  # the main thread never acquired it
    assert lock.state == "idle" and not lock.is_held and lock.token is None and lock.node is None
    assert children(zk, path) == []
    with pytest.raises(LockError, match=path):
        lock.release()  # released already


def _line(lock: Any) -> Any:
    """The callers of ``lock`` (object-owned) waiting for it at its own gate."""
    return lock._gate_for(lock._by_object).line


@pytest.mark.parametrize("name", ["fair", "exclusive", "rw-write", "rw-read", "semaphore-1"])
def test_a_second_acquire_of_the_object_waits_its_turn(zk, name):
    """threading.Lock's semantics: a try and a timed acquire return False, leaving nothing; a blocking
    acquire from another thread waits (no node of its own meanwhile) and gets the lock once it is
    released, from any thread."""
    path = f"/again-{name}"
    lock = RECIPES[name](zk, path, owner="object")
    assert lock.acquire()
    (node,), first = children(zk, path), lock.token
    assert lock.acquire(blocking=False) is False
    assert lock.acquire(timeout=0.2) is False
    assert _on_thread(lambda: lock.acquire(timeout=0)) is False
    assert children(zk, path) == [node] and lock.is_held and not _line(lock)
    got: List[bool] = []
    waiter = threading.Thread(target=lambda: got.append(lock.acquire(timeout=30)))
    waiter.start()
    wait_until(lambda: _line(lock), 10, "the second acquire waits at the object's gate")
    assert children(zk, path) == [node] and got == []  # it waits without a node of its own
    _on_thread(lock.release)  # one release ends the hold: no level was counted
    waiter.join(30)
    assert got == [True] and lock.is_held and lock.token > first and len(children(zk, path)) == 1  # a new node
    lock.release()
    assert children(zk, path) == [] and not _line(lock)
    with lock:  # the object is free again
        assert lock.is_held


def test_the_holding_thread_may_wait_for_a_release_by_another(zk):
    """Not a certain deadlock, so no LockError: as with threading.Lock, the holding thread's own blocking
    acquire waits until another thread releases."""
    lock = FairLock(zk, "/self-wait", owner="object")
    assert lock.acquire()
    first = lock.token
    releaser = threading.Thread(target=lambda: (wait_until(lambda: _line(lock), 10, "the holder waits"),
                                                lock.release()))
    releaser.start()
    assert lock.acquire(timeout=30) is True
    releaser.join(10)
    assert lock.is_held and lock.token is not None and lock.token > first
    lock.release()
    assert children(zk, "/self-wait") == []


def test_a_try_during_an_acquire_in_flight_returns_false(zk, zk_factory):
    holder = FairLock(zk_factory(), "/inflight")
    assert holder.acquire()
    lock = FairLock(zk, "/inflight", owner="object")
    waiting = threading.Thread(target=lambda: lock.acquire(timeout=30), daemon=True)
    waiting.start()
    wait_until(lambda: lock.state == "waiting", 10, "the first acquire waits")
    assert lock.acquire(blocking=False) is False  # the object is taken (by the acquire in flight)
    assert lock.acquire(timeout=0.2) is False
    assert len(children(zk, "/inflight")) == 2 and not _line(lock)  # the holder's and the first acquire's
    lock.cancel()
    waiting.join(10)
    assert not waiting.is_alive() and lock.state == "idle"
    assert len(children(zk, "/inflight")) == 1  # the holder's node only: the cancelled one is gone
    holder.release()


@pytest.mark.parametrize("how", ["timeout", "cancel", "ctrl-c"])
def test_leaving_the_local_wait_leaves_nothing(zk, monkeypatch, how):
    """A caller that stops waiting for the object (its timeout, cancel(), Ctrl-C) leaves no place in the
    line and no node; the hold is untouched and the object usable."""
    from zkrecipes._drive import Driver

    lock = FairLock(zk, f"/leave-{how}", owner="object")
    assert lock.acquire()
    node = lock.node
    if how == "timeout":
        assert lock.acquire(timeout=0.3) is False
    elif how == "cancel":
        got: List[bool] = []
        waiter = threading.Thread(target=lambda: got.append(lock.acquire(timeout=30)))
        waiter.start()
        wait_until(lambda: _line(lock), 10, "the second acquire waits")
        lock.cancel()
        waiter.join(10)
        assert got == [False]
    else:
        def interrupted(self: Any) -> None:  # Ctrl-C while waiting at the gate
            raise KeyboardInterrupt

        monkeypatch.setattr(Driver, "check", interrupted)
        with pytest.raises(KeyboardInterrupt):
            lock.acquire(timeout=10)
        monkeypatch.undo()
    assert not _line(lock) and lock.node == node and lock.is_held and children(zk, lock.path) == [node.rsplit("/")[-1]]
    lock.release()
    assert lock.acquire(timeout=10)  # not "already acquiring"
    lock.release()
    assert children(zk, lock.path) == []


def test_threads_sharing_one_object_take_turns(zk):
    """kazoo's usual pattern: worker threads share one lock object; each ``with lock:`` waits its turn."""
    lock = FairLock(zk, "/shared-object", owner="object")
    inside, overlaps, done = [0], [], []
    barrier = threading.Barrier(8)

    def work() -> None:
        barrier.wait(10)
        for _ in range(3):
            with lock:
                inside[0] += 1
                overlaps.append(inside[0])
                inside[0] -= 1
        done.append(1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(done) == 8 and overlaps == [1] * 24
    assert children(zk, "/shared-object") == [] and not _line(lock)


def test_kazoo_expectations_two_objects_of_one_thread_wait_and_any_thread_releases(zk):
    """kazoo's lock tests, run through an adapter, expect: a second lock object's acquire by the thread
    that holds the first waits (and times out), as a node of its own, and the first's release may come
    from another thread."""
    first = FairLock(zk, "/kazoo-like", owner="object", identifier="first")
    second = FairLock(zk, "/kazoo-like", owner="object", identifier="second")
    assert first.acquire()
    assert second.acquire(timeout=0.3) is False  # waits its turn: not re-entered
    assert second.acquire(blocking=False) is False
    assert len(children(zk, "/kazoo-like")) == 1
    got: List[bool] = []
    t = threading.Thread(target=lambda: got.append(second.acquire(timeout=20)))
    t.start()
    wait_until(lambda: second.state == "waiting", 10, "the second object waits (in ZooKeeper)")
    assert [c.identifier for c in first.contenders()] == ["first", "second"]  # each object is a contender
    _on_thread(first.release)  # a release from a third thread hands the lock to the waiter
    t.join(20)
    assert got == [True] and second.is_held and not first.is_held
    second.release()
    assert children(zk, "/kazoo-like") == []


def test_a_collected_object_releases_its_hold_with_a_warning(zk, caplog):
    lock = FairLock(zk, "/collected", owner="object")
    assert lock.acquire()
    node = lock.node
    other = FairLock(zk, "/collected")  # a thread-owned object of the same gate
    with caplog.at_level(logging.WARNING, logger="zkrecipes"):
        del lock
        gc.collect()
        wait_until(lambda: zk.exists(node) is None, 10, "the collected object's node deleted")
        wait_until(lambda: any(node in r.getMessage() and "garbage-collected" in r.getMessage()
                               for r in caplog.records), 5, "a warning naming the node")
    assert other.acquire(timeout=10)  # the gate is free again
    other.release()


def test_a_timeout_or_cancel_leaves_no_node_and_the_object_usable(zk, zk_factory):
    holder = FairLock(zk_factory(), "/timeout")
    assert holder.acquire()
    lock = FairLock(zk, "/timeout", owner="object")
    assert lock.acquire(timeout=0.3) is False
    assert len(children(zk, "/timeout")) == 1 and lock.state == "idle"
    holder.release()
    assert lock.acquire(timeout=10)
    lock.release()


def test_transaction_from_another_thread(zk):
    lock = FairLock(zk, "/tx", owner="object")
    zk.create("/tx-data", b"0")
    assert _on_thread(lock.acquire)

    def write() -> None:
        tx = lock.transaction()
        tx.set_data("/tx-data", b"1")
        tx.commit()

    _on_thread(write)
    assert zk.get("/tx-data")[0] == b"1"
    lock.release()


def test_read_write_pair_with_object_owners(zk):
    """Each side is its own owner: no downgrade. A read asked for while the same pair's write side holds
    waits (as kazoo's ReadLock does) until the write side is released, from any thread."""
    rw = ReadWriteLock(zk, "/rw", owner="object")
    assert rw.write().acquire()
    assert rw.read().acquire(timeout=0.3) is False
    reader = threading.Thread(target=lambda: rw.read().acquire(timeout=20))
    reader.start()
    wait_until(lambda: rw.read().state == "waiting", 10, "the read side waits (its node behind the write side's)")
    rw.write().release()
    reader.join(20)
    assert rw.read().is_held and not rw.write().is_held
    assert rw.write().acquire(timeout=0.3) is False  # the read side holds: the write side waits
    _on_thread(rw.read().release)
    assert children(zk, "/rw") == []


def test_a_semaphore_object_holds_one_lease_of_its_own(zk):
    a, b = Semaphore(zk, "/sem-obj", 3, owner="object"), Semaphore(zk, "/sem-obj", 3, owner="object")
    assert a.acquire() and b.acquire()  # one thread, two objects: two leases (two nodes)
    assert len(children(zk, "/sem-obj")) == 2 and a.node != b.node
    assert a.acquire(blocking=False) is False  # its own lease is taken: it waits its turn, no second lease
    assert len(children(zk, "/sem-obj")) == 2
    _on_thread(a.release)
    _on_thread(b.release)
    assert children(zk, "/sem-obj") == []


@pytest.mark.parametrize("make", [
    lambda c, o: FairLock(c, "/p", owner=o),
    lambda c, o: zkrecipes.ExclusiveLock(c, "/p", owner=o),
    lambda c, o: ReadWriteLock(c, "/p", owner=o),
    lambda c, o: Semaphore(c, "/p", 2, owner=o),
    lambda c, o: aio.FairLock(c, "/p", owner=o),
    lambda c, o: aio.ReadWriteLock(c, "/p", owner=o),
    lambda c, o: aio.Semaphore(c, "/p", 2, owner=o),
])
def test_a_bad_owner_is_refused_before_any_request(make):
    client = KazooClient(hosts="127.0.0.1:1")  # never started: a request would fail differently
    try:
        for bad in ("objects", "", 1):
            with pytest.raises(ValueError, match=repr(bad)):
                make(client, bad)
        make(client, "object")
        make(client, None)
    finally:
        client.close()


def test_each_front_accepts_its_own_default_word():
    client = KazooClient(hosts="127.0.0.1:1")
    try:
        FairLock(client, "/p", owner="thread")
        aio.FairLock(client, "/p", owner="task")
        with pytest.raises(ValueError, match="'task'"):
            FairLock(client, "/p", owner="task")
        with pytest.raises(ValueError, match="'thread'"):
            aio.FairLock(client, "/p", owner="thread")
    finally:
        client.close()


# -- asyncio -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda zk, p: aio.FairLock(zk, p, owner="object"),
    lambda zk, p: aio.ExclusiveLock(zk, p, owner="object"),
    lambda zk, p: aio.ReadWriteLock(zk, p, owner="object").read(),
    lambda zk, p: aio.Semaphore(zk, p, 1, owner="object"),
], ids=["fair", "exclusive", "rw-read", "semaphore-1"])
def test_aio_acquired_in_one_task_released_in_another(zk, make):
    lock = make(zk, "/aio-handover")

    async def main() -> None:
        assert await asyncio.create_task(lock.acquire(timeout=10))  # that task ends holding
        await asyncio.sleep(0)  # its done callbacks have run: no ended-task release applies
        (node,) = children(zk, "/aio-handover")
        assert lock.is_held and lock.node.endswith(node)

        async def other() -> None:
            assert lock.is_held and lock.token == zk.exists(lock.node).czxid
            await lock.check()
            assert await lock.acquire(blocking=False) is False  # a second acquire of the object: a try
            assert await lock.acquire(timeout=0.2) is False  # and a timed one return False
            waiter = asyncio.create_task(lock.acquire())  # a blocking one waits its turn
            while not _line(lock):
                await asyncio.sleep(0.01)
            assert children(zk, "/aio-handover") == [node]
            first = lock.token
            await lock.release()
            assert await asyncio.wait_for(waiter, 20) is True
            assert lock.is_held and lock.token > first  # a node of its own, after the first one's delete
            await lock.release()

        await asyncio.create_task(other())
        assert not lock.is_held and lock.state == "idle"
        with pytest.raises(LockError, match="/aio-handover"):
            await lock.release()

    asyncio.run(main())
    assert children(zk, "/aio-handover") == []


def test_aio_a_cancelled_acquire_leaves_no_node_and_a_collected_object_is_released(zk, zk_factory, caplog):
    holder = FairLock(zk_factory(), "/aio-cancel")
    assert holder.acquire()

    async def main() -> None:
        lock = aio.FairLock(zk, "/aio-cancel", owner="object")
        task = asyncio.create_task(lock.acquire())
        while lock.state != "waiting":
            await asyncio.sleep(0.01)
        assert await lock.acquire(blocking=False) is False  # in flight in another task
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(children(zk, "/aio-cancel")) == 1
        holder.release()
        async with lock:
            node = lock.node
        assert await lock.acquire()
        node = lock.node
        del lock
        gc.collect()
        return node

    with caplog.at_level(logging.WARNING, logger="zkrecipes"):
        node = asyncio.run(main())
        wait_until(lambda: zk.exists(node) is None, 10, "the collected object's node deleted")
        wait_until(lambda: any(node in r.getMessage() for r in caplog.records), 5, "a warning naming the node")


def test_ctrl_c_while_waiting_leaves_no_node_and_the_object_free(zk, zk_factory, monkeypatch):
    from zkrecipes._drive import Driver

    holder = FairLock(zk_factory(), "/ctrl-c")
    assert holder.acquire()
    lock = FairLock(zk, "/ctrl-c", owner="object")

    def interrupted(self: Any, op: Any) -> Any:  # the wait for the holder's node to go, hit by Ctrl-C
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(Driver, "_sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        lock.acquire(timeout=10)
    monkeypatch.undo()
    assert len(children(zk, "/ctrl-c")) == 1 and lock.state == "idle"
    holder.release()
    assert lock.acquire(timeout=10)  # not "already acquiring"
    lock.release()


def test_aio_tasks_sharing_one_object_take_turns_and_a_cancelled_waiter_leaves_nothing(zk):
    """asyncio.Lock's semantics: tasks sharing one object-owned lock take turns; a task cancelled while it
    waits for the object leaves no place in the line and no node."""
    lock = aio.FairLock(zk, "/aio-shared", owner="object")

    async def main() -> None:
        inside, overlaps = [0], []

        async def work() -> None:
            for _ in range(3):
                async with lock:
                    inside[0] += 1
                    overlaps.append(inside[0])
                    await asyncio.sleep(0.001)  # the others run meanwhile: they must be waiting
                    inside[0] -= 1

        await asyncio.wait_for(asyncio.gather(*(work() for _ in range(6))), 60)
        assert overlaps == [1] * 18
        assert await lock.acquire()
        (node,) = children(zk, "/aio-shared")
        waiter = asyncio.create_task(lock.acquire())
        while not _line(lock):
            await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not _line(lock) and lock.is_held and children(zk, "/aio-shared") == [node]
        await lock.release()

    asyncio.run(main())
    assert children(zk, "/aio-shared") == []
