"""What the safety lab (:mod:`lab.run`) runs and what it claims: trials, fault kinds, the names and tokens
of each implementation, the checks that fail a run, and one run's :class:`Settings`.

Plain data (and :func:`hard_checks`), imported by the nemesis (:mod:`lab.trial`), the verdict
(:mod:`lab.results`) and the tests; it starts nothing.
"""

from __future__ import annotations

from typing import Optional

from . import aio_trial, cli_trial, handover_trial, multilock_trial, revoke_trial, semaphore_trial, txn_trial

FAULT_KINDS = ("leader-kill", "follower-kill", "quorum-loss", "session-expiry", "partition", "silent-partition",
               "pause", "holder-kill")
HOLDER_FAULTS = ("session-expiry", "partition", "silent-partition", "pause", "holder-kill")
TRIALS = {"zk": ("fair", "rw", "election"), "kazoo": ("kazoo",), "redis": ("redis",), "cli": ("cli",),
          "mixed-kazoo": ("mk-zk", "mk-kazoo"), "mixed-curator": ("mc-zk", "mc-curator"),
          "semaphore": semaphore_trial.IMPLS, "txn": txn_trial.IMPLS, "aio": ("aio-fair", "aio-sem", "aio-rw"),
          "handover": handover_trial.IMPLS, "multilock": multilock_trial.IMPLS, "revoke": revoke_trial.IMPLS}
# trials with a module of their own (workers, optional prepare/finish hooks, checker); their short run
# injects only SHORT_KINDS, aimed at their zkrecipes recipes in turn
TRIAL_MODULES = {"semaphore": semaphore_trial, "txn": txn_trial, "aio": aio_trial, "handover": handover_trial,
                 "multilock": multilock_trial, "revoke": revoke_trial}
SHORT_KINDS = ("pause", "session-expiry")
MIXED_TRIALS = ("mixed-kazoo", "mixed-curator")  # lab.mixed_trial
IMPL_NAMES = {
    "fair": "zkrecipes FairLock",
    "rw": "zkrecipes ReadWriteLock",
    "election": "zkrecipes LeaderElection",
    "kazoo": "kazoo Lock",
    "redis": "Redis SET NX PX",
    "cli": cli_trial.NAME,
    "mk-zk": "zkrecipes FairLock(protocol='kazoo') beside kazoo Lock",
    "mk-kazoo": "kazoo Lock beside FairLock(protocol='kazoo')",
    "mk-refusal": "zkrecipes FairLock (default format) beside kazoo Lock: refused",
    "mc-zk": "zkrecipes FairLock(protocol='curator') beside Curator InterProcessMutex",
    "mc-curator": "Curator InterProcessMutex beside FairLock(protocol='curator')",
    "sem": "zkrecipes Semaphore (3 leases)",
    "kazoo-sem": "kazoo Semaphore (3 leases)",
    "txn": "zkrecipes FairLock + transaction()",
    "txn-control": "unfenced control (FairLock + plain set)",
    "aio-fair": "zkrecipes aio.FairLock",
    "aio-rw": "zkrecipes aio.ReadWriteLock",
    "aio-sem": "zkrecipes aio.Semaphore (3 leases)",
    "handover": "zkrecipes FairLock(owner='object'), handed over",
    "ml-a": "zkrecipes MultiLock, two fleets in opposite orders: lock a",
    "ml-b": "zkrecipes MultiLock, two fleets in opposite orders: lock b",
    "revoke": "zkrecipes FairLock under request_revoke and break_lock",
}
TOKENS = {
    "fair": "czxid (lock.token)",
    "rw": "czxid (lock.token)",
    "election": "czxid (election.token)",
    "kazoo": "none (czxid needs an extra read)",
    "redis": "none (random value, not ordered)",
    "cli": "czxid (ZKRECIPES_TOKEN)",
    "mk-zk": "czxid (lock.token)",
    "mk-kazoo": "czxid (an extra exists read)",
    "mk-refusal": "none (never holds)",
    "mc-zk": "czxid (lock.token)",
    "mc-curator": "czxid (an extra exists read)",
    "sem": "none presented (one number cannot fence N leases)",
    "kazoo-sem": "none",
    "txn": "the hold's node, checked in the multi",
    "txn-control": "none (plain set)",
    "aio-fair": "czxid (lock.token)",
    "aio-rw": "czxid (lock.token)",
    "aio-sem": "none presented (one number cannot fence N leases)",
    "handover": "czxid (lock.token, read by the taker)",
    "ml-a": "czxid (multi.tokens)",
    "ml-b": "czxid (multi.tokens)",
    "revoke": "czxid (lock.token)",
}
ZK_IMPLS = ("fair", "rw", "election", "cli")
# what docs/safety.rst promises for every zkrecipes entry: each count must be 0 (and every loss notice
# needed must have come), or the run fails
HARD_CHECKS = ("accepted_overlaps", "unsafe", "lost_increments", "out_of_order", "notices_late", "orphans", "hung")
# the txn trial's fenced half writes after its read without a check() by design (the transaction is its
# check): a stale commit is an unsafe overlap that ZooKeeper must refuse, so there none may be accepted
# the revoke trial's hung holders write after a break without a check() by design: acting after the next
# grant is expected there; what fencing must refuse is an operation after the next holder's (stale_accepted)
CLAIMS_INSTEAD = {"txn": {"unsafe": "unsafe_accepted"}, "revoke": {"unsafe": "stale_accepted"}}
# claims of one entry beside HARD_CHECKS (each must be 0): a MultiLock never deadlocks and takes its locks
# in one global order; a revoke request reaches a holder that still holds, a gone holder's token breaks
# nothing; a hold is released from the thread it was handed to
MORE_CHECKS = {"ml-a": ("deadlocks", "order_violations"), "ml-b": ("deadlocks", "order_violations"),
               "revoke": ("revoke_notices_missed", "wrong_breaks"), "handover": ("release_errors",)}
# a holder fault that struck no holder is injected again (aimed at the same recipe), at most this often,
# until each holder fault kind of a trial has struck a holder once
RETRIES = 2
# not zkrecipes recipes (or the unfenced control): reported as found, never fail the run
BASELINES = ("kazoo", "redis", "mk-kazoo", "mc-curator", "kazoo-sem", "txn-control")
REDIS_KEY = "chaos-lock"


class Settings:
    """One run's knobs; ``short()``/``long()`` are the two documented presets."""

    def __init__(self, **kw) -> None:
        self.seed = 1
        self.workers = 8
        self.session_timeout = 3.0
        self.repeat = 1
        self.repeats: dict = {}  # trial -> instances of each fault kind, where it differs from ``repeat``
        self.settle = 1.0
        self.hold = (0.02, 0.15)
        self.trials = ("zk",)
        self.faults: Optional[tuple] = None  # --faults: only these kinds
        self.long = False
        self.__dict__.update(kw)

    def repeat_of(self, trial: str) -> int:
        """Instances of each fault kind in ``trial``."""
        return int(self.repeats.get(trial, self.repeat))



def hard_checks(impl: str) -> tuple:
    """The counts that must be 0 for zkrecipes entry ``impl`` (see HARD_CHECKS, CLAIMS_INSTEAD and
    MORE_CHECKS)."""
    instead = CLAIMS_INSTEAD.get(impl, {})
    return tuple(instead.get(key, key) for key in HARD_CHECKS) + MORE_CHECKS.get(impl, ())
