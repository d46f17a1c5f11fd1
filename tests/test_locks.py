"""FairLock and ExclusiveLock against a real 3-server ensemble: what a user of a mutex relies on.

Mutual exclusion across processes, FIFO grants, one wake-up per release, reentrancy, release by a
non-owner, cleanup (no node, no watch -- client- and server-side) after a timeout, cancel, non-blocking
miss or interrupt, fencing tokens, container parents, ACLs and a lost create reply.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from kazoo.exceptions import ConnectionLoss, NoAuthError, NoNodeError
from kazoo.protocol.serialization import Create2
from kazoo.protocol.states import EventType
from kazoo.security import make_digest_acl
from lockhelpers import RECIPES, Acquirer, assert_no_watch, children, full_path, server_watches, wait_until

from zkrecipes import ExclusiveLock, FairLock, LockCancelled, LockError, LockTimeout, ReadWriteLock, _kazoo
from zkrecipes._drive import Driver


def watching(client, path: str) -> bool:
    """True once ``client`` has a (kazoo-registered) data/exists watch on some node under ``path``."""
    full = full_path(client, path) + "/"
    return any(p.startswith(full) and fns for p, fns in list(client._data_watchers.items()))


# -- mutual exclusion -------------------------------------------------------------------------------
HAMMER = r"""
import sys, time
from kazoo.client import KazooClient
from zkrecipes import ExclusiveLock, FairLock, ReadWriteLock
hosts, path, counter, rounds, kind = sys.argv[1:6]
zk = KazooClient(hosts=hosts, timeout=10.0)
zk.start(30)
lock = {"fair": FairLock, "exclusive": ExclusiveLock,
        "rw-write": lambda c, p: ReadWriteLock(c, p).write()}[kind](zk, path)
print("ready", flush=True)
assert sys.stdin.readline().strip() == "go"
for _ in range(int(rounds)):
    with lock:
        assert lock.is_held
        with open(counter) as f:
            value, last_token = map(int, f.read().split())
        if lock.token <= last_token:
            sys.exit("token %d not above the previous holder's %d" % (lock.token, last_token))
        time.sleep(0.002)  # widen the read-modify-write window
        with open(counter, "w") as f:
            f.write("%d %d" % (value + 1, lock.token))
zk.stop()
zk.close()
"""


@pytest.mark.parametrize(
    "kinds", [["fair"] * 6, ["exclusive"] * 6, ["fair", "rw-write"] * 3], ids=["fair", "exclusive", "fair+rw-write"]
)
def test_mutual_exclusion_across_processes(zk_ensemble, zk_namespace, tmp_path, kinds):
    """Six processes, each its own session, hammer a non-atomic file counter: no increment is lost."""
    rounds = 25
    counter = tmp_path / "counter"
    counter.write_text("0 0")
    hosts = zk_ensemble.hosts + zk_namespace
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HAMMER, hosts, "/hammer", str(counter), str(rounds), kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for kind in kinds
    ]
    try:
        for p in procs:  # every process is connected before any starts: they really contend
            line = p.stdout.readline()
            assert line.strip() == "ready", f"worker failed to start: {line!r} {p.stderr.read()}"
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            _, err = p.communicate(timeout=90)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    value, _ = map(int, counter.read_text().split())
    assert value == rounds * len(kinds)


def test_mutual_exclusion_between_threads_of_one_process(zk, zk_factory):
    """Threads sharing one client (the local gate) and threads with their own clients exclude each other."""
    other = zk_factory()
    state = {"inside": 0, "max": 0, "count": 0}
    guard = threading.Lock()
    errors: list = []

    def worker(client) -> None:
        lock = FairLock(client, "/threads")  # a new object per thread: objects share the gate
        try:
            for _ in range(15):
                with lock:
                    with guard:
                        state["inside"] += 1
                        state["max"] = max(state["max"], state["inside"])
                    value = state["count"]
                    time.sleep(0.001)
                    state["count"] = value + 1
                    with guard:
                        state["inside"] -= 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(zk if i % 2 else other,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert state == {"inside": 0, "max": 1, "count": 90}
    assert children(zk, "/threads") == []


# -- fairness and wake-ups --------------------------------------------------------------------------
def test_grants_follow_queue_order(zk, zk_factory):
    lock_path = "/fifo"
    holder = FairLock(zk, lock_path)
    assert holder.acquire()
    grants: list = []
    go = threading.Event()

    locks = [FairLock(zk_factory(), lock_path, identifier=f"c{i}") for i in range(6)]

    def contend(lock) -> None:
        go.wait(10)
        with lock.hold(timeout=30):
            grants.append((lock.identifier, int(lock.node[-10:])))

    threads = [threading.Thread(target=contend, args=(lock,), daemon=True) for lock in locks]
    for t in threads:
        t.start()
    go.set()  # all enqueue at once, in whatever order the scheduler picks
    wait_until(lambda: len(holder.contenders()) == 7, 15, "6 contenders queued")
    queue = holder.contenders()
    assert queue[0].node == holder.node.rsplit("/", 1)[1]
    holder.release()
    for t in threads:
        t.join(30)
    assert grants == [(c.identifier, c.sequence) for c in queue[1:]]
    assert [s for _, s in grants] == sorted(s for _, s in grants)


class WatchCounter:
    """Counts watch notifications delivered to each client's waiters."""

    def __init__(self, monkeypatch) -> None:
        self.events: dict = {}
        self._lock = threading.Lock()
        original = Driver._on_watch
        counter = self

        def counting(waiter, event) -> None:
            if event.type != EventType.NONE:
                with counter._lock:
                    counter.events.setdefault(id(waiter.client), []).append(event)
            original(waiter, event)

        monkeypatch.setattr(Driver, "_on_watch", _kazoo.on_io_thread(counting))  # run where the driver's is

    def count(self, client) -> int:
        with self._lock:
            return len(self.events.get(id(client), []))


def test_a_release_wakes_exactly_one_waiter(zk, zk_factory, monkeypatch):
    counter = WatchCounter(monkeypatch)
    lock_path = "/herd"
    holder = FairLock(zk, lock_path)
    assert holder.acquire()
    clients = [zk_factory() for _ in range(5)]
    release = [threading.Event() for _ in clients]
    waiters = []
    for client, rel in zip(clients, release):  # queue them one by one so queue order is known
        waiters.append(Acquirer(FairLock(client, lock_path), hold_until=rel, timeout=30))
        wait_until(lambda c=client: watching(c, lock_path), 10, "waiter is watching its predecessor")
    assert [counter.count(c) for c in clients] == [0] * 5

    holder.release()
    for k, w in enumerate(waiters):
        assert w.wait(15) is True
        # The k+1 releases so far (holder, then waiters 0..k-1) woke waiters 0..k, once each.
        assert [counter.count(c) for c in clients] == [1] * (k + 1) + [0] * (4 - k)
        release[k].set()
        assert w.released.wait(15)
    assert children(zk, lock_path) == []


def test_exclusive_lock_release_wakes_every_waiter_as_documented(zk, zk_factory, monkeypatch):
    """The counter above does see a herd: ExclusiveLock's documented behaviour; still one holder at a time."""
    counter = WatchCounter(monkeypatch)
    holder = ExclusiveLock(zk, "/xherd")
    assert holder.acquire()
    clients = [zk_factory() for _ in range(3)]
    finish = threading.Event()
    waiters = [Acquirer(ExclusiveLock(c, "/xherd"), hold_until=finish, timeout=30) for c in clients]
    for c in clients:
        wait_until(lambda c=c: watching(c, "/xherd"), 10, "waiter is watching the lock node")
    holder.release()
    wait_until(lambda: all(counter.count(c) >= 1 for c in clients), 10, "every waiter woke")
    winner = wait_until(lambda: [w for w in waiters if w.done.is_set()], 10, "one waiter acquired")
    assert len(winner) == 1 and winner[0].result is True
    for w in waiters:
        if w is not winner[0]:
            w.lock.cancel()
            assert w.wait(10) is False
    finish.set()
    assert winner[0].released.wait(10)
    assert children(zk, "/xherd") == []


# -- reentrancy and ownership -----------------------------------------------------------------------
def test_reentrant_per_thread_nth_release_frees(zk, zk_factory, make_lock):
    make = make_lock
    lock = make(zk, "/reentrant")
    rival = make(zk_factory(), "/reentrant")
    assert lock.acquire()
    node, token = lock.node, lock.token
    assert lock.acquire() and lock.acquire(timeout=1)
    with lock:
        assert (lock.node, lock.token) == (node, token)
    assert children(zk, "/reentrant") == [node.rsplit("/", 1)[1]]  # one node for all levels
    lock.release()
    lock.release()
    assert lock.is_held and not rival.acquire(blocking=False)
    lock.release()
    assert not lock.is_held and lock.state == "idle" and lock.node is None and lock.token is None
    assert zk.exists(node) is None
    assert rival.acquire(timeout=10)
    rival.release()
    with pytest.raises(LockError):
        lock.release()


def test_lock_objects_of_one_client_share_the_local_gate(zk):
    a, b = FairLock(zk, "/gate"), FairLock(zk, "/gate")
    assert a.acquire()
    assert b.acquire()  # same thread, same client and path: reentrant through the shared gate
    assert len(children(zk, "/gate")) == 1
    other_thread = Acquirer(FairLock(zk, "/gate"), blocking=False)
    assert other_thread.wait() is False  # another thread of this process is excluded locally
    b.release()
    assert a.is_held
    a.release()
    assert children(zk, "/gate") == []


def test_release_by_non_owner_raises_and_leaves_the_hold(zk, zk_factory, make_lock):
    make = make_lock
    lock = make(zk, "/owner")
    with pytest.raises(LockError):
        lock.release()  # never acquired
    release = threading.Event()
    holder = Acquirer(lock, hold_until=release)
    assert holder.wait() is True
    with pytest.raises(LockError):
        lock.release()  # another thread holds it
    with pytest.raises(LockError):
        make(zk_factory(), "/owner").release()  # another session
    assert zk.exists(holder.node) is not None
    assert not make(zk_factory(), "/owner").acquire(blocking=False)
    release.set()
    assert holder.released.wait(10)
    assert children(zk, "/owner") == []


# -- cleanup on every exit path ---------------------------------------------------------------------
def test_zero_timeout_tries_once_without_waiting(zk, zk_factory, make_lock):
    make = make_lock
    lock = make(zk, "/zero")
    assert lock.acquire(timeout=0) is True  # a free lock is taken, not given up before trying
    assert make(zk_factory(), "/zero").acquire(timeout=0) is False
    lock.release()
    with make(zk_factory(), "/zero").hold(timeout=0):
        pass
    assert children(zk, "/zero") == []


def test_timeout_leaves_no_node_and_no_watch(zk, zk_factory, zk_ensemble, make_lock):
    make = make_lock
    holder = make(zk, "/timeout")
    assert holder.acquire()
    client = zk_factory()
    lock = make(client, "/timeout")
    start = time.monotonic()
    assert lock.acquire(timeout=0.5) is False
    assert 0.5 <= time.monotonic() - start < 3.0
    with pytest.raises(LockTimeout):
        with lock.hold(timeout=0.3):
            pytest.fail("entered a lock that is held elsewhere")
    assert lock.acquire(timeout=0) is False
    assert lock.acquire(blocking=False) is False
    assert lock.state == "idle" and lock.node is None
    assert children(zk, "/timeout") == [holder.node.rsplit("/", 1)[1]]
    assert_no_watch(client, "/timeout", zk_ensemble)
    holder.release()
    assert lock.acquire(timeout=10)  # nothing local was left behind either
    lock.release()


def test_cancel_with_the_watch_request_in_flight_leaves_no_watch(zk, zk_factory, zk_ensemble, monkeypatch):
    holder = FairLock(zk, "/cancel-inflight")
    assert holder.acquire()
    client = zk_factory()
    lock = FairLock(client, "/cancel-inflight")
    get_async = client.get_async

    def get_then_cancel(path, watch=None):  # the cancel lands while the watching read is on the wire
        ar = get_async(path, watch=watch)
        if watch is not None:
            lock.cancel()
        return ar

    monkeypatch.setattr(client, "get_async", get_then_cancel)
    assert lock.acquire(timeout=10) is False
    assert children(zk, "/cancel-inflight") == [holder.node.rsplit("/", 1)[1]]
    wait_until(lambda: not watching(client, "/cancel-inflight"), 10, "the late watch to be dropped")
    assert_no_watch(client, "/cancel-inflight", zk_ensemble)
    holder.release()


def test_cancel_leaves_no_node_and_no_watch(zk, zk_factory, zk_ensemble, make_lock):
    make = make_lock
    holder = make(zk, "/cancel")
    assert holder.acquire()
    client = zk_factory()
    lock = make(client, "/cancel")
    pending = Acquirer(lock)
    wait_until(lambda: watching(client, "/cancel"), 10, "the acquire is waiting")
    # the check below would see a watch if there were one
    assert full_path(client, "/cancel/") in server_watches(zk_ensemble, "wchp")
    lock.cancel()
    assert pending.wait(10) is False
    assert children(zk, "/cancel") == [holder.node.rsplit("/", 1)[1]]
    assert_no_watch(client, "/cancel", zk_ensemble)

    def cancel_when_waiting() -> None:
        wait_until(lambda: watching(client, "/cancel"), 10, "the with-statement is waiting")
        lock.cancel()

    t = threading.Thread(target=cancel_when_waiting)
    t.start()
    with pytest.raises(LockCancelled):
        with lock:
            pytest.fail("entered a cancelled lock")
    t.join(10)
    assert children(zk, "/cancel") == [holder.node.rsplit("/", 1)[1]]
    assert_no_watch(client, "/cancel", zk_ensemble)
    holder.release()
    assert lock.acquire(timeout=10)  # a cancel does not poison later acquires
    lock.release()


def test_interrupt_while_waiting_leaves_no_node_and_no_watch(zk, zk_factory, zk_ensemble, monkeypatch, make_lock):
    make = make_lock
    holder = make(zk, "/interrupt")
    assert holder.acquire()
    client = zk_factory()
    lock = make(client, "/interrupt")

    def interrupted(self, op):  # the wait for a deletion (SLEEP's handler), hit by Ctrl-C
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(Driver, "_sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        lock.acquire(timeout=10)
    monkeypatch.undo()
    assert lock.state == "idle"
    assert children(zk, "/interrupt") == [holder.node.rsplit("/", 1)[1]]
    assert_no_watch(client, "/interrupt", zk_ensemble)
    holder.release()
    assert lock.acquire(timeout=10)
    lock.release()


def test_predecessor_gone_before_the_watch_leaves_no_watch(zk, zk_factory, zk_ensemble):
    """The node ahead vanishes between our listing and our watch call: no stray watch may remain."""
    holder = FairLock(zk, "/race")
    assert holder.acquire()
    client = zk_factory()
    real_get = client.get_async
    raced = []

    def get_after_release(path, watch=None):
        if watch is not None and holder.is_held:
            holder.release()  # same thread as the test: the holder lets go right before we watch
            raced.append(path)
        return real_get(path, watch=watch)

    client.get_async = get_after_release
    lock = FairLock(client, "/race")
    assert lock.acquire(timeout=10)
    client.get_async = real_get
    assert raced, "the race was not exercised: the waiter never set a watch"
    assert_no_watch(client, "/race", zk_ensemble)
    lock.release()


# -- round trips ------------------------------------------------------------------------------------
def record_requests(client, monkeypatch) -> list:
    """Names of the requests ``client`` puts on the wire from now on (pings left out, and nudges: an exists
    of the root its I/O thread sends when a reply is 50 ms late on a loaded machine, _kazoo._nudge)."""
    sent: list = []
    conn = client._connection
    real = conn._submit
    root = client.chroot or "/"

    def submit(request, timeout, xid=None):
        name = type(request).__name__
        if name != "Ping" and not (name == "Exists" and request.path == root):
            sent.append(name)
        return real(request, timeout, xid)

    monkeypatch.setattr(conn, "_submit", submit)
    return sent


@pytest.mark.parametrize("recipe", ["fair", "rw-write", "rw-read"])
def test_uncontended_acquire_is_one_create_and_one_listing_release_one_delete(zk, monkeypatch, recipe):
    make = RECIPES[recipe] if recipe != "rw-read" else (lambda c, p: ReadWriteLock(c, p).read())
    zk.ensure_path("/rt")  # a persistent parent: not reaped (a non-queue child would be refused)
    with make(zk, "/rt"):
        pass  # the first acquire of this process also ensures the parent
    sent = record_requests(zk, monkeypatch)
    lock = make(zk, "/rt")  # a new object: the parent is ensured once per process, not per object
    assert lock.acquire()
    assert sent == ["Create2", "GetChildren"]  # sent back to back: one round trip
    del sent[:]
    lock.release()
    assert sent == ["Delete"]


# -- fencing tokens ---------------------------------------------------------------------------------
def test_token_grows_across_holders_and_paths(zk, zk_factory):
    clients = [zk, zk_factory(), zk_factory()]
    seen = []
    for _ in range(2):
        for client in clients:
            for path, make in (("/tok/a", FairLock), ("/tok/b", ExclusiveLock), ("/tok/a", RECIPES["rw-write"])):
                lock = make(client, path)
                assert lock.token is None
                with lock:
                    assert lock.token == client.exists(lock.node).czxid
                    seen.append(lock.token)
                assert lock.token is None
    assert all(a < b for a, b in zip(seen, seen[1:])), seen


def test_read_locks_have_tokens_too(zk, zk_factory):
    rw = ReadWriteLock(zk, "/tok/rw")
    with rw.write():
        first = rw.write().token
    with rw.read():
        assert rw.read().token > first


# -- container parents and ACLs ---------------------------------------------------------------------
def test_container_parent_is_reclaimed_and_recreated(zk, make_lock, zk_reaps_containers):
    lock = make_lock(zk, "/reclaim/deep/lock")
    for _ in range(2):  # the second round needs the parents back: they were reclaimed in between
        with lock:
            assert zk.exists("/reclaim/deep/lock") is not None
        wait_until(lambda: zk.exists("/reclaim") is None, 10, "the empty lock parents were reclaimed")


def test_acl_applies_to_lock_nodes_and_parents(zk, zk_factory):
    acl = [make_digest_acl("user", "pw", all=True)]
    zk.add_auth("digest", "user:pw")
    outsider = zk_factory()
    for path, make in (("/acl/fair", FairLock), ("/acl/excl", ExclusiveLock), ("/acl/rw", RECIPES["rw-write"])):
        lock = make(zk, path, acl=acl)
        with lock:
            assert zk.get_acls(lock.node)[0] == acl
            assert zk.get_acls(path)[0] == acl and zk.get_acls("/acl")[0] == acl  # container parents too
            with pytest.raises(NoAuthError):
                outsider.delete(lock.node)
            with pytest.raises(NoAuthError):
                make(outsider, path).acquire(blocking=False)
            assert zk.exists(lock.node) is not None and lock.is_held
        assert children(zk, path) == []


# -- lost create replies ----------------------------------------------------------------------------
def lose_next_create_reply(client, monkeypatch) -> list:
    """The next create ``client`` sends really happens, but the lock is told ConnectionLoss (its reply was
    lost). Returns a list that receives the path the server created (or the error it answered)."""
    real_submit = _kazoo.submit
    outcome: list = []

    def lossy(c, requests, out=None):
        results = real_submit(c, requests, out)
        if c is client and not outcome and isinstance(requests[0], Create2):
            try:
                outcome.append(results[0].get(timeout=10)[0])
            except NoNodeError:
                return results  # a new key's first create (its parent is made next): lose a later one
            except Exception as exc:
                outcome.append(exc)
            lost = c.handler.async_result()
            lost.set_exception(ConnectionLoss())
            results[0] = lost
        return results

    monkeypatch.setattr(_kazoo, "submit", lossy)
    return outcome


def test_lost_create_reply_finds_our_node_again(zk, monkeypatch, make_lock):
    lock = make_lock(zk, "/lostreply")
    created = lose_next_create_reply(zk, monkeypatch)
    assert lock.acquire(timeout=10)
    assert created and zk.unchroot(created[0]) == lock.node  # the reply we never saw named this node
    assert children(zk, "/lostreply") == [lock.node.rsplit("/", 1)[1]]  # adopted, not created twice
    lock.release()
    assert children(zk, "/lostreply") == []


def test_lost_create_reply_never_adopts_another_contenders_node(zk, zk_factory, monkeypatch, make_lock):
    make = make_lock
    holder = make(zk_factory(), "/notmine", host="same-host")  # same host label as ours
    assert holder.acquire()
    lock = make(zk, "/notmine", host="same-host")
    created = lose_next_create_reply(zk, monkeypatch)
    assert lock.acquire(timeout=0.5) is False
    assert created  # the lossy create did happen
    assert holder.is_held
    assert children(zk, "/notmine") == [holder.node.rsplit("/", 1)[1]]


# -- ExclusiveLock specifics ------------------------------------------------------------------------
def test_exclusive_lock_node_and_contenders(zk, zk_factory):
    lock = ExclusiveLock(zk, "/excl", identifier="worker-1", host="web-01")
    waiter_client = zk_factory()
    waiter = ExclusiveLock(waiter_client, "/excl", identifier="worker-2")
    assert lock.contenders() == []
    with lock:
        assert lock.node == "/excl/lock"
        (c,) = waiter.contenders()
        assert (c.node, c.host, c.identifier, c.kind) == ("lock", "web-01", "worker-1", "W")
        finish = threading.Event()
        pending = Acquirer(waiter, hold_until=finish, timeout=30)
        wait_until(lambda: watching(waiter_client, "/excl"), 10, "waiter watches the lock node")
        assert children(zk, "/excl") == ["lock"]  # waiters leave no node in this recipe
    assert pending.wait(10) is True
    assert waiter.contenders()[0].identifier == "worker-2"
    finish.set()
    assert pending.released.wait(10)
    assert children(zk, "/excl") == []


def test_fair_lock_contenders_in_queue_order(zk, zk_factory):
    lock = FairLock(zk, "/who", identifier="first", host="web-01")
    with lock:
        waiters = []
        for i in range(3):
            client = zk_factory()
            waiters.append(Acquirer(FairLock(client, "/who", identifier=f"w{i}", host=f"h-{i}"), timeout=30))
            wait_until(lambda c=client: watching(c, "/who"), 10, "waiter is queued")
        cs = lock.contenders()
        assert [(c.identifier, c.host, c.kind) for c in cs] == [("first", "web-01", "W")] + [
            (f"w{i}", f"h-{i}", "W") for i in range(3)
        ]
        assert [c.sequence for c in cs] == sorted(c.sequence for c in cs)
        for w in waiters:
            w.lock.cancel()
        for w in waiters:
            assert w.wait(10) is False
    assert children(zk, "/who") == []


def test_contenders_of_an_unused_or_reaped_lock_is_empty(zk, make_lock, zk_reaps_containers):
    lock = make_lock(zk, "/never/used")
    assert lock.contenders() == []  # the parent was never created
    with lock:
        assert len(lock.contenders()) == 1
    wait_until(lambda: zk.exists("/never") is None, 10, "the parents were reaped")
    assert lock.contenders() == []


def test_a_watch_removal_that_loses_the_race_leaves_the_client_working(zk):
    """The engine removes a watch it no longer needs server-side; if the watch fired meanwhile the server
    answers NOWATCHER (-121), which kazoo before 2.11 could not decode: its I/O thread died with the
    connection. The reply must come back as an error and the client must keep working."""
    from kazoo.exceptions import ZookeeperError

    from zkrecipes._kazoo_ops import RemoveWatches

    ar = zk.handler.async_result()
    zk._call(RemoveWatches(zk.chroot + "/never-watched", 2), ar)
    with pytest.raises(ZookeeperError) as info:
        ar.get(timeout=10)
    assert info.value.code == -121
    assert zk.connected and zk.exists("/") is not None
