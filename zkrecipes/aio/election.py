"""aio.LeaderElection: the election's core (:mod:`zkrecipes.election`) on the asyncio front."""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Optional, TypeVar

from ..election import ElectionCore
from ..errors import LockCancelled
from ..naming import Contender, validate_timeout
from ._lock import AioFront

R = TypeVar("R")


class LeaderElection(AioFront, ElectionCore):
    """Leader election for asyncio: ``async with aio.LeaderElection(zk, "/election/x"):`` leads.

    The same queue, read-back before leading, states (``"idle"``, ``"candidate"``, ``"leader"``,
    ``"suspended"``, ``"lost"``), fencing token and interoperability as
    :class:`zkrecipes.LeaderElection`. Listeners are called on the event loop's thread; ``lost`` is an
    ``asyncio.Event``. :meth:`resign` and :meth:`cancel` may be called from any task.
    """

    async def campaign(self, timeout: Optional[float] = None) -> bool:
        """Become a candidate and wait until leader; True once leader (at once if already leader).

        False when ``timeout`` passes or :meth:`cancel`/:meth:`resign` is called meanwhile; our node is
        then deleted (also when the task is cancelled). Raises LockError if another task is already
        campaigning with this object."""
        timeout = validate_timeout(timeout)
        self._bind()
        deadline = None if timeout is None else time.monotonic() + timeout
        return await self._run(self._campaign(fresh=True), deadline)

    async def resign(self) -> None:
        """Leave the queue: a pending :meth:`campaign` returns False; a leader deletes its node and the
        next candidate takes over. Idempotent."""
        self.cancel()
        await self._run(self._step_down())

    async def run(self, coro_fn: Callable[..., Awaitable[R]], *args: Any, **kwargs: Any) -> Optional[R]:
        """Campaign, ``await coro_fn(*args, **kwargs)`` as leader, resign when it returns or raises; its
        result (None if the campaign was cancelled first). ``coro_fn`` learns of a lost leadership by
        asking: ``await election.check()`` or ``election.lost``."""
        if not callable(coro_fn):
            raise TypeError(f"coro_fn must be callable, got {coro_fn!r}")
        if not await self.campaign():
            return None
        try:
            return await coro_fn(*args, **kwargs)
        finally:
            await self.resign()

    async def __aenter__(self) -> "LeaderElection":
        if not await self.campaign():
            raise LockCancelled(f"campaign for {self.path} was cancelled")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.resign()

    def check(self) -> Awaitable[None]:
        """Raise :class:`~zkrecipes.LockLost` at the call if leadership is lost, uncertain or not held,
        awaited or not; awaited, it also confirms leadership after the process stood still (as
        :meth:`aio.FairLock.check <zkrecipes.aio.FairLock.check>`)."""
        return self._start(self._check())

    async def leader(self) -> Optional[Contender]:
        """Who leads now, the first of :meth:`contenders` (readable by anyone, candidate or not), or None."""
        c = await self.contenders()
        return c[0] if c else None

    def __repr__(self) -> str:
        return f"<aio.LeaderElection {self.path!r} state={self._state}>"
