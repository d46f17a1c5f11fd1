"""The public lock API shared by every recipe: acquire/release, state, listeners, check, fencing token.

Recipes subclass :class:`Lock` and implement ``_zk_acquire(waiter) -> Hold``;
the local gate, reentrancy, deadlines, cancel and session-state reporting live here once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Iterator, Optional

import tenacity
from kazoo.client import KazooClient

from . import _local, naming
from ._participant import Participant
from ._queue import Cancelled, DeadlinePassed, Waiter
from .errors import LockCancelled, LockError, LockTimeout
from .session import HELD, LOST, Hold

log = logging.getLogger("zkrecipes.lock")

IDLE = "idle"
WAITING = "waiting"
_W, _R = 0, 1
_HAVE, _QUEUE = "have", "queue"
NOWAIT_OPS_TIMEOUT = 30.0  # bound on the round trips of a non-blocking attempt



class Lock(Participant):
    """Base of every zkrecipes lock. See :class:`~zkrecipes.FairLock` for the documented API."""

    _kind = naming.WRITE
    _family = "queue"

    def __init__(
        self,
        client: KazooClient,
        path: str,
        identifier: Optional[str] = None,
        *,
        host: Optional[str] = None,
        acl: Optional[list] = None,
        retry: Optional[tenacity.Retrying] = None,
        tolerate_suspended: bool = False,
    ) -> None:
        super().__init__(
            client, path, identifier, host=host, acl=acl, retry=retry, tolerate_suspended=tolerate_suspended
        )
        self._gate = _local.gate(client, self.path, self._family)
        self._cancel = threading.Event()
        self._waiters: set = set()

    # -- recipe hooks ----------------------------------------------------------------------------
    def _zk_acquire(self, waiter: Waiter) -> Hold:  # pragma: no cover - abstract
        raise NotImplementedError

    def _make_hold(self, path: str, token: int, session: int) -> Hold:
        hold = Hold(self.client, path, token, session, self._verify, self._cleanup)
        hold.pin = self._gate  # a held lock's gate outlives its lock objects
        hold.settle()  # the connection may have dropped, or the session ended, while we were granted
        return hold

    # -- acquire / release -----------------------------------------------------------------------
    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Acquire the lock; return True once held.

        Returns False on a non-blocking miss, when ``timeout`` seconds pass, or when :meth:`cancel` is
        called; in every such case (and on any exception, KeyboardInterrupt included) the node this call
        created is deleted and its watch removed. Reentrant per thread: each acquire needs a release.
        ``timeout=0`` makes one attempt without waiting, like ``blocking=False``.
        """
        if not isinstance(blocking, bool):
            raise TypeError(f"blocking must be a bool, got {blocking!r}")
        timeout = naming.validate_timeout(timeout)
        if not blocking and timeout is not None:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout == 0:  # like threading.Lock: one attempt that does not wait (not "give up before trying")
            blocking, timeout = False, None
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        entered = self._enter_gate(blocking, deadline)
        if entered != _QUEUE:
            return entered == _HAVE
        return self._acquire_zk(blocking, deadline)

    def _enter_gate(self, blocking: bool, deadline: Optional[float]) -> Optional[str]:
        """Take the local gate: _HAVE if the calling thread now holds (reentrant or shared), _QUEUE if
        it must queue in ZooKeeper (``gate.busy`` is then ours), None on a miss, timeout or cancel."""
        g, tid, kind = self._gate, threading.get_ident(), self._kind
        self._cancel.clear()
        if kind == naming.READ:
            self._look_for_writers(deadline)
        with g.cond:
            try:
                return self._gate_loop(g, tid, kind, blocking, deadline)
            finally:
                if tid in g.line:  # leave the local line however we leave (granted, miss, error)
                    g.line.remove(tid)
                    g.cond.notify_all()

    def _gate_loop(
        self, g: _local.Gate, tid: int, kind: str, blocking: bool, deadline: Optional[float]
    ) -> Optional[str]:
        while True:
            c = g.counts.get(tid)
            if kind == naming.WRITE:
                if g.writer == tid:
                    c[_W] += 1
                    self._attach(g.hold)
                    return _HAVE
                if c and c[_R]:
                    raise LockError(f"{self.path}: upgrading a read lock to a write lock would deadlock")
                if g.hold is None and not g.busy and (not g.line or g.line[0] == tid):
                    break
            else:
                if c:  # reentrant read, or read under our own write lock (downgrade)
                    c[_R] += 1
                    self._attach(g.hold)
                    return _HAVE
                if (
                    g.mode == naming.READ
                    and g.hold.state == HELD
                    and not g.waiting_writers
                    and g.writer_behind is not g.hold
                ):
                    g.counts[tid] = [0, 1]
                    self._attach(g.hold)
                    return _HAVE
                if g.hold is None and not g.busy and (not g.line or g.line[0] == tid):
                    break
            if self._cancel.is_set():
                return None
            remaining = None if deadline is None else deadline - time.monotonic()
            if not blocking or (remaining is not None and remaining <= 0):
                return None
            if tid not in g.line:
                g.line.append(tid)  # threads queue for the gate in arrival order
            if kind == naming.WRITE:
                g.waiting_writers += 1
            try:
                g.cond.wait(0.5 if remaining is None else min(remaining, 0.5))
            finally:
                if kind == naming.WRITE:
                    g.waiting_writers -= 1
        g.busy = True
        return _QUEUE

    def _look_for_writers(self, deadline: Optional[float]) -> None:
        """Before a thread joins this process's read hold: is a writer queued behind our node? Joining
        then would overtake it, and steady local reads would keep the node, starving it. One listing per
        hold; a writer seen is remembered in the gate, so later threads queue behind it without asking."""
        g = self._gate
        with g.cond:
            hold = g.hold
            if hold is None or g.mode != naming.READ or g.writer_behind is hold or threading.get_ident() in g.counts:
                return
        mine = naming.parse(hold.node.rsplit("/", 1)[1])
        limit = self.client._session_timeout / 1000.0
        if deadline is not None:
            limit = max(0.0, min(limit, deadline - time.monotonic()))
        try:
            names = self._queue.client.get_children_async(self.path).get(timeout=limit)
        except Exception:
            return  # not known: the hold's own state decides (a suspended hold is not joined)
        behind = (n for n in naming.sort_queue(names) if mine and naming.distance(n.sequence, mine.sequence) > 0)
        if any(n.kind == naming.WRITE for n in behind):
            with g.cond:
                if g.hold is hold:
                    g.writer_behind = hold

    def _acquire_zk(self, blocking: bool, deadline: Optional[float]) -> bool:
        g, tid = self._gate, threading.get_ident()
        self.lost.clear()
        self._set_state(WAITING)
        ops_deadline = deadline if blocking else time.monotonic() + NOWAIT_OPS_TIMEOUT
        waiter = Waiter(self.client, ops_deadline, self._cancel, self.retry, nowait=not blocking)
        self._waiters.add(waiter)
        hold = None
        try:
            hold = self._zk_acquire(waiter)
        except (DeadlinePassed, Cancelled):
            pass
        finally:
            waiter.close()
            self._waiters.discard(waiter)
            with g.cond:
                g.busy = False
                if hold is not None:
                    g.hold, g.mode = hold, self._kind
                    g.counts[tid] = [1, 0] if self._kind == naming.WRITE else [0, 1]
                    if self._kind == naming.WRITE:
                        g.writer = tid
                g.cond.notify_all()
            if hold is None:
                self._set_state(IDLE)
        if hold is None:
            return False
        self._attach(hold)
        log.debug("acquired %s as %s (token %d)", self.path, hold.node, hold.token)
        return True

    def release(self) -> None:
        """Release one level of this thread's hold; the last release deletes our node.

        Raises LockError if the calling thread does not hold the lock. After the hold was lost,
        release only clears local state: it never deletes a node that may now be someone else's. Without
        a connection (suspended), release waits for one at most until the hold is declared lost (the
        session timeout); a loss found while releasing is reported (``"lost"``, then ``"idle"``).
        """
        g, tid = self._gate, threading.get_ident()
        side = _W if self._kind == naming.WRITE else _R
        with g.cond:
            c = g.counts.get(tid)
            if not c or not c[side]:
                kind = "write" if side == _W else "read"
                raise LockError(f"{self.path}: release of a {kind} lock the calling thread does not hold")
            c[side] -= 1
            if side == _W and not c[_W]:
                g.writer = None
            if c == [0, 0]:
                del g.counts[tid]
            downgraded: list = []
            if g.counts:
                if g.writer is None:
                    g.mode = naming.READ  # downgrade: our write node stays until the reads are released
                    downgraded = [o for o in g.objects if o._kind == naming.WRITE]
                    g.objects.difference_update(downgraded)
                g.cond.notify_all()
                kept = g.hold
            else:
                kept = None
                hold, objects = g.hold, g.objects
                g.hold, g.mode, g.objects, g.busy = None, None, set(), True
        if kept is not None:
            for obj in downgraded:  # the write side is no longer held: "idle", no token, no node
                obj._detach(kept)
            return
        try:
            self._delete_held(hold)  # a session found gone is reported as lost, even this late
        finally:
            with g.cond:
                g.busy = False
                g.cond.notify_all()
            for obj in objects:
                obj._detach(hold)

    def cancel(self) -> None:
        """Make pending acquires of this lock object return False (``with``/``hold()`` raise
        :class:`LockCancelled`); their nodes are deleted. Safe to call from any thread."""
        self._cancel.set()
        for w in list(self._waiters):
            w.wake.set()
        with self._gate.cond:
            self._gate.cond.notify_all()

    # -- context managers --------------------------------------------------------------------------
    def __enter__(self) -> "Lock":
        self._acquire_or_raise(None)
        return self

    def __exit__(self, *exc) -> None:
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

    # -- state -------------------------------------------------------------------------------------
    def _attach(self, hold: Hold) -> None:
        with self._gate.cond:
            if self in self._gate.objects:
                return
            self._gate.objects.add(self)
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
    def state(self) -> str:
        """``"idle"``, ``"waiting"``, ``"held"``, ``"suspended"`` or ``"lost"``."""
        return self._state

    def _my_hold(self) -> Optional[Hold]:
        g = self._gate
        with g.cond:
            c = g.counts.get(threading.get_ident())
            side = _W if self._kind == naming.WRITE else _R
            return g.hold if c and c[side] else None

    @property
    def is_held(self) -> bool:
        """True only for a thread that holds the lock while the hold is certain: not suspended or lost,
        and confirmed by ZooKeeper since the process last stood still (GC pause, SIGSTOP)."""
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

    def check(self) -> None:
        """Return if the calling thread's hold is certain; raise LockLost if it is lost or (unless
        built with ``tolerate_suspended=True``) suspended, LockError if this thread does not hold it.

        Cheap (no request) unless the process stood still since the hold was last confirmed: then it
        first asks ZooKeeper whether our node is still ours, and raises LockLost if it is not or if
        ZooKeeper cannot be reached to say so."""
        hold = self._my_hold()
        if hold is None:
            raise LockError(f"{self.path} is not held by the calling thread")
        self._check_hold(hold, "hold")

    def contenders(self) -> list:
        """Every holder and waiter in queue order, as :class:`~zkrecipes.Contender` tuples."""
        return self._queue.contenders()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path!r} state={self._state}>"
