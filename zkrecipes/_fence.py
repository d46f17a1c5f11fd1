"""The steps of a fenced commit that the threaded and the asyncio held transactions share (see
:mod:`zkrecipes.transaction`)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, NamedTuple, NoReturn, Sequence, Type, TypeVar

from kazoo.client import TransactionRequest
from kazoo.exceptions import ConnectionClosedError, RolledBackError, RuntimeInconsistency, SessionExpiredError

from . import _kazoo_ops
from ._kazoo import AsyncResult
from .errors import LockLost, TransactionFailed
from .session import Hold


class Fence(NamedTuple):
    """One hold a transaction is fenced by: where it is (for messages), the hold, and its lock's check."""

    where: str
    hold: Hold
    check: Callable[[Hold, str], Any]


F = TypeVar("F", bound="Fenced")


class Fenced(TransactionRequest):  # type: ignore[misc]  # kazoo is untyped
    """What a fenced commit does apart from waiting: the checks before sending, the fenced multi, and
    reading its results (shared by :class:`HeldTransaction` and ``zkrecipes.aio``'s, whose commit awaits).

    Made by a lock's ``transaction()``: ``client`` and ``path`` are the lock's, ``hold`` the one it is
    fenced by, and ``check(hold, what)`` the lock's own certainty check (raises LockLost; the asyncio
    one returns an awaitable), run before anything is sent. :meth:`joined` fences one by several holds."""

    def __init__(self, client: Any, path: str, hold: Hold, check: Callable[[Hold, str], Any]) -> None:
        super().__init__(client)
        self._fences = [Fence(f"{path} ({hold.node})", hold, check)]

    @classmethod
    def joined(cls: Type[F], parts: Sequence["Fenced"]) -> F:
        """One transaction fenced by every hold of ``parts`` (unused transactions of locks on one client,
        as their ``transaction()`` made them): its multi checks each hold's node, in that order, before
        your operations, and is sent only in the session that owns the first. ValueError if ``parts`` is
        empty, on several clients, or already has operations."""
        if not parts:
            raise ValueError("joined() needs at least one transaction")
        client = parts[0].client
        for part in parts:
            if part.client is not client:
                raise ValueError(f"{part._where}: on another client; one multi runs in one session")
            if part.operations or part.committed:
                raise ValueError(f"{part._where}: already has operations; join unused transactions")
        tx = cls(client, "", parts[0]._fences[0].hold, parts[0]._fences[0].check)
        tx._fences = [fence for part in parts for fence in part._fences]
        return tx

    @property
    def _where(self) -> str:
        return ", ".join(fence.where for fence in self._fences)

    def commit_async(self) -> NoReturn:
        """Not offered: the fence's outcome must be read before the results are returned."""
        raise TypeError("a held transaction is committed with commit()")

    def _refuse_released(self) -> None:
        for fence in self._fences:
            if fence.hold.released:
                raise LockLost(f"{fence.where}: released before the transaction was committed")

    def _send(self) -> AsyncResult:
        """Send the multi, fences first, once the holds were checked (see
        :func:`zkrecipes._kazoo_ops.commit_fenced`). A multi the server would refuse for its size raises
        ValueError, nothing sent (see :func:`check_size`)."""
        _kazoo_ops.refuse_committed(self)
        nodes = [fence.hold.node for fence in self._fences]
        check_size(self._where, self.operations, *nodes)
        self.committed = True
        return _kazoo_ops.commit_fenced(self.client, self.operations, self._fences[0].hold.session, *nodes)

    def _results(self, sent: AsyncResult) -> List[Any]:
        """kazoo's results of the user's operations; LockLost if the fence failed, TransactionFailed if
        one of the user's operations did (nothing applied either way)."""
        where = self._where
        try:
            results = sent.get()
        except (SessionExpiredError, ConnectionClosedError) as exc:  # never applied: the session is over
            raise LockLost(f"{where}: the session ended; transaction not applied") from exc
        n = len(self._fences)
        if len(results) != len(self.operations) + n:
            raise LockLost(f"{where}: sent in a new session (ours expired); transaction not applied")
        for fence, outcome in zip(self._fences, results):  # each True, or undone if another op failed
            if isinstance(outcome, BaseException) and not isinstance(outcome, _UNDONE):
                fence.hold.mark_lost()  # our node is gone: whoever deleted it, the hold protects nothing
                raise LockLost(f"{fence.where}: our node is gone; transaction not applied") from outcome
        ours = list(results[n:])
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


def request_size(operations: Iterable[Any], *fence_nodes: str) -> int:
    """An upper-bound estimate of a fenced multi's size on the wire: every operation's fields, a header
    per operation, the fences (a check of each of ``fence_nodes``) and the request and packet headers."""
    ops = list(operations)
    body = sum(9 + sum(_field_size(getattr(op, f)) for f in op._fields) for op in ops)
    fences = sum(9 + _field_size(node) + 4 for node in fence_nodes)
    return 4 + 8 + body + fences + 9


def check_size(where: str, operations: Iterable[Any], *fence_nodes: str) -> None:
    """Raise ValueError naming the size and the limit if ZooKeeper would refuse this multi for its size."""
    ops = list(operations)
    size = request_size(ops, *fence_nodes)
    if size > MAX_REQUEST_BYTES:
        raise ValueError(
            f"{where}: the transaction is {size} bytes ({len(ops)} operations); ZooKeeper refuses requests "
            f"over {JUTE_MAXBUFFER} bytes (jute.maxbuffer), and zkrecipes sends at most {MAX_REQUEST_BYTES}: "
            "nothing sent"
        )
