"""``lock.once(key)`` on the asyncio locks, on a real ensemble: the same markers as the threaded front
(they interoperate), done only on ``await run.done()`` and only while held, bad input refused before any
request, and no node left behind by a job that raises, a cancel or a timeout.

The job here is a coroutine; tests/test_once_per.py covers the CLI and the threaded API (TTL markers and
the fallback without TTL nodes), which run the same steps on the calling thread.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kazoo.client import KazooClient
from lockhelpers import children
from test_aio import run, until

from zkrecipes import FairLock as ThreadedFairLock
from zkrecipes import LockError, LockLost, LockTimeout, aio, once
from zkrecipes.aio.once import Once
from zkrecipes.testing import Ensemble, expire_session


def test_runs_once_marks_only_on_done_and_interoperates_with_threads(zk_factory):
    a, b = zk_factory(), zk_factory()

    async def body() -> None:
        async with aio.FairLock(a, "/job").once("k") as run:
            assert isinstance(run, Once) and run
            # no done(): the job "failed"
        async with aio.FairLock(b, "/job").once("k", keep=3600) as run:
            assert run
            await run.done()
            with pytest.raises(LockError, match="done already"):
                await run.done()
        async with aio.FairLock(a, "/job").once("k") as run:
            assert not run
        async with aio.ReadWriteLock(a, "/job").write().once("other") as run:  # one queue, same markers
            assert run
        async with aio.ExclusiveLock(a, "/x").once("k") as run:
            assert run

    run(body)
    assert a.exists("/job-done/k") is not None and children(a, "/job") == []
    with ThreadedFairLock(b, "/job").once("k") as threaded:  # a marker the asyncio front wrote
        assert not threaded
    with ThreadedFairLock(b, "/job").once("t") as threaded:
        threaded.done()

    async def later() -> None:
        async with aio.FairLock(a, "/job").once("t") as run:  # one the threaded front wrote
            assert not run

    run(later)


def test_racing_tasks_on_several_clients_run_the_job_once(zk_factory):
    clients = [zk_factory() for _ in range(4)]
    ran = []

    async def one(client: KazooClient) -> None:
        async with aio.FairLock(client, "/job").once("fire") as run:
            if run:
                ran.append(client)
                await asyncio.sleep(0.05)  # the others queue meanwhile
                await run.done()

    async def body() -> None:
        await asyncio.gather(*(one(c) for c in clients))

    run(body)
    assert len(ran) == 1
    assert children(clients[0], "/job") == []


def test_timeout_zero_tries_the_lock_once_and_still_looks(zk_factory):
    """``timeout=0`` is a non-blocking acquire: a free lock is taken and looked at (not timed out at once);
    a held one raises LockTimeout, nothing left behind. Both fronts."""
    a, b = zk_factory(), zk_factory()
    with ThreadedFairLock(a, "/job").once("k", timeout=0) as threaded:
        assert threaded

    async def body() -> None:
        async with aio.FairLock(a, "/job").once("k", timeout=0) as run:
            assert run
            with pytest.raises(LockTimeout):
                async with aio.FairLock(b, "/job").once("k", timeout=0):
                    pytest.fail("not held")

    run(body)
    assert children(a, "/job") == []


def test_look_by_hand_under_a_held_lock(zk):
    async def body() -> None:
        lock = aio.FairLock(zk, "/job")
        run = lock.once("k")
        with pytest.raises(LockError, match="not looked at yet"):
            bool(run)
        with pytest.raises(LockError, match="not held"):
            await run.look()  # the lock is not held: refused, nothing asked
        async with lock:
            assert await run.look()
            await run.done()
            assert not await run.look()

    run(body)
    assert zk.exists("/job-done/k") is not None


def test_bad_input_raises_at_the_call_before_any_request():
    client = KazooClient(hosts="127.0.0.1:1")  # never started: any request would raise

    async def body() -> None:
        lock = aio.FairLock(client, "/job")
        for key in ("", "a/b", ".", "..", "x" * 5000, 5):
            with pytest.raises((TypeError, ValueError), match="once key"):
                lock.once(key)  # type: ignore[arg-type]
        for keep in (0, -1, float("nan"), float("inf"), "1d", True):
            with pytest.raises((TypeError, ValueError), match="keep"):
                lock.once("k", keep)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            lock.once("k", timeout=-1)
        with pytest.raises(LockError, match="one process holds at a time"):
            aio.ReadWriteLock(client, "/job").read().once("k")
        with pytest.raises(LockError, match="one process holds at a time"):
            aio.Semaphore(client, "/job", 2).once("k")
        with pytest.raises(TypeError, match="lock.once"):
            Once(lock, "k")  # type: ignore[arg-type]  # (its driver comes from lock.once())

    run(body)
    assert not client.connected


def test_a_job_that_raises_leaves_the_key_open_and_no_node(zk):
    async def body() -> None:
        with pytest.raises(RuntimeError, match="job failed"):
            async with aio.FairLock(zk, "/job").once("k") as run:
                assert run
                raise RuntimeError("job failed")
        assert children(zk, "/job") == []
        async with aio.FairLock(zk, "/job").once("k") as run:
            assert run  # still open

    run(body)
    assert zk.exists("/job-done/k") is None and children(zk, "/job") == []


def test_done_is_fenced_by_the_hold(zk_factory):
    """A holder whose session expired before done() cannot mark the key: LockLost, and it stays open."""
    a, b = zk_factory(), zk_factory()

    async def body() -> None:
        with pytest.raises(LockLost):
            async with aio.FairLock(a, "/job").once("k") as run:
                assert run
                await asyncio.get_running_loop().run_in_executor(None, expire_session, a)
                await run.done()
        async with aio.FairLock(b, "/job").once("k") as run:
            assert run

    run(body)
    assert b.exists("/job-done/k") is None


def test_timeout_while_another_holds_raises_and_leaves_no_node(zk_factory):
    holder_client, waiter_client = zk_factory(), zk_factory()
    holder = ThreadedFairLock(holder_client, "/job")
    assert holder.acquire()

    async def body() -> None:
        t0 = time.monotonic()
        with pytest.raises(LockTimeout):
            async with aio.FairLock(waiter_client, "/job").once("k", timeout=0.5):
                pytest.fail("not held")
        assert time.monotonic() - t0 >= 0.5
        async def in_line() -> None:
            async with aio.FairLock(waiter_client, "/job").once("k"):
                pytest.fail("not held")

        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(in_line(), 0.3)  # a timeout around it: its task is cancelled

    try:
        run(body)
        assert children(holder_client, "/job") == [holder.node.rsplit("/", 1)[1]]
    finally:
        holder.release()
    assert holder_client.exists("/job-done/k") is None


def test_cancel_leaves_no_node_wherever_it_lands(zk_factory):
    """Tasks cancelled while they acquire, look, run the job or release: each releases what it took. The
    cancel lands after a varying number of loop turns (the acquire's create in flight), then a varying
    time after the hold was granted (the look's reads in flight), then inside the job."""
    holder_client, client = zk_factory(), zk_factory()

    async def body() -> None:
        lock = aio.FairLock(client, "/job")
        for i in range(41):
            started = asyncio.Event()

            async def job(started: asyncio.Event = started) -> None:
                async with lock.once("k") as run:
                    started.set()
                    if run:
                        await asyncio.sleep(3600)  # cut by the cancel: never done

            task = asyncio.create_task(job())
            if i < 10:
                for _ in range(i):
                    await asyncio.sleep(0)
            elif i < 40:
                while lock.state != "held" and not task.done():
                    await asyncio.sleep(0)
                await asyncio.sleep((i - 10) * 0.0002)
            else:
                await asyncio.wait_for(started.wait(), 10)  # the last one is cut inside the job
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert lock.state == "idle" and lock.node is None
        # an abandoned create is deleted when its reply comes: every reply is in once a later sync is answered
        await asyncio.get_running_loop().run_in_executor(None, client.sync, "/job")
        await until(lambda: children(client, "/job") == [], 10, "no node left")

    run(body)
    assert holder_client.exists("/job-done/k") is None


@pytest.fixture(scope="module")
def plain_ensemble():
    """One server without zookeeper.extendedTypesEnabled: it refuses TTL nodes."""
    with Ensemble(size=1, extended_types=False) as ens:
        yield ens


def test_without_ttl_nodes_stale_markers_are_swept(plain_ensemble):
    zk = KazooClient(hosts=plain_ensemble.hosts)
    zk.start(30)
    try:
        async def write(key: str, keep: float) -> None:
            async with aio.FairLock(zk, "/job").once(key, keep=keep) as run:
                assert run
                await run.done()

        run(lambda: write("old", 0.5))
        assert zk in once._no_ttl  # the server answered UnimplementedError: persistent markers
        run(lambda: write("kept", 3600))
        time.sleep(1.0)  # "old" is now older than its keep (the server shares this machine's clock)
        run(lambda: write("new", 0.5))  # its marking sweeps the stale markers (read pipelined)
        assert sorted(zk.get_children("/job-done")) == ["kept", "new"]
    finally:
        zk.stop()
        zk.close()
