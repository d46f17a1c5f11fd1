"""zkrecipes: ZooKeeper lock recipes that tell their holders when a hold is in doubt.

Exclusive, fair and read/write locks, a semaphore, leader election and a leader latch on one queue engine,
with session-loss notification and fencing tokens; MultiLock takes several locks as one.
"""

from .election import LeaderElection, LeaderWatch
from .errors import ClientClosed, LockCancelled, LockError, LockLost, LockTimeout, TransactionFailed
from .exclusive import ExclusiveLock
from .fair import FairLock
from .latch import LeaderLatch
from .multilock import MultiLock
from .naming import Contender
from .revoke import break_lock, request_revoke
from .rwlock import ReadLock, ReadWriteLock, WriteLock
from .semaphore import Lease, Semaphore
from .transaction import HeldTransaction

__version__ = "0.1.0"

__all__ = [
    "ClientClosed",
    "Contender",
    "ExclusiveLock",
    "FairLock",
    "HeldTransaction",
    "LeaderElection",
    "LeaderLatch",
    "LeaderWatch",
    "Lease",
    "LockCancelled",
    "LockError",
    "LockLost",
    "LockTimeout",
    "MultiLock",
    "ReadLock",
    "ReadWriteLock",
    "Semaphore",
    "TransactionFailed",
    "WriteLock",
    "__version__",
    "break_lock",
    "request_revoke",
]
