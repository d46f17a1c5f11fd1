"""The engine, free of I/O, threads and clocks: every recipe's acquire, written once as generators.

A protocol generator *yields* what it needs -- a create pipelined with a listing, a read, a watch, a
wait for a wake-up, a delete -- and is *sent* the answer (or has the error thrown into it). A driver
performs the requests: :mod:`zkrecipes._drive` on the calling thread with kazoo's async results; an
asyncio driver can run the same generators on an event loop. Drivers also bound everything by the
acquire's deadline and its cancel, which they throw in as :class:`DeadlinePassed` / :class:`Cancelled`;
the generators then delete the node they made, so no exit but success leaves a node behind.

The queue algorithm (etcd's ``concurrency/mutex.go`` shape): create our ephemeral-sequential node and
list the queue in one round trip; ask the recipe's *wait-rule* which node ahead blocks us; watch only
that one; when it goes, ask again. A wait-rule is ``rule(ahead, me) -> blocker | None`` over the nodes
ahead of ours in queue order; it must be monotone (removing nodes ahead never creates a blocker).
"""

from __future__ import annotations

from typing import Any, Callable, Generator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

from kazoo.exceptions import ConnectionClosedError, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL

from . import naming
from .naming import QueueNode
from .retry import TRANSIENT

T = TypeVar("T")
Rule = Callable[[List[QueueNode], QueueNode], Optional[QueueNode]]


class DeadlinePassed(Exception):
    """Thrown in by a driver: the acquire's deadline passed (or a non-blocking attempt would wait)."""


class Cancelled(Exception):
    """Thrown in by a driver: the acquire was cancelled."""


# -- what a protocol asks of its driver ----------------------------------------------------------
class Send(NamedTuple):
    """Create ``path`` (ephemeral, plus sequential in ``flags``) and, if ``listing``, list ``parent`` in the
    same round trip. Answer: ``(create outcome, listing outcome or None)``, each a value or the exception
    (not thrown: the protocol sorts them out). A create the driver abandons (deadline, cancel) is deleted
    when its reply comes."""

    path: str
    data: bytes
    acl: Sequence[ACL]
    flags: int
    parent: Optional[str]  # list this parent too, or None


class Read(NamedTuple):
    """An idempotent request, retried by the driver on transient errors: ``kind`` is ``"children"``,
    ``"get"`` (answer ``(data, stat)``), ``"exists"`` (stat or None) or ``"sync"``."""

    kind: str
    path: str


class MakeParents(NamedTuple):
    """Create ``path`` and its missing ancestors as container nodes, deepest first."""

    path: str
    acl: Sequence[ACL]


class Watch(NamedTuple):
    """Set our single data watch on ``path``; answer its stat, or None if the node is gone (no watch)."""

    path: str


class Delete(NamedTuple):
    """Delete our node ``path`` unless the client's session is no longer ``session``; never bounded by the
    acquire's deadline (it cleans up). Answer: False if the session (and the node with it) was gone."""

    path: str
    session: Optional[int]


class _Plain(NamedTuple):
    what: str


SESSION = _Plain("session")  # answer: the client's session id now, or None between connections
STALE = _Plain("stale")  # answer: True if a grant now would rest on old news (the process stood still)
SLEEP = _Plain("sleep")  # wait for a wake-up; answer: True if the watched node was deleted
PAUSE = _Plain("pause")  # wait a moment (a new session is being set up); wakes early on any event
UNWATCH = _Plain("unwatch")  # drop our watch

Op = Any  # one of the above
Proto = Generator[Op, Any, T]


class Entry(NamedTuple):
    """Our node in a queue, and the session that owns it."""

    path: str
    node: QueueNode
    token: int  # the czxid: the fencing token
    session: int


def owns(stat: Optional[ZnodeStat], session: Optional[int]) -> bool:
    """The one ownership test: a node is ours only if it exists and its owner is ``session``."""
    return stat is not None and session is not None and stat.ephemeralOwner == session


# -- the queue ---------------------------------------------------------------------------------------
def acquire(
    parent: str, acl: Sequence[ACL], prefix: str, data: bytes, guid: str, rule: Rule, confirm: bool = False
) -> Proto[Entry]:
    """Enqueue ``<parent>/<prefix><seq>`` and wait until ``rule`` finds no blocker; our node is deleted on
    every other exit. With ``confirm`` (elections) our node is read back before we return: it must still
    be ours (a node of a dying session is never taken for ours). A waiter that stood still meanwhile
    (:data:`STALE`) reads it back too."""
    entry: Optional[Entry] = None
    ahead: List[QueueNode] = []
    try:
        while True:
            if entry is None:
                entry, ahead = yield from enqueue(parent, acl, prefix, data, guid)
            current = yield SESSION
            if current is not None and current != entry.session:
                entry = None  # our node went with the old session: queue again, at the back
                continue
            blocker = rule(ahead, entry.node)
            if blocker is None:
                if (confirm or (yield STALE)) and not (yield from _confirm(entry)):
                    entry = None
                    continue
                return entry
            path = f"{parent}/{blocker.name}"
            try:
                if (yield Watch(path)) is not None:
                    if not (yield SLEEP):
                        continue  # woken by the session or a data change: look again
                    if blocker is ahead[0]:
                        # it was the head of our listing and nodes only join behind us: no read needed
                        ahead.remove(blocker)
                        continue
                # gone, and nodes ahead of it may be gone too: list the queue once
                listed = yield from _ahead(parent, entry)
                if listed is None:
                    entry = None  # our node is gone (deleted, or with an expired session)
                else:
                    ahead = listed
            except SessionExpiredError:
                entry = None
    except GeneratorExit:  # closed by its driver: it may not ask for anything more
        raise
    except BaseException:
        if entry is not None:
            yield Delete(entry.path, entry.session)
        raise


def enqueue(
    parent: str, acl: Sequence[ACL], prefix: str, data: bytes, guid: str
) -> Proto[Tuple[Entry, List[QueueNode]]]:
    """Create our sequential node and list the queue in one round trip: ``(entry, nodes ahead)``."""
    entry, children = yield from create(parent, acl, prefix, data, guid, sequence=True, listing=True)
    mine, distance, seq_of = entry.node.sequence, naming.distance, naming.sequence
    ahead = []
    for name in children or ():  # filter before parsing: in a long queue most are behind us
        seq = seq_of(name)
        if seq is not None and distance(seq, mine) < 0:
            ahead.append(name)
    return entry, (naming.sort_queue(ahead) if ahead else [])


def _ahead(parent: str, entry: Entry) -> Proto[Optional[List[QueueNode]]]:
    """Nodes ahead of ours in queue order, or None if our node is no longer in the queue."""
    mine, seen, ahead, distance = entry.node.sequence, False, [], naming.distance
    for name in (yield Read("children", parent)):
        seq = naming.sequence(name)
        if seq is None:
            continue
        d = distance(seq, mine)
        if d == 0:
            seen = True
        elif d < 0:
            ahead.append(name)
    return naming.sort_queue(ahead) if seen else None


def _confirm(entry: Entry) -> Proto[bool]:
    """Read our node back: True if it exists and belongs to our current session."""
    try:
        stat, sid = yield from in_session(Read("exists", entry.path))
    except SessionExpiredError:
        return False
    return owns(stat, entry.session) and sid == entry.session


def in_session(op: Op) -> Proto[Tuple[Any, int]]:
    """``op``'s answer and the session id after it. A connection that dropped right after the reply
    leaves the session unknown for a moment: ask again once reconnected, never answer with no session
    (a live node of ours taken for not ours would be abandoned, blocking the queue)."""
    while True:
        value = yield op
        sid = yield SESSION
        if sid is not None:
            return value, sid
        yield PAUSE


# -- creating our node -------------------------------------------------------------------------------
def create(
    parent: str, acl: Sequence[ACL], name: str, data: bytes, guid: str, sequence: bool, listing: bool = False
) -> Proto[Tuple[Entry, Optional[List[str]]]]:
    """Create our ephemeral node ``<parent>/<name>`` (plus a sequence suffix): ``(entry, children)``.

    Optimistic: the create goes first; only a NoNode makes the missing parents, and then, if our node is
    the parent's first child ever (sequence 0), nobody can be ahead and no listing is needed. A create
    whose reply is lost is found again by ``guid``; one acquire never leaves two nodes. Raises
    NodeExistsError for a taken non-sequential name, ConnectionClosedError for a stopped client.
    """
    replies_lost = made_parent = False
    path = f"{parent}/{name}"
    while True:
        flags = 3 if sequence else 1  # ephemeral (+ sequential)
        created, listed = yield Send(path, data, acl, flags, parent if listing and not made_parent else None)
        if isinstance(created, BaseException):
            if isinstance(created, NoNodeError):  # a new key, or its parent reaped (container): make it
                yield MakeParents(parent, acl)
                made_parent = True
                continue
            if isinstance(created, ConnectionClosedError):  # stopped or closed: no session will come
                raise created
            if isinstance(created, SessionExpiredError):  # kazoo is setting up a new session
                yield PAUSE
                continue
            if not isinstance(created, TRANSIENT):
                raise created
            replies_lost = True
            entry = yield from find_own(parent, name, guid, sequence)
            if entry is None:
                continue
            try:
                return entry, ((yield Read("children", parent)) if listing else None)
            except GeneratorExit:
                raise
            except BaseException:
                yield Delete(entry.path, entry.session)
                raise
        made, stat = created
        sid = yield SESSION
        if sid is not None and sid != stat.ephemeralOwner:
            continue  # created by a session that has since expired: the node is gone
        made = made.rsplit("/", 1)[1]  # the reply's path carries the chroot: keep only the name
        entry = Entry(f"{parent}/{made}", naming.parse(made) or _NO_NODE, stat.czxid, stat.ephemeralOwner)
        try:
            if replies_lost and sequence:
                # an earlier create whose reply was lost may still have been applied (a leader change
                # commits it late): a stray of this acquire would block the queue
                for extra in (yield from _own_nodes(parent, name, guid, sequence)):
                    if extra.path != entry.path:
                        yield Delete(extra.path, extra.session)
            children = None
            if listing:
                if listed is None and entry.node.sequence == 0:
                    children = []  # the parent's first child ever (its counter was 0): nobody is ahead
                elif listed is None or isinstance(listed, _RELIST):
                    children = yield Read("children", parent)
                elif isinstance(listed, BaseException):
                    raise listed
                else:
                    children = listed
        except GeneratorExit:
            raise
        except BaseException:  # deadline, cancel, Ctrl-C after our node exists: remove it
            yield Delete(entry.path, entry.session)
            raise
        return entry, children


_RELIST = (NoNodeError, SessionExpiredError) + TRANSIENT  # a pipelined listing that failed: list again
_NO_NODE = QueueNode("", "", naming.WRITE, 0)  # a non-sequential node (ExclusiveLock's ``lock``)


def _own_nodes(parent: str, prefix: str, guid: str, sequence: bool) -> Proto[List[Entry]]:
    """This session's nodes that carry ``guid``, read after a ``sync`` so that a create applied late
    (across a ZooKeeper leader change) is seen."""
    try:
        _, sid = yield from in_session(Read("sync", parent))
        names = [n for n in (yield Read("children", parent)) if n.startswith(prefix)] if sequence else [prefix]
    except NoNodeError:
        return []
    found = []
    for name in names:
        try:
            data, stat = yield Read("get", f"{parent}/{name}")
        except NoNodeError:
            continue
        if naming.read_data(data).get("guid") == guid and owns(stat, sid):
            found.append(Entry(f"{parent}/{name}", naming.parse(name) or _NO_NODE, stat.czxid, sid))
    return found


def find_own(parent: str, prefix: str, guid: str, sequence: bool) -> Proto[Optional[Entry]]:
    """After a create whose reply was lost: our node is the one with our guid and our session (a node
    of our previous session is not ours: it is going away). Extra copies are deleted."""
    found = sorted((yield from _own_nodes(parent, prefix, guid, sequence)), key=lambda e: e.token)
    for extra in found[1:]:
        yield Delete(extra.path, extra.session)
    return found[0] if found else None


# -- the one-node race (ExclusiveLock) ----------------------------------------------------------------
def race(parent: str, acl: Sequence[ACL], name: str, data: bytes, guid: str) -> Proto[Entry]:
    """Whoever creates ``<parent>/<name>`` holds it; the others watch it and race again when it goes."""
    path = f"{parent}/{name}"
    while True:
        try:
            entry, _ = yield from create(parent, acl, name, data, guid, sequence=False)
            return entry
        except NodeExistsError:  # someone holds it
            pass
        try:
            stat = yield Watch(path)
        except SessionExpiredError:
            continue
        if stat is None:
            continue
        if owns(stat, (yield SESSION)):  # a lost create reply of ours?
            entry_or_none = yield from find_own(parent, name, guid, sequence=False)
            if entry_or_none is not None:
                yield UNWATCH
                return entry_or_none
        yield SLEEP
