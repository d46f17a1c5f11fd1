"""Ctrl-C between queueing a request and waking kazoo's I/O thread leaves the client in step (issue 37).

kazoo's connection thread sends one queued request per wake byte written to its socket pair. An exception
raised by a signal handler (KeyboardInterrupt, the CLI's Terminated) right after a request is queued but
before its byte is written used to leave the client one request behind for good: every later request went
out one late, the next acquire left an orphan node and cleanup deletes timed out. Here a real client's
request queue raises KeyboardInterrupt once, right after a request is queued (the worst moment a signal can
land), on the thread that armed it; afterwards the client must answer at once, no node of the interrupted
call may stay, and the next acquire and release must work at normal speed and leave nothing behind.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any, Iterable

import pytest
from lockhelpers import children, wait_until

from zkrecipes import FairLock, aio

PROMPT = 5.0  # liveness bound with a wide margin: an answer takes milliseconds; a client behind never answers


class Armed(collections.deque):  # type: ignore[type-arg]
    """A request queue that raises KeyboardInterrupt on the ``armed``-th request queued by the arming thread,
    right after queueing it (kazoo's own thread only takes requests out)."""

    def arm(self, nth: int) -> None:
        self.thread, self.armed, self.fired = threading.get_ident(), nth, False

    def append(self, item: Any) -> None:
        super().append(item)
        self._count()

    def extend(self, items: Iterable[Any]) -> None:
        super().extend(items)
        self._count()

    def _count(self) -> None:
        if getattr(self, "armed", 0) and threading.get_ident() == self.thread:
            self.armed -= 1
            if not self.armed:
                self.fired = True
                raise KeyboardInterrupt


@pytest.fixture
def armed_client(zk_factory):
    """``make()``: a started client whose request queue is :class:`Armed`. At teardown each gets spare wake
    bytes (harmless: kazoo's I/O thread discards one when its queue is empty): a client left behind by a
    regression would otherwise never send its close, and kazoo's ``stop()`` would wait for it forever."""
    made = []

    def make() -> Any:
        client = zk_factory()
        client._queue = Armed(client._queue)  # an idle client: nothing queued to lose
        made.append(client)
        return client

    yield make
    for client in made:
        client._queue.armed = 0
        if client._connection._write_sock is not None:
            client._connection._write_sock.send(b"\0" * 8)


def assert_in_step(client: Any) -> None:
    """``client`` answers a fresh request at once: it is not one request behind."""
    t0 = time.monotonic()
    client.exists_async("/").get(timeout=PROMPT)
    assert time.monotonic() - t0 < PROMPT


def assert_acquires_cleanly(observer: Any, client: Any, path: str) -> None:
    """``client`` acquires and releases ``path`` at once, and no node is left (seen by ``observer``)."""
    lock = FairLock(client, path)
    t0 = time.monotonic()
    assert lock.acquire(timeout=PROMPT)
    lock.release()
    assert time.monotonic() - t0 < PROMPT
    wait_until(lambda: children(observer, path) == [], PROMPT, f"nothing left under {path}")


@pytest.mark.parametrize("nth", [1, 2], ids=["at-the-create", "at-the-watch"])
def test_ctrl_c_right_after_a_request_is_queued_leaves_the_client_in_step(zk_factory, armed_client, nth):
    a, b = zk_factory(), armed_client()
    path = f"/interrupted-{nth}"
    holder = FairLock(a, path)
    assert holder.acquire(timeout=PROMPT)
    q = b._queue
    q.arm(nth)
    with pytest.raises(KeyboardInterrupt):
        FairLock(b, path).acquire(timeout=PROMPT)
    assert q.fired  # the interrupt came from the queue, not from the deadline
    assert_in_step(b)
    wait_until(lambda: len(children(a, path)) == 1, PROMPT, f"the interrupted acquire's node is gone from {path}")
    holder.release()
    assert_acquires_cleanly(a, b, path)


def test_ctrl_c_in_an_uncontended_acquire_leaves_no_node_and_the_client_in_step(zk_factory, armed_client):
    a, b = zk_factory(), armed_client()
    path = "/interrupted-free"
    q = b._queue
    q.arm(1)
    with pytest.raises(KeyboardInterrupt):
        FairLock(b, path).acquire(timeout=PROMPT)
    assert q.fired
    assert_in_step(b)
    wait_until(lambda: children(a, path) == [], PROMPT, f"the interrupted acquire's node is gone from {path}")
    assert_acquires_cleanly(a, b, path)


def test_ctrl_c_right_after_a_release_queues_its_delete_still_deletes_the_node(zk_factory, armed_client):
    a, b = zk_factory(), armed_client()
    path = "/interrupted-release"
    lock = FairLock(b, path)
    assert lock.acquire(timeout=PROMPT)
    q = b._queue
    q.arm(1)
    with pytest.raises(KeyboardInterrupt):
        lock.release()
    assert q.fired
    assert_in_step(b)
    wait_until(lambda: children(a, path) == [], PROMPT, f"the released node is gone from {path}")
    assert_acquires_cleanly(a, b, path)


def test_ctrl_c_in_an_asyncio_acquire_leaves_the_client_in_step(zk_factory, armed_client):
    a, b = zk_factory(), armed_client()
    path = "/interrupted-aio"
    holder = FairLock(a, path)
    assert holder.acquire(timeout=PROMPT)
    q = b._queue

    async def acquire() -> None:
        q.arm(1)  # on the loop's thread
        await aio.FairLock(b, path).acquire(timeout=PROMPT)

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(acquire())
    assert q.fired
    assert_in_step(b)
    wait_until(lambda: len(children(a, path)) == 1, PROMPT, f"the interrupted acquire's node is gone from {path}")
    holder.release()
    assert_acquires_cleanly(a, b, path)
