"""The steps: what the engine (:mod:`zkrecipes._engine`) asks of its driver, and the errors a driver throws in.

A recipe's steps are a generator (:data:`Steps`) that yields these values and is sent their answers; the
drivers (:mod:`zkrecipes._drive`, :mod:`zkrecipes.aio._driver`) perform them. No I/O here: only the
vocabulary both sides share.
"""

from __future__ import annotations

from typing import Any, Callable, Generator, NamedTuple, Optional, Sequence, TypeVar

from kazoo.security import ACL

from .naming import QueueNode

T = TypeVar("T")


class SessionGone(Exception):
    """Raised by a driver's delete: the session that owned the node has ended (the node went with it)."""


class DeadlinePassed(Exception):
    """Thrown in by a driver: the run's deadline passed."""


class Taken(Exception):
    """Raised by the steps: a non-blocking attempt (``peek``) found the lock taken; nothing was written."""


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
    """``set_data`` of ``data`` on someone else's node, if its data ``version`` is still that
    (:mod:`zkrecipes.revoke`'s mark). Retried on transient errors: a retry of a write that was applied
    answers BadVersionError, so the steps read again. Answer: the node's new stat."""

    path: str
    version: int
    data: bytes


class DeleteVersion(NamedTuple):
    """Delete someone else's node if its data ``version`` is still that (a break). Retried on transient
    errors: a retry of a delete that was applied answers NoNodeError. Answer: None."""

    path: str
    version: int


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


class Watched(NamedTuple):
    """A read that leaves the caller's watch: kazoo's ``<kind>_async(path, watch=watch)`` for ``kind`` in
    ``get_children`` (a child watch) and ``exists`` (a data watch, set on a missing node too: it fires once
    the node is made); kazoo calls ``watch`` once, on its I/O thread, at the next change (or as the connection
    drops). ``synced``, ``once`` and the retries as for :class:`Read`. Answer: kazoo's."""

    kind: str
    path: str
    watch: Callable[[Any], None]
    synced: bool = False
    once: bool = False


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
