"""aio.LeaderElection: the threaded election's queue and read-back, on the asyncio driver."""

from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable, List, Optional, Sequence, TypeVar, cast

import tenacity
from kazoo.client import KazooClient
from kazoo.security import ACL

from .. import _participant, formats, naming
from .. import election as _election
from .._engine import Cancelled, DeadlinePassed, Entry
from ..election import CANDIDATE, IDLE, LEADER, TermView
from ..errors import LockCancelled, LockError, LockLost
from ..naming import Contender
from ..session import HELD, LOST, Hold
from . import _driver
from ._driver import AioDriver, call_soon
from ._lock import AioParticipant
from .transaction import HeldTransaction

log = logging.getLogger("zkrecipes.aio")

R = TypeVar("R")


class LeaderElection(TermView, AioParticipant):
    """Leader election for asyncio: ``async with aio.LeaderElection(zk, "/election/x"):`` leads.

    The same queue, read-back before leading, states (``"idle"``, ``"candidate"``, ``"leader"``,
    ``"suspended"``, ``"lost"``), fencing token and interoperability as
    :class:`zkrecipes.LeaderElection`. Listeners are called on the event loop's thread; ``lost`` is an
    ``asyncio.Event``. :meth:`resign` and :meth:`cancel` may be called from any task.
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
        super().__init__(_election.LeaderElection(
            client, path, identifier, host=host, acl=acl, retry=retry,
            tolerate_suspended=tolerate_suspended, protocol=protocol,
        ))
        self._hold: Optional[Hold] = None
        self._driver: Optional[AioDriver] = None
        self._cancelled = False

    async def campaign(self, timeout: Optional[float] = None) -> bool:
        """Become a candidate and wait until leader; True once leader (at once if already leader).

        False when ``timeout`` passes or :meth:`cancel`/:meth:`resign` is called meanwhile; our node is
        then deleted (also when the task is cancelled). Raises LockError if another task is already
        campaigning with this object."""
        timeout = naming.validate_timeout(timeout)
        self._bind()
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._hold is not None and self._hold.state != LOST:
            return True
        if self._driver is not None:
            raise LockError(f"{self.path}: another task is already campaigning with this election")
        await self._drop_hold()
        self._cancelled = False
        self.lost.clear()
        driver = self._driver = AioDriver(self.client, deadline, self._core.retry, path=self.path)
        self._set_state(CANDIDATE)
        entry: Optional[Entry] = None
        core = self._core
        try:
            entry = await driver.run(_election.campaign_steps(cast(_election.LeaderElection, core)))
        except (DeadlinePassed, Cancelled):
            pass
        finally:
            self._driver = None
            if entry is not None and self._cancelled:  # cancel()/resign() came as we were granted: they win
                withdrawn, entry = entry, None
                await _driver.delete(self.client, withdrawn.path, withdrawn.session, core.retry)
            if entry is None:
                self._set_state(IDLE)
        if entry is None:
            return False
        hold = self._hold = _participant.make_hold(core, entry)
        hold.add_listener(lambda state: self._hold_changed(hold))
        log.info("%s: leader as %s (token %d)", self.path, hold.node, hold.token)
        self._on_hold(hold)
        return True

    async def resign(self) -> None:
        """Leave the queue: a pending :meth:`campaign` returns False; a leader deletes its node and the
        next candidate takes over. Idempotent."""
        self.cancel()
        hold = await self._drop_hold()
        if hold is not None:
            if hold.state == LOST and not self.lost.is_set():  # learned only while resigning: still told
                self.lost.set()
                self._set_state(LOST)
            self._set_state(IDLE)

    def cancel(self) -> None:
        """Stop a pending :meth:`campaign` (it returns False); leadership already held is kept."""
        loop = self._loop
        if loop is not None:
            call_soon(loop, self._cancel_now)

    def _cancel_now(self) -> None:
        self._cancelled = True
        if self._driver is not None:
            self._driver.interrupt(Cancelled)

    async def _drop_hold(self) -> Optional[Hold]:
        hold, self._hold = self._hold, None
        if hold is not None:
            await self._delete_held(hold)
        return hold

    async def run(self, coro_fn: Callable[..., Awaitable[R]], *args: Any, **kwargs: Any) -> Optional[R]:
        """Campaign, ``await coro_fn(*args, **kwargs)`` as leader, resign when it returns or raises; its
        result (None if the campaign was cancelled first). ``coro_fn`` learns of a lost leadership by
        asking: ``await election.check()`` or ``election.lost``."""
        if not callable(coro_fn):
            raise TypeError(f"coro_fn must be callable, got {coro_fn!r}")
        if not await self.campaign():
            return None
        try:
            return await coro_fn(*args, **kwargs)
        finally:
            await self.resign()

    async def __aenter__(self) -> "LeaderElection":
        if not await self.campaign():
            raise LockCancelled(f"campaign for {self.path} was cancelled")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.resign()

    # -- hold state --------------------------------------------------------------------------------
    def _hold_changed(self, hold: Hold) -> None:  # the session thread, or the loop (mark_lost)
        loop = self._loop
        if loop is not None:
            call_soon(loop, self._on_hold, hold)

    def _on_hold(self, hold: Hold) -> None:  # the loop; reports the hold's state now (newest wins)
        if self._hold is not hold:
            return
        state = hold.state
        if state == LOST:
            self.lost.set()
        self._set_state(LEADER if state == HELD else state)

    def check(self) -> Awaitable[None]:
        """Raise :class:`~zkrecipes.LockLost` at the call if leadership is lost, uncertain or not held,
        awaited or not; awaited, it also confirms leadership after the process stood still (as
        :meth:`aio.FairLock.check <zkrecipes.aio.FairLock.check>`)."""
        hold = self._hold
        if hold is None:
            raise LockLost(f"{self.path}: not the leader")
        return self._check_now(hold, "leadership")

    def transaction(self) -> HeldTransaction:
        """A kazoo transaction that commits only while this term of leadership lives: ``await
        tx.commit()`` (see :class:`zkrecipes.aio.HeldTransaction`). LockLost if not the leader."""
        hold = self._hold
        if hold is None:
            raise LockLost(f"{self.path}: not the leader")
        return HeldTransaction(self.client, self.path, hold, self._check_hold)

    async def contenders(self) -> List[Contender]:
        """Candidates in queue order (the first is the leader)."""
        return await super().contenders()

    async def leader(self) -> Optional[Contender]:
        """Who leads now (readable by anyone, candidate or not), or None."""
        c = await self.contenders()
        return c[0] if c else None

    def __repr__(self) -> str:
        return f"<aio.LeaderElection {self.path!r} state={self._state}>"
