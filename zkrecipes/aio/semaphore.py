"""aio.Semaphore: the threaded semaphore's nodes, wait-rule and max_leases check, with a lease per task."""

from __future__ import annotations

import asyncio
import itertools
import threading
import weakref
from typing import Any, Coroutine, Optional, Sequence

import tenacity
from kazoo.client import KazooClient
from kazoo.security import ACL

from .. import _gate, formats
from .. import semaphore as _semaphore
from .._gate import Gate
from .._lock import IDLE, WAITING, LockState
from . import _driver, _lock
from ._lock import Lock

# a number per task for its gates' names: unlike id(), never reused by a later task while a gate lives
_task_numbers: "weakref.WeakKeyDictionary[asyncio.Task[Any], int]" = weakref.WeakKeyDictionary()
_numbers = itertools.count(1)
_numbers_lock = threading.Lock()


def _current_task() -> "Optional[asyncio.Task[Any]]":
    """The owner for the calling task (see :func:`~zkrecipes.aio._lock.owner_of`), or None outside a task."""
    task = asyncio.current_task() if _driver.loop_of_thread() is not None else None
    return None if task is None else _lock.owner_of(task)


def _task_number(task: "asyncio.Task[Any]") -> int:
    with _numbers_lock:
        n = _task_numbers.get(task)
        if n is None:
            n = _task_numbers[task] = next(_numbers)
        return n


class Semaphore(Lock):
    """:class:`zkrecipes.Semaphore` for asyncio: at most ``max_leases`` holders of ``path`` at once,
    ``async with aio.Semaphore(zk, "/sem/payment-api", 5):``.

    The same nodes (``<host>-S<max_leases>-<seq>``), wait-rule (held while fewer than ``max_leases``
    nodes are ahead; a waiter watches the ``max_leases`` nearest), queue order, max_leases check
    (:class:`~zkrecipes.LockError` from acquire, our node deleted) and session-loss states as the
    threaded class, and interoperable with it across processes; the aio lock API (see
    :class:`aio.FairLock <zkrecipes.aio.FairLock>`).

    Tasks: each asyncio task takes its own lease (its own node), so one process may hold several; a
    task's lease is reentrant (each acquire needs a release, the last deletes the node) and shared by
    its Semaphore objects on the same client and path. ``token``, ``node``, ``is_held``, ``state``,
    :meth:`check`, :meth:`release` and :meth:`transaction` answer for the calling task's lease (outside
    a task: none); ``lost`` and listeners are the object's, told of every lease it hands out -- give
    each task its own Semaphore object (cheap) if it needs its own.
    """

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
        core = _semaphore.Semaphore(
            client, path, max_leases, identifier, host=host, acl=acl, retry=retry,
            tolerate_suspended=tolerate_suspended, protocol=protocol,
        )
        self.max_leases: int = core.max_leases
        self._wrap(core)

    def _setup_gate(self) -> None:
        self._task_gates: "weakref.WeakKeyDictionary[asyncio.Task[Any], Gate]" = weakref.WeakKeyDictionary()
        self._acquiring: "weakref.WeakSet[asyncio.Task[Any]]" = weakref.WeakSet()

    @property
    def _gate(self) -> Gate:  # type: ignore[override]  # Lock keeps one gate per object
        """The calling task's gate: its own lease on ``path`` (shared by its Semaphore objects). Kept
        here while the task lives, so that the gate an acquire queues on is the one it is granted on."""
        task = _current_task()
        if task is None:
            return Gate(self.path)  # outside a task: nobody's lease
        g = self._task_gates.get(task)
        if g is None:
            g = self._task_gates[task] = _gate.gate(self.client, self.path, f"aio-lease-{_task_number(task)}")
        return g

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> "Coroutine[Any, Any, bool]":
        """Take a lease for the calling task; True once held (await it). As :meth:`aio.FairLock.acquire
        <zkrecipes.aio.FairLock.acquire>`: False on a miss, timeout or :meth:`cancel`, CancelledError
        when the task is cancelled (nothing left behind in each case); LockError when ``max_leases``
        disagrees with the holders'; reentrant per task."""
        return super().acquire(blocking, timeout)

    async def _acquire(self, caller: "Optional[asyncio.Task[Any]]", blocking: bool, timeout: Optional[float]) -> bool:
        task = caller if caller is not None else _current_task()
        if task is not None:
            self._acquiring.add(task)
        try:
            return await super()._acquire(caller, blocking, timeout)
        finally:
            if task is not None:
                self._acquiring.discard(task)

    def _gate_of(self, task: "asyncio.Task[Any]") -> Optional[Gate]:
        return self._task_gates.get(task)

    @property
    def state(self) -> LockState:
        """The calling task's lease: ``"idle"``, ``"waiting"``, ``"held"``, ``"suspended"`` or ``"lost"``."""
        hold = self._my_hold()
        if hold is not None:
            return hold.state  # type: ignore[return-value]
        task = _current_task()
        return WAITING if task is not None and task in self._acquiring else IDLE

    def __repr__(self) -> str:
        return f"<aio.Semaphore {self.path!r} max_leases={self.max_leases}>"

