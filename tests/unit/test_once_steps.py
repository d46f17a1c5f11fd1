"""once's steps (:class:`zkrecipes.once.OnceCore`), driven by scripted replies: what the look and the marking
ask for, in order -- the lock's check before every fenced multi, one deadline, parents from make_parents,
markers read pipelined -- for both fronts, which run these same steps."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Generator

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError, UnimplementedError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE

from zkrecipes import _engine as e
from zkrecipes import once
from zkrecipes._fence import Fenced
from zkrecipes.errors import LockError, LockLost, LockTimeout, TransactionFailed

NODE = "/job/h-W-0000000001"  # our lock node
CHECK = "check"  # what the fake lock's check steps yield: the certainty check of the hold


class Client:
    chroot = ""
    default_acl = None
    logger = logging.getLogger("test_once_steps")


class Hold:
    node = NODE
    released = False
    session = 0x1234


class Lock:
    path, host, node, retry = "/job", "h", NODE, None

    def __init__(self) -> None:
        self.client = Client()

    def transaction(self) -> Fenced:
        return Fenced(self.client, self.path, Hold(), lambda hold, what: None)


def check() -> Generator[Any, Any, None]:
    assert (yield CHECK) is None


def stat(ctime: int, children: int = 0) -> ZnodeStat:
    return ZnodeStat(1, 1, ctime, ctime, 0, 0, 0, 0, 0, children, 1)


def core(keep: float = 60.0) -> once.OnceCore[Any]:
    return once.OnceCore(Lock(), "k", keep, check=check)


def ops(commit: e.Commit) -> list:
    """The operations of the multi a Commit step would send (its fence is added at the send)."""
    return [(type(op).__name__, op.path) for op in commit.send.__self__.operations]


def failed(error: BaseException) -> TransactionFailed:
    return TransactionFailed("refused", [error], 0, None, error)


def test_an_open_key_is_one_read_after_the_check():
    run = core()
    look = run._look()
    assert look.send(None) == CHECK
    assert look.send(None) == e.Read("exists", "/job-done/k")
    with pytest.raises(StopIteration) as end:
        look.send(None)
    assert end.value.value is True and bool(run)


def test_a_fresh_marker_keeps_the_key_done_and_a_stale_one_is_deleted_fenced():
    fresh = core()
    look = fresh._look()
    look.send(None)
    assert look.send(None) == e.Read("exists", "/job-done/k")
    assert look.send(stat(1_000)) == e.Read("exists", NODE)  # now: our node's ctime, a server time
    with pytest.raises(StopIteration) as end:
        look.send(stat(1_000 + 59_000))
    assert end.value.value is False
    stale = core()
    look = stale._look()
    look.send(None)
    look.send(None)
    look.send(stat(1_000))
    assert look.send(stat(1_000 + 60_000)) == CHECK  # the hold is checked before the fenced multi
    commit = look.send(None)
    assert ops(commit) == [("Delete", "/job-done/k")]
    with pytest.raises(StopIteration) as end:
        look.send([True])
    assert end.value.value is True


def test_a_marker_the_ttl_removed_first_still_opens_the_key():
    run = core()
    look = run._look()
    look.send(None)
    look.send(None)
    look.send(stat(0))
    look.send(stat(60_000))
    assert isinstance(look.send(None), e.Commit)
    with pytest.raises(StopIteration) as end:
        look.throw(failed(NoNodeError()))
    assert end.value.value is True


@pytest.mark.parametrize("thrown, raised", [
    (e.DeadlinePassed(), LockTimeout),
    (asyncio.CancelledError(), asyncio.CancelledError), (LockLost("lost"), LockLost),
    (ConnectionLoss(), ConnectionLoss),
])
def test_the_deadline_and_a_task_cancel_end_the_look(thrown, raised):
    run = core()
    look = run._look()
    look.send(None)
    look.send(None)  # the read is out
    with pytest.raises(raised):
        look.throw(thrown)
    with pytest.raises(LockError, match="not looked at yet"):
        bool(run)


def test_done_without_ttl_nodes_and_without_a_parent_then_sweeps_with_pipelined_reads():
    run = core(keep=60.0)
    look = run._look()
    look.send(None)
    look.send(None)
    with pytest.raises(StopIteration):
        look.send(None)  # open
    done = run._done()
    assert done.send(None) == CHECK
    assert isinstance(done.send(None), e.Commit)
    assert done.throw(failed(UnimplementedError())) == CHECK  # no TTL nodes: a persistent marker instead
    assert run.lock.client in once._no_ttl
    assert isinstance(done.send(None), e.Commit)
    assert done.throw(failed(NoNodeError())) == e.CreateParent("/job-done", OPEN_ACL_UNSAFE, True)
    assert done.send("/job-done") == CHECK
    commit = done.send(None)
    assert ops(commit) == [("Create", "/job-done/k")]  # persistent (no createTTL)
    assert done.send([True]) == e.Read("get_children", "/job-done")  # written: now the sweep
    names = ["a", "b", "k"]
    assert done.send(names) == e.ReadAll([f"/job-done/{n}" for n in names])  # one pipeline
    old = json.dumps({"keep": 1}).encode()
    replies = [ConnectionLoss(), NoNodeError(), (b"{}", stat(9_000))]
    assert done.send(replies) == e.Read("get", "/job-done/a")  # a transient error: that one again, retried
    assert done.send((old, stat(5_000))) == e.Read("exists", NODE)  # now, read once
    assert done.send(stat(8_000)) == CHECK  # a (keep 1 s, 3 s old) is stale; k (ours, newer) is not
    commit = done.send(None)
    assert isinstance(commit, e.Commit)
    assert ops(commit) == [("Delete", "/job-done/a")]
    with pytest.raises(StopIteration):
        done.send([True])
    assert not run
    with pytest.raises(LockError, match="done already"):
        run._done().send(None)
    once._no_ttl.discard(run.lock.client)


def test_the_front_is_made_by_lock_once():
    with pytest.raises(TypeError, match=r"lock.once\(key"):
        once.Once(Lock(), "k")  # type: ignore[type-var]
