"""The retry policy's decisions without sleeping (what the drivers wait on)."""

from __future__ import annotations

import time

import tenacity
from kazoo.exceptions import ConnectionLoss, NoNodeError

from zkrecipes.retry import Attempts


def test_waits_grow_and_stop_when_the_policy_stops():
    policy = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(ConnectionLoss),
        wait=tenacity.wait_exponential(multiplier=0.1, max=1.0),
        stop=tenacity.stop_after_attempt(3),
    )
    a = Attempts(policy, None)
    assert a.next_wait(ConnectionLoss()) == 0.1
    assert a.next_wait(ConnectionLoss()) == 0.2
    assert a.next_wait(ConnectionLoss()) is None  # the third attempt failed: give up


def test_an_error_the_policy_does_not_retry_gives_up_and_the_deadline_bounds_every_wait():
    assert Attempts(None, None).next_wait(NoNodeError()) is None
    a = Attempts(tenacity.Retrying(wait=tenacity.wait_fixed(5)), time.monotonic() + 0.05)
    assert 0 < a.next_wait(ConnectionLoss()) <= 0.05
    assert Attempts(None, time.monotonic() - 1).next_wait(ConnectionLoss()) is None
