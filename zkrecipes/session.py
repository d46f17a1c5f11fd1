"""Session states: one watcher per KazooClient, and the state machine of one hold.

A dispatcher thread per client turns kazoo's states, and the doubt clock, into ``suspended`` / ``connected`` /
``lost`` events, so no subscriber runs on kazoo's threads. The doubt clock (docs/session-loss.rst, "The doubt
clock"; its place in the architecture: docs/design.rst): with ``sent`` the moment we sent the latest request
the server has answered (pings included) and ``T`` the session timeout the server granted, the session is *in
doubt* (``suspended``) from ``sent + T/2`` without a newer answer (kazoo pings every ``T/3`` when idle, so a
live link answers well before) or when kazoo reports the connection lost, and ``lost`` at ``sent + T`` (the
server may expire it from then on, and give the lock away). Timed waits that overrun by a third of the session
timeout mean the process stood still (GC, SIGSTOP): holds are then *stale* until ZooKeeper confirms them.

A :class:`Hold`: held -> suspended (connection drops, or replies overdue) -> lost (session expired, or the
lost deadline passed); back to held when replies come again in the same session with its node verified ours.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from typing import Any, Callable, List, Optional, Set, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from ._kazoo import heard, is_stopped, session_id, session_timeout

log = logging.getLogger("zkrecipes.session")

SUSPENDED = "suspended"
CONNECTED = "connected"
LOST = "lost"
STALLED = "stalled"  # the process stood still: holds must be confirmed before they are trusted again
_TICK = 0.5  # the dispatcher wakes at least this often
OVERDUE = 0.5  # no answer for this fraction of the session timeout: in doubt (kazoo pings every third)


def lost_lead(timeout: float) -> float:
    """How long before the lost deadline a hold is declared lost: a twentieth of the session timeout, at
    most 0.2 s, so that a dispatcher woken a little late still tells it before the server can expire."""
    return min(0.2, timeout / 20.0)

Subscriber = Callable[[str], None]


class SessionWatcher:
    """Fan-out of one client's connection states to subscribers, on a dispatcher thread."""

    _registry: "weakref.WeakKeyDictionary[KazooClient, SessionWatcher]" = weakref.WeakKeyDictionary()
    _registry_lock = threading.Lock()

    @classmethod
    def of(cls, client: KazooClient) -> "SessionWatcher":
        """The watcher of ``client`` (created on first use)."""
        w = cls._registry.get(client)  # one per client for its lifetime: found without the lock
        if w is not None:
            return w
        with cls._registry_lock:
            w = cls._registry.get(client)
            if w is None:
                w = cls._registry[client] = cls(client)
            return w

    def __init__(self, client: KazooClient) -> None:
        self._client_ref = weakref.ref(client)
        self._subs: Set[Callable[[str], None]] = set()
        self._subscribed = 0  # subscriptions ever made
        self._lock = threading.Lock()
        self._events: "queue.Queue[Tuple[Any, Optional[int]]]" = queue.Queue()  # (state, sid) or (fn, None)
        self._thread: Optional[threading.Thread] = None
        self._suspended_at: Optional[float] = None  # kazoo reported the connection lost (monotonic)
        self._overdue = False  # we reported ``suspended`` because replies are overdue
        self._lost_at: Optional[float] = None  # the lost deadline we reported ``lost`` at (once per deadline)
        self._timeout = session_timeout(client)
        self.stall_limit = self._timeout / 3.0  # an overrun longer than this counts as a stall
        self.stalled_at = 0.0  # monotonic time the last stall was noticed
        self._wake_by: Optional[float] = None  # while the dispatcher runs: when it should be back at the latest
        self.last_session: Optional[int] = session_id(client)
        client.add_listener(self._on_kazoo_state)

    # kazoo's thread: never block here
    def _on_kazoo_state(self, state: str) -> None:
        client = self._client_ref()
        sid = client.client_id[0] if client is not None and client.client_id else None
        self._events.put((state, sid))

    def subscribe(self, fn: Subscriber) -> None:
        """Call ``fn(event)`` for every later event, on the dispatcher thread, until unsubscribed."""
        with self._lock:
            self._subs.add(fn)
            self._subscribed += 1  # brief holds between two ticks keep the dispatcher too
            if self._thread is None:  # cleared by the thread itself as it ends, and in a forked child
                # until the new thread first waits: the process frozen before then is a stall too (a hold made
                # just before a SIGSTOP starts the thread; stalled_since() and the thread's first look see it)
                self._wake_by = time.monotonic() + _TICK
                self._thread = threading.Thread(target=self._run, name="zkrecipes-session", daemon=True)
                self._thread.start()

    def unsubscribe(self, fn: Subscriber) -> None:
        """Stop calling ``fn``; unknown functions are ignored."""
        with self._lock:
            self._subs.discard(fn)

    def stalled_since(self, t: float) -> bool:
        """True if the process may have stood still past the stall limit since monotonic ``t``: noticed after
        ``t``, or the dispatcher overdue by that much and not noticed yet (it may not have run since the
        process resumed; noticed once, the same overrun does not make a hold confirmed since stale again)."""
        if self.stalled_at > t:
            return True
        wake_by, now = self._wake_by, time.monotonic()
        overrun = None if wake_by is None else wake_by + self.stall_limit  # the dispatcher still waiting past it
        if overrun is not None and now > overrun and self.stalled_at <= overrun:
            self.stalled_at = now  # noticed here first: a read confirming a hold from now on covers this stall
            return True
        return False  # this overrun, if noticed already (at stalled_at <= t), is not a new stall: t covers it

    def deadlines(self) -> Optional[Tuple[float, float]]:
        """``(in_doubt_at, lost_at)`` on the monotonic clock: from when we sent the latest request the server
        answered, half and all of the granted session timeout (see the module docstring); from kazoo's
        report of a lost connection if no answer was seen yet. None if neither is known."""
        client = self._client_ref()
        if client is None:
            return None
        base = heard(client).answered
        if base is None:
            base = self._suspended_at
        if base is None:
            return None
        timeout = session_timeout(client)
        return base + OVERDUE * timeout, base + timeout

    def lost_by(self) -> Optional[Tuple[float, float]]:
        """``(in_doubt_at, declare_lost_at)``: :meth:`deadlines` with the lost one brought forward by
        :func:`lost_lead`."""
        d = self.deadlines()
        if d is None:
            return None
        return d[0], d[1] - lost_lead((d[1] - d[0]) / (1.0 - OVERDUE))

    def _follow_clock(self) -> Optional[float]:
        """Report what the doubt clock says now; return when it should be looked at next (None: no need)."""
        d = self.lost_by()
        if d is None:
            return None
        doubt_at, lost_at = d
        now = time.monotonic()
        if now >= lost_at:
            if self._lost_at != lost_at:
                log.warning("no answer from ZooKeeper for almost the session timeout: holds are lost")
                self._lost_at, self._suspended_at, self._overdue = lost_at, None, False
                self._emit(LOST)
            return None
        if now >= doubt_at:
            # a stall of our own since then is the stall check's to settle (holds confirm with one read)
            stalled_since_doubt = self.stalled_at >= doubt_at
            if not self._overdue and self._suspended_at is None and not stalled_since_doubt:
                self._overdue = True
                log.info("no answer from ZooKeeper for %.0f%% of the session timeout: holds are in doubt",
                         OVERDUE * 100)
                self._emit(SUSPENDED)
            return lost_at
        if self._overdue:  # answers again, in the session kazoo still calls connected: holds verify their nodes
            self._overdue = False
            client = self._client_ref()
            if client is not None and session_id(client) == self.last_session:
                self._emit(CONNECTED)
        return doubt_at

    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on the dispatcher thread (in order with the session events)."""
        self._events.put((fn, None))

    def _emit(self, event: str) -> None:
        with self._lock:
            subs = list(self._subs)
        for fn in subs:
            try:
                fn(event)
            except Exception:  # a subscriber's bug must not stop the fan-out
                log.exception("session subscriber %r failed on %s", fn, event)

    def _run(self) -> None:
        try:
            self._loop()
        finally:  # however it ends: the next subscribe starts a new thread
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = self._wake_by = None

    def _noticed(self, now: float, overrun_at: float) -> None:
        """The dispatcher saw an overrun past ``overrun_at``: note it, unless stalled_since() already noticed
        this same overrun (a hold confirmed since then must not turn stale again)."""
        if self.stalled_at <= overrun_at:
            self.stalled_at = now

    def _tell_stall(self, stood: float) -> None:
        log.warning("the process stood still for %.1f s: holds must be confirmed", stood)
        self._emit(STALLED)

    def _loop(self) -> None:
        idle_since = time.monotonic()
        subscribed = -1
        while True:
            wait = _TICK
            next_look = self._follow_clock()
            if next_look is not None:
                wait = max(0.0, min(wait, next_look - time.monotonic()))
            started = time.monotonic()
            starting = self._wake_by  # set by subscribe() until this thread first waits, then by the last wake
            if starting is not None and started > starting + self.stall_limit:
                self._noticed(started, starting + self.stall_limit)
                self._tell_stall(started - starting)
            self._wake_by = started + wait
            try:
                state, sid = self._events.get(timeout=wait)
            except queue.Empty:
                state = None
            now = time.monotonic()
            stalled = now - started > wait + self.stall_limit
            if stalled:  # before _wake_by is cleared: stalled_since() never misses it
                self._noticed(now, started + wait + self.stall_limit)
            # busy now (a posted call, the clock): back within a tick, or a process frozen meanwhile is a stall
            # that stalled_since() sees before this thread runs again
            self._wake_by = now + _TICK
            if stalled:
                self._tell_stall(now - started - wait)
            if callable(state):
                try:
                    state()
                except Exception:
                    log.exception("posted call %r failed", state)
                continue
            if state is None:
                client = self._client_ref()
                if client is not None and is_stopped(client) and self._events.empty() and self._subs:
                    # kazoo's own LOST may not have reached us yet: holds and waiters hear of the stop now
                    # (holds ignore a second LOST; waiters look at the client and raise ClientClosed)
                    self._emit(LOST)
                with self._lock:
                    if client is None or (is_stopped(client) and self._events.empty()):
                        self._thread = self._wake_by = None  # the client is gone or stopped: no event can come
                        return  # (a later subscribe, after a restart, starts the thread again)
                    if self._subs or self._subscribed != subscribed:
                        idle_since, subscribed = time.monotonic(), self._subscribed
                    elif time.monotonic() - idle_since > 2.0 and self._events.empty():
                        self._thread = self._wake_by = None  # (no thread: nothing is overdue)
                        return
                continue
            if state == KazooState.SUSPENDED:
                if self._suspended_at is None:
                    self._suspended_at = time.monotonic()
                self._emit(SUSPENDED)
            elif state == KazooState.LOST:
                self._suspended_at, self._overdue = None, False
                self._emit(LOST)
            elif state == KazooState.CONNECTED:
                self._suspended_at, self._overdue = None, False
                if self.last_session is not None and sid != self.last_session:
                    self._emit(LOST)
                self.last_session = sid
                self._emit(CONNECTED)


def _confirm_here(hold: "Hold") -> None:
    """A hold's confirmation after a stall, by its own ``verify`` on this thread (when given no other)."""
    asked = time.monotonic()
    try:
        ok = hold._verify(hold)
    except Exception:
        return  # cannot tell yet; kazoo's connection states follow
    hold.confirmed(ok, asked)


def _forget_threads() -> None:  # in a forked child no dispatcher thread runs
    for w in list(SessionWatcher._registry.values()):
        w._thread = w._wake_by = None
        w._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads)


HELD = "held"
REVOKE = "revoke-requested"  # told to a hold's listeners, not a state: the hold stays as it is


class Hold:
    """One acquired node: ``held``, ``suspended`` or ``lost`` (final). ``verify(hold)`` says whether the node
    is still ours (on reconnection, unless its owner is releasing it: then the delete decides);
    ``confirm_later(hold)`` asks the same after a stall without blocking this thread, and applies the
    answer with :meth:`confirmed` (default: ``verify`` here);
    ``cleanup(hold)`` removes one that outlived a hold declared lost (in its session, or in one the
    client gave up), after the listeners were told.
    Listeners are told each change on the dispatcher thread (or the caller of :meth:`mark_lost`)."""

    __slots__ = (
        "client", "node", "token", "session", "state", "releasing", "released", "gate", "verified_at", "_verify",
        "_cleanup", "_confirm_later", "_listeners", "_lock", "_watcher", "revoke", "_follow", "recipe", "granted_at",
        "__weakref__",
    )  # one per acquire: no per-instance dict

    def __init__(
        self,
        client: KazooClient,
        node: str,
        token: int,
        session: int,
        verify: Callable[["Hold"], bool],
        cleanup: Callable[["Hold"], None],
        watcher: Optional[SessionWatcher] = None,
        listener: "Optional[Callable[[Hold, str], None]]" = None,
        confirm_later: "Optional[Callable[[Hold], None]]" = None,
    ) -> None:
        self.client = client
        self.node = node
        self.token = token
        self.session = session
        self.state = HELD
        self.releasing = False  # its owner is deleting the node: that delete, not a reconnection read, decides
        self.released = False
        self.gate: object = None  # kept alive as long as the hold (a lock's local gate)
        self.verified_at = self.granted_at = time.monotonic()  # when ZooKeeper last confirmed the node ours
        self.recipe = ""  # the recipe's metrics label (zkrecipes.metrics), set by whoever made the hold
        self._verify = verify
        self._cleanup = cleanup
        self._confirm_later = confirm_later or _confirm_here  # after a stall (see _on_event)
        self._listeners: "List[Callable[[Hold, str], None]]" = [listener] if listener is not None else []
        self._lock = threading.Lock()
        self._watcher = SessionWatcher.of(client) if watcher is None else watcher  # the client's one watcher
        self._watcher.subscribe(self._on_event)
        self.revoke = False  # a revoke request was seen on our node (see :meth:`follow_node`)
        self._follow = 0  # 0: our node is not followed; 1: asked to; 2: its data watch is set (on this connection)

    def add_listener(self, fn: "Callable[[Hold, str], None]") -> None:
        """Call ``fn(hold, state)`` on each change."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: "Callable[[Hold, str], None]") -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def _set(self, state: str) -> None:
        with self._lock:
            if self.state == state or self.state == LOST:
                return
            self.state = state
            listeners = list(self._listeners)
        log.info("hold %s: %s", self.node, state)
        for fn in listeners:
            fn(self, state)

    def settle(self) -> None:
        """Start from the session now: ``lost`` if it changed; ``suspended`` without a connection (and the
        dispatcher looks again, so a reconnection told before we subscribed is not missed)."""
        sid = session_id(self.client)
        if sid == self.session:
            return
        if sid is not None:
            self.mark_lost()
            return
        with self._lock:
            if self.state == HELD:
                self.state = SUSPENDED
        self._watcher.post(lambda: self._on_event(CONNECTED))

    def in_doubt(self) -> bool:
        """Read the doubt clock and kazoo's own connection state now, without waiting for the dispatcher
        (its news comes a thread hop later, too late for a holder about to act): mark the hold lost if the
        lost deadline has passed or kazoo has another session already; True if lost, past the in-doubt
        moment (replies overdue) or without a live connection as kazoo sees it."""
        if self.released:
            return self.state == LOST
        sid = session_id(self.client)
        if sid is not None and sid != self.session:
            self._set(LOST)  # a new session: ours ended (the dispatcher says so too, later)
        d = self._watcher.lost_by()
        now = time.monotonic()
        if d is not None and now >= d[1]:
            self._set(LOST)
        return self.state == LOST or sid is None or (d is not None and now >= d[0])

    def stale(self) -> bool:
        """True while held but not confirmed since the process stood still (see the module docstring)."""
        return self.state == HELD and self._watcher.stalled_since(self.verified_at)

    def confirmed(self, ok: bool, asked: float) -> None:
        """Apply a confirming read started at monotonic ``asked``: a node gone or not ours marks the hold lost."""
        if ok:
            self.verified_at = max(self.verified_at, asked)
        elif not self.released:
            self._set(LOST)

    # -- our node's data watch: revoke requests, and a delete by someone else --------------------------
    def follow_node(self) -> None:
        """Follow our node with one data watch (idempotent; a read sent now, not waited for): a revoke mark
        on it (:func:`zkrecipes.naming.revoke_marked`) is told to the listeners as :data:`REVOKE` (once per
        hold; the state stays), and a delete by someone else (``break_lock``, an operator) marks the hold
        lost. Everything is told on the dispatcher thread, never on kazoo's. The watch lives on one
        connection (kazoo sets none again when it reconnects): each reconnection in our session reads the
        node again, with a new watch, so what was written while we were away is told too."""
        with self._lock:
            if self._follow or self.released:
                return
            self._follow = 1
        self._read_node()

    def _read_node(self) -> None:
        """Read our node and set its data watch (a hold that follows its node: ``zkrecipes._follow``)."""
        raise NotImplementedError

    def mark_lost(self) -> None:
        """Declare this hold lost (final). Its node, if it still exists, is removed on reconnection."""
        self._set(LOST)

    def close(self) -> None:
        """Released by its owner: stop following the session (a lost hold waits to clean up first)."""
        self.released = True
        if self.state != LOST:
            self._watcher.unsubscribe(self._on_event)

    def _on_event(self, event: str) -> None:
        if event == STALLED:
            if self.state == HELD and not self.released:
                self._confirm_later(self)
            return
        if event in (SUSPENDED, LOST):
            if not self.released:
                self._set(event)
            return
        if event != CONNECTED:
            return
        sid = session_id(self.client)
        if sid is None:
            return  # dropped again already: the next reconnection decides
        if sid != self.session:
            self._watcher.unsubscribe(self._on_event)
            self._set(LOST)
            try:  # the client moved to a new session: the old one may live on in the server, with our node
                self._cleanup(self)
            except Exception:
                log.exception("could not remove %s of our earlier session; it goes when that session ends", self.node)
        elif self.state == LOST:
            try:
                self._cleanup(self)
            except (ConnectionLoss, KazooTimeoutError, TimeoutError):
                log.info("could not remove %s yet (connection lost again)", self.node)
                return  # the next reconnection tries again
            except Exception:
                log.exception("could not remove %s; it goes when the session ends", self.node)
            self._watcher.unsubscribe(self._on_event)
        elif not (self.released or self.releasing):  # a read racing our own delete would find "lost"
            asked = time.monotonic()
            try:
                ok = self._verify(self)
            except (ConnectionLoss, KazooTimeoutError, TimeoutError):
                # dropped again before we could look: stay suspended (the suspension timer still bounds it)
                log.info("could not verify %s yet (connection lost again)", self.node)
                return
            except Exception:
                log.exception("could not verify %s after reconnecting", self.node)
                ok = False
            if ok:
                self.verified_at = asked
                if self._follow:  # kazoo sets no watch again on a new connection: ours went with the old one
                    self._read_node()  # (set it again, and read what was written while we were away)
            self._set(HELD if ok else LOST)
