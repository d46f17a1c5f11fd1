"""The engine, free of I/O, threads and clocks: every recipe's acquire, written once as generators.

A recipe's *steps* are a generator that *yields* what it needs (a create pipelined with a listing, a
read, a watch, a wait, a delete: :mod:`zkrecipes._steps`) and is *sent* the answer or has the error
thrown in. A driver performs the requests: :mod:`zkrecipes._drive` on the calling thread,
:mod:`zkrecipes.aio._driver` on an event loop. Drivers bound everything by the acquire's deadline and
cancel, thrown in as :class:`DeadlinePassed` / :class:`Cancelled`; the generators then delete the node
they made: no exit but success leaves one.

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
from typing import AbstractSet, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

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
from ._steps import NOW as NOW  # the steps the engine yields (re-exported: the drivers perform them)
from ._steps import PAUSE as PAUSE
from ._steps import SESSION as SESSION
from ._steps import SLEEP as SLEEP
from ._steps import STALE as STALE
from ._steps import UNWATCH as UNWATCH
from ._steps import Cancelled as Cancelled
from ._steps import Commit as Commit
from ._steps import CreateAndList as CreateAndList
from ._steps import CreateParent as CreateParent
from ._steps import DeadlinePassed as DeadlinePassed
from ._steps import Delete as Delete
from ._steps import DeleteOld as DeleteOld
from ._steps import DeleteVersion as DeleteVersion
from ._steps import Entry as Entry
from ._steps import Read as Read
from ._steps import ReadAll as ReadAll
from ._steps import SessionGone as SessionGone
from ._steps import Step as Step
from ._steps import Steps as Steps
from ._steps import T as T
from ._steps import Taken as Taken
from ._steps import WaitGate as WaitGate
from ._steps import Watch as Watch
from ._steps import Watched as Watched
from ._steps import Write as Write
from .errors import LockError
from .formats import NodeFormat
from .naming import QueueNode
from .retry import TRANSIENT

log = logging.getLogger("zkrecipes.engine")

Blockers = Union[None, QueueNode, Sequence[QueueNode]]
Rule = Callable[[List[QueueNode], QueueNode], Blockers]


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
    on_ahead: Optional[Callable[[int], None]] = None,
    peek: bool = False,
) -> Steps[Entry]:
    """Enqueue ``<parent>/<prefix><seq>`` and wait until ``rule`` finds no blocker; our node is deleted on
    every other exit. With ``confirm`` (elections), or if the waiter stood still meanwhile (:data:`STALE`),
    our node is read back before we return: it must still be ours. ``fmt`` (the node format) reads every
    listing: a child it cannot queue with, or a node of another recipe ahead of ours, raises LockError (our
    node deleted). ``on_ahead(n)``, if given, is told how many nodes are ahead of ours each time we are about
    to wait (from what we know anyway: no request).

    With ``peek`` (a non-blocking attempt) the queue is listed first and Taken raised, nothing
    written, if ``rule`` blocks a node at its back (:func:`_peek`); else we queue, and Taken
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
                if (confirm or stale) and not (yield from still_ours(entry.path, entry.session, synced=stale)):
                    entry = None
                    continue
                return entry
            if peek:
                raise Taken()  # a non-blocking attempt does not wait (nor watch)
            waited = True
            if on_ahead is not None:
                on_ahead(len(ahead))
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
    """A non-blocking attempt's look before it writes: one listing; Taken if ``rule`` blocks a node
    ``<prefix><seq>`` created now, at the back of the queue (its blockers stay ahead of anything we create
    later: nodes only join behind). LockError, nothing written, for a child ``fmt`` cannot queue with."""
    try:
        children = yield Read("get_children", parent)
    except NoNodeError:  # a new key: nobody there
        return
    ahead = fmt.queue(parent, children)
    if ahead and rule(ahead, naming.parse(f"{prefix}0000000000") or _NO_NODE):  # (the rules look at our kind)
        raise Taken()


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


def still_ours(path: str, session: int, synced: bool = False, once: bool = False) -> Steps[bool]:
    """The one confirm step, "is this node still ours": read ``path`` back; True if it exists, belongs to
    ``session`` (:func:`owns`) and that is the client's session still. ``synced`` after a stall: the
    session may have expired meanwhile, and a lagging follower must not say otherwise (a ``sync`` is
    pipelined first). ``once``: a check of what we hold -- one attempt, its error raised (ZooKeeper could
    not say). The queue's read-back, ``check()``, re-entry and a hold's own follow
    (:mod:`zkrecipes._follow`) all ask it here."""
    try:
        stat, sid = yield from in_session(Read("exists", path, once=once, synced=synced))
    except (NoNodeError, SessionExpiredError):
        return False
    return owns(stat, session) and sid == session


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
            except (NoNodeError, SessionExpiredError):  # the parent or the session went: our node with it
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
                    try:  # synced: it shows our node unless its session ended since (kazoo has a new one)
                        children = yield Read("get_children", parent, synced=True)
                    except (NoNodeError, SessionExpiredError):  # the parent or the session went: our node too
                        continue
                    if made not in children:  # gone with its session: queue again, never wait without it
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
