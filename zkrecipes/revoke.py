"""Revocation and break: ask a lock's holders to let go, or delete exactly one holder's node.

:func:`request_revoke` stores a mark on each current holder's node (its data: zkrecipes' JSON gains
``"revoke": true``, other data becomes Curator's ``__REVOKE__``); a holder that listens is told
(``revoke_requested``, listeners called with ``"revoke-requested"``) and nothing is taken from it.
:func:`break_lock` deletes the one holder's node whose fencing token (czxid) is the one given, and refuses
anything else; with a ``grace`` it asks that holder first and deletes only if its node is still there when
the grace is over. Both work on every recipe and node format (zkrecipes, kazoo, Curator); who holds is
decided from one listing by the recipes' own wait-rules. Written once as engine steps
(:mod:`zkrecipes._engine`), run on the calling thread here and on the event loop by :mod:`zkrecipes.aio`.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from . import formats, naming
from ._drive import Driver, never
from ._engine import SLEEP, DeadlinePassed, DeleteVersion, Read, Steps, Watch, Write
from ._listing import Listed, listing
from ._transport import Part
from .errors import LockError

_TRIES = 3  # a write whose node changed meanwhile is tried again after one read (only marks change data)


def validate_token(token: object) -> int:
    """Return ``token`` if it is a fencing token (a czxid: an int >= 1, not a bool), else raise."""
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"token must be an int (a lock's fencing token), got {type(token).__name__} {token!r}")
    if not 1 <= token < 1 << 63:
        raise ValueError(f"token must be a czxid between 1 and 2**63-1, got {token!r}")
    return token


def validate_grace(grace: object) -> float:
    """Return ``grace`` (seconds a break waits for the holder it asked, >= 0 and finite) as a float, else raise."""
    if isinstance(grace, bool) or not isinstance(grace, (int, float)):
        raise TypeError(f"grace must be a number of seconds, got {type(grace).__name__} {grace!r}")
    if math.isnan(grace) or not 0 <= grace < math.inf:
        raise ValueError(f"grace must be a finite number of seconds >= 0, got {grace!r}")
    return float(grace)


class Broken(str):
    """What :func:`break_lock` returns: the name of the holder's node (a ``str``, as before), and whether
    that holder let go by itself within the grace (``released``: nothing was deleted) or its node was
    deleted (``released`` False)."""

    released: bool

    def __new__(cls, name: str, released: bool = False) -> "Broken":
        self = super().__new__(cls, name)
        self.released = released
        return self


def checked(client: object, path: object) -> Tuple[KazooClient, str]:
    """``(client, path)`` if they are a KazooClient and a valid lock path, else TypeError/ValueError."""
    if not isinstance(client, KazooClient):
        raise TypeError(f"client must be a kazoo KazooClient, got {client!r}")
    return client, naming.validate_path(path)


def _holders_read(path: str) -> Steps[List[Listed]]:
    """The current holders of ``path`` in queue order, with the data and stat read with each: the one listing
    (:func:`zkrecipes._listing.listing`: ExclusiveLock's ``lock`` node, and each queue node its recipe's
    wait-rule finds unblocked, in any node format), synced first: our server has then seen every grant made
    before this call (a server lagging behind would show an older queue). [] if nobody holds."""
    return (yield from listing(path, synced=True, exclusive=True, holders=True))


def revoke_steps(path: str) -> Steps[List[str]]:
    """Mark every current holder's node of ``path`` (see :func:`request_revoke`); the names marked."""
    marked = []
    for held in (yield from _holders_read(path)):
        name = held.contender.node
        if (yield from _mark(f"{path}/{name}", (held.data, held.stat))):
            marked.append(name)
    return marked


def _mark(node: str, reply: Any) -> Steps[bool]:
    """Mark ``node`` (``reply``: its ``(data, stat)`` read, or NoNodeError) as a revoke request, conditional
    on its data version; False if it is gone (released meanwhile: nothing to ask)."""
    for _ in range(_TRIES):
        if isinstance(reply, NoNodeError):
            return False
        data, stat = reply
        if naming.revoke_marked(data):
            return True
        try:
            yield Write(node, stat.version, naming.with_revoke_mark(data))
        except (BadVersionError, NoNodeError):  # changed or gone meanwhile (or our retried write applied)
            try:
                reply = yield Read("get", node)
            except NoNodeError as gone:
                reply = gone
            continue
        return True
    raise LockError(f"{node}: its data keeps changing; not marked")


def _find(path: str, token: int) -> Steps[Tuple[str, Any]]:
    """``(name, (data, stat))`` of the current holder of ``path`` whose czxid is ``token``; LockError naming
    the holders and their tokens if there is none."""
    found = yield from _holders_read(path)
    for held in found:
        if held.contender.token == token:
            return held.contender.node, (held.data, held.stat)
    others = ", ".join(f"{h.contender.node} has token {h.contender.token}" for h in found) or "it has no holder"
    raise LockError(f"{path}: no holder has token {token} ({others}); a waiter's node is never broken. "
                    "Nothing was deleted.")


def break_steps(path: str, token: int) -> Steps[str]:
    """Delete the holder's node of ``path`` whose czxid is ``token`` (see :func:`break_lock`); its name."""
    name, (data, stat) = yield from _find(path, token)
    return (yield from _delete(f"{path}/{name}", token, data, stat.version))


def ask_steps(path: str, token: int) -> Steps[str]:
    """Mark the one holder's node of ``path`` whose czxid is ``token`` as a revoke request; its name.
    LockError (nothing marked) if no current holder has that token."""
    name, reply = yield from _find(path, token)
    yield from _mark(f"{path}/{name}", reply)  # gone meanwhile: what the wait for it finds at once
    return name


def gone_steps(node: str, token: int) -> Steps[bool]:
    """Wait on a data watch until ``node`` (czxid ``token``) is gone; True then, False at the run's deadline.
    A node made again at that path (ExclusiveLock's ``lock``) is another holder's: ours is gone."""
    try:
        while True:
            stat = yield Watch(node)
            if stat is None or stat.czxid != token:
                return True
            if node in (yield SLEEP):  # else woken by a data change (our mark) or the session: watch again
                return True
    except DeadlinePassed:
        return False


def _after_grace(path: str, token: int) -> Steps[Optional[str]]:
    """The grace is over: delete the node if its holder still holds (its name); None if it let go meanwhile."""
    try:
        name, (data, stat) = yield from _find(path, token)
    except LockError:
        return None  # it went between the wait's end and this look
    return (yield from _delete(f"{path}/{name}", token, data, stat.version))


def breaking(path: str, token: int, grace: float) -> Steps[Broken]:
    """:func:`break_lock` as steps: with a ``grace``, ask the holder, wait up to ``grace`` seconds for its
    node to go (a :class:`~zkrecipes._transport.Part` bounded by the grace), then delete it if it is still
    there; without, delete it at once."""
    if not grace:
        return Broken((yield from break_steps(path, token)), released=False)
    name = yield from ask_steps(path, token)
    if (yield Part(gone_steps(f"{path}/{name}", token), within=grace)):
        return Broken(name, released=True)
    deleted = yield from _after_grace(path, token)
    return Broken(name, released=deleted is None)


def _delete(node: str, token: int, data: bytes, version: int) -> Steps[str]:
    """Delete ``node`` while its czxid is ``token``: conditional on the data version read with it. A queue
    node's name is never reused; ExclusiveLock's ``lock`` is, at version 0 again, so it is first marked
    (as :func:`request_revoke` would): the write's reply says whose node now has the version we delete."""
    name = node.rsplit("/", 1)[1]
    if name == formats.EXCLUSIVE_NODE:
        try:
            stat = yield Write(node, version, naming.with_revoke_mark(data))
        except (BadVersionError, NoNodeError):
            stat = yield Read("exists", node)  # changed, gone, or our retried write was applied
        if stat is None:
            return name
        if stat.czxid != token:
            raise LockError(f"{node}: the holder with token {token} left; the new holder's node (token "
                            f"{stat.czxid}) was not deleted (it may have been asked to let go)")
        version = stat.version
    for _ in range(_TRIES):
        try:
            yield DeleteVersion(node, version)
        except NoNodeError:
            return name  # gone already: released meanwhile, or our retried delete was applied
        except BadVersionError:  # its data changed (a revoke mark): read again
            stat = yield Read("exists", node)
            if stat is None:
                return name
            if stat.czxid != token:  # ExclusiveLock's ``lock`` node, made again by a new holder
                raise LockError(f"{node}: the holder with token {token} left; the new holder's node "
                                f"(token {stat.czxid}) was not deleted") from None
            version = stat.version
            continue
        return name
    raise LockError(f"{node}: its data keeps changing; not deleted")


def request_revoke(client: KazooClient, path: str) -> List[str]:
    """Ask the current holder(s) of the lock at ``path`` to let go; returns the names of the nodes marked.

    A mark ZooKeeper stores on each holder's node (a mutex's one holder; every reader or lease holder),
    not a delete: a zkrecipes holder that listens sees its lock's ``revoke_requested`` set and its
    listeners called with ``"revoke-requested"``, a Curator holder made revocable its listener called;
    nothing is taken from any of them. ``[]`` if nobody holds (or the path does not exist): nothing to
    ask. Any recipe and node format. Bad input raises TypeError/ValueError before any request;
    connection errors are raised."""
    client, path = checked(client, path)
    return Driver(client, None, never, None, path=path).run(revoke_steps(path))


def break_lock(client: KazooClient, path: str, token: int, *, grace: float = 0.0) -> Broken:
    """Delete exactly the holder's node of ``path`` whose fencing token (czxid) is ``token``; returns its
    name (a :class:`Broken`, a ``str``). The holder, if it listens (see :attr:`FairLock.revoke_requested
    <zkrecipes.FairLock.revoke_requested>`), sees its hold lost at once; any holder's fenced transaction
    refuses from then on -- except an ExclusiveLock's, once the next holder has made ``lock`` again
    (docs/revocation.rst: its fence and release see a node at that path).

    With ``grace`` seconds (> 0), that holder is asked first (its node marked as by
    :func:`request_revoke`, and only its node), and the node is deleted only if it is still there
    ``grace`` seconds later (waited for on a data watch): ``released`` on the result says the holder let
    go by itself within the grace (nothing deleted). ``0``, the default, deletes at once.

    Raises LockError, deleting nothing, when no current holder has that token: another holder's, a
    waiter's, a node gone. The delete is conditional on the data version read with the token: a queue's
    node names are never reused, so no other node can be deleted. ExclusiveLock's ``lock`` node is made
    again at the same path: it is marked first (one more round trip), and the mark's reply says it is
    still the node with that token; only a ``lock`` made again and marked by someone else within the next
    round trip could be taken for it. Bad input raises TypeError/ValueError before any request."""
    client, path = checked(client, path)
    token = validate_token(token)
    grace = validate_grace(grace)
    return Driver(client, None, never, None, path=path).run(breaking(path, token, grace))
