"""ExclusiveLock: one ephemeral node ``<path>/lock``; losers watch it and race again when it goes.

The parent is listed with each create (one round trip): a node of another recipe on the path refuses the
lock (:meth:`zkrecipes.formats.NodeFormat.alone`), as the queue recipes refuse ``lock``."""

from __future__ import annotations

from typing import List

from kazoo.exceptions import NoNodeError

from . import _engine, formats, naming
from ._engine import Entry, Read, Steps
from ._lock import Lock, LockCore
from .naming import Contender

NODE = formats.EXCLUSIVE_NODE


class ExclusiveRecipe(LockCore):
    """The recipe, for both fronts: one node, raced for (:func:`zkrecipes._engine.race`)."""

    _gate_key = "exclusive"
    _recipe = "exclusive"  # zkrecipes' own format only
    _title = "ExclusiveLock"
    _metric = "exclusive"

    def _steps(self, peek: bool = False) -> Steps[Entry]:
        guid = naming.new_guid()
        data = naming.node_data(self.identifier, guid, self.host)
        return _engine.race(self.path, self._acl, NODE, data, guid, self._seen_by(), self._format, peek)

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
