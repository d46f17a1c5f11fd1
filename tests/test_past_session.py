"""A session the client gave up while the server keeps it (kazoo's test harness does this to simulate an
expiry: kazoo's ``test_lock_reconnect``): our node of that session can be no one else's, so it is deleted
once the hold is found lost or released, and a waiter on another session is granted at once instead of
after the old session's timeout. Its holder is told it lost the lock before that grant; a node of another
session, even at the very path of our old one, is never deleted."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kazoo.client import KazooClient
from lockhelpers import FAST_RECONNECT, children, give_up_session, wait_until

from zkrecipes import ExclusiveLock, FairLock, aio
from zkrecipes.testing import Partition

SESSION = 10.0  # the old session would keep its node this long
SOON = 5.0  # a waiter must be granted well before that


class Marks:
    """Monotonic time of the first occurrence of each named moment."""

    def __init__(self) -> None:
        self.t: dict = {}
        self.cond = threading.Condition()

    def __call__(self, name: str) -> None:
        with self.cond:
            self.t.setdefault(name, time.monotonic())
            self.cond.notify_all()

    def wait(self, name: str, timeout: float) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: name in self.t, timeout):
                pytest.fail(f"not within {timeout} s: {name}; so far {self.t}")
            return float(self.t[name])


def rival(client, path: str, marks: Marks) -> threading.Thread:
    def run() -> None:
        lock = FairLock(client, path)
        if lock.acquire(timeout=30):
            marks("granted")
            lock.release()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


@pytest.mark.parametrize("release", [True, False], ids=["released", "found-lost"])
def test_kazoos_lock_reconnect_a_waiter_on_another_session_is_granted_at_once(zk_factory, release):
    a, b = zk_factory(timeout=SESSION), zk_factory(timeout=SESSION)
    marks = Marks()
    lock = FairLock(a, "/reconnect")
    lock.add_listener(lambda _lock, state: marks("A " + state))
    assert lock.acquire(timeout=30)
    old_node = lock.node
    th = rival(b, "/reconnect", marks)
    wait_until(lambda: len(children(b, "/reconnect")) == 2, 30, "the waiter queued")
    old = give_up_session(a)
    marks("new session")
    assert old != a.client_id[0]
    if release:
        lock.release()  # what kazoo's test does next
    granted = marks.wait("granted", SOON)
    print(f"\ngranted {granted - marks.t['new session']:.3f} s after the holder's client had its new session")
    assert marks.t["A lost"] < granted, "the waiter was granted before the holder was told"
    assert b.exists(old_node) is None
    if not release:
        lock.release()
    th.join(30)


def test_kazoos_lock_reconnect_a_waiter_on_the_same_client_is_granted_at_once(zk_factory):
    """kazoo's test as written: the waiter shares the holder's client (in zkrecipes it waits in the
    process, on the lock's local gate), and queues in the new session once the holder releases."""
    a = zk_factory(timeout=SESSION)
    marks = Marks()
    lock = FairLock(a, "/same-client")
    assert lock.acquire(timeout=30)
    th = rival(a, "/same-client", marks)
    wait_until(lambda: lock._gate.line, 30, "the waiter waits on the local gate")
    give_up_session(a)
    start = time.monotonic()
    lock.release()
    assert marks.wait("granted", SOON) - start < SOON
    th.join(30)


def test_a_waiter_whose_session_was_given_up_drops_its_old_node_when_it_queues_again(zk_factory):
    """kazoo's test_lock_reconnect with kazoo's two Lock objects on one client (object-owned locks: two
    nodes): the waiter's node of the old session would stay ahead of its new one until the old session's
    timeout; it is deleted as the waiter queues again, so it is granted at once."""
    a, b = zk_factory(timeout=SESSION), zk_factory(timeout=SESSION)
    marks = Marks()
    holder = FairLock(a, "/waiter-gave-up", owner="object")
    waiter = FairLock(a, "/waiter-gave-up", owner="object")
    assert holder.acquire(timeout=30)
    th = threading.Thread(target=lambda: waiter.acquire(timeout=30) and marks("granted"), daemon=True)
    th.start()
    wait_until(lambda: len(children(b, "/waiter-gave-up")) == 2, 30, "the waiter queued")
    give_up_session(a)
    start = time.monotonic()
    holder.release()  # what kazoo's test does next (the hold was lost: nothing of anyone's is deleted)
    assert marks.wait("granted", SOON) - start < SOON
    assert len(children(b, "/waiter-gave-up")) == 1 and waiter.node is not None
    waiter.release()
    th.join(30)


def test_the_asyncio_front_tells_its_holder_then_drops_the_node(zk_factory):
    a, b = zk_factory(timeout=SESSION), zk_factory(timeout=SESSION)
    marks = Marks()

    async def main() -> None:
        lock = aio.FairLock(a, "/reconnect-aio")
        lock.add_listener(lambda _lock, state: marks("A " + state))
        assert await lock.acquire(timeout=30)
        th = rival(b, "/reconnect-aio", marks)
        await asyncio.to_thread(wait_until, lambda: len(children(b, "/reconnect-aio")) == 2, 30, "queued")
        await asyncio.to_thread(give_up_session, a)
        await asyncio.wait_for(lock.lost.wait(), 30)
        await asyncio.to_thread(marks.wait, "granted", SOON)  # found lost: no release needed
        await lock.release()
        await asyncio.to_thread(th.join, 30)

    asyncio.run(main())
    assert marks.t["A lost"] < marks.t["granted"]


def _end_session(hosts: str, client_id: tuple) -> None:
    """End a session on the server: connect with its id and password, close."""
    twin = KazooClient(hosts=hosts, client_id=client_id)
    twin.start(30)
    twin.stop()
    twin.close()


@pytest.mark.parametrize("recipe", ["fair", "exclusive"])
def test_a_node_of_another_session_at_the_path_of_ours_is_never_deleted(zk_ensemble, zk_factory, recipe):
    """Our old session ends while we are cut off, another client makes a node at the very path our node
    had; when we reconnect (a new session), find the hold lost and release it, that node stays."""
    path = f"/foreign-{recipe}"
    with Partition(zk_ensemble.hosts) as link:
        a = zk_factory(hosts=link.hosts, timeout=SESSION, connection_retry=FAST_RECONNECT)
        c = zk_factory(timeout=SESSION)
        lock = (FairLock if recipe == "fair" else ExclusiveLock)(a, path)
        marks = Marks()
        lock.add_listener(lambda _lock, state: marks("A " + state))
        assert lock.acquire(timeout=30)
        node, old = lock.node, a.client_id
        link.cut()  # no reconnection until healed
        _end_session(zk_ensemble.hosts, old)
        wait_until(lambda: c.exists(node) is None, 30, "our old node gone with its session")
        if recipe == "exclusive":
            other = ExclusiveLock(c, path)
            assert other.acquire(timeout=30)  # the next holder takes the very name
            assert other.node == node
        else:
            c.create(node, b"", ephemeral=True)
        link.heal()
        marks.wait("A lost", 30)
        wait_until(lambda: a.connected and a.client_id[0] != old[0], 30, "a new session")
        lock.release()  # the node at our old path is not ours: left alone
        stat = c.exists(node)
        assert stat is not None and stat.ephemeralOwner == c.client_id[0]
