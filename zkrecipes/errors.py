"""Exceptions raised by zkrecipes locks and elections."""

from kazoo.exceptions import ConnectionClosedError


class LockError(Exception):
    """Misuse of a lock (release by a thread that does not hold it, read-to-write upgrade, ...)."""


class LockTimeout(LockError, TimeoutError):
    """``hold(timeout=...)`` or ``with`` could not acquire within its deadline; nothing was left behind."""


class LockLost(LockError):
    """The hold is gone (session expired, node deleted) or, during a suspension, no longer certain."""


class LockCancelled(LockError):
    """A blocking acquire was stopped by :meth:`cancel` from another thread; nothing was left behind."""


class ClientClosed(ConnectionClosedError):  # type: ignore[misc]  # kazoo is untyped
    """The KazooClient was stopped or closed, or never started: an acquire or campaign on it is refused
    before any request, and a wait on it ends within about a second (its node deleted or left to the
    ending session; no watch or thread left). A kazoo ``ConnectionClosedError``; the message names the path."""
