"""The asyncio driver's waiting, without ZooKeeper: a wake-up (a watch firing, a session event) ends a
sleep, but never the wait for a request's reply -- with several watches (a semaphore's waiter) one of
them may fire while the next watch's request is in flight."""

from __future__ import annotations

import asyncio
import threading
import time
import types

import pytest
from kazoo.handlers.threading import SequentialThreadingHandler

from zkrecipes._engine import Read, Steps
from zkrecipes._transport import Woken
from zkrecipes.aio._driver import AioDriver


class _RunningClient:
    """What the driver reads of a client that is not stopped (a wake-up checks for a stopped client), and
    a ``get`` whose reply the test sets."""

    _stopped = threading.Event()
    _session_timeout = 10000  # ms, as asked (no connect response seen)

    def __init__(self, reply: object) -> None:
        self.reply = reply
        self._connection = types.SimpleNamespace()  # the seam keeps what replies told on it

    def get_async(self, path: str) -> object:
        return self.reply


def _read(once: bool = False) -> Steps[object]:
    value = yield Read("get", "/x", once)
    return value


def test_a_wake_up_during_a_request_waits_for_the_reply_and_is_kept_for_the_next_sleep():
    handler = SequentialThreadingHandler()

    async def body() -> None:
        reply = handler.async_result()
        driver = AioDriver(client=_RunningClient(reply), deadline=None, policy=None)
        call = asyncio.create_task(driver.run(_read()))
        await asyncio.sleep(0)  # the request is out; the driver awaits its reply
        driver._wake()  # a watch of ours fires meanwhile
        await asyncio.sleep(0.01)
        assert not call.done()  # still waiting for the reply, not handed a reply that is not there
        reply.set("the reply")
        assert await asyncio.wait_for(call, 5) == "the reply"
        await asyncio.wait_for(driver._wait(Woken(True)), 5)  # the wake-up was not lost: the next sleep ends at once
        driver.close()

    asyncio.run(body())


def test_a_read_with_no_reply_by_the_deadline_ends_in_deadline_passed_not_a_timeout():
    # a reply's own time limit must not race the run's deadline: an acquire(timeout=...) returns False on
    # DeadlinePassed, while a TimeoutError would escape it (seen once among hundreds of aio tasks)
    from zkrecipes._engine import DeadlinePassed

    handler = SequentialThreadingHandler()

    async def body() -> None:
        for once in (False, True):  # retried (a relisting, a watch) and one attempt (a hold's check)
            reply = handler.async_result()  # never answered
            driver = AioDriver(client=_RunningClient(reply), deadline=time.monotonic() + 0.05, policy=None)
            with pytest.raises(DeadlinePassed):
                await asyncio.wait_for(driver.run(_read(once)), 5)

    asyncio.run(body())
