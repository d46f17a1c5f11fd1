"""A MultiLock's logic, written once for both fronts: which locks, in which order, and its acquire,
release and check as engine steps -- each lock's own steps, yielded as a
:class:`~zkrecipes._transport.Part` that runs them on that lock's front -- run by the front's driver
under one deadline (the driver's). And :func:`all_or_none`, the all-or-none take and undo a MultiLock
and a semaphore's ``acquire_leases`` share.

A MultiLock has no waiting loop, retry, deadline arithmetic or node parser of its own: each lock queues,
waits and retries as its own acquire does, bounded by the run's deadline.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Type, TypeVar

from ._engine import DeadlinePassed, Steps
from ._lock import LockCore
from ._transport import Part
from .errors import LockError, LockTimeout

log = logging.getLogger("zkrecipes.multilock")

X = TypeVar("X")


def all_or_none(
    parts: Sequence[X], take: Callable[[X], Steps[bool]], give_back: Callable[[X], Steps[None]]
) -> Steps[bool]:
    """Take each of ``parts`` in turn (``take(part)``: True once taken): True once all are. On the first
    miss (or DeadlinePassed before a part's turn) what was taken is given back, last first, and False is
    returned -- or the first error a give-back raised. On any exception (KeyboardInterrupt, a cancelled
    task included) what was taken is given back, then the exception is raised (the part being taken has
    cleaned up after itself)."""
    taken: List[X] = []
    try:
        for part in parts:
            if not (yield from take(part)):
                break
            taken.append(part)
        else:
            return True
    except DeadlinePassed:  # the deadline passed before this part's turn: nothing of it was asked
        pass
    except GeneratorExit:  # abandoned by its driver: nothing more may be asked
        raise
    except BaseException:
        yield from give_all_back(taken, give_back)  # (its own errors are logged: the one raised here is the news)
        raise
    error = yield from give_all_back(taken, give_back)
    if error is not None:
        raise error
    return False


def give_all_back(parts: Sequence[X], give_back: Callable[[X], Steps[None]]) -> Steps[Optional[Exception]]:
    """``give_back(part)`` for each of ``parts``, last first, each even if an earlier one raised (logged);
    returns the first error."""
    first: Optional[Exception] = None
    for part in reversed(parts):
        try:
            yield from give_back(part)
        except Exception as exc:
            log.warning("%s: release failed: %r", getattr(part, "path", part), exc)
            first = first or exc
    return first


def order_key(lock: LockCore) -> str:
    """Where ``lock`` stands in the one global order: its path as the server sees it (the client's chroot
    included), so every process orders the same znodes the same way."""
    return str(lock.client.chroot) + lock.path


def ordered(locks: object, front: Type[LockCore], front_name: str, other_name: str) -> Tuple[Any, ...]:
    """``locks`` checked (before any request) and sorted by :func:`order_key`.

    TypeError naming the value for anything but a ``front`` lock (a lock of the other front, a
    ReadWriteLock, an election, ...); ValueError for an empty list, a lock given twice, or two locks on
    one path (a read and a write side, or two clients: one would wait for the other, held by us)."""
    if isinstance(locks, (str, bytes)) or not isinstance(locks, Iterable):
        raise TypeError(f"locks must be a list of {front_name} locks, got {locks!r}")
    items: List[Any] = list(locks)
    if not items:
        raise ValueError("a MultiLock needs at least one lock, got an empty list")
    by_path: Dict[str, Any] = {}
    for lock in items:
        if not isinstance(lock, front):
            if isinstance(lock, LockCore):
                raise TypeError(f"{lock!r} is a lock of {other_name}: a {front_name} MultiLock takes "
                                f"{front_name} locks only (use {other_name}'s MultiLock for those)")
            hint = " (pass its read() or write() side)" if callable(getattr(lock, "write", None)) else ""
            raise TypeError(f"a MultiLock takes {front_name} locks, got {lock!r}{hint}")
        if any(lock is seen for seen in by_path.values()):
            raise ValueError(f"{lock!r} is given twice")
        key = order_key(lock)
        other = by_path.get(key) or next((o for o in by_path.values() if o.path == lock.path), None)
        if other is not None:
            raise ValueError(f"{lock.path}: two locks on one path ({other!r} and {lock!r}); a MultiLock "
                             "takes at most one lock per path (the second would wait for the first)")
        by_path[key] = lock
    return tuple(by_path[k] for k in sorted(by_path))


class MultiCore:
    """What both fronts' MultiLocks share: the locks in their global order, and a lock's step protocol --
    ``_acquire``, ``_release``, ``_check`` -- made of each lock's own steps, each a
    :class:`~zkrecipes._transport.Part` run by that lock's ``_run`` (its front's driver, its cancel). A
    front sets the lock class it takes and supplies ``_current_owner`` and ``_run``, as a lock's does."""

    _front: Type[LockCore]  # the locks this front takes
    _front_name = ""  # in error messages
    _other_name = ""  # the other front's name

    def __init__(self, locks: Iterable[Any]) -> None:
        self.locks = ordered(locks, self._front, self._front_name, self._other_name)

    # -- what a front supplies (as a lock's front does) ------------------------------------------------
    def _current_owner(self) -> Any:
        """The calling owner: a thread, or a task on asyncio."""
        raise NotImplementedError

    def _run(self, steps: Steps[Any], deadline: Optional[float] = None, nowait: bool = False) -> Any:
        """Run ``steps`` on this front's driver, bounded by ``deadline`` (returns, or is awaited for, their value)."""
        raise NotImplementedError

    # -- the steps -------------------------------------------------------------------------------------
    def _acquire(self, blocking: bool) -> Steps[bool]:
        """Each lock's own acquire, in order, as parts of this run (bounded by its deadline): True once all
        are held; False on the first miss or once the deadline has passed (what was taken is released, in
        reverse). On an exception (KeyboardInterrupt, a cancelled task included), what was taken is
        released, then it is raised: the lock that raised has deleted its own node."""
        return all_or_none(self.locks, lambda lock: self._take(lock, blocking), self._give_back)

    def _take(self, lock: Any, blocking: bool) -> Steps[bool]:
        """``lock``'s own acquire for the calling owner, begun as its own ``acquire`` begins it."""
        lock._cancelled = False  # a new acquire: an earlier cancel() is over
        got: bool = yield Part(lock._acquire(lock._current_owner(), blocking), run=lock._run)
        return got

    def _give_back(self, lock: Any) -> Steps[None]:
        """``lock``'s own release for the calling owner: no deadline, no cancel."""
        yield Part(lock._release(lock._current_owner()), on=lock, cleanup=True)

    def _release(self) -> Steps[None]:
        """Each lock's own release, in reverse order; every lock is released even if one raises (the
        first error is raised after the last)."""
        error = yield from give_all_back(self.locks, self._give_back)
        if error is not None:
            raise error

    def _check(self) -> Steps[None]:
        """Each lock's own check, in order: the first whose hold is not certain raises."""
        for lock in self.locks:
            yield Part(lock._check(lock._current_owner()), run=lock._run)

    def _fences(self) -> List[Any]:
        """Each lock's ``transaction()`` (a fence on its hold), to be joined into one: LockError when the
        locks are on several clients (one multi runs in one session)."""
        clients = {id(lock.client) for lock in self.locks}
        if len(clients) > 1:
            raise LockError(f"{', '.join(lock.path for lock in self.locks)}: the locks are on {len(clients)} "
                            "clients; a fenced transaction runs in one session, so it needs all locks on one client")
        return [lock.transaction() for lock in self.locks]

    @property
    def is_held(self) -> bool:
        """True while every lock's ``is_held`` is (each answers for the calling thread or task)."""
        return all(lock.is_held for lock in self.locks)

    @property
    def tokens(self) -> Dict[str, Optional[int]]:
        """Each lock's path and its fencing token (``token``; None where it is not held), in order."""
        return {lock.path: lock.token for lock in self.locks}

    def _timed_out(self, timeout: Optional[float]) -> LockTimeout:
        return LockTimeout(f"could not acquire all of {[lock.path for lock in self.locks]} within {timeout} s")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {[lock.path for lock in self.locks]!r}>"
