"""A MultiLock's logic, written once for both fronts: which locks, in which order, and the calls that take,
release and check them as steps (``(function, keywords)`` pairs a front calls, and awaits on asyncio).

A MultiLock has no waiting loop, retry or node parser of its own: it calls each lock's own ``acquire``
with what is left of one deadline, in one global order, and undoes what it took, in reverse, when one
misses or raises. The fronts (:mod:`zkrecipes.multilock`, :mod:`zkrecipes.aio.multilock`) run the steps.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any, Callable, Dict, Generator, Iterable, List, Optional, Tuple, Type

from ._lock import LockCore, acquire_deadline
from .errors import LockError, LockTimeout

log = logging.getLogger("zkrecipes.multilock")

Call = Tuple[Callable[..., Any], Dict[str, Any]]  # a call a front makes (and awaits, on asyncio)
Steps = Generator[Call, Any, Any]


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
    """What both fronts' MultiLocks share: the locks in their global order, and the steps of acquire,
    release and check. A front sets the lock class it takes and runs the steps."""

    _front: Type[LockCore]  # the locks this front takes
    _front_name = ""  # in error messages
    _other_name = ""  # the other front's name

    def __init__(self, locks: Iterable[Any]) -> None:
        self.locks = ordered(locks, self._front, self._front_name, self._other_name)

    def _acquiring(self, blocking: bool, timeout: Optional[float]) -> Steps:
        """Each lock's ``acquire`` in order, each given what is left of one deadline: True once all are
        held; False on the first miss (what was taken is released, in reverse). On an exception
        (KeyboardInterrupt, a cancelled task included), what was taken is released, then it is raised:
        the lock that raised has deleted its own node."""
        nowait = not acquire_deadline(blocking, timeout)[0]  # (checks both, before any request)
        deadline = None if timeout is None else time.monotonic() + timeout
        taken: List[Any] = []
        try:
            for lock in self.locks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0 and not nowait:
                    break  # the deadline passed before this lock's turn: no request for it
                asked = {"blocking": False} if nowait else {"timeout": left}
                if not (yield lock.acquire, asked):
                    break
                taken.append(lock)
            else:
                return True
        except GeneratorExit:  # abandoned by its front: nothing more may be asked
            raise
        except BaseException:
            yield from _undo(taken)  # (its own errors are logged: the one raised here is the news)
            raise
        error = yield from _undo(taken)
        if error is not None:
            raise error
        return False

    def _releasing(self) -> Steps:
        """Each lock's ``release``, in reverse order; every lock is released even if one raises (the
        first error is raised after the last)."""
        error = yield from _undo(self.locks)
        if error is not None:
            raise error

    def _checking(self) -> Steps:
        """Each lock's ``check``, in order: the first whose hold is not certain raises."""
        for lock in self.locks:
            yield lock.check, {}

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


def _undo(locks: Iterable[Any]) -> Generator[Call, Any, Optional[Exception]]:
    """Release ``locks`` in reverse order, each even if an earlier release raised; the first error."""
    first: Optional[Exception] = None
    for lock in reversed(tuple(locks)):
        try:
            yield lock.release, {}
        except Exception as exc:
            log.warning("%s: release failed: %r", lock.path, exc)
            first = first or exc
    return first


class Run:
    """One run of steps. ``call`` is the next call (None once the steps returned their ``value``); a front
    makes it, hands its reply to :meth:`reply`, and runs both inside ``with run:``, which hands an
    exception the call raised to the steps instead (they undo and re-raise it, or go on)::

        run = Run(steps)
        while run.call is not None:
            with run:
                run.reply(run.call())     # on asyncio: run.reply(await run.call())
        return run.value
    """

    def __init__(self, steps: Steps) -> None:
        self._steps = steps
        self.call: Optional[Callable[[], Any]] = None
        self.value: Any = None
        self._raised: Optional[BaseException] = None  # what the steps themselves raised: not theirs to handle
        self._feed(None, None)

    def _feed(self, reply: Any, error: Optional[BaseException]) -> None:
        try:
            fn, asked = self._steps.throw(error) if error is not None else self._steps.send(reply)
        except StopIteration as stop:
            self.call, self.value = None, stop.value
            return
        except BaseException as exc:
            self.call, self._raised = None, exc
            raise
        self.call = functools.partial(fn, **asked)

    def reply(self, value: Any) -> None:
        """The last call returned ``value``: on to the next."""
        self._feed(value, None)

    def drive(self) -> Any:
        """Run the calls on this thread (the threaded front); the steps' value."""
        while self.call is not None:
            with self:
                self.reply(self.call())
        return self.value

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, kind: Any, error: Optional[BaseException], tb: Any) -> bool:
        if error is None or error is self._raised:
            return False
        self._feed(None, error)  # the call raised: the steps' turn (they re-raise it, or go on)
        return True
