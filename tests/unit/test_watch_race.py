"""A waiter's watch against the moment kazoo tells of its deletion (no ZooKeeper: the reply and the
notification are handed in by the test, in the order a busy client can see them)."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent, ZnodeStat

from zkrecipes import _engine as e
from zkrecipes._drive import Driver, never
from zkrecipes._transport import Reply, Woken


def finish(steps, value=None):
    """Send ``value`` into ``steps``, which must end there: their return value."""
    try:
        op = steps.send(value)
    except StopIteration as stop:
        return stop.value
    raise AssertionError(f"expected the end, got {op!r}")


def test_a_deletion_told_before_the_waiter_took_in_its_watchs_reply_still_wakes_it():
    """kazoo's I/O thread runs the driver's watch function as it reads the notification, which can be
    before the waiting thread has taken in the reply of the ``get`` that set the watch (the blocker
    released within that round trip). The deletion must still count: the next sleep returns at once with
    the path gone, instead of watching a missing node again and listing the queue."""
    client = KazooClient(hosts="127.0.0.1:1")  # never started: nothing is sent
    client._session_id, client._state = 0x5EED, KeeperState.CONNECTED
    reply = client.handler.async_result()
    client.get_async = lambda path, watch=None: reply
    driver = Driver(client, None, never, None)
    try:
        watch = driver._watch(e.Watch("/q/lock-0000000001"))
        assert next(watch) == Woken(False)  # an older wake-up used up
        assert type(watch.send(None)) is Reply  # the get is out
        reply.set((b"", ZnodeStat(9, 9, 0, 0, 0, 0, 0, 0, 0, 0, 9)))
        driver._on_watch(WatchedEvent(EventType.DELETED, KeeperState.CONNECTED, "/q/lock-0000000001"))
        assert finish(watch).czxid == 9
        sleep = driver._sleep(e.SLEEP)
        assert next(sleep) == Woken(False)  # no wait: the watched path is already gone
        assert finish(sleep) == frozenset({"/q/lock-0000000001"})
    finally:
        driver.close()
