"""The listener list, one implementation for every lock, election and latch on both fronts."""

from __future__ import annotations

import logging
from typing import Any, Callable, List, Sequence, Tuple, TypeVar

F = TypeVar("F", bound=Callable[..., None])


class Listeners(List[F]):
    """Listener functions in the order added (a list: a snapshot is ``list(listeners)``). :meth:`add` and
    :meth:`discard` take the owner's ``lock``, the one its state changes hold while they take a snapshot,
    so a change is told to exactly the listeners present when it happened. :meth:`tell` calls each
    function of a snapshot in order; what one raises is logged on ``log`` and never raised (the others
    are told all the same)."""

    def __init__(self, lock: Any, log: logging.Logger) -> None:
        super().__init__()
        self._lock = lock
        self._log = log

    def add(self, fn: F) -> None:
        """Append ``fn``; TypeError if it is not callable."""
        if not callable(fn):
            raise TypeError(f"listener must be callable, got {fn!r}")
        with self._lock:
            self.append(fn)

    def discard(self, fn: F) -> None:
        """Remove ``fn``; unknown functions are ignored."""
        with self._lock:
            if fn in self:
                self.remove(fn)

    def tell(self, listeners: Sequence[F], args: Tuple[Any, ...], where: str) -> None:
        """Call ``fn(*args)`` for each of ``listeners`` (a snapshot) in order; ``where`` names the owner in
        the log line of a listener that raised."""
        for fn in listeners:
            try:
                fn(*args)
            except Exception:
                self._log.exception("listener %r of %s failed", fn, where)
