"""LeaderLatch: a leader election run in the background (Apache Curator's ``LeaderLatch``).

A latch is :meth:`LeaderElection.run <zkrecipes.LeaderElection.run>` with ``requeue=True`` on a thread
of its own (a task in :mod:`zkrecipes.aio`): it campaigns, leads until the term ends (leadership lost, or
:meth:`LeaderLatch.close`), steps down and campaigns again, with a new node at the back of the queue. The
queue, the read-back before leading, the states, the fencing token and the node formats are the
election's; :attr:`LeaderLatch.election` is that election (its ``token``, ``check()``, ``transaction()``,
``contenders()`` and ``leader()`` serve the leader). :class:`LatchCore` is what both fronts share.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, List, Optional

from kazoo.client import KazooClient

from . import _kazoo
from ._engine import Cancelled, DeadlinePassed, Steps, WaitGate
from ._gate import Gate
from ._listeners import Listeners
from ._signature import NamedInit
from .election import LEADER, ElectionCore, LeaderElection
from .errors import ClientClosed, LockError
from .naming import validate_timeout

if TYPE_CHECKING:
    from ._signature import Options, Unpack

log = logging.getLogger("zkrecipes.latch")

LatchListener = Callable[[bool], None]
_telling = threading.local()  # ``latch``: the latch whose listeners this thread is calling now


class LatchRun(ElectionCore):
    """What the election a latch runs adds to its front's LeaderElection: a background run (a front's
    ``_background``) whose campaigns are not fresh, so a cancel() after :meth:`_rearm` is never lost."""

    _queued: Callable[[], None]  # the latch's: told when a campaign is about to wait in the queue
    _run: Callable[..., Any]  # the front's: runs steps on its driver (a result, or an awaitable of it)

    def _waits(self, steps: Steps[bool], deadline: Optional[float]) -> Any:
        """Run one of the latch's waits on this election's front: its driver, bounded by ``deadline``
        (monotonic) and ended by :meth:`cancel` (close() resigns)."""
        return self._run(steps, deadline)

    def _rearm(self) -> None:
        """Forget a cancel() that came before the latch started (its later campaigns forget none)."""
        self._cancelled = False

    def _ahead_hook(self) -> Optional[Callable[[int], None]]:
        """The election's ``on_ahead`` (on_ahead's, the hooks'), and the latch told that its campaign waits."""
        also, queued = super()._ahead_hook(), self._queued

        def told(ahead: int) -> None:
            queued()
            if also is not None:
                also(ahead)

        return told


class LatchElection(LatchRun, LeaderElection):
    """The :class:`LeaderElection` a threaded :class:`LeaderLatch` runs (its :attr:`LeaderLatch.election`)."""

    def _background(self) -> None:
        """Lead, step down when the term ends, campaign again; until close() resigns."""
        self._terms(_until_set, (), {}, requeue=True, stop=True, fresh=False)


class LatchCore(NamedInit):
    """A latch's bookkeeping, for both fronts: the election it runs, its phase (latent, started,
    closed), leadership as last told, its listeners (the core's :class:`~zkrecipes._listeners.Listeners`)
    and its waits (steps the election's front runs on its driver). A front starts the background run and
    closes."""

    _election_class: Callable[..., LatchRun] = LatchElection

    def __init__(
        self, client: KazooClient, path: str, identifier: Optional[str] = None, **options: Unpack[Options]
    ) -> None:
        self.election = self._election_class(client, path, identifier, **options)
        self._lock = threading.Lock()
        self._listeners = Listeners(self._lock, log)
        self._changes = Gate(self.election.path)  # bumped by every change a wait may care about (waited on: WaitGate)
        self._leading = False  # as last told to the listeners
        self._announced = False  # leadership, and every listener has been told so (what wait() waits for)
        self._placed = False  # a campaign led or waited in the queue: past the first step, where start() raises
        self._started = False
        self._closed = False  # close() was called, or the background run ended
        self.error: Optional[BaseException] = None
        """The failure that stopped the background campaign (a stopped client, a foreign node on the path,
        ...), else None. Raised by :meth:`wait` (and by :meth:`start` if the campaign fails at once)."""
        self._setup()
        self.election._queued = self._queued
        self.election.add_listener(self._on_state)

    def _setup(self) -> None:
        """What a front adds to a new latch."""

    @property
    def path(self) -> str:
        """The election's path."""
        return self.election.path

    @property
    def identifier(self) -> Optional[str]:
        """The identifier this latch campaigns with (Curator's participant id)."""
        return self.election.identifier

    @property
    def has_leadership(self) -> bool:
        """True only while this latch leads and leadership is certain: False while latent or closed, while
        campaigning, and whenever leadership is in doubt -- suspended, lost, or not confirmed by ZooKeeper
        since the process stood still -- as :attr:`LeaderElection.is_leader
        <zkrecipes.LeaderElection.is_leader>`."""
        return not self._closed and self.election.is_leader

    def add_listener(self, fn: LatchListener) -> None:
        """Call ``fn(True)`` when this latch becomes leader and ``fn(False)`` when it stops (suspended,
        lost, closed), once per change and in order, never on kazoo's threads (in :mod:`zkrecipes.aio`:
        on the event loop's thread); :meth:`wait` returns True only once every listener was told True.
        ``fn(False)`` for a lost or doubtful leadership comes when the election's state leaves
        ``"leader"``: before the server can expire the session and elect another candidate (the doubt
        clock, :doc:`session-loss`). A failure that stops the campaign (:attr:`error`) is told as
        ``fn(False)`` too, also to a latch that was not leading. Keep it short."""
        self._listeners.add(fn)

    def remove_listener(self, fn: LatchListener) -> None:
        """Stop calling ``fn``; unknown functions are ignored."""
        self._listeners.discard(fn)

    def _on_state(self, election: Any, state: str) -> None:
        """The election's listener: leadership is its ``"leader"`` state; tell each change once."""
        leading = state == LEADER
        with self._lock:
            if leading == self._leading:
                return
            self._leading = leading
            self._announced = False
            self._placed = self._placed or leading
            listeners = list(self._listeners)
        if leading:
            self._wake()  # (start() waits for no listener)
        self._tell(listeners, leading)
        if leading:
            with self._lock:
                self._announced = self._leading  # (unless a listener closed it meanwhile)
        self._wake()

    def _tell(self, listeners: List[LatchListener], leading: bool) -> None:
        _telling.latch = self
        try:
            self._listeners.tell(leading, to=listeners, about=f"the latch on {self.path}")
        finally:
            _telling.latch = None

    def _queued(self) -> None:
        """The campaign is about to wait in the queue (its node made, the queue read): past its first step."""
        if not self._placed:
            with self._lock:
                self._placed = True
            self._wake()

    # -- the phases -----------------------------------------------------------------------------------
    def _begin(self) -> None:
        """start()'s check: a latch starts once; a cancel() before now is forgotten, none after it is."""
        with self._lock:
            if self._closed:
                raise LockError(f"{self.path}: this LeaderLatch is closed; make a new one")
            if self._started:
                raise LockError(f"{self.path}: this LeaderLatch is already started")
            self._started = True
        self.election._rearm()

    def _close(self) -> bool:
        """Mark closed; False if it was already."""
        with self._lock:
            was, self._closed = self._closed, True
        self._wake()
        return not was

    def _ended(self, error: Optional[BaseException]) -> None:
        """The background run is over: closed, or it failed (nothing campaigns any more). A failure is kept
        (:attr:`error`), logged, and told to the listeners as False; a close() before it hides it."""
        with self._lock:
            if self._closed:
                error = None  # closed on purpose: what failed after it is nobody's concern
            self.error = error
            self._closed = True
            listeners = []
            at_once = not self._placed  # start() raises it
            if error is not None:
                self._leading = self._announced = False
                listeners = list(self._listeners)
        if error is not None:
            if at_once or isinstance(error, ClientClosed) and _kazoo.is_stopped(self.election.client):
                log.info("%s: the LeaderLatch stopped campaigning: %s", self.path, error)
            elif isinstance(error, LockError):
                log.warning("%s: the LeaderLatch stopped campaigning: %s", self.path, error)
            else:
                log.error("%s: the LeaderLatch stopped campaigning: %s", self.path, error, exc_info=error)
            self._tell(listeners, False)
        self._wake()

    def _begun(self) -> bool:
        """What start() waits for: the first campaign leads or waits in the queue, or the run is over."""
        return self._placed or self._closed

    def _settled(self) -> bool:
        """What wait() waits for: leadership told to every listener, or nothing left to wait for (latent,
        closed, failed)."""
        return not self._started or self._closed or (self._announced and self.has_leadership)

    def _outcome(self) -> bool:
        """wait()'s result once settled (or timed out): :attr:`error` raised, else leadership."""
        error = self.error
        if error is not None:
            raise error
        return self._announced and self.has_leadership

    def _may_join(self) -> bool:
        """close() may wait for the background run: not from inside this latch's own listeners."""
        return getattr(_telling, "latch", None) is not self

    def _wake(self) -> None:
        """Wake the waits (start()'s, wait()'s) to look again."""
        self._changes.wake_all()

    def _run_until(self, settled: Callable[[], bool], timeout: Optional[float]) -> Any:
        """:meth:`_until` run by the election's front for up to ``timeout`` seconds: its result (threads),
        an awaitable of it (asyncio)."""
        return self.election._waits(self._until(settled), None if timeout is None else time.monotonic() + timeout)

    def _until(self, settled: Callable[[], bool]) -> Steps[bool]:
        """Wait until ``settled()``, looking again at each change: steps for the election's front to run on
        its driver, bounded by the run's deadline (True if settled; False at the deadline or a cancel of
        the election). A stopped client raises ClientClosed: the background run ends with it moments later."""
        gate = self._changes
        try:
            while True:
                with gate.mutex:  # (a change after this look bumps the version: never missed)
                    if settled():
                        return True
                    version = gate.version
                yield WaitGate(gate, version)
        except (DeadlinePassed, Cancelled):
            return False

    def __repr__(self) -> str:
        phase = "closed" if self._closed else "started" if self._started else "latent"
        return f"<{type(self).__name__} {self.path!r} {phase} leader={self.has_leadership}>"


class LeaderLatch(LatchCore):
    """Leadership that campaigns by itself on a background thread: Curator's ``LeaderLatch``.

    ``LeaderLatch(zk, "/election/reports", identifier="worker-7")`` takes the keywords of
    :class:`LeaderElection` (``host=``, ``acl=``, ``retry=``, ``tolerate_suspended=``, ``protocol=``;
    ``protocol="curator"`` shares the path with Curator's ``LeaderLatch``). :meth:`start` campaigns on
    one thread of its own (and raises what an acquire would raise at once); :attr:`has_leadership`,
    :meth:`wait` and listeners (``fn(True)`` / ``fn(False)``) follow leadership; after a loss it
    campaigns again by itself, at the back of the queue. A failure that stops the campaign later is
    kept in :attr:`error`, raised by :meth:`wait` and told to the listeners as ``fn(False)``.
    :meth:`close` (or leaving ``with``) resigns: our node deleted, the thread ended. Side effects still
    go through :attr:`election`: ``latch.election.check()`` before each, ``latch.election.token`` with
    each write.
    """

    _election_class = LatchElection
    election: LatchElection

    def _setup(self) -> None:
        self._thread: Optional[threading.Thread] = None

    def _wait(self, settled: Callable[[], bool], timeout: Optional[float]) -> None:
        """Wait on this thread (its driver) until ``settled()`` or ``timeout``; with a stopped client, until
        the background run has ended with it."""
        try:
            self._run_until(settled, timeout)
        except ClientClosed:
            self._join(timeout)

    def _join(self, timeout: Optional[float] = None) -> None:
        """Wait (up to ``timeout``) for the background thread to end, unless called from it."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def start(self) -> None:
        """Start campaigning on a background thread (at most one per latch); return once the campaign
        leads or waits in the queue (one round trip; without a connection, it waits for one as an
        acquire does).

        Raises what :meth:`FairLock.acquire <zkrecipes.FairLock.acquire>` raises at once, the latch then
        closed and its thread ended: :class:`~zkrecipes.ClientClosed` if the client is stopped or was
        never started, LockError for a node on the path that this node format cannot queue with (another
        library's, or zkrecipes' in another ``protocol=``; our node is deleted). Raises LockError if the
        latch was started before or is closed. A later failure is kept in :attr:`error`."""
        self._begin()
        self._thread = threading.Thread(target=self._life, name=f"zkrecipes-latch {self.path}", daemon=True)
        self._thread.start()
        try:
            self._wait(self._begun, None)
        except BaseException:  # Ctrl-C: nothing left campaigning
            self.close()
            raise
        if self.error is not None:
            self.close()  # (the thread has ended, or is about to)
            raise self.error

    def _life(self) -> None:
        error = None
        try:
            self.election._background()
        except Exception as exc:  # a stopped client, a foreign node format: nothing to campaign with
            error = exc
        finally:
            self._ended(error)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until this latch leads and every listener was told so; True then. False when ``timeout``
        passes, or at once if the latch is not started or is closed (also by :meth:`close` meanwhile).
        Raises :attr:`error` if the background campaign failed (a stopped client: ClientClosed)."""
        self._wait(self._settled, validate_timeout(timeout))
        return self._outcome()

    def close(self) -> None:
        """Resign and stop: a pending campaign ends, a leader deletes its node (listeners told
        ``False``) and the next candidate takes over; returns once the thread has ended (from inside a
        listener of this latch: at once, and the thread ends by itself). Idempotent; callable from any
        thread, and before :meth:`start`."""
        if self._close():
            self.election.resign()
        if self._may_join():
            self._join()

    def __enter__(self) -> "LeaderLatch":
        """``with LeaderLatch(zk, path) as latch:`` starts it (unless started) and closes it on exit."""
        if not self._started:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _until_set(stop: threading.Event) -> None:
    """A latch's leader's work: hold leadership until the term ends (lost, or the latch closed)."""
    stop.wait()
