"""Fenced ZooKeeper writes for asyncio: :mod:`zkrecipes.transaction`'s checks and multi, with the commit
awaited (kazoo's reply is handed to the loop like every other request of :mod:`zkrecipes.aio`)."""

from __future__ import annotations

import asyncio
from typing import Any, List, NoReturn, Optional

from .._fence import Fenced
from . import _driver


class HeldTransaction(Fenced):
    """:class:`zkrecipes.HeldTransaction` for asyncio, made by ``transaction()`` of an aio lock, semaphore
    or election: ``await tx.commit()``, or ``async with lock.transaction() as tx:`` (commits on exit
    unless the block raises).

    The same fence and outcomes, in both forms: kazoo's list of results, or nothing applied and
    :class:`~zkrecipes.TransactionFailed` (naming the operation ZooKeeper refused) or
    :class:`~zkrecipes.LockLost` when the hold is gone (lost, released, suspended unless tolerated,
    unconfirmed after the process stood still -- confirmed with an awaited read -- or found gone by
    ZooKeeper). Nothing blocks the loop. A commit whose task is cancelled once the multi is sent has, like a
    connection lost then, an unknown outcome.
    """

    async def commit(self) -> List[Any]:
        """Commit while the hold lives: kazoo's results; LockLost or TransactionFailed with nothing applied."""
        self._refuse_released()
        for fence in self._fences:  # refuse before sending, as the threaded commit
            await fence.check(fence.hold, "hold")
        sent = self._send()
        if not sent.ready():
            await _driver.bridge(asyncio.get_running_loop(), sent)
        return self._results(sent)

    def __enter__(self) -> NoReturn:
        raise TypeError("an asyncio held transaction is used with 'async with' (its commit is awaited)")

    async def __aenter__(self) -> "HeldTransaction":
        return self

    async def __aexit__(self, exc_type: Optional[type], exc: Optional[BaseException], tb: Any) -> None:
        if exc_type is None:
            await self.commit()
