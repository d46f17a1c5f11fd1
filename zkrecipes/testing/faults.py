"""Faults a test can inject into a client: server-side session expiry and a cuttable network link."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from typing import Optional

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

log = logging.getLogger("zkrecipes.testing.faults")


def _connect_string(client: KazooClient) -> str:
    return ",".join(f"{h}:{p}" for h, p in client.hosts)


def expire_session(client: KazooClient, timeout: float = 30.0) -> None:
    """Expire ``client``'s session on the server, as a long pause or partition would.

    Opens a second connection with the same session id and password and closes it, which ends the
    session server-side. Returns once ``client`` has seen ``LOST`` and is connected again with a new
    session; raises ``TimeoutError`` if that does not happen within ``timeout`` seconds.
    """
    if not isinstance(client, KazooClient):
        raise TypeError(f"client must be a KazooClient, got {client!r}")
    if client.client_id is None or not client.connected:
        raise ValueError("client must be connected to expire its session")
    old_id = client.client_id[0]
    lost = threading.Event()

    def listener(state: str) -> None:
        if state == KazooState.LOST:
            lost.set()

    client.add_listener(listener)
    try:
        deadline = time.monotonic() + timeout
        twin = KazooClient(hosts=_connect_string(client), client_id=client.client_id)
        try:
            twin.start(timeout=timeout)
        finally:
            twin.stop()
            twin.close()
        if not lost.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"client did not see its session 0x{old_id:x} expire within {timeout} s")
        while not (client.connected and client.client_id and client.client_id[0] != old_id):
            if time.monotonic() > deadline:
                raise TimeoutError(f"client did not reconnect with a new session within {timeout} s")
            time.sleep(0.02)
    finally:
        client.remove_listener(listener)


class Partition:
    """A loopback TCP proxy between clients and an ensemble, whose link a test can cut and heal.

    Give clients :attr:`hosts` instead of the ensemble's connect string. :meth:`cut` closes every
    proxied connection and refuses new ones (the client goes SUSPENDED; after the session timeout the
    server expires the session); :meth:`heal` lets connections through again. Close it when done.
    """

    def __init__(self, upstream: str) -> None:
        if not isinstance(upstream, str) or not upstream:
            raise ValueError(f"upstream must be a connect string like '127.0.0.1:2181', got {upstream!r}")
        self._targets = []
        for part in upstream.split("/")[0].split(","):
            host, _, port = part.rpartition(":")
            self._targets.append((host or "127.0.0.1", int(port)))
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._peers: dict[socket.socket, socket.socket] = {}
        self._cut = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._run, name="zkrecipes-partition", daemon=True)
        self._thread.start()

    @property
    def hosts(self) -> str:
        """Connect string of the proxy."""
        return f"127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        """True while the link is cut."""
        return self._cut

    def cut(self) -> None:
        """Drop every proxied connection now and refuse new ones until :meth:`heal`."""
        with self._lock:
            self._cut = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"c")

    def heal(self) -> None:
        """Let connections through again."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        """Stop the proxy thread and close every socket."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"s")
        self._thread.join(5)

    def __enter__(self) -> "Partition":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drop(self, s: socket.socket) -> None:
        other = self._peers.pop(s, None)
        for x in (s, other):
            if x is None:
                continue
            self._peers.pop(x, None)
            with contextlib.suppress(Exception):
                self._sel.unregister(x)
            with contextlib.suppress(OSError):
                x.close()

    def _upstream(self) -> Optional[socket.socket]:
        self._next = (getattr(self, "_next", -1) + 1) % len(self._targets)  # spread clients over servers
        for target in self._targets[self._next:] + self._targets[: self._next]:
            try:
                return socket.create_connection(target, timeout=1.0)
            except OSError:
                continue
        return None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for key, _ in self._sel.select(0.5):
                    s = key.fileobj
                    if key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(64)
                        if self._cut:
                            for peer in list(self._peers):
                                self._drop(peer)
                        continue
                    if s is self._listener:
                        try:
                            conn, _ = self._listener.accept()
                        except OSError:
                            continue
                        up = None if self._cut else self._upstream()
                        if up is None:
                            conn.close()
                            continue
                        conn.setblocking(False)
                        up.setblocking(False)
                        self._peers[conn] = up
                        self._peers[up] = conn
                        self._sel.register(conn, selectors.EVENT_READ, "peer")
                        self._sel.register(up, selectors.EVENT_READ, "peer")
                        continue
                    if s not in self._peers:
                        continue
                    try:
                        data = s.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    if not data or self._cut:
                        self._drop(s)
                        continue
                    try:  # bounded: a peer that stops reading (a paused server) is dropped, not waited on
                        self._peers[s].settimeout(2.0)
                        self._peers[s].sendall(data)
                        self._peers[s].setblocking(False)
                    except OSError:
                        self._drop(s)
        finally:
            for peer in list(self._peers):
                self._drop(peer)
            for x in (self._listener, self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    x.close()
            self._sel.close()
