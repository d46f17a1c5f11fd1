"""aio.Semaphore: the semaphore's recipe (:mod:`zkrecipes.semaphore`) on the asyncio front, a lease per task."""

from __future__ import annotations

from .. import semaphore as _semaphore
from ._lock import Lock


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
    each task its own Semaphore object (cheap) if it needs its own.
    """

    def __repr__(self) -> str:
        return f"<aio.Semaphore {self.path!r} max_leases={self.max_leases}>"
