"""A holder whose whole process stood still (GC pause, SIGSTOP, a paused VM) must not trust its hold
when it resumes, before kazoo has even heard that the server expired its session.

A child process holds a lock (or leads), blocks reading stdin, and is frozen with SIGSTOP. The parent
waits until the ensemble expired the frozen session and a rival holds, resumes the child and tells it
to go: the child's very first ``is_held`` and ``check()`` must already say the hold is gone. A stall
shorter than the session expiry is confirmed by ZooKeeper instead: ``check()`` passes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from lockhelpers import children, wait_until

from zkrecipes import FairLock, LeaderElection

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from kazoo.client import KazooClient
    from zkrecipes import FairLock, LeaderElection, LockLost

    hosts, recipe, timeout, action = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    zk = KazooClient(hosts=hosts, timeout=timeout)
    zk.start(timeout=30)
    if recipe == "election":
        holder = LeaderElection(zk, "/stall")
        assert holder.campaign(timeout=30)
        held = lambda: holder.is_leader
        release = holder.resign
    else:
        holder = FairLock(zk, "/stall")
        assert holder.acquire(timeout=30)
        held = lambda: holder.is_held
        release = holder.release
    states = []
    holder.add_listener(lambda _, state: states.append(state))
    print(json.dumps({"node": holder.node}), flush=True)
    sys.stdin.readline()  # frozen here; resumed and told to go
    if action == "release":  # straight to release/resign, no check(): the loss must still be reported
        release()
        print(json.dumps({"lost": holder.lost.is_set(), "states": states}), flush=True)
        sys.exit(0)
    until = time.monotonic() + 10
    while True:
        if action == "settle":  # kazoo may drop the connection when its read timer ran out across the
            while not zk.connected and time.monotonic() < until:  # freeze, also a moment after resuming:
                time.sleep(0.01)  # while it reconnects check() rightly refuses (suspended), so wait
        first_held = held()
        try:
            holder.check()
            checked = "passed"
            break
        except LockLost as exc:
            checked = "LockLost: " + str(exc)
            if action != "settle" or holder.lost.is_set() or time.monotonic() >= until:
                break  # (settle: a refusal while suspended is retried; a hold lost is final)
            time.sleep(0.01)
    print(json.dumps({"held": first_held, "check": checked}), flush=True)
    sys.stdin.readline()
    # a stall the session thread notices only after check() confirmed is confirmed again in the
    # background (one read): is_held comes back by itself
    deadline = time.monotonic() + 10
    while not held() and time.monotonic() < deadline:
        time.sleep(0.01)
    print(json.dumps({"held": held()}), flush=True)
    """
)


def start_child(hosts: str, recipe: str, timeout: float, action: str = "check") -> tuple:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, hosts, recipe, str(timeout), action],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line, f"child failed to take the lock (exit {proc.wait(30)})"
    return proc, json.loads(line)["node"]


def tell(proc, line: str = "go") -> dict:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    out = proc.stdout.readline()
    assert out, f"child died (exit {proc.wait(30)})"
    return json.loads(out)


@pytest.fixture
def children_procs():
    procs: list = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.wait(30)


def freeze_past_expiry(zk, proc, node: str, recipe: str) -> None:
    """SIGSTOP the child until the ensemble expired its session and a rival holds, then SIGCONT."""
    os.kill(proc.pid, signal.SIGSTOP)
    wait_until(lambda: zk.exists(node) is None, 20, "the server expired the frozen holder's session")
    rival = LeaderElection(zk, "/stall") if recipe == "election" else FairLock(zk, "/stall")
    assert (rival.campaign if recipe == "election" else rival.acquire)(timeout=20)
    os.kill(proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("recipe", ["fair", "election"])
def test_holder_frozen_past_its_session_distrusts_the_hold_on_resume(
    zk_ensemble, zk_namespace, zk, children_procs, recipe
):
    proc, node = start_child(zk_ensemble.hosts + zk_namespace, recipe, 2.0)
    children_procs.append(proc)
    freeze_past_expiry(zk, proc, node, recipe)
    seen = tell(proc)
    assert seen["held"] is False, seen
    assert seen["check"].startswith("LockLost"), seen


@pytest.mark.parametrize("recipe", ["fair", "election"])
def test_short_stall_is_confirmed_and_the_hold_kept(zk_ensemble, zk_namespace, zk, children_procs, recipe):
    # 4 s session: the stall check starts at 4/3 s; a 2 s freeze is noticed but the session survives.
    proc, node = start_child(zk_ensemble.hosts + zk_namespace, recipe, 4.0, "settle")
    children_procs.append(proc)
    owner = zk.exists(node).ephemeralOwner
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(2.0)  # the fault itself: a 2 s freeze (not a wait for something to happen)
    os.kill(proc.pid, signal.SIGCONT)
    seen = tell(proc)
    assert seen["check"] == "passed", seen
    assert zk.exists(node).ephemeralOwner == owner
    assert tell(proc)["held"] is True


@pytest.mark.parametrize("recipe", ["fair", "election"])
def test_loss_learned_while_releasing_is_still_reported(zk_ensemble, zk_namespace, zk, children_procs, recipe):
    proc, node = start_child(zk_ensemble.hosts + zk_namespace, recipe, 2.0, action="release")
    children_procs.append(proc)
    freeze_past_expiry(zk, proc, node, recipe)
    seen = tell(proc)
    assert seen["lost"] is True, seen
    assert "lost" in seen["states"] and seen["states"][-1] == "idle", seen
    assert proc.wait(30) == 0


WAITER = textwrap.dedent(
    """
    import json, sys
    from kazoo.client import KazooClient
    from zkrecipes import FairLock

    zk = KazooClient(hosts=sys.argv[1], timeout=2.0)
    zk.start(timeout=30)
    lock = FairLock(zk, "/frozen-waiter")
    got = lock.acquire(timeout=60)
    stat = zk.exists(lock.node) if got else None
    print(json.dumps({"got": got, "ours": stat is not None and stat.ephemeralOwner == zk.client_id[0],
                      "held": lock.is_held}), flush=True)
    lock.release()
    """
)


def test_waiter_frozen_while_granted_never_holds_a_node_of_its_expired_session(
    zk_ensemble, zk_namespace, zk, children_procs
):
    holder = FairLock(zk, "/frozen-waiter")
    assert holder.acquire()
    proc = subprocess.Popen([sys.executable, "-c", WAITER, zk_ensemble.hosts + zk_namespace], stdout=subprocess.PIPE,
                            text=True)
    children_procs.append(proc)
    wait_until(lambda: len(children(zk, "/frozen-waiter")) == 2, 20, "the child queued behind the holder")
    waiting = [n for n in children(zk, "/frozen-waiter") if f"/frozen-waiter/{n}" != holder.node][0]
    os.kill(proc.pid, signal.SIGSTOP)
    holder.release()  # the frozen waiter's turn: the deletion news waits in its socket
    wait_until(lambda: zk.exists(f"/frozen-waiter/{waiting}") is None, 20, "the frozen waiter's session expired")
    os.kill(proc.pid, signal.SIGCONT)
    line = proc.stdout.readline()
    assert line, f"child died (exit {proc.wait(30)})"
    seen = json.loads(line)
    assert seen == {"got": True, "ours": True, "held": True}, seen  # queued again with its new session
    assert proc.wait(30) == 0


def _record_requests(client) -> list:
    """The kind and path of every request kazoo queues on ``client`` from now on (kazoo's ``_call``)."""
    sent: list = []
    call = client._call

    def spy(request, async_object):
        sent.append((type(request).__name__, request.path))
        return call(request, async_object)

    client._call = spy
    return sent


@pytest.mark.parametrize("path", ["check", "session thread"])
def test_a_stall_is_confirmed_by_a_read_synced_first(zk, path):
    """After a stall the session may have expired, and the hold's server (a follower) may not have applied
    that yet: a plain read there would still show the node ours (a frozen process trusting a hold the
    server gave away; seen under load behind docker-proxy). The confirming read is pipelined after a sync
    of the node's parent on the same connection, by check() and by the session thread alike."""
    from zkrecipes.session import STALLED, SessionWatcher

    lock = FairLock(zk, "/synced")
    assert lock.acquire(timeout=10)
    sent = _record_requests(zk)
    try:
        watcher = SessionWatcher.of(zk)
        watcher.stalled_at = time.monotonic()  # the process stood still, noticed just now
        assert not lock.is_held  # unconfirmed
        if path == "check":
            lock.check()
        else:
            watcher._emit(STALLED)  # what the session thread does when it notices the stall
        wait_until(lambda: lock.is_held, 10, "the hold confirmed")
        node = (zk.chroot or "") + lock.node
        reads = [r for r in sent if r[0] in ("Sync", "Exists")]
        assert reads[:2] == [("Sync", node.rsplit("/", 1)[0]), ("Exists", node)], sent
    finally:
        del zk._call
        lock.release()


@pytest.mark.parametrize("recipe", ["fair", "election"])
def test_a_session_thread_stuck_in_a_call_past_the_stall_limit_makes_the_hold_unconfirmed(zk_factory, recipe):
    """The session thread frozen while it runs a call (a SIGSTOP landing as it handles a reply, or a listener
    that blocks it) is a stall too: until it is back, ``is_held`` / ``is_leader`` must not vouch for the hold
    (it watches the doubt clock), and once it is back one read confirms the hold again. Before the fix a
    busy session thread counted as never overdue, so a process frozen in that moment read its hold as held
    on resume."""
    import threading

    from zkrecipes.session import _TICK, SessionWatcher

    client = zk_factory(timeout=3.0)
    holder = LeaderElection(client, "/busy") if recipe == "election" else FairLock(client, "/busy")
    assert (holder.campaign if recipe == "election" else holder.acquire)(timeout=10)
    held = (lambda: holder.is_leader) if recipe == "election" else (lambda: holder.is_held)
    assert held()
    watcher = SessionWatcher.of(client)
    busy, free = threading.Event(), threading.Event()
    watcher.post(lambda: (busy.set(), free.wait(30)))
    assert busy.wait(10), "the session thread never ran the call"
    try:
        wait_until(lambda: not held(), watcher.stall_limit + _TICK + 5, "the hold unconfirmed while it is stuck")
        assert held() is False
    finally:
        free.set()
    wait_until(held, 10, "the hold confirmed again once the session thread is back")
    (holder.resign if recipe == "election" else holder.release)()
