"""MultiLock: several locks taken as one -- all or none, in one global order, released in reverse;
``with multi:`` and ``multi.hold(timeout)`` as a lock's (:class:`zkrecipes._lock.Holding`)."""

from __future__ import annotations

import threading
from typing import Iterable, Optional

from ._drive import Driver, never
from ._engine import Steps, T
from ._holding import Holding
from ._lock import Lock, _in_event_loop, acquire_deadline
from ._multilock import MultiCore
from .transaction import HeldTransaction


class MultiLock(Holding, MultiCore):
    """Several locks as one (Curator's ``InterProcessMultiLock``): ``with MultiLock([a, b]):``.

    ``locks`` are threaded zkrecipes locks of any recipe -- :class:`~zkrecipes.FairLock`,
    :class:`~zkrecipes.ExclusiveLock`, a :class:`~zkrecipes.ReadWriteLock`'s ``read()`` or ``write()``
    side, a :class:`~zkrecipes.Semaphore` -- on any paths and clients. They are taken in one global order,
    whatever order the list gives: by path as the server sees it (the client's chroot included), kept
    in :attr:`locks`. Two MultiLocks (in any processes) over the same paths therefore never wait for
    each other in a cycle. At most one lock per path: a read and a write side of one path, or two
    clients' locks on one path, would wait for each other.

    The holds are the locks' own: each is owned by the thread that called :meth:`acquire`, as that
    lock's ``acquire`` gives it (reentrant per thread; :meth:`release` from another thread raises
    :class:`~zkrecipes.LockError`), and each lock still answers for itself (``is_held``, ``token``,
    listeners, ``lost``). The MultiLock keeps no state of its own.

    Bad input raises before any request: TypeError naming the value for anything that is not a threaded
    lock (a :mod:`zkrecipes.aio` lock: use :class:`zkrecipes.aio.MultiLock`; a ReadWriteLock: pass a
    side), ValueError for an empty list, a lock given twice, or two locks on one path.
    """

    _front = Lock
    _warned_loop = False  # (each lock keeps its own: see _warn_loop)
    _front_name = "threaded"
    _other_name = "zkrecipes.aio"

    def __init__(self, locks: Iterable[Lock]) -> None:
        super().__init__(locks)

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Take every lock, in order, within one deadline: True once all are held.

        Each lock's own acquire runs in turn, all bounded by the one deadline ``timeout`` sets
        (``blocking=False`` or ``timeout=0``: one attempt each, no waiting); once it has passed, no
        further lock is asked. All or none: on the first miss, when the deadline
        passes, or on any exception (KeyboardInterrupt included) the locks already taken are released
        in reverse order, and the lock that was being acquired deletes its own node -- nothing is left
        behind; the miss returns False, the exception is raised.
        """
        blocking, deadline = acquire_deadline(blocking, timeout)
        if blocking and _in_event_loop():
            self._warn_loop()
        self._reap()
        return bool(self._run(self._acquire(blocking), deadline, not blocking))

    def release(self) -> None:
        """Release every lock, in reverse order (one level each). Every lock is released even if one
        raises (LockError when the calling thread does not hold it); the first error is then raised."""
        self._run(self._release())

    def check(self) -> None:
        """Return if every hold is certain; else raise :class:`~zkrecipes.LockLost` (LockError if not
        held by the calling thread) naming the first lock, in order, whose hold is not (see
        :meth:`zkrecipes.FairLock.check`)."""
        self._run(self._check())

    def transaction(self) -> HeldTransaction:
        """A kazoo transaction fenced by every hold: its multi checks each lock's node first and commits
        only while all of them live (:class:`~zkrecipes.HeldTransaction`; nothing applied otherwise).
        Locks on one client only (one multi runs in one session): :class:`~zkrecipes.LockError` when they
        are on several, or as :meth:`check` when one is not held by the calling thread."""
        return HeldTransaction.joined(self._fences())

    def _current_owner(self) -> threading.Thread:
        return threading.current_thread()

    def _run(self, steps: Steps[T], deadline: Optional[float] = None, nowait: bool = False) -> T:
        """Run ``steps`` (whose parts run on each lock's own driver) on the calling thread."""
        return Driver(self.locks[0].client, deadline, never, None, nowait).run(steps)

    def _reap(self) -> None:
        """As each lock's own acquire does first: release what ended threads hold on its gate."""
        for lock in self.locks:
            lock._reap(lock._current_owner())

    def _warn_loop(self) -> None:
        """A blocking acquire on an event loop's thread: each lock warns, as its own acquire would."""
        for lock in self.locks:
            if not lock._warned_loop:
                lock._warn_loop()

    def _acquire_or_raise(self, timeout: Optional[float]) -> None:
        if not self.acquire(timeout=timeout):
            raise self._timed_out(timeout)

