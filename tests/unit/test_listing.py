"""The one listing of who holds and who waits (``_listing.listing``), driven by scripted replies: what it
asks for, in order, and what it makes of the answers -- as ``contenders()``, ``zkrecipes status``,
revoke/break and the shared watch loop use it."""

from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError
from kazoo.protocol.states import ZnodeStat

from zkrecipes import _listing as p


def stat(czxid: int, version: int = 0) -> ZnodeStat:
    return ZnodeStat(czxid, czxid, 1000, 1000, version, 0, 0, 0x1234, 0, 0, czxid)


def run(gen, *answers):
    """Send the answers in turn; the steps asked for and the value returned."""
    asked = [gen.send(None)]
    for answer in answers:
        try:
            asked.append(gen.throw(answer) if isinstance(answer, BaseException) else gen.send(answer))
        except StopIteration as done:
            return asked, done.value
    raise AssertionError(f"not done after {asked}")


W1, R2, W3 = "h-W-0000000001", "h-R-0000000002", "h-W-0000000003"


def test_one_listing_then_every_node_read_pipelined_in_queue_order():
    asked, got = run(p.listing("/p"), [W3, R2, W1, "lock"],
                     [(b'{"id": "a", "pid": 1}', stat(11)), (b"{}", stat(12)), (b"{}", stat(13))])
    assert asked == [p.Read("get_children", "/p"), p.ReadAll(["/p/" + W1, "/p/" + R2, "/p/" + W3])]
    assert [(x.contender.node, x.contender.holding, x.contender.token) for x in got] == [
        (W1, True, 11), (R2, False, 12), (W3, False, 13)]  # ExclusiveLock's node left out unless asked for
    assert got[0].contender.identifier == "a" and got[0].contender.pid == 1 and got[0].stat.czxid == 11


def test_holders_synced_with_exclusive_lock_first_reads_only_the_holders():
    asked, got = run(p.listing("/p", synced=True, exclusive=True, holders=True), [R2, "lock", W3, W1],
                     [(b'{"host": "there"}', stat(5, version=2)), (b"{}", stat(11))])
    assert asked == [p.Read("get_children", "/p", synced=True), p.ReadAll(["/p/lock", "/p/" + W1])]
    lock, w1 = got
    assert lock.contender.node == "lock" and lock.contender.host == "there" and lock.contender.holding
    assert lock.contender.sequence == lock.contender.token == 5 and lock.found is None and lock.stat.version == 2
    assert w1.contender.node == W1 and w1.found is not None and w1.node.kind == "W"


def test_a_node_gone_before_its_read_is_left_out_and_other_errors_raise():
    _, got = run(p.listing("/p"), [W1, R2], [NoNodeError(), (b"{}", stat(12))])
    assert [(x.contender.node, x.contender.holding) for x in got] == [(R2, False)]  # holding: by the listing
    with pytest.raises(ConnectionLoss):
        run(p.listing("/p"), [W1], [ConnectionLoss()])


def test_a_missing_path_lists_nobody():
    asked, got = run(p.listing("/p", synced=True), NoNodeError())
    assert got == [] and asked == [p.Read("get_children", "/p", synced=True)]
    assert run(p.contenders("/p"), NoNodeError())[1] == []


def test_a_watched_listing_leaves_an_exists_watch_on_a_missing_path_and_lists_again_if_made_meanwhile():
    def fired(event: object) -> None:
        pass

    asked, got = run(p.listing("/p", synced=True, watch=fired), NoNodeError(), None)
    assert asked == [p.Watched("get_children", "/p", fired, True), p.Watched("exists", "/p", fired)]
    assert got == []
    asked, got = run(p.listing("/p", watch=fired), NoNodeError(), stat(1), [W1], [(b"{}", stat(11))])
    assert asked == [p.Watched("get_children", "/p", fired, False), p.Watched("exists", "/p", fired),
                     p.Watched("get_children", "/p", fired, False), p.ReadAll(["/p/" + W1])]
    assert [x.contender.node for x in got] == [W1]


def test_ranked_marks_holders_by_each_kinds_wait_rule_in_any_format():
    ranked = [(n.name, holds) for _, n, holds in p.ranked(["x__rlock__0000000002", "y__lock__0000000003",
                                                          "w__rlock__0000000001", "lock"])]
    assert ranked == [("lock", True), ("w__rlock__0000000001", True), ("x__rlock__0000000002", True),
                      ("y__lock__0000000003", False)]
