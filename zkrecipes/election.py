"""LeaderElection: candidates queue on the same engine as FairLock; the head of the queue leads.

Each candidate watches only its predecessor, so a change of leader wakes one process, not all of them.
Before it reports leadership a candidate reads its node back and checks that it still belongs to its
current session (a node of an expired session is never mistaken for ours; cf. CURATOR-696).

The pattern for a leader's side effects: call :meth:`LeaderElection.check` before each one (it raises
:class:`~zkrecipes.LockLost` once leadership is lost or uncertain) and pass :attr:`LeaderElection.token`
to the system you write to, which rejects tokens lower than the highest it has seen.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable, List, Literal, Optional, TypeVar

from kazoo.exceptions import NoNodeError, SessionExpiredError

from . import _drive, _engine, naming, retry
from ._drive import Driver
from ._engine import Cancelled, DeadlinePassed, Entry, Steps
from ._lock import predecessor
from ._participant import Participant
from .errors import LockCancelled, LockError, LockLost
from .naming import Contender
from .session import HELD, LOST, Hold

log = logging.getLogger("zkrecipes.election")

ElectionState = Literal["idle", "candidate", "leader", "suspended", "lost"]
IDLE: ElectionState = "idle"
CANDIDATE: ElectionState = "candidate"
LEADER: ElectionState = "leader"
R = TypeVar("R")

class TermView:
    """``state``, ``is_leader``, ``token`` and ``node`` of an election object, read from its current
    term's hold: the same for :class:`LeaderElection` and :mod:`zkrecipes.aio`'s."""

    _hold: Optional[Hold]
    _state: str

    @property
    def state(self) -> ElectionState:
        """``"idle"``, ``"candidate"``, ``"leader"``, ``"suspended"`` or ``"lost"``."""
        return self._state  # type: ignore[return-value]

    @property
    def is_leader(self) -> bool:
        """True only while leadership is certain (see :attr:`Lock.is_held <zkrecipes.FairLock.is_held>`)."""
        hold = self._hold
        return hold is not None and hold.state == HELD and not hold.stale()

    @property
    def token(self) -> Optional[int]:
        """Fencing token of this term (the czxid of our node) while leader or suspended, else None."""
        hold = self._hold
        return hold.token if hold is not None and hold.state != LOST else None

    @property
    def node(self) -> Optional[str]:
        """Full path of our node from election until resign (kept while suspended or lost), else None."""
        hold = self._hold
        return hold.node if hold is not None else None


class LeaderElection(TermView, Participant):
    """Leader election among the candidates of ``path``; at most one leader at a time.

    ``LeaderElection(zk, "/election/reports", identifier="worker-7")`` -- also ``host=``, ``acl=``,
    ``retry=``, ``tolerate_suspended=`` and ``protocol=`` as for :class:`~zkrecipes.FairLock`
    (``"kazoo"``: kazoo's ``Election``; ``"curator"``: Curator's ``LeaderLatch``).

    States (told to listeners as ``fn(election, state)``, never on kazoo's threads): ``"idle"``,
    ``"candidate"``, ``"leader"``, ``"suspended"`` (connection dropped; leadership uncertain),
    ``"lost"`` (session expired or suspended past the session timeout: another candidate may lead now).
    Unlike a lock, :meth:`resign` and :meth:`cancel` may be called from any thread.
    """

    _recipe = "election"

    def _setup(self) -> None:
        self._lock = threading.Lock()
        self._hold: Optional[Hold] = None
        self._driver: Optional[Driver] = None
        self._cancel = threading.Event()
        self._notify = threading.RLock()

    # -- campaigning -------------------------------------------------------------------------------
    def _steps(self) -> Steps[Entry]:
        """A candidate's queue: the predecessor rule, our node read back before we lead."""
        prefix, data, guid = self._format.node(self.host, naming.WRITE, self.identifier)
        return _engine.acquire(
            self.path, self._acl, prefix, data, guid, predecessor, confirm=True, fmt=self._format
        )

    def campaign(self, timeout: Optional[float] = None) -> bool:
        """Become a candidate and wait until leader; True once leader (at once if already leader).

        Returns False when ``timeout`` passes or :meth:`cancel`/:meth:`resign` is called meanwhile -- even
        one that comes as ZooKeeper grants leadership; our node is then deleted. Raises LockError if
        another thread is already campaigning.
        """
        return self._campaign(naming.validate_timeout(timeout), fresh=True)

    def _campaign(self, timeout: Optional[float], fresh: bool) -> bool:
        # fresh: forget an earlier cancel(); run() passes False when it campaigns again after a term, so
        # a cancel() that came after it last looked is not lost.
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if self._hold is not None and self._hold.state != LOST:
                return True
            if self._driver is not None:
                raise LockError(f"{self.path}: another thread is already campaigning with this election")
            self._drop_hold()
            if fresh:
                self._cancel.clear()
            self.lost.clear()
            driver = self._driver = Driver(self.client, deadline, self._cancel, self.retry, path=self.path)
        self._set_state(CANDIDATE)
        entry = hold = withdrawn = None
        try:
            entry = driver.run(self._steps())
        except (DeadlinePassed, Cancelled):
            pass
        finally:
            with self._lock:
                self._driver = None
                if entry is not None and self._cancel.is_set():
                    withdrawn = entry  # cancel()/resign() came as we were granted: they win
                elif entry is not None:
                    hold = self._hold = self._make_hold(entry)
                    hold.add_listener(functools.partial(self._on_hold, hold))
            if withdrawn is not None:
                _drive.delete(self.client, withdrawn.path, withdrawn.session, self.retry)
            if hold is None:
                self._set_state(IDLE)
        if hold is None:
            return False
        log.info("%s: leader as %s (token %d)", self.path, hold.node, hold.token)
        self._on_hold(hold)
        return True

    def resign(self) -> None:
        """Leave the queue: a pending :meth:`campaign` returns False; a leader deletes its node and the
        next candidate in line takes over. Idempotent; callable from any thread."""
        self.cancel()
        with self._lock:
            hold = self._drop_hold()
        self._end_term(hold)

    def __enter__(self) -> "LeaderElection":
        """``with election:`` campaigns without a timeout and resigns on exit (as ``async with`` does in
        :mod:`zkrecipes.aio`). Raises LockCancelled if :meth:`cancel` stopped the campaign."""
        if not self.campaign():
            raise LockCancelled(f"campaign for {self.path} was cancelled")
        return self

    def __exit__(self, *exc: object) -> None:
        self.resign()

    def cancel(self) -> None:
        """Stop a pending :meth:`campaign` (it returns False); leadership already held is kept."""
        self._cancel.set()
        driver = self._driver
        if driver is not None:
            driver.interrupt()

    def _drop_hold(self) -> Optional[Hold]:
        """Forget the current term, deleting its node; a session found gone meanwhile marks it lost
        (reported by :meth:`_end_term`, as this hold's own listener is now silent)."""
        hold, self._hold = self._hold, None
        if hold is not None:
            self._delete_held(hold)
        return hold

    def _end_term(self, hold: Optional[Hold]) -> None:
        if hold is None:
            return
        if hold.state == LOST and not self.lost.is_set():  # learned only while resigning: still told
            self.lost.set()
            self._set_state(LOST)
        self._set_state(IDLE)

    def run(self, func: Callable[..., R], *args: Any, requeue: bool = False, **kwargs: Any) -> Optional[R]:
        """Campaign, call ``func(*args, **kwargs)`` as leader, resign when it returns or raises.

        Returns what ``func`` returned. With ``requeue=True`` campaign again after each term (a worker
        pool keeps a leader) until :meth:`cancel` or :meth:`resign` is called from another thread; returns
        None then (after the current term, if one is running). If ``func`` raises, resign and re-raise.
        ``func`` learns of a lost leadership only by asking: :meth:`check` or :attr:`lost`.
        """
        if not callable(func):
            raise TypeError(f"func must be callable, got {func!r}")
        if not isinstance(requeue, bool):
            raise TypeError(f"requeue must be a bool, got {requeue!r}")
        fresh = True
        while True:
            if not self._campaign(None, fresh):
                return None
            fresh = False
            try:
                result = func(*args, **kwargs)
            finally:
                with self._lock:
                    hold = self._drop_hold()
                self._end_term(hold)
            if not requeue:
                return result
            if self._cancel.is_set():
                return None

    # -- hold state --------------------------------------------------------------------------------
    def _on_hold(self, hold: Hold, _state: Optional[str] = None) -> None:
        # Report the hold's state as it is now, not as it was when this call was scheduled: the campaign
        # thread and the session dispatcher both call this, and the later call must not report an older
        # state. A hold already dropped (resigned, or replaced by a new term) reports nothing.
        with self._notify:
            if self._hold is not hold:
                return
            state = hold.state
            if state == LOST:
                self.lost.set()
            self._set_state(LEADER if state == HELD else state)

    def _set_state(self, state: str) -> None:
        with self._notify:  # one state change told at a time, in order (reentrant: listeners may resign)
            super()._set_state(state)

    def check(self) -> None:
        """Return if leadership is certain; raise LockLost if lost, uncertain (suspended, unless
        ``tolerate_suspended``) or not held. After the process stood still it first asks ZooKeeper,
        as :meth:`FairLock.check <zkrecipes.FairLock.check>` does."""
        hold = self._hold
        if hold is None:
            raise LockLost(f"{self.path}: not the leader")
        self._check_hold(hold, "leadership")

    def _fence_hold(self) -> Hold:
        hold = self._hold
        if hold is None:
            raise LockLost(f"{self.path}: not the leader")
        return hold

    # -- observing ---------------------------------------------------------------------------------
    def contenders(self) -> List[Contender]:
        """Candidates in queue order (the first is the leader); ``[]`` if nobody campaigns. Connection
        errors are raised, not hidden."""
        return _drive.contenders(self.client, self.path)

    def leader(self) -> Optional[Contender]:
        """Who leads now (readable by anyone, candidate or not), or None."""
        c = self.contenders()
        return c[0] if c else None

    def watch_leader(self, fn: Callable[[Optional[Contender]], None]) -> "LeaderWatch":
        """Call ``fn(leader_or_None)`` now and whenever the leader changes, from a thread of its own,
        until the returned :class:`LeaderWatch` is stopped. For observers that are not candidates."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        return LeaderWatch(self, fn)

    def __repr__(self) -> str:
        return f"<LeaderElection {self.path!r} state={self._state}>"


class LeaderWatch:
    """Follows the leader of an election on a background thread; :meth:`stop` ends it.

    Made by :meth:`LeaderElection.watch_leader`, which documents the callback.
    """

    def __init__(self, election: LeaderElection, fn: Callable[[Optional[Contender]], None]) -> None:
        self._election = election
        self._fn = fn
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zkrecipes-leader-watch", daemon=True)
        self._thread.start()

    def _on_watch(self, event: Any) -> None:
        self._changed.set()

    def _run(self) -> None:
        client, path = self._election.client, self._election.path
        last: Any = object()
        while not self._stop.is_set():
            self._changed.clear()
            try:
                try:
                    children = client.get_children(path, watch=self._on_watch)
                except NoNodeError:
                    if client.exists(path, watch=self._on_watch) is not None:
                        continue
                    children = []
                leader = self._election.leader() if children else None
            except retry.TRANSIENT + (SessionExpiredError, LockError):  # reconnecting: set the watch again
                self._stop.wait(0.2)
                continue
            except Exception:
                log.exception("leader watch on %s failed; retrying", path)
                self._stop.wait(0.5)
                continue
            key = leader.node if leader else None
            if key != last and not self._stop.is_set():
                last = key
                try:
                    self._fn(leader)
                except Exception:
                    log.exception("leader watch callback %r failed", self._fn)
            while not self._changed.wait(0.5):
                if self._stop.is_set():
                    return

    def stop(self, timeout: float = 5.0) -> None:
        """Stop following and wait (up to ``timeout``) for the thread to end; no call of the callback
        starts after this. Idempotent; may be called from the callback itself."""
        self._stop.set()
        self._changed.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)


def campaign_steps(election: LeaderElection) -> Steps[Entry]:
    """The campaign steps for ``election`` (for the asyncio front, which drives it on its loop)."""
    return election._steps()
