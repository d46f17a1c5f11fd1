"""Exceptions raised by zkrecipes locks and elections."""

from typing import Any, List

from kazoo.exceptions import ConnectionClosedError


class LockError(Exception):
    """Misuse of a lock (release by a thread that does not hold it, read-to-write upgrade, ...)."""


class LockTimeout(LockError, TimeoutError):
    """``hold(timeout=...)`` or ``with`` could not acquire within its deadline; nothing was left behind."""


class LockLost(LockError):
    """The hold is gone (session expired, node deleted) or, during a suspension, no longer certain."""


class LockCancelled(LockError):
    """A blocking acquire was stopped by :meth:`cancel` from another thread; nothing was left behind."""


class ClientClosed(LockError, ConnectionClosedError):  # type: ignore[misc]  # kazoo is untyped
    """The ``KazooClient`` is stopped or closed (or was never started): nothing can be acquired on it. An
    acquire or campaign raises it at once, before any request; one that waits when the client stops raises
    it within about a second. Its node is gone with the session; nothing is left behind. A kazoo
    ``ConnectionClosedError``, as kazoo's own recipes raise."""


class TransactionFailed(Exception):
    """ZooKeeper refused an operation of a fenced transaction (``lock.transaction()``): nothing was
    applied (a ``multi`` is atomic). ``results`` is kazoo's list, one entry per operation added
    (exception instances); ``index``, ``operation`` and ``error`` name the first one that failed."""

    def __init__(self, message: str, results: List[Any], index: int, operation: Any, error: BaseException) -> None:
        super().__init__(message)
        self.results = results
        self.index = index
        self.operation = operation
        self.error = error
