"""A listening holder is told of a revoke request or a break across the faults the lab injects.

A hold follows its node with a data watch. kazoo (2.11) does not set its watches again when it
reconnects in the same session (no ``SetWatches``): the server dropped them with the old connection. A
holder whose link was cut briefly -- a partition shorter than the session timeout, a ZooKeeper server
killed -- keeps its hold, and must still hear of a mark or a delete made after it reconnected, and of
a mark made while it was away. Both fronts share the hold (:class:`zkrecipes.session.Hold`).
"""

from __future__ import annotations

import asyncio

import pytest
from lockhelpers import FAST_RECONNECT, StateLog, wait_until

from zkrecipes import FairLock, aio, break_lock, request_revoke
from zkrecipes.testing import Partition

DEADLINE = 10.0  # far beyond a watch's notification (milliseconds); the session is 8 s


@pytest.fixture
def partition(zk_ensemble):
    with Partition(zk_ensemble.hosts) as p:
        yield p


def _holder(zk_factory, partition):
    return zk_factory(hosts=partition.hosts, timeout=8.0, connection_retry=FAST_RECONNECT)


def _blip(client, partition, log: StateLog) -> None:
    """Cut the holder's link, and heal it once the hold is suspended; return once it is held again in the
    same session (the node verified ours): shorter than the session timeout, as a server kill is."""
    session = client.client_id[0]
    k = log.mark()
    partition.cut()
    k = log.wait_for("suspended", since=k, timeout=DEADLINE)
    partition.heal()
    log.wait_for("held", since=k, timeout=DEADLINE)
    assert client.connected and client.client_id[0] == session, "the blip must not end the session"


@pytest.mark.parametrize("then", ["revoke", "break"])
def test_a_hold_that_reconnected_is_told_of_a_later_request_or_break(zk, zk_factory, partition, then):
    client = _holder(zk_factory, partition)
    lock = FairLock(client, "/rvf/later")
    asked = lock.revoke_requested  # listens: the hold follows its node
    log = StateLog(lock)
    assert lock.acquire(timeout=DEADLINE)
    token = lock.token
    client.sync("/")  # answered after the hold's own read: its data watch is set on the server
    _blip(client, partition, log)

    k = log.mark()
    if then == "revoke":
        assert request_revoke(zk, "/rvf/later") == [lock.node.rsplit("/", 1)[1]]
        assert asked.wait(DEADLINE), "a holder that reconnected was never told of the revoke request"
        log.wait_for("revoke-requested", since=k, timeout=1.0)
        assert lock.is_held  # a request takes nothing
    else:
        break_lock(zk, "/rvf/later", token)
        assert lock.lost.wait(DEADLINE), "a holder that reconnected was never told its node was broken"
        log.wait_for("lost", since=k, timeout=1.0)
        assert not lock.is_held
    lock.release()


def test_a_mark_made_while_the_holder_was_away_is_told_once_it_is_back(zk, zk_factory, partition):
    client = _holder(zk_factory, partition)
    lock = FairLock(client, "/rvf/away")
    asked = lock.revoke_requested
    log = StateLog(lock)
    assert lock.acquire(timeout=DEADLINE)
    session = client.client_id[0]
    client.sync("/")
    partition.cut()
    log.wait_for("suspended", timeout=DEADLINE)
    assert request_revoke(zk, "/rvf/away") == [lock.node.rsplit("/", 1)[1]]  # while the holder is away
    assert not asked.is_set()
    partition.heal()
    assert asked.wait(DEADLINE), "a mark made while the holder was away was never told"
    assert client.client_id[0] == session and "revoke-requested" in log.states
    wait_until(lambda: lock.is_held, DEADLINE, "held again")
    lock.release()


@pytest.mark.parametrize("then", ["revoke", "break"])
def test_aio_a_hold_that_reconnected_is_told_of_a_later_request_or_break(zk, zk_factory, partition, then):
    client = _holder(zk_factory, partition)

    async def main() -> None:
        lock = aio.FairLock(client, "/rvf/aio")
        log = StateLog(lock)
        asked = lock.revoke_requested
        assert await lock.acquire(timeout=DEADLINE)
        token = lock.token
        await asyncio.to_thread(client.sync, "/")
        await asyncio.to_thread(_blip, client, partition, log)
        if then == "revoke":
            await aio.request_revoke(zk, "/rvf/aio")
            await asyncio.wait_for(asked.wait(), DEADLINE)
            assert "revoke-requested" in log.states and lock.is_held
        else:
            await aio.break_lock(zk, "/rvf/aio", token)
            await asyncio.wait_for(lock.lost.wait(), DEADLINE)
            assert not lock.is_held
        await lock.release()

    asyncio.run(asyncio.wait_for(main(), 60))
