"""The blocking driver: runs the engine's steps (:mod:`zkrecipes._engine`) on the calling thread.

Requests go out through kazoo's async API (the create and its listing pipelined by the seam); the
thread waits on their results and on one ``threading.Event`` that watch notifications, session events
and ``cancel()`` set; a wait for the local gate waits on the gate's condition. Everything but cleanup is
bounded by the acquire's deadline; idempotent requests are retried on transient errors (:mod:`zkrecipes.retry`).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from . import _engine as e
from . import _kazoo, retry
from ._watches import WAITS, WatchState
from .errors import ClientClosed


class Driver(WatchState):
    """One run of steps: its requests, wake-ups (watch, session events, cancel), deadline and retries.

    Built per acquire, so it is kept cheap: the wake-up Event and the session subscription are made
    only when the acquire has to wait (an uncontended acquire never does)."""

    __slots__ = ("nowait", "deadline", "cancelled", "policy", "wake", "path", "__weakref__")

    def __init__(
        self,
        client: KazooClient,
        deadline: Optional[float],
        cancelled: Callable[[], bool],
        policy: Optional[tenacity.Retrying],
        nowait: bool = False,
        path: str = "",
    ) -> None:
        self.client = client
        self.path = path  # named by the error a stopped client raises
        self.nowait = nowait  # a non-blocking attempt: a wait ends it
        self.deadline = deadline
        self.cancelled = cancelled
        self.policy = policy
        self.wake: Optional[threading.Event] = None  # made before the first wait (see interrupt())
        self._session = None

    def interrupt(self) -> None:
        """Wake a waiting run after its ``cancelled()`` turned True (any thread). One with no Event yet
        has not started to wait: it sees the cancel before it does."""
        wake = self.wake
        if wake is not None:
            wake.set()

    def _wake(self) -> threading.Event:
        wake = self.wake
        if wake is None:
            wake = self.wake = threading.Event()
        return wake

    def run(self, steps: e.Steps[e.T]) -> e.T:
        """Drive ``steps`` to their end: their return value, or their exception (after their cleanup ran)."""
        send: Any = None
        error: Optional[BaseException] = None
        try:
            while True:
                try:
                    op = steps.throw(error) if error is not None else steps.send(send)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                error = None
                try:
                    handler = _OPS.get(type(op))
                    send = handler(self, op) if handler is not None else self._plain(op)
                except BaseException as exc:  # deadline, cancel, KeyboardInterrupt too: the steps clean up
                    send, error = None, exc
        finally:
            self.close()

    def _plain(self, op: Any) -> Any:
        answer = self.answer_now(op)
        if answer is not WAITS:
            return answer
        if op is e.SLEEP:
            return self._sleep_for_deletion()
        if op is e.PAUSE:
            wake = self._wake()
            self.check()
            wake.wait(0.05)
            return None
        raise TypeError(f"unknown engine step {op!r}")

    # -- the requests -------------------------------------------------------------------------------
    def _create_and_list(self, op: e.CreateAndList) -> Tuple[Any, Any, Optional[int]]:
        self.check()
        create, listing = _kazoo.create_and_list(self.client, op.path, op.data, op.acl, op.flags, op.parent)
        try:
            # ZooKeeper answers in order: once the listing is in, so is the create (one wake-up, not two)
            self._wait_ready(create if listing is None else listing)
            if not create.ready():
                self._wait_ready(create)
        except BaseException:
            create.rawlink(_kazoo.delete_if_created(self.client))  # abandoned mid-flight: delete it if made
            raise
        listed = None if listing is None else _kazoo.outcome(listing)
        return _kazoo.outcome(create), listed, _kazoo.session_id(self.client)

    def _read(self, op: e.Read) -> Any:
        start = getattr(self.client, op.kind + "_async")
        if not op.once:
            return self.call(lambda: start(op.path))
        limit = _kazoo.session_timeout(self.client)
        if self.deadline is not None:
            limit = max(0.0, min(limit, self.deadline - time.monotonic()))
        return start(op.path).get(timeout=limit)

    def _read_all(self, op: e.ReadAll) -> List[Any]:
        pending = [self.client.get_async(path) for path in op.paths]  # pipelined
        for ar in pending:
            self._wait_ready(ar)
        return [_kazoo.outcome(ar) for ar in pending]

    def _create_parent(self, op: e.CreateParent) -> Any:
        return self.call(lambda: _kazoo.create_parent(self.client, op.path, op.acl, op.container))

    def _watch(self, op: e.Watch) -> Any:
        """Set a data watch (our only one unless ``op.keep``); a ``get`` rather than ``exists``: on a
        missing node it leaves no watch behind to remove."""
        wake = self._wake()
        self._subscribe()
        if not op.keep:
            self.unwatch()
            wake.clear()  # (not with keep: a watch set just before may have fired already)
        sent: List[_kazoo.AsyncResult] = []
        try:
            _, stat = self.call(self._watch_request(op.path, sent))
        except NoNodeError:
            return None
        except BaseException:  # deadline, cancel, Ctrl-C with the request in flight: its watch must go too
            if sent:
                sent[-1].rawlink(_kazoo.forget_watch(self.client, op.path, self._on_watch))
            raise
        self._watching(op.path)
        return stat

    def _delete(self, op: e.Delete) -> bool:
        return delete(self.client, op.path, op.session, self.policy, gone=op.gone)

    # -- waiting ------------------------------------------------------------------------------------
    def _wait_gate(self, op: e.WaitGate) -> None:
        gate = op.gate
        with gate.mutex:
            while gate.version == op.version:
                self.check()
                left = 0.5 if self.deadline is None else min(0.5, self.deadline - time.monotonic())
                gate.cond.wait(max(0.0, left))

    def _on_session(self, event: str) -> None:
        self.interrupt()

    def _on_watch(self, event: WatchedEvent) -> None:  # kazoo's event thread: only record and wake
        self._seen(event)
        self.interrupt()

    def check(self) -> None:
        """Raise Cancelled, DeadlinePassed or ClientClosed if the run must stop."""
        if self.cancelled():
            raise e.Cancelled()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise e.DeadlinePassed()
        if _kazoo.is_stopped(self.client):  # no session will come: every wait would last forever
            raise client_closed(self.path)

    def _wait_ready(self, ar: _kazoo.AsyncResult) -> None:
        """Wait until a kazoo async result is ready, without passing the deadline or ignoring a cancel
        (checked every 0.2 s: callers check once before they send)."""
        while not ar.wait(0.2 if self.deadline is None else max(0.0, min(0.2, self.deadline - time.monotonic()))):
            self.check()

    def call(self, start: Callable[[], _kazoo.AsyncResult]) -> Any:
        """Run an idempotent async operation ``start()`` with retries, bounded by the deadline."""

        def once() -> Any:
            ar = start()
            self._wait_ready(ar)
            return ar.get()

        try:
            return retry.call(once, deadline=self.deadline, policy=self.policy)
        except retry.TRANSIENT:
            self.check()
            raise

    def _sleep_for_deletion(self) -> FrozenSet[str]:
        """SLEEP: the watched paths deleted (at once if some already are), else wait for a wake-up;
        raises at the deadline, on a cancel, or at once for a non-blocking attempt."""
        wake = self._wake()
        self.check()
        if not self._deletion_seen():
            if self.nowait:
                raise e.DeadlinePassed()
            while not wake.wait(0.5 if self.deadline is None else max(0.0, min(0.5, self.deadline - time.monotonic()))):
                self.check()
            self.check()
        wake.clear()  # the wake-up is used up (a later one sets it again)
        return self._take_deleted()


def client_closed(path: str) -> ClientClosed:
    """The error of an acquire on (or waiting when) a stopped client."""
    return ClientClosed(f"{path}: the KazooClient is stopped (or was never started)")


_OPS: Dict[type, Callable[[Driver, Any], Any]] = {  # the steps with arguments, by type
    e.CreateAndList: Driver._create_and_list,
    e.Read: Driver._read,
    e.ReadAll: Driver._read_all,
    e.CreateParent: Driver._create_parent,
    e.Watch: Driver._watch,
    e.Delete: Driver._delete,
    e.WaitGate: Driver._wait_gate,
}


def delete(
    client: KazooClient,
    path: str,
    session: Optional[int] = None,
    policy: Optional[tenacity.Retrying] = None,
    gone: Optional[Callable[[], bool]] = None,
    timeout: float = 30.0,
) -> bool:
    """Delete our node (idempotent) unless it belongs to a session other than ``session``: the answer to
    :class:`~zkrecipes._engine.Delete` (False if the session, and the node with it, was gone)."""
    until = time.monotonic() + timeout

    def once() -> None:
        sid = _kazoo.session_id(client)
        if session is not None and sid is not None and sid != session:
            raise e.SessionGone()  # our session is gone, and the node with it: never delete a successor's
        ar = _kazoo.delete_async(client, path)  # queued by kazoo until reconnected; dropped if the session ends
        while not ar.wait(max(0.0, min(0.2, until - time.monotonic()))):
            if gone is not None and gone():
                raise e.SessionGone()
            if time.monotonic() >= until:
                ar.get(timeout=0)  # kazoo's timeout error
        if isinstance(_kazoo.outcome(ar), BaseException):
            raise _kazoo.outcome(ar)

    try:
        retry.call(once, deadline=until, policy=policy)
    except Exception as exc:
        return e.delete_answer(path, exc)
    return True
