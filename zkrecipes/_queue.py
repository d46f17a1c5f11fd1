"""The queue engine: the one waiting loop behind every recipe.

``Queue.acquire`` enqueues a protected ephemeral-sequential node (create and get_children sent back to
back, so an uncontended acquire costs one write latency), asks the recipe's *wait-rule* which node ahead
blocks it, watches only that node, and waits with one deadline over the whole acquire. The listing is
kept: nodes only ever join *behind* us, so when a watched node is deleted it is dropped from the listing
and the rule is asked again without another read. On every exit other than success -- deadline, cancel,
any exception, KeyboardInterrupt -- our node is deleted and our watch removed.

A wait-rule is ``rule(ahead, me) -> blocker | None`` over :class:`~zkrecipes.naming.QueueNode` lists in
queue order; it must be monotone (removing nodes ahead never creates a blocker).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Callable, NamedTuple, Optional

import kazoo.exceptions
import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.serialization import Create2, GetChildren, int_struct, write_string
from kazoo.protocol.states import EventType, KeeperState

from . import naming, retry
from .errors import LockError
from .naming import QueueNode
from .session import SessionWatcher, session_id

log = logging.getLogger("zkrecipes.queue")

Rule = Callable[[list, QueueNode], Optional[QueueNode]]


class DeadlinePassed(Exception):
    """Internal: the acquire's deadline passed."""


class _SessionGone(Exception):
    """Internal: the session that owned a node has ended."""


class Cancelled(Exception):
    """Internal: the acquire was cancelled."""


# -- wire requests kazoo does not expose ------------------------------------------------------------
class _CreateContainer(Create2):
    type = 19  # OpCode.createContainer (ZooKeeper >= 3.5); reply is path + stat like create2


class _RemoveWatches(NamedTuple):
    path: str
    watcher_type: int  # 1 children, 2 data, 3 any
    type = 18  # OpCode.removeWatches (ZooKeeper >= 3.5)

    def serialize(self) -> bytearray:
        b = bytearray()
        b.extend(write_string(self.path))
        b.extend(int_struct.pack(self.watcher_type))
        return b

    @classmethod
    def deserialize(cls, buf, offset):
        return True


if -121 not in kazoo.exceptions.EXCEPTIONS:
    # kazoo < 2.11 does not know NOWATCHER, the server's reply to a removeWatches whose watch has just
    # fired; an unknown error code raises in kazoo's I/O thread and kills the connection. Teach it the code.
    @kazoo.exceptions._zookeeper_exception(-121)
    class NoWatcherError(kazoo.exceptions.ZookeeperError):
        """The watch to remove was not there (it had fired)."""


_UNUSABLE = (KeeperState.AUTH_FAILED, KeeperState.CLOSED, KeeperState.EXPIRED_SESSION)
_no_containers: "weakref.WeakSet[KazooClient]" = weakref.WeakSet()  # clients whose server rejected containers


def _blocking(start: Callable[[], object]):
    return start().get()


def _create_parent(client: KazooClient, path: str, acl: list, call: Callable) -> None:
    """Create ``path`` as a container node (a persistent one where the server has no containers);
    an existing node is fine. Raises NoNodeError if its own parent is missing."""
    if client not in _no_containers:

        def start():
            ar = client.handler.async_result()
            client._call(_CreateContainer(client.chroot + path, b"", acl, 4), ar)
            return ar

        try:
            call(start)
            return
        except NodeExistsError:
            return
        except (NoNodeError, NoAuthError, SessionExpiredError) + retry.TRANSIENT:
            raise
        except KazooException as exc:  # UnimplementedError / BadArguments from servers before 3.5
            log.info("server rejected a container node (%r); using persistent parents", exc)
            _no_containers.add(client)
    try:
        call(lambda: client.create_async(path, b"", acl))
    except NodeExistsError:
        pass


def make_parents(client: KazooClient, path: str, acl: list, call: Callable = _blocking) -> None:
    """Create ``path`` and whichever ancestors are missing, as container nodes with ``acl``: deepest
    first, climbing only as far as a NoNode says (a new key under an existing parent costs one create).

    ``call(start)`` runs one async operation (``start()`` returns a kazoo async result) and returns its
    value; the default blocks, a :class:`Waiter` bounds it by a deadline and retries. Raises LockError
    if the client's chroot does not exist (nothing can be created under it).
    """
    missing = [path]
    for _attempt in range(100):  # an ancestor reaped (container) between our creates: climb again
        try:
            _create_parent(client, missing[-1], acl, call)
        except NoNodeError:
            parent = missing[-1].rsplit("/", 1)[0]
            if not parent:
                raise LockError(f"the client's chroot {client.chroot!r} does not exist; create it first") from None
            missing.append(parent)
            continue
        missing.pop()
        if not missing:
            return
    raise LockError(f"could not create {path!r}: its ancestors keep disappearing")


def submit(client: KazooClient, requests: list) -> list:
    """Queue ``requests`` back to back on the session and wake kazoo's connection thread once.

    ZooKeeper answers a session's requests in order, so a create and a get_children sent together cost
    one round trip. (kazoo's ``_call`` wakes its I/O thread once per request -- a thread switch each on a
    small machine -- so this queues them together; paths must already carry the chroot.)
    """
    results = [client.handler.async_result() for _ in requests]
    conn = getattr(client, "_connection", None)
    write_sock = getattr(conn, "_write_sock", None)
    if client._state in _UNUSABLE or write_sock is None:
        for req, ar in zip(requests, results):
            client._call(req, ar)  # sets the right exception
        return results
    for pair in zip(requests, results):
        client._queue.append(pair)
    try:
        write_sock.send(b"\0" * len(requests))  # the I/O thread sends one request per byte
    except OSError:
        for ar in results:
            if not ar.ready():
                ar.set_exception(ConnectionClosedError("Connection has been closed"))
    return results


def remove_watch(client: KazooClient, path: str, fn: Callable) -> None:
    """Forget our data watch ``fn`` on ``path`` client-side, and server-side if no other remains."""
    full = client.chroot + path
    watchers = client._data_watchers.get(full)
    if watchers is None or fn not in watchers:
        return
    watchers.discard(fn)
    if watchers:
        return
    client._data_watchers.pop(full, None)
    if client.connected:
        ar = client.handler.async_result()
        client._call(_RemoveWatches(full, 2), ar)  # result ignored: the watch may have just fired


class Waiter:
    """One acquire's wake-ups (watch, session events, cancel), deadline and retries."""

    def __init__(
        self,
        client: KazooClient,
        deadline: Optional[float],
        cancel: threading.Event,
        policy: Optional[tenacity.Retrying],
        nowait: bool = False,
    ) -> None:
        self.client = client
        self.nowait = nowait
        self.deadline = deadline
        self.cancel = cancel
        self.policy = policy
        self.wake = threading.Event()
        self.deleted: set = set()
        self.deleted_at: Optional[float] = None
        self._since = time.monotonic()
        self._watched: Optional[str] = None
        self._session: Optional[SessionWatcher] = None  # subscribed once we have to wait

    def _on_session(self, event: str) -> None:
        self.wake.set()

    def _on_watch(self, event) -> None:  # kazoo's event thread: only record and wake
        if event.type == EventType.DELETED:
            self.deleted.add(event.path)
            self.deleted_at = time.monotonic()
        self.wake.set()

    def stale(self) -> bool:
        """True if a grant now would rest on old news: the process stood still while we waited (GC pause,
        SIGSTOP; told by the session thread) or the deletion we were told of is older than the stall limit
        (a third of the session timeout) -- the session may have expired meanwhile, so our node must be
        read back before we hold. A waiter that never slept is never stale."""
        s = self._session
        if s is None:
            return False
        return s.stalled_since(self._since) or (
            self.deleted_at is not None and time.monotonic() - self.deleted_at > s.stall_limit
        )

    def remaining(self) -> Optional[float]:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def check(self) -> None:
        """Raise Cancelled or DeadlinePassed if the acquire must stop."""
        if self.cancel.is_set():
            raise Cancelled()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise DeadlinePassed()

    def wait_result(self, ar):
        """Wait for a kazoo async result without passing the deadline or ignoring a cancel."""
        while not ar.ready():
            self.check()
            rem = self.remaining()
            ar.wait(0.2 if rem is None else max(0.0, min(0.2, rem)))
        return ar.get()

    def call_in_session(self, start: Callable[[], object]) -> tuple:
        """:meth:`call`, then the client's session id: ``(value, session)``. A connection that dropped right
        after the reply leaves the session unknown for a moment; then ask again once reconnected, never
        answer with no session (a live node taken for not ours would be abandoned, blocking the queue)."""
        while True:
            value = self.call(start)
            sid = session_id(self.client)
            if sid is not None:
                return value, sid
            self.check()
            self.wake.wait(0.05)

    def call(self, start: Callable[[], object]):
        """Run an idempotent async operation ``start()`` with retries, bounded by the deadline."""
        try:
            return retry.call(lambda: self.wait_result(start()), deadline=self.deadline, policy=self.policy)
        except retry.TRANSIENT:
            self.check()
            raise

    def watch(self, path: str):
        """Set our (single) data watch on ``path``; returns its stat, or None if it is already gone.

        A ``get`` rather than ``exists``: on a missing node it leaves no watch behind to remove.
        """
        self.unwatch()
        self.wake.clear()
        if self._session is None:  # session events wake a sleeping waiter; an uncontended one never sleeps
            self._session = SessionWatcher.of(self.client)
            self._session.subscribe(self._on_session)
            self._since = time.monotonic()
        try:
            _, stat = self.call(lambda: self.client.get_async(path, watch=self._on_watch))
        except NoNodeError:
            return None
        self._watched = path
        return stat

    def unwatch(self) -> None:
        if self._watched is not None:
            remove_watch(self.client, self._watched, self._on_watch)
            self._watched = None

    def sleep(self) -> None:
        """Block until a wake-up, the deadline or a cancel (the latter two raise)."""
        if self.nowait:
            raise DeadlinePassed()
        while not self.wake.wait(0.5 if self.deadline is None else max(0.0, min(0.5, self.remaining() or 0.0))):
            self.check()
        self.wake.clear()
        self.check()

    def was_deleted(self, path: str) -> bool:
        return path in self.deleted

    def close(self) -> None:
        self.unwatch()
        if self._session is not None:
            self._session.unsubscribe(self._on_session)


class Entry(NamedTuple):
    """Our node in a queue."""

    path: str
    node: QueueNode
    token: int
    session: int


class Queue:
    """Ephemeral-sequential queue under one path; recipes supply only their wait-rule."""

    def __init__(self, client: KazooClient, path: str, acl: Optional[list], policy: Optional[tenacity.Retrying]):
        self.client = client
        self.path = path
        self.acl = acl
        self.policy = policy

    def _acl(self) -> list:
        from kazoo.security import OPEN_ACL_UNSAFE

        return list(self.acl) if self.acl else list(OPEN_ACL_UNSAFE)

    def children(self, waiter: Waiter) -> list:
        return waiter.call(lambda: self.client.get_children_async(self.path))

    def _own_nodes(self, waiter: Waiter, name_prefix: str, guid: str, sequence: bool) -> list:
        """Entries of this session's nodes that carry ``guid``, read after a ``sync`` so that a create
        applied late (across a ZooKeeper leader change) is seen."""
        try:  # the session id after the sync: right after a lost reply we are often between connections
            _, sid = waiter.call_in_session(lambda: self.client.sync_async(self.path))
        except NoNodeError:
            return []
        if sequence:
            names = [n for n in self.children(waiter) if n.startswith(name_prefix)]
        else:
            names = [name_prefix]
        found = []
        for name in names:
            try:
                data, stat = waiter.call(lambda n=name: self.client.get_async(f"{self.path}/{n}"))
            except NoNodeError:
                continue
            if naming.read_data(data).get("guid") == guid and stat.ephemeralOwner == sid:
                found.append(Entry(f"{self.path}/{name}", naming.parse(name), stat.czxid, sid))
        return found

    def _find_own(self, waiter: Waiter, name_prefix: str, guid: str, sequence: bool) -> Optional[Entry]:
        """After a create whose reply was lost: our node is the one with our guid and our session (a
        node of our previous session is not ours: it is going away). Extra copies are deleted."""
        found = sorted(self._own_nodes(waiter, name_prefix, guid, sequence), key=lambda e: e.token)
        for extra in found[1:]:
            self.delete(extra.path, extra.session)
        return found[0] if found else None

    def create(self, waiter: Waiter, name: str, data: bytes, guid: str, sequence: bool, listing: bool = False):
        """Create our ephemeral node ``<path>/<name>`` (plus a sequence suffix); returns (Entry, children).

        With ``listing`` the children are requested right behind the create (one round trip). A create
        whose reply is lost is found again by ``guid``; one abandoned at the deadline is deleted when its
        reply comes. Raises NodeExistsError for a taken non-sequential name.
        """
        acl = self._acl()
        replies_lost = False
        made_parent = False
        while True:
            waiter.check()
            flags = 3 if sequence else 1  # ephemeral (+ sequential)
            requests = [Create2(self.client.chroot + f"{self.path}/{name}", data, acl, flags)]
            if listing and not made_parent:
                requests.append(GetChildren(self.client.chroot + self.path, None))
            create, *rest = submit(self.client, requests)
            children_ar = rest[0] if rest else None
            try:
                path, stat = waiter.wait_result(create)
                path = self.client.unchroot(path)
            except NoNodeError:  # a new key, or its parent reaped (container): make it, then create again
                make_parents(self.client, self.path, acl, waiter.call)
                made_parent = True
                continue
            except (DeadlinePassed, Cancelled, KeyboardInterrupt):
                create.rawlink(_delete_if_created(self.client))
                raise
            except ConnectionClosedError:  # the client is stopped or closed: no session will come
                raise
            except SessionExpiredError:  # kazoo is setting up a new session: give it a moment
                waiter.wake.wait(0.05)
                continue
            except retry.TRANSIENT:
                replies_lost = True
                entry = self._find_own(waiter, name, guid, sequence)
                if entry is None:
                    continue
                try:
                    return entry, (self.children(waiter) if listing else None)
                except BaseException:
                    self.delete(entry.path, entry.session)
                    raise
            sid = session_id(self.client)
            if sid is not None and sid != stat.ephemeralOwner:
                continue  # created by a session that has since expired: the node is gone
            entry = Entry(path, naming.parse(path.rsplit("/", 1)[1]), stat.czxid, stat.ephemeralOwner)
            if replies_lost and sequence:
                # An earlier create whose reply was lost may still have been applied (a leader change
                # commits it late): one acquire must never leave two nodes, the stray would block the queue.
                try:
                    for extra in self._own_nodes(waiter, name, guid, sequence):
                        if extra.path != entry.path:
                            self.delete(extra.path, extra.session)
                except BaseException:
                    self.delete(entry.path, entry.session)
                    raise
            children = None
            if listing:
                try:
                    if children_ar is not None:
                        try:
                            children = waiter.wait_result(children_ar)
                        except (NoNodeError, SessionExpiredError) + retry.TRANSIENT:
                            children = self.children(waiter)
                    elif entry.node.sequence == 0:
                        children = []  # the parent's first child ever (its counter was 0): nobody is ahead
                    else:
                        children = self.children(waiter)
                except BaseException:  # deadline, cancel, Ctrl-C after our node exists: remove it
                    self.delete(entry.path, entry.session)
                    raise
            return entry, children

    def enqueue(self, waiter: Waiter, host: str, kind: str, identifier: Optional[str]) -> tuple:
        """Create our sequential node and list the queue in one round trip; returns (Entry, nodes ahead)."""
        guid = naming.new_guid()
        entry, children = self.create(
            waiter, naming.prefix(host, kind), naming.node_data(identifier, guid, host), guid, True, listing=True
        )
        mine, distance = entry.node.sequence, naming.distance
        seqs = ((c, naming.sequence(c)) for c in children)
        ahead = naming.sort_queue([c for c, seq in seqs if seq is not None and distance(seq, mine) < 0])
        return entry, ahead

    def acquire(
        self, waiter: Waiter, host: str, kind: str, identifier: Optional[str], rule: Rule, confirm: bool = False
    ) -> Entry:
        """Enqueue and wait until ``rule`` finds no blocker. Raises DeadlinePassed/Cancelled (node removed).

        With ``confirm`` (leader election), our node is read back before returning: it must still exist
        and belong to our current session (a node of a dying session is never taken for ours).
        """
        entry = None
        try:
            while True:
                waiter.check()
                if entry is None:
                    entry, ahead = self.enqueue(waiter, host, kind, identifier)
                current = session_id(self.client)
                if current is not None and current != entry.session:
                    entry = None  # our node went with the old session: queue again, at the back
                    continue
                blocker = rule(ahead, entry.node)
                if blocker is None:
                    if (confirm or waiter.stale()) and not self._confirm(waiter, entry):
                        entry = None
                        continue
                    return entry
                path = f"{self.path}/{blocker.name}"
                try:
                    stat = waiter.watch(path)
                    if stat is not None:
                        waiter.sleep()
                        if not waiter.was_deleted(path):
                            continue  # woken by the session or a data change: look again
                        if blocker is ahead[0]:
                            # It was the head of our listing and nodes only ever join behind us, so
                            # the rule can be asked again without a read.
                            ahead.remove(blocker)
                            continue
                    # Gone, and nodes ahead of it may be gone too: list the queue once.
                    ahead = self._ahead(waiter, entry)
                    if ahead is None:
                        entry = None  # our node is gone (deleted, or with an expired session)
                except SessionExpiredError:
                    entry = None
        except BaseException:
            if entry is not None:
                self.delete(entry.path, entry.session)
            raise
        finally:
            waiter.unwatch()

    def _ahead(self, waiter: Waiter, entry: Entry) -> Optional[list]:
        """Nodes ahead of ours in queue order, or None if our node is no longer in the queue."""
        mine, seen, ahead, distance = entry.node.sequence, False, [], naming.distance
        for name in self.children(waiter):  # filter before parsing: in a long queue most are behind us
            seq = naming.sequence(name)
            if seq is None:
                continue
            d = distance(seq, mine)
            if d > 0:
                continue
            if d == 0:
                seen = True
            else:
                ahead.append(name)
        return naming.sort_queue(ahead) if seen else None

    def _confirm(self, waiter: Waiter, entry: Entry) -> bool:
        """Read our node back: True if it exists and belongs to our current session. A connection that
        drops right after the read leaves the answer open: ask again once reconnected (the node of a
        live session must never be abandoned, it would block the queue)."""
        try:
            stat, sid = waiter.call_in_session(lambda: self.client.exists_async(entry.path))
        except SessionExpiredError:
            return False
        return stat is not None and stat.ephemeralOwner == entry.session == sid

    def delete(
        self,
        path: str,
        session: Optional[int] = None,
        timeout: float = 30.0,
        gone: Optional[Callable[[], bool]] = None,
    ) -> bool:
        """Delete our node (idempotent), unless it belongs to a session other than ``session``.

        Returns False if ``session`` turned out to be gone (the node went with it), or if ``gone()`` says
        so while waiting for a connection; else True."""
        deadline = time.monotonic() + timeout

        def attempt() -> None:
            sid = session_id(self.client)
            if session is not None and sid not in (None, session):
                raise _SessionGone()  # our session is gone, and the node with it: never delete a successor's
            ar = self.client.delete_async(path)  # queued by kazoo until reconnected; dropped if the session ends
            while not ar.wait(max(0.0, min(0.2, deadline - time.monotonic()))):
                if gone is not None and gone():
                    raise _SessionGone()
                if time.monotonic() >= deadline:
                    break
            ar.get(timeout=0)  # its result, its error, or kazoo's timeout error

        try:
            retry.call(attempt, deadline=deadline, policy=self.policy)
        except NoNodeError:
            pass
        except (SessionExpiredError, _SessionGone):
            return False
        except Exception:
            log.exception("could not delete %s; it goes when the session ends", path)
        return True

    def contenders(self) -> list:
        """Every node of the queue in order, with the data its owner wrote (reads pipelined)."""
        try:
            nodes = naming.sort_queue(self.client.get_children(self.path))
        except NoNodeError:  # never used, or an unused container parent was reaped: nobody there
            return []
        pending = [self.client.get_async(f"{self.path}/{n.name}") for n in nodes]
        out = []
        for n, ar in zip(nodes, pending):
            try:
                data, _ = ar.get()
            except NoNodeError:
                continue
            out.append(naming.contender(n, data))
        return out


def _delete_if_created(client: KazooClient) -> Callable:
    """A callback for a create abandoned mid-flight: if it succeeds after all, delete the node."""

    def cb(ar) -> None:
        try:
            result = ar.get(block=False)
        except Exception:
            return
        path = result[0] if isinstance(result, tuple) else result
        client.delete_async(path)

    return cb
