"""A waiter's watch against the moment kazoo tells of its deletion (no ZooKeeper: the reply and the
notification are handed in by the test, in the order a busy client can see them)."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent, ZnodeStat

from zkrecipes import _engine as e
from zkrecipes import _kazoo
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



def _watched_driver(monkeypatch, listing, paths=("/q/lock-0000000002",)):
    """A driver on a never-started client with data watches on ``paths`` (each ``get`` answered at once,
    each Watch with ``listing``); listings sent are recorded, answered by results the test sets."""
    client = KazooClient(hosts="127.0.0.1:1")
    client._session_id, client._state = 0x5EED, KeeperState.CONNECTED
    got = client.handler.async_result()
    got.set((b"", ZnodeStat(9, 9, 0, 0, 0, 0, 0, 0, 0, 0, 9)))
    client.get_async = lambda path, watch=None: got
    sent = []

    def list_children(c, path):
        sent.append((path, _kazoo.Result(c.handler)))
        return sent[-1][1]

    monkeypatch.setattr(_kazoo, "list_children", list_children)
    monkeypatch.setattr(client, "get_children_async", lambda path: list_children(client, path))  # the steps' own
    driver = Driver(client, None, never, None)
    for i, path in enumerate(paths):
        watch = driver._watch(e.Watch(path, keep=i > 0, listing=listing))
        op = next(watch)
        if op == Woken(False):
            op = watch.send(None)
        assert type(op) is Reply
        finish(watch)
    return driver, sent


def slept(driver):
    """The paths a SLEEP finds deleted, which must be known already (no wait)."""
    sleep = driver._sleep(e.SLEEP)
    assert next(sleep) == Woken(False)
    return finish(sleep)


def deleted(path):
    return WatchedEvent(EventType.DELETED, KeeperState.CONNECTED, path)


def test_the_listing_a_deletion_calls_for_is_sent_as_the_deletion_is_heard_and_answers_the_next_read(monkeypatch):
    """A watch whose node's deletion the steps follow with a listing (``Watch.listing``): the watch
    function sends that listing at once (kazoo's I/O thread, before the waiting thread runs), and the
    steps' next ``get_children`` of that parent is answered by it; a later read sends its own, and a
    watch without ``listing`` (the head of the queue: no read follows) sends nothing."""
    driver, sent = _watched_driver(monkeypatch, "/q")
    try:
        driver._on_watch(deleted("/q/lock-0000000002"))
        assert [path for path, _ in sent] == ["/q"]  # sent by the watch function itself
        assert slept(driver) == frozenset({"/q/lock-0000000002"})
        sent[0][1].set(["lock-0000000003"])
        read = driver._read(e.Read("get_children", "/q"))
        assert next(read) == Reply(sent[0][1])  # no second request
        assert finish(read) == ["lock-0000000003"] and len(sent) == 1
        read = driver._read(e.Read("get_children", "/q"))  # taken once: a later read asks again
        next(read)
        assert len(sent) == 2
    finally:
        driver.close()
    driver, sent = _watched_driver(monkeypatch, None)
    try:
        driver._on_watch(deleted("/q/lock-0000000002"))
        assert sent == []
    finally:
        driver.close()


def test_a_listing_sent_for_an_earlier_deletion_never_answers_a_later_sleeps_read(monkeypatch):
    """The watch function can send its listing just after the waiting thread took in the wake-up it
    belongs to: that listing is older than the next deletion, so the read after the next sleep is sent
    afresh."""
    driver, sent = _watched_driver(monkeypatch, "/q", ("/q/lock-0000000002", "/q/lock-0000000003"))
    try:
        driver._deleted.add("/q/lock-0000000002")  # the deletion recorded, the sleep taken in ...
        assert slept(driver) == frozenset({"/q/lock-0000000002"})
        driver._on_watch(deleted("/q/lock-0000000002"))  # ... before the watch function sent the listing
        read = driver._read(e.Read("get_children", "/q"))
        next(read)
        assert len(sent) == 2  # the steps' own read
        driver._deleted.add("/q/lock-0000000003")  # the other watched node goes; its notification is late
        assert slept(driver) == frozenset({"/q/lock-0000000003"})
        read = driver._read(e.Read("get_children", "/q"))
        next(read)
        assert len(sent) == 3  # not the listing sent for lock-0000000002's deletion
    finally:
        driver.close()


def test_a_waiter_whose_deletion_calls_for_a_listing_is_woken_once_that_listing_is_in(monkeypatch):
    """The waiting thread's next need after such a deletion is the listing the watch function sent: it is
    woken as that reply is read (one wake-up, not one for the news and one for the reply), also when the
    listing fails (a dropped connection fails it: never a waiter left asleep); a deletion that needs no
    listing wakes it at once."""
    driver, sent = _watched_driver(monkeypatch, "/q")
    try:
        wake = driver._wake()  # (made by the run's first wait)
        driver._on_watch(deleted("/q/lock-0000000002"))
        assert "/q/lock-0000000002" in driver._deleted and not wake.is_set()  # recorded, not woken
        sent[0][1].set(["lock-0000000003"])
        assert wake.is_set()
    finally:
        driver.close()
    driver, sent = _watched_driver(monkeypatch, "/q")
    try:
        wake = driver._wake()  # (made by the run's first wait)
        driver._on_watch(deleted("/q/lock-0000000002"))
        sent[0][1].set_exception(ConnectionLoss())
        assert wake.is_set()
    finally:
        driver.close()
    driver, sent = _watched_driver(monkeypatch, None)
    try:
        wake = driver._wake()  # (made by the run's first wait)
        driver._on_watch(deleted("/q/lock-0000000002"))
        assert sent == [] and wake.is_set()
    finally:
        driver.close()
