"""The asyncio driver: runs the same engine steps (:mod:`zkrecipes._engine`) as the blocking driver.

kazoo keeps its own threads (the default threading handler); its replies and watch notifications are
handed to the event loop with ``loop.call_soon_threadsafe`` and complete plain futures that the task
awaits. No thread per waiting task: a waiter is one suspended coroutine. The deadline and
:meth:`AioDriver.interrupt` (``cancel()``) fail the future being awaited; a task cancel lands as
``CancelledError`` and is thrown into the steps like any other exit, which then delete their node.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Dict, Generator, List, Optional, Tuple

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from .. import _engine as e
from .. import _kazoo, retry
from .._drive import client_closed
from .._watches import WAITS, WatchState


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
    ar.rawlink(lambda _ar: call_soon(loop, _settle, fut))  # kazoo's completion thread
    return fut


async def result(ar: _kazoo.AsyncResult) -> Any:
    """Await a kazoo async result on the running loop: its value, or its error raised."""
    if not ar.ready():
        await bridge(asyncio.get_running_loop(), ar)
    return ar.get(block=False)


class AioDriver(WatchState):
    """One run of steps on a loop: its requests, wake-ups (watch, session events, cancel), deadline and
    retries."""

    def __init__(
        self,
        client: KazooClient,
        deadline: Optional[float],
        policy: Optional[tenacity.Retrying],
        nowait: bool = False,
        path: str = "",
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.client = client
        self.path = path  # named by the error a stopped client raises
        self.deadline = deadline
        self.policy = policy
        self.nowait = nowait  # a non-blocking attempt: a wait ends it
        self._stop: Optional[Callable[[], BaseException]] = None  # Cancelled / DeadlinePassed once interrupted
        self._waiter: Optional["asyncio.Future[Any]"] = None  # the future this run awaits now
        self._wakeable = False  # the waiter is a sleep (a wake-up ends it), not a request's reply
        self._woken = False
        self._session = None
        self._timer: Optional[asyncio.TimerHandle] = None
        if deadline is not None:
            self._timer = self.loop.call_later(max(0.0, deadline - time.monotonic()), self._stop_with, e.DeadlinePassed)

    async def run(self, steps: e.Steps[e.T], op: Any = None) -> e.T:
        """Drive ``steps`` to their end: their return value, or their exception (after their cleanup ran).
        ``op``: the step they already yielded, if they were started (:func:`start`)."""
        send: Any = None
        error: Optional[BaseException] = None
        try:
            while True:
                if op is None:
                    try:
                        op = steps.throw(error) if error is not None else steps.send(send)
                    except StopIteration as stop:
                        return stop.value  # type: ignore[no-any-return]
                send, error = None, None
                try:
                    handler = _OPS.get(type(op))
                    send = await handler(self, op) if handler is not None else await self._plain(op)
                except BaseException as exc:  # deadline, cancel, CancelledError too: the steps clean up
                    error = exc
                op = None
        finally:
            if self._timer is not None:
                self._timer.cancel()
            self.close()

    async def _plain(self, op: Any) -> Any:
        answer = self.answer_now(op)
        if answer is not WAITS:
            return answer
        if op is e.SLEEP:
            if self._deletion_seen():
                self.check()
                self._woken = False  # told already: the wake-up is used up
            else:
                await self._sleep()
            return self._take_deleted()
        if op is e.PAUSE:
            await self._sleep(0.05)
            return None
        raise TypeError(f"unknown engine step {op!r}")

    # -- interrupting and waiting ----------------------------------------------------------------
    def interrupt(self, why: Callable[[], BaseException] = e.Cancelled) -> None:
        """Stop this run (any thread): the future it awaits fails with ``why()``, and so does every later
        wait; cleanup (deletes) still runs."""
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

    async def _await(self, fut: "asyncio.Future[Any]", wakeable: bool = False) -> Any:
        """Await ``fut``; the deadline and interrupts fail it, wake-ups end it only if ``wakeable`` (a
        reply's future must wait for its reply: a watch of ours may fire while another request is out)."""
        self.check()
        self._waiter, self._wakeable = fut, wakeable
        try:
            return await fut
        finally:
            self._waiter, self._wakeable = None, False

    async def _sleep(self, at_most: Optional[float] = None) -> None:
        """Wait for a wake-up (at most ``at_most`` seconds); a non-blocking run raises instead."""
        self.check()
        if self.nowait and at_most is None:
            raise e.DeadlinePassed()
        if not self._woken:
            fut = self.loop.create_future()
            if at_most is not None:
                self.loop.call_later(at_most, _settle, fut)
            await self._await(fut, wakeable=True)
        self._woken = False
        self.check()

    def _wake(self, event: Optional[WatchedEvent] = None) -> None:  # loop thread
        if event is not None:
            self._seen(event)
        elif _kazoo.is_stopped(self.client):  # a request in flight may never be answered now
            self._stop_with(lambda: client_closed(self.path))
        self._woken = True
        if self._waiter is not None and self._wakeable:
            _settle(self._waiter)

    def _on_watch(self, event: WatchedEvent) -> None:  # kazoo's event thread: only hand over
        call_soon(self.loop, self._wake, event)

    def _on_session(self, event: str) -> None:  # the session dispatcher thread
        call_soon(self.loop, self._wake)

    async def _reply(self, ar: _kazoo.AsyncResult, limit: Optional[float] = None) -> None:
        """Wait for kazoo's reply ``ar`` (at most ``limit`` seconds: then asyncio.TimeoutError)."""
        if not ar.ready():
            fut = bridge(self.loop, ar)
            timer = None if limit is None else self.loop.call_later(limit, _settle, fut, asyncio.TimeoutError())
            try:
                await self._await(fut)
            finally:
                if timer is not None:
                    timer.cancel()

    async def _wait_gate(self, op: e.WaitGate) -> None:
        gate, fut = op.gate, self.loop.create_future()

        def wake() -> None:  # any thread, the gate's mutex held
            call_soon(self.loop, _settle, fut)

        with gate.mutex:
            if gate.version != op.version:
                return
            gate.wakers.add(wake)
        try:
            await self._await(fut)
        finally:
            with gate.mutex:
                gate.wakers.discard(wake)

    # -- the requests ----------------------------------------------------------------------------
    async def _create_and_list(self, op: e.CreateAndList) -> Tuple[Any, Any, Optional[int]]:
        self.check()
        create, listing = _kazoo.create_and_list(self.client, op.path, op.data, op.acl, op.flags, op.parent)
        try:
            await self._reply(create if listing is None else listing)  # replies come in order: the listing is last
            await self._reply(create)
        except BaseException:
            made = _kazoo.outcome(create) if create.ready() else None
            if made is None:
                create.rawlink(_kazoo.delete_if_created(self.client))  # abandoned mid-flight: delete it if made
            elif not isinstance(made, BaseException):  # made, and its reply is here: delete it before we go
                path, stat = made
                chroot = self.client.chroot
                await delete(self.client, path[len(chroot):] if chroot else path, stat.ephemeralOwner, self.policy)
            raise
        listed = None if listing is None else _kazoo.outcome(listing)
        return _kazoo.outcome(create), listed, _kazoo.session_id(self.client)

    async def call(self, start: Callable[[], _kazoo.AsyncResult]) -> Any:
        """Run an idempotent async operation ``start()`` with retries, bounded by the deadline and cancel."""

        async def once() -> Any:
            ar = start()
            await self._reply(ar)
            return ar.get(block=False)

        try:
            return await retry.acall(once, deadline=self.deadline, policy=self.policy)
        except retry.TRANSIENT:
            self.check()
            raise

    async def _read(self, op: e.Read) -> Any:
        start = getattr(self.client, op.kind + "_async")
        if not op.once:
            return await self.call(lambda: start(op.path))
        limit = _kazoo.session_timeout(self.client)
        if self.deadline is not None:
            limit = max(0.0, min(limit, self.deadline - time.monotonic()))
        ar = start(op.path)
        await self._reply(ar, limit)
        return ar.get(block=False)

    async def _read_all(self, op: e.ReadAll) -> List[Any]:
        pending = [self.client.get_async(path) for path in op.paths]  # pipelined
        for ar in pending:
            await self._reply(ar)
        return [_kazoo.outcome(ar) for ar in pending]

    async def _create_parent(self, op: e.CreateParent) -> Any:
        return await self.call(lambda: _kazoo.create_parent(self.client, op.path, op.acl, op.container))

    async def _watch(self, op: e.Watch) -> Any:
        """Set a data watch, our only one unless ``op.keep`` (a ``get``: on a missing node it leaves no
        watch to remove)."""
        self._subscribe()
        if not op.keep:
            self.unwatch()
            self._woken = False  # (not with keep: a watch set just before may have fired already)
        sent: List[_kazoo.AsyncResult] = []
        try:
            _, stat = await self.call(self._watch_request(op.path, sent))
        except NoNodeError:
            return None
        except BaseException:
            if sent:
                await self._forget_watch(op.path, sent[-1])
            raise
        self._watching(op.path)
        return stat

    async def _forget_watch(self, path: str, ar: _kazoo.AsyncResult) -> None:
        """A watch request abandoned in flight (cancel, deadline): wait for its reply (one round trip, or
        the connection's loss) and for the watch it set to be dropped, so that the run leaves none behind."""
        done = self.loop.create_future()
        forget = _kazoo.forget_watch(self.client, path, self._on_watch)

        def cb(ar: _kazoo.AsyncResult) -> None:  # kazoo's completion thread
            forget(ar)
            call_soon(self.loop, _settle, done)

        ar.rawlink(cb)
        cancelled = False
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                cancelled = True  # cancelled again: finish cleaning up first
        if cancelled:
            raise asyncio.CancelledError()

    async def _delete(self, op: e.Delete) -> bool:
        return await delete(self.client, op.path, op.session, self.policy, gone=op.gone)


_OPS: Dict[type, Callable[[AioDriver, Any], Awaitable[Any]]] = {  # the steps with arguments, by type
    e.CreateAndList: AioDriver._create_and_list,
    e.Read: AioDriver._read,
    e.ReadAll: AioDriver._read_all,
    e.CreateParent: AioDriver._create_parent,
    e.Watch: AioDriver._watch,
    e.Delete: AioDriver._delete,
    e.WaitGate: AioDriver._wait_gate,
}


async def delete(
    client: KazooClient,
    path: str,
    session: Optional[int] = None,
    policy: Optional[tenacity.Retrying] = None,
    gone: Optional[Callable[[], bool]] = None,
) -> bool:
    """:func:`zkrecipes._drive.delete` on the loop. The request is sent before the first await, so a
    cancel of the awaiting task still deletes."""
    until, loop = time.monotonic() + 30.0, asyncio.get_running_loop()

    def poll(fut: "asyncio.Future[None]") -> None:  # without a connection: give up once the session is gone
        if gone is not None and gone():
            _settle(fut, e.SessionGone())
        elif time.monotonic() >= until:
            _settle(fut, asyncio.TimeoutError(f"delete of {path} took longer than 30 s"))
        elif not fut.done():
            loop.call_later(0.2, poll, fut)

    async def once() -> None:
        sid = _kazoo.session_id(client)
        if session is not None and sid not in (None, session):
            raise e.SessionGone()  # our session is gone, and the node with it: never delete a successor's
        ar = client.delete_async(path)  # queued by kazoo until reconnected; dropped if the session ends
        if not ar.ready():
            fut = bridge(loop, ar)
            loop.call_later(0.2, poll, fut)
            await fut
        ar.get(block=False)

    try:
        await retry.acall(once, deadline=until, policy=policy)
    except Exception as exc:
        return e.delete_answer(path, exc)
    return True


class _Done:
    """The awaitable of steps that finished without a request: awaiting it returns their value."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # a generator: awaiting it suspends nothing


def start(client: KazooClient, steps: e.Steps[e.T], policy: Optional[tenacity.Retrying] = None) -> Awaitable[e.T]:
    """Run ``steps`` on the calling thread up to their first request: their error is raised now; if they
    finish, an awaitable already done; else a coroutine that drives the rest on the running loop."""
    try:
        op = steps.send(None)
    except StopIteration as stop:
        return _Done(stop.value)
    return AioDriver(client, None, policy).run(steps, op)
