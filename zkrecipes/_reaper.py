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
import weakref
from typing import Dict, List, Optional, Tuple

from . import _gate
from ._drive import Driver, never
from ._gate import Gate

log = logging.getLogger("zkrecipes.lock")

TICK = 1.0  # seconds between the reaper thread's looks

# threads that hold (or held) something, and the gates they hold it on (weakly: a gate nobody uses goes
# at once, as the per-key benchmark checks), keyed by id so that a re-acquire finds its entry cheaply
_held: "Dict[threading.Thread, Dict[int, weakref.ref[Gate]]]" = {}
_lock = threading.Lock()
_thread: Optional[threading.Thread] = None


def track(owner: threading.Thread, gate: Gate) -> None:
    """``owner`` now holds on ``gate``: release that if it ends holding."""
    global _thread
    gates = _held.get(owner)
    if gates is not None and _thread is not None:
        ref = gates.get(id(gate))
        if ref is not None and ref() is gate:
            return  # a re-acquire: already followed (two dict lookups, no lock: the hot path)
    with _lock:
        gates = _held.get(owner)
        if gates is None:
            gates = _held[owner] = {}  # released gates are dropped within a TICK (reap_ended)
        gates[id(gate)] = weakref.ref(gate)
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
        try:  # (other threads of this process may share the (read) hold: then it stays)
            Driver(hold.client, None, never, None).run(_gate.finish_leave(gate, left))
        except Exception:
            log.exception("%s: could not release %s (it goes when the session ends)", gate.path, hold.node)


def reap_ended() -> None:
    """Release what every ended thread still holds, on any gate; forget the gates live threads left."""
    todo: List[Tuple[threading.Thread, List[Gate]]] = []
    with _lock:
        for owner in list(_held):
            gates = _held[owner]
            live = [(key, g) for key, g in ((key, ref()) for key, ref in list(gates.items())) if g is not None]
            if not owner.is_alive():
                del _held[owner]
                todo.append((owner, [g for _, g in live]))
                continue
            for key in [key for key, ref in gates.items() if ref() is None]:
                del gates[key]
            for key, g in live:
                if owner not in g.counts:  # released since
                    del gates[key]
                    if owner in g.counts:  # re-acquired meanwhile: track()'s lock-free look saw g still here
                        gates[key] = weakref.ref(g)
            if not gates:
                del _held[owner]
    for _, ended in todo:
        for g in ended:
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
