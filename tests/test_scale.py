"""A lock per key in a long-running service: local state that does not grow with the keys, the fewest
round trips for a new key, dropped clients collected, a stopped client refused at once.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError
from lockhelpers import RECIPES, children, wait_until
from test_locks import record_requests

from zkrecipes import ExclusiveLock, FairLock, LeaderElection, _gate


def zkrecipes_objects() -> int:
    """Live objects whose class is defined in the zkrecipes package (gates, locks, holds, queues, ...)."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if str(type(o).__dict__.get("__module__", "")).startswith("zkrecipes"))


def cycle(zk, make, path: str) -> None:
    lock = make(zk, path)
    assert lock.acquire(timeout=10)
    lock.release()


def test_dropped_lock_objects_leave_no_local_state_behind(zk):
    keys = 400
    for name, make in RECIPES.items():  # warm up: first-use objects (session watcher, caches) are made once
        cycle(zk, make, f"/warm/{name}")
    before = zkrecipes_objects()
    for i in range(keys):
        name, make = list(RECIPES.items())[i % len(RECIPES)]
        cycle(zk, make, f"/orders/{i}")
        if i % 4 == 0:  # an election per key too
            e = LeaderElection(zk, f"/leaders/{i}")
            assert e.campaign(timeout=10)
            e.resign()
    growth = zkrecipes_objects() - before
    assert growth <= 20, f"{growth} zkrecipes objects left after {keys} dropped keys"
    assert len(_gate._gates.get(zk) or {}) <= 8  # only gates a live lock object still refers to


def test_a_held_lock_keeps_its_gate_after_its_object_is_dropped(zk):
    # The process still holds the node: a new lock object for the path must see that (reentrancy and
    # local exclusion go through the gate), not queue a second node behind our own.
    lock = FairLock(zk, "/pinned")
    assert lock.acquire()
    token = lock.token
    ref = weakref.ref(lock)
    del lock
    gc.collect()
    assert ref() is not None  # the hold keeps its lock objects (listeners) and its gate alive
    again = FairLock(zk, "/pinned")
    assert again._gate is ref()._gate
    ref().release()
    assert children(zk, "/pinned") == []
    # a new node (its name may repeat: the emptied parent can be reaped and made again in between)
    assert again.acquire(timeout=5) and again.token != token
    again.release()


def test_a_dropped_client_is_collected_and_leaves_no_thread(zk_ensemble, zk_namespace):
    from zkrecipes.session import SessionWatcher

    client = KazooClient(hosts=zk_ensemble.hosts + zk_namespace, timeout=10.0)
    client.start(timeout=30)
    lock = FairLock(client, "/gc/a")
    with lock:
        pass
    election = LeaderElection(client, "/gc/e")
    assert election.campaign(timeout=10)  # subscribes to the client's session watcher
    thread = SessionWatcher.of(client)._thread
    election.resign()
    client.stop()
    client.close()
    ref = weakref.ref(client)
    del client, lock, election
    gc.collect()
    assert ref() is None, "a registry keeps the dropped client alive"
    if thread is not None:
        wait_until(lambda: not thread.is_alive(), 10, "the session thread of the dropped client ended")
    assert not [t for t in threading.enumerate() if t is thread]


# -- round trips ----------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["fair", "rw-read", "rw-write", "election"])
def test_a_new_key_under_an_existing_parent_costs_five_requests(zk, monkeypatch, recipe):
    zk.ensure_path("/orders")
    sent = record_requests(zk, monkeypatch)
    if recipe == "election":
        e = LeaderElection(zk, "/orders/42")
        assert e.campaign(timeout=10)
        e.resign()
    else:
        cycle(zk, RECIPES[recipe], "/orders/42")
    # the optimistic create and its pipelined listing fail (NoNode); one container; our node, which is
    # the parent's first child (sequence 0), so no listing; on release one delete
    expect = ["Create2", "GetChildren", "CreateContainer", "Create2"]
    assert sent[:4] == expect
    assert sent[4:] == (["Exists", "Delete"] if recipe == "election" else ["Delete"])


def test_a_new_key_for_an_exclusive_lock_costs_three_round_trips(zk, monkeypatch):
    zk.ensure_path("/orders")
    sent = record_requests(zk, monkeypatch)
    cycle(zk, ExclusiveLock, "/orders/7")
    # each create carries a listing in the same round trip (another recipe's node on the path is refused)
    assert sent == ["Create2", "GetChildren", "CreateContainer", "Create2", "GetChildren", "Delete"]


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_hot_key_costs_create_list_delete_and_no_ancestor_walk(zk, monkeypatch, recipe):
    zk.ensure_path("/hot/deep/key")  # a persistent parent: not reaped (a non-queue child would be refused)
    cycle(zk, RECIPES[recipe], "/hot/deep/key")
    sent = record_requests(zk, monkeypatch)
    cycle(zk, RECIPES[recipe], "/hot/deep/key")  # a new object: nothing cached per path is needed
    assert sent == ["Create2", "GetChildren", "Delete"]  # create and list pipelined (one round trip), delete


def test_missing_ancestors_are_made_deepest_first_climbing_only_as_needed(zk, monkeypatch):
    zk.ensure_path("/a")
    sent = record_requests(zk, monkeypatch)
    cycle(zk, FairLock, "/a/b/c/d")
    made = [r for r in sent if r == "CreateContainer"]
    assert made == ["CreateContainer"] * 5  # d (NoNode), c (NoNode), b, then c and d again
    assert zk.exists("/a/b/c/d") is not None


def test_a_parent_reaped_between_acquires_is_made_again(zk, zk_reaps_containers):
    lock = FairLock(zk, "/reaped/k")
    for _ in range(2):
        with lock:
            assert lock.is_held
        wait_until(lambda: zk.exists("/reaped") is None, 10, "the empty lock parents were reclaimed")


# -- stopped clients ------------------------------------------------------------------------------
@pytest.mark.parametrize("what", ["acquire", "campaign"])
def test_a_stopped_client_is_refused_at_once(zk_factory, what):
    client = zk_factory()
    client.stop()
    with pytest.raises(ConnectionClosedError):
        if what == "acquire":
            FairLock(client, "/stopped").acquire(timeout=30)
        else:
            LeaderElection(client, "/stopped").campaign(timeout=30)


def test_brief_holds_keep_one_session_dispatcher_thread(zk):
    """A service that locks often but briefly keeps one dispatcher thread, not a new one every 2 s."""
    from zkrecipes.session import SessionWatcher

    lock = FairLock(zk, "/brief")
    threads = set()
    end = time.monotonic() + 3.5  # past the dispatcher's 2 s idle limit
    while time.monotonic() < end:
        assert lock.acquire(timeout=10)
        lock.release()  # held for well under a tick: the dispatcher rarely sees a subscriber
        t = SessionWatcher.of(zk)._thread
        if t is not None:
            threads.add(t)
        time.sleep(0.05)
    assert len(threads) == 1, f"the dispatcher thread was replaced {len(threads) - 1} times"
