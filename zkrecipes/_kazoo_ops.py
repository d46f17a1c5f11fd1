"""The seam's less travelled part: ZooKeeper requests kazoo does not expose, and cleanups of abandoned ones.

TTL nodes (createTTL), removeWatches, multis fenced by our node's session (held transactions, ``once``),
the test kit twin's request numbering, and the callbacks that undo a create or a watch whose run gave up on
it. Like :mod:`zkrecipes._kazoo`, each function names the private state of kazoo it relies on
(2.9.0-2.11.0); tests/test_kazoo_seam.py checks them against a real ensemble.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Callable, List, Sequence, Tuple

import kazoo.exceptions
from kazoo.client import KazooClient, TransactionRequest
from kazoo.protocol.serialization import (
    CheckVersion,
    Create,
    Create2,
    MultiHeader,
    SetData,
    Transaction,
    ZnodeStat,
    int_struct,
    long_struct,
    read_string,
    stat_struct,
    write_string,
)
from kazoo.security import ACL

from ._kazoo import AsyncResult, CreateContainer, Request, outcome


class CreateTTL(collections.namedtuple("CreateTTL", "path data acl flags ttl")):
    """createTTL (opcode 21; ZooKeeper >= 3.5.3 started with ``-Dzookeeper.extendedTypesEnabled=true``,
    else the server answers UnimplementedError): with flags 5 (PERSISTENT_WITH_TTL) a persistent node the
    server deletes once it has had no child and no change for ``ttl`` ms (its container reaper looks every
    ``znode.container.checkIntervalMs``). Its reply, alone or in a multi, is path + stat, like create2.
    kazoo 2.9.0-2.11.0 has no TTL nodes."""

    type = 21

    def serialize(self) -> bytearray:
        b = bytearray(Create2(self.path, self.data, self.acl, self.flags).serialize())
        b.extend(long_struct.pack(self.ttl))
        return b

    deserialize = Create2.deserialize


PERSISTENT_WITH_TTL = 5  # CreateMode flags of a createTTL


def add_create_ttl(tx: TransactionRequest, path: str, data: bytes, acl: Sequence[ACL], ttl_ms: int) -> None:
    """Add a createTTL of ``path`` to kazoo's transaction ``tx`` (``_add``; 2.9.0-2.11.0). Its result reads
    as kazoo's create results do, the path, once the multi is sent by :func:`commit_fenced`."""
    tx._add(CreateTTL(tx.client.chroot + path, data, list(acl), PERSISTENT_WITH_TTL, ttl_ms))


class RemoveWatches:
    """removeWatches (opcode 18, ZooKeeper >= 3.5): drop our watch server-side."""

    type = 18

    def __init__(self, path: str, watcher_type: int) -> None:
        self.path = path
        self.watcher_type = watcher_type  # 1 children, 2 data, 3 any

    def serialize(self) -> bytearray:
        b = bytearray()
        b.extend(write_string(self.path))
        b.extend(int_struct.pack(self.watcher_type))
        return b

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> bool:
        return True


def register_nowatcher() -> None:
    """Teach kazoo < 2.11 the server's NOWATCHER (-121) error: the reply to a removeWatches whose watch
    has just fired. An unknown code raises in kazoo's I/O thread and kills the connection.
    Relies on ``kazoo.exceptions.EXCEPTIONS`` and ``_zookeeper_exception`` (2.9.0-2.11.0)."""
    if -121 in kazoo.exceptions.EXCEPTIONS:
        return

    @kazoo.exceptions._zookeeper_exception(-121)
    class NoWatcherError(kazoo.exceptions.ZookeeperError):  # type: ignore[misc]
        """The watch to remove was not there (it had fired)."""


register_nowatcher()


FAR_XID = 2**31 - 2  # kazoo numbers requests 1, 2, ... on each connection, wrapping past 2**31 - 1 to 1


def number_far(client: KazooClient) -> None:
    """Number the next request ``client`` sends on its connection :data:`FAR_XID` (and on from there), not
    the next small number. For a second connection to another client's session (the test kit's twin): its
    requests must never share an xid with those of the session's own connection, numbered from 1 on each
    connection. A follower takes a committed write for the local write it waits on with the same session
    and xid: a twin's Close at xid 1, committed while the client's first request on a new connection (xid
    1, a sync) waited there, answered that request, which was then answered again -- kazoo's connection
    thread dies of "xids do not match" and the client stays closed. Relies on ``ConnectionHandler._xid``,
    advanced by ``_send_request`` and reset to 0 on each connection (2.9.0-2.11.0)."""
    client._connection._xid = FAR_XID - 1


def delete_if_created(client: KazooClient) -> Callable[[AsyncResult], None]:
    """A callback for a create abandoned mid-flight: if it succeeds after all, delete the node."""

    def cb(ar: AsyncResult) -> None:
        made = outcome(ar)
        if isinstance(made, BaseException):
            return
        made = made[0] if isinstance(made, tuple) else made
        client.delete_async(made[len(client.chroot):] if client.chroot else made)  # the reply carries the chroot

    return cb


def forget_watch(client: KazooClient, path: str, fn: Callable[..., Any]) -> Callable[[AsyncResult], None]:
    """A callback for a watch request abandoned mid-flight: once it succeeded, drop the watch it set
    (kazoo registers it just after completing the reply: look for it a moment)."""

    def cb(ar: AsyncResult) -> None:
        if isinstance(outcome(ar), BaseException):
            return  # no node, no watch
        for _ in range(100):
            if fn in data_watchers(client, path):
                remove_data_watch(client, path, fn)
                return
            time.sleep(0.001)

    return cb


def remove_data_watch(client: KazooClient, path: str, fn: Callable[..., Any]) -> None:
    """Forget our data watch ``fn`` on ``path`` client-side, and server-side if no other remains.
    Relies on ``_data_watchers`` (a dict of sets keyed by chrooted path) and ``_call`` (2.9.0-2.11.0)."""
    full = client.chroot + path
    watchers = client._data_watchers.get(full)
    if watchers is None or fn not in watchers:
        return
    watchers.discard(fn)
    if watchers:
        return
    client._data_watchers.pop(full, None)
    if client.connected:
        ar = client.handler.async_result()
        client._call(RemoveWatches(full, 2), ar)  # result ignored: the watch may have just fired


def data_watchers(client: KazooClient, path: str) -> frozenset:  # type: ignore[type-arg]
    """The data watch functions kazoo keeps for ``path`` (``_data_watchers``; 2.9.0-2.11.0)."""
    return frozenset(client._data_watchers.get(client.chroot + path, ()))


class _FencedMulti(Transaction):  # type: ignore[misc]  # kazoo's requests are untyped NamedTuples
    """A multi whose first op checks our node, serialized only in our node's session: if kazoo's I/O
    thread sends it in any other session (ours expired between our last look and the send), it becomes a
    multi that cannot succeed, so nothing is applied. Relies on ``_session_id``, set by the connection
    thread before it sends queued requests on a new session (2.9.0-2.11.0)."""

    guard: Tuple[KazooClient, int, str]

    def serialize(self) -> bytearray:
        client, session, node = self.guard
        if client._session_id != session:  # no node has version -2: the multi fails, nothing applied
            return Transaction([CheckVersion(node, -2)]).serialize()  # type: ignore[no-any-return]
        return super().serialize()  # type: ignore[no-any-return]

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> List[Any]:
        """kazoo's multi results, also for the create2-family operations it does not read (createTTL: the
        server answers path + stat, header type create2), each read as kazoo reads a create: the path."""
        header = MultiHeader(None, False, None)
        results: List[Any] = []
        while not header.done:
            if header.type is not None:
                response: Any
                if header.type == Create.type:
                    response, offset = read_string(buf, offset)
                elif header.type in (Create2.type, CreateContainer.type, CreateTTL.type):
                    response, offset = read_string(buf, offset)
                    offset += stat_struct.size
                elif header.type == SetData.type:
                    response = ZnodeStat._make(stat_struct.unpack_from(buf, offset))
                    offset += stat_struct.size
                elif header.type == -1:
                    err = int_struct.unpack_from(buf, offset)[0]
                    offset += int_struct.size
                    response = kazoo.exceptions.EXCEPTIONS[err]()
                else:  # delete, check
                    response = True
                results.append(response)
            header, offset = MultiHeader.deserialize(buf, offset)
        return results


def commit_fenced(client: KazooClient, operations: Sequence[Request], session: int, *nodes: str) -> AsyncResult:
    """Send ``operations`` (paths already chrooted) as one multi preceded by a check that each of ``nodes``
    exists (one or more: a MultiLock's holds), sent only in ``session`` (``_call``; 2.9.0-2.11.0). Its
    result: kazoo's list, fences first; a list of one failure when the session was not ours."""
    full = [client.chroot + node for node in nodes]
    multi = _FencedMulti([CheckVersion(node, -1) for node in full] + list(operations))
    multi.guard = (client, session, full[0])
    ar = client.handler.async_result()
    client._call(multi, ar)
    return ar


def refuse_committed(tx: TransactionRequest) -> None:
    """kazoo's own refusal of a transaction that was already committed (ValueError), before ours is sent."""
    tx._check_tx_state()
