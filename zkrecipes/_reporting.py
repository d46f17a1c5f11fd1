"""What a lock object says about its caller's hold, read from the local gate (no request): the public
``state``, ``is_held``, ``token`` and ``node``, the hold a transaction is fenced by, and the error for a
caller that holds nothing."""

from __future__ import annotations

from typing import Any, Hashable, Literal, Optional, Protocol

from .errors import LockError
from .session import HELD, LOST, Hold

LockState = Literal["idle", "waiting", "held", "suspended", "lost"]
Owner = Hashable  # a thread, an asyncio task, or an object-owned lock's ObjectOwner


class _Lock(Protocol):  # what Reports uses of the lock it is mixed into (zkrecipes._lock.LockCore)
    path: str
    _title: str
    _owner_word: str
    _kind: str
    _state: str
    _by_object: Any

    def _gate_for(self, me: Optional[Owner]) -> Any: ...
    def _current_owner(self) -> Optional[Owner]: ...
    def _my_hold(self, me: Optional[Owner]) -> Optional[Hold]: ...
    def _not_held(self, released: bool = True) -> LockError: ...


class Reports:
    """The calling owner's view of a lock object (mixed into :class:`~zkrecipes._lock.LockCore`)."""

    def _not_held(self: _Lock, released: bool = True) -> LockError:
        """The LockError for a release (``released``), check or transaction by a caller that holds nothing
        here, naming the object the caller used (for every recipe and both fronts)."""
        if self._by_object is not None:
            return LockError(f"{self.path}: this {self._title} (owner='object') holds nothing: released "
                             "already, or not acquired")
        if released:
            return LockError(f"{self.path}: {self._title} released by a caller that does not hold it")
        return LockError(f"{self.path}: {self._title} not held by the calling {self._owner_word}")

    def _my_hold(self: _Lock, me: Optional[Owner]) -> Optional[Hold]:
        if me is None:
            return None
        hold: Optional[Hold] = self._gate_for(me).held_by(me, self._kind)
        return hold

    def _fence_hold(self: _Lock) -> Hold:
        hold = self._my_hold(self._current_owner())
        if hold is None:
            raise self._not_held(released=False)
        return hold

    @property
    def state(self: _Lock) -> LockState:
        """``"idle"``, ``"waiting"``, ``"held"``, ``"suspended"`` or ``"lost"``."""
        return self._state  # type: ignore[return-value]

    @property
    def is_held(self: _Lock) -> bool:
        """True only for the owner (thread; task in :mod:`zkrecipes.aio`) that holds the lock while the hold
        is certain: not suspended or lost, and confirmed by ZooKeeper since the process last stood still
        (GC pause, SIGSTOP)."""
        hold = self._my_hold(self._current_owner())
        return hold is not None and hold.state == HELD and not hold.stale()

    @property
    def token(self: _Lock) -> Optional[int]:
        """The fencing token (the czxid of our node, growing across the whole ensemble) while held, else None."""
        gate = self._gate_for(self._current_owner())
        hold = gate.hold
        mine = hold is not None and hold.state != LOST and (self._by_object or self) in gate.objects
        return hold.token if mine else None

    @property
    def node(self: _Lock) -> Optional[str]:
        """Full path of our node while held, else None."""
        gate = self._gate_for(self._current_owner())
        hold = gate.hold
        return hold.node if hold is not None and (self._by_object or self) in gate.objects else None
