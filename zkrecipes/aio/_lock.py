"""The asyncio locks: the threaded recipes' declarations (kind, wait-rule, node format) on the asyncio driver.

Each asyncio lock wraps its threaded recipe object as its *core*: the core validates the constructor's
arguments (before any ZooKeeper call), declares the node kind and the wait-rule, builds the engine's
generator, and makes and verifies holds. Only the waiting, the local gate's wait and the reporting are
asyncio here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import weakref
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Dict,
    Generator,
    List,
    Optional,
    Sequence,
    Set,
    Type,
)

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, SessionExpiredError
from kazoo.security import ACL

from .. import _gate, _participant, formats, naming
from .. import _lock as _core_lock
from .. import exclusive as _exclusive
from .. import fair as _fair
from .. import rwlock as _rwlock
from .._engine import Cancelled, DeadlinePassed, owns
from .._gate import Entered, Gate, in_doubt
from .._lock import IDLE, NOWAIT_OPS_TIMEOUT, WAITING, HeldView, LockState
from .._lock import Lock as _CoreLock
from .._participant import Participant
from .._signature import NamedInit
from ..errors import LockCancelled, LockError, LockLost, LockTimeout
from ..naming import Contender
from ..session import HELD, LOST, Hold
from . import _driver
from ._driver import AioDriver, call_soon
from ._gate import enter
from .transaction import HeldTransaction

log = logging.getLogger("zkrecipes.aio")

Listener = Callable[[Any, str], None]


def _joinable(hold: Optional[Hold]) -> bool:
    return hold is not None and hold.state == HELD


class _Passed:
    """The awaitable of a check that needed no confirming read: already done (awaiting it returns None)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator: awaiting it suspends nothing


_PASSED = _Passed()


def _task() -> "asyncio.Task[Any]":
    task = asyncio.current_task()
    if task is None:
        raise LockError("zkrecipes.aio locks are owned by asyncio tasks: call from within a task")
    return task


# tasks that run an acquire for the task that called it (asyncio.wait_for on Python <= 3.11 and
# ensure_future run the coroutine in a task of their own): what they acquire belongs to that caller
_acting_for: "weakref.WeakKeyDictionary[asyncio.Task[Any], asyncio.Task[Any]]" = weakref.WeakKeyDictionary()


def owner_of(task: "asyncio.Task[Any]") -> "asyncio.Task[Any]":
    """The task that owns what ``task`` acquires: itself, or the task it acquires for."""
    return _acting_for.get(task, task)


def owner() -> "asyncio.Task[Any]":
    """The owner (see :func:`owner_of`) for the calling task."""
    return owner_of(_task())


def _caller() -> "Optional[asyncio.Task[Any]]":
    """The task calling now, or None outside a running loop."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class AioParticipant(NamedInit):
    """States, listeners (called on the event loop's thread) and the ``lost`` event of one object."""

    def __init__(self, core: Participant) -> None:
        self._core = core
        self.client: KazooClient = core.client
        self.path: str = core.path
        self.protocol: str = core.protocol  # the node format's name, as given to the constructor
        self.lost = asyncio.Event()
        self._state: str = IDLE
        self._listeners: List[Listener] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop and not self._loop.is_closed():
            raise LockError(f"{self.path}: this object is in use on another event loop")
        self._loop = loop
        return loop

    def _set_state(self, state: str) -> None:
        if self._state == state:
            return
        self._state = state
        for fn in list(self._listeners):
            try:
                fn(self, state)
            except Exception:
                log.exception("listener %r of %s failed", fn, self.path)

    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(self, state)`` on every state change, on the event loop's thread (keep it short)."""
        if not callable(fn):
            raise TypeError(f"listener must be callable, got {fn!r}")
        self._listeners.append(fn)

    def remove_listener(self, fn: Listener) -> None:
        """Stop calling ``fn``; unknown functions are ignored."""
        if fn in self._listeners:
            self._listeners.remove(fn)

    def _check_now(self, hold: Hold, what: str) -> Awaitable[None]:
        """Participant's certainty check, at the call: raise LockLost now if ``hold`` is lost or
        suspended (unless tolerated). The awaitable returned confirms a hold the process stood still on
        (one read), as the threaded check does before it decides; otherwise it is already done."""
        if hold.stale():
            return self._confirm_and_check(hold, what)
        why = in_doubt(hold, self._core.tolerate_suspended)
        if why is not None:
            raise LockLost(f"{self.path}: {what} ({hold.node}) is {why}")
        return _PASSED

    async def _confirm_and_check(self, hold: Hold, what: str) -> None:
        error = await self._confirm(hold)
        why = in_doubt(hold, self._core.tolerate_suspended)
        if why is not None:
            raise LockLost(f"{self.path}: {what} ({hold.node}) is {why}" + (f" ({error})" if error else "")) from error

    async def _check_hold(self, hold: Hold, what: str) -> None:
        """:meth:`_check_now`, awaited."""
        await self._check_now(hold, what)

    async def _confirm(self, hold: Hold) -> Optional[Exception]:
        """:meth:`Hold.confirm <zkrecipes.session.Hold.confirm>` with its read awaited: a stalled hold is
        confirmed, or marked lost if its node is gone or not ours; returns the error if ZooKeeper could
        not say (the hold stays unconfirmed)."""
        if not hold.stale():
            return None
        asked = time.monotonic()
        try:
            ok = owns(await _driver.result(self.client.exists_async(hold.node)), hold.session)
        except (NoNodeError, SessionExpiredError):
            ok = False
        except Exception as exc:  # ConnectionLoss, timeouts: cannot tell yet
            return exc
        hold.confirmed(ok, asked)
        return None

    async def _delete_held(self, hold: Hold) -> None:
        """Participant's release of a hold, awaited: delete the node unless the hold is lost; a session
        found gone marks the hold lost (its owner is told even this late)."""
        hold.releasing = True
        try:
            if hold.state != LOST and not await _driver.delete(
                self.client, hold.node, hold.session, self._core.retry, gone=lambda: hold.state == LOST
            ):
                hold.mark_lost()
        finally:
            hold.close()

    async def contenders(self) -> List[Contender]:
        """Every holder and waiter in queue order (``[]`` if the path does not exist); connection errors
        are raised, not hidden."""
        return await _driver.contenders(self.client, self.path)


class Lock(HeldView, AioParticipant):
    """Base of the asyncio locks; see :class:`FairLock` for the documented API."""

    _core_class: Type[_CoreLock] = _fair.FairLock

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
        core = self._core_class(
            client, path, identifier, host=host, acl=acl, retry=retry, tolerate_suspended=tolerate_suspended,
            protocol=protocol,
        )
        self._wrap(core)

    def _wrap(self, core: _CoreLock) -> None:
        super().__init__(core)
        self._lock_core = core
        self._kind, self._gate_key = _core_lock.declared(core)
        self._setup_gate()
        self._cancelled = False
        self._drivers: Set[AioDriver] = set()
        self._attached: Dict[Hold, Callable[[str], None]] = {}  # the holds this object reports on
        self._followed: "weakref.WeakSet[asyncio.Task[Any]]" = weakref.WeakSet()  # owners told to _owner_ended
    def _follow_owner(self, task: "asyncio.Task[Any]") -> None:
        """Release what ``task`` still holds when it ends (nobody else can): no node outlives its owner.
        One callback per task and object, however often the task acquires (a loop must not pile them up)."""
        if task not in self._followed:
            self._followed.add(task)
            task.add_done_callback(self._owner_ended)

    def _owner_ended(self, task: "asyncio.Task[Any]") -> None:
        gate = self._gate_of(task)
        if gate is None or gate.held_by(task, self._kind) is None:
            return
        log.warning("%s: released: its owner %r ended without releasing it", self.path, task)
        asyncio.ensure_future(self._release_all(task, gate), loop=self._loop)

    def _gate_of(self, task: "asyncio.Task[Any]") -> Optional[Gate]:
        return self._gate

    async def _release_all(self, owner: "asyncio.Task[Any]", gate: Gate) -> None:
        while gate.held_by(owner, self._kind) is not None:
            await self._release_as(owner, gate)

    def _setup_gate(self) -> None:
        # tasks get their own gates (and so their own node), apart from the threads of this process
        self._gate: Gate = _gate.gate(self.client, self.path, "aio-" + self._gate_key)

    # -- acquire / release ---------------------------------------------------------------------------
    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> "Coroutine[Any, Any, bool]":
        """Acquire the lock for the calling task; True once held (await it).

        False on a non-blocking miss, when ``timeout`` seconds pass, or when :meth:`cancel` is called;
        then no node and no watch is left. Cancelling the task raises CancelledError in it and deletes
        its node, also when the cancel lands while the create is in flight. Reentrant per task; re-entry
        into a hold that is lost or in doubt raises :class:`~zkrecipes.LockLost`, as the threaded
        :meth:`zkrecipes.FairLock.acquire` does.
        """
        return self._acquire(_caller(), blocking, timeout)  # the caller owns it, also when a task of
        # its own runs the coroutine (asyncio.wait_for on Python <= 3.11, ensure_future)

    async def _acquire(self, caller: "Optional[asyncio.Task[Any]]", blocking: bool, timeout: Optional[float]) -> bool:
        runner = _task()
        if caller is not None and caller is not runner:
            _acting_for[runner] = _acting_for.get(caller, caller)
        if not isinstance(blocking, bool):
            raise TypeError(f"blocking must be a bool, got {blocking!r}")
        timeout = naming.validate_timeout(timeout)
        if not blocking and timeout is not None:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout == 0:
            blocking, timeout = False, None
        me = owner()
        self._bind()
        deadline = None if timeout is None else time.monotonic() + timeout
        self._cancelled = False
        mine = self._gate.owned(me)
        if mine is not None:  # a re-entry: confirm a stalled hold first (the gate trusts only a confirmed one)
            await self._confirm(mine)
        elif self._kind == naming.READ:
            await self._look_for_writers(me, deadline)
        entered = await enter(
            self._gate, me, self._kind, blocking, deadline, lambda: self._cancelled, _joinable,
            self._core.tolerate_suspended,
        )
        if entered is Entered.HAVE:
            if mine is None:  # a new owner joined the read hold of other tasks
                self._follow_owner(me)
            self._attach(self._gate.hold)
            return True
        if entered is None:
            return False
        return await self._acquire_node(me, blocking, deadline)

    async def _look_for_writers(self, me: object, deadline: Optional[float]) -> None:
        """As the threaded ReadLock: one listing per read hold, before a task joins it."""
        hold = self._gate.unchecked_read_hold(me)
        if hold is None:
            return
        limit = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            names = await asyncio.wait_for(_driver.result(self.client.get_children_async(self.path)), limit)
        except Exception:
            return  # not known: the hold's own state decides (a suspended hold is not joined)
        fmt, _ = _participant.node_format(self._lock_core)
        self._gate.look_behind(hold, fmt.parse(hold.node.rsplit("/", 1)[1]), fmt.sort(names))

    async def _acquire_node(self, me: object, blocking: bool, deadline: Optional[float]) -> bool:
        self.lost.clear()
        self._set_state(WAITING)
        ops_deadline = deadline if blocking else time.monotonic() + NOWAIT_OPS_TIMEOUT
        driver = AioDriver(self.client, ops_deadline, self._core.retry, nowait=not blocking, path=self.path)
        self._drivers.add(driver)
        hold = None
        try:
            entry = await driver.run(_core_lock.acquire_steps(self._lock_core))
            hold = _participant.make_hold(self._core, entry, gate=self._gate)  # a held lock's gate outlives its objects
        except (DeadlinePassed, Cancelled):
            pass
        finally:
            self._drivers.discard(driver)
            self._gate.granted(me, self._kind, hold)
            if hold is None:
                self._set_state(IDLE)
        if hold is None:
            return False
        self._follow_owner(me)  # type: ignore[arg-type]  # the aio front's owners are tasks
        self._attach(hold)
        return True

    async def release(self) -> None:
        """Release one level of the calling task's hold; the last release deletes our node.

        Raises LockError if the calling task does not hold the lock. A lost hold is only forgotten
        locally (its node may be someone else's); without a connection it waits for one at most until
        the hold is declared lost."""
        me = owner()
        await self._release_as(me, self._gate)

    async def _release_as(self, owner: "asyncio.Task[Any]", gate: Gate) -> None:
        left = gate.leave(owner, self._kind)
        if not left.last:
            for detach in left.downgraded:
                detach(left.hold)
            return
        try:
            await self._delete_held(left.hold)
        finally:
            gate.released()
            for detach in left.detach:
                detach(left.hold)

    def cancel(self) -> None:
        """Make pending acquires of this object return False (``async with``/``hold()`` raise
        :class:`~zkrecipes.LockCancelled`); their nodes are deleted. Callable from any thread."""
        loop = self._loop
        if loop is not None:
            call_soon(loop, self._cancel_now)

    def _cancel_now(self) -> None:
        self._cancelled = True
        for d in list(self._drivers):
            d.interrupt(Cancelled)
        self._gate.wake_all()

    # -- context managers ----------------------------------------------------------------------------
    async def __aenter__(self) -> "Lock":
        await self._acquire_or_raise(None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    @contextlib.asynccontextmanager
    async def hold(self, timeout: Optional[float] = None) -> AsyncIterator["Lock"]:
        """``async with lock.hold(timeout=5):`` -- raises :class:`~zkrecipes.LockTimeout` after ``timeout``."""
        await self._acquire_or_raise(naming.validate_timeout(timeout))
        try:
            yield self
        finally:
            await self.release()

    async def _acquire_or_raise(self, timeout: Optional[float]) -> None:
        if not await self.acquire(timeout=timeout):
            if self._cancelled:
                raise LockCancelled(f"acquire of {self.path} was cancelled")
            raise LockTimeout(f"could not acquire {self.path} within {timeout} s")

    # -- state ---------------------------------------------------------------------------------------
    def _attach(self, hold: Hold) -> None:
        if not self._gate.attach(self, self._kind, self._detach):
            return
        listener = self._attached[hold] = functools.partial(self._hold_changed, hold)
        hold.add_listener(listener)
        self._on_hold(hold, hold.state)

    def _hold_changed(self, hold: Hold, state: str) -> None:  # the session thread, or the loop (mark_lost)
        loop = self._loop
        if loop is not None:
            call_soon(loop, self._on_hold, hold, state)

    def _detach(self, hold: Hold) -> None:
        listener = self._attached.pop(hold, None)
        if listener is not None:
            hold.remove_listener(listener)
        self._set_state(IDLE)

    def _on_hold(self, hold: Hold, state: str) -> None:  # the loop
        if hold not in self._attached:
            return  # detached meanwhile: old news (a loss found while releasing is still told)
        if state == LOST:
            self.lost.set()
        self._set_state(state)

    @property
    def state(self) -> LockState:
        """``"idle"``, ``"waiting"``, ``"held"``, ``"suspended"`` or ``"lost"``."""
        return self._state  # type: ignore[return-value]

    def _my_hold(self) -> Optional[Hold]:
        task = asyncio.current_task() if _driver.loop_of_thread() is not None else None
        if task is None:
            return None
        hold: Optional[Hold] = self._gate.held_by(owner_of(task), self._kind)
        return hold

    def check(self) -> Awaitable[None]:
        """Raise :class:`~zkrecipes.LockLost` at the call if the calling task's hold is lost or (unless
        ``tolerate_suspended``) suspended, LockError if this task does not hold it -- awaited or not.
        ``await lock.check()`` also confirms a hold the process stood still on: it asks ZooKeeper
        whether our node is still ours (LockLost if not, or if ZooKeeper cannot say); unawaited, that
        read is not made (and Python warns that a coroutine was never awaited)."""
        hold = self._my_hold()
        if hold is None:
            raise LockError(f"{self.path} is not held by the calling task")
        return self._check_now(hold, "hold")

    def transaction(self) -> HeldTransaction:
        """A kazoo transaction that commits only while the calling task's hold lives:
        ``await tx.commit()`` (see :class:`zkrecipes.aio.HeldTransaction`). LockError if this task does
        not hold the lock."""
        hold = self._my_hold()
        if hold is None:
            raise LockError(f"{self.path} is not held by the calling task")
        return HeldTransaction(self.client, self.path, hold, self._check_hold)

    def __repr__(self) -> str:
        return f"<aio.{type(self).__name__} {self.path!r} state={self._state}>"


class FairLock(Lock):
    """A fair (FIFO) distributed mutex for asyncio: ``async with aio.FairLock(zk, "/locks/x"):``.

    The same queue, nodes, guarantees, session-loss states and fencing token as
    :class:`zkrecipes.FairLock`, and interoperable with it across processes; holds are owned by asyncio
    tasks (reentrant per task; ``release()`` from another task raises LockError) and the tasks of one
    process share one node per path. Listeners are called on the event loop's thread; ``lost`` is an
    ``asyncio.Event``.
    """

    _core_class = _fair.FairLock


class ExclusiveLock(Lock):
    """:class:`zkrecipes.ExclusiveLock` for asyncio (one ``lock`` node; not fair, herd on release)."""

    _core_class = _exclusive.ExclusiveLock

    async def contenders(self) -> List[Contender]:
        """The holder alone: ``[]`` or ``[Contender]``."""
        try:
            data, stat = await _driver.result(self.client.get_async(f"{self.path}/{_exclusive.NODE}"))
        except NoNodeError:
            return []
        node = naming.QueueNode(_exclusive.NODE, naming.read_data(data).get("host") or "", naming.WRITE, stat.czxid)
        return [naming.contender(node, data)]


class ReadLock(Lock):
    """The read side of an :class:`aio.ReadWriteLock <ReadWriteLock>`."""

    _core_class = _rwlock.ReadLock


class WriteLock(Lock):
    """The write side of an :class:`aio.ReadWriteLock <ReadWriteLock>` (a FairLock on the same queue)."""

    _core_class = _rwlock.WriteLock


class ReadWriteLock(NamedInit):
    """:class:`zkrecipes.ReadWriteLock` for asyncio: ``async with rw.read():`` / ``async with rw.write():``.

    Readers share; a writer holds alone; a queued writer blocks readers that come after it. Tasks of one
    process share one read node (not once a writer is queued behind it). Downgrade: a task holding
    ``write()`` may take ``read()`` and then release the write side.
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

    async def contenders(self) -> List[Contender]:
        """Every reader and writer in queue order."""
        return await self._read.contenders()

    def __repr__(self) -> str:
        return f"<aio.ReadWriteLock {self.path!r} read={self._read.state} write={self._write.state}>"
