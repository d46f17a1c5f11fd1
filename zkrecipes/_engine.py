"""The engine, free of I/O, threads and clocks: every recipe's acquire, written once as generators.

A recipe's *steps* are a generator that *yields* what it needs (a create pipelined with a listing, a
read, a watch, a wait, a delete) and is *sent* the answer or has the error thrown in. A driver performs the requests:
:mod:`zkrecipes._drive` on the calling thread, :mod:`zkrecipes.aio._driver` on an event loop. Drivers
bound everything by the acquire's deadline and cancel, thrown in as :class:`DeadlinePassed` /
:class:`Cancelled`; the generators then delete the node they made: no exit but success leaves one.

The queue (etcd's ``concurrency/mutex.go`` shape): create our ephemeral-sequential node and list the
queue in one round trip; ask the recipe's *wait-rule* ``rule(ahead, me) -> blocker(s) | None`` which
nodes ahead block us; watch those; when one goes, ask again. The rule may be given the last listing
minus the nodes seen go (a superset: nodes only join behind us), so it must be monotone (removing nodes
ahead never creates a blocker).

A non-blocking attempt (``peek``) reads before it writes: if the rule blocks a node at the back of the
queue as listed now, it ends there (no write). A blocker found then stays ahead of any node we create
later, since nodes only join behind; a queue free then is raced for as usual.
"""

from __future__ import annotations

import logging
from typing import (
    AbstractSet,
    Any,
    Callable,
    Dict,
    Generator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    TypeVar,
    Union,
)

from kazoo.exceptions import (
    ConnectionClosedError,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL

from . import formats, naming
from .errors import LockError
from .formats import NodeFormat
from .naming import Contender, QueueNode
from .retry import TRANSIENT

log = logging.getLogger("zkrecipes.engine")

T = TypeVar("T")
Blockers = Union[None, QueueNode, Sequence[QueueNode]]
Rule = Callable[[List[QueueNode], QueueNode], Blockers]


class SessionGone(Exception):
    """Raised by a driver's delete: the session that owned the node has ended (the node went with it)."""


class DeadlinePassed(Exception):
    """Thrown in by a driver: the acquire's deadline passed (or a non-blocking attempt would wait); raised
    by the steps themselves when a non-blocking attempt (``peek``) finds the lock held."""


class Cancelled(Exception):
    """Thrown in by a driver: the acquire was cancelled."""


# -- the steps: what the engine asks of its driver -------------------------------------------------
class CreateAndList(NamedTuple):
    """Create ``path`` (ephemeral, plus sequential in ``flags``) and, if ``parent`` is not None, list it in
    the same round trip. Answer: ``(create outcome, listing outcome or None, session id once the replies are
    in)``, outcomes as values or exceptions (not thrown: the engine sorts them out). A create the driver
    abandons (deadline, cancel) is deleted when its reply comes."""

    path: str
    data: bytes
    acl: Sequence[ACL]
    flags: int
    parent: Optional[str]  # list this parent too, or None


class Read(NamedTuple):
    """An idempotent read, retried on transient errors: kazoo's ``<kind>_async(path)`` for ``kind`` in
    ``get_children``, ``get``, ``exists``, ``sync``. With ``once``: one attempt, bounded by the session
    timeout and the deadline (a check of what we hold: its error is the answer, not a reason to wait).
    With ``synced``: a ``sync`` of the parent is pipelined before it on the same connection (no extra round
    trip), so the read sees every write committed before it was sent -- a follower that has not yet applied
    our session's expiry cannot say a node of that session is still there."""

    kind: str
    path: str
    once: bool = False
    synced: bool = False


class ReadAll(NamedTuple):
    """``get`` of every path, pipelined: answer a list of ``(data, stat)`` or the exception, in order."""

    paths: Sequence[str]


class Write(NamedTuple):
    """A write to someone else's node, conditional on its data ``version`` (:mod:`zkrecipes.revoke`):
    ``set_data`` of ``data``, or a delete if ``data`` is None. Retried on transient errors: a retry of a
    write that was applied answers BadVersionError or NoNodeError, so the steps read again. Answer: kazoo's
    (the node's new stat for a ``set_data``)."""

    path: str
    version: int
    data: Optional[bytes] = None


class Commit(NamedTuple):
    """A write sent once, never retried (a fenced multi, :mod:`zkrecipes.once`): ``send()`` sends it and
    returns kazoo's async result; the answer is ``read(result)``, which raises as the write failed. Its
    reply is awaited past the deadline and cancel (a write sent has an outcome to know)."""

    send: Callable[[], Any]
    read: Callable[[Any], Any]


class CreateParent(NamedTuple):
    """Create the parent node ``path`` with ``acl``: a container node (a persistent one if not ``container``,
    or where the server has none), retried on transient errors. Answer: its path; raises as the create."""

    path: str
    acl: Sequence[ACL]
    container: bool


class Watch(NamedTuple):
    """Set a data watch on ``path``; answer its stat, or None if the node is gone (no watch).

    Without ``keep`` it is our only watch: the driver drops any other first. With ``keep`` it is added to
    the watches set since the last Watch without ``keep`` (the driver keeps a set of watched paths).
    With ``listing``: when this node goes, the steps will list that parent next; the driver may send that
    listing as it hears of the deletion (before the waiting thread or task runs) and answer the next
    ``Read("get_children", listing)`` with it."""

    path: str
    keep: bool = False
    listing: Optional[str] = None


class Delete(NamedTuple):
    """Delete our node ``path`` unless the client's session is no longer ``session``; never bounded by the
    acquire's deadline (it cleans up). Without a connection it waits for one until ``gone()`` says the
    session is gone. Answer: True once deleted, False if the session (and the node with it) was gone, None
    if the node was gone before our delete reached the server, in our live session: someone else deleted
    it (``break_lock``, an operator). (A delete retried after a lost connection may find the node its
    first try removed: that answers True.)"""

    path: str
    session: Optional[int]
    gone: Optional[Callable[[], bool]] = None


class DeleteOld(NamedTuple):
    """Delete ``path``, the sequential node with czxid ``token`` that ``session``, an earlier session of this
    client, made, if it still is that node. A session the client gave up (kazoo's test harness does so to
    simulate an expiry) may live on in the server until its timeout, and its node with it, blocking the
    queue: it can be no one else's. Read, then delete; answer True if deleted. See :func:`drop_old`."""

    path: str
    session: int
    token: int


class WaitGate(NamedTuple):
    """Wait until the local gate ``gate`` (:class:`zkrecipes._gate.Gate`) changes: its ``version`` is no
    longer ``version``. Answer: None."""

    gate: Any
    version: int


class _NoArgs(NamedTuple):
    """A step with no arguments: one of the constants below."""

    what: str


SESSION = _NoArgs("session")  # answer: the client's session id now, or None between connections
STALE = _NoArgs("stale")  # answer: True if a grant now would rest on old news (the process stood still)
# SLEEP: wait for a wake-up; answer: the set of watched paths deleted (a frozenset, empty if woken by
# something else: a session event, a data change, a cancel)
SLEEP = _NoArgs("sleep")
PAUSE = _NoArgs("pause")  # wait a moment (a new session is being set up); wakes early on any event
UNWATCH = _NoArgs("unwatch")  # drop our watches
NOW = _NoArgs("now")  # answer: the driver's clock (time.monotonic())

Step = Any  # one of the above
Steps = Generator[Step, Any, T]  # a recipe's steps: yields Steps, is sent their answers, returns T


class Entry(NamedTuple):
    """Our node in a queue, and the session that owns it."""

    path: str
    node: QueueNode
    token: int  # the czxid: the fencing token
    session: int


def owns(stat: Optional[ZnodeStat], session: Optional[int]) -> bool:
    """The one ownership test: a node is ours only if it exists and its owner is ``session``."""
    return stat is not None and session is not None and stat.ephemeralOwner == session


def drop_old(path: str, session: int, token: int) -> Steps[bool]:
    """Delete our node ``path`` (czxid ``token``) of ``session`` if the client has a newer session now and
    the node still exists as that session's (:class:`DeleteOld`); True if deleted. Only a sequential name:
    ZooKeeper never gives one twice while its parent lives, whereas a fixed name (ExclusiveLock's
    ``lock``) may be someone else's node by the time a delete arrives. A hold's owner is told it is lost
    before this runs (the doubt clock: its holder hears first)."""
    current = yield SESSION
    if current is None or current == session or naming.sequence(path.rsplit("/", 1)[1]) is None:
        return False  # no session to ask with (a later reconnection cleans up), or not an old one
    deleted: bool = yield DeleteOld(path, session, token)
    return deleted


# -- the wait-rules: which nodes ahead of ``me`` (in queue order) block it --------------------------------
def predecessor(ahead: List[QueueNode], me: QueueNode) -> Optional[QueueNode]:
    """Wait-rule of exclusive queue members (FairLock, the write side, election candidates; kazoo's and
    Curator's locks): blocked by the node immediately ahead, if any. (Nodes of another recipe never get
    here: the node format refuses them, :meth:`~zkrecipes.formats.NodeFormat.ahead`.)"""
    return ahead[-1] if ahead else None


def nearest_writer(ahead: List[QueueNode], me: QueueNode) -> Optional[QueueNode]:
    """Wait-rule of readers: blocked by the nearest node ahead that is not a reader (``W``, or a node of
    another format's kind: never overtaken), if any. A semaphore's lease never gets here: the node
    format refuses it (:meth:`~zkrecipes.formats.NodeFormat.ahead`)."""
    for node in reversed(ahead):
        if node.kind != naming.READ:
            return node
    return None


def nearest_leases(ahead: List[QueueNode], me: QueueNode) -> Optional[Sequence[QueueNode]]:
    """Wait-rule of a lease: held while fewer than ``me.leases`` nodes are ahead; else blocked by the
    ``me.leases`` nearest nodes ahead (all watched: any of them going may make us a holder, and while
    they all stay they stay the nearest, so a node further ahead going cannot). Correct on a superset
    of the nodes ahead, as the engine requires of a rule with several blockers."""
    n = me.leases
    return ahead[-n:] if len(ahead) >= n else None


RULES: Dict[str, Rule] = {
    naming.WRITE: predecessor, naming.READ: nearest_writer, naming.LEASE: nearest_leases,
}  # by a node's kind: the rule of the recipes that make such nodes


def holding(queue: Sequence[QueueNode]) -> List[bool]:
    """For each node of ``queue`` (in queue order, any format), whether it holds: its kind's wait-rule
    (:data:`RULES`) finds no blocker among the nodes ahead of it. What :class:`~zkrecipes.Contender`'s
    ``holding`` and ``zkrecipes status`` say."""
    nodes = list(queue)
    return [not RULES.get(n.kind, predecessor)(nodes[:i], n) for i, n in enumerate(nodes)]


# -- the queue ---------------------------------------------------------------------------------------
def acquire(
    parent: str,
    acl: Sequence[ACL],
    prefix: str,
    data: bytes,
    guid: str,
    rule: Rule,
    confirm: bool = False,
    fmt: NodeFormat = formats.DEFAULT,
    seen: Optional[Callable[[int], None]] = None,
    peek: bool = False,
) -> Steps[Entry]:
    """Enqueue ``<parent>/<prefix><seq>`` and wait until ``rule`` finds no blocker; our node is deleted on
    every other exit. With ``confirm`` (elections), or if the waiter stood still meanwhile (:data:`STALE`),
    our node is read back before we return: it must still be ours. ``fmt`` (the node format) reads every
    listing: a child it cannot queue with, or a node of another recipe ahead of ours, raises LockError (our
    node deleted). ``seen(n)``, if given, is told how many nodes are ahead of ours each time we are about
    to wait (from what we know anyway: no request).

    With ``peek`` (a non-blocking attempt) the queue is listed first and DeadlinePassed raised, nothing
    written, if ``rule`` blocks a node at its back (:func:`_peek`); else we queue, and DeadlinePassed
    is raised (our node deleted) instead of any wait."""
    if peek:
        yield from _peek(parent, prefix, rule, fmt)
    entry: Optional[Entry] = None
    old: Optional[Entry] = None  # our node of a session kazoo gave up: it may live on ahead of our new one
    ahead: List[QueueNode] = []
    watched: Set[str] = set()  # paths our watches are on (several only for a rule with several blockers)
    waited = False  # a waiter that never slept is never stale, and its session was just checked
    try:
        while True:
            if entry is None:
                watched.clear()
                entry, children = yield from create(
                    parent, acl, prefix, data, guid, sequence=True, listing=True, containers=fmt.containers
                )
                ahead, _ = fmt.ahead(parent, children or (), entry.node.sequence, fresh=True)
                if old is not None:  # (dropped now that the new session is known: drop_old asks it)
                    if (yield from drop_old(old.path, old.session, old.token)):
                        ahead = [n for n in ahead if n.name != old.node.name]
                    old = None
            elif waited:
                current = yield SESSION
                if current is not None and current != entry.session:
                    yield from drop_old(entry.path, entry.session, entry.token)  # a session we gave up keeps it
                    entry = None  # queue again, at the back
                    continue
            found = rule(ahead, entry.node)
            if not found:  # None, or no blockers (a QueueNode is a non-empty tuple)
                stale = bool(waited and (yield STALE))
                if (confirm or stale) and not (yield from _confirm(entry, synced=stale)):
                    entry = None
                    continue
                return entry
            if peek:
                raise DeadlinePassed()  # a non-blocking attempt does not wait (nor watch)
            waited = True
            if seen is not None:
                seen(len(ahead))
            try:
                blockers = [found] if isinstance(found, QueueNode) else list(found)
                if (yield from _wait(parent, blockers, ahead, watched)):  # our listing is old: list again
                    listed = yield from _ahead(parent, entry, fmt)
                    if listed is None:
                        entry = None  # our node is gone (deleted, or with an expired session)
                    else:
                        ahead = listed
            except SessionExpiredError:  # kazoo has a new session, or is setting one up
                old, entry = entry, None
    except GeneratorExit:  # closed by its driver: it may not ask for anything more
        raise
    except BaseException:
        if entry is not None and (yield Delete(entry.path, entry.session)) is False:  # its session was gone
            yield from drop_old(entry.path, entry.session, entry.token)  # a session we gave up may keep it
        if old is not None:
            yield from drop_old(old.path, old.session, old.token)
        raise


def _peek(parent: str, prefix: str, rule: Rule, fmt: NodeFormat) -> Steps[None]:
    """A non-blocking attempt's look before it writes: one listing; DeadlinePassed if ``rule`` blocks a node
    ``<prefix><seq>`` created now, at the back of the queue (its blockers stay ahead of anything we create
    later: nodes only join behind). LockError, nothing written, for a child ``fmt`` cannot queue with."""
    try:
        children = yield Read("get_children", parent)
    except NoNodeError:  # a new key: nobody there
        return
    ahead = fmt.queue(parent, children)
    if ahead and rule(ahead, naming.parse(f"{prefix}0000000000") or _NO_NODE):  # (the rules look at our kind)
        raise DeadlinePassed()


def _wait(parent: str, blockers: List[QueueNode], ahead: List[QueueNode], watched: Set[str]) -> Steps[bool]:
    """Watch the blockers not watched yet (the others' watches stay) and sleep until one goes; the nodes
    seen go leave ``ahead``. True if the queue must be listed again: a blocker was already gone (our
    listing is old), or nodes ahead of a deleted blocker remain that no watch of ours vouches for (they
    may have gone unseen; a listing also shows a foreign node that joined). A deleted head needs no read:
    nodes only join behind us."""
    paths = {f"{parent}/{b.name}": b for b in blockers}
    if not watched <= paths.keys():
        watched.clear()  # the blockers changed other than by deletion: set every watch afresh
    for path, b in paths.items():
        if path not in watched:
            # its deletion alone will not vouch for the nodes before it: a listing follows (below)
            relist = b not in ahead or _unvouched(parent, ahead[:ahead.index(b)], paths.keys())
            if (yield Watch(path, keep=bool(watched), listing=parent if relist else None)) is None:
                return True
            watched.add(path)
    deleted = yield SLEEP
    if not deleted:
        watched.clear()  # woken by the session or a data change: watch again
        return False
    gone = [b for path, b in paths.items() if path in deleted]
    watched.difference_update(deleted)
    if not gone:
        return False
    unvouched = _unvouched(parent, ahead[:min(ahead.index(b) for b in gone)], watched)
    for b in gone:
        ahead.remove(b)
    return unvouched


def _unvouched(parent: str, nodes: List[QueueNode], watched: AbstractSet[str]) -> bool:
    """True if one of ``nodes`` (ahead of a blocker) has no watch among ``watched``: it may be gone unseen."""
    return any(f"{parent}/{n.name}" not in watched for n in nodes)


def _ahead(parent: str, entry: Entry, fmt: NodeFormat) -> Steps[Optional[List[QueueNode]]]:
    """Nodes ahead of ours in queue order, or None if our node is no longer in the queue."""
    try:
        names = yield Read("get_children", parent)
    except NoNodeError:  # the parent went (a container reaped once empty): our node went before it
        return None
    ahead, seen = fmt.ahead(parent, names, entry.node.sequence)
    return ahead if seen else None


def _confirm(entry: Entry, synced: bool = False) -> Steps[bool]:
    """Read our node back: True if it exists and belongs to our current session. ``synced`` after a stall:
    the session may have expired meanwhile, and a lagging follower must not say otherwise."""
    try:
        stat, sid = yield from in_session(Read("exists", entry.path, synced=synced))
    except SessionExpiredError:
        return False
    return owns(stat, entry.session) and sid == entry.session


def in_session(op: Step) -> Steps[Tuple[Any, int]]:
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
    parent: str,
    acl: Sequence[ACL],
    name: str,
    data: bytes,
    guid: str,
    sequence: bool,
    listing: bool = False,
    containers: bool = True,
) -> Steps[Tuple[Entry, Optional[List[str]]]]:
    """Create our ephemeral node ``<parent>/<name>`` (plus a sequence suffix): ``(entry, children)``.

    Optimistic: the create goes first; only a NoNode makes the missing parents, and then, if our sequential
    node is the parent's first child ever (sequence 0), nobody can be ahead and no listing is needed. A create
    whose reply is lost is found again by ``guid``; one acquire never leaves two nodes. Raises
    NodeExistsError for a taken non-sequential name, ConnectionClosedError for a stopped client.
    """
    replies_lost = made_parent = False
    path = f"{parent}/{name}"
    while True:
        flags = 3 if sequence else 1  # ephemeral (+ sequential)
        # a sequential node made right after its parent needs no listing if it is the first child ever
        listed_parent = parent if listing and not (made_parent and sequence) else None
        created, listed, sid = yield CreateAndList(path, data, acl, flags, listed_parent)
        if isinstance(created, BaseException):
            if isinstance(created, NoNodeError):  # a new key, or its parent reaped (container): make it
                yield from make_parents(parent, acl, containers)
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
                return entry, ((yield Read("get_children", parent)) if listing else None)
            except NoNodeError:  # the parent went, so our node went first (its session ended)
                continue
            except GeneratorExit:
                raise
            except BaseException:
                yield Delete(entry.path, entry.session)
                raise
        made, stat = created
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
                if listed is None and sequence and entry.node.sequence == 0:
                    children = []  # the parent's first child ever (its counter was 0): nobody is ahead
                elif listed is None or isinstance(listed, _RELIST):
                    try:
                        children = yield Read("get_children", parent)
                    except NoNodeError:  # the parent went, so our node went first (its session ended)
                        continue
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


def make_parents(path: str, acl: Sequence[ACL], container: bool = True) -> Steps[None]:
    """Create ``path`` and whichever ancestors are missing, as container nodes with ``acl`` (persistent
    ones if not ``container``: kazoo's recipes never make a reaped parent again): deepest first, climbing
    only as far as a NoNode says (a new key under an existing parent costs one create). Raises LockError
    if the client's chroot does not exist (nothing can be created under it)."""
    missing = [path]
    for _attempt in range(100):  # an ancestor reaped (container) between our creates: climb again
        try:
            yield from _make_parent(missing[-1], acl, container)
        except NoNodeError:
            parent = missing[-1].rsplit("/", 1)[0]
            if not parent:
                raise LockError("the client's chroot does not exist; create it first") from None
            missing.append(parent)
            continue
        missing.pop()
        if not missing:
            return
    raise LockError(f"could not create {path!r}: its ancestors keep disappearing")


def _make_parent(path: str, acl: Sequence[ACL], container: bool) -> Steps[None]:
    """Create ``path`` (an existing node is fine); NoNodeError if its own parent is missing."""
    try:
        yield CreateParent(path, acl, container)
    except NodeExistsError:
        pass
    except (NoNodeError, NoAuthError, SessionExpiredError) + TRANSIENT:
        raise
    except KazooException:  # UnimplementedError / BadArguments from servers before 3.5: no containers
        if not container:
            raise
        yield from _make_parent(path, acl, False)


def delete_answer(path: str, error: Optional[BaseException], tries: int = 1) -> Optional[bool]:
    """A driver's answer to :class:`Delete` from how its ``tries`` attempts ended (``error``: None if deleted)."""
    if error is None:
        return True
    if isinstance(error, NoNodeError):
        return None if tries == 1 else True  # gone before our only try: someone else deleted it
    if isinstance(error, (SessionExpiredError, SessionGone)):
        return False
    log.error("could not delete %s; it goes when the session ends", path, exc_info=error)
    return True


_RELIST = (NoNodeError, SessionExpiredError) + TRANSIENT  # a pipelined listing that failed: list again
_NO_NODE = QueueNode("", "", naming.WRITE, 0)  # a non-sequential node (ExclusiveLock's ``lock``)


def _own_nodes(parent: str, prefix: str, guid: str, sequence: bool) -> Steps[List[Entry]]:
    """This session's nodes that carry ``guid``, read after a ``sync`` so that a create applied late
    (across a ZooKeeper leader change) is seen."""
    try:
        _, sid = yield from in_session(Read("sync", parent))
        names = [n for n in (yield Read("get_children", parent)) if n.startswith(prefix)] if sequence else [prefix]
    except NoNodeError:
        return []
    found = []
    for name in names:
        try:
            data, stat = yield Read("get", f"{parent}/{name}")
        except NoNodeError:
            continue
        # our guid: in the name (kazoo's and Curator's formats), or in zkrecipes' JSON data
        if (guid in name or naming.read_data(data).get("guid") == guid) and owns(stat, sid):
            found.append(Entry(f"{parent}/{name}", naming.parse(name) or _NO_NODE, stat.czxid, sid))
    return found


def find_own(parent: str, prefix: str, guid: str, sequence: bool) -> Steps[Optional[Entry]]:
    """After a create whose reply was lost: our node is the one with our guid and our session (a node
    of our previous session is not ours: it is going away). Extra copies are deleted."""
    found = sorted((yield from _own_nodes(parent, prefix, guid, sequence)), key=lambda e: e.token)
    for extra in found[1:]:
        yield Delete(extra.path, extra.session)
    return found[0] if found else None


# -- the one-node race (ExclusiveLock) ----------------------------------------------------------------
def race(
    parent: str,
    acl: Sequence[ACL],
    name: str,
    data: bytes,
    guid: str,
    seen: Optional[Callable[[int], None]] = None,
    fmt: NodeFormat = formats.get(formats.ZKRECIPES, "exclusive"),
    peek: bool = False,
) -> Steps[Entry]:
    """Whoever creates ``<parent>/<name>`` holds it; the others watch it and race again when it goes
    (``seen(1)`` as :func:`acquire`'s: the holder is ahead). The parent is listed in the same round trip
    as each create: a node of another recipe there (``fmt.alone``) raises LockError, our node deleted.
    Of two recipes that create at once, the later create's listing shows the earlier node: never both held.
    With ``peek`` (a non-blocking attempt) the parent is listed first: DeadlinePassed if ``name`` is there,
    LockError for a node of another recipe, nothing written either way."""
    path = f"{parent}/{name}"
    if peek:
        try:
            children = yield Read("get_children", parent)
        except NoNodeError:  # a new key: nobody there
            children = []
        fmt.alone(parent, children, written=False)
        if name in children:
            raise DeadlinePassed()
    while True:
        try:
            entry, children = yield from create(parent, acl, name, data, guid, sequence=False, listing=True)
        except NodeExistsError:  # someone holds it
            pass
        else:
            granted = yield from _alone(parent, entry, children, fmt)
            if granted is not None:
                return granted
            continue
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
                granted = yield from _alone(parent, entry_or_none, None, fmt)
                if granted is not None:
                    return granted
                continue
        if seen is not None:
            seen(1)
        yield SLEEP


def _alone(parent: str, entry: Entry, children: Optional[List[str]], fmt: NodeFormat) -> Steps[Optional[Entry]]:
    """``entry`` once the listing taken after its create (``children``, read now if None) shows no node of
    another recipe; else our node is deleted and LockError raised. None if the parent (so our node) is gone."""
    try:
        if children is None:
            children = yield Read("get_children", parent)
        fmt.alone(parent, children)
    except NoNodeError:  # the parent went, so our node went first (its session ended)
        return None
    except GeneratorExit:
        raise
    except BaseException:
        yield Delete(entry.path, entry.session)
        raise
    return entry


# -- observing -----------------------------------------------------------------------------------------
def contenders(path: str) -> Steps[List[Contender]]:
    """Every node of the queue under ``path`` in order, with the data its owner wrote (reads pipelined),
    in any node format (zkrecipes, kazoo, Curator), and whether it holds (:func:`holding` over the
    listing). [] if the path does not exist; connection errors propagate."""
    try:
        nodes = formats.sort_any((yield Read("get_children", path)))
    except NoNodeError:  # never used, or an unused container parent was reaped: nobody there
        return []
    replies = yield ReadAll([f"{path}/{n.name}" for _, n in nodes])
    out = []
    for (found, n), reply, holds in zip(nodes, replies, holding([n for _, n in nodes])):
        if isinstance(reply, NoNodeError):
            continue
        if isinstance(reply, BaseException):
            raise reply
        out.append(formats.contender(found, n, reply[0], holds))
    return out
