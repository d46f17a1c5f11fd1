"""LeaderLatch (both fronts), the election's run() on loss, and the asyncio watch_leader, on the real ensemble.

What users rely on: of two latches on one path exactly one leads; close() hands over and leaves no node
and no thread or task; a leader whose session expires is told (False) before anyone else is told True,
and campaigns again by itself at the back of the queue; leadership in doubt (a silent partition) is not
reported as leadership; a leader's work is stopped (threads: a stop event; asyncio: the coroutine is
cancelled) when leadership is lost, and run() raises LockLost on both fronts (with requeue: campaigns
again); a latch that cannot campaign says so (start() raises, a later failure is raised by wait() and told
to the listeners), a client stopped on purpose is no error in the log; wait() returns after the
listeners ran; bad input fails before any request.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import uuid
from typing import Any, Awaitable, Callable, List, Optional

import pytest
from lockhelpers import FAST_RECONNECT, children, wait_until

from zkrecipes import ClientClosed, LeaderElection, LeaderLatch, LockError, LockLost, aio
from zkrecipes.testing import Partition, expire_session

PATH = "/latch"


class Told:
    """A latch listener recording ``(leading, monotonic time, thread)``; waits for a count with a deadline."""

    def __init__(self, latch: Any) -> None:
        self.seen: List[tuple] = []
        self._cond = threading.Condition()
        latch.add_listener(self)

    def __call__(self, leading: bool) -> None:
        with self._cond:
            self.seen.append((leading, time.monotonic(), threading.get_ident()))
            self._cond.notify_all()

    @property
    def values(self) -> List[bool]:
        with self._cond:
            return [v for v, _, _ in self.seen]

    def wait_for(self, values: List[bool], timeout: float = 15.0) -> float:
        """Once the calls so far are ``values``: the time of the last."""
        with self._cond:
            ok = self._cond.wait_for(lambda: [v for v, _, _ in self.seen] == values, timeout)
            assert ok, f"listener calls {self.values}, expected {values}"
            return self.seen[-1][1]


def queue_of(zk, n: int, timeout: float = 15.0) -> list:
    """The candidates' identifiers in queue order, once ``n`` are queued."""
    observer = LeaderElection(zk, PATH)
    return wait_until(lambda: (ids := [c.identifier for c in synced(observer).contenders()]) and len(ids) == n
                      and ids, timeout, f"{n} candidates queued")


def renewed(zk, identifier: str, old: str, timeout: float = 15.0) -> str:
    """The name of ``identifier``'s node once it is another than ``old`` (the candidate queued again)."""
    observer = LeaderElection(zk, PATH)

    def found() -> Optional[str]:
        nodes = [c.node for c in synced(observer).contenders() if c.identifier == identifier]
        return nodes[0] if nodes and nodes[0] != old else None

    return wait_until(found, timeout, f"a new node of {identifier}")


def synced(election):
    election.client.sync("/")
    return election


def nothing_left(zk) -> None:
    assert children(zk, PATH) == [], "a node was left behind"


# -- threads ---------------------------------------------------------------------------------------------


def test_one_of_two_latches_leads_and_close_hands_over(zk, zk_factory):
    a = LeaderLatch(zk_factory(), PATH, "a")
    b = LeaderLatch(zk_factory(), PATH, "b")
    told_a, told_b = Told(a), Told(b)
    assert not a.has_leadership and a.wait(timeout=0) is False  # latent: nothing to wait for
    a.start()
    assert a.wait(timeout=15) is True and a.has_leadership
    b.start()
    assert queue_of(zk, 2) == ["a", "b"]
    assert a.has_leadership and not b.has_leadership
    assert told_a.values == [True] and told_b.values == []
    assert b.wait(timeout=0.2) is False  # not the leader: the timeout passes
    token = a.election.token
    a.election.check()  # the leader's side effects go through its election

    a.close()
    assert told_a.wait_for([True, False]) and told_b.wait_for([True])
    assert b.wait(timeout=15) is True and b.has_leadership and b.election.token > token
    assert not a.has_leadership and a.wait() is False and not a._thread.is_alive()
    assert queue_of(zk, 1) == ["b"]
    a.close()  # idempotent
    with pytest.raises(LockError, match="closed"):
        a.start()
    with pytest.raises(LockError, match="already started"):
        b.start()

    with LeaderLatch(zk_factory(), PATH, "c") as c:  # starts; queued behind b
        assert queue_of(zk, 2) == ["b", "c"]
        b.close()
        assert c.wait(timeout=15) is True
    assert told_b.values == [True, False] and not c._thread.is_alive() and not b._thread.is_alive()
    nothing_left(zk)


def test_expired_leader_is_told_before_the_next_leads_and_campaigns_again(zk, zk_ensemble, zk_factory):
    """The session expires as it does in production: the server hears nothing for the session timeout (a
    silent partition). The old leader is told False from its doubt clock before the server can expire the
    session and grant the next candidate. (expire_session() ends a session at once, with no silence before
    it: the old leader's and the new leader's notices then race, and nothing could order them.)"""
    with Partition(zk_ensemble.hosts) as partition:
        a = LeaderLatch(zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT), PATH, "a")
        b = LeaderLatch(zk_factory(), PATH, "b")
        told_a, told_b = Told(a), Told(b)
        a.start()
        assert a.wait(timeout=15)
        b.start()
        assert queue_of(zk, 2) == ["a", "b"]
        old_session = a.election.client.client_id[0]

        partition.freeze()
        b_true = told_b.wait_for([True], timeout=20)
        assert told_a.values == [True, False] and told_a.seen[-1][1] < b_true, "the new leader was told first"
        assert b.has_leadership and not a.has_leadership
        partition.heal()
        # a campaigns again by itself: a new node of its new session, behind b
        assert queue_of(zk, 2) == ["b", "a"]
        assert all(zk.exists(f"{PATH}/{n}").ephemeralOwner != old_session for n in children(zk, PATH))

        b.close()
        assert a.wait(timeout=15) is True and told_a.wait_for([True, False, True])
        a.close()
        assert not a._thread.is_alive() and told_a.values == [True, False, True, False]
    nothing_left(zk)


def test_latch_whose_session_is_expired_campaigns_again(zk, zk_factory):
    a = LeaderLatch(zk_factory(timeout=3.0), PATH, "a")
    b = LeaderLatch(zk_factory(), PATH, "b")
    told_a = Told(a)
    a.start()
    assert a.wait(timeout=15)
    b.start()
    assert queue_of(zk, 2) == ["a", "b"]
    expire_session(a.election.client)
    assert b.wait(timeout=15) is True
    assert queue_of(zk, 2) == ["b", "a"]  # a new node of a's new session, at the back
    assert told_a.values[-1] is False and not a.has_leadership
    b.close()
    assert a.wait(timeout=15) is True and told_a.values[-1] is True
    a.close()
    nothing_left(zk)


def test_leadership_in_doubt_is_not_leadership(zk, zk_ensemble, zk_factory):
    with Partition(zk_ensemble.hosts) as partition:
        a = LeaderLatch(zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT), PATH, "a")
        told = Told(a)
        a.start()
        assert a.wait(timeout=15)
        frozen_at = partition.freeze()  # a silent partition: nothing is delivered, no connection drops
        told.wait_for([True, False], timeout=10)
        assert not a.has_leadership and a.election.state in ("suspended", "lost")
        assert told.seen[-1][1] - frozen_at < 4.0, "told only after the session could have expired"
        partition.heal()
        assert a.wait(timeout=20) is True and told.wait_for([True, False, True], timeout=20)
        a.close()
        nothing_left(zk)


def test_close_while_campaigning_leaves_nothing(zk, zk_factory):
    leader = LeaderElection(zk_factory(), PATH, "leader")
    assert leader.campaign(timeout=15)
    waiting = LeaderLatch(zk_factory(), PATH, "waiting")
    told = Told(waiting)
    waiting.start()
    assert queue_of(zk, 2) == ["leader", "waiting"]
    done = []
    waiter = threading.Thread(target=lambda: done.append(waiting.wait()), daemon=True)
    waiter.start()
    waiting.close()
    waiter.join(15)
    assert done == [False], "wait() did not return when the latch closed"
    assert not waiting._thread.is_alive() and told.values == []
    assert queue_of(zk, 1) == ["leader"]
    leader.resign()
    nothing_left(zk)

    unstarted = LeaderLatch(zk, PATH)
    unstarted.close()  # before start: nothing to do, and it never starts
    with pytest.raises(LockError):
        unstarted.start()


def test_close_from_a_listener_does_not_hang(zk, zk_factory):
    a = LeaderLatch(zk_factory(), PATH, "a")
    closed = threading.Event()

    def on_change(leading: bool) -> None:
        if leading:
            a.close()  # on the latch's own thread: returns at once, the thread ends by itself
            closed.set()

    a.add_listener(on_change)
    a.start()
    assert closed.wait(15)
    a._thread.join(15)
    assert not a._thread.is_alive() and not a.has_leadership
    nothing_left(zk)


def test_bad_input_raises_before_any_request(zk_factory, monkeypatch):
    client = zk_factory()
    calls: list = []
    monkeypatch.setattr(client, "_call", lambda request, ar: calls.append(request))
    for cls in (LeaderLatch, aio.LeaderLatch):
        for path in ["relative", "/", "/a//b", ""]:
            with pytest.raises(ValueError):
                cls(client, path)
        with pytest.raises(TypeError):
            cls("127.0.0.1:2181", PATH)
        with pytest.raises(ValueError):
            cls(client, PATH, identifier="a/b")
        with pytest.raises(ValueError):
            cls(client, PATH, protocol="etcd")
        with pytest.raises(TypeError, match="LeaderLatch"):
            cls(client, PATH, hots="x")
        latch = cls(client, PATH)
        with pytest.raises(TypeError):
            latch.add_listener("fn")
    latch = LeaderLatch(client, PATH)
    for timeout in [-1, math.nan]:
        with pytest.raises(ValueError):
            latch.wait(timeout)
    with pytest.raises(TypeError):
        latch.wait("1")
    with pytest.raises(LockError, match="event loop"):
        aio.LeaderLatch(client, PATH).start()
    e = LeaderElection(client, PATH)
    with pytest.raises(TypeError):
        e.run(print, stop="yes")
    assert calls == [], f"requests were sent: {calls}"


def test_threaded_run_sets_stop_and_raises_lock_lost_when_leadership_is_lost(zk, zk_factory):
    e = LeaderElection(zk_factory(timeout=3.0), PATH, "runner")
    started, returned, outcome = threading.Event(), [], []

    def lead(stop: threading.Event, x: int) -> int:
        started.set()
        assert stop.wait(30), "stop was never set"
        returned.append(x)
        return x

    def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> threading.Thread:
        def body() -> None:
            try:
                outcome.append(e.run(fn, *args, **kwargs))
            except Exception as exc:
                outcome.append(exc)

        started.clear()
        t = threading.Thread(target=body, daemon=True)
        t.start()
        assert started.wait(15)
        return t

    t = run(lead, 7, stop=True)
    expire_session(e.client)
    t.join(15)
    assert returned == [7], "the leader's function did not return after stop was set"
    assert len(outcome) == 1 and isinstance(outcome[0], LockLost), f"run() returned {outcome} for a lost term"
    assert e.lost.is_set() and not e.is_leader and e.state == "idle"
    nothing_left(zk)

    def lead_until_lost() -> str:  # without stop=True: it reads election.lost
        started.set()
        assert e.lost.wait(30)
        return "done"

    t = run(lead_until_lost)
    expire_session(e.client)
    t.join(15)
    assert len(outcome) == 2 and isinstance(outcome[1], LockLost), f"run() returned {outcome[1:]} for a lost term"
    nothing_left(zk)

    t = run(lead, 8, stop=True)
    e.resign()  # from another thread: the term ends, stop is set; not lost: func's result
    t.join(15)
    assert outcome[2:] == [8] and not e.lost.is_set()
    nothing_left(zk)


def test_threaded_run_requeue_campaigns_again_after_a_lost_term(zk, zk_factory):
    e = LeaderElection(zk_factory(timeout=3.0), PATH, "pool")
    tokens: List[int] = []

    def term(stop: threading.Event) -> str:
        tokens.append(e.token)
        e.check()
        if len(tokens) == 2:
            expire_session(e.client)  # this term is lost: stop is set, then the run campaigns again
            assert stop.wait(30)
        if len(tokens) == 4:
            e.cancel()  # the run ends after this term
        return "done"

    assert e.run(term, requeue=True, stop=True) is None
    assert len(tokens) == 4 and tokens == sorted(set(tokens))
    assert not e.is_leader and e.state == "idle"
    nothing_left(zk)


def test_wait_returns_once_the_listeners_were_told(zk, zk_factory):
    """wait() -> True comes after every listener's fn(True) returned (as Curator's await() after its
    listeners): code after wait() sees what its listeners did."""
    latch = LeaderLatch(zk_factory(), PATH, "a")
    in_listener, let_go = threading.Event(), threading.Event()

    def slow(leading: bool) -> None:
        if leading:
            in_listener.set()
            assert let_go.wait(30)

    latch.add_listener(slow)
    told = Told(latch)  # after slow: told True only once slow returned
    latch.start()
    assert in_listener.wait(15) and latch.has_leadership
    assert latch.wait(timeout=0.3) is False, "wait() returned before the listeners were told"
    let_go.set()
    assert latch.wait(timeout=15) is True and told.values == [True]
    latch.close()
    nothing_left(zk)


def test_start_raises_on_a_stopped_or_never_started_client(zk, zk_factory):
    never = zk_factory(start=False)
    stopped = zk_factory()
    stopped.stop()
    for client in (never, stopped):
        latch = LeaderLatch(client, PATH, "a")
        told = Told(latch)
        with pytest.raises(ClientClosed, match="stopped"):
            latch.start()
        assert isinstance(latch.error, ClientClosed) and not latch._thread.is_alive()
        with pytest.raises(ClientClosed):
            latch.wait(timeout=1)
        assert told.values == [False]  # the failure told
        with pytest.raises(ClientClosed):
            with LeaderLatch(client, PATH, "b"):
                pass
    nothing_left(zk)


@pytest.mark.parametrize("foreign", ["kazoo", "curator"])
def test_start_raises_on_a_foreign_node_on_the_path(zk, zk_factory, foreign, caplog):
    """Another library's election node on the path: the default node format cannot queue with it."""
    name = f"{uuid.uuid4().hex}__lock__" if foreign == "kazoo" else f"_c_{uuid.uuid4()}-latch-"
    zk.create(f"{PATH}/{name}", b"other", ephemeral=True, sequence=True, makepath=True)
    latch = LeaderLatch(zk_factory(), PATH, "a")
    told = Told(latch)
    with pytest.raises(LockError, match=f"refusing to queue.*protocol='{foreign}'"):
        latch.start()
    loud = [r for r in caplog.records if r.name.startswith("zkrecipes") and r.levelno >= logging.WARNING]
    assert loud == [], "a failure raised to the caller was also logged as one"
    assert not latch._thread.is_alive() and told.values == [False]
    assert [n for n in children(zk, PATH) if not n.startswith(name)] == [], "our node was left behind"
    with pytest.raises(LockError, match="refusing"):
        latch.wait()


def test_a_later_failure_is_kept_raised_by_wait_and_told(zk, zk_factory):
    """A kazoo node that joins while the latch waits: found by the latch's next listing, which refuses it."""
    leader = LeaderElection(zk_factory(), PATH, "leader")
    assert leader.campaign(timeout=15)
    middle = LeaderElection(zk_factory(), PATH, "middle")
    waiting = threading.Thread(target=middle.campaign, daemon=True)
    waiting.start()
    queue_of(zk, 2)
    latch = LeaderLatch(zk_factory(), PATH, "latch")
    told = Told(latch)
    latch.start()  # queued behind middle
    assert queue_of(zk, 3) == ["leader", "middle", "latch"]
    zk.create(f"{PATH}/{uuid.uuid4().hex}__lock__", b"kazoo", ephemeral=True, sequence=True)  # (kazoo's data: its id)
    middle.cancel()  # the latch's predecessor goes: it lists the queue again and finds the kazoo node
    waiting.join(15)
    with pytest.raises(LockError, match="refusing to queue"):
        latch.wait(timeout=15)
    assert isinstance(latch.error, LockError) and told.wait_for([False])
    latch._thread.join(15)
    assert not latch._thread.is_alive() and not latch.has_leadership
    assert [c.identifier for c in leader.contenders()] == ["leader", "kazoo"], "the latch's node was left behind"
    leader.resign()


def test_a_client_stopped_under_a_running_latch(zk_factory, caplog):
    client = zk_factory()
    latch = LeaderLatch(client, PATH, "a")
    told = Told(latch)
    latch.start()
    assert latch.wait(timeout=15)
    with caplog.at_level(logging.INFO, logger="zkrecipes"):
        client.stop()  # (the latch learns it from the session's end, moments later)
        told.wait_for([True, False, False])  # leadership left, then the failure
        with pytest.raises(ClientClosed):
            latch.wait(timeout=15)
        latch._thread.join(15)
    assert not latch._thread.is_alive() and isinstance(latch.error, ClientClosed)
    ours = [r for r in caplog.records if r.name.startswith("zkrecipes")]
    loud = [r for r in ours if r.levelno >= logging.WARNING or r.exc_info]
    assert loud == [], "a stop on purpose was logged as a failure"
    assert any("stopped campaigning" in r.getMessage() for r in ours if r.levelno == logging.INFO)
    latch.close()


# -- asyncio ---------------------------------------------------------------------------------------------


def arun(body: Callable[[], Awaitable[Any]], timeout: float = 90.0) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(body(), timeout)

    return asyncio.run(main())


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def test_aio_start_raises_at_once_and_a_plain_with_points_to_async_with(zk, zk_factory):
    never = zk_factory(start=False)
    name = f"_c_{uuid.uuid4()}-latch-"
    zk.create(f"/foreign/{name}", b"curator", ephemeral=True, sequence=True, makepath=True)

    async def body() -> None:
        latch = aio.LeaderLatch(never, PATH, "a")
        told = AioTold(latch)
        with pytest.raises(ClientClosed, match="stopped"):
            await latch.start()
        assert latch._task.done() and isinstance(latch.error, ClientClosed) and told.seen[-1][0] is False
        with pytest.raises(ClientClosed):
            await latch.wait(1)
        with pytest.raises(ClientClosed):
            async with aio.LeaderLatch(never, PATH, "b"):
                pass

        unawaited = aio.LeaderLatch(never, PATH, "c")
        unawaited.start()  # not awaited: the failure is kept, and wait() raises it
        with pytest.raises(ClientClosed):
            await unawaited.wait(15)

        foreign = aio.LeaderLatch(zk_factory(), "/foreign", "d")
        told = AioTold(foreign)
        with pytest.raises(LockError, match="refusing to queue.*protocol='curator'"):
            await foreign.start()
        assert foreign._task.done() and [v for v, _, _ in told.seen] == [False]
        assert [n for n in children(zk, "/foreign") if not n.startswith(name)] == [], "our node was left behind"

        with pytest.raises(TypeError, match="async with"):
            with aio.LeaderLatch(zk, PATH):  # type: ignore[attr-defined]
                pass

    arun(body)
    nothing_left(zk)


def test_aio_client_stopped_under_a_running_latch(zk_factory, caplog):
    client = zk_factory()

    async def body() -> None:
        latch = aio.LeaderLatch(client, PATH, "a")
        told = AioTold(latch)
        await latch.start()
        assert await latch.wait(timeout=15)
        with caplog.at_level(logging.INFO, logger="zkrecipes"):
            await in_thread(client.stop)  # (the latch learns it from the session's end, moments later)
            await told.wait_for([True, False, False])  # leadership left, then the failure
            with pytest.raises(ClientClosed):
                await latch.wait(timeout=15)
            await latch.close()
        assert latch._task.done()

    arun(body)
    ours = [r for r in caplog.records if r.name.startswith("zkrecipes")]
    loud = [r for r in ours if r.levelno >= logging.WARNING or r.exc_info]
    assert loud == [], "a stop on purpose was logged as a failure"
    assert any("stopped campaigning" in r.getMessage() for r in ours if r.levelno == logging.INFO)


class AioTold:
    """An aio latch listener: ``(leading, monotonic time, thread)``; awaits a sequence with a deadline."""

    def __init__(self, latch: Any) -> None:
        self.seen: List[tuple] = []
        self.changed = asyncio.Event()
        latch.add_listener(self)

    def __call__(self, leading: bool) -> None:
        self.seen.append((leading, time.monotonic(), threading.get_ident()))
        self.changed.set()

    async def wait_for(self, values: List[bool], timeout: float = 15.0) -> float:
        deadline = time.monotonic() + timeout
        while [v for v, _, _ in self.seen] != values:
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"listener calls {[v for v, _, _ in self.seen]}, expected {values}")
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass
        return self.seen[-1][1]


def test_aio_latches_hand_over_on_close_and_on_expiry(zk, zk_ensemble, zk_factory):
    with Partition(zk_ensemble.hosts) as partition:
        ca = zk_factory(hosts=partition.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)
        cb, cc = zk_factory(), zk_factory(timeout=3.0)

        async def body() -> None:
            a, b = aio.LeaderLatch(ca, PATH, "a"), aio.LeaderLatch(cb, PATH, "b")
            told_a, told_b = AioTold(a), AioTold(b)
            a.start()
            assert await a.wait(timeout=15) is True and a.has_leadership
            b.start()
            assert await in_thread(queue_of, zk, 2) == ["a", "b"]
            assert not b.has_leadership and await b.wait(timeout=0.2) is False
            assert {t for _, _, t in told_a.seen} == {threading.get_ident()}  # on the loop

            await in_thread(partition.freeze)  # a silent partition: the server expires a's session
            b_true = await told_b.wait_for([True], timeout=20)
            assert [v for v, _, _ in told_a.seen] == [True, False] and told_a.seen[-1][1] < b_true
            assert not a.has_leadership
            await in_thread(partition.heal)
            assert await in_thread(queue_of, zk, 2) == ["b", "a"]  # a campaigned again, at the back

            await b.close()
            assert b._task.done() and await a.wait(timeout=15) is True
            await told_a.wait_for([True, False, True])

            c = aio.LeaderLatch(cc, PATH, "c")  # a session expired at once (expire_session): c requeues
            await c.start()
            assert await in_thread(queue_of, zk, 2) == ["a", "c"]
            first = await in_thread(renewed, zk, "c", "")  # c's node, queued behind a
            old = zk.exists(f"{PATH}/{first}")
            await in_thread(expire_session, cc)
            # a new node of c's new session, not the old one still listed
            new = await in_thread(renewed, zk, "c", first)
            assert zk.exists(f"{PATH}/{new}").czxid > old.czxid and await in_thread(queue_of, zk, 2) == ["a", "c"]
            assert zk.exists(f"{PATH}/{new}").ephemeralOwner == cc.client_id[0] != old.ephemeralOwner
            await a.close()
            assert a._task.done() and told_a.seen[-1][0] is False and await a.wait() is False
            assert await c.wait(timeout=15) is True
            await c.close()
            assert c._task.done()

        arun(body)
    nothing_left(zk)


def test_aio_close_while_campaigning_leaves_nothing(zk, zk_factory):
    leader = LeaderElection(zk_factory(), PATH, "leader")
    assert leader.campaign(timeout=15)

    async def body() -> None:
        async with aio.LeaderLatch(zk_factory(), PATH, "waiting") as latch:
            with pytest.raises(ValueError):
                await latch.wait(timeout=-1)
            assert await in_thread(queue_of, zk, 2) == ["leader", "waiting"]
            waiter = asyncio.ensure_future(latch.wait())
        assert latch._task.done() and await asyncio.wait_for(waiter, 5) is False
        assert await in_thread(queue_of, zk, 1) == ["leader"]
        with pytest.raises(LockError):
            latch.start()

    arun(body)
    leader.resign()
    nothing_left(zk)


def test_aio_run_cancels_the_leader_on_loss_and_raises_lock_lost(zk, zk_factory):
    client = zk_factory(timeout=3.0)

    async def body() -> None:
        e = aio.LeaderElection(client, PATH, "runner")
        began, cancelled = asyncio.Event(), asyncio.Event()

        async def lead() -> None:
            began.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        run = asyncio.ensure_future(e.run(lead))
        await asyncio.wait_for(began.wait(), 15)
        await in_thread(expire_session, client)
        with pytest.raises(LockLost, match="cancelled"):
            await asyncio.wait_for(run, 15)
        assert cancelled.is_set() and not e.is_leader and e.state == "idle"

        # resign() from another task ends the term too: the coroutine is cancelled, run returns None
        began.clear()
        run = asyncio.ensure_future(e.run(lead))
        await asyncio.wait_for(began.wait(), 15)
        await e.resign()
        assert await asyncio.wait_for(run, 15) is None

    arun(body)
    nothing_left(zk)


def test_aio_run_requeue_campaigns_again_after_each_term_and_a_loss(zk, zk_factory):
    client = zk_factory(timeout=3.0)

    async def body() -> None:
        e = aio.LeaderElection(client, PATH, "pool")
        tokens: List[int] = []

        async def term() -> str:
            tokens.append(e.token)
            await e.check()
            if len(tokens) == 2:
                await in_thread(expire_session, client)  # this term is lost: cancelled, then requeued
                await asyncio.sleep(60)
            if len(tokens) == 4:
                e.cancel()  # the run ends after this term
            return "done"

        assert await asyncio.wait_for(e.run(term, requeue=True), 60) is None
        assert len(tokens) == 4 and tokens == sorted(set(tokens))
        assert not e.is_leader and e.state == "idle"
        with pytest.raises(TypeError):
            await e.run(term, requeue="yes")

    arun(body)
    nothing_left(zk)


def test_aio_watch_leader_reports_each_change_on_the_loop(zk, zk_factory):
    a = LeaderElection(zk_factory(), PATH, "a")

    async def body() -> None:
        observer = aio.LeaderElection(zk_factory(), PATH)
        seen: List[Optional[str]] = []
        threads = set()
        changed = asyncio.Event()

        def fn(leader) -> None:
            seen.append(None if leader is None else leader.identifier)
            threads.add(threading.get_ident())
            changed.set()

        async def reported(values: list) -> None:
            deadline = time.monotonic() + 15
            while seen != values:
                changed.clear()
                assert time.monotonic() < deadline, f"reports {seen}, expected {values}"
                try:
                    await asyncio.wait_for(changed.wait(), max(0.0, deadline - time.monotonic()))
                except asyncio.TimeoutError:
                    pass

        with pytest.raises(TypeError):
            observer.watch_leader(None)
        watch = observer.watch_leader(fn)
        await reported([None])
        assert await in_thread(a.campaign, 15)
        await reported([None, "a"])
        await in_thread(a.resign)
        await reported([None, "a", None])
        watch.stop()  # returns at once on the loop; no call after it
        assert threads == {threading.get_ident()}
        await in_thread(watch._thread.join, 15)
        assert not watch._thread.is_alive()
        assert await in_thread(a.campaign, 15)
        await in_thread(a.resign)
        await asyncio.sleep(0)  # (a call handed to the loop before stop() would run here)
        assert seen == [None, "a", None]

    arun(body)
    nothing_left(zk)
