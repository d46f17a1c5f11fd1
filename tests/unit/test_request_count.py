"""The requests each lock operation sends, pinned (issue 40): a whole acquire and release of a lock's core
(:class:`zkrecipes._lock.LockCore`, both fronts run it) driven by scripted replies, every step counted.

A request is what reaches ZooKeeper: a create (a write), a listing or read, a delete (a write). The steps
that need none (the session id, the clock) are answered here and not counted."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.protocol.states import KeeperState, ZnodeStat

from zkrecipes import ExclusiveLock, FairLock, ReadWriteLock, Semaphore
from zkrecipes import _engine as e

SID = 0x5EED


def stat(czxid: int = 9) -> ZnodeStat:
    return ZnodeStat(czxid, czxid, 0, 0, 0, 0, 0, SID, 0, 0, czxid)


def client() -> KazooClient:
    """A client that was never started, made to report a live session (nothing is sent through it)."""
    c = KazooClient(hosts="127.0.0.1:1")
    c._session_id, c._state = SID, KeeperState.CONNECTED
    return c


def count(steps: e.Steps[Any], answer: Callable[[Any], Any]) -> "tuple[Dict[str, int], Any]":
    """Run ``steps`` to their end: ``({"reads": n, "writes": n}, their value)``; ``answer(op)`` is each
    request's reply (an exception is thrown in)."""
    seen = {"reads": 0, "writes": 0}
    reply: Any = None
    while True:
        try:
            op = steps.throw(reply) if isinstance(reply, BaseException) else steps.send(reply)
        except StopIteration as stop:
            return seen, stop.value
        if op is e.SESSION:
            reply = SID
        elif op is e.NOW:
            reply = 0.0
        elif op is e.STALE:
            reply = False
        elif op is e.UNWATCH:
            reply = None
        elif op is e.SLEEP:  # what a driver does when a non-blocking attempt would wait
            reply = e.DeadlinePassed()
        else:
            t = type(op)
            if t is e.CreateAndList:
                seen["writes"] += 1
                seen["reads"] += op.parent is not None  # the listing pipelined with it
            elif t in (e.Read, e.Watch, e.Watched):
                seen["reads"] += 1
            elif t is e.Delete:
                seen["writes"] += 1
            else:
                raise AssertionError(f"unexpected step {op!r}")
            reply = answer(op)


def queue_answers(children: List[str], ours: str, joined: List[str] = ()) -> Callable[[Any], Any]:
    """Replies for a path whose listing is ``children``, then also ``joined`` from our create on (ours,
    once created, is ``ours``; ExclusiveLock's create fails if ``lock`` is listed by then)."""

    def answer(op: Any) -> Any:
        now = [*children, *joined]
        if type(op) is e.CreateAndList:
            if ours == "lock" and "lock" in now:
                return NodeExistsError(), now, SID
            return (f"{op.path.rsplit('/', 1)[0]}/{ours}", stat()), [*now, ours], SID
        if type(op) in (e.Read, e.Watched):
            return list(children) if type(op) is e.Read else [*now, ours]
        if type(op) is e.Watch:
            return ZnodeStat(3, 3, 0, 0, 0, 0, 0, SID + 1, 0, 0, 3)  # someone else's
        if type(op) is e.Delete:
            return True
        raise AssertionError(op)

    return answer


RECIPES = {  # a lock of each recipe, its node as created, and a node of someone else that blocks it
    "fair": (lambda c: FairLock(c, "/q"), "h-W-0000000005", "o-W-0000000004"),
    "write": (lambda c: ReadWriteLock(c, "/q").write(), "h-W-0000000005", "o-R-0000000004"),
    "read": (lambda c: ReadWriteLock(c, "/q").read(), "h-R-0000000005", "o-W-0000000004"),
    "semaphore": (lambda c: Semaphore(c, "/q", 1), "h-S1-0000000005", "o-S1-0000000004"),
    "exclusive": (lambda c: ExclusiveLock(c, "/q"), "lock", "lock"),
}


def acquire(lock: Any, blocking: bool, children: List[str], ours: str, joined: List[str] = ()) -> Any:
    """``(requests, held)`` of one acquire of ``lock`` by this thread."""
    return count(lock._acquire(threading.current_thread(), blocking), queue_answers(children, ours, joined))


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_an_uncontended_acquire_is_one_create_and_list_and_a_release_one_delete(recipe):
    make, ours, _ = RECIPES[recipe]
    lock = make(client())
    seen, held = acquire(lock, True, [], ours)
    assert held and seen == {"writes": 1, "reads": 1}  # the create and its listing, pipelined: one round trip
    seen, _ = count(lock._release(threading.current_thread()), queue_answers([], ours))
    assert seen == {"writes": 1, "reads": 0}  # one delete


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_try_on_a_held_lock_is_one_read_and_no_write(recipe):
    make, ours, other = RECIPES[recipe]
    assert make(client())._acquire(threading.current_thread(), False).send(None) == e.Read("get_children", "/q")
    seen, held = acquire(make(client()), False, [other], ours)
    assert not held and seen == {"reads": 1, "writes": 0}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_try_on_a_free_lock_is_a_read_then_the_create_and_list(recipe):
    make, ours, _ = RECIPES[recipe]
    lock = make(client())
    seen, held = acquire(lock, False, [], ours)
    assert held and seen == {"reads": 2, "writes": 1}  # the look, then the create and its listing
    count(lock._release(threading.current_thread()), queue_answers([], ours))


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_try_that_loses_the_race_after_its_look_deletes_its_node_and_does_not_wait(recipe):
    make, ours, other = RECIPES[recipe]
    seen, held = acquire(make(client()), False, [], ours, joined=[other])  # the blocker came after our look
    # the look, the create and its listing, the delete (ExclusiveLock: its failed create, then a look at
    # the holder's node, which may be ours from a lost reply); no watch is left: the run's end drops it
    assert not held
    assert seen == ({"reads": 2, "writes": 2} if recipe != "exclusive" else {"reads": 3, "writes": 1})


def test_a_read_that_joins_a_live_read_hold_sends_nothing_while_the_queue_behind_is_known_clear():
    """Issue 48: the first local reader to join lists the queue once, with the gate's child watch; later
    ones join with no request until that watch fires (a node came or went behind us)."""
    rw = ReadWriteLock(client(), "/q")
    read = rw.read()
    answers = queue_answers([], "h-R-0000000005")
    owners = [threading.Thread(target=lambda: None) for _ in range(4)]
    seen, held = count(read._acquire(threading.current_thread(), True), answers)
    assert held and seen == {"writes": 1, "reads": 1}  # our node: the create and its listing
    seen, held = count(read._acquire(owners[0], True), answers)
    assert held and seen == {"writes": 0, "reads": 1}  # the first join looks behind our node, with a watch
    for owner in owners[1:3]:
        seen, held = count(read._acquire(owner, True), answers)
        assert held and seen == {"writes": 0, "reads": 0}  # joined: nothing sent
    read._gate.queue_changed(None)  # something changed behind our node
    seen, held = count(read._acquire(owners[3], True), answers)
    assert held and seen == {"writes": 0, "reads": 1}  # looked again before joining
    for owner in owners:
        seen, _ = count(read._release(owner), answers)
        assert seen == {"writes": 0, "reads": 0}  # a joined reader lets go locally
    seen, _ = count(read._release(threading.current_thread()), answers)
    assert seen == {"writes": 1, "reads": 0}  # the last reader deletes the node


def test_a_writer_seen_behind_the_read_hold_stops_local_readers_joining():
    read = ReadWriteLock(client(), "/q").read()
    answers = queue_answers([], "h-R-0000000005", joined=["o-W-0000000006"])
    count(read._acquire(threading.current_thread(), True), answers)
    first, second = threading.Thread(target=lambda: None), threading.Thread(target=lambda: None)
    seen, held = count(read._acquire(first, False), answers)
    assert not held and seen == {"writes": 0, "reads": 1}  # joined, looked behind our node, saw a writer, left
    seen, held = count(read._acquire(second, False), answers)
    assert not held and seen == {"writes": 0, "reads": 0}  # the writer known: this reader does not join
    assert read._gate.counts.keys() == {threading.current_thread()}  # neither stayed
    count(read._release(threading.current_thread()), answers)


@pytest.mark.parametrize("cut", [e.DeadlinePassed(), e.Cancelled(), KeyboardInterrupt()])
def test_a_joiner_cut_short_while_it_looks_behind_leaves_the_hold(cut):
    """A joiner holds while it lists the queue behind the read node; a deadline or cancel then makes its
    acquire return False, a Ctrl-C raise -- either way it no longer holds (the first reader still does)."""
    read = ReadWriteLock(client(), "/q").read()
    answers = queue_answers([], "h-R-0000000005")
    count(read._acquire(threading.current_thread(), True), answers)
    joiner = threading.Thread(target=lambda: None)
    steps = read._acquire(joiner, True)
    assert type(steps.send(None)) is e.Watched  # the look, the joiner counted meanwhile
    assert joiner in read._gate.counts
    if isinstance(cut, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            steps.throw(cut)
    else:
        with pytest.raises(StopIteration) as stop:
            steps.throw(cut)
        assert stop.value.value is False
    assert read._gate.counts.keys() == {threading.current_thread()}
    count(read._release(threading.current_thread()), answers)


def test_readers_that_join_while_one_looks_behind_wait_for_its_listing_and_send_nothing():
    """One listing at a time per read hold: readers arriving while a joiner lists wait for its answer
    (holding meanwhile) instead of sending listings of their own -- no burst of listings under many threads."""
    read = ReadWriteLock(client(), "/q").read()
    answers = queue_answers([], "h-R-0000000005")
    count(read._acquire(threading.current_thread(), True), answers)
    a, b = threading.Thread(target=lambda: None), threading.Thread(target=lambda: None)
    looking = read._acquire(a, True)
    look = looking.send(None)
    assert type(look) is e.Watched
    waiting = read._acquire(b, True)
    assert type(waiting.send(None)) is e.WaitGate  # b waits for a's listing, sending nothing
    with pytest.raises(StopIteration) as done:
        looking.send(answers(look))
    assert done.value.value is True
    with pytest.raises(StopIteration) as done:
        waiting.send(None)  # woken: the queue behind is known clear now
    assert done.value.value is True
    assert read._gate.counts.keys() == {threading.current_thread(), a, b}
    for owner in (a, b, threading.current_thread()):
        count(read._release(owner), answers)
