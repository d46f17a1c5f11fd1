"""tenacity policies for transient ZooKeeper errors, bounded by the caller's deadline.

Only idempotent steps are retried (reads, deletes, exists, create-then-find-by-guid); the policy retries
``ConnectionLoss`` and ``OperationTimeoutError`` with jittered exponential backoff and never runs past the
acquire's deadline. Pass your own ``tenacity.Retrying`` as ``retry=`` to a lock to change the backoff or
the attempt limit; the deadline still applies on top of it.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Optional, TypeVar, cast

import tenacity
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError

T = TypeVar("T")
TRANSIENT = (ConnectionLoss, OperationTimeoutError)


def default_policy() -> tenacity.Retrying:
    """Retry transient errors every 50 ms growing to 1 s, with jitter, for at most 5 minutes."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(TRANSIENT),
        wait=tenacity.wait_exponential(multiplier=0.05, max=1.0) + tenacity.wait_random(0, 0.05),
        stop=tenacity.stop_after_delay(300),
        reraise=True,
    )


def validate_policy(policy: object) -> Optional[tenacity.Retrying]:
    """Return ``policy`` if it is None or a ``tenacity.Retrying``, else raise TypeError naming it."""
    if policy is not None and not isinstance(policy, tenacity.Retrying):
        raise TypeError(f"retry must be a tenacity.Retrying or None, got {policy!r}")
    return policy


_DEFAULT = default_policy()


class _StopAtDeadline(tenacity.stop.stop_base):
    def __init__(self, deadline: Optional[float]) -> None:
        self.deadline = deadline

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def call(
    fn: Callable[..., T],
    *args: Any,
    deadline: Optional[float] = None,
    policy: Optional[tenacity.Retrying] = None,
    **kw: Any,
) -> T:
    """Call ``fn(*args, **kw)``, retrying transient ZooKeeper errors until ``deadline`` (monotonic)."""
    if policy is None:  # fast path: the first attempt skips tenacity's bookkeeping
        try:
            return fn(*args, **kw)
        except TRANSIENT:
            if deadline is not None and time.monotonic() >= deadline:
                raise
    base = policy or _DEFAULT
    retrying = base.copy(
        retry=base.retry & tenacity.retry_if_exception_type(TRANSIENT),  # never retry anything else
        stop=cast(tenacity.stop.stop_base, base.stop) | _StopAtDeadline(deadline),
        reraise=True,
    )
    return retrying(fn, *args, **kw)


async def acall(
    fn: Callable[[], Awaitable[T]], deadline: Optional[float] = None, policy: Optional[tenacity.Retrying] = None
) -> T:
    """:func:`call` for coroutines (:mod:`zkrecipes.aio`): await ``fn()``, retrying transient ZooKeeper
    errors with ``policy``'s wait and stop, until ``deadline`` (monotonic)."""
    try:  # fast path: the first attempt skips tenacity's bookkeeping
        return await fn()
    except TRANSIENT:
        if deadline is not None and time.monotonic() >= deadline:
            raise
    base = policy or _DEFAULT
    retrying = tenacity.AsyncRetrying(
        retry=base.retry & tenacity.retry_if_exception_type(TRANSIENT),
        wait=base.wait,
        stop=cast(tenacity.stop.stop_base, base.stop) | _StopAtDeadline(deadline),
        reraise=True,
    )
    return cast(T, await retrying(fn))


class Attempts:
    """``policy``'s decisions for one request, without sleeping (the drivers wait, bounded by their
    deadline and cancel): after each transient error, :meth:`next_wait` says how long to wait before the
    next attempt, or None to give up (the policy stops, or ``deadline``, monotonic, has passed)."""

    def __init__(self, policy: Optional[tenacity.Retrying], deadline: Optional[float]) -> None:
        self.policy = policy or _DEFAULT
        self.deadline = deadline
        self.state = tenacity.RetryCallState(self.policy, None, (), {})

    def next_wait(self, error: BaseException) -> Optional[float]:
        """Call with the transient error that ended the last attempt."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return None
        state, policy = self.state, self.policy
        state.set_exception((type(error), error, error.__traceback__))
        if not policy.retry(state) or policy.stop(state):
            return None
        wait = float(policy.wait(state))
        if self.deadline is not None:
            wait = min(wait, self.deadline - now)
        state.idle_for += wait
        state.prepare_for_next_attempt()
        return wait
