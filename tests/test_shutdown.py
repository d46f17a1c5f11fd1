"""Stopping a client ends every wait on it (issue 29): each recipe and front, against a real ensemble.

Client A holds; on client B a waiter blocks; ``b.stop()``. The waiter must get ClientClosed (a kazoo
ConnectionClosedError) naming its path, soon, and leave no node behind; B's holders see "lost". A
client that is stopped, or was never started, is refused at acquire before any request.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError

from zkrecipes import ClientClosed, ExclusiveLock, FairLock, LeaderElection, ReadWriteLock, Semaphore, aio

WAKE_BOUND = 5.0  # liveness bound with a wide margin (the target is 1 s; the report gives the measured time)

# name -> (holder on client a, waiter on client b): the waiter is a callable that blocks
THREADED: Dict[str, Callable[[Any, Any, str], Any]] = {
    "FairLock": lambda a, b, p: (FairLock(a, p), FairLock(b, p).acquire),
    "ExclusiveLock": lambda a, b, p: (ExclusiveLock(a, p), ExclusiveLock(b, p).acquire),
    "ReadWriteLock.read": lambda a, b, p: (ReadWriteLock(a, p).write(), ReadWriteLock(b, p).read().acquire),
    "Semaphore": lambda a, b, p: (Semaphore(a, p, 1), Semaphore(b, p, 1).acquire),
    "LeaderElection": lambda a, b, p: (LeaderElection(a, p), LeaderElection(b, p).campaign),
    "LeaderElection.run": lambda a, b, p: (LeaderElection(a, p), lambda: LeaderElection(b, p).run(lambda: None)),
    "FairLock.hold": lambda a, b, p: (FairLock(a, p), lambda: FairLock(b, p).hold().__enter__()),
}
ASYNC: Dict[str, Callable[[Any, Any, str], Any]] = {
    "aio.FairLock": lambda a, b, p: (FairLock(a, p), aio.FairLock(b, p).acquire),
    "aio.ReadWriteLock.write": lambda a, b, p: (FairLock(a, p), aio.ReadWriteLock(b, p).write().acquire),
    "aio.Semaphore": lambda a, b, p: (Semaphore(a, p, 1), aio.Semaphore(b, p, 1).acquire),
    "aio.LeaderElection": lambda a, b, p: (LeaderElection(a, p), aio.LeaderElection(b, p).campaign),
}


def _take(holder: Any) -> None:
    assert (holder.campaign() if isinstance(holder, LeaderElection) else holder.acquire(timeout=10))


def _waiting(a: KazooClient, b: KazooClient, path: str) -> bool:
    """B's waiter is blocked: its node is queued behind A's, or (ExclusiveLock: one node) it watches A's."""
    return len(a.get_children(path)) >= 2 or any(b._data_watchers.values())


def _leftovers(a: KazooClient, path: str, holder: Any) -> list:
    """Nodes under ``path`` other than the holder's (B's session ended with its stop)."""
    a.sync(path)
    mine = holder.node.rsplit("/", 1)[1]
    return [c for c in a.get_children(path) if c != mine]


@pytest.mark.parametrize("recipe", sorted(THREADED))
def test_stopping_the_client_wakes_a_threaded_waiter(zk_factory, recipe, record_property):
    a, b = zk_factory(), zk_factory()
    path = f"/stop-{recipe.lower().replace('.', '-')}"
    holder, wait = THREADED[recipe](a, b, path)
    _take(holder)
    outcome: Dict[str, Any] = {}

    def waiter() -> None:
        try:
            outcome["returned"] = wait()
        except BaseException as exc:
            outcome["error"], outcome["at"] = exc, time.monotonic()

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not _waiting(a, b, path):
        assert time.monotonic() < deadline and t.is_alive(), f"the waiter did not queue: {outcome}"
        time.sleep(0.02)
    stopped = time.monotonic()
    b.stop()
    t.join(WAKE_BOUND + 5)
    assert not t.is_alive(), f"{recipe}: still waiting {WAKE_BOUND + 5:g} s after client.stop()"
    error = outcome.get("error")
    assert isinstance(error, ClientClosed) and isinstance(error, ConnectionClosedError), outcome
    assert path in str(error)
    record_property("woke_s", round(outcome["at"] - stopped, 4))  # the figure the report gives (--junitxml)
    assert outcome["at"] - stopped < WAKE_BOUND, f"woke {outcome['at'] - stopped:.2f} s after the stop"
    assert _leftovers(a, path, holder) == []


@pytest.mark.parametrize("recipe", sorted(ASYNC))
def test_stopping_the_client_wakes_an_asyncio_waiter(zk_factory, recipe, record_property):
    a, b = zk_factory(), zk_factory()
    path = f"/stop-{recipe.lower().replace('.', '-')}"
    holder, wait = ASYNC[recipe](a, b, path)
    _take(holder)

    async def body() -> float:
        task = asyncio.ensure_future(wait())
        deadline = time.monotonic() + 10
        while not _waiting(a, b, path):
            assert time.monotonic() < deadline and not task.done(), "the waiter did not queue"
            await asyncio.sleep(0.02)
        stopped = time.monotonic()
        b.stop()
        with pytest.raises(ClientClosed, match=path):
            await asyncio.wait_for(task, WAKE_BOUND + 5)
        return time.monotonic() - stopped

    woke = asyncio.run(body())
    record_property("woke_s", round(woke, 4))
    assert woke < WAKE_BOUND, f"woke {woke:.2f} s after the stop"
    assert _leftovers(a, path, holder) == []


def test_a_holder_sees_lost_when_its_client_stops(zk_factory):
    b = zk_factory()
    lock = FairLock(b, "/stop-holder")
    assert lock.acquire(timeout=10)
    b.stop()
    assert lock.lost.wait(WAKE_BOUND) and lock.state == "lost" and not lock.is_held


@pytest.mark.parametrize("started", [False, True])
def test_a_stopped_or_never_started_client_is_refused_at_acquire(zk_ensemble, zk, started):
    client = KazooClient(hosts=zk_ensemble.hosts)
    if started:
        client.start(timeout=30)
        client.stop()
    with pytest.raises(ClientClosed, match="/refused: the KazooClient is stopped"):
        FairLock(client, "/refused").acquire(timeout=5)
    with pytest.raises(ClientClosed, match="/refused-e: the KazooClient is stopped"):
        LeaderElection(client, "/refused-e").campaign(timeout=5)

    async def body() -> None:
        with pytest.raises(ClientClosed, match="/refused-a: the KazooClient is stopped"):
            await aio.FairLock(client, "/refused-a").acquire(timeout=5)

    asyncio.run(body())
    client.close()
    assert zk.exists("/refused") is None and zk.exists("/refused-a") is None
