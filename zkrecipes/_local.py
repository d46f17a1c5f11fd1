"""The in-process gate under every lock, keyed by (client, path, family).

Threads of one process share one ZooKeeper hold per gate: one writer thread (reentrant, counted) or any
number of reader threads behind a single ``R`` node. Only one thread at a time queues a node for a gate,
so a process never competes with itself in ZooKeeper. Lock objects built for the same path on the same
client share the gate, so two ``FairLock`` objects in one process exclude each other as well.
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import Optional

from kazoo.client import KazooClient


class Gate:
    """Local state of one (client, path, family): who holds what, and the shared hold."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.hold = None  # session.Hold shared by the local holders
        self.mode: Optional[str] = None  # "W" or "R" while held
        self.busy = False  # a thread is talking to ZooKeeper for this gate (acquire or final release)
        self.writer: Optional[int] = None  # thread ident holding the write side
        self.counts: dict = {}  # thread ident -> [write count, read count]
        self.waiting_writers = 0
        self.line: collections.deque = collections.deque()  # thread idents waiting to queue, in arrival order
        self.objects: set = set()  # lock objects attached to the current hold
        self.writer_behind = None  # the hold behind whose node a writer was seen queued (no more local joins)

    def total(self) -> int:
        return sum(w + r for w, r in self.counts.values())


# Gates live while a lock object refers to one or a hold pins it (Hold.pin): a service that locks a
# million keys keeps only the gates of the locks it has now.
_gates: "weakref.WeakKeyDictionary[KazooClient, weakref.WeakValueDictionary]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def gate(client: KazooClient, path: str, family: str) -> Gate:
    """The gate for ``(client, path, family)``, shared by every lock object of this process."""
    with _lock:
        per_client = _gates.get(client)
        if per_client is None:
            per_client = _gates[client] = weakref.WeakValueDictionary()
        g = per_client.get((path, family))
        if g is None:
            g = per_client[(path, family)] = Gate()
        return g
