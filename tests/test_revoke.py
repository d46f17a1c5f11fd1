"""Revocation and break on a real ensemble: a revoke request reaches the holder (event and listener, on
both fronts) and takes nothing; break_lock deletes exactly the holder's node with the token given and
refuses every other; the CLI's revoke and break; bad input refused before any request."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, NoNodeError
from lockhelpers import MUTEXES, RECIPES, StateLog, children, wait_until

from zkrecipes import (
    FairLock,
    LockError,
    LockLost,
    ReadWriteLock,
    Semaphore,
    aio,
    break_lock,
    naming,
    request_revoke,
)
from zkrecipes._listing import ranked


def holders(children: list) -> list:
    """The children that hold, in queue order, as the one listing ranks them (what revoke and break mark)."""
    return [node.name for _, node, holds in ranked(children) if holds]

DEADLINE = 15.0
_SCRIPT = Path(sys.executable).with_name("zkrecipes")
ZKRECIPES = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "zkrecipes.cli"]


def record_requests(client, monkeypatch) -> list:
    """Names of the requests ``client`` puts on the wire from now on (pings left out, and the ``Exists`` a
    hold confirms itself with after the process stood still: a loaded machine stalls, and that read is
    the doubt clock's, not what these tests count)."""
    sent: list = []
    conn = client._connection
    real = conn._submit

    def submit(request, timeout, xid=None):
        if type(request).__name__ not in ("Ping", "Exists"):
            sent.append(type(request).__name__)
        return real(request, timeout, xid)

    monkeypatch.setattr(conn, "_submit", submit)
    return sent


class Waiter:
    """``lock`` acquired on a thread of its own, held until :meth:`finish` (a hold belongs to its thread)."""

    def __init__(self, lock) -> None:
        self.lock = lock
        self.granted = threading.Event()
        self.node = None  # the node it holds, read on its own thread (a lease's belongs to that thread)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        if self.lock.acquire(timeout=DEADLINE):
            self.node = self.lock.node
            self.granted.set()
            self._done.wait(DEADLINE)
            self.lock.release()

    def finish(self) -> None:
        self._done.set()
        self._thread.join(DEADLINE)


# -- the holder hears a revoke request and keeps its hold ---------------------------------------------
@pytest.mark.parametrize("recipe", MUTEXES)
def test_a_revoke_request_reaches_the_holder_and_takes_nothing(zk, zk_factory, recipe):
    lock = RECIPES[recipe](zk, "/rv/a")
    asked = lock.revoke_requested  # the holder listens: its holds follow their node
    log = StateLog(lock)
    assert lock.acquire(timeout=DEADLINE)
    waiter_lock = RECIPES[recipe](zk_factory(), "/rv/a")
    waiter_asked = waiter_lock.revoke_requested  # the waiter listens too, from before the request
    waiter_log = StateLog(waiter_lock)
    waiter = Waiter(waiter_lock)
    wait_until(lambda: len(children(zk, "/rv/a")) == 2 or recipe == "exclusive", DEADLINE, "the waiter queued")
    assert not asked.is_set()
    waiter_node = None if recipe == "exclusive" else next(  # (an ExclusiveLock waiter has no node)
        c for c in children(zk, "/rv/a") if c != lock.node.rsplit("/", 1)[1])

    marked = request_revoke(zk_factory(), "/rv/a")
    assert marked == [lock.node.rsplit("/", 1)[1]]  # the holder only, not the waiter
    assert asked.wait(DEADLINE), "revoke_requested was not set"
    log.wait_for("revoke-requested")
    assert not any(t.startswith("kazoo") for t in log.threads), log.threads  # never on kazoo's threads
    lock.check()  # nothing taken: still held, certain
    assert lock.is_held and lock.state == "held"
    assert not waiter.granted.is_set()
    if waiter_node is not None:
        assert zk.exists(f"/rv/a/{waiter_node}").version == 0  # the waiter's node was never written
    stat = zk.exists(lock.node)
    assert (stat.version, naming.revoke_marked(zk.get(lock.node)[0])) == (1, True)  # marked by one write
    assert request_revoke(zk, "/rv/a") == marked  # asked again: already marked...
    again = zk.exists(lock.node)
    assert (again.version, again.mzxid) == (stat.version, stat.mzxid)  # ...and not written a second time

    lock.release()
    assert waiter.granted.wait(DEADLINE)  # the waiter is granted as ever
    granted_node = waiter.node
    assert zk.exists(granted_node).version == 0  # never marked: nobody asked the waiter
    # a positive control: the waiter, now the holder and listening since before the first request, is
    # told of a request made now -- so it would have been told of a mark put on its node while it waited
    assert request_revoke(zk, "/rv/a") == [granted_node.rsplit("/", 1)[1]]
    assert waiter_asked.wait(DEADLINE)
    waiter_log.wait_for("revoke-requested")
    assert waiter_log.states.count("revoke-requested") == 1  # told once, of this request only
    assert zk.exists(granted_node).version == 1
    waiter.finish()


def test_revoke_requested_is_cleared_by_the_next_acquire_and_told_once(zk, zk_factory):
    lock = FairLock(zk, "/rv/clear")
    log = StateLog(lock)  # a listener alone makes the holds follow their node
    with lock:
        assert request_revoke(zk_factory(), "/rv/clear")
        log.wait_for("revoke-requested")
        assert lock.revoke_requested.is_set()  # read after the request: already told
    assert lock.revoke_requested.is_set()  # stays set, like lost, until the next acquire
    with lock:
        assert not lock.revoke_requested.is_set()
    assert log.states.count("revoke-requested") == 1


def test_readers_and_lease_holders_are_all_asked(zk, zk_factory):
    readers = [ReadWriteLock(zk_factory(), "/rv/rw").read() for _ in range(2)]
    for r in readers:
        r.revoke_requested  # noqa: B018  (listens)
        assert r.acquire(timeout=DEADLINE)
    writer_lock = ReadWriteLock(zk_factory(), "/rv/rw").write()
    writer_log = StateLog(writer_lock)  # the queued writer listens from before the request
    writer = Waiter(writer_lock)
    wait_until(lambda: len(children(zk, "/rv/rw")) == 3, DEADLINE, "the writer queued")
    reader_nodes = sorted(r.node.rsplit("/", 1)[1] for r in readers)
    (writer_node,) = set(children(zk, "/rv/rw")) - set(reader_nodes)
    assert sorted(request_revoke(zk, "/rv/rw")) == reader_nodes
    assert zk.exists(f"/rv/rw/{writer_node}").version == 0  # the queued writer's node is not marked
    for r in readers:
        assert r.revoke_requested.wait(DEADLINE)
        r.release()
    assert writer.granted.wait(DEADLINE)
    assert writer.node.rsplit("/", 1)[1] == writer_node
    assert zk.exists(writer.node).version == 0  # still unmarked once it holds
    assert request_revoke(zk, "/rv/rw") == [writer_node]  # positive control: asked now, it is told
    writer_log.wait_for("revoke-requested")
    assert writer_log.states.count("revoke-requested") == 1
    writer.finish()

    leases = [Semaphore(zk_factory(), "/rv/sem", 2) for _ in range(2)]
    for s in leases:
        s.add_listener(lambda *_: None)
        assert s.acquire(timeout=DEADLINE)
    assert len(request_revoke(zk, "/rv/sem")) == 2
    for s in leases:
        assert s.revoke_requested.wait(DEADLINE)
        s.check()
        s.release()


def test_a_hold_that_nobody_listens_to_costs_nothing_and_one_that_does_one_read(zk, monkeypatch):
    zk.ensure_path("/rv/cost")
    lock = FairLock(zk, "/rv/cost")
    with lock:
        pass
    sent = record_requests(zk, monkeypatch)
    with lock:
        pass
    assert sent == ["Create2", "GetChildren", "Delete"]  # unchanged: no watch, no read
    del sent[:]
    lock.revoke_requested  # noqa: B018  (listens from now on)
    assert lock.acquire()
    wait_until(lambda: len(sent) == 3, DEADLINE, "the data watch's read went out")
    assert sent == ["Create2", "GetChildren", "GetData"]  # the data watch's read, not waited for
    lock.release()
    wait_until(lambda: sent[-1] == "Delete", DEADLINE, "released")


def test_no_holder_no_mark(zk):
    assert request_revoke(zk, "/rv/nobody") == []  # the path does not exist
    zk.ensure_path("/rv/empty")
    assert request_revoke(zk, "/rv/empty") == []


def test_marks_keep_what_contenders_read_and_curators_mark_is_recognised():
    data = naming.node_data("job-7", "g", "h")
    marked = naming.with_revoke_mark(data)
    assert naming.revoke_marked(marked) and not naming.revoke_marked(data)
    assert {k: v for k, v in json.loads(marked).items() if k != "revoke"} == json.loads(data)
    assert naming.with_revoke_mark(b"some-identifier") == b"__REVOKE__"  # kazoo's/Curator's identifier data
    assert naming.revoke_marked(b"__REVOKE__") and not naming.revoke_marked(b"")


def test_contenders_still_read_a_marked_holder(zk, zk_factory):
    lock = FairLock(zk, "/rv/cont", "worker-1")
    with lock:
        request_revoke(zk_factory(), "/rv/cont")
        (c,) = lock.contenders()
        assert c.identifier == "worker-1" and c.pid is not None


def test_holders_follow_the_wait_rules():
    w = [f"h-W-{i:010d}" for i in range(3)]
    r = [f"h-R-{i:010d}" for i in range(3, 6)]
    assert holders([w[1], w[0], r[0]]) == [w[0]]
    assert holders([r[1], r[0], "h-W-0000000009"]) == [r[0], r[1]]  # readers ahead of a writer
    assert holders([r[2], w[1]]) == [w[1]]  # a reader behind a writer waits
    assert holders(["lock"]) == ["lock"]
    leases = [f"h-S2-{i:010d}" for i in range(4)]
    assert holders(leases) == leases[:2]
    assert holders([]) == []


# -- the asyncio front ----------------------------------------------------------------------------------
def test_aio_holder_hears_the_request_on_its_loop(zk, zk_factory):
    other = zk_factory()

    async def main():
        lock = aio.FairLock(zk, "/rv/aio")
        told = []
        lock.add_listener(lambda lk, state: told.append((state, threading.current_thread())))
        async with lock:
            marked = await aio.request_revoke(other, "/rv/aio")
            assert marked == [lock.node.rsplit("/", 1)[1]]
            await asyncio.wait_for(lock.revoke_requested.wait(), DEADLINE)
            assert isinstance(lock.revoke_requested, asyncio.Event)
            assert ("revoke-requested", threading.current_thread()) in told  # on the loop's thread
            await lock.check()
            token = lock.token
            assert await aio.break_lock(other, "/rv/aio", token) == marked[0]
            await asyncio.wait_for(lock.lost.wait(), DEADLINE)  # broken: the hold is lost at once
            with pytest.raises(LockLost):
                await lock.check()

    asyncio.run(asyncio.wait_for(main(), 60))
    assert children(zk, "/rv/aio") == []


# -- break ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", MUTEXES)
def test_break_deletes_exactly_the_holders_node_and_the_waiter_is_granted(zk, zk_factory, recipe):
    lock = RECIPES[recipe](zk, "/br/a")
    log = StateLog(lock)
    assert lock.acquire(timeout=DEADLINE)
    waiter = Waiter(RECIPES[recipe](zk_factory(), "/br/a"))
    wait_until(lambda: len(children(zk, "/br/a")) == 2 or recipe == "exclusive", DEADLINE, "the waiter queued")
    operator = zk_factory()
    token, node = lock.token, lock.node

    with pytest.raises(LockError, match="no holder has token"):
        break_lock(operator, "/br/a", token + 1_000_000)  # another token: refused
    if recipe != "exclusive":  # (its waiters have no node)
        waiter_node = next(c for c in children(zk, "/br/a") if c != node.rsplit("/", 1)[1])
        with pytest.raises(LockError, match="a waiter's node is never broken"):
            break_lock(operator, "/br/a", zk.exists(f"/br/a/{waiter_node}").czxid)
    assert zk.exists(node).czxid == token  # untouched
    lock.check()

    assert break_lock(operator, "/br/a", token) == node.rsplit("/", 1)[1]
    assert waiter.granted.wait(DEADLINE), "the waiter was not granted"
    log.wait_for("lost")
    assert lock.lost.is_set()
    with pytest.raises(LockLost):
        lock.check()
    with pytest.raises(LockLost):
        tx = lock.transaction()
        tx.create("/br-fenced")
        tx.commit()
    assert zk.exists("/br-fenced") is None
    now = children(zk, "/br/a")
    lock.release()  # forgets it locally; never deletes the new holder's node
    assert now and children(zk, "/br/a") == now
    waiter.finish()


def test_a_holder_that_does_not_listen_learns_of_a_break_through_its_fence(zk, zk_factory):
    lock = FairLock(zk, "/br/quiet")
    with lock:
        break_lock(zk_factory(), "/br/quiet", lock.token)
        assert zk.exists(lock.node) is None
        tx = lock.transaction()
        tx.create("/br-quiet")
        lock.check()  # not told: it does not follow its node (see docs/revocation.rst)
        with pytest.raises(LockLost, match="our node is gone"):  # the fenced multi refuses
            tx.commit()
        assert zk.exists("/br-quiet") is None


@pytest.mark.parametrize("front", ["threads", "asyncio"])
def test_a_release_that_finds_its_node_broken_reports_the_hold_lost(zk, zk_factory, front):
    """A hold broken just before its release, its owner not told yet (here: an object that does not
    follow its node; the same for one whose watch notification is still on its way): the release's
    delete finds the node gone in our live session, so the hold is reported lost ("lost" is set) rather
    than released as if nothing happened; nothing else is deleted."""
    operator = zk_factory()
    if front == "threads":
        lock = FairLock(zk, "/br/late")
        assert lock.acquire(timeout=DEADLINE)
        break_lock(operator, "/br/late", lock.token)
        lock.release()
    else:
        lock = aio.FairLock(zk, "/br/late")

        async def main() -> None:
            assert await lock.acquire(timeout=DEADLINE)
            await aio.break_lock(operator, "/br/late", lock.token)
            await lock.release()

        asyncio.run(main())
    assert lock.lost.is_set()
    assert children(zk, "/br/late") == []
    again = FairLock(zk, "/br/late")  # the path works on
    assert again.acquire(timeout=DEADLINE)
    again.release()
    assert not again.lost.is_set()


def test_break_refuses_an_empty_path(zk):
    with pytest.raises(LockError, match="no holder"):
        break_lock(zk, "/br/nobody", 12345)


# -- bad input, before any request ----------------------------------------------------------------------
def test_bad_input_is_refused_before_any_request(zk, monkeypatch):
    sent = record_requests(zk, monkeypatch)
    for call in (lambda: request_revoke(zk, "no-slash"), lambda: break_lock(zk, "/x/", 5)):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(TypeError, match="token must be an int"):
        break_lock(zk, "/x", "12")
    with pytest.raises(TypeError, match="token must be an int"):
        break_lock(zk, "/x", True)
    with pytest.raises(ValueError, match="czxid"):
        break_lock(zk, "/x", 0)
    with pytest.raises(TypeError, match="KazooClient"):
        request_revoke("localhost:2181", "/x")
    with pytest.raises(TypeError, match="token must be an int"):
        asyncio.run(aio.break_lock(zk, "/x", 1.5))
    assert sent == []


def test_a_stopped_client_is_refused(zk_factory):
    client: KazooClient = zk_factory()
    client.stop()
    with pytest.raises(ConnectionClosedError):
        request_revoke(client, "/x")


# -- the command line -------------------------------------------------------------------------------------
def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(ZKRECIPES + list(args), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_cli_revoke_and_break(zk, zk_ensemble, zk_namespace):
    hosts = zk_ensemble.hosts + zk_namespace
    r = run_cli("revoke", "/cli/a", "--hosts", hosts)
    assert r.returncode == 1 and "no holder" in r.stderr, r
    lock = FairLock(zk, "/cli/a")
    lock.revoke_requested  # noqa: B018
    with lock:
        r = run_cli("revoke", "/cli/a", "--hosts", hosts)
        assert r.returncode == 0, r.stderr
        assert lock.node.rsplit("/", 1)[1] in r.stdout
        assert lock.revoke_requested.wait(DEADLINE)

        r = run_cli("break", "/cli/a", "--token", str(lock.token + 1), "--hosts", hosts)
        assert r.returncode == 1 and "no holder has token" in r.stderr, r
        assert "Traceback" not in r.stderr
        assert zk.exists(lock.node) is not None  # untouched
        r = run_cli("break", "/cli/a", "--token", "x1", "--hosts", hosts)
        assert r.returncode == 2, r

        r = run_cli("status", "/cli/a", "--json", "--hosts", hosts)
        assert json.loads(r.stdout)[0]["token"] == lock.token  # where an operator finds the token
        r = run_cli("break", "/cli/a", "--token", str(lock.token), "--grace", "0", "--hosts", hosts)
        assert r.returncode == 0, r.stderr
        with pytest.raises(NoNodeError):
            zk.get(lock.node)
        assert lock.lost.wait(DEADLINE)
