"""aio.LeaderLatch: the latch's core (:mod:`zkrecipes.latch`) run by a task on the event loop."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional, Set

from ..errors import LockError
from ..latch import LatchCore, LatchRun
from ..naming import validate_timeout
from .election import LeaderElection


class LatchElection(LatchRun, LeaderElection):
    """The :class:`aio.LeaderElection <LeaderElection>` an :class:`aio.LeaderLatch <LeaderLatch>` runs."""

    def _rearm(self) -> None:
        super()._rearm()
        self._bind()

    async def _background(self) -> None:
        """Lead, step down when the term ends, campaign again; until close() resigns."""
        await self._terms(_forever, (), {}, requeue=True, fresh=False)


class LeaderLatch(LatchCore):
    """Leadership that campaigns by itself in a task: :class:`zkrecipes.LeaderLatch` for asyncio.

    ``latch.start()`` (from a coroutine) campaigns in one task of its own; ``await latch.wait()``,
    :attr:`has_leadership` and listeners (``fn(True)`` / ``fn(False)``, on the event loop's thread) follow
    leadership; after a loss it campaigns again by itself. ``await latch.close()`` (or leaving ``async
    with``) resigns: our node deleted, the task done. Side effects go through :attr:`election` (an
    :class:`aio.LeaderElection <LeaderElection>`): ``await latch.election.check()``, ``latch.election.token``.
    """

    _election_class = LatchElection
    election: LatchElection

    def _setup(self) -> None:
        self._task: "Optional[asyncio.Task[Any]]" = None
        self._waiters: "Set[asyncio.Future[None]]" = set()

    def _wake(self) -> None:  # on the loop
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)

    def start(self) -> None:
        """Start campaigning in a task on the running loop and return. Raises LockError outside a running
        loop, or if the latch was started before or is closed."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise LockError("an aio.LeaderLatch runs on an event loop: start it from a coroutine") from None
        self._begin()
        self._task = loop.create_task(self._life())

    async def _life(self) -> None:
        error = None
        try:
            await self.election._background()
        except Exception as exc:  # a stopped client, a foreign node format: nothing to campaign with
            error = exc
        finally:
            self._ended(error)

    async def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until this latch leads; True then. False when ``timeout`` passes, or at once if the latch
        is not started or is closed (also by :meth:`close` meanwhile)."""
        timeout = validate_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        loop = asyncio.get_running_loop()
        while not self._settled():
            fut: "asyncio.Future[None]" = loop.create_future()
            self._waiters.add(fut)
            try:
                await asyncio.wait_for(fut, None if deadline is None else max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                break
            finally:
                self._waiters.discard(fut)
        return self.has_leadership

    async def close(self) -> None:
        """Resign and stop: a pending campaign ends, a leader deletes its node (listeners told ``False``)
        and the next candidate takes over; returns once the task is done (its end is not cancelled with
        the caller). Idempotent; callable from any task, and before :meth:`start`."""
        if self._close():
            await self.election.resign()
        task = self._task
        if task is not None and task is not asyncio.current_task():
            await asyncio.shield(task)

    async def __aenter__(self) -> "LeaderLatch":
        """``async with aio.LeaderLatch(zk, path) as latch:`` starts it (unless started), closes it on exit."""
        if not self._started:
            self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _forever() -> None:
    """A latch's leader's work: hold leadership until the term ends (the task is cancelled then)."""
    await asyncio.get_running_loop().create_future()
