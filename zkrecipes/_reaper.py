"""No hold outlives its thread: what a thread still holds when it ends is released, with a warning
naming the path and the thread.

A threaded hold belongs to the thread that acquired it, and only that thread may release it; once it has
ended nobody can, and its node would block every other contender until the session ends. Two things
find such holds: the lock object's next ``acquire``, ``release`` or ``check`` (:func:`reap`, on its own
gate), and a reaper thread that runs while threads hold something and looks once a second
(:data:`TICK`) for holders that have ended. (asyncio holds are released as their task ends:
:mod:`zkrecipes.aio`.)
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Dict, List, Optional, Set, Tuple

from ._gate import Gate
from ._participant import delete_hold

log = logging.getLogger("zkrecipes.lock")

TICK = 1.0  # seconds between the reaper thread's looks

# threads that hold (or held) something, and the gates they hold it on
_held: "Dict[threading.Thread, Set[Gate]]" = {}
_lock = threading.Lock()
_thread: Optional[threading.Thread] = None


def track(owner: threading.Thread, gate: Gate) -> None:
    """``owner`` now holds on ``gate``: release that if it ends holding."""
    global _thread
    gates = _held.get(owner)
    if gates is not None and gate in gates and _thread is not None:
        return  # a re-acquire: already followed (dict and set lookups, no lock: the hot path)
    with _lock:
        gates = _held.get(owner)
        if gates is None:
            gates = _held[owner] = set()  # released gates are dropped within a TICK (reap_ended)
        gates.add(gate)
        if _thread is None or not _thread.is_alive():  # (also after a fork: the child has no reaper)
            _thread = threading.Thread(target=_run, name="zkrecipes-reaper", daemon=True)
            _thread.start()


def reap(gate: Gate) -> None:
    """Release every hold on ``gate`` whose owner is a thread that has ended (no request otherwise)."""
    if not gate.counts:
        return
    for owner in gate.ended_threads():
        left = gate.drop(owner)
        if left is None:
            continue  # another thread reaped it meanwhile
        hold = left.hold
        log.warning("%s: released %s: its owner, thread %r, ended without releasing it",
                    gate.path, getattr(hold, "node", None), owner.name)
        if not left.last:  # other threads of this process share the (read) hold: it stays
            for detach in left.downgraded:
                detach(hold)
            continue
        try:
            delete_hold(hold, None)
        except Exception:
            log.exception("%s: could not release %s (it goes when the session ends)", gate.path, hold.node)
        finally:
            gate.released()
            for detach in left.detach:
                detach(hold)


def reap_ended() -> None:
    """Release what every ended thread still holds, on any gate; forget the gates live threads left."""
    todo: List[Tuple[threading.Thread, List[Gate]]] = []
    with _lock:
        for owner in list(_held):
            gates = list(_held[owner])
            if not owner.is_alive():
                del _held[owner]
                todo.append((owner, gates))
                continue
            for g in gates:
                if owner not in g.counts:  # released since
                    _held[owner].discard(g)
                    if owner in g.counts:  # re-acquired meanwhile: track()'s lock-free look saw g still here
                        _held[owner].add(g)
            if not _held[owner]:
                del _held[owner]
    for _, gates in todo:
        for g in gates:
            reap(g)


def _tick() -> None:
    try:
        reap_ended()
    except Exception:
        log.exception("reaping the holds of ended threads failed")


def _run() -> None:
    global _thread
    stop = threading.Event()  # never set: a plain interruptible sleep
    while True:
        stop.wait(TICK)
        _tick()
        with _lock:
            if not _held:
                if _thread is threading.current_thread():
                    _thread = None
                return


def _forget(*_: object) -> None:  # a forked child: its inherited holds are the parent's, not its own
    global _thread, _lock
    _held.clear()
    _thread, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
