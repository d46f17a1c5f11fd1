"""Fenced ZooKeeper writes: a kazoo transaction that commits only while a hold lives (etcd's ``IsOwner()``).

``lock.transaction()`` (every lock, the semaphore, ``LeaderElection``) returns a :class:`HeldTransaction`:
kazoo's :class:`~kazoo.client.TransactionRequest` (``create``, ``delete``, ``set_data``, ``check``), whose
:meth:`~HeldTransaction.commit` adds one first operation, a check that our node still exists, and sends
the whole multi only in the session that owns that node. Our node is ephemeral and its path is ours while
that session lives, so the multi applies only while the hold does; otherwise nothing is applied.
"""

from __future__ import annotations

from typing import Any, List

from ._fence import Fenced


class HeldTransaction(Fenced):
    """A kazoo transaction fenced by a hold; made by ``transaction()`` of a lock, semaphore or election.

    Build it as kazoo's ``TransactionRequest`` (also as a context manager, which commits on exit).
    :meth:`commit` (and leaving the ``with`` block without an exception) returns kazoo's list of results,
    one per operation added, or raises with nothing applied: :class:`~zkrecipes.LockLost` when the hold is
    gone (lost, released, uncertain -- suspended, unless the owner tolerates it; unconfirmed after the
    process stood still -- or found gone by ZooKeeper at commit), and :class:`~zkrecipes.TransactionFailed`,
    naming the operation, when ZooKeeper refused one of yours. A connection lost while the commit is in
    flight raises kazoo's ``ConnectionLoss``: then, as with any ZooKeeper write, the outcome is unknown.
    (The asyncio locks' ``transaction()`` gives :class:`zkrecipes.aio.HeldTransaction`, whose commit is
    awaited.)
    """

    def commit(self) -> List[Any]:
        """Commit while the hold lives: kazoo's results; LockLost or TransactionFailed with nothing applied."""
        self._refuse_released()
        for fence in self._fences:  # lost, suspended, unconfirmed: refuse first
            fence.check(fence.hold, "hold")
        return self._results(self._send())
