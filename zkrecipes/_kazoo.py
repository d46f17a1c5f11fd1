"""The one seam to kazoo: every touch of its private state, and the wire requests it does not expose
(those off the hot path -- TTL nodes, removeWatches, fenced multis, cleanups -- are in
:mod:`zkrecipes._kazoo_ops`).

Each function names the private state it relies on (read in kazoo 2.9.0-2.11.0). tests/test_kazoo_seam.py
checks each one against a real ensemble; ``make test`` runs it on the installed kazoo (2.11.0) and on the
oldest that setup.cfg allows (2.9.0).
"""

from __future__ import annotations

import collections
import functools
import logging
import math
import select
import threading
import time
import weakref
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple, TypeVar

import kazoo.exceptions
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import Connect, Create2, Delete, Exists, GetChildren
from kazoo.protocol.states import KeeperState
from kazoo.security import ACL

from . import metrics as _metrics

log = logging.getLogger("zkrecipes.kazoo")

AsyncResult = Any  # kazoo's IAsyncResult of the client's handler (untyped in kazoo)
Request = Any  # a kazoo serialization request (Create2, GetChildren, ...)

_NOT_SET: Any = object()
_links = threading.Lock()  # guards Result callbacks (rare: an abandoned create) against set()


class Result:
    """The hot path's one-shot async result (create+list, delete): the part of kazoo's IAsyncResult that
    kazoo's I/O thread (``set``, ``set_exception``; 2.9.0-2.11.0) and our drivers use, on one plain lock
    instead of a Condition over an RLock (a third of the client CPU). Callbacks run on the handler's
    completion thread, as kazoo's do; the one :meth:`on_ready` callback on the thread that sets the result."""

    __slots__ = ("value", "_exception", "_latch", "_handler", "_callbacks", "_at_once")

    def __init__(self, handler: Any) -> None:
        self.value: Any = None
        self._exception: Any = _NOT_SET
        self._latch = threading.Lock()
        self._latch.acquire()  # released once, by set()/set_exception(); waiters pass through it
        self._handler = handler
        self._callbacks: Optional[List[Callable[[Any], None]]] = None
        self._at_once: Optional[Callable[[], None]] = None  # see on_ready()

    @property
    def exception(self) -> Optional[BaseException]:
        exc = self._exception
        return None if exc is _NOT_SET else exc

    def ready(self) -> bool:
        return self._exception is not _NOT_SET

    def successful(self) -> bool:
        return self._exception is None

    def set(self, value: Any = None) -> None:
        self._settle(value, None)

    def set_exception(self, exception: BaseException) -> None:
        self._settle(None, exception)

    def _settle(self, value: Any, exception: Optional[BaseException]) -> None:
        with _links:
            if self._exception is not _NOT_SET:
                return  # a result is set once
            self.value, self._exception = value, exception
            callbacks, self._callbacks = self._callbacks, None
            at_once, self._at_once = self._at_once, None
        self._latch.release()
        if at_once is not None:
            try:
                at_once()
            except Exception:  # never into kazoo's I/O thread, which would stop reading
                log.exception("a reply's callback failed")
        for fn in callbacks or ():
            self._dispatch(fn)

    def wait(self, timeout: Optional[float] = None) -> bool:
        if self._exception is _NOT_SET:
            if self._latch.acquire(True, -1 if timeout is None else (timeout if timeout > 0.0 else 0.0)):
                self._latch.release()  # let the next waiter through too
        return self._exception is not _NOT_SET

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        if block:
            self.wait(timeout)
        exc = self._exception
        if exc is None:
            return self.value
        if exc is _NOT_SET:
            raise self._handler.timeout_exception("Result not ready")
        raise exc

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        with _links:
            if self._exception is _NOT_SET:
                self._callbacks = (self._callbacks or []) + [callback]
                return
        self._dispatch(callback)

    def on_ready(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once the result is set, on the thread that sets it (kazoo's I/O thread), or now if it
        is: for the asyncio driver, whose ``fn`` only hands the news to its loop, one thread switch less
        per reply than a callback on the completion thread. ``fn`` must be quick and never block. One per
        result: a second one runs on the completion thread, as :meth:`rawlink`'s do."""
        with _links:
            if self._exception is _NOT_SET:
                if self._at_once is None:
                    self._at_once = fn
                else:
                    self._callbacks = (self._callbacks or []) + [lambda _r: fn()]
                return
        fn()

    def _dispatch(self, fn: Callable[[Any], None]) -> None:
        if self._handler.running:
            self._handler.completion_queue.put(lambda: fn(self))
        else:
            fn(self)


_UNUSABLE = (KeeperState.AUTH_FAILED, KeeperState.CLOSED, KeeperState.EXPIRED_SESSION)
_LIVE = (KeeperState.CONNECTED, KeeperState.CONNECTED_RO)


class CreateContainer(Create2):  # type: ignore[misc]  # kazoo's requests are untyped NamedTuples
    """createContainer (opcode 19, ZooKeeper >= 3.5); its reply is path + stat, like create2."""

    type = 19



def session_id(client: KazooClient) -> Optional[int]:
    """The client's current session id, or None while it has none: what ``client_id`` tells, without its
    Event call (the hot path asks twice per acquire). ``_state`` is set before ``_live``, and
    ``_session_id`` before either (2.9.0-2.11.0)."""
    return client._session_id if client._state in _LIVE else None


_WATCH_XID = -1  # a watch notification: the server's news, not an answer to anything we sent


class Heard:
    """What one connection's replies tell about its session, on the client's monotonic clock: ``granted``,
    the session timeout (s) in the server's last connect response (None before one); ``answered``, when we
    sent the latest request (ping, connect and auth included) that the server has answered (None before
    one). The server heard that request no earlier than we sent it, so it cannot expire the session before
    ``answered + granted``. Written by kazoo's connection thread only; plain attribute reads elsewhere."""

    __slots__ = ("granted", "answered", "_sent", "nudges", "_nudged")

    def __init__(self) -> None:
        self.granted: Optional[float] = None
        self.answered: Optional[float] = None
        self._sent: Deque[float] = collections.deque()  # send times of requests not answered yet, oldest first
        self.nudges = 0  # requests sent to wake a server that sat on a reply (see _nudge)
        self._nudged: Optional[float] = None  # send time of the request the last nudge was for


def _heard(conn: Any) -> Heard:
    h: Optional[Heard] = conn.__dict__.get("_zkrecipes_heard")
    if h is None:
        h = conn._zkrecipes_heard = Heard()
    return h


def _follow_replies() -> None:
    """Teach kazoo's ConnectionHandler to stamp what it sends and hears, for every client of the process
    (installed once, at import; a client connected before then learns ``granted`` on its next connect).
    Wraps ``ConnectionHandler._submit`` (every request, ping and connect is written through it),
    ``_read_header`` (every reply but the connect response) and ``_invoke`` (the connect: its response's
    ``time_out``) (2.9.0-2.11.0). A reply answers the oldest request not yet answered: ZooKeeper answers a
    session's requests in order, and were it not to, the older stamp would only bring the deadline earlier."""
    if getattr(ConnectionHandler, "_zkrecipes_follows", False):
        return
    submit, read_header, invoke = ConnectionHandler._submit, ConnectionHandler._read_header, ConnectionHandler._invoke

    def _submit(self: Any, request: Any, timeout: Any, xid: Any = None) -> Any:
        h = _heard(self)
        h._sent.append(time.monotonic())  # stamped before the write: never later than the send
        return submit(self, request, timeout, xid)

    def _read_header(self: Any, timeout: Any) -> Any:
        got = read_header(self, timeout)
        if got[0].xid != _WATCH_XID:
            h = _heard(self)
            if h._sent:
                h.answered = h._sent.popleft()
        return got

    def _invoke(self: Any, timeout: Any, request: Any, xid: Any = None) -> Any:
        if not isinstance(request, Connect):
            return invoke(self, timeout, request, xid)
        h = _heard(self)
        h._sent.clear()  # a new connection: nothing sent on the old one will be answered
        sent = time.monotonic()
        got = invoke(self, timeout, request, xid)
        h._sent.clear()  # the connect's own stamp: its response is read without _read_header
        if isinstance(got, tuple) and got[0].time_out > 0:  # <= 0: the session has expired
            h.granted, h.answered = got[0].time_out / 1000.0, sent  # before kazoo reports CONNECTED
        return got

    ConnectionHandler._submit, ConnectionHandler._read_header = _submit, _read_header
    ConnectionHandler._invoke = _invoke
    ConnectionHandler._zkrecipes_follows = True


_follow_replies()


NUDGE_AFTER = 0.05  # s a request may wait for its reply before we nudge its server


def _nudge(conn: Any, h: Heard) -> None:
    """Wake a server that sits on a reply. ZooKeeper 3.6.0-3.8.0 (ZOOKEEPER-4537, fixed in 3.7.2/3.8.1) can
    lose the wake-up of its CommitProcessor: a request that arrives while that thread is between its last
    look at its queues and its sleep is left unanswered until the next packet from any client reaches the
    server, usually a heartbeat seconds later. A waiter re-lists within a millisecond of the watch
    notification the server sent while applying the holder's delete, so its request tends to land in
    exactly that window, at a moment when nothing else is in flight: one hand-off in thousands waited a
    heartbeat interval (issue 30). So once the oldest request on a connection our recipes use has waited
    ``NUDGE_AFTER``, its own I/O thread (in :func:`poll_select`) queues one cheap read (an exists of the
    root) on it: its arrival wakes the server, which answers both. One nudge per stuck request; no thread
    and no wake-up of our own while replies come in time."""
    h._nudged = h._sent[0]  # once per stuck request, sent or not
    if conn.client._state not in _LIVE:
        return  # (connecting: the requests are sent again on the next connection)
    h.nudges += 1
    hooks = _metrics.installed
    if hooks is not None:
        _metrics.call(hooks.nudge)
    log.debug("no reply for %.0f ms: nudging the server", (time.monotonic() - h._nudged) * 1e3)
    submit(conn.client, [Exists(conn.client.chroot or "/", None)])  # its wake byte ends this poll


_READ, _WRITE = select.POLLIN | select.POLLPRI, select.POLLOUT


def poll_select(
    rlist: Sequence[Any], wlist: Sequence[Any], xlist: Sequence[Any], timeout: Optional[float] = None,
    conn: Any = None,
) -> Tuple[List[Any], List[Any], List[Any]]:
    """kazoo's ``selector_select`` (its threading handler's ``select``) on ``poll()``: same arguments,
    answer and errors, without the epoll object it makes, fills and closes on every call. kazoo's I/O
    thread selects several times per request; those three extra system calls and the selector bookkeeping
    were about a third of a busy client's CPU here (bench/cpu.py's process CPU). Any fd number works, as
    with kazoo's (``select.select`` stops at 1,024); ``xlist`` is never ready, as with kazoo's. With
    ``conn`` (the client's ConnectionHandler), a wait outlasting a request's :data:`NUDGE_AFTER` nudges
    its server (:func:`_nudge`) and goes on waiting."""
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be non-negative")
    masks: Dict[int, int] = {}
    objs: Dict[int, List[Any]] = {}
    for given, mask in ((rlist, _READ), (wlist, _WRITE)):
        for obj in given:
            fd = obj if isinstance(obj, int) else obj.fileno()
            if fd < 0:
                raise TypeError(f"Invalid file descriptor: {fd}")  # a closed socket (kazoo: TypeError too)
            masks[fd] = masks.get(fd, 0) | mask
            objs.setdefault(fd, []).append(obj)
    poller = select.poll()
    for fd, mask in masks.items():
        poller.register(fd, mask)
    h = None if conn is None else _heard(conn)
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        due = None
        if h is not None and h._sent and h._sent[0] != h._nudged:  # the oldest unanswered request, not nudged yet
            due = h._sent[0] + NUDGE_AFTER
        wait = end if due is None else due if end is None else min(due, end)
        ready = poller.poll(None if wait is None else math.ceil(max(0.0, wait - time.monotonic()) * 1e3))
        if ready or (end is not None and time.monotonic() >= end):
            break
        if due is not None and h is not None and time.monotonic() >= due:
            _nudge(conn, h)
    readable: List[Any] = []
    writable: List[Any] = []
    for fd, events in ready:
        if events & select.POLLNVAL:
            raise ValueError("Invalid event mask or fd")  # a closed descriptor: kazoo's epoll refuses it too
        if masks[fd] & _READ and events & ~_WRITE:  # hang-up and error count as readable: the read tells
            readable.extend(objs[fd])
        elif masks[fd] & _WRITE and events & ~select.POLLIN:
            writable.extend(objs[fd])
    return readable, writable, []


def attend(client: KazooClient) -> None:
    """Our recipes use ``client``: its I/O thread selects with :func:`poll_select`, which nudges replies its
    server sits on, and runs the watch functions marked :func:`on_io_thread` itself (kazoo's threading
    handler only; ``SequentialThreadingHandler.select`` and ``dispatch_callback``,
    ``KazooClient._connection``, 2.9.0-2.11.0). Other clients of the process are left as kazoo made them."""
    handler = client.handler
    if type(handler) is SequentialThreadingHandler and "select" not in handler.__dict__:
        handler.select = functools.partial(poll_select, conn=client._connection)
        handler.dispatch_callback = functools.partial(_dispatch, handler.dispatch_callback)


F = TypeVar("F", bound=Callable[..., Any])


def on_io_thread(fn: F) -> F:
    """Mark a watch function (or method) to be called on kazoo's I/O thread as it reads the notification,
    not queued for kazoo's event thread: a waiter woken by it is one thread switch nearer (on a busy
    machine each switch is a wait for a CPU). ``fn`` must be quick, never block, never call the client;
    an exception from it is logged. Clients :func:`attend` did not reach queue it as usual."""
    fn._zkrecipes_io_thread = True  # type: ignore[attr-defined]
    return fn


def _dispatch(queue: Callable[[Any], None], callback: Any) -> None:
    """The handler's ``dispatch_callback`` (kazoo's I/O thread): a marked watch function now, the rest queued."""
    if callback.type == "watch" and getattr(callback.func, "_zkrecipes_io_thread", False):
        try:
            callback.func(*callback.args)
        except Exception:  # never into kazoo's I/O thread, which would stop reading
            log.exception("a watch function failed")
        return
    queue(callback)


def heard(client: KazooClient) -> Heard:
    """What the replies on ``client``'s connection told so far (``KazooClient._connection``; 2.9.0-2.11.0)."""
    return _heard(client._connection)


def session_timeout(client: KazooClient) -> float:
    """The session timeout in seconds: the one the server granted once a connect response said it, else
    the one the client asked for (``KazooClient._session_timeout``, ms; 2.9.0-2.11.0)."""
    granted = _heard(client._connection).granted
    return granted if granted is not None else float(client._session_timeout) / 1000.0


def is_stopped(client: KazooClient) -> bool:
    """True once ``client.stop()`` was called (``KazooClient._stopped``, an Event; 2.9.0-2.11.0)."""
    return bool(client._stopped.is_set())


def submit(
    client: KazooClient, requests: Sequence[Request], out: Optional[List[AsyncResult]] = None
) -> List[AsyncResult]:
    """Queue ``requests`` back to back on the session and wake kazoo's connection thread once.

    ZooKeeper answers a session's requests in order, so a create and a get_children sent together cost
    one round trip; kazoo's ``_call`` wakes its I/O thread once per request (a thread switch each on a
    small machine). The results are also added to ``out`` before anything is queued: a caller interrupted
    in here (Ctrl-C) still has them. Relies on ``_queue``, ``_state``, ``_connection._write_sock`` and
    ``_call`` (2.9.0-2.11.0); paths must already carry the chroot.
    """
    handler = client.handler
    threads = type(handler) is SequentialThreadingHandler
    results = [Result(handler) if threads else handler.async_result() for _ in requests]
    if out is not None:
        out.extend(results)
    write_sock = client._connection._write_sock
    if client._state in _UNUSABLE or write_sock is None:
        for req, ar in zip(requests, results):
            client._call(req, ar)  # sets the right exception
        return results
    if not _queue_and_wake(client, write_sock, list(zip(requests, results))):
        for ar in results:
            if not ar.ready():
                ar.set_exception(ConnectionClosedError("Connection has been closed"))
    return results


def _queue_and_wake(client: KazooClient, write_sock: Any, pairs: List[Tuple[Request, Any]]) -> bool:
    """Queue ``pairs`` (request, result) and write one wake byte each; False if the socket was closed.

    kazoo's I/O thread sends one queued request per wake byte, so a request queued without its byte would
    leave the client one request behind for good (each later one sent a request late). The byte is written
    even if an exception from a signal handler (Ctrl-C, the CLI's SIGTERM) lands just after the queueing:
    Python runs signal handlers between bytecodes, and only the append comes before the ``finally``. A
    byte written for nothing queued is harmless: the I/O thread discards a byte when its queue is empty.
    Relies on ``_queue`` and the socket pair (2.9.0-2.11.0)."""
    send, wake, sent = write_sock.send, b"\0" * len(pairs), False
    try:
        client._queue.extend(pairs)
    finally:
        try:
            send(wake)
            sent = True
        except OSError:
            pass  # closed under us (client.stop()): the caller fails the requests
    return sent


def _wake_for_every_request() -> None:
    """Make kazoo's ``KazooClient._call`` (every request of its public API) write its wake byte even when
    an exception from a signal handler lands right after the queueing (see :func:`_queue_and_wake`), for
    every client of the process (installed once, at import). kazoo's own refusals (a closed, expired or
    unauthenticated client, a closed socket) are left to it (``_call``, ``_state``; 2.9.0-2.11.0)."""
    if getattr(KazooClient, "_zkrecipes_wakes", False):
        return
    call = KazooClient._call

    def _call(self: Any, request: Any, async_object: Any) -> Any:
        write_sock = self._connection._write_sock
        if self._state in _UNUSABLE or write_sock is None:
            return call(self, request, async_object)  # kazoo's refusal: sets the right exception
        if not _queue_and_wake(self, write_sock, [(request, async_object)]):
            async_object.set_exception(ConnectionClosedError("Connection has been closed"))
        return None

    KazooClient._call = _call
    KazooClient._zkrecipes_wakes = True


_wake_for_every_request()


def create_and_list(
    client: KazooClient, path: str, data: bytes, acl: Sequence[ACL], flags: int, parent: Optional[str],
    out: Optional[List[AsyncResult]] = None,
) -> Tuple[AsyncResult, Optional[AsyncResult]]:
    """Create ``path`` (create2: the reply has the stat) and, if ``parent`` is given, list its children in
    the same round trip. The results are added to ``out`` before anything is sent (see :func:`submit`)."""
    requests: List[Request] = [Create2(client.chroot + path, data, list(acl), flags)]
    if parent is not None:
        requests.append(GetChildren(client.chroot + parent, None))
    results = submit(client, requests, out)
    return results[0], (results[1] if parent is not None else None)


def list_children(client: KazooClient, parent: str) -> AsyncResult:
    """Send a get_children of ``parent`` (no watch) from any thread, kazoo's I/O thread included: the hot
    path's result, whose :meth:`Result.on_ready` runs as the reply is read."""
    return submit(client, [GetChildren(client.chroot + parent, None)])[0]


def when_ready(ar: AsyncResult, fn: Callable[[], None]) -> None:
    """Call ``fn()`` once ``ar`` is ready: on kazoo's I/O thread for the hot path's results (one thread
    switch less), on the completion thread for kazoo's own; now if it is ready."""
    if type(ar) is Result:
        ar.on_ready(fn)
    else:
        ar.rawlink(lambda _ar: fn())


def delete_async(client: KazooClient, path: str) -> AsyncResult:
    """Send a delete of ``path`` (any version) without kazoo's path normalisation, which our own paths
    do not need. Same request as ``client.delete_async(path)``."""
    return submit(client, [Delete(client.chroot + path, -1)])[0]


def outcome(ar: AsyncResult) -> Any:
    """A ready result's value, or its exception as a value, read without taking its lock (IAsyncResult's
    public ``value`` and ``exception``, set before ``ready()`` turns true)."""
    exc = ar._exception if type(ar) is Result else ar.exception
    return ar.value if exc is None else exc


def create_container(client: KazooClient, path: str, acl: Sequence[ACL]) -> AsyncResult:
    """Send createContainer for ``path`` (``_call``; 2.9.0-2.11.0)."""
    ar = client.handler.async_result()
    client._call(CreateContainer(client.chroot + path, b"", list(acl), 4), ar)
    return ar


_no_containers: "weakref.WeakSet[KazooClient]" = weakref.WeakSet()  # clients whose server has no containers


def create_parent(client: KazooClient, path: str, acl: Sequence[ACL], container: bool) -> AsyncResult:
    """Send a create of the parent node ``path``: a container node, or a persistent one if not
    ``container`` or if this client's server refused a container before (servers before 3.5)."""
    if not container or client in _no_containers:
        return client.create_async(path, b"", list(acl))
    ar = create_container(client, path, acl)

    def remember(ar: AsyncResult) -> None:
        if isinstance(outcome(ar), (kazoo.exceptions.UnimplementedError, kazoo.exceptions.BadArgumentsError)):
            log.info("server rejected a container node (%r); using persistent parents", outcome(ar))
            _no_containers.add(client)

    ar.rawlink(remember)
    return ar


