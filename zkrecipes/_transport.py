"""What both drivers do with each engine step, written once: the kazoo requests to send, what to wait
for, and what one run knows of its watches and its session.

A handler is a generator: it sends kazoo requests and *yields waits* -- :class:`Reply` (a request's
reply), :class:`Nap` (a backoff, a pause), :class:`Woken` (a watch or session event), :class:`Aside` (a
run of its own), or the engine's :class:`~zkrecipes._engine.WaitGate` -- which its driver performs:
:mod:`zkrecipes._drive` on the calling thread, :mod:`zkrecipes.aio._driver` on an event loop, both
through the one loop :meth:`Transport.drive`. Waits are bounded by the run's deadline and cancel (thrown
in as DeadlinePassed / Cancelled), except a cleanup's.

A composition (a MultiLock, a break with grace) is steps too: it yields :class:`Part`, a run of other
steps on a lock's own front or under a shorter deadline, and is sent their value.
"""

from __future__ import annotations

import logging
import time
import types
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, List, NamedTuple, Optional, Set, Tuple

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from . import _engine as e
from . import _kazoo, _kazoo_ops, retry
from .errors import ClientClosed
from .session import SessionWatcher

log = logging.getLogger("zkrecipes.transport")


class Reply(NamedTuple):
    """Wait until kazoo's async result ``ar`` is ready; past ``until`` (monotonic), TimeoutError. A
    ``cleanup`` wait ignores the run's deadline and cancel, and raises SessionGone once ``gone()`` does."""

    ar: Any
    until: Optional[float] = None
    cleanup: bool = False
    gone: Optional[Callable[[], bool]] = None


class Nap(NamedTuple):
    """Wait ``seconds`` (a cleanup's wait ignores the run's deadline and cancel); with ``wakes``, a
    wake-up (watch, session event) ends it early."""

    seconds: float
    wakes: bool = False
    cleanup: bool = False


class Woken(NamedTuple):
    """Use up the pending wake-up; with ``wait``, wait for one first (a non-blocking run raises
    DeadlinePassed instead)."""

    wait: bool


class Part(NamedTuple):
    """An engine step: run ``steps`` as a run of their own -- by ``run(steps, deadline, nowait)`` (a lock's
    own runner: its front's driver, its cancel) or, if None, by a driver of their own for ``on``'s client
    (a lock's; None: this run's) -- bounded by this run's deadline, or ``within`` seconds from now if that
    comes first; DeadlinePassed, with nothing of them run, once the deadline has passed. A ``cleanup`` part
    (an undo) has no deadline and no cancel. Answer: the steps' value; their error is thrown in. How a
    composition takes its parts: a MultiLock its locks, a break its wait for the holder to let go."""

    steps: Any  # Steps[T]
    run: Optional[Callable[..., Any]] = None
    on: Any = None
    within: Optional[float] = None
    cleanup: bool = False


class Aside(NamedTuple):
    """Run ``steps`` by ``run(steps, deadline, nowait)``, or, if None, by a driver of their own for
    ``client`` (cancelled as this run is, unless ``cleanup``); answer their value."""

    steps: Any
    run: Optional[Callable[..., Any]]
    client: KazooClient
    policy: Optional[tenacity.Retrying]
    path: str
    deadline: Optional[float]
    nowait: bool
    cleanup: bool


Handler = Generator[Any, Any, Any]  # yields waits, is sent their answer (or has the wait's error thrown in)


def client_closed(path: str) -> ClientClosed:
    """The error of a run on (or waiting when) a stopped client."""
    return ClientClosed(f"{path}: the KazooClient is stopped (or was never started)")


class Transport:
    """The requests and bookkeeping of one run (one acquire, release or check), for both drivers. A
    driver supplies :meth:`check`, ``_on_watch`` (kazoo's I/O thread) and ``_on_session`` (the
    session thread), and performs the waits its handlers yield."""

    __slots__ = ("client", "path", "deadline", "policy", "nowait", "_deleted", "_deleted_at", "_since",
                 "_watched", "_session", "_relist", "_listing", "_ready")
    _relist: Dict[str, str]  # watched path -> the parent listed once it goes (Watch.listing)
    _listing: Optional[Tuple[str, Any, str]]  # (parent, that listing, the deleted path), sent as it was heard
    _ready: Optional[Tuple[str, Any, str]]  # the one the next read may take (set by SLEEP)

    def __init__(
        self, client: KazooClient, deadline: Optional[float], policy: Optional[tenacity.Retrying], nowait: bool,
        path: str,
    ) -> None:
        self.client = client
        self.path = path  # named by the error a stopped client raises
        self.deadline = deadline
        self.policy = policy
        self.nowait = nowait  # a non-blocking attempt: a wait for a wake-up ends it
        self._session: Optional[SessionWatcher] = None  # subscribed only once the run has to wait

    def check(self) -> None:
        """Raise Cancelled, DeadlinePassed or ClientClosed if the run must stop."""
        raise NotImplementedError

    def _on_watch(self, event: WatchedEvent) -> None:
        raise NotImplementedError

    def _on_session(self, event: str) -> None:
        raise NotImplementedError

    _wait: Callable[[Any], Any]  # a driver's: perform one wait (a generator, or a coroutine on asyncio)

    def drive(self, steps: e.Steps[e.T], op: Any = None) -> Generator[Any, Any, e.T]:
        """The one loop both drivers run ``steps`` with: each step's handler in turn, each wait it yields
        performed by the driver's ``_wait`` and answered; a wait's error (deadline, cancel, Ctrl-C, a task's
        CancelledError) is thrown into the handler, then the steps, which clean up. Returns the steps' value.
        ``op``: the step they already yielded, if they were started before the run. On the calling thread it
        never yields; on asyncio it is awaited (it yields what the loop waits on)."""
        send: Any = None
        error: Optional[BaseException] = None
        try:
            while True:
                if op is None:
                    try:
                        op = steps.throw(error) if error is not None else steps.send(send)
                    except StopIteration as stop:
                        return stop.value  # type: ignore[no-any-return]
                try:
                    name = _HANDLERS.get(type(op)) or _CONSTANT_HANDLERS.get(op)
                    if name is None:
                        send, error = self.answer_now(op), None
                    else:
                        handler, answer, failed = getattr(self, name)(op), None, None
                        while True:
                            try:
                                wait = handler.throw(failed) if failed is not None else handler.send(answer)
                            except StopIteration as stop:
                                send, error = stop.value, None
                                break
                            try:
                                answer, failed = (yield from self._wait(wait)), None
                            except BaseException as exc:  # the handler cleans up first (a create in flight)
                                answer, failed = None, exc
                except GeneratorExit:  # closed: nothing more may be asked
                    raise
                except BaseException as exc:  # deadline, cancel, Ctrl-C too: the steps clean up
                    send, error = None, exc
                op = None
        finally:
            if self._session is not None:  # the run watched: drop its watches and session subscription
                self.close()

    if not TYPE_CHECKING:  # a generator asyncio may await, and that may await a coroutine (AioDriver._wait)
        drive = types.coroutine(drive)

    def answer_now(self, op: Any) -> Any:
        """The answer to an engine step that needs no request and no wait."""
        if op is e.SESSION:
            return _kazoo.session_id(self.client)
        if op is e.NOW:
            return time.monotonic()
        if op is e.STALE:
            return self._stale()
        if op is e.UNWATCH:
            self.unwatch()
            return None
        raise TypeError(f"unknown engine step {op!r}")

    # -- the handlers --------------------------------------------------------------------------------
    def _create_and_list(self, op: e.CreateAndList) -> Handler:
        self.check()
        sent: List[Any] = []  # filled before the create is queued: a Ctrl-C while sending still finds it
        try:
            create, listing = _kazoo.create_and_list(
                self.client, op.path, op.data, op.acl, op.flags, op.parent, sent
            )
            yield Reply(create if listing is None else listing)  # replies come in order: the listing is last
            if not create.ready():
                yield Reply(create)
        except BaseException:  # deadline, cancel, Ctrl-C with the create in flight: our node must go too
            if not sent:
                raise  # nothing was queued
            create = sent[0]
            made = _kazoo.outcome(create) if create.ready() else None
            if made is None:
                create.rawlink(_kazoo_ops.delete_if_created(self.client))  # deleted when its reply comes
            elif not isinstance(made, BaseException):
                path, chroot = made[0], self.client.chroot
                yield from self._delete(e.Delete(path[len(chroot):] if chroot else path, made[1].ephemeralOwner))
            raise
        listed = None if listing is None else _kazoo.outcome(listing)
        return _kazoo.outcome(create), listed, _kazoo.session_id(self.client)

    def _read(self, op: e.Read) -> Handler:
        return self._reading(op, None)

    def _read_watching(self, op: e.Watched) -> Handler:
        return self._reading(op, op.watch)

    def _reading(self, op: "e.Read | e.Watched", watch: Optional[Callable[[Any], None]]) -> Handler:
        if self._session is not None and watch is None:  # the run watched: the listing sent as a deletion was heard?
            ready, self._ready = self._ready, None
            if ready is not None and ready[0] == op.path and op.kind == "get_children" and not (op.once or op.synced):
                yield Reply(ready[1])
                try:
                    return ready[1].get(block=False)
                except retry.TRANSIENT:
                    pass  # ask again, retried as any read
        read = getattr(self.client, op.kind + "_async")
        synced: List[Any] = []

        def start() -> Any:
            if op.synced:  # answered before the read, in order: the read sees all committed before the sync
                synced[:] = [self.client.sync_async(op.path.rsplit("/", 1)[0] or "/")]
            return read(op.path) if watch is None else read(op.path, watch=watch)

        if not op.once:
            return (yield from self._call(start))
        until = time.monotonic() + _kazoo.session_timeout(self.client)  # (the run's deadline is the driver's)
        ar = start()
        for done in synced:  # kazoo completes a sync's result on its callback thread: maybe after the read's
            yield Reply(done, until)
            done.get(block=False)  # a failed sync (the session expired) says more than the read after it
        yield Reply(ar, until)
        return ar.get(block=False)

    def _read_all(self, op: e.ReadAll) -> Handler:
        pending = [self.client.get_async(path) for path in op.paths]  # pipelined
        for ar in pending:
            yield Reply(ar)
        return [_kazoo.outcome(ar) for ar in pending]

    def _create_parent(self, op: e.CreateParent) -> Handler:
        return (yield from self._call(lambda: _kazoo.create_parent(self.client, op.path, op.acl, op.container)))

    def _watch(self, op: e.Watch) -> Handler:
        """Set a data watch (our only one unless ``op.keep``); a ``get`` rather than ``exists``: on a
        missing node it leaves no watch behind to remove."""
        self._subscribe()
        if not op.keep:
            self.unwatch()
            yield Woken(False)  # an older wake-up is used up (not with keep: a watch set just before may have fired)
        self._deleted.discard(op.path)  # a path made again (ExclusiveLock's node) is watched afresh: before we
        # ask, as kazoo's I/O thread may tell us of this watch's deletion before we take in the reply
        self._listing = self._ready = None
        if op.listing is not None:
            self._relist[op.path] = op.listing
        sent: List[Any] = []

        def start() -> Any:
            sent.append(self.client.get_async(op.path, watch=self._on_watch))
            return sent[-1]

        try:
            _, stat = yield from self._call(start)
        except NoNodeError:
            return None
        except BaseException:  # abandoned in flight: once its reply comes, drop the watch it set
            if sent:
                sent[-1].rawlink(_kazoo_ops.forget_watch(self.client, op.path, self._on_watch))
                yield Reply(sent[-1], time.monotonic() + _kazoo.session_timeout(self.client), cleanup=True)
            raise
        self._watched.add(op.path)
        return stat

    def _delete(self, op: e.Delete) -> Handler:
        """Delete our node (idempotent) unless its session is gone; never bounded by the run's deadline
        or cancel (it cleans up), at most 30 s."""

        tries = 0

        def start() -> Any:
            nonlocal tries
            sid = _kazoo.session_id(self.client)
            if op.session is not None and sid is not None and sid != op.session:
                raise e.SessionGone()  # our session is gone, and the node with it: never delete a successor's
            tries += 1
            return _kazoo.delete_async(self.client, op.path)  # queued by kazoo until reconnected

        try:
            yield from self._call(start, time.monotonic() + 30.0, cleanup=True, gone=op.gone)
        except Exception as exc:
            return e.delete_answer(op.path, exc, tries)
        return True

    def _delete_old(self, op: e.DeleteOld) -> Handler:
        """Read the node, then delete it if it is still ``op.token`` of ``op.session`` while the client is in
        another session (a cleanup: at most 30 s each, never bounded by the run's deadline or cancel)."""
        until = time.monotonic() + 30.0
        try:
            stat = yield from self._call(lambda: self.client.exists_async(op.path), until, cleanup=True)
            sid = _kazoo.session_id(self.client)
            if stat is None or not e.owns(stat, op.session) or stat.czxid != op.token or sid in (None, op.session):
                return False
            yield from self._call(lambda: _kazoo.delete_async(self.client, op.path), until, cleanup=True)
        except NoNodeError:
            return False
        except Exception as exc:  # the server still ends that session in time
            log.info("could not delete %s of our earlier session: %r", op.path, exc)
            return False
        log.info("deleted %s: its session 0x%x was ours before this one", op.path, op.session)
        return True


    def _write(self, op: e.Write) -> Handler:
        return (yield from self._call(lambda: self.client.set_async(op.path, op.data, op.version)))

    def _delete_version(self, op: e.DeleteVersion) -> Handler:
        return (yield from self._call(lambda: self.client.delete_async(op.path, op.version)))

    def _commit(self, op: e.Commit) -> Handler:
        self.check()
        sent = op.send()
        yield Reply(sent, cleanup=True)  # (an asyncio task's cancel still ends it: the outcome is then unknown)
        return op.read(sent)

    def _sleep(self, op: Any) -> Handler:
        """SLEEP: the watched paths deleted (at once if some already are), else after a wake-up."""
        yield Woken(not bool(self._watched & self._deleted))
        gone = frozenset(self._watched & self._deleted)  # a fired watch is gone from the server and kazoo
        listing, self._listing = self._listing, None
        self._ready = listing if listing is not None and listing[2] in gone else None  # sent after this news
        self._watched -= gone
        return gone

    def _pause(self, op: Any) -> Handler:
        yield Nap(0.05, wakes=True)

    def _wait_gate(self, op: e.WaitGate) -> Handler:
        yield op

    def _part(self, op: Part) -> Handler:
        """A part: its steps run aside (see :class:`Part`), bounded here; answer their value."""
        deadline, nowait = None, False
        if not op.cleanup:
            deadline, nowait = self.deadline, self.nowait
            if deadline is not None and time.monotonic() >= deadline:
                raise e.DeadlinePassed()  # before this part's turn: nothing of it is asked
            if op.within is not None:
                deadline = min(time.monotonic() + op.within, deadline or float("inf"))
        on = self if op.on is None else op.on
        policy = self.policy if op.on is None else op.on.retry
        return (yield Aside(op.steps, op.run, on.client, policy, on.path, deadline, nowait, op.cleanup))

    def _call(
        self, start: Callable[[], Any], until: Optional[float] = None, cleanup: bool = False,
        gone: Optional[Callable[[], bool]] = None,
    ) -> Handler:
        """An idempotent request ``start()``, retried on transient errors (the run's policy) until ``until``
        (default: the run's deadline, which the driver applies to each wait as DeadlinePassed)."""
        attempts = None
        while True:
            try:
                ar = start()
                yield Reply(ar, until, cleanup, gone)
                return ar.get(block=False)
            except retry.TRANSIENT as exc:
                attempts = attempts or retry.Attempts(self.policy, self.deadline if until is None else until)
                wait = attempts.next_wait(exc)
                if wait is None:
                    if not cleanup:
                        self.check()  # a deadline or cancel says more than the last transient error
                    raise
            yield Nap(wait, cleanup=cleanup)

    # -- watches and session ------------------------------------------------------------------------
    def _subscribe(self) -> None:
        """Before the first watch: session events wake a sleeping waiter, and watches are recorded (an
        uncontended acquire never gets here)."""
        if self._session is None:
            self._deleted: Set[str] = set()
            self._deleted_at: Optional[float] = None
            self._watched: Set[str] = set()  # paths our data watches are on
            self._relist = {}
            self._listing = self._ready = None
            self._since = time.monotonic()
            self._session = SessionWatcher.of(self.client)
            self._session.subscribe(self._on_session)

    def _watch_fired(self, event: WatchedEvent) -> None:
        if event.type == EventType.DELETED:
            self._deleted.add(event.path)  # kazoo hands watchers the path without the chroot
            self._deleted_at = time.monotonic()

    def _prefetch(self, event: WatchedEvent) -> Any:
        """A driver's watch function (kazoo's I/O thread): a watched node whose deletion the steps follow
        with a listing is gone: send that listing now, a thread or task wake-up earlier. Its result, or
        None: the driver wakes the run once it is in (it fails too if the connection drops)."""
        if event.type == EventType.DELETED:
            parent = self._relist.get(event.path)
            if parent is not None:
                listing = _kazoo.list_children(self.client, parent)
                self._listing = (parent, listing, event.path)
                return listing
        return None

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
            _kazoo_ops.remove_data_watch(self.client, path, self._on_watch)
        self._watched.clear()
        self._relist.clear()

    def close(self) -> None:
        """Drop our watches and the session subscription (the run is over)."""
        if self._session is not None:
            self.unwatch()
            self._session.unsubscribe(self._on_session)
            self._session = None


_HANDLERS: Dict[Any, str] = {  # the handler's name, by the step's type
    e.CreateAndList: "_create_and_list",
    e.Read: "_read",
    e.Watched: "_read_watching",
    e.ReadAll: "_read_all",
    e.CreateParent: "_create_parent",
    e.Watch: "_watch",
    e.Delete: "_delete",
    e.DeleteOld: "_delete_old",
    e.WaitGate: "_wait_gate",
    e.Write: "_write",
    e.DeleteVersion: "_delete_version",
    e.Commit: "_commit",
    Part: "_part",
}
_CONSTANT_HANDLERS: Dict[Any, str] = {e.SLEEP: "_sleep", e.PAUSE: "_pause"}  # argument-less steps
