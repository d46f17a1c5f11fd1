"""Semaphore: at most ``max_leases`` holders at once, granted in queue order, with no herd."""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from kazoo.client import KazooClient

from . import _engine, _gate, _reaper, naming
from ._engine import Blockers, Entry, Steps
from ._engine import nearest_leases as nearest_leases  # the wait-rule of a lease (re-exported)
from ._gate import Gate
from ._lock import IDLE, OBJECT, WAITING, Lock, LockCore, LockState, Owner, acquire_deadline
from ._multilock import all_or_none
from .errors import LockError

if TYPE_CHECKING:
    from ._signature import Options, Unpack
from .naming import QueueNode


class SemaphoreRecipe(LockCore):
    """The recipe, for both fronts: lease nodes, the nearest-leases rule, the max_leases check, and a
    gate (so a node) per owner."""

    _recipe = "semaphore"  # zkrecipes' own node format only (kazoo's and Curator's are not implemented)
    _kind = naming.LEASE
    _title = "Semaphore"
    _metric = "semaphore"
    _lease: Optional[str] = None  # set for a Lease's semaphore (its node): its messages name the Lease

    def __init__(
        self,
        client: KazooClient,
        path: str,
        max_leases: int,
        identifier: Optional[str] = None,
        *,
        owner: Optional[str] = None,
        **options: Unpack[Options],
    ) -> None:
        self.max_leases = naming.validate_max_leases(max_leases)
        super().__init__(client, path, identifier, owner=owner, **options)
        _declare(self)

    def _setup(self) -> None:
        self._attached = set()
        self._gates: "weakref.WeakKeyDictionary[Any, Gate]" = weakref.WeakKeyDictionary()
        # owners in acquire ("waiting"): how many acquires each (an object's callers wait their turn)
        self._acquiring: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()

    def _gate_for(self, me: Optional[Owner]) -> Gate:
        """``me``'s own gate: its own lease on ``path`` (shared by its Semaphore objects)."""
        if me is None:
            return Gate(self.path)  # no owner (outside a task): nobody's lease
        g = self._gates.get(me)
        if g is None:
            g = self._gates[me] = _gate.gate(self.client, self.path, f"{self._gate_prefix}lease-{_number(me)}")
        return g

    def _wake_gates(self) -> None:
        for g in list(self._gates.values()):
            g.wake_all()

    def _rule(self, ahead: List[QueueNode], me: QueueNode) -> Blockers:
        # (the node format has refused nodes of another recipe: only leases are ahead)
        if ahead and ahead[0].leases != me.leases:
            raise LockError(f"{self.path}: max_leases {me.leases} disagrees with the holders' "
                            f"{ahead[0].leases} (node {ahead[0].name})")
        return nearest_leases(ahead, me)

    def _steps(self, peek: bool = False) -> Steps[Entry]:
        guid = naming.new_guid()
        data = naming.node_data(self.identifier, guid, self.host)
        prefix = naming.lease_prefix(self.host, self.max_leases)
        return _engine.acquire(self.path, self._acl, prefix, data, guid, self._rule, fmt=self._format,
                               on_ahead=self._ahead_hook(), peek=peek)

    def _acquire(self, me: Owner, blocking: bool) -> Steps[bool]:
        with self._state_lock:
            self._acquiring[me] = self._acquiring.get(me, 0) + 1
        try:
            return (yield from super()._acquire(me, blocking))
        finally:
            with self._state_lock:
                left = self._acquiring.pop(me, 1) - 1
                if left:
                    self._acquiring[me] = left

    # -- several leases at once (lease objects) ----------------------------------------------------------
    def _lease_request(self, qty: object, timeout: object) -> Tuple[List[Any], bool, Optional[float]]:
        """``acquire_leases``' arguments checked (before any request), as ``(objects, blocking, deadline)``:
        ``qty`` object-owned copies of this semaphore, one lease each."""
        n = validate_qty(qty, self.max_leases)
        blocking, deadline = acquire_deadline(True, timeout)
        sems = [type(self)(self.client, self.path, self.max_leases, self.identifier, host=self.host, acl=self.acl,
                           retry=self.retry, tolerate_suspended=self.tolerate_suspended, protocol=self.protocol,
                           owner=OBJECT) for _ in range(n)]
        self._cancelled = False
        return sems, blocking, deadline

    def _take_leases(self, sems: List[Any], blocking: bool) -> Steps[bool]:
        """Acquire the lease of each of ``sems`` in turn (so their nodes queue in that order), all or none
        (:func:`~zkrecipes._multilock.all_or_none`): after a miss, the deadline, a cancel or any error
        (Ctrl-C, task cancel) the leases taken are released, their nodes deleted."""
        return all_or_none(sems, lambda sem: sem._take_lease(blocking), lambda sem: sem._give_back())

    def _take_lease(self, blocking: bool) -> Steps[bool]:
        """This object-owned semaphore's acquire, as steps of another's run."""
        self._bind()
        return self._acquire(self._by_object, blocking)

    def _give_back(self) -> Steps[None]:
        return self._release(self._by_object)

    def _as_lease(self) -> None:
        """This object-owned semaphore is a Lease's now: its errors and its warning when dropped while held
        name the Lease and its node, not this semaphore."""
        self._lease = self.node or ""
        self._name_orphan(f"Lease{f' (node {self._lease})' if self._lease else f' of {self.path!r}'}")

    def _not_held(self, released: bool = True) -> LockError:
        if self._lease is not None:  # the caller used a Lease, not this semaphore
            return LockError(f"{self.path}: Lease{f' (node {self._lease})' if self._lease else ''} released already")
        return super()._not_held(released)

    def _lease_holders(self) -> Steps[List[Optional[str]]]:
        queue = yield from self._contenders()
        return [c.identifier for c in queue[: self.max_leases]]  # (None, as status and contenders() show)

    @property
    def state(self) -> LockState:
        """The calling owner's lease: ``"idle"``, ``"waiting"``, ``"held"``, ``"suspended"`` or ``"lost"``."""
        me = self._current_owner()
        hold = self._my_hold(me)
        if hold is not None:
            return hold.state  # type: ignore[return-value]
        return WAITING if me is not None and me in self._acquiring else IDLE

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path!r} max_leases={self.max_leases} state={self.state}>"


def validate_qty(qty: object, max_leases: int) -> int:
    """``qty`` if it is a number of leases one may ask for at once (1 to ``max_leases``), else raise."""
    if not isinstance(qty, int) or isinstance(qty, bool):
        raise TypeError(f"qty must be an int, got {qty!r}")
    if not 1 <= qty <= max_leases:
        raise ValueError(f"qty must be from 1 to max_leases ({max_leases}), got {qty!r}")
    return qty


class LeaseCore:
    """One lease of a semaphore, for both fronts: the hold of an object-owned semaphore of its own,
    which no thread or task owns (any may release it)."""

    __slots__ = ("_sem",)

    def __init__(self, sem: Any) -> None:
        self._sem = sem
        sem._as_lease()

    @property
    def token(self) -> Optional[int]:
        """The fencing token (the czxid of the lease's node) until released or lost, else None."""
        token: Optional[int] = self._sem.token
        return token

    @property
    def node(self) -> Optional[str]:
        """Full path of the lease's node until released, else None."""
        node: Optional[str] = self._sem.node
        return node

    @property
    def is_held(self) -> bool:
        """True while the lease is held and certain (not suspended or lost, confirmed after a stall)."""
        held: bool = self._sem.is_held
        return held

    @property
    def state(self) -> LockState:
        """``"held"``, ``"suspended"``, ``"lost"``, or ``"idle"`` once released."""
        state: LockState = self._sem.state
        return state

    @property
    def lost(self) -> Any:
        """Set when the lease is lost (an Event; an ``asyncio.Event`` in :mod:`zkrecipes.aio`)."""
        return self._sem.lost

    def __repr__(self) -> str:
        return f"<Lease {self._sem.path!r} node={self.node!r} state={self.state}>"


class Lease(LeaseCore):
    """A lease from :meth:`Semaphore.acquire_leases`: held until :meth:`release` (or the end of ``with
    lease:``), by no thread -- any thread may release or check it. A lease dropped while held is released
    when it is garbage-collected, with a warning."""

    __slots__ = ()

    def release(self) -> None:
        """Release the lease (delete its node); LockError if it was released already. After a loss only
        local state is cleared, as :meth:`FairLock.release <zkrecipes.FairLock.release>` does."""
        self._sem.release()

    def check(self) -> None:
        """Return if the lease is certain; raise :class:`~zkrecipes.LockLost` if it is lost or (unless
        ``tolerate_suspended``) suspended, :class:`~zkrecipes.LockError` once released."""
        self._sem.check()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Semaphore(SemaphoreRecipe, Lock):
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
    out -- give each worker thread its own Semaphore object (cheap) if it needs its own. With
    ``owner="object"`` the object holds one lease that no thread owns; :meth:`acquire_leases` hands out
    :class:`Lease` objects, several at once.
    """

    def _reap(self, me: Owner) -> None:
        """A thread's lease is on a gate of its own: look at every thread that holds something."""
        _reaper.reap_ended()

    def acquire_leases(self, qty: int = 1, timeout: Optional[float] = None) -> List[Lease]:
        """Take ``qty`` leases at once, all or none, their nodes queued one after another; ``[]`` once
        ``timeout`` seconds pass (``0``: one attempt without waiting) or on :meth:`cancel`, with every
        node taken deleted (also on any exception, KeyboardInterrupt included). The leases belong to no
        thread (see :class:`Lease`). ``qty`` from 1 to ``max_leases`` (else ValueError, TypeError if not
        an int, before any request). As with Curator's ``acquire(qty)``, processes that each ask for
        several leases can hold part of them each and wait for one another: give them a ``timeout``."""
        sems, blocking, deadline = self._lease_request(qty, timeout)
        got = self._run(self._take_leases(sems, blocking), deadline, not blocking)
        return [Lease(sem) for sem in sems] if got else []

    def lease_holders(self) -> List[Optional[str]]:
        """The identifiers of the current holders, one per lease, in queue order (oldest first), from one
        listing: ``identifier=`` of the Semaphore that took each lease, None for one built without (or a
        node whose data cannot be read), as ``contenders()`` and ``zkrecipes status --json`` show them.
        ``[]`` if the path does not exist or nobody holds. Like kazoo's ``Semaphore.lease_holders()``,
        which is unordered and gives ``""`` where this gives None. Connection errors are raised."""
        return self._run(self._lease_holders())


_numbers = itertools.count(1)
_owner_numbers: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
_numbers_lock = threading.Lock()


def _number(owner: Owner) -> int:
    """A number for an owner's lease gates: unlike its id or a thread's ident, never reused."""
    with _numbers_lock:
        n = _owner_numbers.get(owner)
        if n is None:
            n = _owner_numbers[owner] = next(_numbers)
        return n


# this process's live Semaphore objects, by client and path: they must agree on max_leases
_live: "weakref.WeakKeyDictionary[KazooClient, Dict[str, weakref.WeakSet[SemaphoreRecipe]]]" = (
    weakref.WeakKeyDictionary()
)
_live_lock = threading.Lock()


def _declare(sem: SemaphoreRecipe) -> None:
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
