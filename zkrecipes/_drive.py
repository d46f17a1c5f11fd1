"""The blocking driver: runs a :mod:`~zkrecipes._engine` generator on the calling thread.

Requests go out through kazoo's async API (the create and its listing pipelined by the seam); the
thread waits on their results and on one ``threading.Event`` that watch notifications, session events
and ``cancel()`` set; a wait for the local gate (:class:`~zkrecipes._engine.WaitGate`) waits on the
gate's condition. Everything but cleanup is bounded by the acquire's deadline; idempotent reads are
retried on transient errors (tenacity, :mod:`zkrecipes.retry`).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any, Callable, Dict, FrozenSet, Generator, List, Optional, Sequence, Set, Tuple

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import (
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.security import ACL

from . import _kazoo, retry
from ._engine import (
    NOW,
    PAUSE,
    SESSION,
    SLEEP,
    STALE,
    UNWATCH,
    Cancelled,
    CreateAndList,
    DeadlinePassed,
    Delete,
    MakeParents,
    Read,
    ReadAll,
    Steps,
    T,
    WaitGate,
    Watch,
)
from .errors import ClientClosed, LockError
from .session import SessionWatcher

log = logging.getLogger("zkrecipes.engine")

_no_containers: "weakref.WeakSet[KazooClient]" = weakref.WeakSet()  # clients whose server has no containers


class WatchState:
    """What one acquire knows of its watches and its session, the same for both drivers (no I/O but
    removing watches): the paths watched, the deletions seen, the session subscription (made only once
    the acquire has to wait) and the staleness test. A driver supplies ``client``, ``_on_watch`` (kazoo's
    event thread) and ``_on_session`` (the session thread), and wakes itself after :meth:`_seen`."""

    __slots__ = ("client", "_deleted", "_deleted_at", "_since", "_watched", "_session")

    client: KazooClient
    _session: Optional[SessionWatcher]  # None until the first watch (a driver's __init__ sets it)

    def _on_watch(self, event: WatchedEvent) -> None:
        raise NotImplementedError

    def _on_session(self, event: str) -> None:
        raise NotImplementedError

    def _subscribe(self) -> None:
        """Before the first watch: session events wake a sleeping waiter, and watches are recorded (an
        uncontended acquire never gets here)."""
        if self._session is None:
            self._deleted: Set[str] = set()
            self._deleted_at: Optional[float] = None
            self._watched: Set[str] = set()  # paths our data watches are on
            self._since = time.monotonic()
            self._session = SessionWatcher.of(self.client)
            self._session.subscribe(self._on_session)

    def _watching(self, path: str) -> None:
        self._deleted.discard(path)  # a path made again (ExclusiveLock's node) is watched afresh
        self._watched.add(path)

    def _seen(self, event: WatchedEvent) -> None:
        if event.type == EventType.DELETED:
            self._deleted.add(event.path)  # kazoo hands watchers the path without the chroot
            self._deleted_at = time.monotonic()

    def _deletion_seen(self) -> bool:
        """A watched path is already known deleted: SLEEP answers at once."""
        return bool(self._watched & self._deleted)

    def _take_deleted(self) -> FrozenSet[str]:
        """SLEEP's answer: the watched paths deleted (a fired watch is gone from the server and kazoo)."""
        gone = frozenset(self._watched & self._deleted)
        self._watched -= gone
        return gone

    def _stale(self) -> bool:
        """True if a grant now would rest on old news: the process stood still while we waited (GC pause,
        SIGSTOP; told by the session thread) or the deletion we were told of is older than the stall limit
        (a third of the session timeout) -- the session may have expired meanwhile, so our node must be
        read back before we hold. A waiter that never slept is never stale."""
        s = self._session
        if s is None:
            return False
        return s.stalled_since(self._since) or (
            self._deleted_at is not None and time.monotonic() - self._deleted_at > s.stall_limit
        )

    def unwatch(self) -> None:
        if self._session is None:
            return  # never watched
        for path in self._watched:
            _kazoo.remove_data_watch(self.client, path, self._on_watch)
        self._watched.clear()

    def close(self) -> None:
        """Drop our watches and the session subscription (the acquire is over)."""
        if self._session is not None:
            self.unwatch()
            self._session.unsubscribe(self._on_session)
            self._session = None


class Driver(WatchState):
    """One acquire's requests, wake-ups (watch, session events, cancel), deadline and retries.

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
        self.nowait = nowait
        self.deadline = deadline
        self.cancelled = cancelled
        self.policy = policy
        self.wake: Optional[threading.Event] = None  # made before the first wait (see interrupt())
        self._session = None

    def interrupt(self) -> None:
        """Wake a waiting acquire (call after its ``cancelled()`` turned True; any thread). A driver that
        has no Event yet has not started to wait: it sees the cancel before it does. (A wait for the
        gate is woken by the gate: see :meth:`Gate.wake_all <zkrecipes._gate.Gate.wake_all>`.)"""
        wake = self.wake
        if wake is not None:
            wake.set()

    def _wake(self) -> threading.Event:
        """The wake-up Event, made on first need, always before the cancel is checked for a wait."""
        wake = self.wake
        if wake is None:
            wake = self.wake = threading.Event()
        return wake

    def run(self, steps: Steps[T]) -> T:
        """Drive ``steps`` to its end: its return value, or its exception (after its cleanup ran)."""
        send: Any = None
        error: Optional[BaseException] = None
        ops = _OPS
        try:
            while True:
                try:
                    op = steps.throw(error) if error is not None else steps.send(send)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                error = None
                if op is SESSION:  # cannot fail
                    send = _kazoo.session_id(self.client)
                    continue
                try:
                    handler = ops.get(type(op))
                    send = handler(self, op) if handler is not None else self._plain(op)
                except BaseException as exc:  # deadline, cancel, KeyboardInterrupt too: the steps clean up
                    send, error = None, exc
        finally:
            self.close()

    def _plain(self, op: Any) -> Any:
        if op is NOW:
            return time.monotonic()
        if op is STALE:
            return self._stale()
        if op is SLEEP:
            return self._sleep_for_deletion()
        if op is PAUSE:
            wake = self._wake()
            self.check()
            wake.wait(0.05)
            return None
        if op is UNWATCH:
            self.unwatch()
            return None
        raise TypeError(f"unknown engine step {op!r}")

    # -- the requests -------------------------------------------------------------------------------
    def _create_and_list(self, op: CreateAndList) -> Tuple[Any, Any, Optional[int]]:
        self.check()
        create, listing = _kazoo.create_and_list(self.client, op.path, op.data, op.acl, op.flags, op.parent)
        try:
            # ZooKeeper answers in order: once the listing is in, so is the create (one wake-up, not two)
            self._wait_ready(create if listing is None else listing)
            if not create.ready():
                self._wait_ready(create)
        except BaseException:
            create.rawlink(delete_if_created(self.client))  # abandoned mid-flight: delete it if made
            raise
        listed = None if listing is None else _kazoo.outcome(listing)
        return _kazoo.outcome(create), listed, _kazoo.session_id(self.client)

    def _read(self, op: Read) -> Any:
        start = getattr(self.client, op.kind + "_async")
        if not op.once:
            return self.call(lambda: start(op.path))
        limit = _kazoo.session_timeout(self.client)
        if self.deadline is not None:
            limit = max(0.0, min(limit, self.deadline - time.monotonic()))
        return start(op.path).get(timeout=limit)

    def _read_all(self, op: ReadAll) -> List[Any]:
        pending = [self.client.get_async(path) for path in op.paths]  # pipelined
        for ar in pending:
            self._wait_ready(ar)
        return [_kazoo.outcome(ar) for ar in pending]

    def _wait_gate(self, op: WaitGate) -> None:
        gate = op.gate
        with gate.mutex:
            while gate.version == op.version:
                self.check()
                left = 0.5 if self.deadline is None else min(0.5, self.deadline - time.monotonic())
                gate.cond.wait(max(0.0, left))

    def _make_parents(self, op: MakeParents) -> None:
        requests = parent_requests(self.client, op.path, op.acl, op.container)
        value: Any = None
        error: Optional[BaseException] = None
        while True:
            try:
                start = requests.throw(error) if error is not None else requests.send(value)
            except StopIteration:
                return
            try:
                value, error = self.call(start), None
            except BaseException as exc:  # thrown into the steps: they decide (a NoNode climbs)
                value, error = None, exc

    def _watch(self, op: Watch) -> Any:
        """Set a data watch (our only one unless ``op.keep``); a ``get`` rather than ``exists``: on a
        missing node it leaves no watch behind to remove."""
        wake = self._wake()
        self._subscribe()
        if not op.keep:
            self.unwatch()
            wake.clear()  # (not with keep: a watch set just before may have fired already)
        sent: List[_kazoo.AsyncResult] = []

        def start() -> _kazoo.AsyncResult:
            sent.append(self.client.get_async(op.path, watch=self._on_watch))
            return sent[-1]

        try:
            _, stat = self.call(start)
        except NoNodeError:
            return None
        except BaseException:  # deadline, cancel, Ctrl-C with the request in flight: its watch must go too
            if sent:
                sent[-1].rawlink(_forget_watch(self.client, op.path, self._on_watch))
            raise
        self._watching(op.path)
        return stat

    def _delete(self, op: Delete) -> bool:
        return delete(self.client, op.path, op.session, self.policy, gone=op.gone)

    # -- waiting ------------------------------------------------------------------------------------
    def _on_session(self, event: str) -> None:
        self.interrupt()

    def _on_watch(self, event: WatchedEvent) -> None:  # kazoo's event thread: only record and wake
        self._seen(event)
        self.interrupt()

    def check(self) -> None:
        """Raise Cancelled, DeadlinePassed or ClientClosed if the acquire must stop."""
        if self.cancelled():
            raise Cancelled()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise DeadlinePassed()
        if _kazoo.is_stopped(self.client):  # no session will come: every wait would last forever
            raise client_closed(self.path)

    def _wait_ready(self, ar: _kazoo.AsyncResult) -> None:
        """Wait until a kazoo async result is ready, without passing the deadline or ignoring a cancel
        (checked every 0.2 s: callers check once before they send)."""
        deadline = self.deadline
        while True:
            left = 0.2 if deadline is None else deadline - time.monotonic()  # (no min/max: cold calls cost)
            if ar.wait(0.2 if left >= 0.2 else left if left > 0.0 else 0.0):
                return
            self.check()

    def _result(self, ar: _kazoo.AsyncResult) -> Any:
        self._wait_ready(ar)
        return ar.get()

    def call(self, start: Callable[[], _kazoo.AsyncResult]) -> Any:
        """Run an idempotent async operation ``start()`` with retries, bounded by the deadline."""
        try:
            return retry.call(lambda: self._result(start()), deadline=self.deadline, policy=self.policy)
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
                raise DeadlinePassed()
            while not wake.wait(0.5 if self.deadline is None else max(0.0, min(0.5, self.deadline - time.monotonic()))):
                self.check()
            self.check()
        wake.clear()  # the wake-up is used up (a later one sets it again)
        return self._take_deleted()


def client_closed(path: str) -> ClientClosed:
    """The error of an acquire on (or waiting when) a stopped client."""
    return ClientClosed(f"{path}: the KazooClient is stopped (or was never started)")


_OPS: Dict[type, Callable[[Driver, Any], Any]] = {  # the requests with arguments, by type
    CreateAndList: Driver._create_and_list,
    Read: Driver._read,
    ReadAll: Driver._read_all,
    WaitGate: Driver._wait_gate,
    MakeParents: Driver._make_parents,
    Watch: Driver._watch,
    Delete: Driver._delete,
}


def _forget_watch(client: KazooClient, path: str, fn: Callable[..., Any]) -> Callable[[_kazoo.AsyncResult], None]:
    """A callback for a watch request abandoned mid-flight: once it succeeded, drop the watch it set
    (kazoo registers it just after completing the reply: look for it a moment)."""

    def cb(ar: _kazoo.AsyncResult) -> None:
        if isinstance(_kazoo.outcome(ar), BaseException):
            return  # no node, no watch
        for _ in range(100):
            if fn in _kazoo.data_watchers(client, path):
                _kazoo.remove_data_watch(client, path, fn)
                return
            time.sleep(0.001)

    return cb


def delete_if_created(client: KazooClient) -> Callable[[_kazoo.AsyncResult], None]:
    """A callback for a create abandoned mid-flight: if it succeeds after all, delete the node."""

    def cb(ar: _kazoo.AsyncResult) -> None:
        try:
            result = ar.get(block=False)
        except Exception:
            return
        made = result[0] if isinstance(result, tuple) else result
        client.delete_async(made[len(client.chroot):] if client.chroot else made)  # the reply carries the chroot

    return cb


# yields requests to start, is sent their values
ParentRequests = Generator[Callable[[], _kazoo.AsyncResult], Any, None]


def _create_parent(client: KazooClient, path: str, acl: Sequence[ACL], container: bool = True) -> ParentRequests:
    """Create ``path`` as a container node (a persistent one where the server has no containers);
    an existing node is fine. Raises NoNodeError if its own parent is missing."""
    if container and client not in _no_containers:
        try:
            yield lambda: _kazoo.create_container(client, path, acl)
            return
        except NodeExistsError:
            return
        except (NoNodeError, NoAuthError, SessionExpiredError) + retry.TRANSIENT:
            raise
        except KazooException as exc:  # UnimplementedError / BadArguments from servers before 3.5
            log.info("server rejected a container node (%r); using persistent parents", exc)
            _no_containers.add(client)
    try:
        yield lambda: client.create_async(path, b"", list(acl))
    except NodeExistsError:
        pass


def parent_requests(client: KazooClient, path: str, acl: Sequence[ACL], container: bool = True) -> ParentRequests:
    """Create ``path`` and whichever ancestors are missing, as container nodes with ``acl`` (persistent
    ones if not ``container``: kazoo's recipes never make a reaped parent again): deepest
    first, climbing only as far as a NoNode says (a new key under an existing parent costs one create).

    Written as steps so that both drivers run it: it yields each async operation to start and is sent
    its value (or has its error thrown in). Raises LockError if the client's chroot does not exist
    (nothing can be created under it)."""
    missing = [path]
    for _attempt in range(100):  # an ancestor reaped (container) between our creates: climb again
        try:
            yield from _create_parent(client, missing[-1], acl, container)
        except NoNodeError:
            parent = missing[-1].rsplit("/", 1)[0]
            if not parent:
                raise LockError(f"the client's chroot {client.chroot!r} does not exist; create it first") from None
            missing.append(parent)
            continue
        missing.pop()
        if not missing:
            return
    raise LockError(f"could not create {path!r}: its ancestors keep disappearing")


class _SessionGone(Exception):
    """The session that owned a node has ended."""


def delete(
    client: KazooClient,
    path: str,
    session: Optional[int] = None,
    policy: Optional[tenacity.Retrying] = None,
    timeout: float = 30.0,
    gone: Optional[Callable[[], bool]] = None,
) -> bool:
    """Delete our node (idempotent), unless it belongs to a session other than ``session``.

    Returns False if ``session`` turned out to be gone (the node went with it), or if ``gone()`` says so
    while waiting for a connection; else True."""
    deadline = time.monotonic() + timeout
    try:
        retry.call(_delete_once, client, path, session, deadline, gone, deadline=deadline, policy=policy)
    except NoNodeError:
        pass
    except (SessionExpiredError, _SessionGone):
        return False
    except Exception:
        log.exception("could not delete %s; it goes when the session ends", path)
    return True


def _delete_once(
    client: KazooClient, path: str, session: Optional[int], deadline: float, gone: Optional[Callable[[], bool]]
) -> None:
    sid = _kazoo.session_id(client)
    if session is not None and sid is not None and sid != session:
        raise _SessionGone()  # our session is gone, and the node with it: never delete a successor's
    ar = _kazoo.delete_async(client, path)  # queued by kazoo until reconnected; dropped if the session ends
    while True:
        left = deadline - time.monotonic()
        if ar.wait(left if left < 0.2 else 0.2):  # our Result: a negative wait returns at once
            break
        if gone is not None and gone():
            raise _SessionGone()
        if left <= 0.0:
            ar.get(timeout=0)  # kazoo's timeout error
    exc = _kazoo.outcome(ar)
    if isinstance(exc, BaseException):
        raise exc
