"""A server that sits on a reply must not stall a hand-off until the next heartbeat (issue 30).

ZooKeeper 3.6.0-3.8.0 can lose its CommitProcessor's wake-up (ZOOKEEPER-4537): a request that reaches a
quiet server is answered only when the next packet from any client arrives there, usually a heartbeat.
Measured on this project's 3.8.0 ensemble, one hand-off in a few thousand waited 3 s (10 s sessions) or
9.6 s (30 s sessions), and every FIFO waiter behind it with it. That server race is rare and cannot be
called up on demand, so these tests put its observable behaviour on the wire: each client talks through
:class:`lockhelpers.LateLink`, a loopback proxy that, once armed, holds the next reply to a request (and whatever
follows it) until the client sends another packet, as the stuck server does. With a 30 s session kazoo's
heartbeat comes about every 10 s; the hand-off must complete in well under that (a liveness bound, not a
speed target).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable, Iterator, List

import pytest
from kazoo.client import KazooClient
from lockhelpers import LateLink, children, wait_until

from zkrecipes import FairLock, aio

SESSION = 30.0  # kazoo pings after about SESSION / 3 of silence: a held reply would wait that long
BOUND = 2.0  # seconds; a heartbeat-long stall is about 10 s


@pytest.fixture
def late_links(zk_ensemble) -> Iterator[Callable[[], LateLink]]:
    links: List[LateLink] = []

    def make() -> LateLink:
        links.append(LateLink(zk_ensemble.hosts))
        return links[-1]

    yield make
    for link in links:
        link.close()


def _hand_off(holder: KazooClient, waiter: KazooClient, links: List[LateLink]) -> None:
    """``holder`` holds, ``waiter`` queues, both links are armed, the holder releases: time both ends."""
    lock_h, lock_w = FairLock(holder, "/late"), FairLock(waiter, "/late")
    assert lock_h.acquire(timeout=10)
    granted: List[float] = []

    def wait() -> None:
        if lock_w.acquire(timeout=60):
            granted.append(time.monotonic())
            lock_w.release()  # by its owner, this thread

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: len(children(holder, "/late")) == 2, 10, "the waiter queued")
    held_before = sum(link.held_count for link in links)
    for link in links:  # the holder's delete reply is held; the waiter's re-list after the watch event too
        link.arm()
    t0 = time.monotonic()
    lock_h.release()
    released = time.monotonic() - t0
    t.join(60)
    assert granted, "the waiter was never granted the lock"
    assert sum(link.held_count for link in links) - held_before == 2, "both replies were held back"
    assert released < BOUND, f"release waited {released:.2f} s for a reply the server sat on"
    assert granted[0] - t0 < BOUND, f"hand-off took {granted[0] - t0:.2f} s"


def test_a_held_reply_does_not_stall_a_threaded_hand_off(zk_factory, late_links) -> None:
    links = [late_links(), late_links()]
    a: KazooClient = zk_factory(hosts=links[0].hosts, timeout=SESSION)
    b: KazooClient = zk_factory(hosts=links[1].hosts, timeout=SESSION)
    for holder, waiter in ((a, b), (b, a), (a, b)):
        _hand_off(holder, waiter, links)


def test_a_held_reply_does_not_stall_an_asyncio_hand_off(zk_factory, late_links) -> None:
    link_a, link_b = late_links(), late_links()
    a: KazooClient = zk_factory(hosts=link_a.hosts, timeout=SESSION)
    b: KazooClient = zk_factory(hosts=link_b.hosts, timeout=SESSION)

    async def main() -> None:
        lock_a, lock_b = aio.FairLock(a, "/late-aio"), aio.FairLock(b, "/late-aio")
        assert await lock_a.acquire(timeout=10)
        granted: List[float] = []

        async def wait_b() -> None:
            assert await lock_b.acquire(timeout=60)
            granted.append(time.monotonic())

        task = asyncio.ensure_future(wait_b())
        deadline = time.monotonic() + 10
        while len(children(a, "/late-aio")) < 2:
            assert time.monotonic() < deadline, "the waiter did not queue"
            await asyncio.sleep(0.02)
        link_a.arm()
        link_b.arm()
        t0 = time.monotonic()
        await lock_a.release()
        released = time.monotonic() - t0
        await asyncio.wait_for(task, 60)
        assert link_a.held_count == 1 and link_b.held_count == 1, "both replies were held back"
        assert released < BOUND, f"release waited {released:.2f} s for a reply the server sat on"
        assert granted[0] - t0 < BOUND, f"hand-off took {granted[0] - t0:.2f} s"

    asyncio.run(main())
