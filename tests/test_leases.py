"""Lease objects (issue 38): ``Semaphore.acquire_leases(qty, timeout)`` takes ``qty`` leases, all or none,
that belong to no thread or task; ``lease_holders()`` names the holders, as kazoo's."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import threading
from typing import Any, List

import pytest
from kazoo.client import KazooClient
from lockhelpers import children, wait_until

from zkrecipes import Lease, LockError, LockLost, Semaphore, aio
from zkrecipes.naming import parse
from zkrecipes.testing import expire_session


def _seq(node: str) -> int:
    q = parse(node.rsplit("/", 1)[1])
    assert q is not None
    return q.sequence


def test_leases_are_taken_in_queue_order_and_released_from_any_thread(zk):
    sem = Semaphore(zk, "/leases", 5, identifier="w1")
    leases = sem.acquire_leases(3, timeout=10)
    assert len(leases) == 3 and all(isinstance(x, Lease) for x in leases)
    assert all(x.is_held and x.state == "held" for x in leases)
    assert [_seq(x.node) for x in leases] == sorted(_seq(x.node) for x in leases)  # queue order
    assert [x.token for x in leases] == [zk.exists(x.node).czxid for x in leases]
    assert not sem.is_held  # the leases are not the calling thread's
    assert sem.lease_holders() == ["w1", "w1", "w1"]
    nodes = [x.node for x in leases]
    t = threading.Thread(target=leases[0].release)
    t.start()
    t.join(20)
    assert not leases[0].is_held and leases[0].node is None and len(children(zk, "/leases")) == 2
    # the message names the Lease the caller used, and its node (not the semaphore behind it)
    said = re.escape(f"/leases: Lease (node {nodes[0]}) released already")
    with pytest.raises(LockError, match=f"^{said}$"):
        leases[0].release()
    with pytest.raises(LockError, match=f"^{said}$"):
        leases[0].check()
    for lease in leases[1:]:
        with lease:
            lease.check()
    assert children(zk, "/leases") == [] and sem.lease_holders() == []


def test_all_or_none_on_timeout(zk, zk_factory):
    other = Semaphore(zk_factory(), "/busy", 5, identifier="elsewhere")
    held = other.acquire_leases(3)
    sem = Semaphore(zk, "/busy", 5, identifier="me")
    assert sem.acquire_leases(3, timeout=0.5) == []  # two were free: taken, then given back
    assert len(children(zk, "/busy")) == 3
    assert sem.acquire_leases(3, timeout=0) == []  # one attempt without waiting
    assert len(children(zk, "/busy")) == 3
    assert sem.lease_holders() == ["elsewhere"] * 3
    got = sem.acquire_leases(2, timeout=0)
    assert len(got) == 2 and sem.lease_holders() == ["elsewhere"] * 3 + ["me"] * 2
    for lease in got + held:
        lease.release()
    assert children(zk, "/busy") == []


def test_cancel_gives_back_the_leases_taken(zk, zk_factory):
    other = Semaphore(zk_factory(), "/cancel", 4)
    held = other.acquire_leases(3)
    sem = Semaphore(zk, "/cancel", 4)
    out: List[Any] = []
    t = threading.Thread(target=lambda: out.append(sem.acquire_leases(2)))
    t.start()
    wait_until(lambda: len(children(zk, "/cancel")) == 5, 10, "one lease taken, one waiting")
    sem.cancel()
    t.join(20)
    assert out == [[]] and len(children(zk, "/cancel")) == 3
    for lease in held:
        lease.release()


def test_qty_is_checked_before_any_request():
    client = KazooClient(hosts="127.0.0.1:1")  # never started: a request would fail differently
    try:
        sem = Semaphore(client, "/p", 5)
        for bad in (0, 6, -1):
            with pytest.raises(ValueError, match=f"qty.*{bad}"):
                sem.acquire_leases(bad)
        for bad in ("2", 2.0, True, None):
            with pytest.raises(TypeError, match="qty"):
                sem.acquire_leases(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout"):
            sem.acquire_leases(1, timeout=-1)
    finally:
        client.close()


def test_a_lost_session_makes_check_raise(zk_factory):
    client = zk_factory()
    (lease,) = Semaphore(client, "/lost", 2).acquire_leases(1)
    expire_session(client)
    assert lease.lost.wait(30)
    with pytest.raises(LockLost, match="/lost"):
        lease.check()
    assert not lease.is_held and lease.state == "lost"
    lease.release()  # only local state: the node went with the session


def test_a_dropped_lease_is_released_with_a_warning(zk, caplog):
    (lease,) = Semaphore(zk, "/dropped", 2).acquire_leases(1)
    node = lease.node
    with caplog.at_level(logging.WARNING, logger="zkrecipes"):
        del lease
        gc.collect()
        wait_until(lambda: zk.exists(node) is None, 10, "the dropped lease's node deleted")
        wait_until(lambda: any(node in r.getMessage() for r in caplog.records), 5, "a warning naming the node")
    said = [r.getMessage() for r in caplog.records if node in r.getMessage()]
    assert f"its owner, Lease (node {node}), garbage-collected while it held" in said[0], said  # the Lease


def test_aio_leases(zk, zk_factory):
    other = Semaphore(zk_factory(), "/aio-leases", 3, identifier="x")

    async def main() -> None:
        sem = aio.Semaphore(zk, "/aio-leases", 3, identifier="a")
        leases = await asyncio.create_task(sem.acquire_leases(2, timeout=10))  # that task ends
        assert [type(x) for x in leases] == [aio.Lease, aio.Lease] and all(x.is_held for x in leases)
        assert await sem.lease_holders() == ["a", "a"]
        assert await sem.acquire_leases(2, timeout=0.3) == []  # one is free: taken and given back
        assert len(children(zk, "/aio-leases")) == 2

        async def elsewhere() -> None:
            await leases[0].check()
            await leases[0].release()
            async with leases[1]:
                pass

        first = leases[0].node
        await asyncio.create_task(elsewhere())
        assert children(zk, "/aio-leases") == []
        with pytest.raises(LockError, match=re.escape(f"/aio-leases: Lease (node {first}) released already")):
            await leases[0].release()
        held = other.acquire_leases(2)
        task = asyncio.create_task(sem.acquire_leases(2))
        await asyncio.sleep(0)
        while len(children(zk, "/aio-leases")) < 4:
            await asyncio.sleep(0.02)
        task.cancel()  # one lease taken, one waiting: both nodes deleted
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(children(zk, "/aio-leases")) == 2
        for lease in held:
            lease.release()
        with pytest.raises(ValueError, match="qty"):
            await sem.acquire_leases(4)

    asyncio.run(main())
    assert children(zk, "/aio-leases") == []


def test_ctrl_c_while_waiting_gives_back_the_leases_taken(zk, zk_factory, monkeypatch):
    from zkrecipes._drive import Driver

    other = Semaphore(zk_factory(), "/ctrl-c", 3)
    held = other.acquire_leases(2)
    sem = Semaphore(zk, "/ctrl-c", 3)

    def interrupted(self: Any, op: Any) -> Any:  # the wait for a holder's node to go, hit by Ctrl-C
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(Driver, "_sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sem.acquire_leases(2, timeout=10)  # one taken, the second waits
    monkeypatch.undo()
    assert len(children(zk, "/ctrl-c")) == 2  # the lease taken was given back
    held[0].release()
    got = sem.acquire_leases(2, timeout=10)  # nothing stuck
    assert len(got) == 2
    for lease in got + held[1:]:
        lease.release()
