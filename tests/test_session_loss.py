"""Session loss against a real ensemble: holders are told, and nobody else's node is ever touched.

Server-side expiry of a holder, a link cut past the session timeout, a short cut, a killed ZooKeeper
leader, and a waiter whose session expires. Clients use 3-4 s sessions and reconnect quickly.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kazoo.protocol.states import KazooState
from lockhelpers import FAST_RECONNECT, RECIPES, Acquirer, StateLog, children, wait_until

from zkrecipes import FairLock, LeaderElection, LockLost, ReadWriteLock, Semaphore, aio
from zkrecipes.session import SessionWatcher
from zkrecipes.testing import Partition, expire_session


def session(client) -> int:
    assert client.connected and client.client_id, "client has no live session"
    return client.client_id[0]


def assert_off_kazoo_threads(log: StateLog) -> None:
    assert log.threads and not [m for m in log.threads if m.startswith("kazoo")], log.threads


@pytest.fixture
def partition(zk_ensemble):
    with Partition(zk_ensemble.hosts) as p:
        yield p


def test_expired_holder_is_told_and_its_release_spares_the_new_holder(zk_factory, make_lock, mutex):
    make = make_lock
    client = zk_factory(timeout=3.0)
    lock = make(client, "/expire")
    log = StateLog(lock)
    assert lock.acquire()
    old_session, node = session(client), lock.node

    expire_session(client)  # server-side: the ensemble ends the session
    log.wait_for("lost", timeout=10)
    assert lock.lost.wait(5)
    assert lock.state == "lost" and not lock.is_held and lock.token is None
    with pytest.raises(LockLost):
        lock.check()

    rival_client = zk_factory(timeout=3.0)
    rival = make(rival_client, "/expire")
    assert rival.acquire(timeout=10)  # the node went with the session
    if mutex == "exclusive":
        assert rival.node == node  # the very same path: a careless release would delete it

    lock.release()  # a no-op now: it must not delete the rival's node
    stat = rival_client.exists(rival.node)
    assert stat is not None and stat.ephemeralOwner == session(rival_client) != old_session
    assert rival.is_held
    assert log.states.count("lost") == 1 and log.states[-1] == "idle"
    assert_off_kazoo_threads(log)

    rival.release()
    assert lock.acquire(timeout=10)  # the lock object is usable again, on the new session
    assert not lock.lost.is_set() and lock.state == "held"
    lock.release()


def test_expired_reader_is_told_too(zk_factory):
    client = zk_factory(timeout=3.0)
    rw = ReadWriteLock(client, "/expire-r")
    log = StateLog(rw.read())
    assert rw.read().acquire()
    expire_session(client)
    log.wait_for("lost", timeout=10)
    assert rw.read().lost.is_set()
    with pytest.raises(LockLost):
        rw.read().check()
    writer = ReadWriteLock(zk_factory(), "/expire-r").write()
    assert writer.acquire(timeout=10)
    rw.read().release()
    assert writer.is_held
    writer.release()


def test_a_reader_that_joined_the_read_hold_is_told_as_its_creator_is(zk_factory):
    """Issue 48: a thread that joined its process's read node (no request of its own) learns of the hold's
    loss exactly as the thread that created the node: its own lock object's listeners and ``lost``, and
    ``check()`` on either thread raise LockLost."""
    client = zk_factory(timeout=3.0)
    creator, joiner = ReadWriteLock(client, "/expire-j").read(), ReadWriteLock(client, "/expire-j").read()
    logs = StateLog(creator), StateLog(joiner)
    assert creator.acquire()
    checked: dict = {}
    joined, lost_seen = threading.Event(), threading.Event()

    def join() -> None:
        assert joiner.acquire(timeout=10)
        checked["node"] = joiner.node
        joined.set()
        lost_seen.wait(20)
        try:
            joiner.check()
        except LockLost as exc:
            checked["error"] = exc
        joiner.release()

    t = threading.Thread(target=join)
    t.start()
    assert joined.wait(15) and checked["node"] == creator.node  # one shared node
    expire_session(client)
    for log in logs:
        log.wait_for("lost", timeout=10)
    assert creator.lost.is_set() and joiner.lost.is_set()
    lost_seen.set()
    t.join(15)
    assert isinstance(checked.get("error"), LockLost)
    with pytest.raises(LockLost):
        creator.check()
    creator.release()


@pytest.mark.parametrize("recipe", ["fair", "exclusive"])
def test_cut_past_the_session_timeout_is_suspended_then_lost(zk_factory, partition, recipe):
    make = RECIPES[recipe]
    client = zk_factory(hosts=partition.hosts, timeout=3.0, connection_retry=FAST_RECONNECT)
    lock = make(client, "/cut")
    tolerant = make(client, "/cut", tolerate_suspended=True)
    log = StateLog(lock)
    assert lock.acquire()
    assert tolerant.acquire()  # the same hold, reentrantly, through a lock object that tolerates suspension
    old_session, node = session(client), lock.node

    cut_at = time.monotonic()
    partition.cut()
    k = log.wait_for("suspended", timeout=5)
    assert not lock.is_held and lock.state == "suspended" and not lock.lost.is_set()
    with pytest.raises(LockLost):
        lock.check()
    tolerant.check()  # built to tolerate suspension: the hold may still be ours

    log.wait_for("lost", since=k, timeout=10)
    assert time.monotonic() - cut_at >= 2.5  # not before the session could have expired
    assert lock.lost.is_set() and not lock.is_held
    with pytest.raises(LockLost):
        tolerant.check()

    rival_client = zk_factory(timeout=3.0)
    rival = make(rival_client, "/cut")
    assert rival.acquire(timeout=15)  # the ensemble expired the session meanwhile
    partition.heal()
    wait_until(lambda: client.connected and client.client_id[0] != old_session, 15, "reconnected, new session")
    tolerant.release()
    lock.release()  # no-ops: the rival's node stays
    assert rival_client.exists(rival.node) is not None and rival.is_held
    assert log.states.count("lost") == 1 and "held" not in log.states[k:]
    assert rival_client.exists(node) is None or recipe == "exclusive"
    rival.release()


@pytest.mark.parametrize("front", ["threads", "asyncio"])
@pytest.mark.parametrize("fault", ["expiry", "cut"])
def test_a_lease_check_refuses_once_kazoo_knows_before_the_dispatcher_tells(zk_factory, partition, fault, front):
    """A semaphore's lease has no fencing token: its holder's ``check()`` is all that stops it acting once
    ZooKeeper may have given the lease away. It must refuse as soon as kazoo has seen the connection go or
    a new session, not a thread hop later when the session dispatcher tells the hold (the safety lab saw
    a lease holder act in that hop under load). The dispatcher is kept busy here, so only the check's own
    look at kazoo can refuse."""
    client = zk_factory(hosts=partition.hosts, timeout=3.0, connection_retry=FAST_RECONNECT)
    path = f"/lease-hop-{fault}-{front}"
    busy, go, gone = threading.Event(), threading.Event(), threading.Event()
    client.add_listener(lambda state: gone.set() if state != KazooState.CONNECTED else None)

    def block() -> None:  # run on the dispatcher thread: it tells nobody anything until go is set
        busy.set()
        go.wait(20)

    def fault_and_wait() -> None:
        SessionWatcher.of(client).post(block)
        assert busy.wait(5)
        if fault == "expiry":
            expire_session(client)  # returns with kazoo on a new session
        else:
            partition.cut()
            assert gone.wait(5)  # kazoo's thread has seen the link go

    if front == "threads":
        sem = Semaphore(client, path, 2)
        log = StateLog(sem)
        assert sem.acquire(timeout=10)
        try:
            fault_and_wait()
            assert log.states[-1] == "held"  # the hold was told nothing yet
            with pytest.raises(LockLost):
                sem.check()
        finally:
            go.set()
            partition.heal()
        sem.release()
        return

    async def main() -> None:
        sem = aio.Semaphore(client, path, 2)
        log = StateLog(sem)
        assert await sem.acquire(timeout=10)
        try:
            await asyncio.to_thread(fault_and_wait)
            assert log.states[-1] == "held"  # the hold was told nothing yet
            with pytest.raises(LockLost):
                await sem.check()
        finally:
            go.set()
            partition.heal()
        await sem.release()

    asyncio.run(main())


@pytest.mark.parametrize("recipe", ["fair", "exclusive", "rw-read"])
def test_short_cut_is_suspended_then_held_with_the_same_node(zk_factory, partition, recipe):
    client = zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)
    lock = RECIPES[recipe](client, "/blip")
    log = StateLog(lock)
    assert lock.acquire()
    sid, node, token = session(client), lock.node, lock.token

    partition.cut()
    k = log.wait_for("suspended", timeout=5)
    assert not lock.is_held
    partition.heal()
    log.wait_for("held", since=k, timeout=10)
    assert lock.is_held and not lock.lost.is_set()
    lock.check()
    assert (lock.node, lock.token, session(client)) == (node, token, sid)
    assert client.exists(node).ephemeralOwner == sid
    rival = RECIPES["exclusive" if recipe == "exclusive" else "fair"](zk_factory(), "/blip")
    assert rival.acquire(timeout=0) is False  # still exclusive
    assert "lost" not in log.states
    assert_off_kazoo_threads(log)
    lock.release()
    assert children(client, "/blip") == []


def test_leader_killed_while_held_stays_held(zk_local_ensemble, zk_factory):
    ens = zk_local_ensemble
    client = zk_factory(timeout=4.0, connection_retry=FAST_RECONNECT)
    lock = FairLock(client, "/failover")
    log = StateLog(lock)
    assert lock.acquire()
    sid, node, token = session(client), lock.node, lock.token
    leader = ens.leader()
    assert leader is not None
    try:
        ens.kill(leader)
        ens.wait_serving(timeout=30)  # the two survivors elect a new leader
        wait_until(lambda: client.connected and lock.state == "held", 15, "the client reconnected and the hold is held")
        assert lock.is_held and not lock.lost.is_set() and "lost" not in log.states
        lock.check()
        assert (lock.node, lock.token, session(client)) == (node, token, sid)
        assert client.exists(node).ephemeralOwner == sid
        assert FairLock(zk_factory(), "/failover").acquire(timeout=0) is False
        lock.release()
        assert children(client, "/failover") == []
    finally:
        ens.start(leader)


@pytest.mark.parametrize("recipe", ["fair", "rw-write", "rw-read"])
def test_waiter_whose_session_expires_requeues_and_acquires(zk, zk_factory, recipe):
    holder = RECIPES["fair"](zk, "/requeue")  # a writer, so readers wait too
    assert holder.acquire()
    client = zk_factory(timeout=3.0)
    lock = RECIPES[recipe](client, "/requeue")
    finish = threading.Event()
    start = time.monotonic()
    waiter = Acquirer(lock, hold_until=finish, timeout=20)
    old = wait_until(lambda: [n for n in children(zk, "/requeue") if n != holder.node.rsplit("/", 1)[1]], 10, "queued")
    old_session = session(client)

    expire_session(client)
    new = wait_until(
        lambda: [n for n in children(zk, "/requeue") if n not in old and n != holder.node.rsplit("/", 1)[1]],
        10,
        "the waiter queued again on its new session",
    )
    assert not waiter.done.is_set()
    assert set(children(zk, "/requeue")) == {holder.node.rsplit("/", 1)[1], *new}  # the old node is gone
    holder.release()
    assert waiter.wait(20) is True
    assert time.monotonic() - start < 20
    assert waiter.node.rsplit("/", 1)[1] == new[0]
    assert zk.exists(waiter.node).ephemeralOwner == session(client) != old_session
    finish.set()
    assert waiter.released.wait(10)
    assert children(zk, "/requeue") == []


@pytest.mark.parametrize("recipe", ["exclusive"])  # the recipe whose next holder reuses the very path
def test_release_during_a_cut_never_deletes_a_later_holders_node(zk_factory, partition, recipe):
    """release() while the link is down cannot reach ZooKeeper; when it can again, the session may be
    gone and the same path held by someone else -- the late delete must not hit their node."""
    make = RECIPES[recipe]
    client = zk_factory(hosts=partition.hosts, timeout=3.0, connection_retry=FAST_RECONNECT)
    lock = make(client, "/late")
    log = StateLog(lock)
    let_go = threading.Event()
    holder = Acquirer(lock, hold_until=let_go)
    assert holder.wait() is True
    old_session = session(client)
    partition.cut()
    log.wait_for("suspended", timeout=5)
    let_go.set()  # the holder releases now: its delete has no connection to go over

    rival_client = zk_factory(timeout=3.0)
    rival = make(rival_client, "/late")
    assert rival.acquire(timeout=15)  # the ensemble expired the session
    partition.heal()
    assert holder.released.wait(30)
    wait_until(lambda: client.connected and client.client_id[0] != old_session, 15, "reconnected, new session")
    client.sync("/late")
    stat = rival_client.exists(rival.node)
    assert stat is not None and stat.ephemeralOwner == session(rival_client)
    assert rival.is_held
    rival.release()


@pytest.mark.parametrize("release_during_cut", [False, True], ids=["release-after-heal", "release-during-cut"])
@pytest.mark.parametrize("recipe", ["fair", "exclusive", "rw-read"])
def test_waiter_survives_a_short_cut(zk, zk_factory, partition, recipe, release_during_cut):
    """A dropped connection loses the waiter's watch (server- and kazoo-side); it must watch again."""
    holder = RECIPES["exclusive" if recipe == "exclusive" else "fair"](zk, "/wblip")
    assert holder.acquire()
    client = zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)
    lock = RECIPES[recipe](client, "/wblip")
    finish = threading.Event()
    waiter = Acquirer(lock, hold_until=finish, timeout=30)
    prefix = client.chroot + "/wblip/"
    wait_until(lambda: any(p.startswith(prefix) for p in list(client._data_watchers)), 10, "the waiter watches")
    sid = session(client)

    partition.cut()
    wait_until(lambda: not client.connected, 5, "the waiter's connection dropped")
    if release_during_cut:
        holder.release()
    partition.heal()
    wait_until(lambda: client.connected, 10, "reconnected")
    assert session(client) == sid
    if not release_during_cut:
        wait_until(lambda: any(p.startswith(prefix) for p in list(client._data_watchers)), 10, "watching again")
        assert not waiter.done.is_set()
        holder.release()
    assert waiter.wait(15) is True
    assert client.exists(waiter.node).ephemeralOwner == sid
    finish.set()
    assert waiter.released.wait(10)
    zk.sync("/wblip")  # the waiter deleted its node through another server: catch up before reading
    assert children(zk, "/wblip") == []


def _hold(client, recipe: str, path: str):
    """(holder, release) for a lock recipe or an election, already held."""
    if recipe == "election":
        holder = LeaderElection(client, path)
        assert holder.campaign(timeout=10)
        return holder, holder.resign
    holder = RECIPES[recipe](client, path)
    assert holder.acquire(timeout=10)
    return holder, holder.release


@pytest.mark.parametrize("recipe", ["fair", "exclusive", "election"])
def test_release_while_suspended_deletes_once_the_session_is_back(zk, zk_factory, partition, recipe):
    client = zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)
    holder, let_go = _hold(client, recipe, "/defer")
    log = StateLog(holder)
    sid, node = session(client), holder.node
    partition.cut()
    log.wait_for("suspended", timeout=5)
    healer = threading.Timer(1.0, partition.heal)  # the fault: a 1 s cut, well inside the session
    healer.start()
    let_go()
    healer.join()
    assert zk.exists(node) is None and session(client) == sid  # deleted by its owner, not by an expiry
    assert holder.state == "idle" and "lost" not in log.states and not holder.lost.is_set()


@pytest.mark.parametrize("recipe", ["fair", "exclusive", "election"])
def test_release_cut_off_past_the_session_returns_and_reports_the_loss(zk, zk_factory, partition, recipe):
    client = zk_factory(hosts=partition.hosts, timeout=3.0, connection_retry=FAST_RECONNECT)
    let_go = threading.Event()
    if recipe == "election":
        holder = LeaderElection(client, "/gone")
        assert holder.campaign(timeout=10)
        released = threading.Event()
        threading.Thread(target=lambda: (let_go.wait(60), holder.resign(), released.set()), daemon=True).start()
    else:
        holder = RECIPES[recipe](client, "/gone")
        acquirer = Acquirer(holder, hold_until=let_go)  # a lock is released by the thread that holds it
        assert acquirer.wait() is True
        released = acquirer.released
    log = StateLog(holder)
    partition.cut()
    log.wait_for("suspended", timeout=5)
    let_go.set()
    assert released.wait(15)  # bounded by the session timeout, not by the link coming back
    assert not client.connected
    assert "lost" in log.states and log.states[-1] == "idle" and holder.lost.is_set()
    partition.heal()
    rival, rival_release = _hold(zk, "exclusive" if recipe == "exclusive" else "fair", "/gone")
    rival_release()


def test_stopping_the_client_while_held_reports_lost_and_leaves_no_thread(zk_factory):
    from zkrecipes.session import SessionWatcher

    client = zk_factory(timeout=3.0)
    lock = FairLock(client, "/stop")
    log = StateLog(lock)
    assert lock.acquire()
    thread = SessionWatcher.of(client)._thread
    assert thread is not None and thread.is_alive()
    client.stop()  # the session ends with the client; the hold with it
    log.wait_for("lost", timeout=10)
    wait_until(lambda: not thread.is_alive(), 10, "the session thread of a stopped client ended")
    lock.release()  # clears local state, sends nothing
    assert lock.state == "idle"
