"""Who owns an asyncio hold (issue 29): ``asyncio.wait_for(lock.acquire(), t)`` leaves the hold with the
task that awaited it on every Python (3.9-3.11 run the acquire in an inner task), and a hold whose
owning task ended without releasing it is released (with a warning), not left in ZooKeeper."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Dict

import pytest
from kazoo.exceptions import NoNodeError

from zkrecipes import aio

RECIPES: Dict[str, Callable[[Any, str], Any]] = {
    "FairLock": lambda zk, p: aio.FairLock(zk, p),
    "ExclusiveLock": lambda zk, p: aio.ExclusiveLock(zk, p),
    "ReadWriteLock.read": lambda zk, p: aio.ReadWriteLock(zk, p).read(),
    "ReadWriteLock.write": lambda zk, p: aio.ReadWriteLock(zk, p).write(),
    "Semaphore": lambda zk, p: aio.Semaphore(zk, p, 2),
}


def _children(zk: Any, path: str) -> list:
    try:
        return list(zk.get_children(path))
    except NoNodeError:  # an emptied container parent may be reaped
        return []


async def _gone(zk: Any, path: str, timeout: float) -> float:
    """Seconds until ``path`` has no children (fails the test after ``timeout``)."""
    t0 = time.monotonic()
    while _children(zk, path):
        assert time.monotonic() - t0 < timeout, f"{path} still has children after {timeout} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_wait_for_leaves_the_hold_with_the_awaiting_task(zk, recipe):
    lock = RECIPES[recipe](zk, f"/wf-{recipe.lower()}")

    async def body() -> None:
        assert await asyncio.wait_for(lock.acquire(), 10)
        assert lock.is_held and lock.token is not None
        lock.check()
        assert await asyncio.wait_for(lock.acquire(), 10)  # re-entry by the same (awaiting) task
        await lock.release()
        assert lock.is_held
        await lock.release()
        assert not lock.is_held
        await _gone(zk, lock.path, 10)

    asyncio.run(body())


def test_a_task_acquired_for_by_ensure_future_owns_the_hold(zk):
    lock = aio.FairLock(zk, "/ef")

    async def body() -> None:
        assert await asyncio.ensure_future(lock.acquire())
        assert lock.is_held
        await lock.release()
        await _gone(zk, "/ef", 10)

    asyncio.run(body())


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_hold_whose_task_ended_is_released_with_a_warning(zk, caplog, recipe):
    lock = RECIPES[recipe](zk, f"/ended-{recipe.lower()}")

    async def forgetful() -> None:
        assert await lock.acquire(timeout=10)  # and never releases

    async def body() -> float:
        task = asyncio.ensure_future(forgetful())
        await task
        ended = time.monotonic()
        waited = await _gone(zk, lock.path, 10)
        assert time.monotonic() - ended < 5.0  # within about a second (measured: well under)
        other = RECIPES[recipe](zk, lock.path)
        assert await other.acquire(timeout=10)  # nobody is blocked by the forgotten hold
        await other.release()
        return waited

    with caplog.at_level(logging.WARNING, logger="zkrecipes"):
        asyncio.run(body())
    assert any(lock.path in r.getMessage() and "ended without releasing" in r.getMessage() for r in caplog.records)
