"""ExclusiveLock: one ephemeral node ``<path>/lock``; losers watch it and race again when it goes.

The parent is listed with each create (one round trip): a node of another recipe on the path refuses the
lock (:meth:`zkrecipes.formats.NodeFormat.alone`), as the queue recipes refuse ``lock``."""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

from kazoo.exceptions import NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.security import ACL

from . import _engine, formats, naming
from ._lock import Lock, LockCore
from ._steps import SESSION, SLEEP, UNWATCH, Delete, Entry, Read, Steps, Taken, Watch
from .formats import NodeFormat
from .naming import Contender

NODE = formats.EXCLUSIVE_NODE


def race(
    parent: str,
    acl: Sequence[ACL],
    name: str,
    data: bytes,
    guid: str,
    on_ahead: Optional[Callable[[int], None]] = None,
    fmt: NodeFormat = formats.get(formats.ZKRECIPES, "exclusive"),
    peek: bool = False,
) -> Steps[Entry]:
    """Whoever creates ``<parent>/<name>`` holds it; the others watch it and race again when it goes
    (``on_ahead(1)`` as :func:`zkrecipes._engine.acquire`'s: the holder is ahead). The parent is listed in the
    same round trip as each create: a node of another recipe there (``fmt.alone``) raises LockError, our
    node deleted.
    Of two recipes that create at once, the later create's listing shows the earlier node: never both held.
    With ``peek`` (a non-blocking attempt) the parent is listed first: Taken if ``name`` is there,
    LockError for a node of another recipe, nothing written either way."""
    path = f"{parent}/{name}"
    if peek:
        try:
            children = yield Read("get_children", parent)
        except NoNodeError:  # a new key: nobody there
            children = []
        fmt.alone(parent, children, written=False)
        if name in children:
            raise Taken()
    while True:
        try:
            entry, children = yield from _engine.create(parent, acl, name, data, guid, sequence=False, listing=True)
        except NodeExistsError:  # someone holds it
            pass
        else:
            granted = yield from _alone(parent, entry, children, fmt)
            if granted is not None:
                return granted
            continue
        try:
            stat = yield Watch(path)
        except SessionExpiredError:
            continue
        if stat is None:
            continue
        if _engine.owns(stat, (yield SESSION)):  # a lost create reply of ours?
            entry_or_none = yield from _engine.find_own(parent, name, guid, sequence=False)
            if entry_or_none is not None:
                yield UNWATCH
                granted = yield from _alone(parent, entry_or_none, None, fmt)
                if granted is not None:
                    return granted
                continue
        if on_ahead is not None:
            on_ahead(1)
        yield SLEEP


def _alone(parent: str, entry: Entry, children: Optional[List[str]], fmt: NodeFormat) -> Steps[Optional[Entry]]:
    """``entry`` once the listing taken after its create (``children``, read now if None) shows no node of
    another recipe; else our node is deleted and LockError raised. None if the parent (so our node) is gone."""
    try:
        if children is None:
            children = yield Read("get_children", parent)
        fmt.alone(parent, children)
    except NoNodeError:  # the parent went, so our node went first (its session ended)
        return None
    except GeneratorExit:
        raise
    except BaseException:
        yield Delete(entry.path, entry.session)
        raise
    return entry


class ExclusiveRecipe(LockCore):
    """The recipe, for both fronts: one node, raced for (:func:`race`)."""

    _gate_key = "exclusive"
    _recipe = "exclusive"  # zkrecipes' own format only
    _title = "ExclusiveLock"
    _metric = "exclusive"

    def _steps(self, peek: bool = False) -> Steps[Entry]:
        guid = naming.new_guid()
        data = naming.node_data(self.identifier, guid, self.host)
        return race(self.path, self._acl, NODE, data, guid, self._ahead_hook(), self._format, peek)

    def _contenders(self) -> Steps[List[Contender]]:
        """The holder alone (waiters leave no node in this recipe): [] or [Contender]."""
        try:
            data, stat = yield Read("get", f"{self.path}/{NODE}")
        except NoNodeError:
            return []
        node = naming.QueueNode(NODE, naming.read_data(data).get("host") or "", naming.WRITE, stat.czxid)
        return [naming.contender(node, data, holding=True, token=stat.czxid)]


class ExclusiveLock(ExclusiveRecipe, Lock):
    """A simple distributed mutex: whoever creates the ephemeral node ``<path>/lock`` holds it.

    Same API, session-loss handling and fencing token as :class:`~zkrecipes.FairLock`. It is **not
    fair** and has a **herd effect**: every waiter watches the one node, so each release wakes all of
    them and they race to create it again (one ZooKeeper write each). Fine for a handful of contenders;
    prefer FairLock beyond that.
    """
