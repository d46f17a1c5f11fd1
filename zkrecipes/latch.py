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
from typing import Any, Callable, List, Optional, Sequence

import tenacity
from kazoo.client import KazooClient
from kazoo.security import ACL

from . import formats
from ._signature import NamedInit
from .election import LEADER, ElectionCore, LeaderElection
from .errors import LockError
from .naming import validate_timeout

log = logging.getLogger("zkrecipes.latch")

LatchListener = Callable[[bool], None]
_telling = threading.local()  # ``latch``: the latch whose listeners this thread is calling now


class LatchRun(ElectionCore):
    """What the election a latch runs adds to its front's LeaderElection: a background run (a front's
    ``_background``) whose campaigns are not fresh, so a cancel() after :meth:`_rearm` is never lost."""

    def _rearm(self) -> None:
        """Forget a cancel() that came before the latch started (its later campaigns forget none)."""
        self._cancelled = False


class LatchElection(LatchRun, LeaderElection):
    """The :class:`LeaderElection` a threaded :class:`LeaderLatch` runs (its :attr:`LeaderLatch.election`)."""

    def _background(self) -> None:
        """Lead, step down when the term ends, campaign again; until close() resigns."""
        self._terms(_until_set, (), {}, requeue=True, stop=True, fresh=False)


class LatchCore(NamedInit):
    """A latch's bookkeeping, for both fronts: the election it runs, its phase (latent, started,
    closed), leadership as last told, and its listeners. A front starts the background run, waits, closes."""

    _election_class: Callable[..., LatchRun] = LatchElection

    def __init__(
        self,
        client: KazooClient,
        path: str,
        identifier: Optional[str] = None,
        *,
        host: Optional[str] = None,
        acl: Optional[Sequence[ACL]] = None,
        retry: Optional[tenacity.Retrying] = None,
        tolerate_suspended: bool = False,
        protocol: str = formats.ZKRECIPES,
    ) -> None:
        self.election = self._election_class(
            client, path, identifier, host=host, acl=acl, retry=retry, tolerate_suspended=tolerate_suspended,
            protocol=protocol,
        )
        self._lock = threading.Lock()
        self._listeners: List[LatchListener] = []
        self._leading = False  # as last told to the listeners
        self._started = False
        self._closed = False  # close() was called, or the background run ended
        self._setup()
        self.election.add_listener(self._on_state)

    def _setup(self) -> None:
        """What a front adds to a new latch (what wait() waits on)."""

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
        on the event loop's thread). ``fn(False)`` for a lost or doubtful leadership comes when the
        election's state leaves ``"leader"``: before the server can expire the session and elect another
        candidate (the doubt clock, :doc:`session-loss`). Keep it short."""
        if not callable(fn):
            raise TypeError(f"listener must be callable, got {fn!r}")
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: LatchListener) -> None:
        """Stop calling ``fn``; unknown functions are ignored."""
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def _on_state(self, election: Any, state: str) -> None:
        """The election's listener: leadership is its ``"leader"`` state; tell each change once."""
        leading = state == LEADER
        with self._lock:
            if leading == self._leading:
                return
            self._leading = leading
            listeners = list(self._listeners)
        self._wake()
        _telling.latch = self
        try:
            for fn in listeners:
                try:
                    fn(leading)
                except Exception:
                    log.exception("listener %r of the latch on %s failed", fn, self.path)
        finally:
            _telling.latch = None

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
        """The background run is over (closed, or it failed: nothing campaigns any more)."""
        if error is not None:
            log.error("%s: the LeaderLatch stopped campaigning: %s", self.path, error, exc_info=error)
        with self._lock:
            self._closed = True
        self._wake()

    def _settled(self) -> bool:
        """What wait() waits for: leadership, or nothing left to wait for (latent, closed)."""
        return not self._started or self._closed or self.has_leadership

    def _may_join(self) -> bool:
        """close() may wait for the background run: not from inside this latch's own listeners."""
        return getattr(_telling, "latch", None) is not self

    def _wake(self) -> None:
        """Wake the waiters of wait() (a front's)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        phase = "closed" if self._closed else "started" if self._started else "latent"
        return f"<{type(self).__name__} {self.path!r} {phase} leader={self.has_leadership}>"


class LeaderLatch(LatchCore):
    """Leadership that campaigns by itself on a background thread: Curator's ``LeaderLatch``.

    ``LeaderLatch(zk, "/election/reports", identifier="worker-7")`` takes the keywords of
    :class:`LeaderElection` (``host=``, ``acl=``, ``retry=``, ``tolerate_suspended=``, ``protocol=``;
    ``protocol="curator"`` shares the path with Curator's ``LeaderLatch``). :meth:`start` campaigns on
    one thread of its own; :attr:`has_leadership`, :meth:`wait` and listeners (``fn(True)`` /
    ``fn(False)``) follow leadership; after a loss it campaigns again by itself, at the back of the
    queue. :meth:`close` (or leaving ``with``) resigns: our node deleted, the thread ended. Side effects
    still go through :attr:`election`: ``latch.election.check()`` before each, ``latch.election.token``
    with each write.
    """

    _election_class = LatchElection
    election: LatchElection

    def _setup(self) -> None:
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def start(self) -> None:
        """Start campaigning on a background thread (at most one per latch) and return. Raises LockError
        if the latch was started before or is closed."""
        self._begin()
        self._thread = threading.Thread(target=self._life, name=f"zkrecipes-latch {self.path}", daemon=True)
        self._thread.start()

    def _life(self) -> None:
        error = None
        try:
            self.election._background()
        except Exception as exc:  # a stopped client, a foreign node format: nothing to campaign with
            error = exc
        finally:
            self._ended(error)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until this latch leads; True then. False when ``timeout`` passes, or at once if the latch
        is not started or is closed (also by :meth:`close` meanwhile)."""
        timeout = validate_timeout(timeout)
        with self._cond:
            self._cond.wait_for(self._settled, timeout)
        return self.has_leadership

    def close(self) -> None:
        """Resign and stop: a pending campaign ends, a leader deletes its node (listeners told
        ``False``) and the next candidate takes over; returns once the thread has ended (from inside a
        listener of this latch: at once, and the thread ends by itself). Idempotent; callable from any
        thread, and before :meth:`start`."""
        if self._close():
            self.election.resign()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and self._may_join():
            thread.join()

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
