"""The in-process gate decides alone, without ZooKeeper: who holds, who queues, who waits."""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import pytest

from zkrecipes._drive import Driver
from zkrecipes._engine import Cancelled, DeadlinePassed
from zkrecipes._gate import Entered, Gate, enter, in_doubt
from zkrecipes.errors import LockError, LockLost
from zkrecipes.naming import READ, WRITE


class FakeHold:
    """Stands for a session.Hold: its state, and whether it is unconfirmed since a stall."""

    def __init__(self, state: str = "held", stale: bool = False) -> None:
        self.state, self._stale, self.node = state, stale, "/p/h-W-0000000001"

    def in_doubt(self) -> bool:
        return self.state == "lost"

    def stale(self) -> bool:
        return self._stale


HOLD = FakeHold()


def good(hold: object) -> bool:
    return True


class FakeClient:
    """What a driver asks of a client while it only waits for the gate: whether it was stopped."""

    _stopped = threading.Event()


def enter_on_thread(
    g: Gate, me: object, kind: str, blocking: bool, deadline: Optional[float] = None,
    cancelled: Callable[[], bool] = lambda: False, tolerate: bool = False,
) -> Optional[Entered]:
    """The gate's enter steps on the blocking driver, as a lock runs them: None on a miss, deadline, cancel."""
    driver = Driver(FakeClient(), deadline, cancelled, None)  # type: ignore[arg-type]
    try:
        return driver.run(enter(g, me, kind, blocking, good, tolerate))
    except (DeadlinePassed, Cancelled):
        return None


def test_first_owner_queues_others_wait_until_granted():
    g = Gate("/p")
    with g.cond:
        assert g.try_enter(1, WRITE, good) is Entered.QUEUE
        assert g.try_enter(2, WRITE, good) is Entered.WAIT  # one node per process
    g.granted(1, WRITE, HOLD)
    assert g.held_by(1, WRITE) is HOLD and g.held_by(2, WRITE) is None
    with g.cond:
        assert g.try_enter(1, WRITE, good) is Entered.HAVE  # reentrant
    assert g.leave(1, WRITE).last is False
    left = g.leave(1, WRITE)
    assert left.last and left.hold is HOLD
    with g.cond:
        assert g.try_enter(2, WRITE, good) is Entered.WAIT  # busy until the node is deleted
    g.released()
    with g.cond:
        assert g.try_enter(2, WRITE, good) is Entered.QUEUE


def test_a_miss_frees_the_gate_for_the_next_owner():
    g = Gate("/p")
    with g.cond:
        assert g.try_enter(1, WRITE, good) is Entered.QUEUE
    g.granted(1, WRITE, None)
    with g.cond:
        assert g.try_enter(2, WRITE, good) is Entered.QUEUE


def test_readers_join_a_good_read_hold_but_not_past_a_writer():
    g = Gate("/p")
    with g.cond:
        assert g.try_enter(1, READ, good) is Entered.QUEUE
    g.granted(1, READ, HOLD)
    with g.cond:
        assert g.try_enter(2, READ, good) is Entered.HAVE
        assert g.try_enter(3, READ, lambda h: False) is Entered.WAIT  # suspended hold: not joined
        g.writer_behind = HOLD  # a writer queued behind our node: joining would starve it
        assert g.try_enter(4, READ, good) is Entered.WAIT
    assert g.leave(2, READ).last is False
    assert g.leave(1, READ).last is True


def test_downgrade_keeps_the_node_until_the_reads_go():
    g = Gate("/p")
    with g.cond:
        assert g.try_enter(1, WRITE, good) is Entered.QUEUE
    g.granted(1, WRITE, HOLD)
    with g.cond:
        assert g.try_enter(1, READ, good) is Entered.HAVE
    left = g.leave(1, WRITE)
    assert not left.last and g.mode == READ and g.held_by(1, READ) is HOLD
    assert g.leave(1, READ).last


def test_upgrade_and_foreign_release_are_refused():
    g = Gate("/p")
    with g.cond:
        g.try_enter(1, READ, good)
    g.granted(1, READ, HOLD)
    with g.cond, pytest.raises(LockError, match="upgrading"):
        g.try_enter(1, WRITE, good)
    with pytest.raises(LockError, match="does not hold"):
        g.leave(2, READ)
    # the recipe the caller used is named, not the gate's side (issue 37: "a write lock" for a FairLock)
    with g.cond, pytest.raises(LockError, match=r"^/p: FairLock asked for by a caller that holds ReadWriteLock "
                                                r"\(read side\): upgrading"):
        g.try_enter(1, WRITE, good, False, "FairLock")
    with pytest.raises(LockError, match=r"^/p: FairLock or ReadWriteLock \(write side\) released by a caller"):
        g.leave(2, WRITE)
    with pytest.raises(LockError, match="^the caller's own$"):  # the object the caller used words it
        g.leave(2, WRITE, lambda: LockError("the caller's own"))


@pytest.mark.parametrize("front", ["threaded", "aio"])
def test_a_caller_that_holds_nothing_is_told_the_recipe_it_used(front):
    import asyncio
    import re

    from kazoo.client import KazooClient

    import zkrecipes
    import zkrecipes.aio

    client = KazooClient(hosts="127.0.0.1:1")  # never started: these refusals need no ZooKeeper
    m = zkrecipes.aio if front == "aio" else zkrecipes
    locks = [(m.FairLock(client, "/p"), "FairLock"), (m.ExclusiveLock(client, "/p"), "ExclusiveLock"),
             (m.ReadWriteLock(client, "/p").read(), "ReadWriteLock (read side)"),
             (m.ReadWriteLock(client, "/p").write(), "ReadWriteLock (write side)"),
             (m.Semaphore(client, "/p", 2), "Semaphore")]

    async def in_a_task(call):
        return call()

    try:
        for lock, title in locks:
            with pytest.raises(LockError, match=re.escape(f"/p: {title} released by a caller that does not hold it")):
                asyncio.run(lock.release()) if front == "aio" else lock.release()
            owner = "task" if front == "aio" else "thread"
            with pytest.raises(LockError, match=re.escape(f"/p: {title} not held by the calling {owner}")):
                asyncio.run(in_a_task(lock.transaction)) if front == "aio" else lock.check()
        # an object-owned lock holds for no caller: its message says so (not "the calling object")
        by_object = [(m.FairLock(client, "/p", owner="object"), "FairLock"),
                     (m.Semaphore(client, "/p", 2, owner="object"), "Semaphore")]
        for lock, title in by_object:
            said = re.escape(f"/p: this {title} (owner='object') holds nothing: released already, or not acquired")
            with pytest.raises(LockError, match=said):
                asyncio.run(lock.release()) if front == "aio" else lock.release()
            with pytest.raises(LockError, match=said):
                asyncio.run(in_a_task(lock.transaction)) if front == "aio" else lock.check()
    finally:
        client.close()


def test_blocking_enter_misses_without_waiting_and_at_the_deadline():
    g = Gate("/p")
    with g.cond:
        g.try_enter(1, WRITE, good)
    assert enter_on_thread(g, 2, WRITE, False) is None
    assert enter_on_thread(g, 2, WRITE, True, deadline=0.0) is None  # deadline already passed
    assert enter_on_thread(g, 2, WRITE, True, cancelled=lambda: True) is None  # cancelled
    t0 = time.monotonic()
    assert enter_on_thread(g, 2, WRITE, True, deadline=t0 + 0.1) is None
    assert time.monotonic() - t0 >= 0.1
    assert not g.line and g.waiting_writers == 0  # nothing left behind by the misses


def test_a_waiting_thread_enters_when_the_holder_leaves_and_threads_keep_arrival_order():
    g = Gate("/p")
    with g.cond:
        g.try_enter("holder", WRITE, good)
    g.granted("holder", WRITE, HOLD)
    order = []

    def owner(i: int) -> None:
        assert enter_on_thread(g, i, WRITE, True, deadline=time.monotonic() + 10) is Entered.QUEUE
        order.append(i)
        g.granted(i, WRITE, HOLD)
        assert g.leave(i, WRITE).last
        g.released()

    threads = []
    for i in range(5):
        threads.append(threading.Thread(target=owner, args=(i,)))
        threads[-1].start()
        deadline = time.monotonic() + 5
        while len(g.line) < i + 1 and time.monotonic() < deadline:  # each in line before the next starts
            time.sleep(0.001)
    assert list(g.line) == [0, 1, 2, 3, 4] and g.waiting_writers == 5
    assert g.leave("holder", WRITE).last
    g.released()
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2, 3, 4] and not g.line and g.waiting_writers == 0 and not g.busy


@pytest.mark.parametrize("behind, starved", [("h-R-0000000009", False), ("h-W-0000000009", True),
                                             ("h-S2-0000000009", True), ("h-W-0000000001", False)])
def test_a_node_that_is_not_a_reader_queued_behind_our_read_node_stops_local_readers_joining(behind, starved):
    from zkrecipes import formats, naming

    g = Gate("/p")
    with g.cond:
        assert g.try_enter(1, READ, good) is Entered.QUEUE
    g.granted(1, READ, HOLD)
    what, epoch = g.start_look(HOLD)
    assert what == "look"
    version = g.version
    assert g.start_look(HOLD) == ("wait", version)  # one listing at a time: the next joiner waits for it
    queue = [n for _, n in formats.sort_any(["h-R-0000000005", behind])]
    g.look_behind(HOLD, naming.parse("h-R-0000000005"), queue, epoch)
    assert g.version > version  # the waiting joiner is woken
    assert g.start_look(HOLD) == ("done", 0)  # a writer seen, or the queue behind known clear: no more listings
    assert (g.clear_behind is HOLD) is not starved
    with g.cond:
        assert g.try_enter(2, READ, good) is (Entered.WAIT if starved else Entered.HAVE)
    g.queue_changed(None)  # the child watch fired: a change behind us may be a writer
    assert g.clear_behind is None and (g.start_look(HOLD)[0] == "done") is starved  # (a writer seen stays seen)


def test_a_listing_sent_before_the_child_watch_fired_does_not_make_the_queue_clear():
    from zkrecipes import naming

    g = Gate("/p")
    with g.cond:
        assert g.try_enter(1, READ, good) is Entered.QUEUE
    g.granted(1, READ, HOLD)
    mine = naming.parse("h-R-0000000005")
    what, epoch = g.start_look(HOLD)  # the listing is sent
    g.queue_changed(None)  # kazoo's thread: the watch fired before the listing's answer was read
    g.look_behind(HOLD, mine, [mine], epoch)
    assert g.clear_behind is None
    what, epoch = g.start_look(HOLD)  # the next reader lists again
    assert what == "look"
    g.look_behind(HOLD, mine, None, epoch)  # that listing failed: nothing learnt, the next one looks
    what, epoch = g.start_look(HOLD)
    assert what == "look"
    g.look_behind(HOLD, mine, [mine], epoch)
    assert g.clear_behind is HOLD and g.start_look(HOLD) == ("done", 0)
    assert g.leave(1, READ).last and g.clear_behind is None  # the hold's end forgets it


@pytest.mark.parametrize("state, stale, tolerate, why", [
    ("held", False, False, None),
    ("lost", False, False, "lost"),
    ("lost", False, True, "lost"),  # tolerating suspension never makes a lost hold usable
    ("suspended", False, False, "suspended"),
    ("suspended", False, True, None),
    ("held", True, False, "stood still"),
    ("held", True, True, None),
])
@pytest.mark.parametrize("first, again", [(WRITE, WRITE), (READ, READ), (WRITE, READ)])  # READ under WRITE: downgrade
def test_reentry_into_a_hold_in_doubt_raises_and_records_nothing(state, stale, tolerate, why, first, again):
    g = Gate("/p")
    hold = FakeHold()
    with g.cond:
        assert g.try_enter(1, first, good) is Entered.QUEUE
    g.granted(1, first, hold)
    hold.state, hold._stale = state, stale
    if why is None:
        assert in_doubt(hold, tolerate) is None
        with g.cond:
            assert g.try_enter(1, again, good, tolerate) is Entered.HAVE
        assert g.leave(1, again).last is False
    else:
        assert why in in_doubt(hold, tolerate)
        refused = rf"/p: re-entry refused: the hold \(/p/h-W-0000000001\) is .*{why}"
        with g.cond, pytest.raises(LockLost, match=refused):
            g.try_enter(1, again, good, tolerate)
        with pytest.raises(LockLost, match=refused):  # the steps: nothing waits, nothing queues
            enter_on_thread(g, 1, again, True, tolerate=tolerate)
    left = g.leave(1, first)  # the outer release: with no level added by the refusals, it ends the hold
    assert left.last and left.hold is hold and not g.counts and not g.line


class ReleasedHold:
    """Stands for a session.Hold being released: records, in order, what happened to it."""

    def __init__(self, state: str) -> None:
        self.state, self.node, self.session, self.token, self.releasing = state, "/p/h-W-0000000001", 0x1, 7, False
        self.events: list = []

    def mark_lost(self) -> None:
        self.state = "lost"
        self.events.append("told lost")

    def close(self) -> None:
        self.events.append("closed")


@pytest.mark.parametrize("state", ["held", "lost"])
def test_releasing_in_a_new_session_tells_the_holder_before_its_old_node_is_dropped(state):
    from zkrecipes import _engine
    from zkrecipes._gate import release_hold

    hold = ReleasedHold(state)
    steps = release_hold(hold)
    if state == "held":
        assert isinstance(steps.send(None), _engine.Delete)
        assert steps.send(False) is _engine.SESSION  # the session was gone (nothing deleted) ...
        assert hold.events == ["told lost"]  # ... the holder told first
    else:
        assert steps.send(None) is _engine.SESSION
    assert steps.send(0x2) == _engine.DeleteOld(hold.node, 0x1, 7)  # then its node, if the old session keeps it
    with pytest.raises(StopIteration):
        steps.send(True)
    assert hold.events[-1] == "closed" and hold.events.count("told lost") == (1 if state == "held" else 0)


def _enter_object(g: Gate, me: object, blocking: bool, deadline: Optional[float] = None) -> Optional[Entered]:
    """An acquire of an object-owned lock: the owner ``me`` is not reentrant."""
    driver = Driver(FakeClient(), deadline, lambda: False, None)  # type: ignore[arg-type]
    try:
        return driver.run(enter(g, me, WRITE, blocking, good, False, None, reentrant=False))
    except (DeadlinePassed, Cancelled):
        return None


@pytest.mark.parametrize("kind", [WRITE, READ])
def test_an_owner_that_is_not_reentrant_waits_for_its_own_release(kind):
    """owner="object" (threading.Lock): a second acquire of the owner that holds waits, adds no level, and
    leaves no place in the line when it gives up; once released, the waiting caller queues."""
    g, obj = Gate("/p"), object()
    assert _enter_object(g, obj, True) is Entered.QUEUE
    g.granted(obj, kind, HOLD)
    with g.cond:
        assert g.try_enter(obj, kind, good, caller=object()) is Entered.WAIT
        assert g.try_enter(obj, kind, good) is Entered.HAVE  # (a reentrant owner would re-enter)
    g.leave(obj, kind)
    assert _enter_object(g, obj, False) is None  # a try: False at once
    assert _enter_object(g, obj, True, time.monotonic() + 0.1) is None  # a timeout
    assert not g.line and g.counts[obj].side(kind) == 1
    got = []
    t = threading.Thread(target=lambda: got.append(_enter_object(g, obj, True, time.monotonic() + 10)))
    t.start()
    deadline = time.monotonic() + 10
    while not g.line and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(g.line) == 1 and got == []  # its own place in the line, not the owner's
    left = g.leave(obj, kind)
    assert left.last
    g.released()
    t.join(10)
    assert got == [Entered.QUEUE] and not g.line and g.busy


def test_callers_of_one_owner_that_is_not_reentrant_queue_in_arrival_order():
    g, obj = Gate("/p"), object()
    assert _enter_object(g, obj, True) is Entered.QUEUE  # the first caller is talking to ZooKeeper
    first, second = object(), object()
    with g.cond:
        assert g.try_enter(obj, WRITE, good, caller=first) is Entered.WAIT  # busy
        g.line_up(first, WRITE)
        g.line_up(second, WRITE)
    g.granted(obj, WRITE, None)  # the first acquire missed: the gate is free again
    with g.cond:
        assert g.try_enter(obj, WRITE, good, caller=second) is Entered.WAIT  # not its turn yet
        assert g.try_enter(obj, WRITE, good, caller=first) is Entered.QUEUE
