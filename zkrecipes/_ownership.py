"""Who owns a lock object's holds, when it is not the caller: the ``owner="object"`` policy.

By default a hold belongs to the calling thread (task): the lock's own hooks (``_told``, ``_detach``,
``_cleanup``, ``_track``) are called, and an owner that ends holding is released by the reaper. With
``owner="object"`` the lock object owns its holds, and the hold, the gate and the lock call it through its
:class:`ObjectOwner` instead -- the same hooks, reaching the object weakly, so that a lock object dropped
while it holds can be collected (its hold is then released, with a warning: :func:`orphaned`).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Optional

import tenacity

from . import _reaper
from ._follow import cleanup
from ._gate import Gate, LeaveResult
from .session import Hold

log = logging.getLogger("zkrecipes.lock")

OBJECT = "object"  # owner="object": the hold belongs to the lock object (hand-over)


def validate_owner(owner: object, word: str) -> bool:
    """``owner=`` checked (before any request): True for ``"object"``, False for the front's own
    ``word`` (``"thread"`` / ``"task"``) or None (the default, the same)."""
    if owner is None or owner == word:
        return False
    if owner == OBJECT:
        return True
    raise ValueError(f"owner must be {word!r} or {OBJECT!r}, got {owner!r}")


class ObjectOwner:
    """The owner of an object-owned lock's holds (``owner="object"``): the gate keys them by it, and the
    lock calls its hooks through it (``lock._by_object or lock``) -- weakly, so a lock object dropped
    while it holds can be collected; its hold is then released, with a warning (:func:`orphaned`). Not
    reentrant: each acquire of the object waits its turn at the object's gate
    (:func:`zkrecipes._gate.enter`), as threading.Lock's callers do."""

    __slots__ = ("ref", "retry", "gate", "orphan", "__weakref__")

    def __init__(self, obj: Any) -> None:  # a LockCore (not imported: it imports this module)
        self.ref = weakref.ref(obj)
        self.retry: Optional[tenacity.Retrying] = obj.retry
        self.gate: Optional[Gate] = None  # the gate it last held on
        self.orphan: "Optional[weakref.finalize[Any, Any]]" = None  # releases its hold if obj is collected

    def name(self, obj: Any, name: str) -> None:
        """Release what ``obj`` holds when it is garbage-collected, with a warning naming it ``name``; a
        second call renames it."""
        if self.orphan is not None:
            self.orphan.detach()
        self.orphan = weakref.finalize(obj, orphaned, self, f"{name}, garbage-collected while it held")
        self.orphan.atexit = False  # at interpreter exit its node goes with the session (docs/ownership.rst)

    def left(self, gate: Gate, left: LeaveResult) -> LeaveResult:
        """What the object's release leaves: as the object holds no other level, it also stops following a
        hold other owners keep (a shared read)."""
        if not left.last:
            with gate.mutex:
                mine = gate.objects.pop(self, None)
            if mine is not None:
                left = left._replace(detach=left.detach + [mine])
        return left

    def _track(self, me: object, gate: Gate) -> None:
        self.gate = gate  # (no reaper: an object never ends; a collected one is released by orphaned)

    def _told(self, hold: Hold, state: str) -> None:
        obj = self.ref()
        if obj is not None:
            obj._told(hold, state)

    def _detach(self, hold: Hold) -> None:
        obj = self.ref()
        if obj is not None:
            obj._detach(hold)

    def _cleanup(self, hold: Hold) -> None:
        cleanup(hold, self.retry, self._after_told)

    def _after_told(self) -> bool:
        obj = self.ref()
        return True if obj is None else obj._after_told()

    def __repr__(self) -> str:
        return f"<ObjectOwner of {self.ref()!r}>"


def orphaned(owner: ObjectOwner, what: str) -> None:
    """``owner``'s lock object was collected: release what it held (on the reaper thread, with a warning)."""
    gate = owner.gate
    if gate is not None:
        _reaper.hand_over(lambda: _dropped(gate, owner, what))


def _dropped(gate: Gate, owner: ObjectOwner, what: str) -> Optional[_reaper.Job]:
    left = gate.drop(owner)
    return None if left is None else _reaper.Job(gate, left, what, log)
