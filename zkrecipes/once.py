"""Once per key: a job that many processes start (a cron fire on every host) runs in one of them.

``with lock.once(key) as run:`` takes the lock, then looks for the key's *done marker*: the node
``<path>-done/<key>``, a sibling of the lock path (never inside it: a lock path holds queue nodes only).
``run`` is true when the key is open -- no marker, or one older than ``keep`` -- and :meth:`Once.done`
writes the marker, fenced by the hold (:meth:`~zkrecipes.FairLock.transaction`): a holder that lost its
hold cannot mark a key done. Whoever takes the lock next sees the marker and skips, so racing processes
run the job once, and one that arrives after the run finished skips too; a run that failed or was cut off
never wrote the marker, so the next one runs.

Markers clean up after themselves without a sweeper: on ZooKeeper >= 3.5.3 started with
``-Dzookeeper.extendedTypesEnabled=true`` a marker is a TTL node (the server deletes it ``keep`` after it
was written, at its next container check), and ``<path>-done`` is a container node (deleted once empty).
A server without TTL nodes answers UnimplementedError; then (remembered per client) markers are
persistent nodes, and each run that writes one also deletes the markers of ``<path>-done`` older than the
``keep`` each was written with. Either way a marker counts only while younger than the ``keep`` of the
one looking, judged on the server's clock (its ctime against that of our lock node), so ``keep`` means the
same on both kinds of server.

The look and the marking are written once, as engine steps (:class:`OnceCore`: reads retried by the
lock's policy, parents made by :func:`~zkrecipes._engine.make_parents`, markers read pipelined, fenced
multis sent as :class:`~zkrecipes._engine.Commit` after the lock's own check), run by a driver: on the
calling thread here (:class:`Once`), on the event loop by :class:`zkrecipes.aio.once.Once`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
import weakref
from types import TracebackType
from typing import Any, Callable, ContextManager, Generic, List, Optional, Protocol, Sequence, Type, TypeVar

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, UnimplementedError
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from . import _kazoo_ops, naming
from ._drive import Driver, never
from ._engine import Commit, DeadlinePassed, Read, ReadAll, Steps, make_parents
from ._fence import Fenced
from .errors import LockError, LockTimeout, TransactionFailed
from .retry import TRANSIENT

__all__ = ["DEFAULT_KEEP", "MAX_KEEP", "Once", "marker_parent", "parse_keep", "validate_keep"]


log = logging.getLogger("zkrecipes.once")

DEFAULT_KEEP = 86400.0  # seconds a done marker counts: a day
MAX_KEEP = 366 * 86400.0  # a year and a day: any longer is a typo
SUFFIX = "-done"  # markers of lock path P live under P + SUFFIX
SWEEP_BATCH = 100  # stale markers deleted per fenced multi (far below ZooKeeper's request size limit)
NOWAIT_LOOK = 30.0  # timeout=0 (a non-blocking acquire): the look's bound, as _lock.NOWAIT_OPS_TIMEOUT
READ_BATCH = 1000  # markers read per pipeline in a sweep (bounds the requests in flight)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?)([smhd]?)")

_no_ttl: "weakref.WeakSet[KazooClient]" = weakref.WeakSet()  # clients whose server refused a TTL node


def marker_parent(path: str) -> str:
    """Where the done markers of lock path ``path`` live: ``path + "-done"``."""
    return naming.validate_path(naming.validate_path(path) + SUFFIX)


def validate_keep(keep: object) -> float:
    """Return ``keep`` (seconds, > 0, at most :data:`MAX_KEEP`) as a float, else raise naming it."""
    if isinstance(keep, bool) or not isinstance(keep, (int, float)):
        raise TypeError(f"keep must be a number of seconds, got {keep!r}")
    if math.isnan(keep) or not 0 < keep <= MAX_KEEP:
        raise ValueError(f"keep must be > 0 and at most {MAX_KEEP:.0f} seconds (366 days), got {keep!r}")
    return float(keep)


def parse_keep(text: str) -> float:
    """Seconds in a duration written as a number with an optional unit: ``90``, ``90s``, ``30m``, ``12h``,
    ``1d``, ``1.5h``; ValueError naming ``text`` otherwise."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a duration (a number with an optional unit s, m, h or d, e.g. 1d): {text!r}")
    unit = m.group(2)
    keep = float(m.group(1)) * _UNITS[unit]
    if not 0 < keep <= MAX_KEEP:  # the limit in the unit typed
        limit = f"{MAX_KEEP / _UNITS[unit]:.0f}{unit}" if unit not in ("", "s") else f"{MAX_KEEP:.0f} seconds"
        raise ValueError(f"keep must be > 0 and at most {limit} (366 days), got {text!r}")
    return validate_keep(keep)


def validate_key(path: str, key: object) -> str:
    """Return the marker path of ``key`` for lock path ``path``; raise naming ``key`` if it is not a
    label (a non-empty str without ``/`` or control characters), is ``.`` or ``..``, or is too long."""
    naming.validate_label("once key", key)
    try:
        return naming.validate_path(f"{marker_parent(path)}/{key}")
    except ValueError as exc:
        raise ValueError(f"once key {key!r} does not make a usable node name: {exc}") from None


class Holder(Protocol):
    """What :class:`OnceCore` uses of a lock, on either front (every zkrecipes lock has it)."""

    client: KazooClient
    path: str
    host: str
    retry: Optional[tenacity.Retrying]

    @property
    def node(self) -> Optional[str]: ...

    def transaction(self) -> Fenced: ...


class ThreadedHolder(Holder, Protocol):
    """What :class:`Once` uses of a threaded lock besides: its ``with lock.hold(timeout):``."""

    def hold(self, timeout: Optional[float] = None) -> ContextManager[Any]: ...


L = TypeVar("L", bound=Holder)


class _Marking(Fenced):
    """A multi fenced by the hold, committed as engine steps (either front): refused if the hold was
    released, then the lock's ``check`` steps (LockLost if the hold is lost or in doubt), then sent once."""

    def steps(self, check: Callable[[], Steps[None]]) -> Steps[List[Any]]:
        self._refuse_released()
        yield from check()
        results: List[Any] = yield Commit(self._send, self._results)
        return results


class OnceCore(Generic[L]):
    """One key's turn under a lock, for both fronts: checked input, the state, and the look and the
    marking as engine steps. A front (:class:`Once`, :class:`zkrecipes.aio.once.Once`) runs them with its
    driver and the lock's retry policy; ``check``, which ``lock.once()`` passes, is the lock's steps that
    raise unless the caller's hold is certain (run before each fenced multi).

    ``key`` and ``keep`` are checked when it is made (ValueError or TypeError naming them, no request).
    A lock whose hold is shared -- a read lock, a semaphore -- is refused (LockError): two holders could
    both find the key open.
    """

    def __init__(self, lock: L, key: str, keep: float = DEFAULT_KEEP, timeout: Optional[float] = None,
                 *, acl: Sequence[ACL] = (), shared: bool = False,
                 check: Optional[Callable[[], Steps[None]]] = None) -> None:
        self.marker = validate_key(lock.path, key)
        self.key = key
        self.keep = validate_keep(keep)
        self.timeout = naming.validate_timeout(timeout)
        if shared:
            raise LockError(f"{lock.path}: once() needs a lock one process holds at a time, not {type(lock).__name__}")
        if check is None:
            raise TypeError(f"{type(self).__name__} is made by lock.once(key, keep=..., timeout=...)")
        self.lock = lock
        self.acl = list(acl) or list(OPEN_ACL_UNSAFE)  # the lock's: for the markers and their parent
        self.open: Optional[bool] = None  # unknown until looked at
        self._now_ms: Optional[int] = None
        self._held: Any = None  # the lock's hold() while ``with`` (``async with``) holds it
        self._check = check

    def __bool__(self) -> bool:
        if self.open is None:
            raise LockError(f"{self.marker}: not looked at yet (hold the lock, then call look())")
        return self.open

    def _deadline(self) -> Optional[float]:
        """The one deadline of ``with``: its ``timeout`` covers acquiring the hold and the look (``0``, a
        non-blocking acquire, bounds the look as that acquire's round trips are)."""
        if self.timeout is None:
            return None
        return time.monotonic() + (self.timeout or NOWAIT_LOOK)

    def _look(self) -> Steps[bool]:
        """Whether the key is open (a marker older than ``keep`` deleted, fenced); LockTimeout past the
        run's deadline."""
        try:
            yield from self._check()
            stat = yield Read("exists", self.marker)
            if stat is not None and (yield from self._stale(stat.ctime)):
                tx = self._fenced()
                tx.delete(self.marker)
                try:
                    yield from tx.steps(self._check)
                    log.info("%s: older than %g s, deleted", self.marker, self.keep)
                except TransactionFailed as exc:
                    if not isinstance(exc.error, NoNodeError):  # gone already: the server's TTL got there first
                        raise
                stat = None
        except DeadlinePassed:
            raise LockTimeout(f"could not acquire {self.lock.path} and look at {self.marker} within "
                              f"{self.timeout} s") from None
        self.open = stat is None
        return self.open

    def _done(self) -> Steps[None]:
        """Write the marker (TTL, or persistent and then a sweep), fenced; parents made on NoNode."""
        if not self:
            raise LockError(f"{self.marker}: the key was done already; nothing to mark")
        client = self.lock.client
        data = json.dumps({"host": self.lock.host, "pid": os.getpid(), "keep": self.keep},
                          separators=(",", ":")).encode()
        for _ in range(3):  # a missing parent: create it, then once more (a reaper may race us once)
            tx, ttl = self._fenced(), client not in _no_ttl
            if ttl:
                _kazoo_ops.add_create_ttl(tx, self.marker, data, self.acl, int(self.keep * 1000))
            else:
                tx.create(self.marker, data, self.acl)
            try:
                yield from tx.steps(self._check)
            except TransactionFailed as exc:
                if isinstance(exc.error, UnimplementedError) and ttl:
                    log.info("server has no TTL nodes (zookeeper.extendedTypesEnabled): persistent markers")
                    _no_ttl.add(client)
                elif isinstance(exc.error, NoNodeError):
                    yield from make_parents(marker_parent(self.lock.path), self.acl, True)
                elif isinstance(exc.error, NodeExistsError):  # ours, from a commit whose reply was lost
                    break
                else:
                    raise
                continue
            if not ttl:
                yield from self._sweep()
            break
        else:
            raise LockError(f"{self.marker}: could not write the done marker (its parent kept vanishing)")
        self.open = False

    def _fenced(self) -> _Marking:
        """A transaction fenced by the caller's hold (LockError if it holds nothing); its ``steps`` commit
        it: kazoo's results, or nothing applied and LockLost (the hold lost or in doubt) or
        TransactionFailed (an operation refused)."""
        return _Marking.joined([self.lock.transaction()])

    def _stale(self, ctime_ms: int, keep: Optional[float] = None) -> Steps[bool]:
        """Whether a marker written at ``ctime_ms`` (server clock) is older than ``keep`` (default ours):
        compared with our lock node's ctime, a server time no later than now (read once)."""
        if self._now_ms is None:
            node = self.lock.node
            stat = (yield Read("exists", node)) if node else None
            if stat is None:
                yield from self._check()  # raises: our node is gone
                raise LockError(f"{self.lock.path}: our node {node} is gone")
            self._now_ms = stat.ctime
        return ctime_ms + (self.keep if keep is None else keep) * 1000 <= self._now_ms

    def _sweep(self) -> Steps[None]:
        """Without TTL nodes: delete the markers of this lock path older than the keep each was written with
        (as a TTL would), ours for a marker that does not say (fenced). Markers are read pipelined."""
        parent = marker_parent(self.lock.path)
        paths = [f"{parent}/{name}" for name in (yield Read("get_children", parent))]
        stale: List[str] = []
        for i in range(0, len(paths), READ_BATCH):
            chunk = paths[i:i + READ_BATCH]
            for path, reply in zip(chunk, (yield ReadAll(chunk))):
                if isinstance(reply, TRANSIENT):  # a pipelined read is not retried: this one alone, retried
                    try:
                        reply = yield Read("get", path)
                    except NoNodeError as gone:
                        reply = gone
                if isinstance(reply, NoNodeError):
                    continue
                if isinstance(reply, BaseException):
                    raise reply
                data, stat = reply
                keep = naming.read_data(data).get("keep")
                keep = keep if isinstance(keep, (int, float)) and not isinstance(keep, bool) else None
                if stat.numChildren == 0 and (yield from self._stale(stat.ctime, keep)):
                    stale.append(path)
        for i in range(0, len(stale), SWEEP_BATCH):
            tx = self._fenced()
            for path in stale[i:i + SWEEP_BATCH]:
                tx.delete(path)
            try:
                yield from tx.steps(self._check)
            except TransactionFailed as exc:  # one went meanwhile (deleted by hand): the next run sweeps again
                log.info("%s: sweep of stale markers not applied (%r)", parent, exc.error)


class Once(OnceCore[ThreadedHolder]):
    """One key's turn under a lock, made by ``lock.once(key, keep=..., timeout=...)`` (any threaded lock
    one process holds at a time: :meth:`zkrecipes.FairLock.once`). ``bool(run)`` is whether the key is
    open (the job is to run); :meth:`done` marks it done.

    As a context manager it holds the lock, looks, and releases on exit. ``timeout`` is one deadline for
    both the acquire and the look (LockTimeout once it passed, the lock released; None: no deadline);
    :meth:`done`, which comes after the job, is not bounded by it. Every read is retried on transient
    errors by the lock's retry policy (``retry=``).
    Without ``with``, hold the lock yourself and call :meth:`look` (what the CLI does).

    ``key`` and ``keep`` are checked when it is made (ValueError or TypeError naming them, no request).
    A lock whose hold is shared -- a read lock, a semaphore -- is refused (LockError): two holders could
    both find the key open.
    """

    def __enter__(self) -> "Once":
        deadline = self._deadline()  # (before the acquire: it covers both)
        held = self.lock.hold(self.timeout)
        held.__enter__()
        try:
            self._drive(self._look(), deadline)
        except BaseException:
            held.__exit__(None, None, None)
            raise
        self._held = held
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(et, ev, tb)

    def look(self) -> bool:
        """With the lock held: whether the key is open. A marker older than ``keep`` is deleted (fenced) and
        the key is open. Raises LockLost if the hold is lost or in doubt, LockError if not held."""
        opened: bool = self._drive(self._look())
        return opened

    def done(self) -> None:
        """Mark the key done (the job succeeded): write its marker, fenced by the hold, so nothing later
        runs it within ``keep``. Raises :class:`~zkrecipes.LockLost` with nothing written if the hold is
        lost or in doubt (the key stays open), LockError if the key was not open."""
        self._drive(self._done())

    def _drive(self, steps: Steps[Any], deadline: Optional[float] = None) -> Any:
        """Run ``steps`` on this thread with the lock's retry policy, until ``deadline``."""
        lock = self.lock
        return Driver(lock.client, deadline, never, lock.retry, path=lock.path).run(steps)
