"""A lock's whole life, written once for both fronts, and the threaded front.

:class:`Participant` validates the shared constructor arguments and keeps states and listeners;
:class:`LockCore` is a lock's life as engine steps (:mod:`zkrecipes._engine`): enter the local gate
(:mod:`zkrecipes._gate`), queue our node, hold, check, release. A recipe declares its node kind
(``_kind``), its wait-rule (``_rule``) and, if it is not a queue, its steps (``_steps``). A front says
who owns a hold (a thread here, a task in :mod:`zkrecipes.aio`) and which driver runs the steps
(:class:`Threaded` here).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Hashable, List, Literal, Optional, Set, Tuple

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, SessionExpiredError
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from . import _drive, _engine, _gate, _kazoo, _reaper, formats, naming
from . import metrics as _metrics
from . import retry as _retry  # the keyword argument is called retry
from ._drive import Driver, never
from ._engine import NOW, Cancelled, DeadlinePassed, Entry, Read, Steps, T, owns
from ._engine import predecessor as predecessor  # the wait-rule of exclusive queue members (re-exported)
from ._gate import Entered, Gate, in_doubt
from ._holding import Holding
from ._signature import DEFAULTS, NamedInit, Options
from .errors import LockCancelled, LockError, LockLost, LockTimeout
from .naming import Contender
from .session import HELD, LOST, REVOKE, Hold, SessionWatcher
from .transaction import HeldTransaction

if TYPE_CHECKING:
    from ._signature import Unpack
    from .once import Once

log = logging.getLogger("zkrecipes.lock")

LockState = Literal["idle", "waiting", "held", "suspended", "lost"]
IDLE: LockState = "idle"
WAITING: LockState = "waiting"
NOWAIT_OPS_TIMEOUT = 30.0  # bound on the round trips of a non-blocking attempt
Listener = Callable[[Any, str], None]
Owner = Hashable  # a thread, an asyncio task, or an object-owned lock's ObjectOwner
OBJECT = "object"  # owner="object": the hold belongs to the lock object (hand-over)


def acquire_deadline(blocking: object, timeout: object) -> Tuple[bool, Optional[float]]:
    """``acquire(blocking, timeout)``'s arguments checked (before any request), as ``(blocking, deadline)``:
    ``timeout=0`` is one attempt that does not wait, like threading.Lock's (not "give up before trying");
    a non-blocking attempt's round trips are bounded by :data:`NOWAIT_OPS_TIMEOUT`."""
    if not isinstance(blocking, bool):
        raise TypeError(f"blocking must be a bool, got {blocking!r}")
    seconds = None if timeout is None else naming.validate_timeout(timeout)
    if seconds is not None and not blocking:
        raise ValueError("can't specify a timeout for a non-blocking call")
    if not blocking or seconds == 0:
        return False, time.monotonic() + NOWAIT_OPS_TIMEOUT
    return True, None if seconds is None else time.monotonic() + seconds


def _joinable(hold: Optional[Hold]) -> bool:
    return hold is not None and hold.state == HELD


def _confirm(hold: Hold) -> Steps[Optional[Exception]]:
    """Confirm a hold the process stood still on (one read): a node gone or not ours marks it lost.
    Returns the error if ZooKeeper could not say (the hold stays unconfirmed)."""
    if not hold.stale():
        return None
    asked = yield NOW
    try:
        # synced: our session may have expired while we stood still; a follower that has not applied that
        # yet would still show our node (ZooKeeper reads are not linearizable)
        ok = owns((yield Read("exists", hold.node, once=True, synced=True)), hold.session)
    except (NoNodeError, SessionExpiredError):
        ok = False
    except Exception as exc:  # ConnectionLoss, timeouts: cannot tell yet
        log.info("could not confirm %s after a stall: %s", hold.node, exc)
        return exc
    hold.confirmed(ok, asked)
    return None


def _verify(hold: Hold) -> bool:
    """The hold's node still exists and belongs to its session (the session thread asks)."""
    stat = hold.client.exists_async(hold.node).get(timeout=_kazoo.session_timeout(hold.client))
    return owns(stat, hold.session)


def _always() -> bool:
    return True


def _cleanup(hold: Hold, policy: Optional[tenacity.Retrying], after_told: Callable[[], bool] = _always) -> None:
    """Delete the node of a hold declared lost while its session lived on, once the session is back
    (raises ConnectionLoss/timeouts if it cannot look yet: the hold tries again later); or, once the
    client has a new session, the node if its old session still keeps it, after ``after_told()`` says
    the listeners ran (:func:`zkrecipes._engine.drop_old`)."""
    if _kazoo.session_id(hold.client) not in (None, hold.session):
        if after_told():
            _drive.drop_old(hold.client, hold.node, hold.session, hold.token, policy)
        return
    if _verify(hold):
        _drive.delete(hold.client, hold.node, hold.session, policy)


def validate_owner(owner: object, word: str) -> bool:
    """``owner=`` checked (before any request): True for ``"object"``, False for the front's own
    ``word`` (``"thread"`` / ``"task"``) or None (the default, the same)."""
    if owner is None or owner == word:
        return False
    if owner == OBJECT:
        return True
    raise ValueError(f"owner must be {word!r} or {OBJECT!r}, got {owner!r}")


class ObjectOwner:
    """The owner of an object-owned lock's holds (``owner="object"``): the gate keys them by it, and the
    hold and the gate call the lock object through it (:meth:`LockCore._own_by_object`) -- weakly, so a
    lock object dropped while it holds can be collected; its hold is then released, with a warning
    (:func:`_orphaned`). Not reentrant: each acquire of the object waits its turn at the object's gate
    (:func:`zkrecipes._gate.enter`), as threading.Lock's callers do."""

    __slots__ = ("ref", "retry", "gate", "__weakref__")

    def __init__(self, obj: "LockCore") -> None:
        self.ref = weakref.ref(obj)
        self.retry = obj.retry
        self.gate: Optional[Gate] = None  # the gate it last held on

    def release(self, me: "ObjectOwner") -> Steps[None]:
        """The object's ``_release``: its recipe's; as the object holds no other level, it stops following
        a hold other owners keep (a shared read)."""
        obj = self.ref()
        assert obj is not None  # (its own release refers to it)
        gate = obj._gate_for(me)
        left = gate.leave(me, obj._kind, obj._not_held)
        if not left.last:
            with gate.mutex:
                mine = gate.objects.pop(self, None)
            if mine is not None:
                left = left._replace(detach=left.detach + [mine])
        return _gate.finish_leave(gate, left)

    def track(self, me: object, gate: Gate) -> None:
        self.gate = gate  # (no reaper: an object never ends; a collected one is released by _orphaned)

    def told(self, hold: Hold, state: str) -> None:
        obj = self.ref()
        if obj is not None:
            type(obj)._told(obj, hold, state)

    def detach(self, hold: Hold) -> None:
        obj = self.ref()
        if obj is not None:
            type(obj)._detach(obj, hold)

    def verify(self, hold: Hold) -> bool:
        return _verify(hold)

    def cleanup(self, hold: Hold) -> None:
        obj = self.ref()
        _cleanup(hold, self.retry, _always if obj is None else obj._after_told)

    def __repr__(self) -> str:
        return f"<ObjectOwner of {self.ref()!r}>"


def _orphaned(owner: ObjectOwner, what: str) -> None:
    """``owner``'s lock object was collected: release what it held (on the reaper thread, with a warning)."""
    gate = owner.gate
    if gate is not None:
        _reaper.hand_over(lambda: _dropped(gate, owner, what))


def _dropped(gate: Gate, owner: ObjectOwner, what: str) -> Optional[_reaper.Job]:
    left = gate.drop(owner)
    return None if left is None else _reaper.Job(gate, left, what, log)


class Participant(NamedInit):
    """Validates the shared constructor arguments (before any ZooKeeper call), keeps states and
    listeners, and makes and checks holds. A front supplies the ``_told`` hook (below)."""

    _recipe = "lock"  # what its node format is for (:data:`zkrecipes.formats.RECIPES`)
    _title = "FairLock"  # the recipe, as its users call it, in messages
    _metric = "fair"  # the recipe's label in metrics (zkrecipes.metrics)
    _seen: Optional[Callable[[int], None]] = None  # told how many are ahead while waiting (see on_ahead)
    _owner_word = "thread"  # who owns a hold, in error messages

    def __init__(
        self,
        client: KazooClient,
        path: str,
        identifier: Optional[str] = None,
        **options: Unpack[Options],
    ) -> None:
        o = {**DEFAULTS, **options}
        host, acl, retry = o["host"], o["acl"], o["retry"]
        tolerate_suspended, protocol = o["tolerate_suspended"], o["protocol"]
        if not isinstance(client, KazooClient):
            raise TypeError(f"client must be a kazoo KazooClient, got {client!r}")
        self.path = naming.validate_path(path)
        self.identifier = None if identifier is None else naming.validate_label("identifier", identifier)
        self.host = naming.default_host() if host is None else naming.validate_label("host", host)
        if acl is not None and (not isinstance(acl, (list, tuple)) or not all(isinstance(a, ACL) for a in acl)):
            raise TypeError(f"acl must be a list of kazoo.security.ACL, got {acl!r}")
        if not isinstance(tolerate_suspended, bool):
            raise TypeError(f"tolerate_suspended must be a bool, got {tolerate_suspended!r}")
        self._format = formats.get(protocol, self._recipe)  # the node format: names, data, who we queue with
        self.protocol = self._format.name
        self.client = client
        _kazoo.attend(client)  # nudged replies, a cheaper select on its I/O thread
        self.acl: Optional[List[ACL]] = list(acl) if acl else None
        self._acl: List[ACL] = list(acl) if acl else list(OPEN_ACL_UNSAFE)  # applied to every node we make
        self.retry: Optional[tenacity.Retrying] = _retry.validate_policy(retry)
        self.tolerate_suspended = tolerate_suspended
        self.lost = self._new_event()  # set when the hold (or leadership) is lost; cleared by a new acquire
        self._state = "idle"
        self._state_lock = threading.Lock()
        self._listeners: List[Listener] = []
        self._watcher: Optional[SessionWatcher] = None  # the client's, found on the first hold
        self._cancelled = False  # cancel() was called since the current acquire (campaign) began
        self._drivers: Set[Any] = set()  # the drivers running this object's acquires, for cancel()
        self._setup()

    def _setup(self) -> None:
        """What a recipe adds to a new object (after validation, before any ZooKeeper call)."""

    # -- what a front supplies ---------------------------------------------------------------------
    _new_event: Callable[[], Any] = threading.Event  # the ``lost`` event's class

    def _told(self, hold: Hold, state: str) -> None:
        """A hold's listener (the session thread): hand ``_report(hold, state)`` to where listeners run."""
        raise NotImplementedError

    def _report(self, hold: Hold, state: str) -> None:
        raise NotImplementedError

    def _bind(self) -> None:
        """Before an acquire: tie the object to where its listeners run (the asyncio front: the loop)."""

    # -- states and listeners ------------------------------------------------------------------------
    def _set_state(self, state: str) -> None:
        """Record ``state`` and tell the listeners and the metrics hooks once per change (never from
        kazoo's threads)."""
        hooks = _metrics.installed
        if not self._listeners and hooks is None:  # nobody to tell: a plain store (a listener added
            self._state = state  # meanwhile sees the next change)
            return
        with self._state_lock:
            old = self._state
            if old == state:
                return
            self._state = state
            listeners = list(self._listeners)
        if hooks is not None:
            _metrics.call(hooks.state, self._metric, self.path, old, state)
        self._call_listeners(listeners, state)

    def _timed(self, steps: Steps[bool]) -> Steps[bool]:
        """An acquire's (campaign's) steps, timed for the metrics hooks if any are installed."""
        hooks = _metrics.installed
        return steps if hooks is None else _metrics.timed_acquire(hooks, self._metric, self.path, self._is_cancelled,
                                                                   steps)

    def _seen_by(self) -> Optional[Callable[[int], None]]:
        """The ``seen(n)`` an acquire tells how many are ahead when it waits: ``on_ahead``'s, the hooks'."""
        hooks = _metrics.installed
        return self._seen if hooks is None else _metrics.seen(hooks, self._metric, self.path, self._seen)

    def _call_listeners(self, listeners: List[Listener], state: str) -> None:
        for fn in listeners:
            try:
                fn(self, state)
            except Exception:
                log.exception("listener %r of %s failed", fn, self.path)

    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(self, state)`` on every state change (never on kazoo's threads; in :mod:`zkrecipes.aio`
        on the event loop's thread; keep it short)."""
        if not callable(fn):
            raise TypeError(f"listener must be callable, got {fn!r}")
        with self._state_lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Listener) -> None:
        """Stop calling ``fn``; unknown functions are ignored."""
        with self._state_lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def cancel(self) -> None:
        """Make this object's pending acquires or campaigns return False (a lock's ``with``/``hold()``
        raise :class:`~zkrecipes.LockCancelled`); their nodes are deleted. What is already held, a lock
        or leadership, is kept. Safe to call from any thread."""
        self._cancelled = True
        for d in list(self._drivers):
            d.interrupt()

    def _is_cancelled(self) -> bool:
        return self._cancelled

    # -- holds ---------------------------------------------------------------------------------------
    def _make_hold(self, entry: Entry, gate: object = None, listener: Optional[Listener] = None) -> Hold:
        """Follow our granted node (``listener`` told of each change); ``gate`` (a lock's local gate) lives
        as long as the hold."""
        watcher = self._watcher
        if watcher is None:
            watcher = self._watcher = SessionWatcher.of(self.client)
        hold = Hold(self.client, entry.path, entry.token, entry.session, self._verify, self._cleanup, watcher, listener)
        hold.gate = gate
        hold.recipe = self._metric
        if _kazoo.session_id(self.client) != entry.session:
            hold.settle()  # the connection dropped, or the session ended, while we were granted
        return hold

    def _verify(self, hold: Hold) -> bool:
        return _verify(hold)

    def _cleanup(self, hold: Hold) -> None:
        _cleanup(hold, self.retry, self._after_told)

    def _after_told(self) -> bool:
        """Return once the listeners told of a change so far have run (the session thread asks); False if
        they could not be seen to run (then nothing is deleted: the server removes it in time)."""
        return True

    def _certain(self, hold: Hold, what: str) -> Steps[None]:
        """Raise LockLost unless ``hold`` is certain: not lost, not suspended (unless tolerated), and
        confirmed by ZooKeeper if the process stood still since it was last known good."""
        error = yield from _confirm(hold)
        why = in_doubt(hold, self.tolerate_suspended)
        if why is not None:
            said = f" ({error!r})" if error else ""  # repr: a timeout's str() is empty
            raise LockLost(f"{self.path}: {what} ({hold.node}) is {why}{said}") from error

    def _fence_hold(self) -> Hold:
        """The hold a transaction is fenced by; raises if there is none (each recipe says how)."""
        raise NotImplementedError

    def _contenders(self) -> Steps[List[Contender]]:
        return _engine.contenders(self.path)


class LockCore(Participant):
    """Every lock's life as engine steps, for both fronts: :meth:`_acquire`, :meth:`_release`,
    :meth:`_check`; the public properties read the calling owner's hold from the local gate."""

    _kind = naming.WRITE
    _gate_key = "queue"  # lock objects with the same (client, path, key) share a gate
    _gate_prefix = ""  # the asyncio front's tasks get gates of their own, apart from threads
    _rule: "Callable[..., _engine.Blockers]" = staticmethod(predecessor)  # a recipe's may be a method
    _revoke_event: Any = None  # revoke_requested, made when first read
    _revokes_told: "Optional[weakref.WeakSet[Hold]]" = None  # holds whose revoke request we told
    _by_object: Optional[ObjectOwner] = None  # set with owner="object": the owner of this object's holds

    def __init__(
        self,
        client: KazooClient,
        path: str,
        identifier: Optional[str] = None,
        *,
        owner: Optional[str] = None,
        **options: Unpack[Options],
    ) -> None:
        by_object = validate_owner(owner, self._owner_word)
        super().__init__(client, path, identifier, **options)
        if by_object:
            self._own_by_object()

    def _setup(self) -> None:
        self._gate: Gate = _gate.gate(self.client, self.path, self._gate_prefix + self._gate_key)
        self._attached: Set[Hold] = set()  # the holds this object reports on

    def _own_by_object(self) -> None:
        """owner="object": the object's :class:`ObjectOwner` owns its holds for every thread and task, on a
        gate of the object's own (its own node, as kazoo's ``Lock``: other objects queue in ZooKeeper, and
        its own acquires wait their turn at that gate). Its ``_release`` detaches the object; the hold's and
        the gate's callbacks (``_told``, ``_detach``, ``_verify``, ``_cleanup``) go through the owner,
        so nothing of this process refers to the object strongly while it holds, and following an ended
        owner (``_track``) becomes remembering the gate: a collected object's hold is released then."""
        me = self._by_object = ObjectOwner(self)
        self._owner_word = OBJECT
        self._gate = Gate(self.path)  # (nobody else looks it up: a semaphore's is already per owner)
        self._release = me.release  # type: ignore[method-assign,assignment]
        self._told = me.told  # type: ignore[method-assign]
        self._detach = me.detach  # type: ignore[method-assign]
        self._verify = me.verify  # type: ignore[method-assign]
        self._cleanup = me.cleanup  # type: ignore[method-assign]
        self._track = me.track  # type: ignore[method-assign]
        self._name_orphan(f"{type(self).__name__} {self.path!r} (owner='object')")

    def _name_orphan(self, name: str) -> None:
        """Release what this object-owned lock holds when it is garbage-collected, with a warning naming it
        ``name`` (the object the caller used); a second call renames it."""
        old: "Optional[weakref.finalize[Any, Any]]" = getattr(self, "_orphan", None)
        if old is not None:
            old.detach()
        assert self._by_object is not None  # (owner="object" only)
        fin = self._orphan = weakref.finalize(self, _orphaned, self._by_object,
                                              f"{name}, garbage-collected while it held")
        fin.atexit = False  # at interpreter exit its node goes with the session (docs/ownership.rst)

    # -- what a front supplies ---------------------------------------------------------------------
    def _current_owner(self) -> Optional[Owner]:
        """The calling owner (thread or task), or None where there is none (outside a task)."""
        raise NotImplementedError

    def _track(self, me: Any, gate: Gate) -> None:
        """``me`` holds on ``gate`` now: release that if ``me`` ends holding it."""

    # -- what a recipe may change ------------------------------------------------------------------
    def _gate_for(self, me: Optional[Owner]) -> Gate:
        """The gate ``me`` takes this lock through (one per object; a semaphore's: one per owner)."""
        return self._gate

    def _wake_gates(self) -> None:
        self._gate.wake_all()

    def _steps(self, peek: bool = False) -> Steps[Entry]:
        """Our node's life until granted; ``peek``: a non-blocking attempt (it looks before it writes)."""
        fmt = self._format
        prefix, data, guid = fmt.node(self.host, self._kind, self.identifier)
        return _engine.acquire(
            self.path, self._acl, prefix, data, guid, self._rule, fmt=fmt, seen=self._seen_by(), peek=peek
        )

    # -- the life ------------------------------------------------------------------------------------
    def _acquire(self, me: Owner, blocking: bool) -> Steps[bool]:
        """Enter the gate (re-entry, a local reader joining, or our turn to queue), queue our node, hold.
        False on a miss, the deadline or a cancel (our node deleted). Timed for the metrics hooks."""
        return self._timed(self._acquire_steps(me, blocking))

    def _acquire_steps(self, me: Owner, blocking: bool) -> Steps[bool]:
        gate = self._gate_for(me)
        reentrant = self._by_object is None  # an object's second acquire waits for its release instead
        mine = gate.owned(me) if reentrant and gate.counts else None  # (only ``me`` adds itself to counts)
        if mine is not None:  # a re-entry: confirm a stalled hold first (the gate trusts only a confirmed one)
            yield from _confirm(mine)
        elif self._kind == naming.READ:
            yield from self._look_for_writers(gate, me)
        try:
            entered = yield from _gate.enter(
                gate, me, self._kind, blocking, _joinable, self.tolerate_suspended, self._title, reentrant
            )
        except (DeadlinePassed, Cancelled):
            return False
        if entered is Entered.HAVE:
            if mine is None:  # a new owner joined the read hold of other owners
                self._track(me, gate)
            self._attach(gate, gate.hold)
            return True
        if entered is None:
            return False
        if self.lost.is_set():  # (clear() takes a lock: only when there is something to clear)
            self.lost.clear()
        if self._revoke_event is not None and self._revoke_event.is_set():
            self._revoke_event.clear()
        self._set_state(WAITING)
        hold = None
        try:
            entry = yield from self._steps(peek=not blocking)
            hold = self._make_hold(entry, gate, self._told)  # a held lock's gate outlives its lock objects
        except (DeadlinePassed, Cancelled):
            pass
        finally:
            gate.granted(me, self._kind, hold, self._by_object or self, self._detach)
            if hold is None:
                self._set_state(IDLE)
        if hold is None:
            return False
        self._track(me, gate)
        self._attached.add(hold)
        self._report(hold, hold.state)  # (a change before this line was not reported: not yet attached)
        if self._revoke_event is not None or self._listeners:  # someone to tell: follow our node
            self._follow(hold)
        return True

    def _look_for_writers(self, gate: Gate, me: Owner) -> Steps[None]:
        """Before an owner joins this process's read hold: one listing per hold (see
        :meth:`Gate.look_behind <zkrecipes._gate.Gate.look_behind>`)."""
        hold = gate.unchecked_read_hold(me)
        if hold is None:
            return
        try:
            names = yield Read("get_children", self.path, once=True)
        except Exception:
            return  # not known: the hold's own state decides (a suspended hold is not joined)
        gate.look_behind(hold, self._format.parse(hold.node.rsplit("/", 1)[1]), self._format.sort(names))

    def _release(self, me: Owner) -> Steps[None]:
        """Release one level of ``me``'s hold at once (LockError if ``me`` holds none); the steps left
        delete our node after the last (see :func:`_gate.finish_leave`)."""
        gate = self._gate_for(me)
        return _gate.finish_leave(gate, gate.leave(me, self._kind, self._not_held))

    def _not_held(self, released: bool = True) -> LockError:
        """The LockError for a release (``released``), check or transaction by a caller that holds nothing
        here, naming the object the caller used (for every recipe and both fronts)."""
        if self._by_object is not None:
            return LockError(f"{self.path}: this {self._title} (owner='object') holds nothing: released "
                             "already, or not acquired")
        if released:
            return LockError(f"{self.path}: {self._title} released by a caller that does not hold it")
        return LockError(f"{self.path}: {self._title} not held by the calling {self._owner_word}")

    def _check(self, me: Optional[Owner]) -> Steps[None]:
        hold = self._my_hold(me)
        if hold is None:
            raise self._not_held(released=False)
        yield from self._certain(hold, "hold")

    def cancel(self) -> None:
        super().cancel()
        self._wake_gates()

    # -- reporting -----------------------------------------------------------------------------------
    def _attach(self, gate: Gate, hold: Hold) -> None:
        if not gate.attach(self._by_object or self, self._kind, self._detach):
            return
        self._attached.add(hold)
        hold.add_listener(self._told)
        self._report(hold, hold.state)
        if self._revoke_event is not None or self._listeners:  # someone to tell: follow our node
            self._follow(hold)

    def _detach(self, hold: Hold) -> None:
        hold.remove_listener(self._told)
        self._attached.discard(hold)
        self._set_state(IDLE)

    def _report(self, hold: Hold, state: str) -> None:
        if hold not in self._attached:
            return  # detached meanwhile: old news (a loss found while releasing is still told)
        if state == REVOKE:
            event = self._revoke_event
            if event is not None:
                event.set()
            with self._state_lock:
                if self._revokes_told is None:
                    self._revokes_told = weakref.WeakSet()
                if hold in self._revokes_told:
                    return  # once per hold
                self._revokes_told.add(hold)
                listeners = list(self._listeners)
            self._call_listeners(listeners, REVOKE)
            return
        if state == LOST:
            self.lost.set()
        self._set_state(state)

    # -- revocation (see zkrecipes.revoke) ---------------------------------------------------------------
    @property
    def revoke_requested(self) -> Any:
        """Set when someone asked the holder to let go (:func:`zkrecipes.request_revoke`, Curator's
        ``Revoker.attemptRevoke``); listeners are called with ``"revoke-requested"`` too. Nothing is taken:
        the hold stays until released (or broken: :func:`zkrecipes.break_lock`). Cleared by the next acquire
        that queues a node. A ``threading.Event`` (an ``asyncio.Event`` in :mod:`zkrecipes.aio`).

        Holds follow their node (one read and one data watch per hold, not waited for) only for a lock
        object that listens: from the first read of this attribute, or once it has a listener. Such a
        hold also learns at once that its node was deleted by someone else: it is lost."""
        event = self._revoke_event
        if event is None:
            with self._state_lock:
                if self._revoke_event is None:
                    self._revoke_event = self._new_event()
                event = self._revoke_event
            for hold in list(self._attached):
                hold.follow_node()
                if hold.revoke:  # seen for another object of the hold: told where this front tells
                    self._told(hold, REVOKE)
        return event

    def add_listener(self, fn: Listener) -> None:
        super().add_listener(fn)
        for hold in list(self._attached):
            hold.follow_node()

    add_listener.__doc__ = Participant.add_listener.__doc__

    def _follow(self, hold: Hold) -> None:
        """Follow ``hold``'s node (this object listens); tell it a revoke request seen before it attached."""
        hold.follow_node()
        if hold.revoke:
            self._report(hold, REVOKE)

    # -- what every lock reports -------------------------------------------------------------------
    def _my_hold(self, me: Optional[Owner]) -> Optional[Hold]:
        if me is None:
            return None
        hold: Optional[Hold] = self._gate_for(me).held_by(me, self._kind)
        return hold

    def _fence_hold(self) -> Hold:
        hold = self._my_hold(self._current_owner())
        if hold is None:
            raise self._not_held(released=False)
        return hold

    @property
    def state(self) -> LockState:
        """``"idle"``, ``"waiting"``, ``"held"``, ``"suspended"`` or ``"lost"``."""
        return self._state  # type: ignore[return-value]

    @property
    def is_held(self) -> bool:
        """True only for the owner (thread; task in :mod:`zkrecipes.aio`) that holds the lock while the hold
        is certain: not suspended or lost, and confirmed by ZooKeeper since the process last stood still
        (GC pause, SIGSTOP)."""
        hold = self._my_hold(self._current_owner())
        return hold is not None and hold.state == HELD and not hold.stale()

    @property
    def token(self) -> Optional[int]:
        """The fencing token (the czxid of our node, growing across the whole ensemble) while held, else None."""
        gate = self._gate_for(self._current_owner())
        hold = gate.hold
        mine = hold is not None and hold.state != LOST and (self._by_object or self) in gate.objects
        return hold.token if mine else None

    @property
    def node(self) -> Optional[str]:
        """Full path of our node while held, else None."""
        gate = self._gate_for(self._current_owner())
        hold = gate.hold
        return hold.node if hold is not None and (self._by_object or self) in gate.objects else None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path!r} state={self._state}>"


class Threaded(Participant):
    """The threaded front: a hold is owned by a thread; steps run on the calling thread (:class:`Driver`)."""

    _by_object: Optional[ObjectOwner] = None

    def _current_owner(self) -> Owner:
        return self._by_object or threading.current_thread()

    def _run(self, steps: Steps[T], deadline: Optional[float] = None, nowait: bool = False) -> T:
        try:  # steps that need no request (a check of a confirmed hold, a re-entry) need no driver
            op = steps.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        driver = Driver(self.client, deadline, self._is_cancelled, self.retry, nowait, self.path)
        self._drivers.add(driver)
        try:
            return driver.run(steps, op)
        finally:
            self._drivers.discard(driver)

    def _told(self, hold: Hold, state: str) -> None:
        self._report(hold, state)

    _track = staticmethod(_reaper.track)  # a thread that ends holding: its hold is released

    def _check_hold(self, hold: Hold, what: str) -> None:
        self._run(self._certain(hold, what))

    def transaction(self) -> HeldTransaction:
        """A kazoo transaction that commits only while this hold lives (ZooKeeper's ``IsOwner()``
        compare): see :class:`~zkrecipes.transaction.HeldTransaction`. Raises as :meth:`check` does
        when there is no hold to fence by."""
        return HeldTransaction(self.client, self.path, self._fence_hold(), self._check_hold)

    def contenders(self) -> List[Contender]:
        """Every holder and waiter in queue order, as :class:`~zkrecipes.Contender` tuples (``[]`` if the
        path does not exist). Connection errors are raised, not hidden."""
        return self._run(self._contenders())


def _in_event_loop() -> bool:
    """True on a thread that runs an asyncio event loop now (none can while asyncio is not imported)."""
    aio = sys.modules.get("asyncio")
    if aio is None:
        return False
    try:
        aio.get_running_loop()
    except RuntimeError:
        return False
    return True


_NOT_CALLERS = (os.path.dirname(os.path.abspath(__file__)) + os.sep, contextlib.__file__)  # (``with lock.hold()``)


class Lock(Holding, Threaded, LockCore):
    """Base of every threaded zkrecipes lock. See :class:`~zkrecipes.FairLock` for the documented API."""

    _warned_loop = False  # a blocking acquire on an event loop's thread was warned of (once per object)

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Acquire the lock; return True once held.

        Returns False on a non-blocking miss, when ``timeout`` seconds pass, or when :meth:`cancel` is
        called; in every such case (and on any exception, KeyboardInterrupt included) the node this call
        created is deleted and its watch removed. Reentrant per thread: each acquire needs a release
        (with ``owner="object"`` the object owns the hold, as threading.Lock: another acquire of it, from
        any thread, waits its turn -- False on a try or when ``timeout`` passes, nothing left behind).
        Re-entry into a hold that is lost or in doubt (suspended, unless ``tolerate_suspended``; not
        confirmed by ZooKeeper after the process stood still) raises :class:`~zkrecipes.LockLost`
        naming the path and node, and adds no level: the outer release still ends the hold.
        ``timeout=0`` makes one attempt without waiting, like ``blocking=False``. Such an attempt lists the
        queue first: if the listing shows the lock held, it returns False after that one read, with no
        write; if another thread of this process holds it, with no request at all.

        A blocking call on a thread that runs an asyncio event loop stops the loop until the lock is
        granted: it warns (``RuntimeWarning``, once per lock object); use :mod:`zkrecipes.aio` there.
        """
        blocking, deadline = acquire_deadline(blocking, timeout)
        if blocking and not self._warned_loop and _in_event_loop():
            self._warn_loop()
        me = self._by_object or threading.current_thread()
        self._reap(me)
        self._cancelled = False
        return self._run(self._acquire(me, blocking), deadline, not blocking)

    def release(self) -> None:
        """Release one level of this thread's hold (with ``owner="object"``: the object's hold, from any
        thread); the last release deletes our node.

        Raises LockError if the calling thread (the object) does not hold the lock. After the hold was lost,
        release only clears local state: it never deletes a node that may now be someone else's (only one
        it has just read as a node of a session this client gave up, see docs/session-loss.rst). Without
        a connection (suspended), release waits for one at most until the hold is declared lost (the
        session timeout); a loss found while releasing is reported (``"lost"``, then ``"idle"``).
        """
        me = self._by_object or threading.current_thread()
        self._reap(me)
        Driver(self.client, None, never, self.retry).run(self._release(me))  # (not cancellable: no cancel() hook)

    def check(self) -> None:
        """Return if the calling thread's hold is certain; raise LockLost if it is lost or (unless
        built with ``tolerate_suspended=True``) suspended, LockError if this thread does not hold it.

        Cheap (no request) unless the process stood still since the hold was last confirmed: then it
        first asks ZooKeeper whether our node is still ours, and raises LockLost if it is not or if
        ZooKeeper cannot be reached to say so."""
        me = self._by_object or threading.current_thread()
        self._reap(me)
        self._run(self._check(me))

    def _warn_loop(self) -> None:
        self._warned_loop = True
        import inspect  # (once per lock object at most)

        frame, level = inspect.currentframe(), 1  # point the warning at the first caller outside zkrecipes
        while frame is not None and frame.f_back is not None and frame.f_code.co_filename.startswith(_NOT_CALLERS):
            frame, level = frame.f_back, level + 1
        warnings.warn(f"{self!r}: a blocking acquire() on the thread of a running asyncio event loop stops "
                      f"the loop until the lock is granted; in coroutines use zkrecipes.aio."
                      f"{type(self).__name__} (await lock.acquire())", RuntimeWarning, stacklevel=level)

    def _reap(self, me: Owner) -> None:
        """Release what threads that ended hold on this lock's gate (see :mod:`zkrecipes._reaper`)."""
        counts = self._gate.counts
        if counts and (len(counts) > 1 or me not in counts):  # someone else holds here: maybe ended
            _reaper.reap(self._gate)

    def once(self, key: str, keep: float = 86400.0, timeout: Optional[float] = None) -> "Once":
        """``with lock.once("2026-11-26T15:00") as run: if run: job(); run.done()`` -- hold the lock (LockTimeout
        after ``timeout``), then ``run`` is true if ``key`` was not done within ``keep`` seconds (default a
        day) by anyone holding this lock path; ``run.done()`` marks it done, fenced by the hold. A job that
        raises, or a hold lost before ``done()``, leaves the key open. See :doc:`/once` and
        :class:`~zkrecipes.once.Once`. A bad key or keep, or a read lock or semaphore, raises before any
        request."""
        from .once import Once

        return Once(self, key, keep, timeout, acl=self._acl, shared=self._kind in (naming.READ, naming.LEASE))

    def _acquire_or_raise(self, timeout: Optional[float]) -> None:
        if not self.acquire(timeout=timeout):
            if self._cancelled:
                raise LockCancelled(f"acquire of {self.path} was cancelled")
            raise LockTimeout(f"could not acquire {self.path} within {timeout} s")


def on_ahead(lock: Participant, fn: Optional[Callable[[int], None]]) -> None:
    """Call ``fn(n)`` on the acquiring thread with how many nodes are ahead of ours each time an acquire of
    ``lock`` (a campaign, for an election) is about to wait: from its own listings, no request or watch of
    its own (the CLI's ``--progress``; the tooz backend's "queued" for ``run_watchers()``)."""
    lock._seen = fn

