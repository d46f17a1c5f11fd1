"""aio.Semaphore: the semaphore's recipe (:mod:`zkrecipes.semaphore`) on the asyncio front, a lease per task."""

from __future__ import annotations

from typing import Awaitable, List, Optional

from .. import semaphore as _semaphore
from ._lock import Lock


class Lease(_semaphore.LeaseCore):
    """A lease from :meth:`aio.Semaphore.acquire_leases <zkrecipes.aio.Semaphore.acquire_leases>`: held
    until ``await lease.release()`` (or the end of ``async with lease:``), by no task -- any task of its
    event loop may release or check it. A lease dropped while held is released when it is
    garbage-collected, with a warning."""

    __slots__ = ()

    async def release(self) -> None:
        """Release the lease (delete its node); LockError if it was released already."""
        await self._sem.release()

    def check(self) -> Awaitable[None]:
        """As :meth:`zkrecipes.Lease.check`: raises at the call; awaited, also confirms a stalled hold."""
        checked: Awaitable[None] = self._sem.check()
        return checked

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    def __repr__(self) -> str:
        return f"<aio.Lease {self._sem.path!r} node={self.node!r} state={self.state}>"


class Semaphore(_semaphore.SemaphoreRecipe, Lock):
    """:class:`zkrecipes.Semaphore` for asyncio: at most ``max_leases`` holders of ``path`` at once,
    ``async with aio.Semaphore(zk, "/sem/payment-api", 5):``.

    The same nodes (``<host>-S<max_leases>-<seq>``), wait-rule (held while fewer than ``max_leases``
    nodes are ahead; a waiter watches the ``max_leases`` nearest), queue order, max_leases check
    (:class:`~zkrecipes.LockError` from acquire, our node deleted) and session-loss states as the
    threaded class, and interoperable with it across processes; the aio lock API (see
    :class:`aio.FairLock <zkrecipes.aio.FairLock>`).

    Tasks: each asyncio task takes its own lease (its own node), so one process may hold several; a
    task's lease is reentrant (each acquire needs a release, the last deletes the node) and shared by
    its Semaphore objects on the same client and path. ``token``, ``node``, ``is_held``, ``state``,
    :meth:`check`, :meth:`release` and :meth:`transaction` answer for the calling task's lease (outside
    a task: none); ``lost`` and listeners are the object's, told of every lease it hands out -- give
    each task its own Semaphore object (cheap) if it needs its own. With ``owner="object"`` the object
    holds one lease that no task owns; :meth:`acquire_leases` hands out :class:`Lease` objects.
    """

    async def acquire_leases(self, qty: int = 1, timeout: Optional[float] = None) -> List[Lease]:
        """As :meth:`zkrecipes.Semaphore.acquire_leases` (await it): ``qty`` leases, all or none, ``[]`` on
        the timeout or :meth:`cancel`; cancelling the task deletes every node taken."""
        sems, blocking, deadline = self._lease_request(qty, timeout)
        self._bind()
        got = await self._run(self._take_leases(sems, blocking), deadline, not blocking)
        return [Lease(sem) for sem in sems] if got else []

    async def lease_holders(self) -> List[Optional[str]]:
        """As :meth:`zkrecipes.Semaphore.lease_holders` (await it): the holders' identifiers in queue order,
        None for a holder without one."""
        return await self._run(self._lease_holders())

    def __repr__(self) -> str:
        return f"<aio.Semaphore {self.path!r} max_leases={self.max_leases}>"
