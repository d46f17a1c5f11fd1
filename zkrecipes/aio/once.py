"""``lock.once(key)`` on the asyncio locks: :mod:`zkrecipes.once`'s steps (the look, the marking), run on
the event loop by the asyncio driver with the lock's retry policy."""

from __future__ import annotations

from types import TracebackType
from typing import Any, AsyncContextManager, Optional, Protocol, Type

from .._engine import Steps
from ..once import Holder, OnceCore
from ._driver import AioDriver


class AioHolder(Holder, Protocol):
    """What :class:`Once` uses of an asyncio lock besides: its ``async with lock.hold(timeout):``."""

    def hold(self, timeout: Optional[float] = None) -> AsyncContextManager[Any]: ...


class Once(OnceCore[AioHolder]):
    """:class:`zkrecipes.once.Once` for asyncio, made by ``lock.once(key, keep=..., timeout=...)`` of an
    asyncio lock one task holds at a time (:meth:`zkrecipes.aio.FairLock.once`)::

        async with lock.once("2026-11-26T15:00") as run:
            if run:
                await job()        # an exception here leaves the key open
                await run.done()   # fenced by the hold

    The same markers, steps and outcomes as the threaded one, interoperable with it across processes:
    ``async with`` holds the lock for the calling task and looks, under one deadline (``timeout`` covers
    the acquire and the look; LockTimeout once it passed, the lock released); ``await run.done()`` is not
    bounded by it. Cancelling the task (or a timeout around it) while it acquires or looks releases the
    lock: no node is left behind. Without ``async with``, hold the lock yourself and ``await run.look()``.
    Bad input raises at ``lock.once()``, before any request.
    """

    async def __aenter__(self) -> "Once":
        deadline = self._deadline()  # (before the acquire: it covers both)
        held = self.lock.hold(self.timeout)
        await held.__aenter__()
        try:
            await self._drive(self._look(), deadline)
        except BaseException:
            await held.__aexit__(None, None, None)
            raise
        self._held = held
        return self

    async def __aexit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        held, self._held = self._held, None
        if held is not None:
            await held.__aexit__(et, ev, tb)

    async def look(self) -> bool:
        """With the lock held by the calling task: whether the key is open (see
        :meth:`zkrecipes.once.Once.look`)."""
        opened: bool = await self._drive(self._look())
        return opened

    async def done(self) -> None:
        """Mark the key done, fenced by the hold (see :meth:`zkrecipes.once.Once.done`): LockLost with
        nothing written if the hold is lost or in doubt, LockError if the key was not open."""
        await self._drive(self._done())

    async def _drive(self, steps: Steps[Any], deadline: Optional[float] = None) -> Any:
        """Run ``steps`` on the running loop with the lock's retry policy, until ``deadline``."""
        lock = self.lock
        return await AioDriver(lock.client, deadline, lock.retry, path=lock.path).run(steps)
