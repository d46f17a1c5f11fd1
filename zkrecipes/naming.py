"""Node names ``<host>-<K>-<seq10>``, node data, and validation of user-supplied paths and labels.

Sequence numbers are parsed from the right (host labels may contain ``-``) and compared as integers.
Every validator raises ``TypeError``/``ValueError`` naming the bad value, before any ZooKeeper call.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import socket
import threading
from typing import Any, Dict, NamedTuple, Optional, Tuple

READ = "R"
WRITE = "W"
LEASE = "S"  # a semaphore's lease: ``<host>-S<max_leases>-<seq>``
MAX_LEASES = 1_000_000
_LEASE_HEAD = re.compile(r"-S([1-9][0-9]{0,6})-$")
_SEQ = re.compile(r"(?<!\d)(\d{9,10})$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class QueueNode(NamedTuple):
    """One child of a queue: its name, host label, kind (``"R"``/``"W"``/``"S"``), integer sequence and,
    for a lease (``S``), the semaphore's ``max_leases`` written in its name (0 otherwise)."""

    name: str
    host: str
    kind: str
    sequence: int
    leases: int = 0


class Contender(NamedTuple):
    """A participant as stored in ZooKeeper, in queue order; ``identifier``/``pid`` None if unreadable.
    ``holding``: the node holds (by its recipe's wait-rule over the listing read), else it waits.
    ``token``: the node's czxid, its holder's fencing token (what ``zkrecipes break --token`` and
    :func:`~zkrecipes.break_lock` take); None only where a Contender is built without a read of its node."""

    node: str
    host: str
    kind: str
    sequence: int
    identifier: Optional[str]
    pid: Optional[int]
    holding: bool = False
    token: Optional[int] = None


MAX_PATH_BYTES = 16384  # a lock path: every request of a lock names it (ZooKeeper's packet limit is 1 MB)


def validate_path(path: object) -> str:
    """Return ``path`` if it is a usable absolute ZooKeeper path for a lock, else raise."""
    if not isinstance(path, str):
        raise TypeError(f"lock path must be a str, got {type(path).__name__} {path!r}")
    if not path.startswith("/"):
        raise ValueError(f"lock path must be absolute (start with '/'), got {path!r}")
    if path == "/":
        raise ValueError("lock path must not be the root '/'")
    if path.endswith("/"):
        raise ValueError(f"lock path must not end with '/', got {path!r}")
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:  # every request names it: past ZooKeeper's packet limit it drops the connection
        raise ValueError(f"lock path is {size} bytes; the limit is {MAX_PATH_BYTES} bytes")
    parts = path[1:].split("/")
    for part in parts:
        if part == "":
            raise ValueError(f"lock path has an empty segment ('//'): {path!r}")
        if part in (".", ".."):
            raise ValueError(f"lock path has a relative segment {part!r}: {path!r}")
        if _CONTROL.search(part):
            raise ValueError(f"lock path has a control character: {path!r}")
    if parts[0] == "zookeeper":
        raise ValueError(f"lock path must not be inside the reserved /zookeeper subtree: {path!r}")
    return path


MAX_LABEL_BYTES = 4096  # identifier, host: far below ZooKeeper's 1 MB packet limit, ample for a label


def validate_label(what: str, value: object, *, allow_empty: bool = False) -> str:
    """Return ``value`` if it is a str of at most :data:`MAX_LABEL_BYTES` (UTF-8) without ``/`` or control
    characters, else raise naming ``what``."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__} {value!r}")
    if not value and not allow_empty:
        raise ValueError(f"{what} must not be empty")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_LABEL_BYTES:  # node data past ZooKeeper's packet limit would drop the whole client's connection
        raise ValueError(f"{what} is {size} bytes; the limit is {MAX_LABEL_BYTES} bytes")
    if "/" in value:
        raise ValueError(f"{what} must not contain '/': {value!r}")
    if _CONTROL.search(value):
        raise ValueError(f"{what} must not contain control characters: {value!r}")
    return value


def validate_timeout(timeout: object) -> Optional[float]:
    """Return ``timeout`` as a float (or None for no limit); reject negative, NaN and non-numbers."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {timeout!r}")
    if math.isnan(timeout):
        raise ValueError(f"timeout must be a number of seconds, got {timeout!r} (not a number)")
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
    return float(timeout)


def default_host() -> str:
    """This machine's host name, made safe for a node name."""
    return re.sub(r"[/\x00-\x1f\x7f]", "_", socket.gethostname()) or "host"


def prefix(host: str, kind: str) -> str:
    """The name a sequential create is given: ``<host>-<K>-``; ZooKeeper appends the sequence."""
    return f"{host}-{kind}-"


def lease_prefix(host: str, max_leases: int) -> str:
    """The name a semaphore's sequential create is given: ``<host>-S<max_leases>-``."""
    return f"{host}-{LEASE}{max_leases}-"


def validate_max_leases(value: object) -> int:
    """Return ``value`` if it is a positive int (not a bool) up to :data:`MAX_LEASES`, else raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_leases must be an int, got {type(value).__name__} {value!r}")
    if not 1 <= value <= MAX_LEASES:
        raise ValueError(f"max_leases must be between 1 and {MAX_LEASES}, got {value!r}")
    return value


def parse(name: str) -> Optional[QueueNode]:
    """Parse a queue child name from the right; None if it has no sequence suffix.

    Names of other recipes with a sequence suffix (kazoo's ``<uuid>__lock__<seq>`` say) parse as kind
    ``"W"`` with an empty host, so they block like writers instead of being ignored.
    """
    head, sep, tail = name.rpartition("-")
    if sep and len(tail) == 10 and tail.isdigit() and tail.isascii() and head[-2:] in ("-R", "-W"):
        return QueueNode(name, head[:-2], head[-1], int(tail))  # fast path: our own names
    split = split_sequence(name)
    if split is None:
        return None
    head, seq = split
    if head.endswith(("-R-", "-W-")):
        return QueueNode(name, head[:-3], head[-2], seq)
    lease = _LEASE_HEAD.search(head)
    if lease is not None:
        return QueueNode(name, head[: lease.start()], LEASE, seq, int(lease.group(1)))
    return QueueNode(name, "", WRITE, seq)


def split_sequence(name: str) -> Optional[Tuple[str, int]]:
    """``(head, sequence)`` of a name ending in ZooKeeper's sequence suffix, or None.

    ZooKeeper appends ``%010d`` of the parent's signed 32-bit child counter: ten digits, or past 2^31-1
    a minus sign and nine or ten digits (``-2147483648`` .. ``-000000001``). A ``-`` before ten digits
    is a sign only when the name's own separator (``-`` or ``_``) stands before it.
    """
    m = _SEQ.search(name)
    if m is None:
        return None
    start, digits = m.start(), m.group(1)
    if start > 0 and name[start - 1] == "-" and (len(digits) == 9 or (start > 1 and name[start - 2] in "-_")):
        return name[: start - 1], -int(digits)
    if len(digits) < 10:
        return None
    return name[:start], int(digits)


def sequence(name: str) -> Optional[int]:
    """The integer sequence suffix of a child name (cheaper than :func:`parse`), or None."""
    tail = name[-10:]
    if tail.isdigit() and tail.isascii():  # fast path: ten digits after a separator, not a sign
        before = name[-11:-10]
        if (before == "-" and name[-12:-11] not in ("-", "_")) or not (before == "-" or before.isdigit()):
            return int(tail)
    split = split_sequence(name)
    return None if split is None else split[1]


_HALF = 1 << 31


def distance(seq: int, ref: int) -> int:
    """``seq - ref`` in queue order, aware of the wrap past 2^31-1 (serial-number arithmetic).

    ZooKeeper's suffix counts child changes in a signed 32-bit int that wraps from 2147483647 to
    -2147483648, so a node created after the wrap is *behind* one created before it. Compared modulo
    2^32, the order holds as long as the live nodes of a queue span less than 2^31 sequence numbers.
    """
    return ((seq - ref + _HALF) & 0xFFFFFFFF) - _HALF


class _PerThread(threading.local):
    statics: Dict[Tuple[Optional[str], str], str]  # (identifier, host) -> the start of our node data

    def __init__(self) -> None:
        self.statics = {}


_per_thread = _PerThread()


def node_data(identifier: Optional[str], guid: str, host: str) -> bytes:
    """The small JSON stored in each lock node: who holds or waits (``thread``: its name when it first
    queued a node with this identifier), and a per-acquire guid (when: the node's ``ctime``)."""
    statics = _per_thread.statics
    static = statics.get((identifier, host))
    if static is None:
        if len(statics) >= 64:  # a thread cycling through many identifiers: stay bounded
            statics.clear()
        static = statics[identifier, host] = json.dumps(
            {"host": host, "pid": _pid, "id": identifier, "thread": threading.current_thread().name},
            separators=(",", ":"),
        )[:-1]
    return f'{static},"guid":"{guid}"}}'.encode()


_pid = os.getpid()  # a system call: read once, and again in a forked child
_guids = itertools.count()
_guid_base = os.urandom(8).hex()


def _after_fork() -> None:  # a forked child has its own pid and must not repeat its parent's guids
    global _pid, _guids, _guid_base
    _pid, _guids, _guid_base = os.getpid(), itertools.count(), os.urandom(8).hex()
    _per_thread.statics = {}  # they carry the parent's pid


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def new_guid() -> str:
    """A per-acquire id, unique in this process (16 random hex digits per process, then a count), used
    to find our node again after a lost create reply."""
    return f"{_guid_base}{next(_guids)}"  # no format spec: cold formatting code costs more than it seems


def read_data(data: Optional[bytes]) -> Dict[str, Any]:
    """Decode node data written by :func:`node_data`; {} for anything else."""
    try:
        value = json.loads((data or b"").decode())
    except (ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def contender(node: QueueNode, data: Optional[bytes], holding: bool = False, token: Optional[int] = None) -> Contender:
    """Build a :class:`Contender` from a parsed node, its data, whether it holds and its czxid."""
    d = read_data(data)
    pid = d.get("pid")
    ident = d.get("id")
    return Contender(
        node.name,
        d.get("host") or node.host,
        node.kind,
        node.sequence,
        ident if isinstance(ident, str) else None,
        pid if isinstance(pid, int) else None,
        holding,
        token,
    )


# -- revocation: a mark set on a holder's node (see zkrecipes.revoke) ----------------------------------
REVOKE_MARK = b"__REVOKE__"  # Curator's Revoker.REVOKE_MESSAGE: what its makeRevocable holders look for


def revoke_marked(data: Optional[bytes]) -> bool:
    """True if a holder's node data carries a revoke request: Curator's ``__REVOKE__``, or zkrecipes' JSON
    with ``"revoke": true``."""
    if not data:
        return False
    if data == REVOKE_MARK:
        return True
    return data[:1] == b"{" and read_data(data).get("revoke") is True


def with_revoke_mark(data: Optional[bytes]) -> bytes:
    """The data that marks a holder's node for revocation: zkrecipes' JSON keeps what it says (host, pid,
    identifier: ``contenders()`` and ``zkrecipes status`` still show them) plus ``"revoke": true``; any
    other data (kazoo's and Curator's identifiers) becomes Curator's ``__REVOKE__``."""
    d = read_data(data) if data and data[:1] == b"{" else {}
    if not d:
        return REVOKE_MARK
    d["revoke"] = True
    return json.dumps(d, separators=(",", ":")).encode()
