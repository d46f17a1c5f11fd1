"""aio.LeaderElection: the election's core (:mod:`zkrecipes.election`) on the asyncio front."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple, TypeVar

from .. import election as _election
from ..election import LEAD, ElectionCore
from ..errors import LockCancelled
from ..naming import Contender, validate_timeout
from ._driver import call_soon
from ._lock import AioFront

R = TypeVar("R")


class LeaderElection(AioFront, ElectionCore):
    """Leader election for asyncio: ``async with aio.LeaderElection(zk, "/election/x"):`` leads.

    The same queue, read-back before leading, states (``"idle"``, ``"candidate"``, ``"leader"``,
    ``"suspended"``, ``"lost"``), fencing token and interoperability as
    :class:`zkrecipes.LeaderElection`. Listeners are called on the event loop's thread; ``lost`` is an
    ``asyncio.Event``. :meth:`resign` and :meth:`cancel` may be called from any task.
    """

    async def campaign(self, timeout: Optional[float] = None) -> bool:
        """Become a candidate and wait until leader; True once leader (at once if already leader).

        False when ``timeout`` passes or :meth:`cancel`/:meth:`resign` is called meanwhile; our node is
        then deleted (also when the task is cancelled). Raises LockError if another task is already
        campaigning with this object."""
        timeout = validate_timeout(timeout)
        self._bind()
        deadline = None if timeout is None else time.monotonic() + timeout
        return await self._run(self._campaign(fresh=True), deadline)

    async def resign(self) -> None:
        """Leave the queue: a pending :meth:`campaign` returns False; a leader deletes its node and the
        next candidate takes over. Idempotent."""
        self.cancel()
        await self._run(self._step_down())

    async def run(
        self, coro_fn: Callable[..., Awaitable[R]], *args: Any, requeue: bool = False, **kwargs: Any
    ) -> Optional[R]:
        """Campaign, ``await coro_fn(*args, **kwargs)`` as leader, resign when it returns or raises; its
        result (None if the campaign was cancelled first).

        The coroutine runs in a task of its own that is cancelled when the term ends: when leadership is
        lost (the session expired, or the lost deadline passed: before another candidate can lead) run
        raises :class:`~zkrecipes.LockLost`; when :meth:`resign` is called from another task it returns
        None. A suspended leadership is not cancelled (it may come back): ``await election.check()``
        before each side effect. With ``requeue=True`` campaign again after each term, a lost one
        included, until :meth:`cancel` or :meth:`resign`; returns None then. If ``coro_fn`` raises,
        resign and re-raise. Cancelling the calling task cancels the coroutine and resigns."""
        if not callable(coro_fn):
            raise TypeError(f"coro_fn must be callable, got {coro_fn!r}")
        if not isinstance(requeue, bool):
            raise TypeError(f"requeue must be a bool, got {requeue!r}")
        self._bind()
        return await self._terms(coro_fn, args, kwargs, requeue, fresh=True)

    async def _terms(
        self, coro_fn: Callable[..., Awaitable[R]], args: Tuple[Any, ...], kwargs: Dict[str, Any], requeue: bool,
        fresh: bool,
    ) -> Optional[R]:
        """run()'s terms (:meth:`ElectionCore._term_steps <zkrecipes.election.ElectionCore._term_steps>`) on
        the loop."""
        terms = self._terms_of(requeue, fresh)
        for op in terms:
            with terms:  # (a cancel of the caller too: the loop steps down)
                terms.sent = await (self._lead(coro_fn(*args, **kwargs)) if op is LEAD else self._run(op))
        return terms.result  # type: ignore[no-any-return]

    async def _lead(self, coro: Awaitable[R]) -> Optional[R]:
        """Await ``coro`` in a task cancelled when the term ends: LockLost if it was lost, else None."""
        task = asyncio.ensure_future(coro)
        ended: List[bool] = []

        def end() -> None:  # on the loop
            ended.append(True)
            task.cancel()

        forget = self._on_term_end(end)
        try:
            result = await task  # (a cancel of the calling task cancels this task too)
        except asyncio.CancelledError:
            if not ended or _cancelling():
                raise  # the caller was cancelled (or the coroutine cancelled itself), not the term ended
            if self.lost.is_set():
                raise self._lost_term("the leader's coroutine was cancelled") from None
            return None
        finally:
            forget()
        if ended and self.lost.is_set():  # it returned as the term was lost
            raise self._lost_term("the leader's coroutine returned after it")
        return result

    async def __aenter__(self) -> "LeaderElection":
        if not await self.campaign():
            raise LockCancelled(f"campaign for {self.path} was cancelled")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.resign()

    def check(self) -> Awaitable[None]:
        """Raise :class:`~zkrecipes.LockLost` at the call if leadership is lost, uncertain or not held,
        awaited or not; awaited, it also confirms leadership after the process stood still (as
        :meth:`aio.FairLock.check <zkrecipes.aio.FairLock.check>`)."""
        return self._start(self._check())

    async def leader(self) -> Optional[Contender]:
        """Who leads now, the first of :meth:`contenders` (readable by anyone, candidate or not), or None."""
        c = await self.contenders()
        return c[0] if c else None

    def watch_leader(self, fn: Callable[[Optional[Contender]], None]) -> "LeaderWatch":
        """Call ``fn(leader_or_None)`` now and whenever the leader changes, on the event loop's thread
        (keep it short; start a task for longer work), until the returned :class:`LeaderWatch` is
        stopped. For observers that are not candidates. Call it from a coroutine: the calls go to its
        loop."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        return LeaderWatch(self, fn)

    def __repr__(self) -> str:
        return f"<aio.LeaderElection {self.path!r} state={self._state}>"


def _cancelling() -> bool:
    """True if the calling task is being cancelled (known from Python 3.11 on)."""
    task = asyncio.current_task()
    return bool(getattr(task, "cancelling", lambda: 0)())


class LeaderWatch(_election.LeaderWatch):
    """Follows the leader of an election for :meth:`aio.LeaderElection.watch_leader
    <LeaderElection.watch_leader>`: the same watch as :class:`zkrecipes.LeaderWatch`, on a thread of its
    own, with the callback called on the event loop. :meth:`stop` returns at once; no call of the
    callback starts after it, and the thread ends by itself moments later."""

    _joins = False  # never block the loop

    def __init__(self, election: ElectionCore, fn: Callable[[Optional[Contender]], None]) -> None:
        self._loop = asyncio.get_running_loop()
        super().__init__(election, fn)

    def _deliver(self, leader: Optional[Contender]) -> None:  # the watch's thread: hand over to the loop
        call_soon(self._loop, super()._deliver, leader)
