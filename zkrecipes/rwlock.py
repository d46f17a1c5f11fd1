"""ReadWriteLock: readers share, writers exclude, and a queued writer blocks readers behind it."""

from __future__ import annotations

from typing import List, Optional, Sequence

import tenacity
from kazoo.client import KazooClient
from kazoo.security import ACL

from . import formats, naming
from ._signature import NamedInit
from .fair import FairLock
from .naming import Contender, QueueNode


def nearest_writer(ahead: List[QueueNode], me: QueueNode) -> Optional[QueueNode]:
    """Wait-rule of readers: blocked by the nearest node ahead that is not a reader (``W``, or a node of
    another recipe, a semaphore's lease included: never overtaken), if any."""
    for node in reversed(ahead):
        if node.kind != naming.READ:
            return node
    return None


class ReadLock(FairLock):
    """The read side of a :class:`ReadWriteLock` (``<host>-R-<seq>`` nodes); same API as FairLock.

    Held when no writer is ahead in the queue; many readers hold at once. Local threads share one
    read node, but a thread does not join it once a writer is queued behind it (that writer would
    starve under steady local reads); it waits for the node to go and queues behind the writer. A
    thread holding the write lock may take the read lock (downgrade); a thread holding
    only the read lock gets LockError from the write side (an upgrade would deadlock).
    """

    _kind = naming.READ
    _recipe = "rw"

    def _rule(self, ahead: List[QueueNode], me: QueueNode) -> Optional[QueueNode]:
        return nearest_writer(ahead, me)


class WriteLock(FairLock):
    """The write side of a :class:`ReadWriteLock` (``<host>-W-<seq>``): a FairLock on the same queue."""

    _kind = naming.WRITE  # wait-rule: predecessor, as FairLock
    _recipe = "rw"


class ReadWriteLock(NamedInit):
    """A fair distributed read/write lock: ``with ReadWriteLock(zk, "/shared_lock").read(): ...``.

    Readers share the lock; a writer holds it alone. Queue order decides: a reader waits only for the
    nearest writer ahead of it, a writer for its immediate predecessor, so a queued writer blocks
    readers that arrive after it (no writer starvation). ``write()`` and ``FairLock`` on one path are
    the same queue. Downgrade: while holding ``write()``, take ``read()`` and then release the write
    side; the write node stays until the read is released, so no queued writer slips in between.
    Keyword arguments (``identifier``, ``host``, ``acl``, ``retry``, ``tolerate_suspended``,
    ``protocol`` -- ``"kazoo"``: kazoo's ``ReadLock``/``WriteLock``; ``"curator"``: Curator's
    ``InterProcessReadWriteLock``) go to both sides.
    """

    def __init__(
        self,
        client: KazooClient,
        path: str,
        identifier: Optional[str] = None,
        *,
        host: Optional[str] = None,
        acl: Optional[Sequence[ACL]] = None,
        retry: Optional[tenacity.Retrying] = None,
        tolerate_suspended: bool = False,
        protocol: str = formats.ZKRECIPES,
    ) -> None:
        self._read = ReadLock(
            client, path, identifier, host=host, acl=acl, retry=retry,
            tolerate_suspended=tolerate_suspended, protocol=protocol,
        )
        self._write = WriteLock(
            client, path, identifier, host=host, acl=acl, retry=retry,
            tolerate_suspended=tolerate_suspended, protocol=protocol,
        )
        self.path = self._read.path
        self.protocol: str = self._read.protocol  # the node format's name, as given to the constructor

    def read(self) -> ReadLock:
        """The shared (read) side; the same object on every call."""
        return self._read

    def write(self) -> WriteLock:
        """The exclusive (write) side; the same object on every call."""
        return self._write

    def contenders(self) -> List[Contender]:
        """Every reader and writer in queue order."""
        return self._read.contenders()

    def __repr__(self) -> str:
        return f"<ReadWriteLock {self.path!r} read={self._read.state} write={self._write.state}>"
