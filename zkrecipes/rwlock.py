"""ReadWriteLock: readers share, writers exclude, and a queued writer blocks readers behind it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, List, Optional, Type, TypeVar

from kazoo.client import KazooClient

from . import naming
from ._engine import nearest_writer as nearest_writer  # the wait-rule of readers (re-exported)
from ._lock import LockCore
from ._settings import LockArgs
from ._signature import NamedInit
from .fair import FairLock
from .naming import Contender

if TYPE_CHECKING:
    from ._signature import Options

R = TypeVar("R", bound=LockCore)
W = TypeVar("W", bound=LockCore)


class ReadRecipe(LockCore):
    """The read side's declarations, for both fronts."""

    _kind = naming.READ
    _recipe = "rw"
    _title = "ReadWriteLock (read side)"
    _metric = "read"

    _rule = staticmethod(nearest_writer)


class WriteRecipe(LockCore):
    """The write side's declarations (the predecessor rule, as FairLock), for both fronts."""

    _recipe = "rw"
    _title = "ReadWriteLock (write side)"
    _metric = "write"


class ReadLock(ReadRecipe, FairLock):
    """The read side of a :class:`ReadWriteLock` (``<host>-R-<seq>`` nodes); same API as FairLock.

    Held when no writer is ahead in the queue; many readers hold at once. Local threads share one
    read node, and join it with no request while the queue behind it is known clear (one listing with
    a child watch, until that watch fires); a thread does not join it once a writer is queued behind it
    (that writer would starve under steady local reads): it waits for the node to go and queues
    behind the writer. A
    thread holding the write lock may take the read lock (downgrade); a thread holding
    only the read lock gets LockError from the write side (an upgrade would deadlock).
    """


class WriteLock(WriteRecipe, FairLock):
    """The write side of a :class:`ReadWriteLock` (``<host>-W-<seq>``): a FairLock on the same queue."""


class Pair(LockArgs, NamedInit, Generic[R, W]):
    """A read side and a write side on one path, built with the same arguments (both fronts)."""

    _sides: "tuple[Type[Any], Type[Any]]"  # the read side's class, the write side's
    _name = "ReadWriteLock"  # in repr

    def _build(
        self, client: KazooClient, path: str, identifier: Optional[str], owner: Optional[str], options: Options
    ) -> None:
        def side(cls: Type[Any]) -> Any:
            return cls(client, path, identifier, owner=owner, **options)

        self._read: R = side(self._sides[0])
        self._write: W = side(self._sides[1])
        self.path = self._read.path
        self.protocol: str = self._read.protocol  # the node format's name, as given to the constructor

    def read(self) -> R:
        """The shared (read) side; the same object on every call."""
        return self._read

    def write(self) -> W:
        """The exclusive (write) side; the same object on every call."""
        return self._write

    def __repr__(self) -> str:
        return f"<{self._name} {self.path!r} read={self._read.state} write={self._write.state}>"


class ReadWriteLock(Pair[ReadLock, WriteLock]):
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

    _sides = (ReadLock, WriteLock)

    def contenders(self) -> List[Contender]:
        """Every reader and writer in queue order."""
        return self._read.contenders()
