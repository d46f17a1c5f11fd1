"""The doubt clock against a real ensemble: a hold is in doubt once replies are overdue and lost no later
than ``sent(latest answered request) + granted session timeout``, before the server can expire the session
and grant the lock elsewhere: with a server that grants less than asked, and on a silent partition.

Each test records a timeline (monotonic seconds after the fault) and prints it (``pytest -s``)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from lockhelpers import FAST_RECONNECT, Freezer

from zkrecipes import FairLock, LockLost, _kazoo, aio
from zkrecipes.testing import Ensemble, Partition

WITHIN = 30.0  # liveness bound for anything that should take a few seconds


class Timeline:
    """Monotonic times of named moments, thread-safe; ``wait(name)`` has a deadline."""

    def __init__(self) -> None:
        self.t: dict = {}
        self._cond = threading.Condition()

    def mark(self, name: str, t: float | None = None) -> None:
        with self._cond:
            self.t.setdefault(name, time.monotonic() if t is None else t)
            self._cond.notify_all()

    def wait(self, name: str, timeout: float = WITHIN) -> float:
        with self._cond:
            if not self._cond.wait_for(lambda: name in self.t, timeout):
                pytest.fail(f"not within {timeout} s: {name}; so far {self.t}")
            return float(self.t[name])

    def show(self, title: str, origin: str) -> str:
        t0 = self.t[origin]
        line = ", ".join(f"{k} {v - t0:+.2f}" for k, v in sorted(self.t.items(), key=lambda kv: kv[1]))
        print(f"\n{title}: {line}")
        return line


def follow(lock, tl: Timeline, prefix: str = "A ") -> None:
    lock.add_listener(lambda _lock, state: tl.mark(prefix + state))


def rival(client, path: str, tl: Timeline) -> threading.Thread:
    """B waits for the lock in a thread and marks when it is granted."""

    def run() -> None:
        lock = FairLock(client, path)
        if lock.acquire(timeout=WITHIN):
            tl.mark("B granted")

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def watch_node_gone(client, node: str, tl: Timeline) -> None:
    """The server's expiry of A's session, seen by a third client: the upper bound of when it happened."""
    assert client.exists(node, watch=lambda e: tl.mark("server expired A")) is not None


@pytest.fixture(scope="module")
def short_max_ensemble():
    with Ensemble(size=1, tick_ms=200, max_session_ms=2000) as ens:  # grants at most 2 s
        yield ens


def test_a_granted_timeout_shorter_than_asked_is_the_one_that_counts(short_max_ensemble):
    hosts = short_max_ensemble.hosts
    tl = Timeline()
    with Partition(hosts) as link:
        a = _kazoo_client(link.hosts, 10.0)
        b, c = _kazoo_client(hosts, 10.0), _kazoo_client(hosts, 10.0)
        try:
            assert _kazoo.session_timeout(a) == 2.0  # asked 10 s, granted the server's maximum
            lock = FairLock(a, "/granted", tolerate_suspended=True)
            follow(lock, tl)
            assert lock.acquire(timeout=WITHIN)
            watch_node_gone(c, lock.node, tl)
            th = rival(b, "/granted", tl)
            tl.mark("cut", time.monotonic())
            link.cut()
            b_at = tl.wait("B granted")
            with pytest.raises(LockLost):  # the clock itself says lost: no wait for any thread
                lock.check()
            lost_at = tl.wait("A lost")
            tl.show("granted 2 s of 10 asked, link cut", "cut")
            assert lost_at < b_at, "B was granted the lock before A was told it was lost"
            assert lost_at - tl.t["cut"] <= 2.0 + 0.5  # sent(last answered) + 2 s <= cut + 2 s (+ a late wake)
            assert lock.lost.is_set() and lock.state == "lost"
            th.join(WITHIN)
        finally:
            for client in (a, b, c):
                client.stop()
                client.close()


def _kazoo_client(hosts: str, timeout: float):
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts, timeout=timeout, connection_retry=FAST_RECONNECT)
    client.start(timeout=WITHIN)
    return client


@pytest.mark.parametrize("fault", ["silent", "closed"])
def test_a_partition_is_doubt_then_loss_before_the_server_expires_the_session(zk_ensemble, zk_factory, fault):
    """Silent: the link stays open and delivers nothing (kazoo itself notices only after 2/3 of the
    timeout); closed: the link is cut (kazoo notices at once)."""
    tl = Timeline()
    with (Freezer(zk_ensemble.hosts) if fault == "silent" else Partition(zk_ensemble.hosts)) as link:
        a = zk_factory(hosts=link.hosts, timeout=3.0, connection_retry=FAST_RECONNECT)
        lock = FairLock(a, "/silent", tolerate_suspended=True)
        follow(lock, tl)
        assert lock.acquire(timeout=WITHIN)
        watch_node_gone(zk_factory(), lock.node, tl)
        th = rival(zk_factory(timeout=3.0), "/silent", tl)
        if fault == "silent":
            tl.mark("freeze", link.freeze())  # from when nothing more is delivered
        else:  # read before the cut: kazoo hears the close at once, A may be suspended before cut() returns
            tl.mark("freeze", time.monotonic())
            link.cut()
        sent = _kazoo.heard(a).answered  # nothing is answered after the fault: the doubt clock's origin
        suspended_at = tl.wait("A suspended")
        lock.check()  # tolerated while in doubt
        lost_at = tl.wait("A lost")
        expired_at = tl.wait("server expired A")
        b_at = tl.wait("B granted")
        tl.show(f"{fault} partition, 3 s session", "freeze")
        assert tl.t["freeze"] <= suspended_at < lost_at < expired_at
        assert lost_at < b_at
        assert suspended_at - tl.t["freeze"] <= 1.5 + 0.5  # overdue: half the timeout with no answer
        assert lost_at - tl.t["freeze"] <= 3.0 + 0.5
        assert lost_at <= sent + 3.0  # the lost deadline itself (the lead before it absorbs a late wake)
        with pytest.raises(LockLost):
            lock.check()
        th.join(WITHIN)
        lock.release()


def test_the_asyncio_front_hears_the_same_clock(zk_ensemble, zk_factory):
    tl = Timeline()
    with Freezer(zk_ensemble.hosts) as link:
        a = zk_factory(hosts=link.hosts, timeout=3.0, connection_retry=FAST_RECONNECT)

        async def main() -> None:
            lock = aio.FairLock(a, "/silent-aio", tolerate_suspended=True)
            lock.add_listener(lambda _lock, state: tl.mark("A " + state))
            assert await lock.acquire(timeout=WITHIN)
            watch_node_gone(zk_factory(), lock.node, tl)
            rival(zk_factory(timeout=3.0), "/silent-aio", tl)
            tl.mark("freeze", link.freeze())
            await asyncio.wait_for(lock.lost.wait(), WITHIN)
            tl.mark("A lost event")
            with pytest.raises(LockLost):
                await lock.check()
            await lock.release()

        asyncio.run(main())
        tl.wait("B granted")
        tl.wait("server expired A")
        tl.show("asyncio, silent partition, 3 s session", "freeze")
        assert tl.t["freeze"] < tl.t["A suspended"] < tl.t["A lost"] < tl.t["server expired A"]
        assert tl.t["A lost event"] < tl.t["B granted"]
