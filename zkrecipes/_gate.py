"""The in-process gate under every lock, one per (client, path, key).

Owners of one process (threads; tasks for an asyncio front) share one ZooKeeper hold per gate: one
writer (reentrant, counted) or any number of readers behind a single ``R`` node. Only one owner at a
time queues a node for a gate, so a process never competes with itself in ZooKeeper, and owners queue
for the gate in arrival order. A local reader joins our read node with no request while the queue
behind it is known clear (``clear_behind``: listed under the gate's child watch, not fired since); a
writer queued behind it (``writer_behind``) stops further local readers from joining it, so steady
local reads cannot starve that writer. A writer may take the
read side too (downgrade); a reader asking for the write side gets LockError (it would deadlock).

An owner that is not reentrant (a lock object that owns its holds, ``owner="object"``) is threading.Lock's
kind: each acquire of it is a caller of its own in the line, and one that finds the owner holding, or
another of its acquires queuing, waits its turn like any other waiter.

Re-entry (acquire again, a nested ``with``, a read under our own write) is granted only while the hold is
certain (:func:`in_doubt`): on a lost hold, or one in doubt, it raises LockLost, so nothing reports a hold
held that may be someone else's. The decisions (:meth:`Gate.try_enter`, :meth:`Gate.granted`,
:meth:`Gate.leave`) need no ZooKeeper and no waiting; :func:`enter` and :func:`finish_leave` are the
engine steps around them, run by either driver (a wait for the gate is the step
:class:`~zkrecipes._engine.WaitGate`).
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Hashable, List, NamedTuple, Optional, Sequence, Set, Tuple

from kazoo.client import KazooClient

from . import metrics as _metrics
from ._engine import NOW, Delete, Steps, WaitGate, drop_old
from .errors import LockError, LockLost
from .naming import LEASE, READ, WRITE, QueueNode, distance
from .session import LOST, SUSPENDED

log = logging.getLogger("zkrecipes.gate")

Owner = Hashable  # a threading.Thread (never an ident: a new thread may reuse one), or an asyncio task
# a side's recipe in messages, when the caller does not name its own (a lock's ``_title``)
TITLES = {WRITE: "FairLock or ReadWriteLock (write side)", READ: "ReadWriteLock (read side)", LEASE: "Semaphore"}


def in_doubt(hold: Any, tolerate_suspended: bool) -> Optional[str]:
    """Why ``hold`` (a :class:`~zkrecipes.session.Hold`) may not be trusted now, or None: lost (always),
    suspended, or not confirmed since the process stood still (both unless ``tolerate_suspended``).
    A stalled hold should be confirmed (one read) before asking."""
    overdue = hold.in_doubt()  # the doubt clock itself: the session thread may not have looked yet
    if hold.state == LOST:
        return "lost: the session ended"
    if tolerate_suspended:
        return None
    if hold.state == SUSPENDED or overdue:
        return "uncertain: connection suspended"
    if hold.stale():
        return "uncertain: the process stood still, unconfirmed"
    return None


class Entered(enum.Enum):
    """What :meth:`Gate.try_enter` decided."""

    HAVE = "have"  # the owner holds now: reentrant, a local reader joining, or a downgrade
    QUEUE = "queue"  # the owner must queue in ZooKeeper; the gate is busy until :meth:`Gate.granted`
    WAIT = "wait"  # another owner holds or queues: wait for a change


@dataclass
class Counts:
    """How many levels of each side one owner holds."""

    write: int = 0
    read: int = 0

    def side(self, kind: str) -> int:
        return self.write if kind == WRITE else self.read


Detach = Callable[[Any], None]  # a lock object's own way to stop following a hold: ``detach(hold)``


class LeaveResult(NamedTuple):
    """What :meth:`Gate.leave` leaves to do: delete the hold's node (``last``), and detach the objects in
    ``detach`` (``(side, detach)`` pairs: every attached object after the last level, else those of a
    side no longer held)."""

    last: bool
    hold: Any
    detach: List[Tuple[str, Detach]]


@dataclass(eq=False)
class Gate:
    """Local state of one (client, path, key): who holds what, and the shared hold."""

    path: str
    mutex: Any = field(default_factory=threading.RLock, repr=False)  # guards every field below
    cond: threading.Condition = field(init=False, repr=False)  # over ``mutex``: threads wait on it (WaitGate)
    hold: Any = None  # the session.Hold shared by the local holders
    mode: Optional[str] = None  # READ or WRITE while held
    busy: bool = False  # an owner is talking to ZooKeeper for this gate (acquire or final release)
    writer: Optional[Owner] = None  # the owner of the write side
    counts: Dict[Owner, Counts] = field(default_factory=dict)
    waiting_writers: int = 0
    line: Deque[Owner] = field(default_factory=collections.deque)  # owners waiting, in arrival order
    # lock objects attached to the current hold: their side (kind) and how to detach them
    objects: Dict[Any, Tuple[str, Detach]] = field(default_factory=dict)
    writer_behind: Any = None  # the hold behind whose node a writer was seen queued
    clear_behind: Any = None  # the read hold listed with no writer behind it under our child watch, not fired since
    behind_epoch: int = 0  # bumped each time that child watch fires (a listing sent before cannot clear)
    looking: Any = None  # the read hold whose queue a joined reader is listing now (one listing at a time)
    wakers: Set[Callable[[], None]] = field(default_factory=set)  # non-thread waiters (asyncio tasks)
    version: int = 0  # bumped by every change a waiter may care about (:meth:`changed`)
    reaped_at: float = -1e9  # when an acquire, release or check last looked for owners that ended (monotonic)

    def __post_init__(self) -> None:
        self.cond = threading.Condition(self.mutex)

    # -- decisions (call with ``mutex`` held) --------------------------------------------------------
    def try_enter(
        self,
        me: Owner,
        kind: str,
        hold_is_good: Callable[[Any], bool],
        tolerate_suspended: bool = False,
        title: Optional[str] = None,
        caller: Optional[Hashable] = None,
    ) -> Entered:
        """Decide for ``me`` asking for side ``kind``; records HAVE and QUEUE at once. ``hold_is_good(hold)``
        says whether a local reader may still join the current hold (it is held, not suspended). Re-entry
        by an owner raises LockLost, recording nothing, if the hold is :func:`in_doubt`. ``title``: the
        recipe the caller used, for messages (:data:`TITLES` of ``kind`` if None). ``caller``: this
        acquire's place in the line if ``me`` is not reentrant (see :func:`enter`); it then waits while
        ``me`` holds."""
        c = self.counts.get(me)
        if caller is not None and c is not None:  # not reentrant: wait for the owner's release
            return Entered.WAIT
        if kind == WRITE:
            if self.writer == me and c is not None:
                self._trust(tolerate_suspended)
                c.write += 1
                return Entered.HAVE
            if c is not None and c.read:
                raise LockError(f"{self.path}: {title or TITLES[kind]} asked for by a caller that holds "
                                f"{TITLES[READ]}: upgrading a read lock to a write lock would deadlock")
        else:
            if c is not None:  # reentrant read, or read under our own write lock (downgrade)
                self._trust(tolerate_suspended)
                c.read += 1
                return Entered.HAVE
            if (
                self.mode == READ
                and hold_is_good(self.hold)
                and not self.waiting_writers
                and self.writer_behind is not self.hold
            ):
                self.counts[me] = Counts(read=1)
                return Entered.HAVE
        if self.hold is None and not self.busy and (not self.line or self.line[0] == (caller or me)):
            self.busy = True
            return Entered.QUEUE
        return Entered.WAIT

    def _trust(self, tolerate_suspended: bool) -> None:
        why = in_doubt(self.hold, tolerate_suspended)
        if why is not None:  # a count added now would report held a node that may be someone else's
            raise LockLost(f"{self.path}: re-entry refused: the hold ({self.hold.node}) is {why}")

    def granted(self, me: Owner, kind: str, hold: Any, obj: Any = None, detach: Optional[Detach] = None) -> None:
        """The ZooKeeper part of ``me``'s QUEUE ended: with ``hold`` (``obj`` attached to it, ``detach``
        its way to stop following it), or None (miss, timeout, error)."""
        with self.mutex:
            self.busy = False
            if hold is not None:
                self.hold, self.mode = hold, kind
                self.counts[me] = Counts(write=1) if kind == WRITE else Counts(read=1)
                if kind == WRITE:
                    self.writer = me
                if obj is not None and detach is not None:
                    self.objects[obj] = (kind, detach)
            if self.line or self.wakers:
                self.changed()

    def leave(self, me: Owner, kind: str, not_held: Optional[Callable[[], LockError]] = None) -> LeaveResult:
        """Release one level of ``me``'s side ``kind``. The last level of the last owner leaves the gate
        busy (``last``): the caller deletes the node, then calls :meth:`released`. If ``me`` holds none:
        ``not_held()`` is raised (the caller's LockError, naming the object it used), else one naming
        :data:`TITLES` of ``kind``."""
        with self.mutex:
            c = self.counts.get(me)
            if c is None or not (c.write if kind == WRITE else c.read):
                if not_held is not None:
                    raise not_held()
                raise LockError(f"{self.path}: {TITLES[kind]} released by a caller that does not hold it")
            if kind == WRITE:
                c.write -= 1
                if not c.write:
                    self.writer = None
            else:
                c.read -= 1
            if not c.write and not c.read:
                del self.counts[me]
            return self._left()

    def drop(self, me: Owner) -> Optional[LeaveResult]:
        """Forget every level ``me`` holds, both sides (its owner ended: nobody can release them now);
        None if it holds nothing. As :meth:`leave`: a ``last`` result leaves the gate busy until
        :meth:`released`."""
        with self.mutex:
            if me not in self.counts:
                return None
            del self.counts[me]
            if self.writer == me:
                self.writer = None
            if me in self.line:
                self.line.remove(me)
            return self._left()

    def _left(self) -> LeaveResult:
        """After an owner gave up levels (``mutex`` held): what is left to do."""
        if self.counts:
            downgraded: List[Tuple[str, Detach]] = []
            if self.writer is None and self.mode == WRITE:
                self.mode = READ  # downgrade: our write node stays until the reads are released
                downgraded = self._detach_side(WRITE)
            self.changed()
            return LeaveResult(False, self.hold, downgraded)
        hold, detach = self.hold, list(self.objects.values())
        self.hold, self.mode, self.objects, self.busy = None, None, {}, True
        self.clear_behind = self.looking = None
        return LeaveResult(True, hold, detach)

    def _detach_side(self, kind: str) -> List[Tuple[str, Detach]]:
        """Forget the objects attached to side ``kind``: their ``(side, detach)`` pairs, for the caller to call."""
        objects = [o for o, (k, _) in self.objects.items() if k == kind]
        return [self.objects.pop(o) for o in objects]

    def attach(self, obj: Any, kind: str, detach: Detach) -> bool:
        """Attach ``obj`` (a lock object of side ``kind``) to the current hold; False if it already was."""
        with self.mutex:
            if obj in self.objects:
                return False
            self.objects[obj] = (kind, detach)
            return True

    def ended_threads(self) -> List[threading.Thread]:
        """Owners that are threads which have ended while holding here."""
        with self.mutex:
            return [o for o in self.counts if isinstance(o, threading.Thread) and not o.is_alive()]

    def released(self) -> None:
        """The final release's ZooKeeper part is over."""
        with self.mutex:
            self.busy = False
            if self.line or self.wakers:
                self.changed()

    def start_look(self, hold: Any) -> Tuple[str, int]:
        """A reader that just joined read hold ``hold``: must it list the queue behind our node first?
        ``("look", epoch)``: yes (``epoch`` for :meth:`look_behind`); ``("wait", version)``: another owner
        is listing it now, wait for a change of ``version`` and ask again (one listing at a time, however
        many readers arrive meanwhile); ``("done", 0)``: no, the queue behind is known clear or a writer
        was seen there."""
        with self.mutex:
            if self.hold is not hold or hold is self.writer_behind or hold is self.clear_behind:
                return "done", 0
            if self.looking is hold:
                return "wait", self.version
            self.looking = hold
            return "look", self.behind_epoch

    def look_behind(
        self, hold: Any, mine: Optional[QueueNode], queue: Optional[Sequence[QueueNode]], epoch: int
    ) -> None:
        """``queue`` was listed, with :meth:`queue_changed` as its child watch, for read hold ``hold`` (our node
        ``mine``; ``epoch``: what :meth:`start_look` gave; ``queue`` None: the listing failed; either way the
        readers waiting for it are woken). A node that
        is not a reader queued behind ours: later local readers queue in ZooKeeper behind it instead of
        joining our node, so steady local reads cannot starve it. None: the queue behind is clear until the
        watch fires, and local readers join with no request meanwhile."""
        writer = queue is not None and mine is not None and any(
            n.kind != READ and distance(n.sequence, mine.sequence) > 0 for n in queue
        )
        with self.mutex:
            if self.looking is hold:
                self.looking = None
                self.changed()  # the readers waiting for this listing look again at what it found
            if self.hold is not hold or queue is None:
                return
            if writer:
                self.writer_behind = hold
            elif epoch == self.behind_epoch:  # (the watch fired since: this listing may miss that change)
                self.clear_behind = hold

    def queue_changed(self, event: Any) -> None:
        """The child watch of :meth:`look_behind` fired (a node came or went, or the connection dropped;
        kazoo's thread): the next local reader lists the queue again before it joins."""
        with self.mutex:
            self.behind_epoch += 1
            self.clear_behind = None

    def owned(self, me: Owner) -> Any:
        """The hold if ``me`` holds either side (a re-entry would join it), else None."""
        with self.mutex:
            return self.hold if me in self.counts else None

    def held_by(self, me: Owner, kind: str) -> Any:
        """The hold if ``me`` holds side ``kind``, else None."""
        with self.mutex:
            c = self.counts.get(me)
            return self.hold if c is not None and c.side(kind) else None

    # -- waiting for the gate (see :func:`enter`) -------------------------------------------------
    def line_up(self, me: Owner, kind: str) -> int:
        """Put ``me`` in the line (once; call with ``mutex`` held); the version to wait for a change of."""
        if me not in self.line:
            self.line.append(me)  # owners queue for the gate in arrival order
            if kind == WRITE:
                self.waiting_writers += 1
        return self.version

    def leave_line(self, me: Owner, kind: str) -> None:
        """Take ``me`` out of the line, however it leaves it (granted, miss, error, cancel)."""
        with self.mutex:
            if me in self.line:
                self.line.remove(me)
                if kind == WRITE:
                    self.waiting_writers -= 1
                self.changed()

    def wake_all(self) -> None:
        with self.mutex:
            self.changed()

    def changed(self) -> None:
        """Tell every waiter to look again (call with ``mutex`` held): threads and registered wakers."""
        self.version += 1
        self.cond.notify_all()
        for wake in list(self.wakers):
            wake()


# Gates live while a lock object refers to one or a hold pins it (Hold.gate): a service that locks a
# million keys keeps only the gates of the locks it has now.
_gates: "weakref.WeakKeyDictionary[KazooClient, weakref.WeakValueDictionary[Tuple[str, str], Gate]]" = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def gate(client: KazooClient, path: str, key: str) -> Gate:
    """The gate for ``(client, path, key)``, shared by every lock object of this process."""
    with _lock:
        per_client = _gates.get(client)
        if per_client is None:
            per_client = _gates[client] = weakref.WeakValueDictionary()
        g = per_client.get((path, key))
        if g is None:
            g = per_client[(path, key)] = Gate(path)
        return g


# -- the steps around the gate (both fronts) ------------------------------------------------------------
def enter(
    gate: Gate,
    me: Owner,
    kind: str,
    blocking: bool,
    hold_is_good: Callable[[Any], bool],
    tolerate_suspended: bool,
    title: Optional[str] = None,
    reentrant: bool = True,
) -> Steps[Optional[Entered]]:
    """Wait for the gate: HAVE, QUEUE, or None on a non-blocking miss (the driver throws in the deadline
    and a cancel, and the line forgets this caller however it leaves); LockLost on re-entry into a hold
    in doubt (:meth:`Gate.try_enter`). An owner that is not ``reentrant`` never re-enters: this acquire
    waits in the line under a place of its own while the owner holds or another acquire of it queues."""
    caller = None if reentrant else object()  # (a thread or task makes one call at a time: it is its place)
    with gate.mutex:
        if gate.hold is None and not gate.busy and not gate.line:  # idle: nobody to join or to wait for
            gate.busy = True
            return Entered.QUEUE
        got = gate.try_enter(me, kind, hold_is_good, tolerate_suspended, title, caller)
    if got is not Entered.WAIT or not blocking:
        return None if got is Entered.WAIT else got
    place = caller or me
    try:
        while True:
            with gate.mutex:
                got = gate.try_enter(me, kind, hold_is_good, tolerate_suspended, title, caller)
                if got is not Entered.WAIT:
                    return got
                version = gate.line_up(place, kind)
            yield WaitGate(gate, version)
    finally:
        gate.leave_line(place, kind)


def finish_leave(gate: Gate, left: LeaveResult) -> Steps[None]:
    """What :meth:`Gate.leave` (or :meth:`Gate.drop`) left to do: detach a side no longer held, or, for
    the last level, delete the node (:func:`release_hold`), reopen the gate and detach every object."""
    if not left.last:
        for _, detach in left.detach:  # the write side is no longer held: "idle", no token, no node
            detach(left.hold)
        return
    try:
        yield from release_hold(left.hold)  # a session found gone is reported as lost, even this late
    finally:
        gate.released()
        for _, detach in left.detach:
            detach(left.hold)


def release_hold(hold: Any) -> Steps[None]:
    """Delete a hold's node and stop following it. Without a connection, wait for one until the hold is
    declared lost; a session found gone, or a node someone else deleted (``break_lock``), marks the hold
    lost (its owner is told even this late). A lost hold's node, if its session lives on after all, is
    deleted when the client reconnects, or now if the client has moved to a new session
    (:func:`~zkrecipes._engine.drop_old`, after the owner was told)."""
    hold.releasing = True
    hooks = _metrics.installed
    let_go = (yield NOW) if hooks is not None else 0.0  # the hold's time ends as its owner lets go
    try:
        if hold.state != LOST:
            # (a Delete in a session other than the hold's deletes nothing and answers False)
            deleted = yield Delete(hold.node, hold.session, lambda: hold.state == LOST)
            if deleted is None:  # broken just before this release, and not told yet: no node left to drop
                log.warning("hold %s: its node was deleted by someone else (broken): lost", hold.node)
                hold.mark_lost()
                return
            if not deleted:
                hold.mark_lost()
        if hold.state == LOST:  # its owner told first; then its node, if a session we gave up keeps it
            yield from drop_old(hold.node, hold.session, hold.token)
    finally:
        hold.close()
        if hooks is not None:
            _metrics.ended(hooks, hold, let_go)
