"""A tooz backend: ``tooz.coordination.get_coordinator("zkrecipes://127.0.0.1:2181", b"member")``.

Installed with ``pip install 'zkrecipes[tooz]'``, found by tooz through the ``tooz.backends`` entry point.
Group membership (groups, members, capabilities, the partitioner) is tooz's own ZooKeeper driver,
unchanged (:class:`ZkrecipesDriver` subclasses it, and takes the same URL and query options); locks and
elections are zkrecipes recipes, in kazoo's node format on tooz's paths, so ``zookeeper://`` and
``zkrecipes://`` processes exclude each other while a fleet moves from one to the other:

* locks (:class:`ZkrecipesLock`): a :class:`~zkrecipes.ReadWriteLock` per name, ``acquire(shared=True)``
  on its read side; ``is_still_owner()`` asks ZooKeeper and raises on connection errors; ``break_()``;
  :attr:`ZkrecipesLock.token`, the fencing token.
* elections: a :class:`~zkrecipes.LeaderLatch` per watched group, campaigning in the background from
  ``watch_elected_as_leader`` on (not only when ``run_watchers()`` polls); a lost leadership is told as
  :class:`LeaderLost` to :meth:`ZkrecipesDriver.watch_lost_leadership` callbacks. As in tooz, callbacks
  run inside ``run_watchers()``.

Importing :mod:`zkrecipes` does not import this module (nor tooz).
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Deque, Dict, List, Optional, Tuple

from kazoo.exceptions import ConnectionLoss, KazooException
from tooz import ToozError, coordination, locking, utils
from tooz.drivers import zookeeper

from . import _engine, _kazoo, _listing, formats, rwlock
from ._drive import Driver, never
from ._engine import SESSION, Read, Steps
from ._lock import on_ahead
from .election import CANDIDATE, LEADER, LeaderElection
from .errors import ClientClosed, LockError, LockLost
from .latch import LeaderLatch
from .revoke import break_steps
from .session import LOST, SUSPENDED

log = logging.getLogger("zkrecipes.tooz")

FORMAT = formats.KAZOO  # tooz's own driver makes kazoo Locks: the same queue, on the same paths


def _break_holders(path: str) -> Steps[bool]:
    """Break every node of ``path`` that holds now (the one listing, :func:`zkrecipes._listing.listing`), each
    by its token with :func:`zkrecipes.revoke.break_steps`; True if one was deleted. A node gone or no longer
    a holder by then is left alone (a node queued meanwhile is never touched)."""
    broke = False
    for listed in (yield from _listing.listing(path, holders=True)):
        try:
            yield from break_steps(path, listed.stat.czxid)
        except LockError:  # gone or changed since we looked: nothing deleted
            continue
        broke = True
    return broke


def _synced() -> Steps[None]:
    """A ``sync`` of the whole tree: our server has then applied every write committed before it. One
    attempt, its error raised (as tooz's own driver does: a disconnected client says so at once)."""
    yield Read("sync", "/", once=True)


def _ours(node: str) -> Steps[bool]:
    """Is ``node`` still ours: the core's one confirm step (:func:`zkrecipes._engine.still_ours`), synced (a
    lagging follower must not say yes). ConnectionLoss at once without a connection (nobody can say)."""
    session = yield SESSION
    if session is None:
        raise ConnectionLoss("not connected")
    return (yield from _engine.still_ours(node, session, synced=True, once=True))


class ZkrecipesLock(locking.Lock):
    """tooz's lock on a zkrecipes :class:`~zkrecipes.ReadWriteLock` (``<namespace>/locks/<name>``).

    Exclusive by default, shared with ``acquire(shared=True)`` (readers share; a queued writer blocks
    readers behind it). Like tooz's ZooKeeper lock: a second acquire of one object while it holds returns
    False (non-blocking) or waits for its release (blocking); any thread may release; a shared acquire of an
    object that holds shared adds a level. Errors from ZooKeeper are raised as :class:`tooz.ToozError`.
    """

    def __init__(self, name: bytes, rw: rwlock.ReadWriteLock) -> None:
        super().__init__(name)
        self._rw = rw
        self._mutex = threading.Lock()  # guards _side and _levels
        self._side: Optional[Any] = None  # the zkrecipes side that holds
        self._levels = 0  # shared acquires of this object not yet released

    @property
    def path(self) -> str:
        """The lock's path in ZooKeeper."""
        return str(self._rw.path)

    def _run(self, steps: Steps[bool]) -> bool:
        """Run ``steps`` on the calling thread (the lock's client, its path named in errors)."""
        return Driver(self._rw.read().client, None, never, None, path=self.path).run(steps)

    @property
    def token(self) -> Optional[int]:
        """The fencing token (the czxid of our node, growing across the ensemble) while held, else None."""
        side = self._side
        return None if side is None else side.token

    @property
    def acquired(self) -> bool:
        """True from a successful acquire until its release (whatever ZooKeeper says meanwhile)."""
        return self._side is not None

    def acquire(
        self, blocking: Any = True, shared: bool = False, timeout: Optional[float] = None
    ) -> bool:
        """Acquire (exclusive, or shared with ``shared=True``); True once held. ``blocking`` may be a
        number of seconds, as in tooz."""
        blocking, timeout = utils.convert_blocking(blocking, timeout)
        if timeout is not None and not blocking:
            blocking, timeout = False, None
        if shared:
            with self._mutex:
                if self._levels:
                    self._levels += 1
                    return True
        # each side is owned by the object: a second acquire waits its turn (or misses) in the side's own
        # acquire, bounded by its timeout; a side's node queues behind the other side's while that holds
        side = self._rw.read() if shared else self._rw.write()
        try:
            ok = side.acquire(blocking, timeout)
        except (KazooException, LockError) as exc:
            utils.raise_with_cause(ToozError, f"acquire of {self.path} failed: {exc}", cause=exc)
            raise  # (not reached)
        if not ok:
            return False
        with self._mutex:
            self._side, self._levels = side, (1 if shared else 0)
        return True

    def release(self) -> bool:
        """Release; True if our node was still ours until then, False if the lock was not held or was lost
        or broken meanwhile (its node is then left alone: it may be someone else's)."""
        with self._mutex:
            side = self._side
            if side is None:
                return False
            if self._levels > 1:
                self._levels -= 1
                return True
            self._side, self._levels = None, 0
        try:
            side.release()  # its delete's reply says whether the node was still ours: else the hold is lost
        except (KazooException, LockError) as exc:
            utils.raise_with_cause(ToozError, f"release of {self.path} failed: {exc}", cause=exc)
            raise  # (not reached)
        return not side.lost.is_set()

    def is_still_owner(self) -> bool:
        """Ask ZooKeeper whether our node is still ours (it exists and belongs to our session): False if not,
        or if the lock is not held or its hold was lost. Raises :class:`tooz.coordination.ToozConnectionError`
        when ZooKeeper cannot say (connection dropped, hold suspended) instead of answering False."""
        side = self._side
        if side is None:
            return False
        try:
            side.check()
        except LockLost as exc:
            if side.lost.is_set() or side.state == LOST:
                return False
            utils.raise_with_cause(coordination.ToozConnectionError, str(exc), cause=exc)
        except LockError:
            return False  # released meanwhile
        node = side.node
        if node is None:
            return False
        try:  # ZooKeeper's answer now, even for a hold that need not be confirmed (check() trusted it)
            return self._run(_ours(node))
        except (KazooException, TimeoutError, ClientClosed) as exc:
            utils.raise_with_cause(
                coordination.ToozConnectionError, f"{self.path}: cannot tell who holds: {exc}", cause=exc
            )
            raise  # (not reached)

    def break_(self) -> bool:
        """Force-release: delete the current holders' nodes with :func:`zkrecipes.break_lock`, by their tokens
        (exactly those: a node queued meanwhile is not touched). True if one was deleted, False if nobody
        held. The holder finds out when it asks (``is_still_owner()``; its ``release()`` returns False)."""
        try:
            return self._run(_break_holders(self.path))
        except (KazooException, LockError) as exc:
            utils.raise_with_cause(ToozError, f"break of {self.path} failed: {exc}", cause=exc)
            raise  # (not reached)


# -- elections -------------------------------------------------------------------------------------------
class LeaderLost(coordination.Event):
    """This member was the leader of ``group_id`` and no longer is (session expired, or suspended past the
    session timeout): another member may lead now. Told to :meth:`ZkrecipesDriver.watch_lost_leadership`
    callbacks by ``run_watchers()``; the member campaigns again by itself."""

    def __init__(self, group_id: bytes, member_id: bytes) -> None:
        self.group_id = group_id
        self.member_id = member_id

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__}: group {self.group_id!r}: -{self.member_id!r}>"


class _Candidacy:
    """One watched group's :class:`~zkrecipes.LeaderLatch` (it campaigns in the background, and again after
    each term) and what tooz is told of it, from the latch's election's states: ``LeaderElected`` once per
    term (a suspension that heals is the same term), ``LeaderLost`` when a told term is lost."""

    def __init__(self, client: Any, path: str, identifier: str, group_id: bytes, member_id: bytes, tell: Any) -> None:
        self._client, self._path, self._identifier = client, path, identifier
        self.group_id, self.member_id = group_id, member_id
        self._tell = tell
        self.settled = threading.Event()  # the current campaign leads, or is queued behind another node
        self.elected = threading.Event()  # the current term was told as LeaderElected
        self._term: Optional[int] = None  # that term's fencing token
        self.latch = self._start()

    def _start(self) -> LeaderLatch:
        latch = LeaderLatch(self._client, self._path, self._identifier, protocol=FORMAT)
        on_ahead(latch.election, self._queued)
        latch.election.add_listener(self._on_state)
        latch.start()
        return latch

    def _queued(self, ahead: int) -> None:
        self.settled.set()

    def _on_state(self, election: Any, state: str) -> None:
        if state == LEADER:
            token = election.token
            if token is not None and token != self._term:  # a new term (not a suspension healed)
                self._term = token
                self._tell(coordination.LeaderElected(self.group_id, self.member_id))
                self.elected.set()
            self.settled.set()
        elif state != SUSPENDED:  # candidate, idle (stood down, closed) or lost: the term is over
            self.elected.clear()
            if state == CANDIDATE:
                self.settled.clear()
            if state == LOST and self._term is not None:
                self._tell(LeaderLost(self.group_id, self.member_id))
            self._term = None

    def stand_down(self) -> bool:
        """Resign now if leader (the next candidate leads) and campaign again at the back of the queue with a
        new latch; False if not leader."""
        if self.latch.election.token is None:
            return False
        self.latch.close()
        self.latch = self._start()
        return True

    def settle(self, within: float) -> None:
        """Wait (up to ``within`` s) until the campaign is leader or queued behind a live node; if the queue
        shows us at its head, until we are leader."""
        if not self.settled.wait(within) or self.elected.is_set():
            return
        head = self.latch.election.leader()
        if head is not None and head.identifier == self._identifier:
            self.elected.wait(within)

    def stop(self) -> None:
        self.latch.close()


class ZkrecipesDriver(zookeeper.KazooDriver):
    """tooz's ZooKeeper driver with zkrecipes' locks and elections (see the module docstring).

    URL: ``zkrecipes://host:port[,host:port...][?option=value&...]`` with tooz's ZooKeeper options
    (``timeout``, ``namespace``, ``use_ssl``, ``ca``, ``certfile``, ``keyfile``, ``randomize_hosts``, ...).
    """

    def __init__(self, member_id: bytes, parsed_url: Any, options: Dict[str, Any]) -> None:
        super().__init__(member_id, parsed_url, options)
        self._candidacies: Dict[bytes, _Candidacy] = {}
        self._observers: Dict[bytes, LeaderElection] = {}
        self._hooks_lost_leader: Dict[bytes, coordination.Hooks] = collections.defaultdict(coordination.Hooks)
        self._told: Deque[Any] = collections.deque()
        self._told_lock = threading.Lock()

    # -- locks ---------------------------------------------------------------------------------------
    def get_lock(self, name: bytes) -> ZkrecipesLock:  # type: ignore[override]  # (not a kazoo Lock)
        path = self._paths_join("/", self._namespace, "locks", name)
        rw = rwlock.ReadWriteLock(self._coord, path, self._member_text(), protocol=FORMAT, owner="object")
        return ZkrecipesLock(name, rw)

    def _member_text(self) -> str:
        return self._member_id.decode("ascii") if isinstance(self._member_id, bytes) else str(self._member_id)

    # -- elections -----------------------------------------------------------------------------------
    def _leader_path(self, group_id: bytes) -> str:
        return self._path_group(group_id) + "/leader"  # tooz's own driver's path: one election for both

    def watch_elected_as_leader(self, group_id: bytes, callback: Any) -> None:
        """Campaign for ``group_id`` from now on (in the background); ``callback(LeaderElected)`` is called by
        ``run_watchers()`` after each election of this member."""
        super().watch_elected_as_leader(group_id, callback)
        if group_id not in self._candidacies:
            self._candidacies[group_id] = _Candidacy(
                self._coord, self._leader_path(group_id), self._member_text(), group_id, self._member_id, self._tell
            )

    def unwatch_elected_as_leader(self, group_id: bytes, callback: Any) -> None:
        """Stop calling ``callback``; after the last one, leave the election (resigning if leader)."""
        super().unwatch_elected_as_leader(group_id, callback)
        if group_id not in self._hooks_elected_leader:
            candidacy = self._candidacies.pop(group_id, None)
            if candidacy is not None:
                candidacy.stop()

    def watch_lost_leadership(self, group_id: bytes, callback: Any) -> None:
        """Call ``callback(LeaderLost)`` (from ``run_watchers()``) each time this member loses the leadership
        of ``group_id`` other than by ``stand_down_group_leader``."""
        self._hooks_lost_leader[group_id].append(callback)

    def unwatch_lost_leadership(self, group_id: bytes, callback: Any) -> None:
        """Stop calling ``callback``; :class:`tooz.coordination.WatchCallbackNotFound` if it was not watching."""
        try:
            self._hooks_lost_leader[group_id].remove(callback)
        except ValueError:
            raise coordination.WatchCallbackNotFound(group_id, callback) from None
        if not self._hooks_lost_leader[group_id]:
            del self._hooks_lost_leader[group_id]

    def _tell(self, event: Any) -> None:
        with self._told_lock:
            self._told.append(event)

    def stand_down_group_leader(self, group_id: bytes) -> bool:
        """Resign if this member leads ``group_id`` (the next candidate leads at once); it campaigns again,
        at the back of the queue, while it still watches the election. False if it did not lead."""
        candidacy = self._candidacies.get(group_id)
        return candidacy is not None and candidacy.stand_down()

    def get_leader(self, group_id: bytes) -> Any:
        """The leader's member id (None if nobody leads), as a tooz async result."""
        election: Optional[LeaderElection] = None
        candidacy = self._candidacies.get(group_id)
        if candidacy is not None:
            election = candidacy.latch.election
        else:
            election = self._observers.get(group_id)
            if election is None:
                election = LeaderElection(self._coord, self._leader_path(group_id), protocol=FORMAT)
                self._observers[group_id] = election
        try:
            head = election.leader()
        except (KazooException, LockError) as exc:
            utils.raise_with_cause(ToozError, f"leader of {group_id!r}: {exc}", cause=exc)
        leader = None if head is None or head.identifier is None else head.identifier.encode("ascii")
        return zookeeper.ZooAsyncResult(None, lambda *args: leader)

    def run_elect_coordinator(self) -> None:
        """Let each campaign settle (leader, or queued behind a live node), so that an election ZooKeeper has
        decided is told by this ``run_watchers()`` call."""
        within = _kazoo.session_timeout(self._coord)
        for candidacy in list(self._candidacies.values()):
            candidacy.settle(within)

    def run_watchers(self, timeout: Optional[float] = None) -> List[Any]:
        """Group membership events (tooz's), then the elections and lost leaderships told since the last
        call, in the order they happened; returns the callbacks' results. Group membership is read after a
        ``sync``, so a change another client has seen committed is seen here too (reads are not linearizable)."""
        Driver(self._coord, None, never, None, path="/").run(_synced())
        results: List[Any] = list(super().run_watchers(timeout))
        while True:
            with self._told_lock:
                if not self._told:
                    break
                event = self._told.popleft()
            hooks = (self._hooks_lost_leader if isinstance(event, LeaderLost) else self._hooks_elected_leader)
            if event.group_id in hooks:
                results.extend(hooks[event.group_id].run(event))
        return results

    def _stop(self) -> None:
        candidacies: List[Tuple[bytes, _Candidacy]] = list(self._candidacies.items())
        self._candidacies.clear()
        self._observers.clear()
        for _, candidacy in candidacies:
            try:
                candidacy.stop()
            except Exception as exc:
                log.warning("leaving the election of %r failed: %s", candidacy.group_id, exc)
        with self._told_lock:
            self._told.clear()
        super()._stop()
