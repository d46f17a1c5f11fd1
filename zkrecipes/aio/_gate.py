"""The asyncio form of the local gate's wait: the decisions are :class:`zkrecipes._gate.Gate`'s own.

Tasks of one process share one gate per (client, path, key) -- one ZooKeeper node per path -- and
queue for it in arrival order. A waiting task registers a waker with the gate; any change (a grant, a
release, a cancel) wakes it on its loop, where it asks :meth:`Gate.try_enter` again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional

from .._gate import Entered, Gate, Owner
from ..naming import WRITE
from ._driver import call_soon


async def enter(
    g: Gate,
    me: Owner,
    kind: str,
    blocking: bool,
    deadline: Optional[float],
    cancelled: Callable[[], bool],
    hold_is_good: Callable[[Any], bool],
    tolerate_suspended: bool = False,
) -> Optional[Entered]:
    """Wait for the gate: HAVE, QUEUE, or None on a miss, the deadline or a cancel; LockLost on re-entry
    into a hold in doubt (:meth:`Gate.enter`)."""
    with g.cond:  # the common case decides at once: no waker, no future
        got = g.try_enter(me, kind, hold_is_good, tolerate_suspended)
        if got is not Entered.WAIT or not blocking or cancelled():
            return None if got is Entered.WAIT else got
    loop = asyncio.get_running_loop()
    fut: "Optional[asyncio.Future[None]]" = None

    def wake() -> None:  # any thread, cond held
        call_soon(loop, _settle, fut)

    def _settle(f: "Optional[asyncio.Future[None]]") -> None:
        if f is not None and not f.done():
            f.set_result(None)

    timer = None if deadline is None else loop.call_later(max(0.0, deadline - time.monotonic()), lambda: _settle(fut))
    try:
        while True:
            with g.cond:
                got = g.try_enter(me, kind, hold_is_good, tolerate_suspended)
                if got is not Entered.WAIT:
                    return got
                if cancelled() or (deadline is not None and time.monotonic() >= deadline):
                    return None
                if me not in g.line:
                    g.line.append(me)  # owners queue for the gate in arrival order
                    g.wakers.add(wake)
                    if kind == WRITE:
                        g.waiting_writers += 1
                fut = loop.create_future()
            await fut
    finally:
        if timer is not None:
            timer.cancel()
        with g.cond:
            g.wakers.discard(wake)
            if me in g.line:  # leave the line however we leave (granted, miss, error, task cancelled)
                g.line.remove(me)
                if kind == WRITE:
                    g.waiting_writers -= 1
                g.changed()
