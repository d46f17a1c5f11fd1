"""The public lock API shared by every recipe: acquire/release, state, listeners, check, fencing token.

A recipe declares its node kind (``_kind``), its wait-rule (``_rule``) and, if it is not a queue, its
steps (``_steps``: :func:`zkrecipes._engine.race` for ExclusiveLock); the local gate
(:mod:`zkrecipes._gate`), deadlines, cancel and session-state reporting live here once, and the waiting
loop once in :mod:`zkrecipes._engine`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Callable, Iterator, List, Literal, Optional, Set, Tuple

from . import _engine, _gate, _kazoo, _reaper, naming
from ._drive import Driver
from ._engine import Cancelled, DeadlinePassed, Entry, Steps
from ._gate import Entered, Gate
from ._participant import Participant
from .errors import LockCancelled, LockError, LockTimeout
from .naming import QueueNode
from .session import HELD, LOST, Hold

log = logging.getLogger("zkrecipes.lock")

LockState = Literal["idle", "waiting", "held", "suspended", "lost"]
IDLE: LockState = "idle"
WAITING: LockState = "waiting"
NOWAIT_OPS_TIMEOUT = 30.0  # bound on the round trips of a non-blocking attempt


def predecessor(ahead: List[QueueNode], me: QueueNode) -> Optional[QueueNode]:
    """Wait-rule of exclusive queue members: blocked by the node immediately ahead, if any. Raises
    LockError if that is a semaphore's lease (it would never let us in as a lock: a path of its own)."""
    if not ahead:
        return None
    if ahead[-1].kind == naming.LEASE:
        raise LockError(f"{ahead[-1].name!r} ahead of us is a Semaphore's lease: a lock or election "
                        "needs a path of its own")
    return ahead[-1]


def _joinable(hold: Optional[Hold]) -> bool:
    return hold is not None and hold.state == HELD


class HeldView:
    """``is_held``, ``token`` and ``node`` of a lock object, read from its local gate: the same for the
    threaded locks and :mod:`zkrecipes.aio`'s (whose owner is the task, not the thread)."""

    _gate: Gate

    def _my_hold(self) -> Optional[Hold]:
        """The hold of the calling owner (thread or task), if it holds this lock."""
        raise NotImplementedError

    @property
    def is_held(self) -> bool:
        """True only for the owner (thread; task in :mod:`zkrecipes.aio`) that holds the lock while the hold
        is certain: not suspended or lost, and confirmed by ZooKeeper since the process last stood still
        (GC pause, SIGSTOP)."""
        hold = self._my_hold()
        return hold is not None and hold.state == HELD and not hold.stale()

    @property
    def token(self) -> Optional[int]:
        """The fencing token (the czxid of our node, growing across the whole ensemble) while held, else None."""
        hold = self._gate.hold
        return hold.token if hold is not None and hold.state != LOST and self in self._gate.objects else None

    @property
    def node(self) -> Optional[str]:
        """Full path of our node while held, else None."""
        hold = self._gate.hold
        return hold.node if hold is not None and self in self._gate.objects else None


class Lock(HeldView, Participant):
    """Base of every zkrecipes lock. See :class:`~zkrecipes.FairLock` for the documented API."""

    _kind = naming.WRITE
    _gate_key = "queue"
    _seen: Optional[Callable[[int], None]] = None  # told how many are ahead while waiting (see on_ahead)

    def _setup(self) -> None:
        self._gate: Gate = _gate.gate(self.client, self.path, self._gate_key)
        self._cancel = threading.Event()
        self._drivers: Set[Driver] = set()

    # -- what a recipe declares ----------------------------------------------------------------------
    _rule: "Callable[..., _engine.Blockers]" = staticmethod(predecessor)  # a recipe's may be a method

    def _steps(self) -> Steps[Entry]:
        fmt = self._format
        prefix, data, guid = fmt.node(self.host, self._kind, self.identifier)
        return _engine.acquire(self.path, self._acl, prefix, data, guid, self._rule, fmt=fmt, seen=self._seen)

    # -- acquire / release ---------------------------------------------------------------------------
    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Acquire the lock; return True once held.

        Returns False on a non-blocking miss, when ``timeout`` seconds pass, or when :meth:`cancel` is
        called; in every such case (and on any exception, KeyboardInterrupt included) the node this call
        created is deleted and its watch removed. Reentrant per thread: each acquire needs a release.
        Re-entry into a hold that is lost or in doubt (suspended, unless ``tolerate_suspended``; not
        confirmed by ZooKeeper after the process stood still) raises :class:`~zkrecipes.LockLost`
        naming the path and node, and adds no level: the outer release still ends the hold.
        ``timeout=0`` makes one attempt without waiting, like ``blocking=False``.
        """
        if not isinstance(blocking, bool):
            raise TypeError(f"blocking must be a bool, got {blocking!r}")
        if timeout is not None and not (type(timeout) is float and timeout >= 0.0):  # (NaN fails >=)
            timeout = naming.validate_timeout(timeout)
        if not blocking and timeout is not None:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout == 0:  # like threading.Lock: one attempt that does not wait (not "give up before trying")
            blocking, timeout = False, None
        deadline = None if timeout is None else time.monotonic() + timeout
        me = threading.current_thread()
        self._reap(me)
        if self._cancel.is_set():  # Event.clear() takes a lock: only when there is something to clear
            self._cancel.clear()
        mine = self._gate.owned(me)
        if mine is not None:  # a re-entry: confirm a stalled hold first (the gate trusts only a confirmed one)
            mine.confirm()
        elif self._kind == naming.READ:
            self._look_for_writers(deadline)
        entered = self._gate.enter(
            me, self._kind, blocking, deadline, self._cancel.is_set, _joinable, self.tolerate_suspended
        )
        if entered is Entered.HAVE:
            if mine is None:  # a new owner joined the read hold of other threads
                _reaper.track(me, self._gate)
            self._attach(self._gate.hold)
            return True
        if entered is None:
            return False
        return self._acquire_node(me, blocking, deadline)

    def _reap(self, me: threading.Thread) -> None:
        """Release what threads that ended hold on this lock's gate (see :mod:`zkrecipes._reaper`);
        ``me`` is the calling thread."""
        counts = self._gate.counts
        if counts and (len(counts) > 1 or me not in counts):  # someone else holds here: maybe ended
            _reaper.reap(self._gate)

    def _look_for_writers(self, deadline: Optional[float]) -> None:
        """Before a thread joins this process's read hold: one listing per hold (see
        :meth:`Gate.look_behind <zkrecipes._gate.Gate.look_behind>`)."""
        hold = self._gate.unchecked_read_hold(threading.current_thread())
        if hold is None:
            return
        limit = _kazoo.session_timeout(self.client)
        if deadline is not None:
            limit = max(0.0, min(limit, deadline - time.monotonic()))
        try:
            names = self.client.get_children_async(self.path).get(timeout=limit)
        except Exception:
            return  # not known: the hold's own state decides (a suspended hold is not joined)
        self._gate.look_behind(hold, self._format.parse(hold.node.rsplit("/", 1)[1]), self._format.sort(names))

    def _acquire_node(self, me: threading.Thread, blocking: bool, deadline: Optional[float]) -> bool:
        if self.lost.is_set():
            self.lost.clear()
        self._set_state(WAITING)
        ops_deadline = deadline if blocking else time.monotonic() + NOWAIT_OPS_TIMEOUT
        driver = Driver(self.client, ops_deadline, self._cancel, self.retry, nowait=not blocking, path=self.path)
        self._drivers.add(driver)
        hold = None
        try:
            entry = driver.run(self._steps())
            hold = self._make_hold(entry, self._gate, self._on_hold)  # a held lock's gate outlives its lock objects
        except (DeadlinePassed, Cancelled):
            pass
        finally:
            self._drivers.discard(driver)
            self._gate.granted(me, self._kind, hold, self, self._detach)
            if hold is None:
                self._set_state(IDLE)
        if hold is None:
            return False
        _reaper.track(me, self._gate)
        self._on_hold(hold.state)
        return True

    def release(self) -> None:
        """Release one level of this thread's hold; the last release deletes our node.

        Raises LockError if the calling thread does not hold the lock. After the hold was lost,
        release only clears local state: it never deletes a node that may now be someone else's. Without
        a connection (suspended), release waits for one at most until the hold is declared lost (the
        session timeout); a loss found while releasing is reported (``"lost"``, then ``"idle"``).
        """
        me = threading.current_thread()
        self._reap(me)
        left = self._gate.leave(me, self._kind)
        if not left.last:
            for detach in left.downgraded:  # the write side is no longer held: "idle", no token, no node
                detach(left.hold)
            return
        try:
            self._delete_held(left.hold)  # a session found gone is reported as lost, even this late
        finally:
            self._gate.released()
            for detach in left.detach:
                detach(left.hold)

    def cancel(self) -> None:
        """Make pending acquires of this lock object return False (``with``/``hold()`` raise
        :class:`LockCancelled`); their nodes are deleted. Safe to call from any thread."""
        self._cancel.set()
        for d in list(self._drivers):
            d.interrupt()
        self._gate.wake_all()

    # -- context managers ----------------------------------------------------------------------------
    def __enter__(self) -> "Lock":
        self._acquire_or_raise(None)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextlib.contextmanager
    def hold(self, timeout: Optional[float] = None) -> Iterator["Lock"]:
        """``with lock.hold(timeout=5):`` -- like ``with lock`` but raises LockTimeout after ``timeout``."""
        self._acquire_or_raise(naming.validate_timeout(timeout))
        try:
            yield self
        finally:
            self.release()

    def _acquire_or_raise(self, timeout: Optional[float]) -> None:
        if not self.acquire(timeout=timeout):
            if self._cancel.is_set():
                raise LockCancelled(f"acquire of {self.path} was cancelled")
            raise LockTimeout(f"could not acquire {self.path} within {timeout} s")

    # -- state ---------------------------------------------------------------------------------------
    def _attach(self, hold: Hold) -> None:
        if not self._gate.attach(self, self._kind, self._detach):
            return
        hold.add_listener(self._on_hold)
        self._on_hold(hold.state)

    def _detach(self, hold: Hold) -> None:
        hold.remove_listener(self._on_hold)
        self._set_state(IDLE)

    def _on_hold(self, state: str) -> None:
        if state == LOST:
            self.lost.set()
        self._set_state(state)

    @property
    def state(self) -> LockState:
        """``"idle"``, ``"waiting"``, ``"held"``, ``"suspended"`` or ``"lost"``."""
        return self._state  # type: ignore[return-value]

    def _my_hold(self) -> Optional[Hold]:
        hold: Optional[Hold] = self._gate.held_by(threading.current_thread(), self._kind)
        return hold

    def check(self) -> None:
        """Return if the calling thread's hold is certain; raise LockLost if it is lost or (unless
        built with ``tolerate_suspended=True``) suspended, LockError if this thread does not hold it.

        Cheap (no request) unless the process stood still since the hold was last confirmed: then it
        first asks ZooKeeper whether our node is still ours, and raises LockLost if it is not or if
        ZooKeeper cannot be reached to say so."""
        self._reap(threading.current_thread())
        hold = self._my_hold()
        if hold is None:
            raise LockError(f"{self.path} is not held by the calling thread")
        self._check_hold(hold, "hold")

    def _fence_hold(self) -> Hold:
        hold = self._my_hold()
        if hold is None:
            raise LockError(f"{self.path} is not held by the calling thread")
        return hold

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path!r} state={self._state}>"


# -- for the asyncio front, whose locks drive a threaded lock's declarations on their loop ------------
def declared(lock: Lock) -> Tuple[str, str]:
    """``lock``'s recipe declarations: its node kind and its gate key (which lock objects share a gate)."""
    return lock._kind, lock._gate_key


def on_ahead(lock: Lock, fn: Optional[Callable[[int], None]]) -> None:
    """Call ``fn(n)`` on the acquiring thread with how many nodes are ahead of ours each time an acquire of
    ``lock`` is about to wait: from the lock's own listings, no request or watch of its own (the CLI's
    ``--progress``)."""
    lock._seen = fn


def acquire_steps(lock: Lock) -> Steps[Entry]:
    """The acquire steps for ``lock`` (its recipe's rule and node format)."""
    return lock._steps()
