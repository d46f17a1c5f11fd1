"""Node formats: how our node is named, what its data holds, and which children we queue with.

Users choose one with the ``protocol=`` keyword of every recipe (the word is kept for them; inside the
package it is always a *node format*).

Three formats, so that one lock path can be shared with processes of another library:

* ``zkrecipes`` (the default): ``<host>-W-<seq>`` / ``<host>-R-<seq>``, small JSON data.
* ``kazoo``: kazoo's ``Lock`` / ``WriteLock`` / ``Election`` (``<uuid>__lock__<seq>``) and ``ReadLock``
  (``<uuid>__rlock__<seq>``), the identifier as data (kazoo 2.x ``kazoo/recipe/lock.py``).
* ``curator``: Apache Curator (checked against 5.4.0, Debian's ``libcurator-recipes-java``):
  ``InterProcessMutex`` ``_c_<uuid>-lock-<seq>``, ``InterProcessReadWriteLock`` ``_c_<uuid>-__READ__<seq>``
  / ``_c_<uuid>-__WRIT__<seq>``, ``LeaderLatch`` ``_c_<uuid>-latch-<seq>``.

The wait-rules are the same in all three (a writer waits for its predecessor, a reader for the nearest
writer ahead), and so is the order: the sequence suffix as an integer, wrap-aware
(:func:`zkrecipes.naming.distance`). Within the first 2^31 nodes of a parent that is exactly kazoo's and
Curator's order (both compare the ten-digit suffix as a string).

A node format never ignores a child it cannot queue with: :meth:`NodeFormat.ahead` raises
:class:`~zkrecipes.LockError` naming the format it found and the ``protocol=`` to use. Nor does it queue
with zkrecipes' nodes of another recipe: FairLock, ReadWriteLock and LeaderElection share one queue, a
Semaphore's leases and ExclusiveLock's ``lock`` node share a path with nothing (:meth:`NodeFormat.ahead`,
:meth:`NodeFormat.alone`; the error names the path, the node and the recipe that made it). Nodes that
zkrecipes itself makes in kazoo's format carry a mark in their uuid part (:data:`MARK`), so that
``protocol="kazoo"`` and the default format can run side by side while a fleet is switched from one to
the other (``zkrecipes status`` shows which nodes are kazoo's own).
"""

from __future__ import annotations

import functools
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from . import naming
from .errors import LockError
from .naming import READ, WRITE, Contender, QueueNode

ZKRECIPES = "zkrecipes"
KAZOO = "kazoo"
CURATOR = "curator"
NAMES = (ZKRECIPES, KAZOO, CURATOR)
RECIPES = ("lock", "rw", "election", "exclusive", "semaphore")  # what get() is told a node format is for

# "zkrecipe" in hex: the start of the uuid part of nodes zkrecipes makes in kazoo's or Curator's format. A
# uuid4 (what kazoo and Curator use) has the version digit 4 at index 12 (14 in the dashed form); this
# mark has a 7 there, so a node of kazoo or Curator itself is never taken for one of ours.
MARK = "7a6b726563697065"
_CURATOR_MARK = "_c_7a6b7265-6369-7065-"
_OWN_TAGS = ("-W-", "-R-")
EXCLUSIVE_NODE = "lock"  # ExclusiveLock's one node, ``<path>/lock``: no sequence, so no place in a queue's order


class Found(NamedTuple):
    """What :func:`identify` makes of a child name."""

    format: str  # "zkrecipes", "kazoo" or "curator": the name given as ``protocol=``
    recipe: str  # "lock" (FairLock, kazoo Lock, Curator InterProcessMutex), "rw", "election" (Curator latch)
    node: QueueNode
    ours: bool  # made by zkrecipes (its own format, or marked in a foreign one)
    what: str  # the recipe that makes such nodes, for messages

    @property
    def protocol(self) -> str:
        """Deprecated alias of :attr:`format` (the name given as ``protocol=``)."""
        return self.format

    @property
    def family(self) -> str:
        """Deprecated alias of :attr:`recipe`."""
        return self.recipe


# marker, kind, format, recipe, the recipe that writes it, the zkrecipes recipe that shares it
_MARKERS: Tuple[Tuple[str, str, str, str, str, str], ...] = (
    ("__rlock__", READ, KAZOO, "lock", "kazoo ReadLock", "ReadWriteLock(..., protocol='kazoo')"),
    ("__lock__", WRITE, KAZOO, "lock", "kazoo Lock/WriteLock/Election",
     "FairLock, ReadWriteLock or LeaderElection with protocol='kazoo'"),
    ("__READ__", READ, CURATOR, "rw", "Curator InterProcessReadWriteLock (read)",
     "ReadWriteLock(..., protocol='curator')"),
    ("__WRIT__", WRITE, CURATOR, "rw", "Curator InterProcessReadWriteLock (write)",
     "ReadWriteLock(..., protocol='curator')"),
    ("latch-", WRITE, CURATOR, "election", "Curator LeaderLatch", "LeaderElection(..., protocol='curator')"),
    ("lock-", WRITE, CURATOR, "lock", "Curator InterProcessMutex/LeaderSelector", "FairLock(..., protocol='curator')"),
)
_SHARE = {m[0]: m[5] for m in _MARKERS}
_CURATOR_TAGS: Dict[str, Dict[str, str]] = {
    "lock": {WRITE: "lock-"}, "rw": {WRITE: "__WRIT__", READ: "__READ__"}, "election": {WRITE: "latch-"},
}


def _tail_sequence(tail: str) -> Optional[int]:
    """ZooKeeper's suffix as an int: ten digits, or past 2^31-1 a minus sign and nine or ten digits."""
    if len(tail) == 10 and tail.isdigit() and tail.isascii():
        return int(tail)
    if len(tail) in (10, 11) and tail[0] == "-" and tail[1:].isdigit() and tail[1:].isascii():
        value = -int(tail[1:])
        return value if value >= -(1 << 31) else None
    return None


def own(name: str) -> Optional[QueueNode]:
    """Parse a zkrecipes node name ``<host>-<K>-<seq>`` (or a lease, ``<host>-S<N>-<seq>``); None for any
    other name."""
    head, sep, tail = name.rpartition("-")
    if sep and len(tail) == 10 and tail.isdigit() and tail.isascii() and head[-2:] in ("-R", "-W"):
        return QueueNode(name, head[:-2], head[-1], int(tail))  # fast path
    split = naming.split_sequence(name)
    if split is None:
        return None
    if split[0].endswith(_OWN_TAGS):
        return QueueNode(name, split[0][:-3], split[0][-2], split[1])
    node = naming.parse(name)  # a semaphore's lease, ``<host>-S<N>-<seq>``
    return node if node is not None and node.kind == naming.LEASE else None


def identify(name: str) -> Optional[Found]:
    """Which library's queue node ``name`` is (zkrecipes, kazoo, Curator), or None if none of them."""
    node = own(name)
    if node is not None:
        return Found(ZKRECIPES, "queue", node, True, "zkrecipes")
    for marker, kind, fmt, recipe, what, _ in _MARKERS:
        i = name.rfind(marker)  # Curator sorts by the text after the last occurrence, kazoo's regex is anchored
        if i < 0:
            continue
        seq = _tail_sequence(name[i + len(marker):])
        if seq is None:
            continue
        ours = name.startswith(MARK) if fmt == KAZOO else name.startswith(_CURATOR_MARK)
        return Found(fmt, recipe, QueueNode(name, "", kind, seq), ours, what)
    return None


def sort_any(children: Sequence[str]) -> List[Tuple[Optional[Found], QueueNode]]:
    """Every child with a sequence suffix, identified (None: unknown format), in wrap-aware queue order."""
    out = []
    for name in children:
        found = identify(name)
        node = found.node if found is not None else naming.parse(name)
        if node is not None:
            out.append((found, node))
    if out:
        ref = out[0][1].sequence
        out.sort(key=lambda fn: naming.distance(fn[1].sequence, ref))
    return out


def contender(
    found: Optional[Found], node: QueueNode, data: Optional[bytes], holding: bool = False, token: Optional[int] = None
) -> Contender:
    """A :class:`~zkrecipes.Contender` of any format: zkrecipes' JSON, or the identifier kazoo and Curator
    store as data (Curator's default is the host's address)."""
    if found is None or found.format == ZKRECIPES:
        return naming.contender(node, data, holding, token)
    try:
        text: Optional[str] = (data or b"").decode("utf-8") or None
    except UnicodeDecodeError:
        text = None
    return Contender(node.name, node.host, node.kind, node.sequence, text, None, holding, token)


def label(found: Optional[Found]) -> str:
    """The format of a node for ``zkrecipes status``: ``zkrecipes``, ``kazoo``, ``curator``, ``kazoo
    (zkrecipes)`` / ``curator (zkrecipes)`` for nodes zkrecipes made in those formats, or ``unknown``."""
    if found is None:
        return "unknown"
    if found.format != ZKRECIPES and found.ours:
        return f"{found.format} (zkrecipes)"
    return found.format


_QUEUE_KINDS = frozenset({READ, WRITE})  # FairLock, ReadWriteLock and LeaderElection: one queue
_TITLES = {"lock": "FairLock", "rw": "ReadWriteLock", "election": "LeaderElection", "exclusive": "ExclusiveLock",
           "semaphore": "Semaphore"}  # the recipe a node format is for, as its users call it


def maker(name: str) -> Optional[str]:
    """Which recipe made the child ``name``, for messages (``"a Semaphore (max_leases 2)"``, ``"an
    ExclusiveLock"``, ``"kazoo ReadLock (kazoo format)"``), or None if no recipe of zkrecipes, kazoo or
    Curator did."""
    if name == EXCLUSIVE_NODE:
        return "an ExclusiveLock"
    found = identify(name)
    if found is None:
        return None
    if found.format != ZKRECIPES:
        return f"{found.what} ({found.format} format)"
    if found.node.kind == naming.LEASE:
        return f"a Semaphore (max_leases {found.node.leases})"
    if found.node.kind == READ:
        return "a ReadWriteLock (read side)"
    return "a FairLock, ReadWriteLock (write side) or LeaderElection"


class NodeFormat:
    """One node format for one kind of recipe: names, data, and the children it queues with.

    ``recipe`` is one of :data:`RECIPES`: ``"lock"`` (FairLock), ``"rw"`` (ReadWriteLock's two sides),
    ``"election"``, ``"exclusive"`` or ``"semaphore"``. It says which kinds of zkrecipes node we queue with
    (:attr:`kinds`) and, for Curator, which names (its mutex, read/write lock and leader latch differ).
    """

    def __init__(self, name: str, recipe: str) -> None:
        self.name = name
        self.recipe = recipe
        self._tags: Dict[str, str] = {}
        if name == KAZOO:
            self._tags = {WRITE: "__lock__", READ: "__rlock__"}
        elif name == CURATOR:
            self._tags = _CURATOR_TAGS[recipe]

        # kazoo makes a missing parent once per lock object (ensure_path) and never again: a container
        # parent, reaped while the queue is empty, would fail its next create. Curator makes containers.
        self.containers = name != KAZOO
        # the kinds of node we queue with: a lease only with leases, ExclusiveLock's node with none
        self.kinds = {"semaphore": frozenset({naming.LEASE}), "exclusive": frozenset()}.get(recipe, _QUEUE_KINDS)
        self._fast = name == ZKRECIPES and READ in self.kinds  # -W-/-R- names need no parse (see ahead)

    def __repr__(self) -> str:
        return f"<NodeFormat {self.name} ({self.recipe})>"

    # -- our node ------------------------------------------------------------------------------------
    def node(self, host: str, kind: str, identifier: Optional[str]) -> Tuple[str, bytes, str]:
        """``(prefix, data, guid)`` of our next node: see :meth:`prefix`, :meth:`data`, :meth:`new_guid`."""
        if self.name == ZKRECIPES:  # the hot path: one call
            guid = naming.new_guid()
            return f"{host}-{kind}-", naming.node_data(identifier, guid, host), guid
        guid = self.new_guid()
        return self.prefix(host, kind, guid), self.data(identifier, guid, host), guid

    def new_guid(self) -> str:
        """A random per-acquire id; kazoo and Curator formats carry it in the node name."""
        if self.name == ZKRECIPES:
            return naming.new_guid()
        h = os.urandom(8).hex()
        return h if self.name == KAZOO else f"{h[:4]}-{h[4:]}"

    def prefix(self, host: str, kind: str, guid: str) -> str:
        """The name of our sequential create (ZooKeeper appends the sequence)."""
        if self.name == ZKRECIPES:
            return naming.prefix(host, kind)
        try:
            tag = self._tags[kind]
        except KeyError:
            raise ValueError(f"protocol={self.name!r} has no {kind!r} nodes for {self.recipe}") from None
        if self.name == KAZOO:
            return f"{MARK}{guid}{tag}"  # kazoo: uuid4().hex + "__lock__"
        return f"{_CURATOR_MARK}{guid}-{tag}"  # Curator's protection: "_c_" + UUID + "-" + lock name

    def data(self, identifier: Optional[str], guid: str, host: str) -> bytes:
        """Our node's data: zkrecipes' JSON; kazoo's identifier (or nothing); Curator's identifier (or, as
        Curator writes by default, this host)."""
        if self.name == ZKRECIPES:
            return naming.node_data(identifier, guid, host)
        if self.name == KAZOO:
            return (identifier or "").encode()
        return (identifier or host).encode()

    # -- the queue -----------------------------------------------------------------------------------
    def parse(self, name: str) -> Optional[QueueNode]:
        """``name`` as a member of our queue, or None if this node format cannot queue with it."""
        if self.name == ZKRECIPES:
            node = own(name)
            if node is not None:
                return node
        found = identify(name)
        if found is None:
            return None
        if self.name == ZKRECIPES:  # nodes zkrecipes made in kazoo's format, while a fleet switches over
            return found.node if found.format == KAZOO and found.ours else None
        if self.name == KAZOO:  # and zkrecipes' own nodes, for the same switch
            return found.node if found.format in (KAZOO, ZKRECIPES) else None
        if found.format == CURATOR and found.recipe == self.recipe:
            return found.node
        return None

    def ahead(
        self, parent: str, children: Sequence[str], mine: int, fresh: bool = False
    ) -> Tuple[List[QueueNode], bool]:
        """``(nodes ahead of sequence mine in queue order, whether mine is listed)``; raises LockError
        for any child this node format cannot queue with, ahead of us or behind, and for a node of
        another zkrecipes recipe ahead of us (:meth:`conflict`).

        A zkrecipes node of another recipe *behind* us is let be: it was created after ours, so the
        listing its own create came with showed ours, and it refuses itself. ExclusiveLock's ``lock``
        node has no sequence: only a ``fresh`` listing (the one pipelined with our create) may show one
        older than ours; one that a later listing shows was created after ours, and refuses itself."""
        names, seen, distance, kinds = [], False, naming.distance, self.kinds
        fast = self._fast
        for name in children:
            tail = name[-10:]
            if fast and name[-13:-10] in _OWN_TAGS and tail.isdigit() and tail.isascii():
                seq = int(tail)  # our own names: no full parse for the (many) nodes behind us
            else:
                node = self.parse(name)
                if node is None:
                    if name != EXCLUSIVE_NODE:
                        raise self.refusal(parent, name)
                    if fresh:
                        raise self.conflict(parent, name)
                    continue
                seq = node.sequence
                if node.kind not in kinds and distance(seq, mine) < 0:
                    raise self.conflict(parent, name)
            d = distance(seq, mine)
            if d < 0:
                names.append(name)
            elif d == 0:
                seen = True
        return (self.sort(names) if names else []), seen

    def queue(self, parent: str, children: Sequence[str]) -> List[QueueNode]:
        """A non-blocking attempt's look before it writes: every node of ``children`` in queue order, so the
        nodes a node of ours created now would have ahead of it (nodes only join behind). Raises LockError,
        as :meth:`ahead` on the listing of our create would, for any child we cannot queue with or a node of
        another recipe (nothing written)."""
        nodes = []
        for name in children:
            node = self.parse(name)
            if node is None and name != EXCLUSIVE_NODE:
                raise self.refusal(parent, name, written=False)
            if node is None or node.kind not in self.kinds:
                raise self.conflict(parent, name, written=False)
            nodes.append(node)
        return _ordered(nodes)

    def alone(self, parent: str, children: Sequence[str], written: bool = True) -> None:
        """ExclusiveLock's check of the listing pipelined with its create of ``<parent>/lock`` (or, not
        ``written``, of a non-blocking attempt's look before it): raise LockError for a node that any recipe
        of zkrecipes, kazoo or Curator made (``lock`` has no place in their order, so any of them may be
        older than ours). Other children are not lock nodes: let be."""
        for name in children:
            found = identify(name) if name != EXCLUSIVE_NODE else None
            if found is not None:
                raise (self.conflict if found.format == ZKRECIPES else self.refusal)(parent, name, written)

    def sort(self, children: Sequence[str]) -> List[QueueNode]:
        """The children this node format queues with, in wrap-aware order (others dropped: for observers)."""
        return _ordered([n for n in map(self.parse, children) if n is not None])

    def conflict(self, parent: str, name: str, written: bool = True) -> LockError:
        """The error for a zkrecipes node of another recipe: the path, the node, the recipe that made it;
        ``written``: our node was made (and is deleted), else nothing was."""
        ours = _TITLES.get(self.recipe, self.recipe)
        article = "an" if ours[0] in "AEIOU" else "a"
        return LockError(
            f"{parent}: {article} {ours} cannot share this path: child {name!r} is a node of {maker(name)}. "
            "Only FairLock, ReadWriteLock and LeaderElection may share a path; give every other recipe a path "
            f"of its own. {_OUTCOME[written]}"
        )

    def refusal(self, parent: str, name: str, written: bool = True) -> LockError:
        """The error for a child we cannot queue with: the format found and the ``protocol=`` to use."""
        found = identify(name)
        if found is None:
            what = "not a lock node of zkrecipes, kazoo or Curator"
            fix = "keep other nodes out of lock paths, or give this lock a path of its own"
        elif found.format == ZKRECIPES:
            what = f"a zkrecipes node of {maker(name)} (protocol='zkrecipes')"
            fix = "use the same protocol= in every zkrecipes process of this path"
        else:
            marker = next(m[0] for m in _MARKERS if m[4] == found.what)
            what = f"a {found.what} node ({found.format} format)"
            fix = f"share this path with {_SHARE[marker]} in every zkrecipes process"
        return LockError(
            f"{parent}: refusing to queue with protocol={self.name!r}: child {name!r} is {what}; mixed formats "
            f"do not exclude each other. Fix: {fix}. {_OUTCOME[written]}"
        )


_OUTCOME = {True: "Our node was deleted.", False: "Nothing was written."}  # the end of a refusal


def _ordered(nodes: List[QueueNode]) -> List[QueueNode]:
    """``nodes`` in wrap-aware queue order (sorted in place)."""
    if nodes:
        ref = nodes[0].sequence
        nodes.sort(key=lambda n: naming.distance(n.sequence, ref))
    return nodes


@functools.lru_cache(maxsize=None)
def _get(name: str, recipe: str) -> NodeFormat:
    return NodeFormat(name, recipe)


DEFAULT = _get(ZKRECIPES, "lock")


def get(name: object, recipe: str) -> NodeFormat:
    """The node format called ``name`` (as given to ``protocol=``) for a ``recipe`` (one of
    :data:`RECIPES`); TypeError/ValueError naming a bad value."""
    if not isinstance(name, str):
        raise TypeError(f"protocol must be a str, one of {', '.join(NAMES)}; got {name!r}")
    if name not in NAMES:
        raise ValueError(f"protocol must be one of {', '.join(map(repr, NAMES))}, got {name!r}")
    only = _ONLY_ZKRECIPES.get(recipe)
    if only is not None and name != ZKRECIPES:
        raise ValueError(f"{only} supports protocol 'zkrecipes' only, got protocol={name!r} (kazoo's and "
                         f"Curator's {recipe} nodes would not see ours: two {recipe}s that ignore each other)"
                         + ("; use FairLock(..., protocol=...)" if recipe == "exclusive" else ""))
    return _get(name, recipe)


_ONLY_ZKRECIPES = {"exclusive": "ExclusiveLock", "semaphore": "Semaphore"}  # recipes with no foreign format
