"""What one acquire knows of its watches and its session, the same for both drivers (no I/O but
removing watches), and the engine's steps that both answer without waiting."""

from __future__ import annotations

import time
from typing import Any, Callable, FrozenSet, List, Optional, Set

from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, WatchedEvent

from . import _kazoo
from ._engine import NOW, SESSION, STALE, UNWATCH
from .session import SessionWatcher

WAITS: Any = object()  # what answer_now() says of a step it cannot answer: the driver waits for it


class WatchState:
    """The paths watched, the deletions seen, the session subscription (made only once the acquire has to
    wait) and the staleness test. A driver supplies ``client``, ``_on_watch`` (kazoo's event thread) and
    ``_on_session`` (the session thread), and wakes itself after :meth:`_seen`."""

    __slots__ = ("client", "_deleted", "_deleted_at", "_since", "_watched", "_session")

    client: KazooClient
    _session: Optional[SessionWatcher]  # None until the first watch (a driver's __init__ sets it)

    def _on_watch(self, event: WatchedEvent) -> None:
        raise NotImplementedError

    def _on_session(self, event: str) -> None:
        raise NotImplementedError

    def answer_now(self, op: Any) -> Any:
        """The answer to a step that needs no waiting, or :data:`WAITS`."""
        if op is SESSION:
            return _kazoo.session_id(self.client)
        if op is NOW:
            return time.monotonic()
        if op is STALE:
            return self._stale()
        if op is UNWATCH:
            self.unwatch()
            return None
        return WAITS

    def _watch_request(self, path: str, sent: List[Any]) -> Callable[[], Any]:
        """Starts a watched ``get`` of ``path`` (kazoo's async result), each appended to ``sent``: a request
        abandoned in flight leaves a watch for the driver to drop once its reply comes."""

        def start() -> Any:
            sent.append(self.client.get_async(path, watch=self._on_watch))
            return sent[-1]

        return start

    def _subscribe(self) -> None:
        """Before the first watch: session events wake a sleeping waiter, and watches are recorded (an
        uncontended acquire never gets here)."""
        if self._session is None:
            self._deleted: Set[str] = set()
            self._deleted_at: Optional[float] = None
            self._watched: Set[str] = set()  # paths our data watches are on
            self._since = time.monotonic()
            self._session = SessionWatcher.of(self.client)
            self._session.subscribe(self._on_session)

    def _watching(self, path: str) -> None:
        self._deleted.discard(path)  # a path made again (ExclusiveLock's node) is watched afresh
        self._watched.add(path)

    def _seen(self, event: WatchedEvent) -> None:
        if event.type == EventType.DELETED:
            self._deleted.add(event.path)  # kazoo hands watchers the path without the chroot
            self._deleted_at = time.monotonic()

    def _deletion_seen(self) -> bool:
        """A watched path is already known deleted: SLEEP answers at once."""
        return bool(self._watched & self._deleted)

    def _take_deleted(self) -> FrozenSet[str]:
        """SLEEP's answer: the watched paths deleted (a fired watch is gone from the server and kazoo)."""
        gone = frozenset(self._watched & self._deleted)
        self._watched -= gone
        return gone

    def _stale(self) -> bool:
        """True if a grant now would rest on old news: the process stood still while we waited (GC pause,
        SIGSTOP; told by the session thread) or the deletion we were told of is older than the stall limit
        (a third of the session timeout) -- the session may have expired meanwhile, so our node must be
        read back before we hold. A waiter that never slept is never stale."""
        s = self._session
        if s is None:
            return False
        return s.stalled_since(self._since) or (
            self._deleted_at is not None and time.monotonic() - self._deleted_at > s.stall_limit
        )

    def unwatch(self) -> None:
        if self._session is None:
            return  # never watched
        for path in self._watched:
            _kazoo.remove_data_watch(self.client, path, self._on_watch)
        self._watched.clear()

    def close(self) -> None:
        """Drop our watches and the session subscription (the acquire is over)."""
        if self._session is not None:
            self.unwatch()
            self._session.unsubscribe(self._on_session)
            self._session = None
