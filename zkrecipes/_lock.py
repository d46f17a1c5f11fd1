"""A lock's whole life, written once for both fronts, and the threaded front.

:class:`Participant` validates the shared constructor arguments and keeps states and listeners;
:class:`LockCore` is a lock's life as engine steps (:mod:`zkrecipes._engine`): enter the local gate
(:mod:`zkrecipes._gate`), queue our node, hold, check, release. A recipe declares its node kind
(``_kind``), its wait-rule (``_rule``) and, if it is not a queue, its steps (``_steps``). A front says
who owns a hold (a thread here, a task in :mod:`zkrecipes.aio`) and which driver runs the steps
(:class:`Threaded` here).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, Callable, List, Optional, Set, Tuple

from kazoo.client import KazooClient

from . import _engine, _follow, _gate, _kazoo, _listing, _reaper, naming
from . import metrics as _metrics
from ._blocking import Blocking
from ._drive import Driver, never
from ._engine import predecessor as predecessor  # the wait-rule of exclusive queue members (re-exported)
from ._gate import Entered, Gate, in_doubt
from ._listeners import Listeners
from ._ownership import OBJECT as OBJECT  # owner="object" (re-exported: the recipes' fronts use it)
from ._ownership import ObjectOwner as ObjectOwner  # the object-owned policy (re-exported, as OBJECT)
from ._ownership import validate_owner
from ._reporting import LockState as LockState  # (re-exported: the recipes use it)
from ._reporting import Owner as Owner  # a thread, an asyncio task, or an ObjectOwner (re-exported)
from ._reporting import Reports
from ._settings import LockArgs, Settings
from ._signature import Options
from ._steps import NOW, Cancelled, DeadlinePassed, Entry, Steps, T, Taken, WaitGate, Watched
from .errors import LockLost
from .naming import Contender
from .session import HELD, LOST, REVOKE, Hold, SessionWatcher
from .transaction import HeldTransaction

log = logging.getLogger("zkrecipes.lock")

IDLE: LockState = "idle"
WAITING: LockState = "waiting"
NOWAIT_OPS_TIMEOUT = 30.0  # bound on the round trips of a non-blocking attempt
Listener = Callable[[Any, str], None]


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
    """A local reader may join ``hold``: held, not in doubt, confirmed since any stall."""
    return hold is not None and hold.state == HELD and not hold.in_doubt() and not hold.stale()


class Participant(Settings):
    """Validates the shared constructor arguments (before any ZooKeeper call: :class:`Settings`), keeps
    states and listeners, and makes and checks holds. A front supplies the ``_told`` hook (below)."""

    _title = "FairLock"  # the recipe, as its users call it, in messages
    _metric = "fair"  # the recipe's label in metrics (zkrecipes.metrics)
    _on_ahead: Optional[Callable[[int], None]] = None  # told how many are ahead while waiting (see on_ahead)
    _owner_word = "thread"  # who owns a hold, in error messages
    _by_object: Optional[ObjectOwner] = None  # the ownership policy with owner="object" (else the object itself)

    def _begin(self) -> None:
        _kazoo.attend(self.client)  # nudged replies, a cheaper select on its I/O thread
        self.lost = self._new_event()  # set when the hold (or leadership) is lost; cleared by a new acquire
        self._state = "idle"
        self._state_lock = threading.Lock()
        self._listeners = Listeners(self._state_lock)
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
                                                                   steps, NOW)

    def _ahead_hook(self) -> Optional[Callable[[int], None]]:
        """The ``on_ahead(n)`` an acquire tells how many are ahead when it waits: ``on_ahead``'s, the hooks'."""
        hooks = _metrics.installed
        return self._on_ahead if hooks is None else _metrics.on_ahead(hooks, self._metric, self.path, self._on_ahead)

    def _call_listeners(self, listeners: List[Listener], state: str) -> None:
        self._listeners.tell(self, state, to=listeners, about=self.path)

    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(self, state)`` on every state change (never on kazoo's threads; in :mod:`zkrecipes.aio`
        on the event loop's thread; keep it short)."""
        self._listeners.add(fn)
        self._listening()

    def _listening(self) -> None:
        """Someone listens now (a lock object follows its holds' nodes then: :mod:`zkrecipes._follow`)."""

    def remove_listener(self, fn: Listener) -> None:
        """Stop calling ``fn``; unknown functions are ignored."""
        self._listeners.discard(fn)

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
        hold = _follow.FollowedHold(self.client, entry.path, entry.token, entry.session, _follow.verify,
                                    (self._by_object or self)._cleanup, watcher, listener, _follow.confirm_later)
        hold.gate = gate
        hold.recipe = self._metric
        if _kazoo.session_id(self.client) != entry.session:
            hold.settle()  # the connection dropped, or the session ended, while we were granted
        return hold

    def _cleanup(self, hold: Hold) -> None:
        _follow.cleanup(hold, self.retry, self._after_told)

    def _after_told(self) -> bool:
        """Return once the listeners told of a change so far have run (the session thread asks); False if
        they could not be seen to run (then nothing is deleted: the server removes it in time)."""
        return True

    def _certain(self, hold: Hold, what: str) -> Steps[None]:
        """Raise LockLost unless ``hold`` is certain: not lost, not suspended (unless tolerated), and
        confirmed by ZooKeeper if the process stood still since it was last known good."""
        error = yield from _follow.confirm(hold)
        why = in_doubt(hold, self.tolerate_suspended)
        if why is not None:
            said = f" ({error!r})" if error else ""  # repr: a timeout's str() is empty
            raise LockLost(f"{self.path}: {what} ({hold.node}) is {why}{said}") from error

    def _fence_hold(self) -> Hold:
        """The hold a transaction is fenced by; raises if there is none (each recipe says how)."""
        raise NotImplementedError

    def _contenders(self) -> Steps[List[Contender]]:
        return _listing.contenders(self.path)


class LockCore(LockArgs, _follow.Revocable, Reports, Participant):
    """Every lock's life as engine steps, for both fronts: :meth:`_acquire`, :meth:`_release`,
    :meth:`_check`; the public properties read the calling owner's hold from the local gate."""

    _kind = naming.WRITE
    _gate_key = "queue"  # lock objects with the same (client, path, key) share a gate
    _gate_prefix = ""  # the asyncio front's tasks get gates of their own, apart from threads
    _rule: "Callable[..., _engine.Blockers]" = staticmethod(predecessor)  # a recipe's may be a method
    _by_object: Optional[ObjectOwner] = None  # set with owner="object": the owner of this object's holds

    def _build(
        self, client: KazooClient, path: str, identifier: Optional[str], owner: Optional[str], options: Options
    ) -> None:
        by_object = validate_owner(owner, self._owner_word)
        Settings.__init__(self, client, path, identifier, **options)
        if by_object:
            self._own_by_object()

    def _setup(self) -> None:
        self._gate: Gate = _gate.gate(self.client, self.path, self._gate_prefix + self._gate_key)
        self._attached: Set[Hold] = set()  # the holds this object reports on

    def _own_by_object(self) -> None:
        """owner="object": the object's :class:`ObjectOwner` owns its holds for every thread and task, on a
        gate of the object's own (its own node, as kazoo's ``Lock``: other objects queue in ZooKeeper, and
        its own acquires wait their turn at that gate). The lock calls its hooks through that policy
        (``self._by_object or self``: ``_told``, ``_detach``, ``_cleanup``, ``_track``), so nothing of this
        process refers to the object strongly while it holds, and following an ended owner becomes
        remembering the gate: a collected object's hold is released then."""
        self._by_object = ObjectOwner(self)
        self._owner_word = OBJECT
        self._gate = Gate(self.path)  # (nobody else looks it up: a semaphore's is already per owner)
        self._name_orphan(f"{type(self).__name__} {self.path!r} (owner='object')")

    def _name_orphan(self, name: str) -> None:
        """Release what this object-owned lock holds when it is garbage-collected, with a warning naming it
        ``name`` (the object the caller used); a second call renames it."""
        assert self._by_object is not None  # (owner="object" only)
        self._by_object.name(self, name)

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
            self.path, self._acl, prefix, data, guid, self._rule, fmt=fmt, on_ahead=self._ahead_hook(), peek=peek
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
            yield from _follow.confirm(mine)
        elif self._kind == naming.READ and gate.mode == naming.READ:
            stalled = gate.hold
            if stalled is not None and stalled.stale():  # a hold the process stood still on: confirm it first
                yield from _follow.confirm(stalled)
        try:
            while True:
                entered = yield from _gate.enter(
                    gate, me, self._kind, blocking, _joinable, self.tolerate_suspended, self._title, reentrant
                )
                if entered is not Entered.HAVE or mine is not None or self._kind != naming.READ:
                    break
                if (yield from self._look_behind(gate, me, gate.hold)):  # a new owner joined other owners' read
                    break
        except (DeadlinePassed, Cancelled):
            return False
        if entered is Entered.HAVE:
            if mine is None:
                (self._by_object or self)._track(me, gate)
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
            hooks = self._by_object or self  # the ownership policy: the object's owner, or the lock itself
            hold = self._make_hold(entry, gate, hooks._told)  # a held lock's gate outlives its lock objects
        except (DeadlinePassed, Taken, Cancelled):
            pass
        finally:
            gate.granted(me, self._kind, hold, self._by_object or self, (self._by_object or self)._detach)
            if hold is None:
                self._set_state(IDLE)
        if hold is None:
            return False
        hooks._track(me, gate)
        self._attached.add(hold)
        self._report(hold, hold.state)  # (a change before this line was not reported: not yet attached)
        if self._revoke_event is not None or self._listeners:  # someone to tell: follow our node
            self._follow(hold)
        return True

    def _look_behind(self, gate: Gate, me: Owner, hold: Hold) -> Steps[bool]:
        """After ``me`` joined this process's read hold: nothing while the queue behind it is known clear,
        else one listing that sets the gate's child watch (:meth:`Gate.look_behind
        <zkrecipes._gate.Gate.look_behind>`), or a wait for the one another reader is making; ``me`` holds
        meanwhile, so the hold cannot end under it. True: ``me`` stays; False: a writer is queued behind
        our node, ``me`` left it again (and deleted it if it was the last). A deadline, cancel or Ctrl-C
        meanwhile leaves too, then is raised."""
        cut: Optional[BaseException] = None
        while True:
            what, n = gate.start_look(hold)
            if what == "done":
                break
            queue = None
            try:
                if what == "wait":
                    yield WaitGate(gate, n)
                    continue
                queue = self._format.sort((yield Watched("get_children", self.path, gate.queue_changed, once=True)))
            except (DeadlinePassed, Cancelled) as exc:
                cut = exc
            except Exception:
                pass  # not known: the hold's own state decides, and the next reader to join looks again
            except BaseException as exc:  # Ctrl-C: acquire() raises, so ``me`` must not stay
                cut = exc
            if what == "look":
                gate.look_behind(hold, self._format.parse(hold.node.rsplit("/", 1)[1]), queue, n)
            break
        if cut is None and gate.writer_behind is not hold:
            return True
        yield from _gate.finish_leave(gate, gate.leave(me, self._kind))
        if cut is not None:
            raise cut
        return False

    def _release(self, me: Owner) -> Steps[None]:
        """Release one level of ``me``'s hold at once (LockError if ``me`` holds none); the steps left
        delete our node after the last (see :func:`_gate.finish_leave`); an object-owned lock also stops
        following a hold other owners keep (:meth:`ObjectOwner.left`)."""
        gate = self._gate_for(me)
        left = gate.leave(me, self._kind, self._not_held)
        owner = self._by_object
        return _gate.finish_leave(gate, left if owner is None else owner.left(gate, left))

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
        hooks = self._by_object or self
        if not gate.attach(hooks, self._kind, hooks._detach):
            return
        self._attached.add(hold)
        hold.add_listener(hooks._told)
        self._report(hold, hold.state)
        if self._revoke_event is not None or self._listeners:  # someone to tell: follow our node
            self._follow(hold)

    def _detach(self, hold: Hold) -> None:
        hold.remove_listener((self._by_object or self)._told)
        self._attached.discard(hold)
        self._set_state(IDLE)

    def _report(self, hold: Hold, state: str) -> None:
        if hold not in self._attached:
            return  # detached meanwhile: old news (a loss found while releasing is still told)
        if state == REVOKE:
            self._report_revoke(hold)
            return
        if state == LOST:
            self.lost.set()
        self._set_state(state)

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


class Lock(Blocking, Threaded, LockCore):
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

    def _reap(self, me: Owner) -> None:
        """Release what threads that ended hold on this lock's gate (see :mod:`zkrecipes._reaper`). A reader
        in a read hold looks at most once per :data:`~zkrecipes._reaper.LOOK_EVERY` per gate, so that
        threads sharing it do not each look at all the others on every call (an ended reader blocks no
        reader); anyone else looks every time."""
        gate = self._gate
        counts = gate.counts
        if counts and (len(counts) > 1 or me not in counts):  # someone else holds here: maybe ended
            if self._kind == naming.READ and gate.mode == naming.READ:
                now = time.monotonic()
                if now - gate.reaped_at < _reaper.LOOK_EVERY:
                    return
                gate.reaped_at = now
            _reaper.reap(gate)



def on_ahead(lock: Participant, fn: Optional[Callable[[int], None]]) -> None:
    """Call ``fn(n)`` on the acquiring thread with how many nodes are ahead of ours each time an acquire of
    ``lock`` (a campaign, for an election) is about to wait: from its own listings, no request or watch of
    its own (the CLI's ``--progress``; the tooz backend's "queued" for ``run_watchers()``)."""
    lock._on_ahead = fn

