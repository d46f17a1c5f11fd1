"""What every lock and election shares: validated settings, states and listeners, and one hold lifecycle
(make, verify, check, release, clean up after a loss)."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple

import tenacity
from kazoo.client import KazooClient
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from . import _drive, _kazoo, formats, naming
from . import retry as _retry  # the keyword argument is called retry
from ._engine import Entry, owns
from ._gate import in_doubt
from ._signature import NamedInit
from .errors import LockLost
from .naming import Contender
from .session import LOST, Hold, SessionWatcher
from .transaction import HeldTransaction

log = logging.getLogger("zkrecipes.lock")

Listener = Callable[[Any, str], None]


class Participant(NamedInit):
    """Validates the shared constructor arguments (before any ZooKeeper call) and follows its holds."""

    _recipe = "lock"  # what its node format is for (:data:`zkrecipes.formats.RECIPES`)

    def __init__(
        self,
        client: KazooClient,
        path: str,
        identifier: Optional[str] = None,
        *,
        host: Optional[str] = None,
        acl: Optional[Sequence[ACL]] = None,
        retry: Optional[tenacity.Retrying] = None,
        tolerate_suspended: bool = False,
        protocol: str = formats.ZKRECIPES,
    ) -> None:
        if not isinstance(client, KazooClient):
            raise TypeError(f"client must be a kazoo KazooClient, got {client!r}")
        self.path = naming.validate_path(path)
        self.identifier = None if identifier is None else naming.validate_label("identifier", identifier)
        self.host = naming.default_host() if host is None else naming.validate_label("host", host)
        if acl is not None and (not isinstance(acl, (list, tuple)) or not all(isinstance(a, ACL) for a in acl)):
            raise TypeError(f"acl must be a list of kazoo.security.ACL, got {acl!r}")
        if not isinstance(tolerate_suspended, bool):
            raise TypeError(f"tolerate_suspended must be a bool, got {tolerate_suspended!r}")
        self._format = formats.get(protocol, self._recipe)  # the node format: names, data, who we queue with
        self.protocol = self._format.name
        self.client = client
        _kazoo.nudger.attend(client)  # replies a server sits on are nudged on this client's connection
        self.acl: Optional[List[ACL]] = list(acl) if acl else None
        self._acl: List[ACL] = list(acl) if acl else list(OPEN_ACL_UNSAFE)  # applied to every node we make
        self.retry: Optional[tenacity.Retrying] = _retry.validate_policy(retry)
        self.tolerate_suspended = tolerate_suspended
        # threading.Event set when the hold (or leadership) is lost; cleared by a new acquire/campaign
        self.lost = threading.Event()
        self._state = "idle"
        self._state_lock = threading.Lock()
        self._listeners: List[Listener] = []
        self._watcher: Optional[SessionWatcher] = None  # the client's, found on the first hold
        self._setup()

    def _setup(self) -> None:
        """What a recipe adds to a new object (after validation, before any ZooKeeper call)."""

    # -- states and listeners ------------------------------------------------------------------------
    def _set_state(self, state: str) -> None:
        """Record ``state`` and tell the listeners once per change (never from kazoo's threads)."""
        if not self._listeners:  # nobody to tell: a plain store (a listener added meanwhile sees the next)
            self._state = state
            return
        with self._state_lock:
            if self._state == state:
                return
            self._state = state
            if not self._listeners:
                return
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn(self, state)
            except Exception:
                log.exception("listener %r of %s failed", fn, self.path)

    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(self, state)`` on every state change (never on kazoo's threads; keep it short)."""
        if not callable(fn):
            raise TypeError(f"listener must be callable, got {fn!r}")
        with self._state_lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Listener) -> None:
        """Stop calling ``fn``; unknown functions are ignored."""
        with self._state_lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    # -- the hold lifecycle --------------------------------------------------------------------------
    def _make_hold(self, entry: Entry, gate: object = None, listener: Optional[Callable[[str], None]] = None) -> Hold:
        """Follow our granted node; ``gate`` (a lock's local gate) lives as long as the hold; ``listener`` is
        told its changes."""
        watcher = self._watcher
        if watcher is None:
            watcher = self._watcher = SessionWatcher.of(self.client)
        hold = Hold(self.client, entry.path, entry.token, entry.session, self._verify, self._cleanup, watcher, listener)
        hold.gate = gate
        if _kazoo.session_id(self.client) != entry.session:
            hold.settle()  # the connection dropped, or the session ended, while we were granted
        return hold

    def _verify(self, hold: Hold) -> bool:
        """Our node still exists and belongs to the hold's session."""
        stat = self.client.exists_async(hold.node).get(timeout=_kazoo.session_timeout(self.client))
        return owns(stat, hold.session)

    def _check_hold(self, hold: Hold, what: str) -> None:
        """Raise LockLost unless ``hold`` is certain: not lost, not suspended (unless tolerated), and
        confirmed by ZooKeeper if the process stood still since it was last known good."""
        hold.confirm()
        why = in_doubt(hold, self.tolerate_suspended)
        if why is not None:
            raise LockLost(f"{self.path}: {what} ({hold.node}) is {why}")

    def _cleanup(self, hold: Hold) -> None:
        """Delete the node of a hold declared lost while its session lived on, once the session is back
        (raises ConnectionLoss/timeouts if it cannot look yet: the hold tries again later)."""
        if self._verify(hold):
            _drive.delete(self.client, hold.node, hold.session, self.retry)

    def _delete_held(self, hold: Hold) -> None:
        """Release ``hold``: delete its node and stop following it. Without a connection, wait for one
        until the hold is declared lost (the session expired, or suspended past the session timeout);
        a session found gone marks the hold lost, so its owner is told even this late. A lost hold's
        node, if its session lives on after all, is deleted when the client reconnects."""
        delete_hold(hold, self.retry)

    def _fence_hold(self) -> Hold:
        """The hold a transaction is fenced by; raises if there is none (each recipe says how)."""
        raise NotImplementedError

    def transaction(self) -> HeldTransaction:
        """A kazoo transaction that commits only while this hold lives (ZooKeeper's ``IsOwner()``
        compare): see :class:`~zkrecipes.transaction.HeldTransaction`. Raises as :meth:`check` does
        when there is no hold to fence by."""
        return HeldTransaction(self.client, self.path, self._fence_hold(), self._check_hold)

    def contenders(self) -> List[Contender]:
        """Every holder and waiter in queue order, as :class:`~zkrecipes.Contender` tuples (``[]`` if the
        path does not exist). Connection errors are raised, not hidden."""
        return _drive.contenders(self.client, self.path)


# -- for the modules that follow a participant's holds from outside it (asyncio front, transactions) --
def delete_hold(hold: Hold, policy: Optional[tenacity.Retrying]) -> None:
    """Release ``hold`` (see :meth:`Participant._delete_held`), retrying with ``policy`` (None: the
    default)."""
    hold.releasing = True
    try:
        if hold.state != LOST and not _drive.delete(
            hold.client, hold.node, hold.session, policy, gone=lambda: hold.state == LOST
        ):
            hold.mark_lost()
    finally:
        hold.close()


def make_hold(p: Participant, entry: Entry, gate: object = None) -> Hold:
    """Follow ``p``'s granted node (see :meth:`Participant._make_hold`)."""
    return p._make_hold(entry, gate)


def node_format(p: Participant) -> Tuple[formats.NodeFormat, List[ACL]]:
    """``p``'s node format and the ACL applied to every node it makes."""
    return p._format, p._acl
