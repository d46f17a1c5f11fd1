"""The engine's acquire steps, driven by scripted replies: what it asks for, in order, and what it cleans up."""

from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError
from kazoo.protocol.states import ZnodeStat

from zkrecipes import _engine as p
from zkrecipes import exclusive, formats
from zkrecipes._lock import predecessor

SID = 0x1234
SEMAPHORE = formats.get(formats.ZKRECIPES, "semaphore")  # the node format a Semaphore queues with


def stat(czxid: int = 7, owner: int = SID) -> ZnodeStat:
    return ZnodeStat(czxid, czxid, 0, 0, 0, 0, 0, owner, 0, 0, czxid)


def start(gen):
    return gen.send(None)


def created(gen, reply):
    """Answer the create (with the session id, which its owner is checked against): the next request."""
    return gen.send((*reply, SID))


def new():
    return p.acquire("/p", [], "h-W-", b"{}", "guid", predecessor)


def test_uncontended_is_one_send_and_no_read():
    gen = new()
    op = start(gen)
    assert isinstance(op, p.CreateAndList) and op.parent == "/p" and op.flags == 3  # create and list, pipelined
    with pytest.raises(StopIteration) as done:  # nothing more: no session check of its own, never stale
        gen.send((("/chroot/p/h-W-0000000003", stat()), ["h-W-0000000003", "h-W-0000000004"], SID))
    entry = done.value.value
    assert entry.path == "/p/h-W-0000000003"  # the reply's chroot is dropped
    assert entry.token == 7 and entry.session == SID


def test_waits_on_its_predecessor_only_and_needs_no_relisting_when_it_goes():
    gen = new()
    start(gen)
    listing = ["h-W-0000000001", "h-W-0000000002", "h-W-0000000003"]
    op = created(gen, (("/p/h-W-0000000003", stat()), listing))
    assert op == p.Watch("/p/h-W-0000000002", listing="/p")  # one watch: the node just ahead (then a listing)
    assert gen.send(stat(5)) is p.SLEEP
    assert gen.send(frozenset({"/p/h-W-0000000002"})) == p.Read("get_children", "/p")  # nodes ahead may be gone
    # the head of the listing going needs no read: nodes only join behind us
    gen2 = new()
    start(gen2)
    assert created(gen2, (("/p/h-W-0000000003", stat()), ["h-W-0000000002", "h-W-0000000003"])) == p.Watch(
        "/p/h-W-0000000002")
    assert gen2.send(stat(5)) is p.SLEEP
    assert gen2.send(frozenset({"/p/h-W-0000000002"})) is p.SESSION
    assert gen2.send(SID) is p.STALE


def test_a_deadline_while_waiting_deletes_our_node():
    gen = new()
    start(gen)
    created(gen, (("/p/h-W-0000000003", stat()), ["h-W-0000000002", "h-W-0000000003"]))
    assert gen.send(stat(5)) is p.SLEEP
    assert gen.throw(p.DeadlinePassed()) == p.Delete("/p/h-W-0000000003", SID)
    with pytest.raises(p.DeadlinePassed):
        gen.send(None)


def test_a_new_key_makes_its_parents_then_needs_no_listing():
    gen = new()
    start(gen)
    assert gen.send((NoNodeError(), None, SID)) == p.CreateParent("/p", [], True)
    op = gen.send(None)
    assert isinstance(op, p.CreateAndList) and op.parent is None  # a fresh parent: nobody can be ahead
    with pytest.raises(StopIteration):
        gen.send((("/p/h-W-0000000000", stat()), None, SID))


def test_our_node_from_an_expired_session_is_not_taken_for_ours():
    gen = new()
    start(gen)
    # the session changed between the create and its reply: that node is gone
    op = gen.send((("/p/h-W-0000000003", stat(owner=SID)), ["h-W-0000000003"], SID + 1))
    assert isinstance(op, p.CreateAndList)  # queue again, at the back


def test_owns_needs_a_node_and_our_session():
    assert p.owns(stat(), SID)
    assert not p.owns(stat(owner=SID + 1), SID)
    assert not p.owns(None, SID) and not p.owns(stat(), None)


# -- a rule with several blockers (the semaphore) ----------------------------------------------------
def lease(seq: int, n: int = 2) -> str:
    return f"h-S{n}-{seq:010d}"


def new_sem(n: int = 2):
    from zkrecipes.semaphore import nearest_leases

    return p.acquire("/s", [], f"h-S{n}-", b"{}", "guid", nearest_leases, fmt=SEMAPHORE)


def test_a_lease_watches_its_n_nearest_and_reads_only_when_unwatched_nodes_remain_ahead():
    gen = new_sem()
    start(gen)
    listing = [lease(1), lease(2), lease(3), lease(4), lease(5)]
    # four ahead, two leases: blocked by the two nearest, both watched (the second added to the first)
    assert created(gen, (("/s/" + lease(5), stat()), listing)) == p.Watch("/s/" + lease(3), listing="/s")
    assert gen.send(stat(3)) == p.Watch("/s/" + lease(4), keep=True, listing="/s")
    assert gen.send(stat(4)) is p.SLEEP
    # one of ours went; 1 and 2, further ahead, may have gone unseen: one listing, not a read per node
    assert gen.send(frozenset({"/s/" + lease(4)})) == p.Read("get_children", "/s")
    assert gen.send([lease(2), lease(3), lease(5)]) is p.SESSION
    # the watch on 3 stays; only 2 is added
    assert gen.send(SID) == p.Watch("/s/" + lease(2), keep=True)
    assert gen.send(stat(2)) is p.SLEEP
    # every node ahead is watched: 3 going leaves one ahead, fewer than two: held without a read
    assert gen.send(frozenset({"/s/" + lease(3)})) is p.SESSION
    assert gen.send(SID) is p.STALE
    with pytest.raises(StopIteration):
        gen.send(False)


def test_a_blocker_already_gone_makes_a_lease_list_again_not_walk_its_old_listing():
    gen = new_sem()
    start(gen)
    leases = [lease(i) for i in range(1, 10)]
    assert created(gen, (("/s/" + lease(9), stat()), leases)) == p.Watch("/s/" + lease(7), listing="/s")
    assert gen.send(None) == p.Read("get_children", "/s")  # gone already: our listing is old
    assert gen.send([lease(8), lease(9)]) is p.SESSION
    assert gen.send(SID) is p.STALE


def test_a_lease_with_fewer_than_n_ahead_holds_at_once():
    gen = new_sem(3)
    start(gen)
    with pytest.raises(StopIteration):
        gen.send((("/s/" + lease(9, 3), stat()), [lease(7, 3), lease(8, 3), lease(9, 3)], SID))


def test_a_wake_without_a_deletion_sets_every_watch_again():
    gen = new_sem()
    start(gen)
    created(gen, (("/s/" + lease(5), stat()), [lease(3), lease(4), lease(5)]))
    gen.send(stat(3))
    assert gen.send(stat(4)) is p.SLEEP
    assert gen.send(frozenset()) is p.SESSION  # a session event: look again, watches afresh
    assert gen.send(SID) == p.Watch("/s/" + lease(3), keep=False)


def test_a_cancel_while_a_lease_waits_deletes_our_node():
    gen = new_sem()
    start(gen)
    created(gen, (("/s/" + lease(5), stat()), [lease(3), lease(4), lease(5)]))
    gen.send(stat(3))
    assert gen.send(stat(4)) is p.SLEEP
    assert gen.throw(p.Cancelled()) == p.Delete("/s/" + lease(5), SID)
    with pytest.raises(p.Cancelled):
        gen.send(None)


def test_a_rule_that_raises_deletes_our_node_first():
    from zkrecipes.errors import LockError

    def refuse(ahead, me):
        raise LockError("mismatch")

    gen = p.acquire("/s", [], "h-S3-", b"{}", "guid", refuse, fmt=SEMAPHORE)
    start(gen)
    assert created(gen, (("/s/" + lease(5, 3), stat()), [lease(4, 2), lease(5, 3)])) == p.Delete(
        "/s/" + lease(5, 3), SID)
    with pytest.raises(LockError):
        gen.send(None)


def test_readers_are_blocked_by_any_node_that_is_not_a_reader():
    from zkrecipes import naming
    from zkrecipes.rwlock import nearest_writer

    ahead = [n for _, n in formats.sort_any(["h-R-0000000001", "h-S2-0000000002", "h-R-0000000003"])]
    me = naming.parse("h-R-0000000004")
    assert nearest_writer(ahead, me).name == "h-S2-0000000002"


def test_a_reader_whose_blocking_writer_was_the_head_holds_without_a_read():
    from zkrecipes.rwlock import nearest_writer

    gen = p.acquire("/p", [], "h-R-", b"{}", "guid", nearest_writer)
    start(gen)
    listing = ["h-W-0000000001", "h-R-0000000002", "h-R-0000000003"]
    assert created(gen, (("/p/h-R-0000000003", stat()), listing)) == p.Watch("/p/h-W-0000000001")
    assert gen.send(stat(1)) is p.SLEEP
    # the readers between it and us may have gone unseen, but cannot block us: no listing
    assert gen.send(frozenset({"/p/h-W-0000000001"})) is p.SESSION
    assert gen.send(SID) is p.STALE


def test_missing_parents_are_made_deepest_first_climbing_only_as_far_as_a_nonode_says():
    from kazoo.exceptions import NodeExistsError, UnimplementedError

    gen = p.make_parents("/a/b/c", [])
    assert gen.send(None) == p.CreateParent("/a/b/c", [], True)
    assert gen.throw(NoNodeError()) == p.CreateParent("/a/b", [], True)  # climb one level
    assert gen.throw(NodeExistsError()) == p.CreateParent("/a/b/c", [], True)  # made meanwhile: fine
    # a server without container nodes: the same node, persistent
    assert gen.throw(UnimplementedError()) == p.CreateParent("/a/b/c", [], False)
    with pytest.raises(StopIteration):
        gen.send("/a/b/c")


def test_a_missing_chroot_is_named_not_climbed_past():
    from zkrecipes.errors import LockError

    gen = p.make_parents("/a", [])
    assert gen.send(None) == p.CreateParent("/a", [], True)
    with pytest.raises(LockError, match="chroot does not exist"):
        gen.throw(NoNodeError())


def test_a_parent_gone_when_relisting_means_our_node_went_too_queue_again():
    # a waiter's session expired while it stood still; the queue emptied and its container parent was
    # reaped: the listing after the wake-up finds no parent (seen in a SIGSTOP test), and must requeue
    gen = new()
    start(gen)
    created(gen, (("/p/h-W-0000000003", stat()), ["h-W-0000000001", "h-W-0000000003"]))
    assert gen.send(stat(5)) is p.SLEEP
    assert gen.send(frozenset()) is p.SESSION  # woken by the session's news, not by a deletion
    assert gen.send(None) == p.Watch("/p/h-W-0000000001")  # no connection yet: watch again
    assert gen.send(None) == p.Read("get_children", "/p")  # (in the new session) the blocker is gone
    op = gen.throw(NoNodeError())
    assert isinstance(op, p.CreateAndList)  # queue again (the create makes the parent anew), no error


def test_a_parent_gone_when_listing_after_the_create_means_our_node_went_too():
    gen = new()
    start(gen)
    # the pipelined listing was lost with the connection; by the relist the session and the parent are gone
    assert created(gen, (("/p/h-W-0000000003", stat()), ConnectionLoss())) == p.Read("get_children", "/p",
                                                                                        synced=True)
    op = gen.throw(NoNodeError())
    assert isinstance(op, p.CreateAndList)  # the node went with its parent: create again, no delete


def test_a_relist_after_the_create_without_our_node_queues_again_not_waits():
    gen = new()
    start(gen)
    # the pipelined listing was lost with the connection, and the session expired before the (synced) relist:
    # our node went with it; waiting on the node ahead would leave the waiter queued nowhere (seen in make test)
    assert created(gen, (("/p/h-W-0000000003", stat()), ConnectionLoss())) == p.Read("get_children", "/p",
                                                                                        synced=True)
    op = gen.send(["h-W-0000000001"])
    assert isinstance(op, p.CreateAndList)  # queue again, no watch on the node ahead


def test_a_session_expiring_during_the_relist_after_the_create_queues_again_not_raises():
    gen = new()
    start(gen)
    # kazoo fails the relist with SessionExpiredError while it sets up a new session: our node went with
    # the old one; acquire() raised it to the caller before (seen under load)
    assert created(gen, (("/p/h-W-0000000003", stat()), ConnectionLoss())) == p.Read("get_children", "/p",
                                                                                        synced=True)
    op = gen.throw(SessionExpiredError())
    assert isinstance(op, p.CreateAndList)  # queue again


# -- recipes that share a path (issue 37) ---------------------------------------------------------------
def race():
    return exclusive.race("/x", [], "lock", b"{}", "guid", None, formats.get(formats.ZKRECIPES, "exclusive"))


def test_the_exclusive_race_lists_in_the_same_round_trip_and_is_granted_alone():
    gen = race()
    op = start(gen)
    assert isinstance(op, p.CreateAndList) and op.parent == "/x" and op.flags == 1  # ephemeral, listed with it
    with pytest.raises(StopIteration) as done:  # nothing more: the uncontended acquire stays one round trip
        created(gen, (("/x/lock", stat()), ["lock"]))
    assert done.value.value.path == "/x/lock"


@pytest.mark.parametrize("other", ["h-S2-0000000000", "h-W-0000000000", "h-R-0000000000"])
def test_the_exclusive_race_refuses_a_node_of_another_recipe_and_deletes_its_own(other):
    from zkrecipes.errors import LockError

    gen = race()
    start(gen)
    assert created(gen, (("/x/lock", stat()), ["lock", other])) == p.Delete("/x/lock", SID)
    with pytest.raises(LockError, match=f"/x: an ExclusiveLock cannot share this path: child '{other}'"):
        gen.send(True)


def test_a_new_key_still_lists_with_the_exclusive_create():
    # a sequential first child proves nobody is there; ``lock`` does not: its create keeps its listing
    gen = race()
    start(gen)
    assert created(gen, (NoNodeError(), NoNodeError())) == p.CreateParent("/x", [], True)
    op = gen.send("/x")
    assert isinstance(op, p.CreateAndList) and op.parent == "/x"
    assert created(gen, (("/x/lock", stat()), ["h-S1-0000000000", "lock"])) == p.Delete("/x/lock", SID)


def test_a_lost_create_reply_found_again_is_checked_against_a_listing_too():
    from kazoo.exceptions import NodeExistsError

    from zkrecipes.errors import LockError

    gen = race()
    start(gen)
    # the retried create met our own node: found by its owner and guid, then the parent is listed
    assert created(gen, (NodeExistsError(), ["lock"])) == p.Watch("/x/lock")
    assert gen.send(stat()) is p.SESSION
    assert gen.send(SID) == p.Read("sync", "/x")
    assert gen.send(None) is p.SESSION
    assert gen.send(SID) == p.Read("get", "/x/lock")
    assert gen.send((b'{"guid":"guid"}', stat())) is p.UNWATCH
    assert gen.send(None) == p.Read("get_children", "/x")
    assert gen.send(["lock", "h-W-0000000001"]) == p.Delete("/x/lock", SID)
    with pytest.raises(LockError, match="child 'h-W-0000000001'"):
        gen.send(True)


def test_a_queue_refuses_the_exclusive_node_in_its_first_listing_and_deletes_its_own():
    from zkrecipes.errors import LockError

    gen = new()
    start(gen)
    assert created(gen, (("/p/h-W-0000000003", stat()), ["lock", "h-W-0000000003"])) == p.Delete(
        "/p/h-W-0000000003", SID)
    with pytest.raises(LockError, match="/p: a FairLock cannot share this path: child 'lock' is a node of an "
                                        "ExclusiveLock"):
        gen.send(True)


def test_a_waiter_relisting_is_not_refused_by_a_later_exclusive_node():
    gen = new()
    start(gen)
    listing = ["h-W-0000000001", "h-W-0000000002", "h-W-0000000003"]
    assert created(gen, (("/p/h-W-0000000003", stat()), listing)) == p.Watch("/p/h-W-0000000002", listing="/p")
    assert gen.send(stat(5)) is p.SLEEP
    assert gen.send(frozenset({"/p/h-W-0000000002"})) == p.Read("get_children", "/p")
    # an ExclusiveLock created ``lock`` after our node: it refuses itself; we go on waiting
    assert gen.send(["h-W-0000000001", "h-W-0000000003", "lock"]) is p.SESSION
    assert gen.send(SID) == p.Watch("/p/h-W-0000000001")


# -- a session the client gave up (kazoo's test harness does so to simulate an expiry) ----------------
OLD = 0x999  # an earlier session of this client


def test_a_waiter_whose_client_moved_to_a_new_session_drops_its_old_node_then_queues_again():
    gen = new()
    start(gen)
    created(gen, (("/p/h-W-0000000003", stat()), ["h-W-0000000002", "h-W-0000000003"]))
    assert gen.send(stat(5)) is p.SLEEP
    assert gen.send(frozenset()) is p.SESSION  # woken by the session's news
    assert gen.send(OLD + 1) is p.SESSION  # the client has a new session: drop_old asks again
    assert gen.send(OLD + 1) == p.DeleteOld("/p/h-W-0000000003", SID, 7)  # our node, by its czxid
    op = gen.send(True)
    assert isinstance(op, p.CreateAndList) and op.path == "/p/h-W-"  # then queue again, at the back


@pytest.mark.parametrize("current", [None, OLD])
def test_drop_old_asks_nothing_without_a_newer_session(current):
    gen = p.drop_old("/p/h-W-0000000003", OLD, 7)
    assert start(gen) is p.SESSION
    with pytest.raises(StopIteration) as done:  # no connection (a reconnection cleans up), or still that session
        gen.send(current)
    assert done.value.value is False


def test_drop_old_never_deletes_a_fixed_name_another_client_may_have_made_again():
    gen = p.drop_old("/p/lock", OLD, 7)  # ExclusiveLock's node: the next holder creates the same name at once
    assert start(gen) is p.SESSION
    with pytest.raises(StopIteration) as done:
        gen.send(OLD + 1)
    assert done.value.value is False


def test_a_deadline_after_the_client_moved_to_a_new_session_drops_the_old_node():
    gen = new()
    start(gen)
    created(gen, (("/p/h-W-0000000003", stat()), ["h-W-0000000002", "h-W-0000000003"]))
    assert gen.send(stat(5)) is p.SLEEP
    assert gen.throw(p.DeadlinePassed()) == p.Delete("/p/h-W-0000000003", SID)
    assert gen.send(False) is p.SESSION  # the session was gone: one of ours the server may still keep?
    assert gen.send(OLD + 1) == p.DeleteOld("/p/h-W-0000000003", SID, 7)
    with pytest.raises(p.DeadlinePassed):
        gen.send(False)


# -- a try that writes nothing (issue 38, item 6) -----------------------------------------------------------
def test_a_try_looks_first_and_a_new_key_is_then_created_as_usual():
    gen = p.acquire("/p", [], "h-W-", b"{}", "guid", predecessor, peek=True)
    assert start(gen) == p.Read("get_children", "/p")
    op = gen.throw(NoNodeError())  # nobody there yet
    assert isinstance(op, p.CreateAndList) and op.parent == "/p"


@pytest.mark.parametrize("child, recipe", [("lock", "an ExclusiveLock"), ("o-S2-0000000001", "a Semaphore")])
def test_a_try_refuses_a_node_of_another_recipe_without_writing(child, recipe):
    from zkrecipes.errors import LockError

    gen = p.acquire("/p", [], "h-W-", b"{}", "guid", predecessor, peek=True)
    start(gen)
    with pytest.raises(LockError, match=f"child '{child}' is a node of {recipe}.*Nothing was written"):
        gen.send(["h-W-0000000000", child])


@pytest.mark.parametrize("other", ["h-S2-0000000000", "h-W-0000000000"])
def test_an_exclusive_try_refuses_a_node_of_another_recipe_without_writing(other):
    from zkrecipes.errors import LockError

    gen = exclusive.race("/x", [], "lock", b"{}", "guid", None, formats.get(formats.ZKRECIPES, "exclusive"), peek=True)
    assert start(gen) == p.Read("get_children", "/x")
    with pytest.raises(LockError, match="Nothing was written"):
        gen.send(["lock", other])


def test_a_readers_try_is_blocked_only_by_a_node_that_is_not_a_reader():
    from zkrecipes.rwlock import nearest_writer

    for listing, blocked in ((["a-R-0000000001", "b-R-0000000002"], False),
                             (["a-R-0000000001", "b-W-0000000002", "c-R-0000000003"], True)):
        gen = p.acquire("/p", [], "h-R-", b"{}", "guid", nearest_writer, peek=True)
        start(gen)
        if blocked:
            with pytest.raises(p.Taken):
                gen.send(listing)
        else:
            assert isinstance(gen.send(listing), p.CreateAndList)


def test_a_leases_try_is_blocked_by_max_leases_nodes_in_wrap_aware_order():
    from zkrecipes.semaphore import nearest_leases

    gen = p.acquire("/s", [], "h-S2-", b"{}", "guid", nearest_leases, fmt=SEMAPHORE, peek=True)
    start(gen)
    assert isinstance(gen.send([lease(2147483647)]), p.CreateAndList)  # one of two leases taken
    gen = p.acquire("/s", [], "h-S2-", b"{}", "guid", nearest_leases, fmt=SEMAPHORE, peek=True)
    start(gen)
    with pytest.raises(p.Taken):
        gen.send(["h-S2--2147483648", lease(2147483647)])  # both, across the wrap


# -- who holds: Contender.holding -------------------------------------------------------------------------
def test_holding_applies_each_kinds_wait_rule_to_the_nodes_ahead():
    def kinds(names):
        return p.holding([n for _, n in formats.sort_any(names)])

    assert kinds(["a-W-0000000001", "b-W-0000000002"]) == [True, False]
    assert kinds(["a-R-0000000001", "b-R-0000000002", "c-W-0000000003", "d-R-0000000004"]) == [
        True, True, False, False]
    assert kinds(["a-W-0000000001", "b-R-0000000002"]) == [True, False]
    assert kinds([lease(1), lease(2), lease(3)]) == [True, True, False]  # max_leases 2
    assert kinds(["x__rlock__0000000001", "y__rlock__0000000002", "z__lock__0000000003"]) == [True, True, False]
    assert p.holding([]) == []


def _confirmed(gen, reply, sid=SID):
    """Run ``still_ours`` steps: answer its read with ``reply`` (or throw it), then the session: its answer."""
    op = start(gen)
    try:
        if isinstance(reply, BaseException):
            op = gen.throw(reply)
        else:
            op = gen.send(reply)
        assert op is p.SESSION
        gen.send(sid)
    except StopIteration as done:
        return done.value
    raise AssertionError("still_ours asked for more")


def test_still_ours_is_one_read_of_our_node_in_our_session():
    gen = p.still_ours("/p/n-1", SID, synced=True, once=True)
    assert start(gen) == p.Read("exists", "/p/n-1", once=True, synced=True)
    assert _confirmed(p.still_ours("/p/n-1", SID), stat()) is True
    assert _confirmed(p.still_ours("/p/n-1", SID), stat(owner=SID + 1)) is False  # someone else's node now
    assert _confirmed(p.still_ours("/p/n-1", SID), None) is False  # gone
    assert _confirmed(p.still_ours("/p/n-1", SID), stat(), sid=SID + 1) is False  # the client moved on
    assert _confirmed(p.still_ours("/p/n-1", SID), NoNodeError()) is False  # (a synced read's parent gone)
    with pytest.raises(ConnectionLoss):  # ZooKeeper could not say: the caller decides
        _confirmed(p.still_ours("/p/n-1", SID, once=True), ConnectionLoss())
