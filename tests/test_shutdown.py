"""Stopping a KazooClient ends every wait on it (both fronts, every recipe); a stopped or never-started
client is refused before any request; holders on a stopped client see LOST."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kazoo.exceptions import ConnectionClosedError
from lockhelpers import children, full_path, wait_until

from zkrecipes import ClientClosed, ExclusiveLock, FairLock, LeaderElection, ReadWriteLock, Semaphore, aio

WAKE_BOUND = 5.0  # wide: the target (about a second) is measured, not asserted

# name -> (make a holder/waiter on (client, path), how it waits: its acquire or campaign)
THREADED = {
    "fair": lambda zk, p: FairLock(zk, p),
    "exclusive": lambda zk, p: ExclusiveLock(zk, p),
    "rw-write": lambda zk, p: ReadWriteLock(zk, p).write(),
    "semaphore": lambda zk, p: Semaphore(zk, p, 1),
    "election": lambda zk, p: LeaderElection(zk, p),
}
ASYNC = {
    "fair": lambda zk, p: aio.FairLock(zk, p),
    "exclusive": lambda zk, p: aio.ExclusiveLock(zk, p),
    "rw-write": lambda zk, p: aio.ReadWriteLock(zk, p).write(),
    "semaphore": lambda zk, p: aio.Semaphore(zk, p, 1),
    "election": lambda zk, p: aio.LeaderElection(zk, p),
}


def _wait_call(obj):
    return obj.campaign if hasattr(obj, "campaign") else obj.acquire


def _queued(zk, other, path: str, recipe: str) -> bool:
    """The waiter sleeps: its node is queued (an ExclusiveLock waiter makes none: it watches the one node)."""
    if recipe == "exclusive":
        full = full_path(other, path)
        return any(fns and (p == full or p.startswith(full + "/")) for p, fns in list(other._data_watchers.items()))
    return len(children(zk, path)) == 2


def _node_count_back_to_one(zk, path: str) -> None:
    wait_until(lambda: len(children(zk, path)) == 1, WAKE_BOUND, f"only the holder's node under {path}")


@pytest.mark.parametrize("recipe", sorted(THREADED))
def test_stop_wakes_threaded_waiter(zk, zk_factory, recipe):
    path = f"/stop-{recipe}"
    holder = THREADED[recipe](zk, path)
    assert _wait_call(holder)()
    other = zk_factory()
    waiter = THREADED[recipe](other, path)
    out: dict = {}

    def wait() -> None:
        try:
            out["result"] = _wait_call(waiter)()
        except BaseException as exc:
            out["error"] = exc
        out["at"] = time.monotonic()

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    wait_until(lambda: _queued(zk, other, path, recipe), 30, "the waiter sleeps")
    stopped = time.monotonic()
    other.stop()
    t.join(WAKE_BOUND)
    assert not t.is_alive(), "the waiter still waits after stop()"
    err = out.get("error")
    assert isinstance(err, ClientClosed) and isinstance(err, ConnectionClosedError), out
    assert path in str(err)
    print(f"\n{recipe} (threads): woke {out['at'] - stopped:.3f} s after stop()")
    _node_count_back_to_one(zk, path)


@pytest.mark.parametrize("recipe", sorted(ASYNC))
def test_stop_wakes_async_waiter(zk, zk_factory, recipe):
    path = f"/astop-{recipe}"
    holder = THREADED[recipe](zk, path)
    assert _wait_call(holder)()
    other = zk_factory()

    async def main() -> float:
        waiter = ASYNC[recipe](other, path)
        task = asyncio.ensure_future(_wait_call(waiter)())
        deadline = time.monotonic() + 30
        while not await asyncio.get_running_loop().run_in_executor(None, _queued, zk, other, path, recipe):
            assert time.monotonic() < deadline, "the waiter never queued"
            await asyncio.sleep(0.05)
        stopped = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(None, other.stop)
        with pytest.raises(ClientClosed, match=path):
            await asyncio.wait_for(task, WAKE_BOUND)
        return time.monotonic() - stopped

    took = asyncio.run(main())
    print(f"\n{recipe} (asyncio): woke {took:.3f} s after stop()")
    _node_count_back_to_one(zk, path)


@pytest.mark.parametrize("recipe", sorted(THREADED))
def test_stopped_or_unstarted_client_refused(zk_factory, recipe):
    never = zk_factory(start=False)
    with pytest.raises(ClientClosed, match="never started"):
        _wait_call(THREADED[recipe](never, f"/never-{recipe}"))()
    stopped = zk_factory()
    stopped.stop()
    with pytest.raises(ClientClosed, match=f"/never-{recipe}"):
        _wait_call(THREADED[recipe](stopped, f"/never-{recipe}"))()

    async def main() -> None:
        with pytest.raises(ClientClosed, match=f"/never-{recipe}"):
            await _wait_call(ASYNC[recipe](never, f"/never-{recipe}"))()

    asyncio.run(main())


@pytest.mark.parametrize("recipe", sorted(THREADED))
def test_stop_makes_holder_lost(zk_factory, recipe):
    client = zk_factory()
    holder = THREADED[recipe](client, f"/lost-{recipe}")
    assert _wait_call(holder)()
    client.stop()
    assert holder.lost.wait(WAKE_BOUND), "the holder was not told LOST"
    assert holder.state == "lost"


def test_with_election_campaigns_and_resigns(zk, zk_factory):
    election = LeaderElection(zk, "/with-election")
    watcher = LeaderElection(zk_factory(), "/with-election")
    with election as same:
        assert same is election and election.is_leader
        assert len(children(zk, "/with-election")) == 1
    assert not election.is_leader
    wait_until(lambda: not children(zk, "/with-election"), WAKE_BOUND, "the node deleted on exit")
    assert watcher.leader() is None
