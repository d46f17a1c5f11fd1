"""aio.LeaderLatch: the latch's core (:mod:`zkrecipes.latch`) run by a task on the event loop."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Generator, Optional

from ..errors import ClientClosed, LockError
from ..latch import LatchCore, LatchRun
from ..naming import validate_timeout
from ._lock import AsyncOnly
from .election import LeaderElection


class LatchElection(LatchRun, LeaderElection):
    """The :class:`aio.LeaderElection <LeaderElection>` an :class:`aio.LeaderLatch <LeaderLatch>` runs."""

    def _rearm(self) -> None:
        super()._rearm()
        self._bind()

    async def _background(self) -> None:
        """Lead, step down when the term ends, campaign again; until close() resigns."""
        await self._terms(_forever, (), {}, requeue=True, fresh=False)


class LeaderLatch(AsyncOnly, LatchCore):
    """Leadership that campaigns by itself in a task: :class:`zkrecipes.LeaderLatch` for asyncio.

    ``await latch.start()`` (from a coroutine) campaigns in one task of its own; ``await latch.wait()``,
    :attr:`has_leadership` and listeners (``fn(True)`` / ``fn(False)``, on the event loop's thread) follow
    leadership; after a loss it campaigns again by itself. ``await latch.close()`` (or leaving ``async
    with``) resigns: our node deleted, the task done. Side effects go through :attr:`election` (an
    :class:`aio.LeaderElection <LeaderElection>`): ``await latch.election.check()``, ``latch.election.token``.
    """

    _election_class = LatchElection
    election: LatchElection

    def _setup(self) -> None:
        self._task: "Optional[asyncio.Task[Any]]" = None

    async def _wait(self, settled: Callable[[], bool], timeout: Optional[float]) -> None:
        """Wait on the loop (the election's driver) until ``settled()`` or ``timeout``; with a stopped
        client, until the background task has ended with it."""
        try:
            await self._run_until(settled, timeout)
        except ClientClosed:
            await self._join(timeout)

    async def _join(self, timeout: Optional[float] = None) -> None:
        """Wait (up to ``timeout``) for the background task to end, unless called from it; not cancelled
        with the caller."""
        task = self._task
        if task is None or task is asyncio.current_task():
            return
        if timeout is None:
            await asyncio.shield(task)
        else:
            await asyncio.wait([task], timeout=timeout)

    def start(self) -> "Started":
        """Start campaigning in a task on the running loop (at most one per latch), at the call.

        Awaited, it returns once the campaign leads or waits in the queue (one round trip; without a
        connection, it waits for one as an acquire does), and raises
        what :meth:`aio.FairLock.acquire <zkrecipes.aio.FairLock.acquire>` raises at once, the latch then
        closed and its task done: :class:`~zkrecipes.ClientClosed` if the client is stopped or was never
        started, LockError for a node on the path that this node format cannot queue with (our node is
        deleted). Not awaited, such a failure is kept in :attr:`error` and raised by :meth:`wait`. Raises
        LockError at the call outside a running loop, or if the latch was started before or is closed."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise LockError("an aio.LeaderLatch runs on an event loop: start it from a coroutine") from None
        self._begin()
        self._task = loop.create_task(self._life())
        return Started(self._first_step)

    async def _first_step(self) -> None:
        try:
            await self._wait(self._begun, None)
        except BaseException:  # the caller was cancelled: nothing left campaigning
            await self.close()
            raise
        if self.error is not None:
            await self.close()  # (the task is done, or about to be)
            raise self.error

    async def _life(self) -> None:
        error = None
        try:
            await self.election._background()
        except Exception as exc:  # a stopped client, a foreign node format: nothing to campaign with
            error = exc
        finally:
            self._ended(error)

    async def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until this latch leads and every listener was told so; True then. False when ``timeout``
        passes, or at once if the latch is not started or is closed (also by :meth:`close` meanwhile).
        Raises :attr:`error` if the background campaign failed (a stopped client: ClientClosed)."""
        await self._wait(self._settled, validate_timeout(timeout))
        return self._outcome()

    async def close(self) -> None:
        """Resign and stop: a pending campaign ends, a leader deletes its node (listeners told ``False``)
        and the next candidate takes over; returns once the task is done (its end is not cancelled with
        the caller). Idempotent; callable from any task, and before :meth:`start`."""
        if self._close():
            await self.election.resign()
        await self._join()

    async def __aenter__(self) -> "LeaderLatch":
        """``async with aio.LeaderLatch(zk, path) as latch:`` starts it (unless started), closes it on exit."""
        if not self._started:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Started:
    """What :meth:`LeaderLatch.start` returns: the campaign already runs; awaiting this waits for its first
    step and raises its failure. Not a coroutine: leaving it unawaited is not an error."""

    __slots__ = ("_first",)

    def __init__(self, first: Callable[[], Any]) -> None:
        self._first = first

    def __await__(self) -> Generator[Any, None, None]:
        return self._first().__await__()  # type: ignore[no-any-return]


async def _forever() -> None:
    """A latch's leader's work: hold leadership until the term ends (the task is cancelled then)."""
    await asyncio.get_running_loop().create_future()
