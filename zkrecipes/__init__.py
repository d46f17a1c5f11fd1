"""zkrecipes: ZooKeeper lock recipes that tell their holders when a hold is in doubt.

Exclusive, fair and read/write locks, a semaphore and leader election on one queue engine, with session-loss
notification and fencing tokens.
"""

from .election import LeaderElection, LeaderWatch
from .errors import LockCancelled, LockError, LockLost, LockTimeout
from .exclusive import ExclusiveLock
from .fair import FairLock
from .naming import Contender
from .rwlock import ReadLock, ReadWriteLock, WriteLock
from .semaphore import Semaphore
from .transaction import HeldTransaction

__version__ = "0.1.0"

__all__ = [
    "Contender",
    "ExclusiveLock",
    "FairLock",
    "HeldTransaction",
    "LeaderElection",
    "LeaderWatch",
    "LockCancelled",
    "LockError",
    "LockLost",
    "LockTimeout",
    "ReadLock",
    "ReadWriteLock",
    "Semaphore",
    "WriteLock",
    "__version__",
]
