"""The gate's wait on the asyncio driver, without ZooKeeper: tasks wait in arrival order, a change wakes
them, and however a task leaves (grant, timeout, cancel) it leaves the line and its waker."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Optional

import pytest

from zkrecipes import _gate
from zkrecipes._engine import Cancelled, DeadlinePassed
from zkrecipes._gate import Entered, Gate
from zkrecipes.aio._driver import AioDriver
from zkrecipes.naming import READ, WRITE


class FakeClient:
    """What a driver asks of a client while it only waits for the gate: whether it was stopped."""

    _stopped = threading.Event()


async def enter(g: Gate, me: object, kind: str, blocking: bool, deadline: Optional[float] = None,
                driver: Optional[AioDriver] = None) -> Optional[Entered]:
    """The gate's enter steps on the asyncio driver, as a lock runs them: None on a miss, deadline, cancel."""
    driver = driver or AioDriver(FakeClient(), deadline, None)  # type: ignore[arg-type]
    try:
        return await driver.run(_gate.enter(g, me, kind, blocking, good, False))
    except (DeadlinePassed, Cancelled):
        return None


class FakeHold:
    """Stands for a session.Hold that is held and certain."""

    state, node = "held", "/p/h-W-0000000001"

    def in_doubt(self) -> bool:
        return False

    def stale(self) -> bool:
        return False


HOLD = FakeHold()


def good(hold: object) -> bool:
    return True


def test_tasks_get_the_gate_in_arrival_order_and_leave_no_waker():
    async def body() -> None:
        g = Gate("/p")
        order = []

        async def owner(i: int) -> None:
            me = asyncio.current_task()
            got = await enter(g, me, WRITE, True)
            assert got is Entered.QUEUE
            order.append(i)
            g.granted(me, WRITE, HOLD)
            await asyncio.sleep(0)
            assert g.leave(me, WRITE).last
            g.released()

        tasks = []
        for i in range(50):
            tasks.append(asyncio.create_task(owner(i)))
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        assert order == list(range(50))
        assert not g.line and not g.wakers and g.waiting_writers == 0 and not g.busy

    asyncio.run(body())


def test_deadline_miss_and_cancel_leave_the_line():
    async def body() -> None:
        g = Gate("/p")
        with g.cond:
            assert g.try_enter("holder", WRITE, good) is Entered.QUEUE
        g.granted("holder", WRITE, HOLD)
        assert await enter(g, "a", WRITE, False) is None  # non-blocking miss
        t0 = time.monotonic()
        assert await enter(g, "b", WRITE, True, time.monotonic() + 0.1) is None
        assert time.monotonic() - t0 >= 0.1
        waiter = asyncio.create_task(enter(g, "c", WRITE, True))
        await asyncio.sleep(0.01)
        assert list(g.line) == ["c"] and g.waiting_writers == 1 and len(g.wakers) == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not g.line and not g.wakers and g.waiting_writers == 0
        driver = AioDriver(FakeClient(), None, None)  # type: ignore[arg-type]
        waiter = asyncio.create_task(enter(g, "d", WRITE, True, driver=driver))
        await asyncio.sleep(0.01)
        threading.Thread(target=driver.interrupt).start()  # what Lock.cancel() does, from any thread
        assert await asyncio.wait_for(waiter, 5) is None
        assert not g.line and not g.wakers and g.waiting_writers == 0

    asyncio.run(body())


def test_a_release_wakes_local_readers_to_share_and_a_waiting_writer_stops_new_readers():
    async def body() -> None:
        g = Gate("/p")
        with g.cond:
            assert g.try_enter("r1", READ, good) is Entered.QUEUE
        g.granted("r1", READ, HOLD)
        assert await enter(g, "r2", READ, True) is Entered.HAVE  # joins the read hold
        writer = asyncio.create_task(enter(g, "w", WRITE, True))
        await asyncio.sleep(0.01)
        assert g.waiting_writers == 1
        assert await enter(g, "r3", READ, False) is None  # would overtake the writer
        g.leave("r1", READ)
        left = g.leave("r2", READ)
        assert left.last
        g.released()
        assert await asyncio.wait_for(writer, 1) is Entered.QUEUE

    asyncio.run(body())
