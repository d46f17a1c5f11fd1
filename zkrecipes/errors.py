"""Exceptions raised by zkrecipes locks and elections."""


class LockError(Exception):
    """Misuse of a lock (release by a thread that does not hold it, read-to-write upgrade, ...)."""


class LockTimeout(LockError, TimeoutError):
    """``hold(timeout=...)`` or ``with`` could not acquire within its deadline; nothing was left behind."""


class LockLost(LockError):
    """The hold is gone (session expired, node deleted) or, during a suspension, no longer certain."""


class LockCancelled(LockError):
    """A blocking acquire was stopped by :meth:`cancel` from another thread; nothing was left behind."""
