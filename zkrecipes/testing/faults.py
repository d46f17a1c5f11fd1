"""Faults a test can inject into a client: server-side session expiry, and a network link that can be cut
(connections closed) or frozen (a silent partition: connections open, nothing delivered)."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from typing import Dict, List, Optional, Set, Tuple

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from .._kazoo import session_timeout
from .._kazoo_ops import number_far

log = logging.getLogger("zkrecipes.testing.faults")


def _connect_string(client: KazooClient) -> str:
    return ",".join(f"{h}:{p}" for h, p in client.hosts)


def expire_session(client: KazooClient, timeout: float = 30.0) -> None:
    """Expire ``client``'s session on the server, as a long pause or partition would.

    Opens a second connection with the same session id and password and closes it, which ends the
    session server-side (its Close is numbered so that no server takes it for one of ``client``'s own
    requests, which kazoo would read two replies for). Returns once ``client`` has seen ``LOST`` and is
    connected again with a new session; raises ``TimeoutError`` if that does not happen within ``timeout`` seconds.
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
        session_id = client.client_id
        # the client may take its session back (reconnecting) before the twin's Close reaches the server, or
        # before the twin's start() returns (which then says it timed out): the session lives on, the twin
        # tries again
        while True:
            twin = KazooClient(hosts=_connect_string(client), client_id=session_id)
            try:
                twin.start(timeout=max(0.1, deadline - time.monotonic()))
                number_far(twin)  # its Close is never taken for the client's own request (see number_far)
            except KazooTimeoutError:
                if time.monotonic() >= deadline:
                    raise
                continue
            finally:
                twin.stop()
                twin.close()
            left = deadline - time.monotonic()
            if lost.wait(max(0.0, min(left, 2.0 + session_timeout(client)))):
                break
            if time.monotonic() >= deadline:
                raise TimeoutError(f"client did not see its session 0x{old_id:x} expire within {timeout} s")
        while not (client.connected and client.client_id and client.client_id[0] != old_id):
            if time.monotonic() > deadline:
                raise TimeoutError(f"client did not reconnect with a new session within {timeout} s")
            time.sleep(0.02)
    finally:
        client.remove_listener(listener)


class Partition:
    """A loopback TCP proxy between clients and an ensemble, whose link a test can cut, freeze and heal.

    Give clients :attr:`hosts` instead of the ensemble's connect string (each new connection goes to the
    next server of ``upstream`` in turn). :meth:`cut` closes every proxied connection and refuses new
    ones: the client sees the drop at once and goes SUSPENDED. :meth:`freeze` is the partition real
    networks make (a switch, a firewall, a paused VM): connections stay open and nothing is delivered
    either way; new connections are accepted and never answered. The client notices only when its
    replies are overdue; the server expires the session after the session timeout either way.
    :meth:`heal` ends both (bytes held back by a freeze are delivered then, as TCP would). Close it when
    done; nothing is left running.
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
        self._peers: Dict[socket.socket, socket.socket] = {}
        self._target_of: Dict[socket.socket, int] = {}  # both sockets of a pair -> index of its server
        self._parked: Set[socket.socket] = set()  # frozen: not read, so nothing is delivered
        self._pending: List[Tuple[socket.socket, int]] = []  # accepted while frozen: not answered yet
        self._cut = False
        self._frozen: Optional[Set[int]] = None  # indexes of the frozen servers, or None
        self._frozen_done: Optional[threading.Event] = None  # set once the proxy thread has parked the frozen
        self._next = -1
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

    @property
    def is_frozen(self) -> bool:
        """True while the link (or one server's side of it) is frozen."""
        return self._frozen is not None

    def cut(self) -> None:
        """Drop every proxied connection now and refuse new ones until :meth:`heal`."""
        with self._lock:
            self._cut = True
        self._wake()

    def freeze(self, server: Optional[int] = None) -> float:
        """Deliver nothing, either way, until :meth:`heal`, keeping every connection open: on the whole
        link, or only on connections to server ``server`` (an index into ``upstream``: that server looks
        silent to these clients). Returns the monotonic time from which nothing more is delivered."""
        if server is not None and not (isinstance(server, int) and 0 <= server < len(self._targets)):
            raise ValueError(f"server must be an index below {len(self._targets)}, got {server!r}")
        done = threading.Event()
        with self._lock:
            self._frozen = set(range(len(self._targets))) if server is None else (self._frozen or set()) | {server}
            self._frozen_done = done
        self._wake()
        if threading.current_thread() is not self._thread:
            done.wait(5.0)  # the proxy thread has parked every frozen socket: no byte in flight after this
        return time.monotonic()

    def heal(self) -> None:
        """Let connections through again (ends a cut and a freeze)."""
        with self._lock:
            self._cut = False
            self._frozen = None
        self._wake()

    def close(self) -> None:
        """Stop the proxy thread and close every socket."""
        self._stop.set()
        self._wake()
        self._thread.join(5)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"w")

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
            self._target_of.pop(x, None)
            if x in self._parked:
                self._parked.discard(x)
            else:
                with contextlib.suppress(Exception):
                    self._sel.unregister(x)
            with contextlib.suppress(OSError):
                x.close()

    def _frozen_target(self, index: int) -> bool:
        frozen = self._frozen
        return frozen is not None and index in frozen

    def _connect(self, conn: socket.socket, index: int) -> None:
        """Pair ``conn`` with a new connection to server ``index`` (or the next that answers)."""
        up = None
        order = list(range(index, len(self._targets))) + list(range(index))
        for i in order:
            try:
                up = socket.create_connection(self._targets[i], timeout=1.0)
                index = i
                break
            except OSError:
                continue
        if up is None:
            conn.close()
            return
        conn.setblocking(False)
        up.setblocking(False)
        self._peers[conn], self._peers[up] = up, conn
        self._target_of[conn] = self._target_of[up] = index
        self._sel.register(conn, selectors.EVENT_READ, "peer")
        self._sel.register(up, selectors.EVENT_READ, "peer")

    def _apply(self) -> None:
        """Bring the sockets in line with the link's state (on the proxy thread, after a wake-up)."""
        if self._cut:
            for peer in list(self._peers):
                self._drop(peer)
            for conn, _ in self._pending:
                with contextlib.suppress(OSError):
                    conn.close()
            self._pending = []
        for x in list(self._peers):  # park the frozen, unpark the healed
            frozen = self._frozen_target(self._target_of[x])
            if frozen and x not in self._parked:
                self._sel.unregister(x)
                self._parked.add(x)
            elif not frozen and x in self._parked:
                self._parked.discard(x)
                self._sel.register(x, selectors.EVENT_READ, "peer")
        pending, self._pending = self._pending, []
        for conn, index in pending:
            if self._frozen_target(index):
                self._pending.append((conn, index))
            else:
                self._connect(conn, index)
        if self._frozen_done is not None:
            self._frozen_done.set()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for key, _ in self._sel.select(0.5):
                    s = key.fileobj
                    if key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(64)
                        self._apply()
                        continue
                    if s is self._listener:
                        try:
                            conn, _ = self._listener.accept()
                        except OSError:
                            continue
                        if self._cut:
                            conn.close()
                            continue
                        self._next = (self._next + 1) % len(self._targets)  # spread clients over servers
                        if self._frozen_target(self._next):
                            self._pending.append((conn, self._next))  # accepted, never answered while frozen
                        else:
                            self._connect(conn, self._next)
                        continue
                    if s not in self._peers or s in self._parked:
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
            for conn, _ in self._pending:
                with contextlib.suppress(OSError):
                    conn.close()
            for x in (self._listener, self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    x.close()
            self._sel.close()
