"""The asyncio driver: runs the same :mod:`~zkrecipes._engine` generators as the blocking driver.

kazoo keeps its own threads (the default threading handler); its replies and watch notifications are
handed to the event loop with ``loop.call_soon_threadsafe`` and complete plain futures that the
acquiring task awaits. No thread per waiting task: a waiter is one suspended coroutine. The deadline
and :meth:`AioDriver.interrupt` (``cancel()``) fail the future being awaited; a task cancel lands as
``CancelledError`` and is thrown into the steps like any other exit, which then deletes its node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Dict, FrozenSet, Generator, List, Optional, Tuple

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, SessionExpiredError
from kazoo.protocol.states import WatchedEvent

from .. import _drive, _kazoo, retry
from .._engine import (
    NOW,
    PAUSE,
    SESSION,
    SLEEP,
    STALE,
    UNWATCH,
    Cancelled,
    CreateAndList,
    DeadlinePassed,
    Delete,
    MakeParents,
    Read,
    ReadAll,
    Steps,
    T,
    WaitGate,
    Watch,
)

log = logging.getLogger("zkrecipes.aio")


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


def _settle(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


def _time_out(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_exception(asyncio.TimeoutError())


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


class AioDriver(_drive.WatchState):
    """One acquire's requests, wake-ups (watch, session events, cancel), deadline and retries, on a loop."""

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
        self.nowait = nowait
        self._stop: Optional[Callable[[], BaseException]] = None  # Cancelled / DeadlinePassed once interrupted
        self._waiter: Optional["asyncio.Future[Any]"] = None  # the future this acquire awaits now
        self._wakeable = False  # the waiter is a sleep (a wake-up ends it), not a request's reply
        self._woken = False
        self._session = None
        self._timer: Optional[asyncio.TimerHandle] = None
        if deadline is not None:
            self._timer = self.loop.call_later(max(0.0, deadline - time.monotonic()), self._stop_with, DeadlinePassed)
        self._ops: Dict[type, Callable[[Any], Any]] = {
            CreateAndList: self._create_and_list,
            Read: self._read,
            ReadAll: self._read_all,
            WaitGate: self._wait_gate,
            MakeParents: self._make_parents,
            Watch: self._watch,
            Delete: self._delete,
        }

    async def run(self, steps: Steps[T], op: Any = None) -> T:
        """Drive ``steps`` to its end: its return value, or its exception (after its cleanup ran). ``op``:
        the step they already yielded, if they were started (:func:`start`)."""
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
                    send = await self._do(op)
                except BaseException as exc:  # deadline, cancel, CancelledError too: the steps clean up
                    error = exc
                op = None
        finally:
            self.close()

    async def _do(self, op: Any) -> Any:
        handler = self._ops.get(type(op))
        if handler is not None:
            return await handler(op)
        if op is SESSION:
            return _kazoo.session_id(self.client)
        if op is NOW:
            return time.monotonic()
        if op is SLEEP:
            return await self._sleep_for_deletion()
        if op is STALE:
            return self._stale()
        if op is PAUSE:
            self.check()
            fut = self.loop.create_future()
            self.loop.call_later(0.05, _settle, fut)
            if not self._woken:
                await self._await(fut, wakeable=True)
            self._woken = False
            return None
        if op is UNWATCH:
            self.unwatch()
            return None
        raise TypeError(f"unknown engine step {op!r}")

    # -- interrupting and waiting ----------------------------------------------------------------
    def interrupt(self, why: Callable[[], BaseException] = Cancelled) -> None:
        """Stop this acquire (any thread): the future it awaits fails with ``why()``, and so does every
        later wait; cleanup (deletes) still runs."""
        call_soon(self.loop, self._stop_with, why)

    def _stop_with(self, why: Callable[[], BaseException]) -> None:
        if self._stop is None:
            self._stop = why
        w = self._waiter
        if w is not None and not w.done():
            w.set_exception(why())

    def check(self) -> None:
        if self._stop is not None:
            raise self._stop()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise DeadlinePassed()
        if _kazoo.is_stopped(self.client):  # no session will come: every wait would last forever
            raise _drive.client_closed(self.path)

    def _closed(self) -> BaseException:
        return _drive.client_closed(self.path)

    async def _await(self, fut: "asyncio.Future[Any]", wakeable: bool = False) -> Any:
        """Await ``fut``; the deadline and interrupts fail it, wake-ups end it only if ``wakeable`` (a
        reply's future must wait for its reply: a watch of ours may fire while another request is out)."""
        self.check()
        self._waiter, self._wakeable = fut, wakeable
        try:
            return await fut
        finally:
            self._waiter, self._wakeable = None, False

    def _wake(self, event: Optional[WatchedEvent] = None) -> None:  # loop thread
        if event is not None:
            self._seen(event)
        elif _kazoo.is_stopped(self.client):  # a request in flight may never be answered now
            self._stop_with(self._closed)
        self._woken = True
        w = self._waiter
        if w is not None and self._wakeable and not w.done():
            w.set_result(None)

    def _on_watch(self, event: WatchedEvent) -> None:  # kazoo's event thread: only hand over
        call_soon(self.loop, self._wake, event)

    def _on_session(self, event: str) -> None:  # the session dispatcher thread
        call_soon(self.loop, self._wake)

    async def _sleep_for_deletion(self) -> FrozenSet[str]:
        """SLEEP: the watched paths deleted (at once if some already are), else wait for a wake-up."""
        if self._deletion_seen():
            self.check()
            self._woken = False  # told already: the wake-up is used up
        else:
            await self._sleep()
        return self._take_deleted()

    async def _sleep(self) -> None:
        self.check()
        if self.nowait:
            raise DeadlinePassed()
        if not self._woken:
            await self._await(self.loop.create_future(), wakeable=True)
        self._woken = False
        self.check()

    # -- the requests ----------------------------------------------------------------------------
    async def _create_and_list(self, op: CreateAndList) -> Tuple[Any, Any, Optional[int]]:
        self.check()
        create, listing = _kazoo.create_and_list(self.client, op.path, op.data, op.acl, op.flags, op.parent)
        try:
            last = create if listing is None else listing  # replies come in order: the listing is last
            if not last.ready():
                await self._await(bridge(self.loop, last))
            if not create.ready():
                await self._await(bridge(self.loop, create))
        except BaseException:
            made = _kazoo.outcome(create) if create.ready() else None
            if made is None:
                create.rawlink(_drive.delete_if_created(self.client))  # abandoned mid-flight: delete it if made
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
            if not ar.ready():
                await self._await(bridge(self.loop, ar))
            return ar.get(block=False)

        try:
            return await retry.acall(once, deadline=self.deadline, policy=self.policy)
        except retry.TRANSIENT:
            self.check()
            raise

    async def _read(self, op: Read) -> Any:
        start = getattr(self.client, op.kind + "_async")
        if not op.once:
            return await self.call(lambda: start(op.path))
        limit = _kazoo.session_timeout(self.client)
        if self.deadline is not None:
            limit = max(0.0, min(limit, self.deadline - time.monotonic()))
        ar = start(op.path)
        if not ar.ready():
            fut = bridge(self.loop, ar)
            timer = self.loop.call_later(limit, _time_out, fut)
            try:
                await self._await(fut)
            finally:
                timer.cancel()
        return ar.get(block=False)

    async def _read_all(self, op: ReadAll) -> List[Any]:
        pending = [self.client.get_async(path) for path in op.paths]  # pipelined
        for ar in pending:
            if not ar.ready():
                await self._await(bridge(self.loop, ar))
        return [_kazoo.outcome(ar) for ar in pending]

    async def _wait_gate(self, op: WaitGate) -> None:
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

    async def _make_parents(self, op: MakeParents) -> None:
        requests = _drive.parent_requests(self.client, op.path, op.acl, op.container)
        value: Any = None
        error: Optional[BaseException] = None
        while True:
            try:
                start = requests.throw(error) if error is not None else requests.send(value)
            except StopIteration:
                return
            try:
                value, error = await self.call(start), None
            except BaseException as exc:
                value, error = None, exc

    async def _watch(self, op: Watch) -> Any:
        """Set a data watch, our only one unless ``op.keep`` (a ``get``: on a missing node it leaves no
        watch to remove)."""
        self._subscribe()
        if not op.keep:
            self.unwatch()
            self._woken = False  # (not with keep: a watch set just before may have fired already)
        sent: List[_kazoo.AsyncResult] = []

        def start() -> _kazoo.AsyncResult:
            sent.append(self.client.get_async(op.path, watch=self._on_watch))
            return sent[-1]

        try:
            _, stat = await self.call(start)
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
        the connection's loss), then drop the watch it set, so that the acquire leaves none behind. kazoo
        registers the watch just after it completes the reply, hence the short wait for it to appear."""
        cancelled = False
        fut = bridge(self.loop, ar)
        while not fut.done():
            try:
                await asyncio.shield(fut)
            except asyncio.CancelledError:
                cancelled = True  # cancelled again: finish cleaning up first
        if _kazoo.outcome(ar) is not None and not isinstance(_kazoo.outcome(ar), BaseException):
            for _ in range(100):
                if self._on_watch in _kazoo.data_watchers(self.client, path):
                    _kazoo.remove_data_watch(self.client, path, self._on_watch)
                    break
                await asyncio.sleep(0.001)
        if cancelled:
            raise asyncio.CancelledError()

    async def _delete(self, op: Delete) -> bool:
        return await delete(self.client, op.path, op.session, self.policy, gone=op.gone)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().close()


class _SessionGone(Exception):
    """The session that owned a node has ended."""


async def delete(
    client: KazooClient,
    path: str,
    session: Optional[int] = None,
    policy: Optional[tenacity.Retrying] = None,
    timeout: float = 30.0,
    gone: Optional[Callable[[], bool]] = None,
) -> bool:
    """:func:`zkrecipes._drive.delete` on the loop: delete our node unless its session is gone (then
    False). The request is sent before the first await, so a cancel of the awaiting task still deletes."""
    deadline = time.monotonic() + timeout
    loop = asyncio.get_running_loop()

    async def attempt() -> None:
        sid = _kazoo.session_id(client)
        if session is not None and sid not in (None, session):
            raise _SessionGone()  # our session is gone, and the node with it: never delete a successor's
        ar = client.delete_async(path)  # queued by kazoo until reconnected; dropped if the session ends
        if not ar.ready():
            fut = bridge(loop, ar)

            def poll() -> None:  # without a connection: give up once the session is known gone
                if fut.done():
                    return
                if gone is not None and gone():
                    fut.set_exception(_SessionGone())
                elif time.monotonic() >= deadline:
                    fut.set_exception(asyncio.TimeoutError(f"delete of {path} took longer than {timeout} s"))
                else:
                    timer[0] = loop.call_later(0.2, poll)

            timer = [loop.call_later(0.2, poll)]
            try:
                await fut
            finally:
                timer[0].cancel()
        ar.get(block=False)

    try:
        await retry.acall(attempt, deadline=deadline, policy=policy)
    except NoNodeError:
        pass
    except (SessionExpiredError, _SessionGone):
        return False
    except Exception:
        log.exception("could not delete %s; it goes when the session ends", path)
    return True


class _Done:
    """The awaitable of steps that finished without a request: awaiting it returns their value."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # a generator: awaiting it suspends nothing


def start(client: KazooClient, steps: Steps[T], policy: Optional[tenacity.Retrying] = None) -> Awaitable[T]:
    """Run ``steps`` on the calling thread up to their first request: their error is raised now; if they
    finish, an awaitable already done; else a coroutine that drives the rest on the running loop."""
    try:
        op = steps.send(None)
    except StopIteration as stop:
        return _Done(stop.value)
    return AioDriver(client, None, policy).run(steps, op)
