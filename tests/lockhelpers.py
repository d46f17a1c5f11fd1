"""Helpers shared by the lock tests: waiting with deadlines, state recording, watch inspection."""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from typing import Callable, Dict, Optional

import pytest
from kazoo.exceptions import NoNodeError

from zkrecipes import ExclusiveLock, FairLock, ReadWriteLock, Semaphore
from zkrecipes.testing import four_letter

# every lock recipe by name: make(client, path, **kwargs) -> lock
RECIPES = {
    "fair": FairLock,
    "exclusive": ExclusiveLock,
    "rw-write": lambda zk, path, **kw: ReadWriteLock(zk, path, **kw).write(),
    "rw-read": lambda zk, path, **kw: ReadWriteLock(zk, path, **kw).read(),
    "semaphore-1": lambda zk, path, **kw: Semaphore(zk, path, 1, **kw),  # one lease: a mutex
}
# the conftest fixture ``make_lock`` runs a test once per mutex (a one-lease semaphore is one too)
MUTEXES = ("exclusive", "fair", "rw-write", "semaphore-1")

# Reconnect quickly once a link comes back (kazoo's default backoff grows to a minute).
FAST_RECONNECT = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.3}


def children(zk, path: str) -> list:
    """Sorted children of ``path``, or [] when it does not exist. Lock parents are container nodes, which the
    server may reap at any moment once empty, so "exists, then list" would race with the reaper. Synced
    first: ``zk``'s server may not yet have applied what another session just did there."""
    try:
        zk.sync(path)
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def wait_until(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.01):
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(interval)


class StateLog:
    """A lock listener that records ``(state, thread)`` and waits for a state with a deadline."""

    def __init__(self, lock=None) -> None:
        self.states: list = []
        self.threads: list = []  # module of each call's thread function (kazoo's threads run kazoo code)
        self._cond = threading.Condition()
        if lock is not None:
            lock.add_listener(self)

    def __call__(self, lock, state: str) -> None:
        target = getattr(threading.current_thread(), "_target", None)
        with self._cond:
            self.states.append(state)
            self.threads.append(getattr(target, "__module__", None) or "")
            self._cond.notify_all()

    def mark(self) -> int:
        with self._cond:
            return len(self.states)

    def wait_for(self, state: str, since: int = 0, timeout: float = 15.0) -> int:
        """Index of the first ``state`` recorded at or after ``since``; fails the test after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for k in range(since, len(self.states)):
                    if self.states[k] == state:
                        return k
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    pytest.fail(f"lock never became {state!r} within {timeout} s (states: {self.states[since:]})")
                self._cond.wait(remaining)


class Acquirer:
    """Runs ``lock.acquire(**kwargs)`` on its own thread; records the result and when it came."""

    def __init__(self, lock, hold_until: Optional[threading.Event] = None, **kwargs) -> None:
        self.lock = lock
        self.result = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()
        self.node: Optional[str] = None
        self.token: Optional[int] = None
        self._hold_until = hold_until
        self.released = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(kwargs,), daemon=True)
        self.thread.start()

    def _run(self, kwargs) -> None:
        try:
            self.result = self.lock.acquire(**kwargs)
            if self.result:
                self.node, self.token = self.lock.node, self.lock.token
        except BaseException as exc:  # surfaced by wait()
            self.error = exc
        finally:
            self.done.set()
        if self.result and self._hold_until is not None:
            self._hold_until.wait(60)
            self.lock.release()
            self.released.set()

    def wait(self, timeout: float = 15.0):
        if not self.done.wait(timeout):
            pytest.fail(f"acquire of {self.lock.path} did not return within {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result


def full_path(client, path: str) -> str:
    """``path`` as the server sees it (with the client's chroot)."""
    return client.chroot + path


def server_watches(ensemble, word: str = "wchp") -> str:
    """Concatenated replies of every running server to a watch four-letter word (local or ZK_HOSTS servers)."""
    out = []
    for i in range(ensemble.size):
        if ensemble.running(i):
            host, _, port = ensemble.host(i).rpartition(":")
            out.append(four_letter(int(port), word, host=host))
    return "\n".join(out)


def assert_no_watch(client, lock_path: str, ensemble) -> None:
    """No watch under ``lock_path``: neither in the client's registry nor on any server (wchc and wchp)."""
    full = full_path(client, lock_path)
    client.sync(lock_path)  # the session's queued requests (a remove-watches) have reached the server
    local = [p for p, fns in list(client._data_watchers.items()) + list(client._child_watchers.items()) if fns]
    assert not [p for p in local if p == full or p.startswith(full + "/")], f"client still watches {local}"
    for word in ("wchp", "wchc"):
        reply = server_watches(ensemble, word)
        hits = [ln.strip() for ln in reply.splitlines() if ln.strip() == full or ln.strip().startswith(full + "/")]
        assert not hits, f"server {word} lists watches under {full}: {hits}\n{reply}"


class Freezer:
    """A loopback TCP proxy whose link a test can *freeze* (a silent partition: connections stay open,
    nothing is delivered either way, new connections are accepted and left unanswered) and thaw.

    Minimal stand-in until ``zkrecipes.testing`` has its own; give clients :attr:`hosts`. Forwards to the
    first server of ``upstream`` only.
    """

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.split("/")[0].split(",")[0].rpartition(":")
        self._target = (host or "127.0.0.1", int(port))
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._cond = threading.Condition()
        self._frozen = False
        self._closed = False
        self._socks: list = [self._listener]
        threading.Thread(target=self._accept, name="freezer", daemon=True).start()

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def freeze(self) -> float:
        """Stop delivering (waits for a send in flight); returns the monotonic time it took effect."""
        with self._cond:
            self._frozen = True
            return time.monotonic()

    def thaw(self) -> None:
        with self._cond:
            self._frozen = False
            self._cond.notify_all()

    def _wait_flowing(self) -> bool:  # under self._cond
        while self._frozen and not self._closed:
            self._cond.wait()
        return not self._closed

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._listener.accept()
            except OSError:
                return
            with self._cond:
                self._socks.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        with self._cond:
            if not self._wait_flowing():  # a connection made while frozen: accepted, never answered
                return
        try:
            u = socket.create_connection(self._target)
        except OSError:
            c.close()
            return
        with self._cond:
            self._socks.append(u)
        threading.Thread(target=self._pump, args=(c, u), daemon=True).start()
        self._pump(u, c)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            with self._cond:
                if not self._wait_flowing():
                    return
                if not data:
                    break
                try:
                    dst.sendall(data)  # under the lock: freeze() returns only after a send in flight
                except OSError:
                    break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> "Freezer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LateLink:
    """A proxy to one server that, once :meth:`arm`-ed, holds back the next reply to a request of each
    connection (and everything after it) until that connection's client sends another packet."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.split(",")[0].rpartition(":")
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.hosts = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._pairs: Dict[socket.socket, socket.socket] = {}
        self._from_server: Dict[socket.socket, bytearray] = {}  # bytes not yet split into frames
        self._held: Dict[socket.socket, bytearray] = {}  # frames held back, per server-side socket
        self._greeted: Dict[socket.socket, bool] = {}  # the connect response (no reply header) has passed
        self._armed = False
        self.held_count = 0
        self.replies = 0  # replies to requests passed or held (not watch events, pings or the connect response)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def arm(self) -> None:
        self._armed = True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in [self._listener, *self._pairs]:
            s.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._listener, *self._pairs], [], [], 0.1)
            for s in ready:
                if s is self._listener:
                    client, _ = self._listener.accept()
                    server = socket.create_connection(self._target)
                    self._pairs[client], self._pairs[server] = server, client
                    self._from_server[server], self._greeted[server] = bytearray(), False
                    continue
                if s not in self._pairs:
                    continue
                data = s.recv(65536)
                peer = self._pairs[s]
                if not data:
                    for x in (s, peer):
                        self._pairs.pop(x, None)
                        x.close()
                    continue
                if s in self._from_server:
                    self._from_server[s] += data
                    self._forward_frames(s, peer)
                else:  # the client spoke: a stuck server wakes up and answers everything it held
                    peer.sendall(data)
                    held = self._held.pop(peer, None)
                    if held:
                        s.sendall(held)

    def _forward_frames(self, server: socket.socket, client: socket.socket) -> None:
        buf = self._from_server[server]
        while len(buf) >= 4:
            (size,) = struct.unpack(">i", buf[:4])
            if len(buf) < 4 + size:
                return
            frame, buf[:] = bytes(buf[:4 + size]), buf[4 + size:]
            xid = struct.unpack(">i", frame[4:8])[0] if self._greeted[server] else None
            self._greeted[server] = True
            if xid is not None and xid > 0:
                self.replies += 1
            if server not in self._held and self._armed and xid is not None and xid > 0:
                self._armed = False  # one reply per arm: to a request (not a watch event, ping or auth)
                self.held_count += 1
                self._held[server] = bytearray()
            if server in self._held:
                self._held[server] += frame
            else:
                client.sendall(frame)


def give_up_session(client, timeout: float = 30.0) -> int:
    """Drop ``client``'s session the way kazoo's own test harness simulates an expiry
    (``KazooTestHarness.expire_session``): kazoo reports LOST and starts a new session, while the server
    keeps the old one (and its ephemeral nodes) until its timeout. Returns the old session id."""
    from kazoo.protocol.connection import _SESSION_EXPIRED
    from kazoo.protocol.states import KazooState

    old = client.client_id[0]
    lost = threading.Event()

    def listener(state: str) -> None:
        if state == KazooState.LOST:
            lost.set()

    client.add_listener(listener)
    try:
        client._call(_SESSION_EXPIRED, None)
        if not lost.wait(timeout):
            pytest.fail(f"kazoo did not report LOST within {timeout} s")
        wait_until(lambda: client.connected and client.client_id and client.client_id[0] != old, timeout,
                   "a new session")
    finally:
        client.remove_listener(listener)
    return int(old)
