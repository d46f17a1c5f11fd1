"""Metrics hooks: what zkrecipes' core tells an installed :class:`Hooks` object, for every recipe on both
fronts (threads and :mod:`zkrecipes.aio`).

Install one object for the whole process with :func:`install`; :func:`uninstall` removes it. With none
installed each event costs one check of a module global. The adapters :mod:`zkrecipes.metrics.prometheus`
and :mod:`zkrecipes.metrics.opentelemetry` are such objects (optional extras: this module imports neither
library).

Where each hook is called -- never on kazoo's own threads but ``nudge`` (hooks must be quick, must not block
and must be thread-safe; an exception a hook raises is logged and swallowed):

==============  ==========================================================================================
``acquired``    once per ``acquire()`` / ``campaign()`` / lease request, when it returns or raises, on the
                acquiring thread (:mod:`zkrecipes.aio`: the event loop's)
``waiting``     each time an acquire is about to wait, with how many nodes are ahead of ours (from the
                acquire's own listings), on the acquiring thread (event loop)
``released``    once per hold (one granted node), when its node is deleted or its hold dropped: on the
                releasing thread (event loop), or the reaper thread for an owner that ended holding
``state``       on each state change of a lock or election object, where its listeners run: the acquiring
                or releasing thread, the session thread (event loop) for suspended/held/lost
``retry``       before each retry of a request after a transient ZooKeeper error, on the thread that runs
                it: the acquiring or releasing thread (event loop), the session or the reaper thread
``nudge``       when a server sat on a reply and was nudged (:data:`zkrecipes._kazoo.NUDGE_AFTER`), on
                kazoo's I/O thread of that client
==============  ==========================================================================================

Durations are measured on the client's monotonic clock. Install hooks before locks are used: a state
change that began before :func:`install` is seen only from its next change on.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Generator, Optional

log = logging.getLogger("zkrecipes.metrics")

#: The outcomes ``acquired`` reports.
ACQUIRED, TIMEOUT, CANCELLED, ERROR = "acquired", "timeout", "cancelled", "error"
#: The outcomes ``released`` reports: released by its owner, or ended lost.
RELEASED, LOST = "released", "lost"
#: The states a lock (``waiting``/``held``) or election (``candidate``/``leader``) object waits or holds in.
WAITING_STATES = frozenset({"waiting", "candidate"})
HOLDING_STATES = frozenset({"held", "leader", "suspended"})


class Hooks:
    """The hook interface: subclass it and override what you need (every method is a no-op here).

    ``recipe`` is one of ``"fair"``, ``"exclusive"``, ``"read"``, ``"write"``, ``"semaphore"``,
    ``"election"`` (a :class:`~zkrecipes.LeaderLatch` is an election, a
    :class:`~zkrecipes.MultiLock` the locks it takes); ``path`` is the lock's or election's path (not a
    node's)."""

    def acquired(self, recipe: str, path: str, waited_s: float, outcome: str) -> None:
        """An acquire (campaign) ended after ``waited_s`` seconds: ``outcome`` is ``"acquired"``,
        ``"timeout"`` (its deadline passed, or a non-blocking attempt missed), ``"cancelled"``
        (:meth:`~zkrecipes.FairLock.cancel`, Ctrl-C, an asyncio task cancelled) or ``"error"`` (it raised).
        Re-entries and local joins of a hold count too (they wait only for the gate)."""

    def waiting(self, recipe: str, path: str, ahead: int) -> None:
        """An acquire is about to wait with ``ahead`` nodes ahead of ours in the queue."""

    def released(self, recipe: str, path: str, held_s: float, outcome: str) -> None:
        """A hold ended ``held_s`` seconds after it was granted: ``outcome`` is ``"released"``, or
        ``"lost"`` if it was lost first (session expired, node deleted by someone else)."""

    def state(self, recipe: str, path: str, old: str, new: str) -> None:
        """A lock or election object's :attr:`~zkrecipes.FairLock.state` went from ``old`` to ``new``."""

    def retry(self, error: str) -> None:
        """A request is retried after the transient error named ``error`` (``"ConnectionLoss"``,
        ``"OperationTimeoutError"``)."""

    def nudge(self) -> None:
        """A server that sat on a reply was nudged (a ZooKeeper 3.6.0-3.8.0 bug, ZOOKEEPER-4537)."""


#: The installed hooks, or None (read-only: change it with :func:`install` and :func:`uninstall`). The core
#: reads this global once per event.
installed: Optional[Hooks] = None
_install_lock = threading.Lock()


def install(hooks: Hooks) -> None:
    """Send every event of this process to ``hooks`` from now on (replacing any installed before)."""
    global installed
    if not isinstance(hooks, Hooks):
        raise TypeError(f"hooks must be a zkrecipes.metrics.Hooks, got {hooks!r}")
    with _install_lock:
        installed = hooks


def uninstall() -> None:
    """Stop sending events (a no-op if no hooks are installed)."""
    global installed
    with _install_lock:
        installed = None


def call(fn: Callable[..., None], *args: Any) -> None:
    """Call one hook; log (never raise) what it raises."""
    try:
        fn(*args)
    except Exception:
        log.exception("metrics hook %r failed", fn)


def timed_acquire(
    hooks: Hooks, recipe: str, path: str, cancelled: Callable[[], bool], steps: Generator[Any, Any, bool], now: Any
) -> Generator[Any, Any, bool]:
    """``steps`` (an acquire's, returning True/False) with ``hooks.acquired`` told once when they end
    (``cancelled()`` says whether a False is a cancel). Timed by the driver's clock: ``now`` is the engine's
    ``NOW`` step (handed in: this module sits below the engine), asked before and after; steps closed
    half-way (GeneratorExit) may ask nothing more, and read that same clock themselves."""
    start: float = yield now
    outcome, closed = ERROR, False
    try:
        got = yield from steps
        outcome = ACQUIRED if got else CANCELLED if cancelled() else TIMEOUT
        return got
    except BaseException as exc:
        closed = isinstance(exc, GeneratorExit)
        if not isinstance(exc, Exception):  # Ctrl-C, a cancelled asyncio task, a driver closing the steps
            outcome = CANCELLED
        raise
    finally:
        end: float = time.monotonic() if closed else (yield now)
        call(hooks.acquired, recipe, path, end - start, outcome)


def on_ahead(hooks: Hooks, recipe: str, path: str, also: Optional[Callable[[int], None]]) -> Callable[[int], None]:
    """The ``on_ahead(n)`` an acquire is given: ``hooks.waiting``, then ``also`` (see ``on_ahead``)."""

    def tell(n: int) -> None:
        call(hooks.waiting, recipe, path, n)
        if also is not None:
            also(n)

    return tell


def ended(hooks: Hooks, hold: Any, let_go: float) -> None:
    """``hold`` was released or dropped: ``hooks.released`` with its time held, from its grant to ``let_go``
    (the release's start, on the driver's clock: the engine's ``NOW``)."""
    outcome = LOST if hold.state == "lost" else RELEASED
    call(hooks.released, hold.recipe, hold.node.rsplit("/", 1)[0] or "/", let_go - hold.granted_at, outcome)
