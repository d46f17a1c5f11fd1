"""The asyncio driver: runs the same engine steps (:mod:`zkrecipes._engine`) as the blocking driver.

Each step's requests are :mod:`zkrecipes._transport`'s; this driver performs their waits on the event
loop. kazoo keeps its own threads (the default threading handler): its replies and watch notifications
are handed to the loop with ``loop.call_soon_threadsafe`` and complete plain futures, so a waiter is one
suspended coroutine, not a thread. The deadline and :meth:`AioDriver.interrupt` (``cancel()``) fail the
future being awaited; a task cancel lands as ``CancelledError`` and is thrown into the steps like any
other exit, which then delete their node.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Optional, cast

import tenacity
from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent

from .. import _engine as e
from .. import _kazoo
from .._transport import Aside, Nap, Reply, Transport, Woken, client_closed


def call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` on ``loop``'s thread: now if we are on it, else via ``call_soon_threadsafe``."""
    if loop_of_thread() is loop:
        fn(*args)
        return
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


def loop_of_thread() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _settle(fut: "asyncio.Future[None]", error: Optional[BaseException] = None) -> None:
    if not fut.done():
        fut.set_result(None) if error is None else fut.set_exception(error)


def bridge(loop: asyncio.AbstractEventLoop, ar: _kazoo.AsyncResult) -> "asyncio.Future[None]":
    """A future of ``loop`` that completes (with None) once kazoo's async result ``ar`` is ready."""
    fut: "asyncio.Future[None]" = loop.create_future()
    _kazoo.when_ready(ar, lambda: call_soon(loop, _settle, fut))
    return fut


class AioDriver(Transport):
    """One run of steps on the running loop."""

    def __init__(
        self,
        client: KazooClient,
        deadline: Optional[float],
        policy: Optional[tenacity.Retrying],
        nowait: bool = False,
        path: str = "",
    ) -> None:
        super().__init__(client, deadline, policy, nowait, path)
        self.loop = asyncio.get_running_loop()
        self._stop: Optional[Callable[[], BaseException]] = None  # Cancelled / DeadlinePassed once interrupted
        self._waiter: Optional["asyncio.Future[Any]"] = None  # the future this run awaits now
        self._wakeable = False  # the waiter ends on a wake-up (a sleep), not only on a reply
        self._woken = False  # a wake-up is pending
        self._timer = None
        if deadline is not None:
            self._timer = self.loop.call_later(max(0.0, deadline - time.monotonic()), self._stop_with, e.DeadlinePassed)

    async def run(self, steps: e.Steps[e.T], op: Any = None) -> e.T:
        """Drive ``steps`` to their end: their return value, or their exception (after their cleanup ran).
        ``op``: the step they already yielded, if they were started (:func:`start`)."""
        try:
            return await cast("Awaitable[e.T]", self.drive(steps, op))
        finally:
            if self._timer is not None:
                self._timer.cancel()

    async def _wait(self, w: Any) -> Any:
        if type(w) is Reply:
            if w.ar.ready():
                return
            fut = bridge(self.loop, w.ar)
            timers = [] if w.until is None else [self.loop.call_later(
                max(0.0, w.until - time.monotonic()), _settle, fut, TimeoutError("no reply in time"))]
            if w.gone is not None:
                self._poll(fut, w.gone, timers)
            try:
                await (fut if w.cleanup else self._await(fut))
            finally:
                for timer in timers:
                    timer.cancel()
        elif type(w) is Woken:
            self.check()
            if w.wait and not self._woken:
                if self.nowait:
                    raise e.DeadlinePassed()
                await self._await(self.loop.create_future(), wakeable=True)
                self.check()
            self._woken = False
        elif type(w) is Nap:
            if w.cleanup:
                await asyncio.sleep(w.seconds)
                return
            fut = self.loop.create_future()
            self.loop.call_later(w.seconds, _settle, fut)
            if not (w.wakes and self._woken):
                await self._await(fut, wakeable=w.wakes)
            if w.wakes:
                self._woken = False
        elif type(w) is Aside:
            if w.run is not None:
                return await w.run(w.steps, w.deadline, w.nowait)
            return await AioDriver(w.client, w.deadline, w.policy, w.nowait, w.path).run(w.steps)
        else:  # WaitGate
            gate, fut = w.gate, self.loop.create_future()

            def wake() -> None:  # any thread, the gate's mutex held
                call_soon(self.loop, _settle, fut)

            with gate.mutex:
                if gate.version != w.version:
                    return
                gate.wakers.add(wake)
            try:
                await self._await(fut)
            finally:
                with gate.mutex:
                    gate.wakers.discard(wake)

    def _poll(self, fut: "asyncio.Future[None]", gone: Callable[[], bool], timers: list) -> None:  # type: ignore[type-arg]
        """Fail ``fut`` with SessionGone once ``gone()`` says so (looked at every 0.2 s)."""
        if gone():
            _settle(fut, e.SessionGone())
        elif not fut.done():
            timers.append(self.loop.call_later(0.2, self._poll, fut, gone, timers))

    async def _await(self, fut: "asyncio.Future[Any]", wakeable: bool = False) -> Any:
        """Await ``fut``; the deadline and interrupts fail it, wake-ups end it only if ``wakeable`` (a
        reply's future must wait for its reply: a watch of ours may fire while another request is out)."""
        self.check()
        self._waiter, self._wakeable = fut, wakeable
        try:
            return await fut
        finally:
            self._waiter, self._wakeable = None, False

    def interrupt(self, why: Callable[[], BaseException] = e.Cancelled) -> None:
        """Stop this run (any thread): the future it awaits fails with ``why()``, and so does every later
        wait but a cleanup's."""
        call_soon(self.loop, self._stop_with, why)

    def _stop_with(self, why: Callable[[], BaseException]) -> None:
        if self._stop is None:
            self._stop = why
        if self._waiter is not None:
            _settle(self._waiter, why())

    def check(self) -> None:
        if self._stop is not None:
            raise self._stop()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise e.DeadlinePassed()
        if _kazoo.is_stopped(self.client):  # no session will come: every wait would last forever
            raise client_closed(self.path)

    def _wake(self, event: Optional[WatchedEvent] = None) -> None:  # loop thread
        if event is not None:
            self._watch_fired(event)
        elif _kazoo.is_stopped(self.client):  # a request in flight may never be answered now
            self._stop_with(lambda: client_closed(self.path))
        self._woken = True
        if self._waiter is not None and self._wakeable:
            _settle(self._waiter)

    @_kazoo.on_io_thread
    def _on_watch(self, event: WatchedEvent) -> None:  # kazoo's I/O thread: only hand over
        listing = self._prefetch(event)
        if listing is None:
            call_soon(self.loop, self._wake, event)
        else:  # the steps' next need is that listing: hand over once it is in
            _kazoo.when_ready(listing, lambda: call_soon(self.loop, self._wake, event))

    def _on_session(self, event: str) -> None:  # the session dispatcher thread
        call_soon(self.loop, self._wake)
