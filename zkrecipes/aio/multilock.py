"""aio.MultiLock: :class:`zkrecipes.MultiLock`'s steps (:mod:`zkrecipes._multilock`) run on the event loop."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, Iterable, Optional

from .._engine import Steps, T
from .._lock import acquire_deadline
from .._multilock import MultiCore
from ._driver import AioDriver
from ._lock import AsyncHolding, Lock, act_for, owner_of
from .transaction import HeldTransaction


def _calling_task() -> "Optional[asyncio.Task[Any]]":
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop: the locks' acquire says what is wrong
        return None


class MultiLock(AsyncHolding, MultiCore):
    """:class:`zkrecipes.MultiLock` for asyncio: ``async with aio.MultiLock([a, b]):``.

    The same order (by path, the client's chroot included: :attr:`locks`), all-or-none acquire within
    one deadline, release in reverse, :meth:`check`, :attr:`tokens` and fenced :meth:`transaction`, over
    :mod:`zkrecipes.aio` locks of any recipe, paths and clients (a threaded lock is a TypeError). The
    holds are the locks' own, owned by the task that called :meth:`acquire` (also when
    ``asyncio.wait_for`` runs it in a task of its own), as each lock's ``acquire`` gives it.

    Cancelling the acquiring task: the lock being acquired deletes its node, the ones taken are released
    in reverse, then CancelledError is raised. (A second cancel during that release leaves the rest to
    the locks' own rule: what a task holds when it ends is released.)
    """

    _front = Lock
    _front_name = "asyncio"
    _other_name = "threaded zkrecipes"

    def __init__(self, locks: Iterable[Lock]) -> None:
        super().__init__(locks)

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> "Coroutine[Any, Any, bool]":
        """Take every lock, in order, within one deadline: True once all are held (await it). False on a
        miss or the deadline, with what was taken released in reverse; see :meth:`zkrecipes.MultiLock.acquire`."""
        return self._acquire_for(_calling_task(), blocking, timeout)  # the caller owns what it takes

    async def _acquire_for(self, caller: "Optional[asyncio.Task[Any]]", blocking: bool,
                           timeout: Optional[float]) -> bool:
        act_for(caller)
        blocking, deadline = acquire_deadline(blocking, timeout)
        self._bind()
        return bool(await self._run(self._acquire(blocking), deadline, not blocking))

    async def release(self) -> None:
        """Release every lock, in reverse order; every lock even if one raises (the first error is
        raised after the last)."""
        await self._run(self._release())

    async def check(self) -> None:
        """Raise :class:`~zkrecipes.LockLost` naming the first lock, in order, whose hold is not certain
        (each lock's ``check()`` awaited); LockError if the calling task does not hold one."""
        await self._run(self._check())

    def transaction(self) -> HeldTransaction:
        """A transaction fenced by every hold (``await tx.commit()``, :class:`zkrecipes.aio.HeldTransaction`);
        locks on one client only, see :meth:`zkrecipes.MultiLock.transaction`."""
        return HeldTransaction.joined(self._fences())

    def _bind(self) -> None:
        """As each lock's own acquire does first: tie it to this loop (its listeners run here)."""
        for lock in self.locks:
            lock._bind()

    def _current_owner(self) -> "Optional[asyncio.Task[Any]]":
        task = _calling_task()
        return None if task is None else owner_of(task)

    async def _run(self, steps: Steps[T], deadline: Optional[float] = None, nowait: bool = False) -> T:
        """Run ``steps`` (whose parts run on each lock's own driver) on the running loop."""
        return await AioDriver(self.locks[0].client, deadline, None, nowait).run(steps)

    async def _acquire_or_raise(self, timeout: Optional[float]) -> None:
        if not await self.acquire(timeout=timeout):
            raise self._timed_out(timeout)
