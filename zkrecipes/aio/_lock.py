"""The asyncio front: the recipes' cores (:mod:`zkrecipes._lock`) with a task as the owner of a hold and
the asyncio driver running the steps; listeners are called on the event loop's thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    List,
    NoReturn,
    Optional,
    TypeVar,
)

from .. import _reaper
from .. import exclusive as _exclusive
from .. import rwlock as _rwlock
from .._engine import Steps, T
from .._gate import Gate
from .._lock import LockCore, ObjectOwner, Owner, Participant, acquire_deadline
from ..errors import LockCancelled, LockError, LockTimeout
from ..naming import Contender, validate_timeout
from ..session import Hold
from . import _driver
from ._driver import AioDriver, call_soon
from .transaction import HeldTransaction

if TYPE_CHECKING:
    import zkrecipes.aio.once

log = logging.getLogger("zkrecipes.aio")
# how long another thread waits, at most, for a busy event loop to run what it handed the loop (the
# listeners of a change, a release's telling): past it, the waiting thread goes on
LOOP_WAIT = 5.0

# tasks that run an acquire for the task that called it (asyncio.wait_for on Python <= 3.11 and
# ensure_future run the coroutine in a task of their own): what they acquire belongs to that caller
_acting_for: "weakref.WeakKeyDictionary[asyncio.Task[Any], asyncio.Task[Any]]" = weakref.WeakKeyDictionary()
# the gates whose holds each task is followed on (released when it ends)
_followed: "weakref.WeakKeyDictionary[asyncio.Task[Any], weakref.WeakSet[Gate]]" = weakref.WeakKeyDictionary()


def owner_of(task: "asyncio.Task[Any]") -> "asyncio.Task[Any]":
    """The task that owns what ``task`` acquires: itself, or the task it acquires for."""
    return _acting_for.get(task, task)


def _caller() -> "Optional[asyncio.Task[Any]]":  # the task calling now, or None outside a running loop
    return asyncio.current_task() if _driver.loop_of_thread() is not None else None


def _ended_owners() -> List[_reaper.Job]:
    """At interpreter exit: what tasks that will not run again still hold (ended with their done callback
    never run, or left pending in a loop that no longer runs)."""
    jobs = []
    for task, gates in list(_followed.items()):
        if task.done() or not task.get_loop().is_running():
            for gate in list(gates):
                left = gate.drop(task)
                if left is not None:
                    jobs.append(_reaper.Job(gate, left, f"task {task!r}", log))
    return jobs


_reaper.also_at_exit(_ended_owners)


def _on_loop_or_here(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` once, from a thread that is not ``loop``'s: on ``loop``'s thread while it runs,
    else (it stopped or closed first, or stays busy :data:`LOOP_WAIT` s) on the calling thread."""
    claim, ran = threading.Lock(), threading.Event()

    def once() -> None:
        if claim.acquire(blocking=False):
            try:
                fn(*args)
            finally:
                ran.set()

    call_soon(loop, once)
    for _ in range(int(LOOP_WAIT / 0.05)):
        if ran.wait(0.05) or not loop.is_running():
            break
    once()


class _Done:  # the awaitable of steps that finished without a request: awaiting it returns their value
    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # a generator: awaiting it suspends nothing


class AsyncOnly:
    """An asyncio object's plain ``with``: a TypeError that points to ``async with``."""

    if not TYPE_CHECKING:  # (hidden from type checkers: they flag a plain ``with`` on their own)
        def __enter__(self) -> NoReturn:
            raise TypeError(f"aio.{type(self).__name__} is for asyncio: use 'async with' in a coroutine, not "
                            f"'with' (zkrecipes.{type(self).__name__} is the threaded one)")

        def __exit__(self, *exc: object) -> None:  # never reached: __enter__ raises
            pass


class AioFront(AsyncOnly, Participant):
    """The asyncio front of a core: a hold is owned by a task; steps run on its loop (:class:`AioDriver`)."""

    _owner_word = "task"
    _gate_prefix = "aio-"  # tasks get gates (and so nodes) of their own, apart from the threads
    _new_event = asyncio.Event
    _loop: Optional[asyncio.AbstractEventLoop] = None

    _by_object: Optional[ObjectOwner] = None

    def _current_owner(self) -> Optional[Owner]:
        if self._by_object is not None:
            return self._by_object
        task = _caller()
        return None if task is None else owner_of(task)

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop and not self._loop.is_closed():
            raise LockError(f"{self.path}: this object is in use on another event loop")
        self._loop = loop

    def _told(self, hold: Hold, state: str) -> None:  # the session thread, or the loop (mark_lost)
        loop = self._loop
        if loop is not None:
            call_soon(loop, self._report, hold, state)

    def _after_told(self) -> bool:  # the session thread: the loop runs what _told handed it, in order
        loop = self._loop
        if loop is None or _driver.loop_of_thread() is loop:
            return True
        ran = threading.Event()
        call_soon(loop, ran.set)
        return ran.wait(LOOP_WAIT)

    async def _run(self, steps: Steps[T], deadline: Optional[float] = None, nowait: bool = False) -> T:
        driver = AioDriver(self.client, deadline, self.retry, nowait, self.path)
        self._drivers.add(driver)
        try:
            return await driver.run(steps)
        finally:
            self._drivers.discard(driver)

    def _start(self, steps: Steps[T]) -> Awaitable[T]:
        """Run ``steps`` up to their first request now: their error is raised at the call; if they finish,
        an awaitable already done; else a coroutine that drives the rest on the running loop."""
        try:
            op = steps.send(None)
        except StopIteration as stop:
            return _Done(stop.value)
        return AioDriver(self.client, None, self.retry).run(steps, op)

    def _check_hold(self, hold: Hold, what: str) -> Awaitable[None]:
        return self._start(self._certain(hold, what))

    def transaction(self) -> HeldTransaction:
        """A kazoo transaction that commits only while the calling task's hold lives: ``await
        tx.commit()`` (see :class:`zkrecipes.aio.HeldTransaction`). Raises as ``check()`` does when there
        is no hold to fence by."""
        return HeldTransaction(self.client, self.path, self._fence_hold(), self._check_hold)

    async def contenders(self) -> List[Contender]:
        """Every holder and waiter in queue order (``[]`` if the path does not exist); connection errors
        are raised, not hidden."""
        return await self._run(self._contenders())


H = TypeVar("H", bound="AsyncHolding")


class AsyncHolding:
    """``async with x:`` and ``async with x.hold(timeout):`` over ``_acquire_or_raise`` and ``release`` (an
    asyncio lock, an aio.MultiLock)."""

    _acquire_or_raise: Callable[[Optional[float]], Awaitable[None]]  # raises LockTimeout when not held
    release: Callable[[], Awaitable[None]]

    async def __aenter__(self: H) -> H:
        await self._acquire_or_raise(None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    @contextlib.asynccontextmanager
    async def hold(self: H, timeout: Optional[float] = None) -> AsyncIterator[H]:
        """``async with lock.hold(timeout=5):`` -- raises :class:`~zkrecipes.LockTimeout` when not held within
        ``timeout`` (nothing is then held)."""
        await self._acquire_or_raise(validate_timeout(timeout))
        try:
            yield self
        finally:
            await self.release()


class Lock(AsyncHolding, AioFront, LockCore):
    """Base of the asyncio locks; see :class:`FairLock` for the documented API."""

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> "Coroutine[Any, Any, bool]":
        """Acquire the lock for the calling task; True once held (await it).

        False on a non-blocking miss, when ``timeout`` seconds pass, or when :meth:`cancel` is called;
        then no node and no watch is left. Cancelling the task raises CancelledError in it and deletes
        its node, also when the cancel lands while the create is in flight. Reentrant per task; re-entry
        into a hold that is lost or in doubt raises :class:`~zkrecipes.LockLost`, as the threaded
        :meth:`zkrecipes.FairLock.acquire` does. A non-blocking attempt (``blocking=False``, ``timeout=0``)
        on a lock whose queue shows it held returns False after one read, with no write.
        """
        return self._acquire_for(_caller(), blocking, timeout)  # the caller owns it, also when a task of
        # its own runs the coroutine (asyncio.wait_for on Python <= 3.11, ensure_future)

    async def _acquire_for(
        self, caller: "Optional[asyncio.Task[Any]]", blocking: bool, timeout: Optional[float]
    ) -> bool:
        runner = asyncio.current_task()
        if runner is None:
            raise LockError("zkrecipes.aio locks are owned by asyncio tasks: call from within a task")
        if caller is not None and caller is not runner:
            _acting_for[runner] = _acting_for.get(caller, caller)
        blocking, deadline = acquire_deadline(blocking, timeout)
        self._bind()
        self._cancelled = False
        return await self._run(self._acquire(self._by_object or owner_of(runner), blocking), deadline, not blocking)

    async def release(self) -> None:
        """Release one level of the calling task's hold; the last release deletes our node.

        Raises LockError if the calling task does not hold the lock. A lost hold is only forgotten
        locally (its node may be someone else's) unless its node is read as one of a session this client
        gave up (then deleted); without a connection it waits for one at most until the hold is declared
        lost."""
        me = self._current_owner()
        if me is None:
            raise LockError("zkrecipes.aio locks are owned by asyncio tasks: call from within a task")
        await self._run(self._release(me))

    def check(self) -> Awaitable[None]:
        """Raise :class:`~zkrecipes.LockLost` at the call if the calling task's hold is lost or (unless
        ``tolerate_suspended``) suspended, LockError if this task does not hold it -- awaited or not.
        ``await lock.check()`` also confirms a hold the process stood still on: it asks ZooKeeper
        whether our node is still ours (LockLost if not, or if ZooKeeper cannot say); unawaited, that
        read is not made (and Python warns that a coroutine was never awaited)."""
        return self._start(self._check(self._current_owner()))

    def _track(self, me: Any, gate: Gate) -> None:
        """Release what ``me`` still holds on ``gate`` when it ends (nobody else can): no node outlives its
        owner. One callback per task and gate, however often the task acquires."""
        gates = _followed.get(me)
        if gates is None:
            gates = _followed[me] = weakref.WeakSet()
            _reaper.hook_exit()
        if gate not in gates:
            gates.add(gate)
            me.add_done_callback(lambda task: self._owner_ended(task, gate))

    def _owner_ended(self, task: "asyncio.Task[Any]", gate: Gate) -> None:
        """``task`` ended holding on ``gate``: its node is deleted on the reaper thread, with the threaded
        driver, also when this loop is closing (``asyncio.run`` returning) and never runs again."""
        left = gate.drop(task)
        if left is not None:
            _reaper.hand_over(_reaper.Job(gate, left, f"task {task!r}", log))

    def _detach(self, hold: Hold) -> None:
        """As a lock's: no longer "held", listeners told -- on the loop's thread while the loop runs (a hold
        of an ended task is released on the reaper thread)."""
        loop = self._loop
        if loop is None or _driver.loop_of_thread() is loop or not loop.is_running():
            super()._detach(hold)
        else:
            _on_loop_or_here(loop, super()._detach, hold)

    def once(
        self, key: str, keep: float = 86400.0, timeout: Optional[float] = None
    ) -> "zkrecipes.aio.once.Once":
        """``async with lock.once("2026-11-26T15:00") as run: if run: await job(); await run.done()`` --
        :meth:`zkrecipes.FairLock.once` for the calling task: hold the lock and look (LockTimeout after
        ``timeout``, which covers both, not ``done()``); ``run`` is true if ``key`` was not done within
        ``keep`` seconds. See :class:`zkrecipes.aio.once.Once`. A bad key or keep, or a read lock or
        semaphore, raises at the call, before any request."""
        from ..naming import LEASE, READ
        from .once import Once

        return Once(self, key, keep, timeout, acl=self._acl, shared=self._kind in (READ, LEASE),
                    check=lambda: self._check(self._current_owner()))

    async def _acquire_or_raise(self, timeout: Optional[float]) -> None:
        if not await self.acquire(timeout=timeout):
            if self._cancelled:
                raise LockCancelled(f"acquire of {self.path} was cancelled")
            raise LockTimeout(f"could not acquire {self.path} within {timeout} s")

    def __repr__(self) -> str:
        return f"<aio.{type(self).__name__} {self.path!r} state={self._state}>"


class FairLock(Lock):
    """A fair (FIFO) distributed mutex for asyncio: ``async with aio.FairLock(zk, "/locks/x"):``.

    The same queue, nodes, guarantees, session-loss states and fencing token as
    :class:`zkrecipes.FairLock`, and interoperable with it across processes; holds are owned by asyncio
    tasks (reentrant per task; ``release()`` from another task raises LockError) and the tasks of one
    process share one node per path. With ``owner="object"`` the hold belongs to the lock object: any
    task may release it, and another acquire of the object waits its turn, as asyncio.Lock's does
    (:doc:`/ownership`).
    Listeners are called on the event loop's thread; ``lost`` is an ``asyncio.Event``.
    """


class ExclusiveLock(_exclusive.ExclusiveRecipe, Lock):
    """:class:`zkrecipes.ExclusiveLock` for asyncio (one ``lock`` node; not fair, herd on release)."""


class ReadLock(_rwlock.ReadRecipe, FairLock):
    """The read side of an :class:`aio.ReadWriteLock <ReadWriteLock>`."""


class WriteLock(_rwlock.WriteRecipe, FairLock):
    """The write side of an :class:`aio.ReadWriteLock <ReadWriteLock>` (a FairLock on the same queue)."""


class ReadWriteLock(_rwlock.Pair[ReadLock, WriteLock]):
    """:class:`zkrecipes.ReadWriteLock` for asyncio: ``async with rw.read():`` / ``async with rw.write():``.

    Readers share; a writer holds alone; a queued writer blocks readers that come after it. Tasks of one
    process share one read node, joined with no request while the queue behind it is known clear (not
    once a writer is queued behind it). Downgrade: a task holding
    ``write()`` may take ``read()`` and then release the write side.
    """

    _sides = (ReadLock, WriteLock)
    _name = "aio.ReadWriteLock"

    async def contenders(self) -> List[Contender]:
        """Every reader and writer in queue order."""
        return await self._read.contenders()


def act_for(caller: "Optional[asyncio.Task[Any]]") -> None:
    """What the running task acquires from now on belongs to ``caller``, the task that called an acquire
    whose coroutine this task runs (asyncio.wait_for on Python <= 3.11, ensure_future), as for a lock's
    own acquire: used by :class:`zkrecipes.aio.MultiLock`, whose acquire calls several."""
    runner = asyncio.current_task()
    if caller is not None and runner is not None and caller is not runner:
        _acting_for[runner] = _acting_for.get(caller, caller)
