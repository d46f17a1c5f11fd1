"""The threaded Lock's blocking conveniences over acquire and release: ``with lock``, ``lock.hold()``,
``lock.once()``, ``check()``, and the warning for a blocking acquire on an event loop's thread."""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from typing import TYPE_CHECKING, Any, List, Optional, Protocol, TypeVar, cast

from . import naming
from ._holding import Holding
from .errors import LockCancelled, LockTimeout

if TYPE_CHECKING:
    import zkrecipes.once

    from .once import ThreadedHolder

_NOT_CALLERS = (os.path.dirname(os.path.abspath(__file__)) + os.sep, contextlib.__file__)  # (``with lock.hold()``)


class _Lock(Protocol):  # what Blocking uses of the lock it is mixed into (zkrecipes._lock.Lock)
    path: str
    _acl: List[Any]
    _kind: str
    _by_object: Any
    _cancelled: bool
    _warned_loop: bool

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool: ...
    def release(self) -> None: ...
    def _reap(self, me: Any) -> None: ...
    def _run(self, steps: Any, deadline: Optional[float] = None, nowait: bool = False) -> Any: ...
    def _check(self, me: Any) -> Any: ...
    def _current_owner(self) -> Any: ...
    def _acquire_or_raise(self, timeout: Optional[float]) -> None: ...


L = TypeVar("L", bound=_Lock)


class Blocking(Holding):
    """``once()`` and ``check()`` of a threaded lock, with ``with`` and ``hold()`` from Holding (mixed into
    :class:`~zkrecipes._lock.Lock`)."""

    def check(self: _Lock) -> None:
        """Return if the calling thread's hold is certain; raise LockLost if it is lost or (unless
        built with ``tolerate_suspended=True``) suspended, LockError if this thread does not hold it.

        Cheap (no request) unless the process stood still since the hold was last confirmed: then it
        first asks ZooKeeper whether our node is still ours, and raises LockLost if it is not or if
        ZooKeeper cannot be reached to say so."""
        me = self._by_object or threading.current_thread()
        self._reap(me)
        self._run(self._check(me))

    def _warn_loop(self: _Lock) -> None:
        self._warned_loop = True
        import inspect  # (once per lock object at most)

        frame, level = inspect.currentframe(), 1  # point the warning at the first caller outside zkrecipes
        while frame is not None and frame.f_back is not None and frame.f_code.co_filename.startswith(_NOT_CALLERS):
            frame, level = frame.f_back, level + 1
        warnings.warn(f"{self!r}: a blocking acquire() on the thread of a running asyncio event loop stops "
                      f"the loop until the lock is granted; in coroutines use zkrecipes.aio."
                      f"{type(self).__name__} (await lock.acquire())", RuntimeWarning, stacklevel=level)

    def once(self: _Lock, key: str, keep: float = 86400.0, timeout: Optional[float] = None) -> "zkrecipes.once.Once":
        """``with lock.once("2026-11-26T15:00") as run: if run: job(); run.done()`` -- hold the lock (LockTimeout
        after ``timeout``), then ``run`` is true if ``key`` was not done within ``keep`` seconds (default a
        day) by anyone holding this lock path; ``run.done()`` marks it done, fenced by the hold. A job that
        raises, or a hold lost before ``done()``, leaves the key open. See :doc:`/once` and
        :class:`~zkrecipes.once.Once`. A bad key or keep, or a read lock or semaphore, raises before any
        request. ``timeout`` covers the acquire and the look, not ``done()``."""
        from .once import Once

        shared = self._kind in (naming.READ, naming.LEASE)
        return Once(cast("ThreadedHolder", self), key, keep, timeout, acl=self._acl, shared=shared,
                    check=lambda: self._check(self._current_owner()))

    def _acquire_or_raise(self: _Lock, timeout: Optional[float]) -> None:
        if not self.acquire(timeout=timeout):
            if self._cancelled:
                raise LockCancelled(f"acquire of {self.path} was cancelled")
            raise LockTimeout(f"could not acquire {self.path} within {timeout} s")
