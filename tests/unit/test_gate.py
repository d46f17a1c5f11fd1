"""The in-process gate decides alone, without ZooKeeper: who holds, who queues, who waits."""

from __future__ import annotations

import pytest

from zkrecipes._gate import Entered, Gate, in_doubt
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


def test_blocking_enter_misses_without_waiting_and_at_the_deadline():
    g = Gate("/p")
    with g.cond:
        g.try_enter(1, WRITE, good)
    assert g.enter(2, WRITE, False, None, lambda: False, good) is None
    assert g.enter(2, WRITE, True, 0.0, lambda: False, good) is None  # deadline already passed
    assert g.enter(2, WRITE, True, None, lambda: True, good) is None  # cancelled
    assert not g.line and g.waiting_writers == 0  # nothing left behind by the misses


@pytest.mark.parametrize("behind, starved", [("h-R-0000000009", False), ("h-W-0000000009", True),
                                             ("h-S2-0000000009", True), ("h-W-0000000001", False)])
def test_a_node_that_is_not_a_reader_queued_behind_our_read_node_stops_local_readers_joining(behind, starved):
    from zkrecipes import naming

    g = Gate("/p")
    with g.cond:
        assert g.try_enter(1, READ, good) is Entered.QUEUE
    g.granted(1, READ, HOLD)
    assert g.unchecked_read_hold(2) is HOLD and g.unchecked_read_hold(1) is None  # (1 holds already)
    g.look_behind(HOLD, naming.parse("h-R-0000000005"), naming.sort_queue(["h-R-0000000005", behind]))
    assert (g.unchecked_read_hold(2) is None) is starved  # looked once per hold when a writer was seen
    with g.cond:
        assert g.try_enter(2, READ, good) is (Entered.WAIT if starved else Entered.HAVE)


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
        with pytest.raises(LockLost, match=refused):  # the blocking form: nothing waits, nothing queues
            g.enter(1, again, True, None, lambda: False, good, tolerate)
    left = g.leave(1, first)  # the outer release: with no level added by the refusals, it ends the hold
    assert left.last and left.hold is hold and not g.counts and not g.line
