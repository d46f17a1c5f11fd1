"""tenacity policies for transient ZooKeeper errors, bounded by the caller's deadline.

Only idempotent steps are retried (reads, deletes, exists, create-then-find-by-guid); the policy retries
``ConnectionLoss`` and ``OperationTimeoutError`` with jittered exponential backoff and never runs past the
acquire's deadline. Pass your own ``tenacity.Retrying`` as ``retry=`` to a lock to change the backoff or
the attempt limit; the deadline still applies on top of it.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, TypeVar

import tenacity
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError

from . import metrics as _metrics

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


def call(
    fn: Callable[..., T],
    *args: Any,
    deadline: Optional[float] = None,
    policy: Optional[tenacity.Retrying] = None,
    **kw: Any,
) -> T:
    """Call ``fn(*args, **kw)``, retrying transient ZooKeeper errors with ``policy``'s waits (sleeping on
    the calling thread) until ``deadline`` (monotonic); :class:`Attempts` decides."""
    attempts: Optional[Attempts] = None
    while True:
        try:
            return fn(*args, **kw)
        except TRANSIENT as exc:
            attempts = attempts or Attempts(policy, deadline)
            wait = attempts.next_wait(exc)
            if wait is None:
                raise
        time.sleep(wait)


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
        hooks = _metrics.installed
        if hooks is not None:
            _metrics.call(hooks.retry, type(error).__name__)
        return wait
