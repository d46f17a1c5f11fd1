"""Semaphore: at most ``max_leases`` holders at once, granted in queue order, with no herd."""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Dict, List, Optional, Sequence

import tenacity
from kazoo.client import KazooClient
from kazoo.security import ACL

from . import _engine, _gate, _reaper, formats, naming
from ._engine import Blockers, Entry, Steps
from ._gate import Gate
from ._lock import IDLE, WAITING, Lock, LockState
from .errors import LockError
from .naming import QueueNode


def nearest_leases(ahead: List[QueueNode], me: QueueNode) -> Optional[Sequence[QueueNode]]:
    """Wait-rule of a lease: held while fewer than ``me.leases`` nodes are ahead; else blocked by the
    ``me.leases`` nearest nodes ahead (all watched: any of them going may make us a holder, and while
    they all stay they stay the nearest, so a node further ahead going cannot). Correct on a superset
    of the nodes ahead, as the engine requires of a rule with several blockers."""
    n = me.leases
    return ahead[-n:] if len(ahead) >= n else None


class Semaphore(Lock):
    """A distributed counting semaphore: at most ``max_leases`` holders of ``path`` at once.

    ``Semaphore(zk, "/sem/payment-api", 5, identifier="worker-1")`` -- also ``host=``, ``acl=``,
    ``retry=`` and ``tolerate_suspended=`` as for :class:`~zkrecipes.FairLock`, and the same API
    (acquire/release, ``with``, :meth:`hold`, :attr:`state`, :attr:`is_held`, :attr:`token`,
    :attr:`lost`, :meth:`check`, :meth:`transaction`, listeners, :meth:`cancel`, :meth:`contenders`).

    Nodes are ``<host>-S<max_leases>-<seq>``; a lease is held while fewer than ``max_leases`` nodes
    are ahead of ours, so leases are granted in queue order. ``max_leases`` travels in the node name:
    a newcomer checks it against the head of the queue (the oldest holder) from the listing it gets
    anyway, and one that disagrees -- or finds nodes of another recipe on ``path`` -- raises
    :class:`~zkrecipes.LockError` from acquire, its node deleted. Use a path for the semaphore alone.

    Wake-ups: a waiter watches the ``max_leases`` nodes nearest ahead of it, so a release notifies at
    most ``max_leases`` waiters, of which one can now hold (the others re-watch, one read each); never
    the whole queue. ``max_leases`` watches per waiter. See docs/semaphore.rst for the measured cost.

    Threads: each thread of a process takes its own lease (its own node), so one process may hold several;
    a thread's leases are reentrant (each acquire needs a release, the last deletes the node). ``token``,
    ``node``, ``is_held``, ``state``, :meth:`check`, :meth:`release` and :meth:`transaction` answer for
    the calling thread's lease; ``lost`` and listeners are the object's, told of every lease it hands
    out -- give each worker thread its own Semaphore object (cheap) if it needs its own.
    """

    _recipe = "semaphore"  # zkrecipes' own node format only (kazoo's and Curator's are not implemented)

    _kind = naming.LEASE

    def __init__(
        self,
        client: KazooClient,
        path: str,
        max_leases: int,
        identifier: Optional[str] = None,
        *,
        host: Optional[str] = None,
        acl: Optional[Sequence[ACL]] = None,
        retry: Optional[tenacity.Retrying] = None,
        tolerate_suspended: bool = False,
        protocol: str = formats.ZKRECIPES,
    ) -> None:
        self.max_leases = naming.validate_max_leases(max_leases)
        super().__init__(client, path, identifier, host=host, acl=acl, retry=retry,
                         tolerate_suspended=tolerate_suspended, protocol=protocol)
        _declare(self)

    def _setup(self) -> None:
        self._cancel = threading.Event()
        self._drivers = set()
        self._local = threading.local()  # this thread's gate, and whether it is acquiring

    @property
    def _gate(self) -> Gate:  # type: ignore[override]  # Lock keeps one gate per object
        """The calling thread's gate: its own lease on ``path`` (shared by its Semaphore objects)."""
        g: Optional[Gate] = getattr(self._local, "gate", None)
        if g is None:
            g = self._local.gate = _gate.gate(self.client, self.path, f"lease-{_thread_number()}")
        return g

    def _reap(self, me: threading.Thread) -> None:
        """A thread's lease is on a gate of its own: look at every thread that holds something."""
        _reaper.reap_ended()

    def _rule(self, ahead: List[QueueNode], me: QueueNode) -> Blockers:
        for node in ahead:
            if node.kind != naming.LEASE:
                raise LockError(f"{self.path} holds {node.name!r}, a node of another recipe: a semaphore "
                                "needs a path of its own")
        if ahead and ahead[0].leases != me.leases:
            raise LockError(f"{self.path}: max_leases {me.leases} disagrees with the holders' "
                            f"{ahead[0].leases} (node {ahead[0].name})")
        return nearest_leases(ahead, me)

    def _steps(self) -> Steps[Entry]:
        guid = naming.new_guid()
        data = naming.node_data(self.identifier, guid, self.host)
        prefix = naming.lease_prefix(self.host, self.max_leases)
        return _engine.acquire(self.path, self._acl, prefix, data, guid, self._rule, seen=self._seen)

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Take a lease; True once held. As :meth:`FairLock.acquire <zkrecipes.FairLock.acquire>`:
        False on a miss, timeout or cancel (nothing left behind); reentrant per thread."""
        self._local.waiting = True
        try:
            return super().acquire(blocking, timeout)
        finally:
            self._local.waiting = False

    def cancel(self) -> None:
        """Make pending acquires of this object (any thread) return False; their nodes are deleted."""
        self._cancel.set()
        for d in list(self._drivers):
            d.interrupt()

    @property
    def state(self) -> LockState:
        """The calling thread's lease: ``"idle"``, ``"waiting"``, ``"held"``, ``"suspended"`` or ``"lost"``."""
        hold = self._my_hold()
        if hold is not None:
            return hold.state  # type: ignore[return-value]
        return WAITING if getattr(self._local, "waiting", False) else IDLE

    def __repr__(self) -> str:
        return f"<Semaphore {self.path!r} max_leases={self.max_leases} state={self.state}>"


_threads = threading.local()
_numbers = itertools.count(1)


def _thread_number() -> int:
    """A number for the calling thread's lease gates: unlike its ident, never reused by a later thread."""
    n: Optional[int] = getattr(_threads, "number", None)
    if n is None:
        n = _threads.number = next(_numbers)  # itertools.count: atomic under the GIL
    return n


# this process's live Semaphore objects, by client and path: they must agree on max_leases
_live: "weakref.WeakKeyDictionary[KazooClient, Dict[str, weakref.WeakSet[Semaphore]]]" = weakref.WeakKeyDictionary()
_live_lock = threading.Lock()


def _declare(sem: Semaphore) -> None:
    """Refuse a second max_leases for one client and path in this process (ValueError naming both):
    the other object's waiters would queue behind holders they disagree with."""
    with _live_lock:
        paths = _live.setdefault(sem.client, {})
        objs = paths.setdefault(sem.path, weakref.WeakSet())
        for other in objs:
            if other.max_leases != sem.max_leases:
                raise ValueError(f"{sem.path}: max_leases {sem.max_leases} disagrees with {other.max_leases} "
                                 "of another Semaphore on this client and path")
        objs.add(sem)
