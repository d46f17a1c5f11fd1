"""Fenced ZooKeeper writes: a kazoo transaction that commits only while a hold lives (etcd's ``IsOwner()``).

``lock.transaction()`` (every lock, the semaphore, ``LeaderElection``) returns a :class:`HeldTransaction`:
kazoo's :class:`~kazoo.client.TransactionRequest` (``create``, ``delete``, ``set_data``, ``check``), whose
:meth:`~HeldTransaction.commit` adds one first operation, a check that our node still exists, and sends
the whole multi only in the session that owns that node. Our node is ephemeral and its path is ours while
that session lives, so the multi applies only while the hold does; otherwise nothing is applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, NoReturn

from kazoo.client import TransactionRequest
from kazoo.exceptions import ConnectionClosedError, RolledBackError, SessionExpiredError

from . import _kazoo
from ._kazoo import AsyncResult
from .errors import LockLost
from .session import Hold

if TYPE_CHECKING:
    from ._participant import Participant


class _Fenced(TransactionRequest):  # type: ignore[misc]  # kazoo is untyped
    """What a fenced commit does apart from waiting: the checks before sending, the fenced multi, and
    reading its results (shared by :class:`HeldTransaction` and ``zkrecipes.aio``'s, whose commit awaits)."""

    def __init__(self, owner: "Participant", hold: Hold) -> None:
        super().__init__(owner.client)
        self._owner = owner
        self._hold = hold
        self._where = f"{owner.path} ({hold.node})"

    def commit_async(self) -> NoReturn:
        """Not offered: the fence's outcome must be read before the results are returned."""
        raise TypeError("a held transaction is committed with commit()")

    def _refuse_released(self) -> None:
        if self._hold.released:
            raise LockLost(f"{self._where}: released before the transaction was committed")

    def _send(self) -> AsyncResult:
        """Send the multi, fence first, once the hold was checked (see :func:`zkrecipes._kazoo.commit_fenced`)."""
        self._check_tx_state()
        self.committed = True
        return _kazoo.commit_fenced(self.client, self.operations, self._hold.session, self._hold.node)

    def _results(self, sent: AsyncResult) -> List[Any]:
        """kazoo's results of the user's operations, or LockLost if the fence failed (nothing applied)."""
        where = self._where
        try:
            results = sent.get()
        except (SessionExpiredError, ConnectionClosedError) as exc:  # never applied: the session is over
            raise LockLost(f"{where}: the session ended; transaction not applied") from exc
        if len(results) != len(self.operations) + 1:
            raise LockLost(f"{where}: sent in a new session (ours expired); transaction not applied")
        fence = results[0]  # True, or RolledBackError if it passed and one of the user's ops failed
        if isinstance(fence, BaseException) and not isinstance(fence, RolledBackError):
            self._hold.mark_lost()  # our node is gone: whoever deleted it, the hold no longer protects anything
            raise LockLost(f"{where}: our node is gone; transaction not applied") from fence
        return list(results[1:])


class HeldTransaction(_Fenced):
    """A kazoo transaction fenced by a hold; made by ``transaction()`` of a lock, semaphore or election.

    Build it as kazoo's ``TransactionRequest`` (also as a context manager, which commits on exit).
    :meth:`commit` returns kazoo's list of results, one per operation added (exception instances for a
    failed transaction, as kazoo does), or raises :class:`~zkrecipes.LockLost` -- nothing applied -- when
    the hold is gone: lost, released, uncertain (suspended, unless the owner tolerates it; unconfirmed
    after the process stood still), or found gone by ZooKeeper at commit. A connection lost while the
    commit is in flight raises kazoo's ``ConnectionLoss``: then, as with any ZooKeeper write, the outcome
    is unknown. (The asyncio locks' ``transaction()`` gives :class:`zkrecipes.aio.HeldTransaction`,
    whose commit is awaited.)
    """

    def commit(self) -> List[Any]:
        """Commit while the hold lives: kazoo's results, or LockLost with nothing applied."""
        self._refuse_released()
        self._owner._check_hold(self._hold, "hold")  # lost, suspended or unconfirmed: refuse before sending
        return self._results(self._send())
