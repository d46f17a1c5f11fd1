"""``with x:`` and ``with x.hold(timeout):`` of a threaded lock and of a MultiLock, written once."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional, TypeVar

from . import naming

H = TypeVar("H", bound="Holding")


class Holding:
    """``with x:`` and ``with x.hold(timeout):`` over ``_acquire_or_raise`` and ``release`` (a threaded lock,
    a MultiLock)."""

    _acquire_or_raise: Callable[[Optional[float]], None]  # raises LockTimeout (LockCancelled) when not held
    release: Callable[[], None]

    def __enter__(self: H) -> H:
        self._acquire_or_raise(None)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextlib.contextmanager
    def hold(self: H, timeout: Optional[float] = None) -> Iterator[H]:
        """``with lock.hold(timeout=5):`` -- like ``with lock`` but raises LockTimeout when not held within
        ``timeout`` (nothing is then held)."""
        self._acquire_or_raise(naming.validate_timeout(timeout))
        try:
            yield self
        finally:
            self.release()
