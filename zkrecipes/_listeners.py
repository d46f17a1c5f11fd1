"""A listener list: functions told of every change, added and removed from any thread.

The one list behind ``add_listener`` / ``remove_listener`` of every lock and election (and what a
composition that tells its own listeners uses): added and removed under the owner's lock, called from a
copy in the order added, a listener's failure logged, never passed to the others or the caller.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable, List, Optional

log = logging.getLogger("zkrecipes.lock")

Listener = Callable[..., None]


class Listeners(List[Listener]):
    """The listeners, in the order added (a list: empty is falsy, read without a call). ``lock`` guards
    changes, and may be the owner's own lock, so a change and the copy of who to tell are taken together."""

    __slots__ = ("lock", "log")

    def __init__(self, lock: Optional[Any] = None, log_to: Optional[logging.Logger] = None) -> None:
        super().__init__()
        self.lock = threading.Lock() if lock is None else lock
        self.log = log if log_to is None else log_to  # the owner's logger: a latch's failures say "latch"

    def add(self, fn: Listener) -> None:
        """Tell ``fn`` from now on; TypeError (before anything changes) if it is not callable."""
        if not callable(fn):
            raise TypeError(f"listener must be callable, got {fn!r}")
        with self.lock:
            self.append(fn)

    def discard(self, fn: Listener) -> None:
        """Stop telling ``fn``; unknown functions are ignored."""
        with self.lock:
            if fn in self:
                self.remove(fn)

    def tell(self, *args: Any, to: Optional[Iterable[Listener]] = None, about: object = "") -> None:
        """Call each listener (or each of ``to``, a copy taken earlier) with ``args``; a failure is logged
        (naming ``about``) and the others are still told."""
        for fn in list(self) if to is None else to:
            try:
                fn(*args)
            except Exception:
                self.log.exception("listener %r of %s failed", fn, about)
