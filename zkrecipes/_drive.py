"""The blocking driver: runs the engine's steps (:mod:`zkrecipes._engine`) on the calling thread.

Each step's requests are :mod:`zkrecipes._transport`'s; this driver performs their waits: on kazoo's
async results, on one ``threading.Event`` that watch notifications, session events and ``cancel()``
set, and on the local gate's condition -- every wait but a cleanup's bounded by the deadline and the
cancel, thrown into the steps as DeadlinePassed / Cancelled.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Generator, Optional

import tenacity
from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent

from . import _engine as e
from . import _kazoo
from ._transport import Aside, Nap, Reply, Transport, Woken, client_closed


class Driver(Transport):
    """One run of steps on the calling thread. Built per acquire, so it is kept cheap: the wake-up Event
    and the session subscription are made only when the run has to wait (an uncontended acquire never
    does)."""

    __slots__ = ("cancelled", "wake", "__weakref__")

    def __init__(
        self,
        client: KazooClient,
        deadline: Optional[float],
        cancelled: Callable[[], bool],
        policy: Optional[tenacity.Retrying],
        nowait: bool = False,
        path: str = "",
    ) -> None:
        super().__init__(client, deadline, policy, nowait, path)
        self.cancelled = cancelled
        self.wake: Optional[threading.Event] = None  # made before the first wait (see interrupt())

    def interrupt(self) -> None:
        """Wake a waiting run after its ``cancelled()`` turned True (any thread). One with no Event yet
        has not started to wait: it sees the cancel before it does."""
        wake = self.wake
        if wake is not None:
            wake.set()

    def _wake(self) -> threading.Event:
        wake = self.wake
        if wake is None:
            wake = self.wake = threading.Event()
        return wake

    def run(self, steps: e.Steps[e.T], op: Any = None) -> e.T:
        """Drive ``steps`` to their end: their return value, or their exception (after their cleanup ran).
        ``op``: the step they already yielded, if they were started."""
        try:
            next(self.drive(steps, op))  # (on this thread it never yields)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        raise AssertionError("the threaded driver's waits never yield")

    def _wait(self, w: Any) -> Generator[None, None, Any]:
        """Perform the wait ``w`` on this thread: a generator that never yields, run by :meth:`drive`."""
        if False:  # (a generator, as the asyncio driver's wait is a coroutine)
            yield
        if type(w) is Reply:
            limit = w.until if w.cleanup or self.deadline is None else min(w.until or self.deadline, self.deadline)
            while not w.ar.wait(0.2 if limit is None else max(0.0, min(0.2, limit - time.monotonic()))):
                if w.gone is not None and w.gone():
                    raise e.SessionGone()
                if not w.cleanup:
                    self.check()
                if w.until is not None and time.monotonic() >= w.until:
                    raise TimeoutError("no reply in time")
        elif type(w) is Woken:
            wake = self._wake()
            self.check()
            if w.wait and not wake.is_set():
                if self.nowait:
                    raise e.DeadlinePassed()
                while not wake.wait(self._tick()):
                    self.check()
                self.check()
            wake.clear()
        elif type(w) is Nap:
            if w.wakes:
                self.check()
                self._wake().wait(w.seconds)
                return
            end = time.monotonic() + w.seconds
            while time.monotonic() < end:
                if not w.cleanup:
                    self.check()
                time.sleep(max(0.0, min(0.2, end - time.monotonic())))
        elif type(w) is Aside:
            if w.run is not None:
                return w.run(w.steps, w.deadline, w.nowait)
            cancelled = never if w.cleanup else self.cancelled
            return Driver(w.client, w.deadline, cancelled, w.policy, w.nowait, w.path).run(w.steps)
        else:  # WaitGate
            gate = w.gate
            with gate.mutex:
                while gate.version == w.version:
                    self.check()
                    gate.cond.wait(self._tick())
        return None

    def _tick(self) -> float:
        """How long one wait may last before the deadline and the cancel are looked at again."""
        return 0.5 if self.deadline is None else max(0.0, min(0.5, self.deadline - time.monotonic()))

    def _on_session(self, event: str) -> None:
        self.interrupt()

    @_kazoo.on_io_thread
    def _on_watch(self, event: WatchedEvent) -> None:  # kazoo's I/O thread: only record and wake
        listing = self._prefetch(event)
        self._watch_fired(event)
        if listing is None:
            self.interrupt()
        else:  # the steps' next need is that listing: wake once it is in, one wake-up instead of two
            _kazoo.when_ready(listing, self.interrupt)

    def check(self) -> None:
        if self.cancelled():
            raise e.Cancelled()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise e.DeadlinePassed()
        if _kazoo.is_stopped(self.client):  # no session will come: every wait would last forever
            raise client_closed(self.path)


def never() -> bool:
    """The ``cancelled`` of a run nothing cancels (a release, a cleanup)."""
    return False


def delete(
    client: KazooClient, path: str, session: Optional[int], policy: Optional[tenacity.Retrying]
) -> Optional[bool]:
    """Delete our node unless its session is gone (then False; None if someone else had deleted it, see
    :class:`~zkrecipes._engine.Delete`), outside any run (the session thread)."""
    return Driver(client, None, never, policy).run(_delete_step(path, session))


def drop_old(client: KazooClient, path: str, session: int, token: int, policy: Optional[tenacity.Retrying]) -> bool:
    """:func:`zkrecipes._engine.drop_old` outside any run (the session thread)."""
    return Driver(client, None, never, policy).run(e.drop_old(path, session, token))


def _delete_step(path: str, session: Optional[int]) -> e.Steps[Optional[bool]]:
    deleted: Optional[bool] = yield e.Delete(path, session)
    return deleted
