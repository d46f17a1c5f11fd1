"""The steps of a fenced commit that the threaded and the asyncio held transactions share (see
:mod:`zkrecipes.transaction`)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, NoReturn

from kazoo.client import TransactionRequest
from kazoo.exceptions import ConnectionClosedError, RolledBackError, RuntimeInconsistency, SessionExpiredError

from . import _kazoo
from ._kazoo import AsyncResult
from .errors import LockLost, TransactionFailed
from .session import Hold


class Fenced(TransactionRequest):  # type: ignore[misc]  # kazoo is untyped
    """What a fenced commit does apart from waiting: the checks before sending, the fenced multi, and
    reading its results (shared by :class:`HeldTransaction` and ``zkrecipes.aio``'s, whose commit awaits).

    Made by a lock's ``transaction()``: ``client`` and ``path`` are the lock's, ``hold`` the one it is
    fenced by, and ``check(hold, what)`` the lock's own certainty check (raises LockLost; the asyncio
    one returns an awaitable), run before anything is sent."""

    def __init__(self, client: Any, path: str, hold: Hold, check: Callable[[Hold, str], Any]) -> None:
        super().__init__(client)
        self._hold = hold
        self._check = check
        self._where = f"{path} ({hold.node})"

    def commit_async(self) -> NoReturn:
        """Not offered: the fence's outcome must be read before the results are returned."""
        raise TypeError("a held transaction is committed with commit()")

    def _refuse_released(self) -> None:
        if self._hold.released:
            raise LockLost(f"{self._where}: released before the transaction was committed")

    def _send(self) -> AsyncResult:
        """Send the multi, fence first, once the hold was checked (see :func:`zkrecipes._kazoo.commit_fenced`).
        A multi the server would refuse for its size raises ValueError, nothing sent (see :func:`check_size`)."""
        _kazoo.refuse_committed(self)
        check_size(self._where, self.operations, self._hold.node)
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


# ZooKeeper's packet limit: a server drops the connection of a client that sends a request longer than
# jute.maxbuffer (default 0xfffff bytes), and kazoo reconnects and sends it again -- a reconnect loop that
# suspends every hold on the client. We refuse before sending, a little under the default.
JUTE_MAXBUFFER = 0xFFFFF
MAX_REQUEST_BYTES = JUTE_MAXBUFFER - 4096  # headroom: headers, and a server's own accounting


def _field_size(value: Any) -> int:
    """Bytes one field of a request takes on the wire (jute: length-prefixed strings and buffers, ints)."""
    if isinstance(value, (bytes, bytearray)):
        return 4 + len(value)
    if isinstance(value, str):
        return 4 + len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):  # a list of ACLs
        return 4 + sum(_field_size(v) for v in value)
    if hasattr(value, "_fields"):  # an ACL or its Id: a record of fields
        return sum(_field_size(getattr(value, f)) for f in value._fields)
    return 8 if isinstance(value, int) and not -(2**31) <= value < 2**31 else 4  # int, bool, None: an int


def request_size(operations: Iterable[Any], fence_node: str) -> int:
    """An upper-bound estimate of a fenced multi's size on the wire: every operation's fields, a header
    per operation, the fence (a check of ``fence_node``) and the request and packet headers."""
    ops = list(operations)
    body = sum(9 + sum(_field_size(getattr(op, f)) for f in op._fields) for op in ops)
    fence = 9 + _field_size(fence_node) + 4
    return 4 + 8 + body + fence + 9


def check_size(where: str, operations: Iterable[Any], fence_node: str) -> None:
    """Raise ValueError naming the size and the limit if ZooKeeper would refuse this multi for its size."""
    ops = list(operations)
    size = request_size(ops, fence_node)
    if size > MAX_REQUEST_BYTES:
        raise ValueError(
            f"{where}: the transaction is {size} bytes ({len(ops)} operations); ZooKeeper refuses requests "
            f"over {JUTE_MAXBUFFER} bytes (jute.maxbuffer), and zkrecipes sends at most {MAX_REQUEST_BYTES}: "
            "nothing sent"
        )
