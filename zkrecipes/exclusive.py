"""ExclusiveLock: one ephemeral node ``<path>/lock``; losers watch it and race again when it goes."""

from __future__ import annotations

from kazoo.exceptions import NodeExistsError, SessionExpiredError

from . import naming
from ._lock import Lock
from ._queue import Waiter
from .session import Hold, session_id

NODE = "lock"


class ExclusiveLock(Lock):
    """A simple distributed mutex: whoever creates the ephemeral node ``<path>/lock`` holds it.

    Same API, session-loss handling and fencing token as :class:`~zkrecipes.FairLock`. It is **not
    fair** and has a **herd effect**: every waiter watches the one node, so each release wakes all of
    them and they race to create it again (one ZooKeeper write each). Fine for a handful of contenders;
    prefer FairLock beyond that.
    """

    _family = "exclusive"

    def _zk_acquire(self, waiter: Waiter) -> Hold:
        guid = naming.new_guid()
        data = naming.node_data(self.identifier, guid, self.host)
        path = f"{self.path}/{NODE}"
        while True:
            try:
                entry, _ = self._queue.create(waiter, NODE, data, guid, sequence=False)
                return self._make_hold(entry.path, entry.token, entry.session)
            except NodeExistsError:
                pass
            try:
                stat = waiter.watch(path)
            except SessionExpiredError:
                continue
            if stat is None:
                continue
            if stat.ephemeralOwner == session_id(self.client):  # a lost create reply of ours?
                entry = self._queue._find_own(waiter, NODE, guid, sequence=False)
                if entry is not None:
                    waiter.unwatch()
                    return self._make_hold(entry.path, entry.token, entry.session)
            waiter.sleep()

    def contenders(self) -> list:
        """The holder alone (waiters leave no node in this recipe): [] or [Contender]."""
        try:
            data, stat = self.client.get(f"{self.path}/{NODE}")
        except Exception:
            return []
        node = naming.QueueNode(NODE, naming.read_data(data).get("host") or "", naming.WRITE, stat.czxid)
        return [naming.contender(node, data)]
