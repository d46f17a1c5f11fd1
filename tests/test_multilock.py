"""MultiLock on a real ensemble, both fronts: all or none within one deadline, one global order (two
MultiLocks over the same paths in opposite orders neither deadlock nor overlap), release in reverse,
tokens, check() after a session loss, a transaction fenced by every hold, bad input refused before any
request, and Ctrl-C / task cancel leaving no node behind."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Awaitable, Callable, List

import pytest
from kazoo.exceptions import NoNodeError
from lockhelpers import Acquirer, children, wait_until

from zkrecipes import (
    ExclusiveLock,
    FairLock,
    LeaderElection,
    LockError,
    LockLost,
    LockTimeout,
    MultiLock,
    ReadWriteLock,
    Semaphore,
    aio,
)
from zkrecipes._drive import Driver
from zkrecipes.testing import expire_session


def run(coro_fn: Callable[[], Awaitable[Any]], timeout: float = 60.0) -> Any:
    """Run one test body on a fresh event loop, bounded by ``timeout``."""

    async def main() -> Any:
        return await asyncio.wait_for(coro_fn(), timeout)

    return asyncio.run(main())


def mixed(client, *paths: str) -> List[Any]:
    """One lock per path, of a different recipe each (fair, exclusive, a read side, a write side, a lease)."""
    makers = [
        lambda p: FairLock(client, p),
        lambda p: ExclusiveLock(client, p),
        lambda p: ReadWriteLock(client, p).read(),
        lambda p: ReadWriteLock(client, p).write(),
        lambda p: Semaphore(client, p, 2),
    ]
    return [makers[i % len(makers)](p) for i, p in enumerate(paths)]


def left_nodes(zk, paths) -> dict:
    return {p: children(zk, p) for p in paths}


# -- order, tokens, hold ---------------------------------------------------------------------------
def test_takes_all_in_path_order_whatever_the_list_gives_and_releases_all(zk):
    locks = mixed(zk, "/m/c", "/m/a", "/m/e", "/m/b", "/m/d")
    ml = MultiLock(locks)
    assert [lock.path for lock in ml.locks] == ["/m/a", "/m/b", "/m/c", "/m/d", "/m/e"]
    assert ml.acquire(timeout=10)
    assert ml.is_held and all(lock.is_held for lock in locks)
    tokens = ml.tokens
    assert list(tokens) == ["/m/a", "/m/b", "/m/c", "/m/d", "/m/e"]
    assert tokens == {lock.path: lock.token for lock in locks}
    for lock in locks:
        assert tokens[lock.path] == zk.exists(lock.node).czxid  # the czxid of each hold's own node
    ml.check()
    ml.release()
    assert not ml.is_held and all(lock.state == "idle" for lock in locks)
    assert ml.tokens == {p: None for p in tokens}
    assert left_nodes(zk, tokens) == {p: [] for p in tokens}


def test_with_and_hold_timeout(zk, zk_factory):
    ml = MultiLock([FairLock(zk, "/w/1"), FairLock(zk, "/w/2")])
    with ml as entered:
        assert entered is ml and ml.is_held
    assert not ml.is_held
    holder = Acquirer(FairLock(zk_factory(), "/w/2"), hold_until=threading.Event())
    assert holder.wait()
    with pytest.raises(LockTimeout, match="/w/2"):
        with ml.hold(timeout=0.3):
            pytest.fail("entered while /w/2 is held elsewhere")
    assert children(zk, "/w/1") == []
    holder._hold_until.set()
    assert holder.released.wait(10)
    with ml.hold(timeout=10):
        assert ml.is_held


# -- all or none -----------------------------------------------------------------------------------
@pytest.mark.parametrize("how", [{"timeout": 0.5}, {"blocking": False}, {"timeout": 0}])
def test_all_or_none_when_the_last_path_is_held_elsewhere(zk, zk_factory, how):
    other = zk_factory()
    holder = Acquirer(FairLock(other, "/n/3"), hold_until=threading.Event())
    assert holder.wait()
    locks = mixed(zk, "/n/1", "/n/2", "/n/3")
    ml = MultiLock(locks)
    assert ml.acquire(**how) is False
    assert not ml.is_held and all(lock.state == "idle" for lock in locks)
    assert children(zk, "/n/1") == [] and children(zk, "/n/2") == []
    assert children(zk, "/n/3") == [holder.node.rsplit("/", 1)[1]]
    ours = {lock.host for lock in locks}
    for lock in locks:
        assert [c for c in lock.contenders() if c.host in ours and c.node != holder.node.rsplit("/", 1)[1]] == []
    holder._hold_until.set()


def test_one_deadline_for_all_locks(zk, zk_factory):
    """/d/1 is freed while the MultiLock waits for it, /d/2 never is: acquire(timeout=2) asks /d/2 with
    what is left of the one deadline, not 2 s of its own, and does not give up before that deadline. Each
    lock's own run of its acquire steps is recorded (the deadline it was given, when it was called and
    returned), so the claim follows from the order of events, not from a margin on the wall clock."""
    release_first = threading.Event()
    first = Acquirer(FairLock(zk_factory(), "/d/1"), hold_until=release_first)
    second = Acquirer(FairLock(zk_factory(), "/d/2"), hold_until=threading.Event())
    assert first.wait() and second.wait()
    ml = MultiLock([FairLock(zk, "/d/2"), FairLock(zk, "/d/1")])
    calls: List[Any] = []  # (path, time left at the call, monotonic at the call, at its return, result, deadline)
    for lock in ml.locks:
        def recorded(steps, deadline=None, nowait=False, real=lock._run, path=lock.path):
            called = time.monotonic()
            got = real(steps, deadline, nowait)
            calls.append((path, deadline - called, called, time.monotonic(), got, deadline))
            return got
        lock._run = recorded

    def free_first() -> None:  # once the MultiLock's node is queued behind the first holder's
        wait_until(lambda: len(children(zk, "/d/1")) == 2, 15, "the MultiLock queued on /d/1")
        release_first.set()

    threading.Thread(target=free_first, daemon=True).start()
    began = time.monotonic()
    assert ml.acquire(timeout=2.0) is False
    ended = time.monotonic()
    (path1, left1, called1, returned1, got1, deadline1), (path2, left2, _, _, got2, deadline2) = calls
    assert (path1, got1, path2, got2) == ("/d/1", True, "/d/2", False)  # /d/1 taken, /d/2 missed
    assert deadline1 == deadline2  # one deadline, fixed once
    # the deadline was fixed no earlier than ``began`` and no later than /d/1's call; /d/2's share was
    # computed after /d/1's acquire returned: so at most 2 s less the time /d/1 took (a deadline of its
    # own would be the whole 2 s)
    assert left1 <= 2.0
    assert left2 <= 2.0 - (returned1 - called1), (left2, returned1 - called1)
    assert ended - began >= 2.0, f"gave up after {ended - began:.3f} s, before its deadline"
    assert first.released.wait(15)
    assert children(zk, "/d/1") == []  # taken, then given back
    second._hold_until.set()


def test_order_is_the_servers_path_the_clients_chroot_included(zk, zk_factory, zk_ensemble, zk_namespace):
    """Locks on clients with different chroots are ordered by the path the server sees: a MultiLock taking
    <ns>/z/a (client chrooted at /z, lock path /a) and <ns>/a/z (chrooted at /a, lock path /z) takes
    <ns>/a/z first, as one taking both by their full paths does -- so the two never wait in a cycle."""
    from kazoo.client import KazooClient

    zk.ensure_path("/z")
    zk.ensure_path("/a")
    chrooted = []
    try:
        for sub in ("/z", "/a"):
            c = KazooClient(hosts=zk_ensemble.hosts + zk_namespace + sub)
            c.start(30)
            chrooted.append(c)
        in_z, in_a = chrooted
        za, az = FairLock(in_z, "/a"), FairLock(in_a, "/z")  # the server's <ns>/z/a and <ns>/a/z
        ml = MultiLock([za, az])
        assert ml.locks == (az, za)  # by the lock paths alone, /a (that is <ns>/z/a) would come first
        full = MultiLock([FairLock(zk, "/z/a"), FairLock(zk, "/a/z")])
        assert [lock.path for lock in full.locks] == ["/a/z", "/z/a"]  # the same znodes, the same order

        # taken in that order: with <ns>/a/z held elsewhere, the MultiLock waits there holding nothing
        holder = Acquirer(FairLock(zk_factory(), "/a/z"), hold_until=threading.Event())
        assert holder.wait()
        held, release = threading.Event(), threading.Event()
        result: List[Any] = []

        def take() -> None:
            result.append(ml.acquire(timeout=30))
            held.set()
            release.wait(30)
            if result[0]:
                ml.release()

        t = threading.Thread(target=take, daemon=True)
        t.start()
        wait_until(lambda: len(children(zk, "/a/z")) == 2, 15, "the MultiLock queued on <ns>/a/z")
        assert children(zk, "/z/a") == []  # nothing taken before it: a full-path MultiLock cannot wait on us
        holder._hold_until.set()
        assert held.wait(30) and result == [True]
        assert len(children(zk, "/z/a")) == 1 and len(children(zk, "/a/z")) == 1
        release.set()
        t.join(30)
        assert children(zk, "/z/a") == [] and children(zk, "/a/z") == []
    finally:
        for c in chrooted:
            c.stop()
            c.close()


# -- one global order: no deadlock, no overlap ----------------------------------------------------
def test_opposite_orders_from_two_clients_never_deadlock_nor_overlap(zk_factory):
    rounds = 40
    inside: List[str] = []
    guard = threading.Lock()
    overlaps: List[Any] = []
    done: List[int] = []
    errors: List[BaseException] = []

    def worker(name: str, paths: List[str]) -> None:
        client = zk_factory()
        ml = MultiLock([FairLock(client, paths[0]), ExclusiveLock(client, paths[1])]
                       if paths[0] == "/o/x" else [ExclusiveLock(client, paths[0]), FairLock(client, paths[1])])
        try:
            for _ in range(rounds):
                with ml:
                    with guard:
                        inside.append(name)
                        if len(inside) > 1:
                            overlaps.append(list(inside))
                    time.sleep(0.001)  # (widens the window an overlap would show in)
                    with guard:
                        inside.remove(name)
            done.append(rounds)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=("a", ["/o/x", "/o/y"]), daemon=True),
               threading.Thread(target=worker, args=("b", ["/o/y", "/o/x"]), daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads), "the two MultiLocks deadlocked"
    assert not errors, errors
    assert done == [rounds, rounds] and overlaps == []


def test_aio_opposite_orders_from_two_clients_never_deadlock_nor_overlap(zk_factory):
    rounds = 30
    c1, c2 = zk_factory(), zk_factory()

    async def body() -> None:
        inside: List[str] = []
        overlaps: List[Any] = []

        async def worker(name: str, ml: aio.MultiLock) -> int:
            for _ in range(rounds):
                async with ml:
                    inside.append(name)
                    if len(inside) > 1:
                        overlaps.append(list(inside))
                    await asyncio.sleep(0.001)  # (another task runs meanwhile: an overlap would show)
                    inside.remove(name)
            return rounds

        a = aio.MultiLock([aio.FairLock(c1, "/ao/x"), aio.FairLock(c1, "/ao/y")])
        b = aio.MultiLock([aio.FairLock(c2, "/ao/y"), aio.FairLock(c2, "/ao/x")])
        got = await asyncio.wait_for(asyncio.gather(worker("a", a), worker("b", b)), 90)
        assert got == [rounds, rounds] and overlaps == []

    run(body, 120)


# -- release in reverse ---------------------------------------------------------------------------
def test_release_deletes_the_nodes_in_reverse_order(zk, zk_factory):
    ml = MultiLock(mixed(zk, "/r/b", "/r/c", "/r/a"))
    assert ml.acquire(timeout=10)
    nodes = [lock.node for lock in ml.locks]
    watcher = zk_factory()
    deleted: List[str] = []
    for node in nodes:
        assert watcher.exists(node, watch=lambda event: deleted.append(event.path)) is not None
    ml.release()
    wait_until(lambda: len(deleted) == 3, 10, "three deletions seen")
    assert deleted == list(reversed(nodes))


def test_release_goes_on_past_a_lock_that_raises(zk):
    a, b = FairLock(zk, "/rr/a"), FairLock(zk, "/rr/b")
    ml = MultiLock([a, b])
    assert ml.acquire(timeout=10)
    b.release()  # released behind the MultiLock's back: its release raises, a's still happens
    with pytest.raises(LockError, match="/rr/b"):
        ml.release()
    assert not a.is_held and children(zk, "/rr/a") == []


def test_release_from_another_thread_raises_and_takes_nothing(zk):
    """The holds are the acquiring thread's: release() from another thread raises LockError naming a lock,
    and every node stays; the holder's own release then frees them all."""
    ml = MultiLock([FairLock(zk, "/rt/1"), ExclusiveLock(zk, "/rt/2"), Semaphore(zk, "/rt/3", 2)])
    held, done = threading.Event(), threading.Event()
    seen: List[Any] = []

    def holder() -> None:
        assert ml.acquire(timeout=30)
        held.set()
        done.wait(30)
        seen.append(ml.is_held)
        ml.release()
        seen.append(ml.is_held)

    t = threading.Thread(target=holder, daemon=True)
    t.start()
    assert held.wait(30)
    nodes = {p: children(zk, p) for p in ("/rt/1", "/rt/2", "/rt/3")}
    assert all(len(n) == 1 for n in nodes.values()), nodes
    assert not ml.is_held  # not this thread's
    with pytest.raises(LockError, match="/rt/"):
        ml.release()
    assert {p: children(zk, p) for p in nodes} == nodes  # nothing released
    done.set()
    t.join(30)
    assert seen == [True, False]  # still the holder's, then released by it
    assert all(children(zk, p) == [] for p in nodes)


def test_aio_release_from_another_task_raises_and_takes_nothing(zk):
    async def body() -> None:
        ml = aio.MultiLock([aio.FairLock(zk, "/ra/1"), aio.FairLock(zk, "/ra/2")])
        held, done = asyncio.Event(), asyncio.Event()

        async def holder() -> bool:
            assert await ml.acquire(timeout=30)
            held.set()
            await done.wait()
            still = ml.is_held
            await ml.release()
            return still

        task = asyncio.ensure_future(holder())
        await asyncio.wait_for(held.wait(), 30)
        nodes = {p: children(zk, p) for p in ("/ra/1", "/ra/2")}
        assert all(len(n) == 1 for n in nodes.values()), nodes
        with pytest.raises(LockError, match="/ra/"):
            await ml.release()  # this task holds nothing
        assert {p: children(zk, p) for p in nodes} == nodes
        done.set()
        assert await asyncio.wait_for(task, 30) is True
        assert all(children(zk, p) == [] for p in nodes)

    run(body)


# -- check, loss, fenced transaction ---------------------------------------------------------------
def test_check_names_the_lock_whose_session_expired(zk, zk_factory):
    other = zk_factory()
    ml = MultiLock([FairLock(zk, "/s/1"), FairLock(other, "/s/2")])
    assert ml.acquire(timeout=10)
    ml.check()
    with pytest.raises(LockError, match="2 clients"):
        ml.transaction()
    expire_session(other)
    with pytest.raises(LockLost, match="/s/2"):
        ml.check()
    assert not ml.is_held
    ml.release()  # the lost hold is only forgotten; the live one is released
    assert children(zk, "/s/1") == []


def test_transaction_is_fenced_by_every_hold(zk, zk_factory):
    ml = MultiLock([FairLock(zk, "/t/2"), ExclusiveLock(zk, "/t/1")])
    assert ml.acquire(timeout=10)
    zk.ensure_path("/t/data")
    tx = ml.transaction()
    tx.set_data("/t/data", b"one")
    [stat] = tx.commit()
    assert stat == zk.exists("/t/data")
    assert zk.get("/t/data")[0] == b"one"

    # the second hold's node is deleted behind our back: the commit applies nothing
    intruder = zk_factory()
    second = ml.locks[1].node
    tx = ml.transaction()
    tx.set_data("/t/data", b"two")
    tx.create("/t/created")
    intruder.delete(second)
    with pytest.raises(LockLost, match="/t/2"):
        tx.commit()
    assert zk.get("/t/data")[0] == b"one"
    with pytest.raises(NoNodeError):
        zk.get("/t/created")
    ml.release()
    assert children(zk, "/t/1") == [] and children(zk, "/t/2") == []


def test_transaction_refused_for_a_lock_not_held(zk):
    ml = MultiLock([FairLock(zk, "/tn/1"), FairLock(zk, "/tn/2")])
    with pytest.raises(LockError, match="/tn/1"):
        ml.transaction()


# -- bad input: refused before any request ---------------------------------------------------------
def test_bad_input_is_refused_before_any_request(zk, zk_factory):
    other = zk_factory()
    fair = FairLock(zk, "/b/1")
    rw = ReadWriteLock(zk, "/b/2")
    cases = [
        ([], ValueError, "empty"),
        ([fair, fair], ValueError, "given twice"),
        ([fair, FairLock(other, "/b/1")], ValueError, "/b/1"),
        ([rw.read(), rw.write()], ValueError, "/b/2"),
        ([fair, "not a lock"], TypeError, "not a lock"),
        ([fair, 42], TypeError, "42"),
        ([fair, rw], TypeError, "read\\(\\) or write\\(\\)"),
        ([fair, LeaderElection(zk, "/b/3")], TypeError, "LeaderElection"),
        ([fair, aio.FairLock(zk, "/b/4")], TypeError, "zkrecipes.aio"),
        ("/b/1", TypeError, "list"),
        (fair, TypeError, "list"),
    ]
    for locks, error, words in cases:
        with pytest.raises(error, match=words):
            MultiLock(locks)
    with pytest.raises(TypeError, match="threaded"):
        aio.MultiLock([aio.FairLock(zk, "/b/5"), fair])
    ml = MultiLock([fair, FairLock(zk, "/b/6")])
    with pytest.raises(ValueError, match="timeout"):
        ml.acquire(blocking=False, timeout=1)
    with pytest.raises((ValueError, TypeError)):
        ml.acquire(timeout=-1)
    with pytest.raises(TypeError):
        ml.acquire(blocking="yes")  # type: ignore[arg-type]
    assert zk.exists("/b") is None  # not a node was made


# -- Ctrl-C and cancel -----------------------------------------------------------------------------
def test_ctrl_c_while_waiting_for_the_second_lock_leaves_no_node(zk, zk_factory, monkeypatch):
    holder = Acquirer(FairLock(zk_factory(), "/k/2"), hold_until=threading.Event())
    assert holder.wait()
    locks = [FairLock(zk, "/k/2"), FairLock(zk, "/k/1")]
    ml = MultiLock(locks)

    def interrupted(self, op):  # the wait for the holder's node to go, hit by Ctrl-C
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(Driver, "_sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ml.acquire(timeout=10)
    monkeypatch.undo()
    assert all(lock.state == "idle" for lock in locks)
    assert children(zk, "/k/1") == []  # taken first, then released
    assert children(zk, "/k/2") == [holder.node.rsplit("/", 1)[1]]
    holder._hold_until.set()
    assert ml.acquire(timeout=10)  # nothing stuck
    ml.release()


def test_aio_all_or_none_tokens_check_and_transaction(zk, zk_factory):
    other = zk_factory()

    async def body() -> None:
        held = aio.FairLock(other, "/ac/3")
        assert await held.acquire()
        locks = [aio.FairLock(zk, "/ac/3"), aio.ExclusiveLock(zk, "/ac/1"), aio.ReadWriteLock(zk, "/ac/2").read()]
        ml = aio.MultiLock(locks)
        assert [lock.path for lock in ml.locks] == ["/ac/1", "/ac/2", "/ac/3"]
        assert await ml.acquire(timeout=0.3) is False
        assert children(zk, "/ac/1") == [] and children(zk, "/ac/2") == []
        await held.release()
        # asyncio.wait_for runs the acquire in a task of its own on Python <= 3.11: the holds are still ours
        assert await asyncio.wait_for(ml.acquire(), 10)
        assert ml.is_held
        assert ml.tokens == {lock.path: lock.token for lock in ml.locks}
        await ml.check()
        zk.ensure_path("/ac/data")
        tx = ml.transaction()
        tx.set_data("/ac/data", b"x")
        await tx.commit()
        assert zk.get("/ac/data")[0] == b"x"
        await ml.release()
        assert not ml.is_held and all(children(zk, f"/ac/{i}") == [] for i in (1, 2, 3))
        with pytest.raises(LockError):
            await ml.check()

    run(body)


def test_aio_check_names_the_lock_whose_session_expired(zk, zk_factory):
    other = zk_factory()

    async def body() -> None:
        ml = aio.MultiLock([aio.FairLock(zk, "/ae/1"), aio.FairLock(other, "/ae/2")])
        async with ml:
            await asyncio.get_running_loop().run_in_executor(None, expire_session, other)
            with pytest.raises(LockLost, match="/ae/2"):
                await ml.check()
        assert children(zk, "/ae/1") == []

    run(body)


def test_aio_cancel_while_waiting_for_the_second_lock_leaves_no_node(zk, zk_factory):
    other = zk_factory()

    async def body() -> None:
        held = aio.FairLock(other, "/ak/2")
        assert await held.acquire()
        ml = aio.MultiLock([aio.FairLock(zk, "/ak/2"), aio.FairLock(zk, "/ak/1")])
        task = asyncio.ensure_future(ml.acquire())
        deadline = time.monotonic() + 10
        while len(children(zk, "/ak/2")) < 2:  # our node queued behind the holder's: waiting
            assert time.monotonic() < deadline, "never queued on /ak/2"
            await asyncio.sleep(0.01)
        assert len(children(zk, "/ak/1")) == 1  # the first lock is held
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert children(zk, "/ak/1") == []
        assert children(zk, "/ak/2") == [held.node.rsplit("/", 1)[1]]
        await held.release()
        async with ml.hold(timeout=10):
            assert ml.is_held

    run(body)
