"""The steps of a fenced commit that the threaded and the asyncio held transactions share (see
:mod:`zkrecipes.transaction`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, NoReturn

from kazoo.client import TransactionRequest
from kazoo.exceptions import ConnectionClosedError, RolledBackError, RuntimeInconsistency, SessionExpiredError

from . import _kazoo
from ._kazoo import AsyncResult
from .errors import LockLost, TransactionFailed
from .session import Hold

if TYPE_CHECKING:
    from ._participant import Participant


class Fenced(TransactionRequest):  # type: ignore[misc]  # kazoo is untyped
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
        """kazoo's results of the user's operations; LockLost if the fence failed, TransactionFailed if
        one of the user's operations did (nothing applied either way)."""
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
        ours = list(results[1:])
        failed = [(i, r) for i, r in enumerate(ours) if isinstance(r, BaseException)]
        if failed:  # the failing operation's own error; the others read RolledBackError or RuntimeInconsistency
            i, error = next(((i, r) for i, r in failed if not isinstance(r, _UNDONE)), failed[0])
            op = self.operations[i]
            what = f"{type(op).__name__.lower()}({self.client.unchroot(op.path)!r})"  # as the caller wrote it
            raise TransactionFailed(
                f"{where}: transaction not applied: operation {i}, {what}, failed with "
                f"{type(error).__name__}", ours, i, op, error,
            ) from error
        return ours


_UNDONE = (RolledBackError, RuntimeInconsistency)  # what a multi's operations read beside the one that failed
