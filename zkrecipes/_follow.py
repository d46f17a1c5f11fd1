"""A hold's follow-up with ZooKeeper, off the hot path: is our node still ours, and what happens to it.

The one question "is this node still ours" is :func:`zkrecipes._engine.still_ours`, a step; here it is
asked for a hold -- by ``check()`` and re-entry (:func:`confirm`, in the caller's run), on reconnection
(:func:`verify`, the session thread) and after a stall (:func:`confirm_later`, on a thread of its own). A node
that outlived a lost hold is deleted by :func:`cleanup`. A :class:`FollowedHold` also follows its node
with a data watch, for revoke requests and for a delete by someone else; a lock object that listens
(:class:`Revocable`) has its holds follow their nodes.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import threading
import time
import weakref
from typing import Any, Callable, List, Optional, Protocol, Tuple

import tenacity
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from . import _drive, _kazoo
from ._drive import Driver, never
from ._engine import NOW, still_ours
from ._steps import Steps
from .naming import revoke_marked
from .session import LOST, REVOKE, Hold, SessionWatcher

log = logging.getLogger("zkrecipes.lock")


def confirm(hold: Hold) -> Steps[Optional[Exception]]:
    """Confirm a hold the process stood still on (one synced read, in the caller's run): a node gone or not
    ours marks it lost. Returns the error if ZooKeeper could not say (the hold stays unconfirmed)."""
    if not hold.stale():
        return None
    asked = yield NOW
    try:
        # synced: our session may have expired while we stood still; a follower that has not applied that
        # yet would still show our node (ZooKeeper reads are not linearizable)
        ok = yield from still_ours(hold.node, hold.session, synced=True, once=True)
    except Exception as exc:  # ConnectionLoss, timeouts: cannot tell yet
        log.info("could not confirm %s after a stall: %s", hold.node, exc)
        return exc
    hold.confirmed(ok, asked)
    return None


def verify(hold: Hold, synced: bool = False) -> bool:
    """The hold's node still exists and belongs to its session (the session thread asks, and waits at most
    the session timeout: TimeoutError, or the connection's error, if ZooKeeper cannot say)."""
    return Driver(hold.client, None, never, None).run(still_ours(hold.node, hold.session, synced=synced, once=True))


_pending: "collections.deque[Tuple[Hold, float]]" = collections.deque()  # holds to confirm after a stall
_confirming = threading.Lock()  # guards _pending and _worker
_worker: Optional[threading.Thread] = None


def confirm_later(hold: Hold) -> None:
    """After a stall: confirm ``hold`` (a synced read) on a thread of our own, so the session thread goes
    on keeping the doubt clock; the answer is applied on the session thread. The thread ends once idle."""
    global _worker
    with _confirming:
        _pending.append((hold, time.monotonic()))
        if _worker is None:
            _worker = threading.Thread(target=_confirm_pending, name="zkrecipes-confirm", daemon=True)
            _worker.start()


def _confirm_pending() -> None:
    global _worker
    while True:
        with _confirming:
            if not _pending:
                _worker = None
                return
            hold, asked = _pending.popleft()
        try:
            ok = verify(hold, synced=True)
        except Exception:
            continue  # cannot tell yet; kazoo's connection states follow
        SessionWatcher.of(hold.client).post(functools.partial(hold.confirmed, ok, asked))


def _forget_worker() -> None:  # a forked child: no confirming thread runs there
    global _worker, _confirming
    _worker, _confirming = None, threading.Lock()
    _pending.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker)


def _always() -> bool:
    return True


def cleanup(hold: Hold, policy: Optional[tenacity.Retrying], after_told: Callable[[], bool] = _always) -> None:
    """Delete the node of a hold declared lost while its session lived on, once the session is back
    (raises ConnectionLoss/timeouts if it cannot look yet: the hold tries again later); or, once the
    client has a new session, the node if its old session still keeps it, after ``after_told()`` says
    the listeners ran (:func:`zkrecipes._engine.drop_old`)."""
    if _kazoo.session_id(hold.client) not in (None, hold.session):
        if after_told():
            _drive.drop_old(hold.client, hold.node, hold.session, hold.token, policy)
        return
    if verify(hold):
        _drive.delete(hold.client, hold.node, hold.session, policy)


class FollowedHold(Hold):
    """A hold that can follow its node (:meth:`~zkrecipes.session.Hold.follow_node`): a revoke mark is told
    to its listeners as :data:`~zkrecipes.session.REVOKE`, a delete by someone else marks it lost."""

    __slots__ = ()

    def _read_node(self) -> None:
        """Read our node and set the data watch; the answer goes to the dispatcher thread."""
        ar = self.client.get_async(self.node, watch=self._on_node)
        ar.rawlink(lambda ar: self._watcher.post(lambda: self._node_read(ar)))

    def _on_node(self, event: WatchedEvent) -> None:  # kazoo's event thread: hand over
        self._watcher.post(lambda: self._node_event(event))

    def _mine_still(self) -> bool:  # news of our node matters only while we neither let go nor lost it
        return not (self.released or self.releasing or self.state == LOST)

    def _node_event(self, event: WatchedEvent) -> None:
        if not self._mine_still():
            return
        if event.type == EventType.DELETED:
            log.warning("hold %s: its node was deleted by someone else (broken): lost", self.node)
            self._set(LOST)
        elif event.type == EventType.CHANGED:
            self._read_node()  # the watch fired: set it again, and read what was written

    def _node_read(self, ar: Any) -> None:
        try:
            data, stat = ar.get(block=False)
        except NoNodeError:
            stat = None
        except Exception:  # connection trouble: set again once reconnected (see _on_event)
            self._follow = 1
            return
        if stat is None or stat.czxid != self.token:  # gone, or a new node at our path (ExclusiveLock's)
            if self._mine_still():
                log.warning("hold %s: its node is gone (broken): lost", self.node)
                self._set(LOST)
            return
        self._follow = 2
        if revoke_marked(data) and self._mine_still() and not self.revoke:
            self.revoke = True
            log.info("hold %s: revoke requested", self.node)
            with self._lock:
                listeners = list(self._listeners)
            for fn in listeners:
                fn(self, REVOKE)


class _Lock(Protocol):  # what Revocable uses of the lock it is mixed into (zkrecipes._lock.LockCore)
    _revoke_event: Any
    _revokes_told: Any
    _attached: Any
    _state_lock: Any
    _listeners: Any
    _new_event: Any

    def _told(self, hold: Hold, state: str) -> None: ...
    def _report(self, hold: Hold, state: str) -> None: ...
    def _call_listeners(self, listeners: List[Any], state: str) -> None: ...


class Revocable:
    """Revocation for a lock object (see :mod:`zkrecipes.revoke`): its holds follow their nodes once it
    listens, and a revoke request is told once per hold, to ``revoke_requested`` and the listeners."""

    _revoke_event: Any = None  # revoke_requested, made when first read
    _revokes_told: "Optional[weakref.WeakSet[Hold]]" = None  # holds whose revoke request we told

    @property
    def revoke_requested(self: _Lock) -> Any:
        """Set when someone asked the holder to let go (:func:`zkrecipes.request_revoke`, Curator's
        ``Revoker.attemptRevoke``); listeners are called with ``"revoke-requested"`` too. Nothing is taken:
        the hold stays until released (or broken: :func:`zkrecipes.break_lock`). Cleared by the next acquire
        that queues a node. A ``threading.Event`` (an ``asyncio.Event`` in :mod:`zkrecipes.aio`).

        Holds follow their node (one read and one data watch per hold, not waited for) only for a lock
        object that listens: from the first read of this attribute, or once it has a listener. Such a
        hold also learns at once that its node was deleted by someone else: it is lost."""
        event = self._revoke_event
        if event is None:
            with self._state_lock:
                if self._revoke_event is None:
                    self._revoke_event = self._new_event()
                event = self._revoke_event
            for hold in list(self._attached):
                hold.follow_node()
                if hold.revoke:  # seen for another object of the hold: told where this front tells
                    self._told(hold, REVOKE)
        return event

    def _listening(self: _Lock) -> None:
        for hold in list(self._attached):
            hold.follow_node()

    def _follow(self: _Lock, hold: Hold) -> None:
        """Follow ``hold``'s node (this object listens); tell it a revoke request seen before it attached."""
        hold.follow_node()
        if hold.revoke:
            self._report(hold, REVOKE)

    def _report_revoke(self: _Lock, hold: Hold) -> None:
        """Tell a revoke request on ``hold``: set ``revoke_requested``, call the listeners (once per hold)."""
        event = self._revoke_event
        if event is not None:
            event.set()
        with self._state_lock:
            if self._revokes_told is None:
                self._revokes_told = weakref.WeakSet()
            if hold in self._revokes_told:
                return  # once per hold
            self._revokes_told.add(hold)
            listeners = list(self._listeners)
        self._call_listeners(listeners, REVOKE)
