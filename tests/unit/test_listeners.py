"""The listener list every lock, election and latch keeps (zkrecipes._listeners.Listeners): order, removal,
and a listener that raises is logged, never raised, and the others are told all the same."""

from __future__ import annotations

import logging
import threading
from typing import Any, List

import pytest

from zkrecipes._listeners import Listeners


def test_tell_calls_a_snapshot_in_order_and_logs_what_one_raises(caplog: Any) -> None:
    told: List[Any] = []
    listeners = Listeners(threading.Lock(), logging.getLogger("zkrecipes.test"))

    def boom(*args: Any) -> None:
        raise ValueError("boom")

    first, last = (lambda *a: told.append(("first", a))), (lambda *a: told.append(("last", a)))
    for fn in (first, boom, last):
        listeners.add(fn)
    snapshot = list(listeners)
    listeners.discard(first)
    listeners.discard(first)  # unknown now: ignored
    with caplog.at_level(logging.ERROR, logger="zkrecipes.test"):
        listeners.tell("x", 1, to=snapshot, about="/path")
    assert told == [("first", ("x", 1)), ("last", ("x", 1))]
    assert list(listeners) == [boom, last]
    assert [r.getMessage() for r in caplog.records] == [f"listener {boom!r} of /path failed"]


def test_add_refuses_what_is_not_callable() -> None:
    with pytest.raises(TypeError, match="listener must be callable"):
        Listeners(threading.Lock(), logging.getLogger("zkrecipes.test")).add(42)
