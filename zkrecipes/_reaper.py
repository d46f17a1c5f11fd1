"""No hold outlives its owner: what a thread or task still holds when it ends is released, with a warning
naming the path and the owner, logged once the node is gone.

A threaded hold belongs to the thread that acquired it, and only that thread may release it; once it has
ended nobody can, and its node would block every other contender until the session ends. Two things
find such holds: the lock object's next ``acquire``, ``release`` or ``check`` (:func:`reap`, on its own
gate), and a reaper thread that runs while threads hold something and looks once a second
(:data:`TICK`) for holders that have ended. An asyncio task's hold is dropped as its task ends
(:mod:`zkrecipes.aio`) and handed over (:func:`hand_over`): the reaper thread deletes its node at once,
with the threaded driver, so the release needs no event loop (the task's may be closing or closed).

At interpreter exit (after the non-daemon threads have ended, before finalisation) what ended owners
still hold -- the main thread's holds included -- is released, waiting at most :data:`EXIT_WAIT`
seconds (where no thread may start at exit, Python >= 3.12: on the exiting thread, connected clients
only): the socket would otherwise close without a closeSession and the nodes stay until the session
expires. A daemon thread still running then keeps its hold (it may be inside its critical section):
warned, its node goes with the session.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import weakref
from typing import Callable, Deque, Dict, Iterable, List, NamedTuple, Optional, Tuple, Union

from . import _gate, _kazoo
from ._drive import Driver, never
from ._gate import Gate, LeaveResult
from .session import LOST

log = logging.getLogger("zkrecipes.lock")

TICK = 1.0  # seconds between the reaper thread's looks
LOOK_EVERY = 0.02  # seconds between a gate's looks from acquire, release and check (each looks at every owner)
EXIT_WAIT = 2.0  # seconds the interpreter's exit waits, at most, for the releases of ended owners' holds


class Job(NamedTuple):
    """The release of what an ended owner held: ``left`` from :meth:`Gate.drop <zkrecipes._gate.Gate.drop>`."""

    gate: Gate
    left: LeaveResult
    owner_name: str  # who ended, as the log names it: "thread 'name'", "task <Task ...>"
    logger: logging.Logger


# threads that hold (or held) something, and the gates they hold it on (weakly: a gate nobody uses goes
# at once, as the per-key benchmark checks), keyed by id so that a re-acquire finds its entry cheaply
_held: "Dict[threading.Thread, Dict[int, weakref.ref[Gate]]]" = {}
# handed over, not yet done (the reaper thread does them); a callable is a job found on the reaper thread
_jobs: "Deque[Union[Job, Callable[[], Optional[Job]]]]" = collections.deque()
_lock = threading.RLock()  # (reentrant: a lock object collected while this thread holds it hands a job over)
_working = threading.Lock()  # held while releasing: the exit waits for a release under way
_wake = threading.Event()  # a job was handed over
_thread: Optional[threading.Thread] = None
_exit_sources: List[Callable[[], Iterable[Job]]] = []  # more ended owners to release at exit (aio's tasks)
_exit_hooked = False


def track(owner: threading.Thread, gate: Gate) -> None:
    """``owner`` now holds on ``gate``: release that if it ends holding."""
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
        _start()


def hand_over(job: "Union[Job, Callable[[], Optional[Job]]]") -> None:
    """Release ``job`` on the reaper thread, at once (any thread; its owner has ended). A callable is
    called there first, for the job (None: nothing to release): what a finalizer hands over, as it
    may run in the middle of anything on its thread."""
    with _lock:
        _jobs.append(job)
        _start()
    _wake.set()


def also_at_exit(source: Callable[[], Iterable[Job]]) -> None:
    """At interpreter exit, also release the jobs ``source()`` returns (holds whose owner cannot run again)."""
    _exit_sources.append(source)


def hook_exit() -> None:
    """Release at interpreter exit what ended owners hold (call when something is first held)."""
    if not _exit_hooked:
        with _lock:
            _hook_exit()


def _start() -> None:  # with _lock held
    global _thread
    _hook_exit()
    if _thread is None or not _thread.is_alive():  # (also after a fork: the child has no reaper)
        _thread = threading.Thread(target=_run, name="zkrecipes-reaper", daemon=True)
        _thread.start()


def _hook_exit() -> None:  # with _lock held
    """Registered once, when something is first held: after the clients started then, so it runs before
    kazoo's own exit hooks (atexit runs them last registered first)."""
    global _exit_hooked
    if not _exit_hooked:
        _exit_hooked = True
        atexit.register(_at_exit)


def release(job: Job) -> None:
    """Finish ``job`` on the calling thread with the threaded driver; log it once the node is gone."""
    gate, left, owner_name, logger = job
    hold = left.hold
    stopped = _kazoo.is_stopped(hold.client)  # its session was closed with it (or expires): nothing to send
    if stopped:
        hold.mark_lost()
    try:  # (other owners of this process may share the (read) hold: then it stays)
        Driver(hold.client, None, never, None).run(_gate.finish_leave(gate, left))
    except Exception:
        logger.exception("%s: could not release %s of %s, which ended without releasing it (it goes when "
                         "the session ends)", gate.path, hold.node, owner_name)
        return
    if stopped:  # the client's stop() ended the hold: nothing outlived its owner
        logger.debug("%s: forgot %s of %s: its client was stopped", gate.path, hold.node, owner_name)
    elif not left.last:
        logger.warning("%s: released %s for its owner, %s, which ended without releasing it (other owners "
                       "of this process still hold it)", gate.path, hold.node, owner_name)
    elif hold.state == LOST:
        logger.warning("%s: %s was lost (its session ended); its owner, %s, ended without releasing it",
                       gate.path, hold.node, owner_name)
    else:
        logger.warning("%s: released %s: its owner, %s, ended without releasing it", gate.path, hold.node, owner_name)


def reap(gate: Gate, do: Callable[[Job], None] = release) -> None:
    """Release (``do``) every hold on ``gate`` whose owner is a thread that has ended (no request otherwise)."""
    if not gate.counts:
        return
    for owner in gate.ended_threads():
        left = gate.drop(owner)
        if left is not None:  # (None: another thread reaped it meanwhile)
            do(Job(gate, left, f"thread {owner.name!r}", log))


def reap_ended(do: Callable[[Job], None] = release) -> None:
    """Release (``do``) what every ended thread still holds, on any gate; forget the gates live threads left."""
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
            reap(g, do)


def _do_jobs() -> None:
    while True:
        with _lock:
            if not _jobs:
                return
            todo = _jobs.popleft()
        job = todo if isinstance(todo, Job) else todo()
        if job is not None:
            release(job)


def _tick() -> None:
    try:
        reap_ended()
    except Exception:
        log.exception("reaping the holds of ended threads failed")


def _run() -> None:
    global _thread
    while True:
        _wake.wait(TICK)
        _wake.clear()
        with _working:
            _do_jobs()
            _tick()
        with _lock:
            if not _held and not _jobs:
                if _thread is threading.current_thread():
                    _thread = None
                return


def _at_exit() -> None:
    """Release what ended owners hold (the main thread has ended by now), waiting :data:`EXIT_WAIT` at most."""
    if not _working.acquire(timeout=EXIT_WAIT):  # a release under way on the reaper thread goes first
        log.warning("a release still under way after %s s at exit: the rest goes with the sessions", EXIT_WAIT)
        return
    try:
        jobs = _exit_jobs()
        if jobs:
            try:
                worker = threading.Thread(target=_release_all, args=(jobs,), name="zkrecipes-exit", daemon=True)
                worker.start()
            except RuntimeError:  # Python >= 3.12 starts no thread at exit: here, connected clients only
                _release_all([job for job in jobs if _kazoo.session_id(job.left.hold.client) is not None])
            else:
                worker.join(EXIT_WAIT)
                if worker.is_alive():
                    log.warning("holds of ended owners not all released within %s s at exit: the rest goes "
                                "with the sessions", EXIT_WAIT)
    finally:
        _working.release()
    with _lock:
        alive = [(owner, g) for owner, gates in _held.items() for ref in gates.values()
                 for g in [ref()] if g is not None and owner in g.counts]
    for owner, g in alive:
        log.warning("%s: %s is still held by daemon thread %r at exit: its node goes when the session ends",
                    g.path, getattr(g.hold, "node", None), owner.name)


def _exit_jobs() -> List[Job]:
    """Everything ended owners still hold: handed over, found by the exit sources, and ended threads'."""
    jobs: List[Job] = []
    for source in list(_exit_sources):
        try:
            jobs.extend(source())
        except Exception:
            log.exception("listing the holds of ended owners at exit failed")
    with _lock:
        todo = list(_jobs)
        _jobs.clear()
    jobs.extend(j for j in (t if isinstance(t, Job) else t() for t in todo) if j is not None)
    reap_ended(jobs.append)
    return jobs


def _release_all(jobs: List[Job]) -> None:
    for job in jobs:
        release(job)


def _forget(*_: object) -> None:  # a forked child: its inherited holds are the parent's, not its own
    global _thread, _lock, _working, _wake
    _held.clear()
    _jobs.clear()
    _thread, _lock, _working, _wake = None, threading.RLock(), threading.Lock(), threading.Event()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
