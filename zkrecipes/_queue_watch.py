"""Watching a lock path's queue: the one child-watch loop, under :class:`zkrecipes.LeaderWatch` and ``zkrecipes
status --watch``.

Each change of the path's children (a child watch; an exists watch while the path is missing) reads the
one listing (:func:`zkrecipes._listing.listing`) again, run by the threaded driver on the calling thread:
no polling of ZooKeeper, one listing per change.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional

import tenacity
from kazoo.client import KazooClient

from ._drive import Driver
from ._listing import Listed, listing


def watch_queue(
    client: KazooClient,
    path: str,
    policy: Optional[tenacity.Retrying],
    on_listing: Callable[[List[Listed], bool], None],
    stop: threading.Event,
    changed: threading.Event,
    tick: float,
    exclusive: bool = False,
    retry_after: Optional[Callable[[Exception], float]] = None,
) -> None:
    """Call ``on_listing(listed, fresh)`` on this thread with the listing of ``path`` (synced; ExclusiveLock's node
    too if ``exclusive``), read now and after each change (``fresh`` True), and every ``tick`` seconds
    without one (the last listing again, ``fresh`` False), until ``stop`` is set (it also cancels a read
    in progress). The watch sets ``changed``: set it too to wake the loop. A failed read raises, or with
    ``retry_after`` is tried again ``retry_after(error)`` seconds later (``stop`` cuts the wait short)."""

    def fired(event: Any) -> None:  # kazoo's I/O thread: only wake the loop
        changed.set()

    listed: List[Listed] = []
    again = True  # nothing read yet, or the last read failed: read (and watch) again
    while not stop.is_set():
        fresh = again or changed.is_set()
        if fresh:
            changed.clear()
            try:
                listed = Driver(client, None, stop.is_set, policy, path=path).run(
                    listing(path, synced=True, watch=fired, exclusive=exclusive)
                )
            except Exception as exc:
                if retry_after is None:
                    raise
                if not stop.is_set():  # (stopped: the read was cancelled, nothing failed)
                    stop.wait(retry_after(exc))
                again = True
                continue
            again = False
        on_listing(listed, fresh)
        changed.wait(tick)
