"""zkrecipes for asyncio: ``async with aio.FairLock(zk, path):`` -- task-owned holds, no thread per waiter.

The same recipes, nodes, wait-rules and node formats as the threaded classes (they interoperate across
processes), driven on the event loop: kazoo's replies and watch notifications are handed to the loop
with ``call_soon_threadsafe``; a waiting task is a suspended coroutine, not a thread. Pass a started
``KazooClient`` with its default threading handler.
"""

from ._lock import ExclusiveLock, FairLock, ReadLock, ReadWriteLock, WriteLock
from .election import LeaderElection
from .latch import LeaderLatch
from .multilock import MultiLock
from .revoke import break_lock, request_revoke
from .semaphore import Lease, Semaphore
from .transaction import HeldTransaction

__all__ = [
    "ExclusiveLock",
    "FairLock",
    "HeldTransaction",
    "LeaderElection",
    "LeaderLatch",
    "Lease",
    "MultiLock",
    "ReadLock",
    "ReadWriteLock",
    "Semaphore",
    "WriteLock",
    "break_lock",
    "request_revoke",
]
