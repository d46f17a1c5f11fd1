"""The one listing of who holds and who waits at a lock path, as steps (no I/O): what ``contenders()``,
``zkrecipes status`` (and ``--watch``), ``LeaderWatch``, revoke, break and the tooz backend read. Any node
format; whether a node holds is the wait-rules' answer over the listing (:func:`zkrecipes._engine.holding`).
"""

from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from . import formats, naming
from ._engine import holding
from ._steps import Read, ReadAll, Steps, Watched
from .naming import Contender, QueueNode


class Listed(NamedTuple):
    """One node of :func:`listing`: the public :class:`~zkrecipes.Contender`, its node format (None:
    ExclusiveLock's ``lock`` or a name no format claims), its parsed name and the ``(data, stat)`` read with
    it -- what ``zkrecipes status`` shows and :mod:`zkrecipes.revoke` marks or deletes by (``stat.version``)."""

    contender: Contender
    found: Optional[formats.Found]
    node: QueueNode
    data: bytes
    stat: ZnodeStat


_EXCLUSIVE = QueueNode(formats.EXCLUSIVE_NODE, "", naming.WRITE, 0)  # its sequence: the czxid, once read


def ranked(children: Sequence[str]) -> List[Tuple[Optional[formats.Found], QueueNode, bool]]:
    """The children of a lock path in queue order (any node format), each identified and whether it holds
    (:func:`holding`); ExclusiveLock's ``lock`` first, a holder (no sequence: no place in the queue's order)."""
    nodes = formats.sort_any(children)
    out = [(found, n, holds) for (found, n), holds in zip(nodes, holding([n for _, n in nodes]))]
    if formats.EXCLUSIVE_NODE in children:
        out.insert(0, (None, _EXCLUSIVE, True))
    return out


def listing(
    path: str,
    synced: bool = False,
    watch: Optional[Callable[[Any], None]] = None,
    exclusive: bool = False,
    holders: bool = False,
) -> Steps[List[Listed]]:
    """Who holds and who waits at ``path``: one listing (:func:`ranked`), then every node's data read,
    pipelined; nodes gone between the two are left out. ``synced``: a sync is pipelined before the listing
    (our server has then seen every write committed before it). ``watch``: a child watch is left on
    ``path`` (an exists watch while it is missing, :class:`Watched`). ``exclusive``: ExclusiveLock's
    ``lock`` node too. ``holders``: only the nodes that hold are read and returned. [] if ``path`` does not
    exist; connection errors propagate."""
    try:
        if watch is None:
            children = yield Read("get_children", path, synced=synced)
        else:
            children = yield from _watched_children(path, watch, synced)
    except NoNodeError:  # never used, or an unused container parent was reaped: nobody there
        return []
    nodes = [r for r in ranked(children) if (exclusive or r[1] is not _EXCLUSIVE) and (r[2] or not holders)]
    replies = yield ReadAll([f"{path}/{n.name}" for _, n, _ in nodes])
    out = []
    for (found, n, holds), reply in zip(nodes, replies):
        if isinstance(reply, NoNodeError):
            continue
        if isinstance(reply, BaseException):
            raise reply
        data, stat = reply
        if n is _EXCLUSIVE:  # as ExclusiveLock's contenders(): the host its data names, the czxid as sequence
            n = QueueNode(n.name, naming.read_data(data).get("host") or "", naming.WRITE, stat.czxid)
        out.append(Listed(formats.contender(found, n, data, holds, stat.czxid), found, n, data, stat))
    return out


def _watched_children(path: str, watch: Callable[[Any], None], synced: bool) -> Steps[List[str]]:
    """The children of ``path`` with a child watch; NoNodeError with an exists watch if it is missing (listed
    again if it was made between the two)."""
    while True:
        try:
            children: List[str] = yield Watched("get_children", path, watch, synced)
            return children
        except NoNodeError:
            if (yield Watched("exists", path, watch)) is None:
                raise


def contenders(path: str) -> Steps[List[Contender]]:
    """Every node of the queue under ``path`` in order, as :func:`listing` reads it: with the data its owner
    wrote, in any node format (zkrecipes, kazoo, Curator), whether it holds and its token. [] if the path
    does not exist; connection errors propagate."""
    return [x.contender for x in (yield from listing(path))]
