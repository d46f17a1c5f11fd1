"""The safety lab: can two holders ever both act? Jepsen-style evidence, rerunnable with one command.

``python -m lab.run [--long] [--seed N] [--out DIR]`` (``make safety`` runs ``--long``)

A trial starts a 3-server ZooKeeper ensemble on 127.0.0.1 (and, for the Redis baseline, a
``redis-server``), then ≥ 8 worker processes (:mod:`lab.worker`), each with its own
session and its own loopback :class:`~zkrecipes.testing.Partition` proxies (one per server, run by this
process). Workers loop acquire → read-modify-write a :class:`~lab.fenced.FencedRegister`
→ release and record every step. Meanwhile this process -- the nemesis -- injects a seeded schedule of
faults and records them:

``leader-kill``      SIGKILL the ZooKeeper leader, restart it after a second
``follower-kill``    the same for a follower
``quorum-loss``      stop two of three servers past the session timeout, then restart them
``session-expiry``   expire the current holder's session server-side (a second connection with its
                     session id and password, published by the worker, closes the session)
``partition``        cut the current holder's proxies for longer than the session timeout, then heal
``silent-partition`` freeze them instead: connections stay open, nothing is delivered either way (the
                     partition real networks make: the holder hears of it only when replies are overdue)
``pause``            SIGSTOP the current holder longer than the session timeout, then SIGCONT
``holder-kill``      SIGKILL the current holder and start a replacement worker

Trials (``--trials``, comma-separated):

``zk``         zkrecipes FairLock, ReadWriteLock and LeaderElection, three threads per worker on one session
``kazoo``      kazoo's ``Lock`` (baseline)
``redis``      the classic ``SET NX PX`` lock (baseline; ZooKeeper server faults map to killing, or stopping,
               the single redis-server, and session expiry to expiring the holder's key server-side; there
               is no follower to kill)
``cli``        ``zkrecipes lock`` commands whose children must never run at once, under silent and closed
               partitions of the holder's link (:mod:`lab.cli_trial`)
``semaphore``  zkrecipes ``Semaphore`` and kazoo's (baseline), 3 leases; the checker counts holders inside
               at once (:mod:`lab.semaphore_trial`)
``txn``        a counter in a ZooKeeper node under a FairLock: half the workers write through
               ``lock.transaction()``, the other half (the unfenced control, baseline) with a plain ``set``
               (:mod:`lab.txn_trial`)
``aio``        the asyncio FairLock, ReadWriteLock and Semaphore, several tasks per worker on one event loop
               (:mod:`lab.aio_trial`)
``mixed-kazoo``, ``mixed-curator``
               zkrecipes ``FairLock(protocol="kazoo"|"curator")`` beside kazoo's ``Lock`` or Curator's
               ``InterProcessMutex`` (Java workers, baselines) on one path, every hold fenced and verified,
               plus a default-format fleet that must be refused beside kazoo (:mod:`lab.mixed_trial`)
``handover``   ``FairLock(owner="object")`` taken on one thread and released on another (:mod:`lab.handover_trial`)
``multilock``  ``MultiLock`` over two paths, even slots listing them in one order, odd in the other; deadlocks
               counted from the locks' states (:mod:`lab.multilock_trial`)
``revoke``     an operator thread here asks holders to let go (``request_revoke``) and breaks the hung ones
               (``break_lock``); their late writes must be refused by the register (:mod:`lab.revoke_trial`)

The short run (default, used by ``make test``) runs the ``zk`` trial with each fault once; ``--trials
semaphore,txn,aio`` (or ``handover,multilock,revoke``) without ``--long`` runs those with ``pause`` and
``session-expiry`` only, aimed at their zkrecipes recipes; ``--faults`` picks the kinds; ``--long`` runs
every trial with each fault three times (the ``cli`` trial: 20 silent partitions and 5 cuts). Without
``--long``, the mixed trials inject one ``session-expiry`` and one ``pause``. When every fault of a holder
kind has struck no holder (the holder released before the fault landed), that kind is injected again, up
to ``RETRIES`` more times.

The verdict comes from :mod:`lab.check`, which reads only the recorded histories.
Results go to ``DIR/results.json``, ``DIR/results.md`` and ``DIR/results.inc`` (an reStructuredText
fragment for the docs); ``--keep-history`` also keeps every history file under ``DIR/history``. The exit
status is 1 when a zkrecipes entry (not a baseline: kazoo, Curator, Redis, the unfenced control) broke
what docs/safety.rst claims for it (``HARD_CHECKS``: an accepted or unsafe overlap -- for the ``txn``
trial an applied stale operation, for ``revoke`` an accepted one --, a lost increment, a grant out of
order, a missed or late loss notice, an orphan node, a hung worker; ``MORE_CHECKS``: a trial's own, such
as a MultiLock deadlock), or failed a trial's own check (a mixed trial's valid overlaps or refusals),
or when a holder fault kind scheduled in a trial with a zkrecipes entry struck no holder.
Every process started is killed (process groups, and parent-death signals) however the run ends.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable, Optional

from zkrecipes.testing import Ensemble, Partition, four_letter
from zkrecipes.testing._proc import die_with_parent

from . import aio_trial, cli_trial, handover_trial, multilock_trial, revoke_trial, semaphore_trial, txn_trial
from .check import _load_jsonl, check_trial, struck_at
from .fenced import FencedRegister
from .redis_server import RedisServer, redis_version

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
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: workers import lab


def _killpg(proc: Optional[subprocess.Popen], sig: int) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class Settings:
    """One run's knobs; ``short()``/``long()`` are the two documented presets."""

    def __init__(self, **kw) -> None:
        self.seed = 1
        self.workers = 8
        self.session_timeout = 3.0
        self.repeat = 1
        self.settle = 1.0
        self.hold = (0.02, 0.15)
        self.trials = ("zk",)
        self.faults: Optional[tuple] = None  # --faults: only these kinds
        self.long = False
        self.__dict__.update(kw)


class Journal:
    """The nemesis's own history (``nemesis.jsonl``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, ev: str, **kw) -> dict:
        rec = {"t": time.monotonic(), "wall": time.time(), "ev": ev, **kw}
        os.write(self._fd, (json.dumps(rec, default=str) + "\n").encode())
        return rec

    def close(self) -> None:
        os.close(self._fd)


class Slot:
    """A worker position: its proxies outlive the worker process, which a holder-kill replaces."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.gen = -1
        self.proc: Optional[subprocess.Popen] = None
        self.proxies: list = []
        self.session_file = ""


class Trial:
    """One lock implementation (or the three zkrecipes recipes) under the full nemesis schedule."""

    def __init__(self, name: str, st: Settings, workdir: str, say: Callable[[str], None],
                 ensemble: Optional[Ensemble], redis_server: Optional[RedisServer]) -> None:
        self.name = name
        self.st = st
        self.dir = workdir
        self.say = say
        self.ens = ensemble
        self.redis = redis_server
        self.impls = TRIALS[name]
        self.rnd = random.Random(f"{st.seed}-{name}")
        self.root = f"/zkrecipes-chaos/{uuid.uuid4().hex[:8]}-{name}"
        self.paths = {impl: f"{self.root}/{impl}" for impl in self.impls} if name != "redis" else {"redis": REDIS_KEY}
        self.registers = {impl: os.path.join(workdir, f"register-{impl}.jsonl") for impl in self.impls}
        self.stop_file = os.path.join(workdir, "STOP")
        self.mod = TRIAL_MODULES.get(name)
        self.kinds = [k for k in FAULT_KINDS if not (name == "redis" and k == "follower-kill")]
        if st.faults:
            self.kinds = [k for k in self.kinds if k in st.faults]
        self.quick = self.mod is not None and not st.long and not st.faults  # the short run of such a trial
        if self.quick:
            self.kinds = [k for k in self.kinds if k in SHORT_KINDS]
        self.slots = [Slot(i) for i in range(st.workers)]
        self.journal = Journal(os.path.join(workdir, "nemesis.jsonl"))
        self.targets: dict = {}  # holder fault id -> (the target worker's history file, the target hold)
        self.mon = None
        self.hard_stop = 0.0
        self._fault_n = 0

    # -- workers ------------------------------------------------------------------------------------------
    def _upstreams(self) -> list:
        if self.name == "redis":
            return [f"127.0.0.1:{self.redis.port}"]
        return [self.ens.host(i) for i in range(self.ens.size)]

    def start_worker(self, slot: Slot) -> None:
        if not slot.proxies:
            slot.proxies = [Partition(up) for up in self._upstreams()]
        slot.gen += 1
        slot.session_file = os.path.join(self.dir, f"session-{slot.index}-{slot.gen}.json")
        cfg = {
            "impl": self.impl_of(slot),
            "slot": slot.index,
            "gen": slot.gen,
            "seed": f"{self.st.seed}-{self.name}-{slot.index}-{slot.gen}",
            "hosts": ",".join(p.hosts for p in slot.proxies),
            "redis_port": slot.proxies[0].port,
            "redis_key": REDIS_KEY,
            "root": self.root,
            "registers": self.registers,
            "out": os.path.join(self.dir, f"w-{slot.index}-{slot.gen}.jsonl"),
            "session_file": slot.session_file,
            "stop_file": self.stop_file,
            "stop_at": self.hard_stop,
            "session_timeout": self.st.session_timeout,
            "hold": list(self.st.hold),
        }
        cfg.update(self.worker_cfg(slot))
        cfg_path = os.path.join(self.dir, f"cfg-{slot.index}-{slot.gen}.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        env = dict(os.environ)
        env["PYTHONPATH"] = _ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        log = open(os.path.join(self.dir, f"stderr-{slot.index}-{slot.gen}.log"), "ab")
        try:
            slot.proc = subprocess.Popen(
                [sys.executable, "-m", "lab.worker", cfg_path],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, preexec_fn=die_with_parent,
            )
        finally:
            log.close()

    def impl_of(self, slot: Slot) -> str:
        """What the worker in ``slot`` runs (a mixed trial runs two implementations)."""
        return self.name

    def worker_cfg(self, slot: Slot) -> dict:
        """Extra worker configuration (hook for trials in their own modules)."""
        return {}

    def wait_ready(self, slots: list, timeout: float = 60.0) -> None:
        """Wait until each worker has a session (ZooKeeper) or has written its first event (Redis)."""
        deadline = time.monotonic() + timeout
        for slot in slots:
            while True:
                if self.name == "redis":
                    ready = os.path.exists(os.path.join(self.dir, f"w-{slot.index}-{slot.gen}.jsonl"))
                else:
                    ready = os.path.exists(slot.session_file)
                if ready:
                    break
                if slot.proc.poll() is not None:
                    raise RuntimeError(f"worker {slot.index} exited with {slot.proc.returncode}; see {self.dir}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"worker {slot.index} not ready within {timeout} s; see {self.dir}")
                time.sleep(0.05)

    def session_of(self, slot: Slot) -> Optional[dict]:
        try:
            with open(slot.session_file) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def wait_progress(self, since: float, timeout: float, what: str, repair: bool = True) -> bool:
        """Wait until every register of the trial has an operation after ``since``; record a stall if not
        (with a snapshot of the stalled queues) and, with ``repair``, try :meth:`repair` once."""
        deadline = time.monotonic() + timeout
        pending = set(self.impls)
        while pending:
            for impl in list(pending):
                with FencedRegister(self.registers[impl]) as reg:
                    if reg.state().get("t", 0.0) > since:
                        pending.discard(impl)
            if not pending:
                return True
            if time.monotonic() > deadline:
                snap = {impl: self.queue_snapshot(impl) for impl in pending} if self.mon is not None else {}
                self.journal("stall", after=what, impls=sorted(pending), waited=timeout, queues=snap)
                for slot in self.slots:  # every worker writes its threads' stacks to its stderr log
                    _killpg(slot.proc, signal.SIGUSR1)
                self.say(f"  no progress on {sorted(pending)} within {timeout:g} s after {what}")
                if repair and self.repair(snap):
                    return self.wait_progress(time.monotonic(), timeout, "stall-repair", repair=False)
                return False
            time.sleep(0.05)
        return True

    def repair(self, snapshot: dict) -> bool:
        """End a stall so the run can go on measuring: expire the live worker session that owns the head
        of a stalled queue (recorded as a ``stall-repair`` fault; the stall itself stays a finding)."""
        done = False
        for impl, queue in snapshot.items():
            head = next((n for n in queue if "owner" in n), None)
            if head is None:
                continue
            owner = int(head["owner"], 16)
            for slot in self.slots:
                info = self.session_of(slot)
                if info is None or info["session"] != owner or slot.proc.poll() is not None:
                    continue
                self._fault_n += 1
                base = {"id": f"{self.name}-{self._fault_n}", "kind": "stall-repair", "target_impl": impl,
                        "target_slot": slot.index, "target_pid": slot.proc.pid, "target_node": head["node"]}
                self._expire(base, slot)
                self.say(f"  stall-repair: expired the session of worker {slot.index}, which owns {head['node']}")
                done = True
                break
        return done

    # -- finding the holder ---------------------------------------------------------------------------------
    def fresh_holder(self, impl: str, timeout: float = 5.0):
        """Wait until a holder of ``impl`` (a writer, for the read/write lock) has just read the register
        -- it is then in the middle of its hold, between its read and its write -- and return
        ``(slot, hold id)``. Watching the register (the resource) is what makes the fault land mid-hold."""
        with FencedRegister(self.registers[impl]) as reg:
            start = reg.state()["seq"]
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                rec = reg.state()
                if rec["seq"] > start and rec.get("op") == "read" and rec.get("ok") and not rec.get("shared"):
                    for slot in self.slots:
                        if slot.proc is not None and slot.proc.pid == rec["pid"] and slot.proc.poll() is None:
                            return slot, rec["hold"]
                    start = rec["seq"]
                time.sleep(0.002)
        return None

    def queue_snapshot(self, impl: str) -> list:
        """The nodes of ``impl``'s queue with owner session, pid and per-acquire guid (for stall reports)."""
        from kazoo.exceptions import KazooException

        from zkrecipes import LockError, formats, naming

        path = self.paths[impl]
        out = []
        try:
            for _, node in formats.sort_any(self.mon.get_children(path)):
                try:
                    data, stat = self.mon.get(f"{path}/{node.name}")
                except KazooException:
                    continue
                d = naming.read_data(data)
                out.append({"node": node.name, "owner": f"{stat.ephemeralOwner:x}", "pid": d.get("pid"),
                            "guid": d.get("guid"), "data": None if d else data.decode(errors="replace")})
        except (KazooException, ValueError, LockError) as exc:  # a baseline's names may not parse
            return [{"error": repr(exc)}]
        return out

    def _redis_value(self) -> Optional[str]:
        import redis

        try:
            with redis.Redis(host="127.0.0.1", port=self.redis.port, socket_timeout=0.5) as r:
                v = r.get(REDIS_KEY)
        except redis.RedisError:
            return None
        return None if v is None else v.decode()

    # -- faults ------------------------------------------------------------------------------------------------
    def inject(self, kind: str, target_impl: str) -> Optional[str]:
        """Inject one fault; returns its id, or None when a holder fault found no holder (skipped)."""
        self._fault_n += 1
        fid = f"{self.name}-{self._fault_n}"
        T = self.st.session_timeout
        lng = self.st.long
        if kind in HOLDER_FAULTS:
            found = self.fresh_holder(target_impl)
            if found is None:
                self.journal("fault_skipped", id=fid, kind=kind, reason="no live holder found")
                self.say(f"  {kind}: no live holder of {target_impl} found; skipped")
                return None
            slot, hold = found
            base = {"id": fid, "kind": kind, "target_impl": target_impl, "target_slot": slot.index,
                    "target_pid": slot.proc.pid, "target_hold": hold}
            self.targets[fid] = (os.path.join(self.dir, f"w-{slot.index}-{slot.gen}.jsonl"), hold)
            if kind == "session-expiry":
                self._expire(base, slot)
            elif kind in ("partition", "silent-partition"):
                dur = T + (self.rnd.uniform(1.5, 3.0) if lng else 2.0)
                self.journal("fault_start", **base, duration=dur)
                for p in slot.proxies:
                    if kind == "partition":
                        p.cut()
                    else:
                        p.freeze()
                time.sleep(dur)
                for p in slot.proxies:
                    p.heal()
                self.journal("fault_end", id=fid)
            elif kind == "pause":
                dur = T + (self.rnd.uniform(1.5, 3.0) if lng else 2.0)
                self.journal("fault_start", **base, duration=dur)
                _killpg(slot.proc, signal.SIGSTOP)
                stopped = time.monotonic()  # a check() that passed before this may have been frozen before its act
                try:
                    time.sleep(dur)
                finally:
                    _killpg(slot.proc, signal.SIGCONT)
                self.journal("fault_end", id=fid, stopped=stopped)
            elif kind == "holder-kill":
                self.journal("fault_start", **base)
                _killpg(slot.proc, signal.SIGKILL)
                slot.proc.wait(10)
                self.journal("fault_end", id=fid)
                self.start_worker(slot)
                self.wait_ready([slot])
                self.journal("replaced", slot=slot.index, pid=slot.proc.pid)
            self.say(f"  {kind} of the {IMPL_NAMES[target_impl]} holder (worker {slot.index}, hold {hold})")
            return fid
        if self.name == "redis":
            self._redis_server_fault(fid, kind)
            return fid
        ens = self.ens
        down = self.rnd.uniform(1.0, 2.0) if lng else 1.0
        if kind in ("leader-kill", "follower-kill"):
            leader = ens.leader()
            if kind == "leader-kill":
                victim = leader
            else:
                victim = self.rnd.choice([i for i in range(ens.size) if i != leader])
            self.journal("fault_start", id=fid, kind=kind, servers=[victim], leader=leader)
            ens.kill(victim)
            time.sleep(down)
            ens.start(victim)
            self.journal("fault_end", id=fid)
            self.say(f"  {kind}: ZooKeeper server {victim} killed, restarted after {down:.1f} s")
        elif kind == "quorum-loss":
            victims = sorted(self.rnd.sample(range(ens.size), 2))
            dur = T + (self.rnd.uniform(0.5, 2.0) if lng else 1.0)
            self.journal("fault_start", id=fid, kind=kind, servers=victims, leader=ens.leader(), duration=dur)
            for v in victims:
                ens.stop(v)
            time.sleep(dur)
            for v in victims:
                ens.start(v, wait=False)
            ens.wait_serving(timeout=90)
            self.journal("fault_end", id=fid)
            self.say(f"  quorum-loss: ZooKeeper servers {victims} stopped for {dur:.1f} s, restarted")
        return fid

    def struck(self, fid: Optional[str]) -> bool:
        """Whether holder fault ``fid`` struck its target: the hold had not begun its release when the fault
        struck (:func:`lab.check.struck_at`), as the target worker's own history shows. Asked once the
        lock has moved on after the fault, when that history is written."""
        if fid not in self.targets:
            return False
        history, hold = self.targets[fid]
        mine = {e["ev"]: e for e in _load_jsonl(self.journal.path) if e.get("id") == fid}
        if "fault_start" not in mine or "fault_end" not in mine:
            return False
        at = struck_at({"kind": mine["fault_start"]["kind"], "start": mine["fault_start"]["t"],
                        "end": mine["fault_end"]["t"]})
        released = [e["t"] for e in _load_jsonl(history) if e["ev"] == "release_start" and e.get("hold") == hold]
        return not released or released[0] >= at

    def _expire(self, base: dict, slot: Slot) -> None:
        """Expire the holder's session server-side (Redis: expire its key server-side)."""
        from kazoo.client import KazooClient

        if self.name == "redis":
            import redis

            value = self._redis_value() or ""
            self.journal("fault_start", **base, value=value)
            result = None
            if value.startswith(f"s{slot.index}-p{slot.proc.pid}:"):
                script = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], 1) end"
                with contextlib.suppress(redis.RedisError), \
                        redis.Redis(host="127.0.0.1", port=self.redis.port, socket_timeout=1.0) as r:
                    result = r.eval(script, 1, REDIS_KEY, value)
            self.journal("fault_end", id=base["id"], result=result)
            return
        info = self.session_of(slot)
        if info is None:
            self.journal("fault_start", **base)
            self.journal("fault_end", id=base["id"], error="the holder published no session")
            return
        sid = info["session"]
        self.journal("fault_start", **base, session=f"{sid:x}")
        error = None
        twin = KazooClient(hosts=self.ens.hosts, client_id=(sid, bytes.fromhex(info["password"])),
                           timeout=self.st.session_timeout)
        try:
            twin.start(timeout=10)
            twin.stop()
        except Exception as exc:  # the session may have ended already
            error = f"{type(exc).__name__}: {exc}"
        finally:
            twin.close()
        self.journal("fault_end", id=base["id"], error=error)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            now = self.session_of(slot)
            if now is not None and now["session"] != sid:
                break
            time.sleep(0.05)

    def _redis_server_fault(self, fid: str, kind: str) -> None:
        T = self.st.session_timeout
        if kind == "leader-kill":
            self.journal("fault_start", id=fid, kind=kind, servers=["redis"], mapped="redis-server SIGKILL+restart")
            self.redis.signal(signal.SIGKILL)
            self.redis.start()
            self.journal("fault_end", id=fid)
            self.say("  leader-kill: redis-server killed and restarted (its keys are gone)")
        elif kind == "quorum-loss":
            dur = T + (self.rnd.uniform(0.5, 2.0) if self.st.long else 1.0)
            self.journal("fault_start", id=fid, kind=kind, servers=["redis"], mapped="redis-server stopped",
                         duration=dur)
            self.redis.signal(signal.SIGTERM)
            time.sleep(dur)
            self.redis.start()
            self.journal("fault_end", id=fid)
            self.say(f"  quorum-loss: redis-server stopped for {dur:.1f} s and restarted")

    # -- the run -----------------------------------------------------------------------------------------------
    def schedule(self) -> list:
        kinds = [k for k in self.kinds for _ in range(self.st.repeat)]
        self.rnd.shuffle(kinds)
        if self.quick:  # each fault at a zkrecipes recipe in turn
            mine = [i for i in self.impls if i not in BASELINES]
            return [(k, mine[n % len(mine)]) for n, k in enumerate(kinds)]
        seen: dict = {}
        out = []
        for k in kinds:
            n = seen.get(k, 0)
            seen[k] = n + 1
            # the n-th fault of a kind targets a holder of the next recipe; kinds start at different recipes
            offset = HOLDER_FAULTS.index(k) if k in HOLDER_FAULTS else 0
            out.append((k, self.impls[(n + offset) % len(self.impls)]))
        return out

    def run(self) -> None:
        st = self.st
        plan = self.schedule()
        with open(os.path.join(self.dir, "meta.json"), "w") as f:
            json.dump({"trial": self.name, "impls": list(self.impls), "session_timeout": st.session_timeout,
                       "fault_kinds": self.kinds, "paths": self.paths, "plan": plan, "seed": st.seed}, f)
        tries = len(plan) + RETRIES * len({k for k, _ in plan if k in HOLDER_FAULTS})
        budget = 120.0 + tries * (4 * st.session_timeout + 40.0)
        self.hard_stop = time.monotonic() + budget  # the workers' own deadline, should this process vanish
        try:
            if self.name != "redis":
                from kazoo.client import KazooClient

                from .worker import FAST_RECONNECT

                self.mon = KazooClient(hosts=self.ens.hosts, timeout=10.0, connection_retry=dict(FAST_RECONNECT))
                self.mon.start(timeout=30)
            if self.mod is not None and hasattr(self.mod, "prepare"):
                self.mod.prepare(self)
            for slot in self.slots:
                self.start_worker(slot)
            self.wait_ready(self.slots)
            self.say(f"{len(self.slots)} workers up ({', '.join(IMPL_NAMES[i] for i in self.impls)})")
            self.wait_progress(0.0, 30.0, "start")
            time.sleep(st.settle + 1.0)
            left = {k: sum(1 for k2, _ in plan if k2 == k) for k in HOLDER_FAULTS}  # planned, not yet injected
            retries = dict.fromkeys(HOLDER_FAULTS, 0)
            hit: set = set()
            todo = list(plan)
            while todo:
                kind, target = todo.pop(0)
                t0 = time.monotonic()
                fid = self.inject(kind, target)
                self.wait_progress(time.monotonic(), 30.0 + st.session_timeout, kind)
                self.say(f"    recovered {time.monotonic() - t0:.1f} s after the fault began")
                time.sleep(st.settle)
                if kind not in HOLDER_FAULTS:
                    continue
                left[kind] -= 1
                if self.struck(fid):
                    hit.add(kind)
                elif kind not in hit and not left[kind] and retries[kind] < RETRIES:
                    retries[kind] += 1
                    left[kind] += 1
                    todo.insert(0, (kind, target))
                    self.journal("fault_retry", id=fid, kind=kind, target_impl=target)
                    self.say(f"    {kind} struck no holder; again ({retries[kind]} of at most {RETRIES})")
            time.sleep(st.settle + 1.0)
            self.shutdown()
        finally:
            self.cleanup()

    def shutdown(self) -> None:
        T = self.st.session_timeout
        with open(self.stop_file, "w") as f:
            f.write("stop\n")
        stop_t = self.journal("stop")["t"]
        grace = T + 12.0
        for slot in self.slots:
            try:
                slot.proc.wait(max(0.1, stop_t + grace - time.monotonic()))
                self.journal("exit", slot=slot.index, pid=slot.proc.pid, code=slot.proc.returncode,
                             lag=round(time.monotonic() - stop_t, 3))
            except subprocess.TimeoutExpired:
                self.journal("hung", slot=slot.index, pid=slot.proc.pid, waited=grace)
                self.say(f"  worker {slot.index} (pid {slot.proc.pid}) still running {grace:g} s after stop; killed")
                _killpg(slot.proc, signal.SIGCONT)
                _killpg(slot.proc, signal.SIGKILL)
                slot.proc.wait(10)
        if self.mod is not None and hasattr(self.mod, "finish"):
            self.mod.finish(self)
        self.journal("orphans", nodes=self._orphans(T + 4.0))

    def _orphans(self, timeout: float) -> list:
        """Lock nodes (or the Redis key) still there once every session had time to end."""
        deadline = time.monotonic() + timeout
        while True:
            if self.name == "redis":
                left = [REDIS_KEY] if self._redis_value() is not None else []
            else:
                from kazoo.exceptions import KazooException, NoNodeError

                left = []
                for path in self.paths.values():
                    try:
                        self.mon.sync(path)
                        left += [f"{path}/{c}" for c in self.mon.get_children(path)]
                    except NoNodeError:
                        pass
                    except KazooException as exc:
                        left.append(f"{path}: could not list ({exc!r})")
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)

    def cleanup(self) -> None:
        for slot in self.slots:
            _killpg(slot.proc, signal.SIGCONT)
            _killpg(slot.proc, signal.SIGKILL)
            if slot.proc is not None:
                with contextlib.suppress(Exception):
                    slot.proc.wait(10)
            for p in slot.proxies:
                with contextlib.suppress(Exception):
                    p.heal()
                    p.close()
        if self.mon is not None:
            with contextlib.suppress(Exception):
                self.mon.stop()
                self.mon.close()
        self.journal.close()


# -- the whole run ---------------------------------------------------------------------------------------------
def mixed_trial():
    """:mod:`lab.mixed_trial`, imported when needed (it builds on this module's Trial)."""
    from . import mixed_trial as mod

    return mod


def redis_available() -> bool:
    if not shutil.which("redis-server"):
        return False
    try:
        import redis  # noqa: F401
    except ImportError:
        return False
    return True


def _versions(ens: Optional[Ensemble]) -> dict:
    import kazoo

    from zkrecipes import __version__

    env = {"zkrecipes": __version__, "kazoo": getattr(kazoo, "__version__", "?"), "python": platform.python_version(),
           "cpus": os.cpu_count(), "platform": platform.platform()}
    src = _ROOT
    if os.path.exists(os.path.join(src, ".git")):  # provenance: the commit (.git is a file in a worktree)
        git = ["git", "-C", src]
        head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(git + ["status", "--porcelain", "--", "zkrecipes"], capture_output=True,
                               text=True).stdout.strip()
        if head:
            env["commit"] = head + ("+local changes" if dirty else "")
    if ens is not None:
        first = four_letter(ens.client_ports[0], "srvr").splitlines()
        version = first[0].split(":", 1)[1].split(",")[0].strip() if first else "?"
        env["zookeeper"] = re.sub(r"-\$\{[^}]*\}", "", version)  # Debian's build leaves "-${mvngit.commit.id}"
    if shutil.which("redis-server"):
        env["redis_server"] = redis_version() or "?"
    return env


def run(st: Settings, out: str, keep_history: bool = False, say: Callable[[str], None] = print) -> dict:
    """Run the lab with settings ``st``; write results under ``out``; return the results dict."""
    t_start = time.monotonic()
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="zkrecipes-chaos-")
    skipped = {}
    checked = {}
    envinfo: dict = {}
    try:
        for name in st.trials:
            why = mixed_trial().skip_reason(name) if name in MIXED_TRIALS else None
            if name == "redis" and not redis_available():
                why = "redis-server or the redis client is not installed"
            if why:
                skipped[name] = why
                say(f"trial {name}: skipped ({skipped[name]})")
                continue
            d = os.path.join(tmp, name)
            os.makedirs(d)
            ens = redis_srv = None
            try:
                if name == "redis":
                    redis_srv = RedisServer(d)
                    redis_srv.start()
                    say(f"trial {name}: redis-server on 127.0.0.1:{redis_srv.port}")
                else:
                    ens = Ensemble(size=3, tick_ms=200, workdir=os.path.join(d, "zookeeper-servers")).start()
                    say(f"trial {name}: ZooKeeper ensemble at {ens.hosts} (leader: server {ens.leader()})")
                envinfo.update(_versions(ens))
                if name == "cli":
                    journal = Journal(os.path.join(d, "nemesis.jsonl"))
                    try:
                        cli_trial.CliTrial(st, d, say, ens, journal).run()
                    finally:
                        journal.close()
                elif name in MIXED_TRIALS:
                    mixed_trial().MixedTrial(name, st, d, say, ens).run()
                else:
                    Trial(name, st, d, say, ens, redis_srv).run()
            finally:
                if ens is not None:
                    ens.close()
                if redis_srv is not None:
                    redis_srv.close()
            mod = cli_trial if name == "cli" else TRIAL_MODULES.get(name)
            checked[name] = mod.check(d) if mod is not None else \
                mixed_trial().check(d) if name in MIXED_TRIALS else check_trial(d)
            say(f"trial {name}: checked")
        results = assemble(st, checked, skipped, envinfo, time.monotonic() - t_start)
    finally:
        if keep_history:
            dest = os.path.join(out, "history")
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(tmp, dest, ignore=shutil.ignore_patterns("zookeeper-servers"))
        shutil.rmtree(tmp, ignore_errors=True)
    write_results(results, out)
    return results


def _command(st: Settings) -> str:
    if getattr(st, "argv", None) is not None:
        import shlex

        return " ".join(["python -m lab.run"] + [shlex.quote(a) for a in st.argv])
    return "python -m lab.run" + (" --long" if st.long else "") + f" --seed {st.seed}"


def assemble(st: Settings, checked: dict, skipped: dict, envinfo: dict, duration: float) -> dict:
    rows, totals = [], {}
    for trial, res in checked.items():
        for impl, r in res["impls"].items():
            t = dict(r["totals"])
            t["trial"] = trial
            t["name"] = IMPL_NAMES[impl]
            t["fencing_token"] = TOKENS[impl]
            t["findings"] = t["findings"][:50]
            t["baseline"] = impl in BASELINES
            totals[impl] = t
            extra = tuple(k for k in r["rows"] if k not in FAULT_KINDS and k != "none")
            own_rows = impl == "cli" or t.get("own_rows_only")
            for kind in (tuple(r["rows"]) if own_rows else ("none",) + FAULT_KINDS + extra):
                row = r["rows"].get(kind)
                rows.append({"impl": impl, "name": IMPL_NAMES[impl], "fault": kind,
                             **(row if row is not None else {"applicable": False})})
    failures = []
    for impl, t in totals.items():
        if t["baseline"]:
            continue
        for key in hard_checks(impl):
            if key not in t:
                failures.append(f"{IMPL_NAMES[impl]}: {key} was not measured")
            elif t[key]:
                failures.append(f"{IMPL_NAMES[impl]}: {key} = {t[key]}")
        if t.get("notices_got", 0) < t.get("notices_needed", 0):
            failures.append(f"{IMPL_NAMES[impl]}: missed notices = {t['notices_needed'] - t['notices_got']}")
        failures += [f"{IMPL_NAMES[impl]}: {m}" for m in t.get("failed_checks", [])]  # a trial's own checks
        if impl in ("rw", "aio-rw") and not t.get("readers_overlapped"):
            failures.append(f"{IMPL_NAMES[impl]}: readers never held the lock together")
    failures += unexercised(checked)
    return {
        "command": _command(st),
        "seed": st.seed,
        "mode": "long" if st.long else ("short" if st.repeat == 1 and not st.faults else "custom"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "duration_s": round(duration, 1),
        "workers": st.workers,
        "session_timeout_s": st.session_timeout,
        "repeat": st.repeat,
        "environment": envinfo,
        "skipped": skipped,
        "totals": totals,
        "rows": rows,
        "failures": failures,
        "passed": not failures,
    }


def hard_checks(impl: str) -> tuple:
    """The counts that must be 0 for zkrecipes entry ``impl`` (see HARD_CHECKS, CLAIMS_INSTEAD and
    MORE_CHECKS)."""
    instead = CLAIMS_INSTEAD.get(impl, {})
    return tuple(instead.get(key, key) for key in HARD_CHECKS) + MORE_CHECKS.get(impl, ())


def unexercised(checked: dict) -> list:
    """Failures for a trial with a zkrecipes entry in which a holder fault kind it scheduled struck no holder
    of any of its implementations: the run did not test what it claims to (``hits``, summed over the
    trial's entries; a kind's row exists when the kind was scheduled)."""
    out = []
    for trial, res in checked.items():
        impls = res["impls"]
        if all(impl in BASELINES for impl in impls):
            continue
        for kind in HOLDER_FAULTS:
            rows = [r["rows"][kind] for r in impls.values() if kind in r["rows"]]
            if rows and not sum(r.get("hits", 0) for r in rows):
                out.append(f"trial {trial}: {kind} struck no holder "
                           f"({max(r.get('faults', 0) for r in rows)} injected)")
    return out


def _cell(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def markdown(res: dict) -> str:
    """The results as markdown: a summary per implementation and one row per implementation and fault."""
    lines = [
        f"Safety lab, {res['mode']} run, `{res['command']}`, {res['date']}, {res['duration_s']:.0f} s; "
        f"{res['workers']} workers, session timeout / lease {res['session_timeout_s']:g} s, "
        f"each fault {res['repeat']}x. Environment: "
        + ", ".join(f"{k} {v}" for k, v in res["environment"].items() if k != "platform") + ".",
        "",
        "| Lock | Fencing token | Grants | Accepted writes | Final value | Lost increments | Accepted overlaps "
        "| Unsafe overlaps | Rejected ops | Out-of-order grants | Loss notices got/needed (late) | Orphans "
        "| Hung workers | Readers together |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in res["totals"].values():
        lines.append(
            f"| {t['name']} | {t['fencing_token']} | {t['grants']} | {t['accepted_writes']} | {t['final_value']} "
            f"| {t['lost_increments']} | {t['accepted_overlaps']} | {t['unsafe']} | {t['ops_rejected']} "
            f"| {t['out_of_order']} | {t['notices_got']}/{t['notices_needed']} ({t['notices_late']}) "
            f"| {t['orphans']} | {t['hung']} | {_cell(t['readers_overlapped'])} |"
        )
    for name, why in res["skipped"].items():
        lines.append(f"| {name} trial | skipped: {why} |||||||||||||")
    notes = [f"- {t['name']}: {t['note']}" for t in res["totals"].values() if t.get("note")]
    lines += [""] + notes if notes else []
    lines += [
        "",
        "| Lock | Fault | Faults (holder hit) | Grants | Ops ok | Ops rejected | Unsafe overlaps | Accepted overlaps "
        "| Lost increments | Out-of-order grants | Loss notices got/needed (late) | Max notice delay (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        if r.get("applicable") is False:
            lines.append(f"| {r['name']} | {r['fault']} | n/a |||||||||")
            continue
        faults = "–" if r["fault"] == "none" else f"{r['faults']} ({r['hits']})"
        notices = f"{r['notices_got']}/{r['notices_needed']} ({r['notices_late']})" if r["notices_needed"] else "–"
        lines.append(
            f"| {r['name']} | {r['fault']} | {faults} | {r['grants']} | {r['ops_ok']} | {r['ops_rejected']} "
            f"| {r['unsafe']} | {r['accepted_overlaps']} | {r['lost_increments']} | {r['out_of_order']} "
            f"| {notices} | {_cell(r['max_notice_delay'])} |"
        )
    lines += ["", "Verdict for zkrecipes: " + ("PASS" if res["passed"] else "FAIL: " + "; ".join(res["failures"]))]
    return "\n".join(lines) + "\n"


def rst(res: dict) -> str:
    """The same tables as reStructuredText list-tables, for ``.. include::`` in the docs."""

    def table(title: str, header: list, body: list) -> list:
        out = [f".. list-table:: {title}", "   :header-rows: 1", ""]
        for r in [header] + body:
            out.append("   * - " + str(r[0]))
            out += [f"     - {c}" for c in r[1:]]
        return out + [""]

    summary = [[t["name"], t["fencing_token"], t["grants"], t["accepted_writes"], t["final_value"],
                t["lost_increments"], t["accepted_overlaps"], t["unsafe"], t["ops_rejected"], t["out_of_order"],
                f"{t['notices_got']}/{t['notices_needed']} ({t['notices_late']})", t["orphans"], t["hung"],
                _cell(t["readers_overlapped"])] for t in res["totals"].values()]
    per = []
    for r in res["rows"]:
        if r.get("applicable") is False:
            per.append([r["name"], r["fault"], "n/a"] + [""] * 9)
            continue
        per.append([r["name"], r["fault"], "–" if r["fault"] == "none" else f"{r['faults']} ({r['hits']})",
                    r["grants"], r["ops_ok"], r["ops_rejected"], r["unsafe"], r["accepted_overlaps"],
                    r["lost_increments"], r["out_of_order"],
                    f"{r['notices_got']}/{r['notices_needed']} ({r['notices_late']})" if r["notices_needed"] else "–",
                    _cell(r["max_notice_delay"])])
    env = ", ".join(f"{k} {v}" for k, v in res["environment"].items() if k != "platform")
    lines = [f"``{res['command']}`` ({res['mode']} run, {res['date']}, {res['duration_s']:.0f} s; "
             f"{res['workers']} workers, session timeout / lease {res['session_timeout_s']:g} s, each fault "
             f"{res['repeat']}x; {env}).", ""]
    lines += table("Per implementation", ["Lock", "Fencing token", "Grants", "Accepted writes", "Final value",
                                          "Lost increments", "Accepted overlaps", "Unsafe overlaps", "Rejected ops",
                                          "Out-of-order grants", "Loss notices got/needed (late)", "Orphans",
                                          "Hung workers", "Readers together"], summary)
    notes = [f"- {t['name']}: {t['note']}" for t in res["totals"].values() if t.get("note")]
    lines += notes + [""] if notes else []
    lines += table("Per implementation and fault", ["Lock", "Fault", "Faults (holder hit)", "Grants", "Ops ok",
                                                    "Ops rejected", "Unsafe overlaps", "Accepted overlaps",
                                                    "Lost increments", "Out-of-order grants",
                                                    "Loss notices got/needed (late)", "Max notice delay (s)"], per)
    for name, why in res["skipped"].items():
        lines += [f"The {name} trial was skipped: {why}.", ""]
    lines += ["Verdict for zkrecipes: " + ("**pass**." if res["passed"] else "**fail**: " + "; ".join(res["failures"])),
              ""]
    return "\n".join(lines)


def write_results(res: dict, out: str) -> None:
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
        f.write("\n")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(res))
    with open(os.path.join(out, "results.inc"), "w") as f:
        f.write(rst(res))


def _on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--long", action="store_true", help="every trial, each fault 3 times")
    p.add_argument("--seed", type=int, default=1, help="seed of the fault schedule and the workers (default 1)")
    p.add_argument("--out", default="safety-results", help="directory for results.json/.md/.inc")
    p.add_argument("--trials", help=f"comma-separated subset of {','.join(TRIALS)} (default: zk; --long: all)")
    p.add_argument("--faults", help=f"comma-separated fault kinds, only these (default: all; the short run of "
                                    f"{', '.join(TRIAL_MODULES)}: {', '.join(SHORT_KINDS)})")
    p.add_argument("--repeat", type=int, help="instances of each fault kind (default 1; --long: 3)")
    p.add_argument("--workers", type=int, default=8, help="worker processes per trial (default 8)")
    p.add_argument("--session-timeout", type=float, default=3.0, help="session timeout / lock lease, s (3)")
    p.add_argument("--keep-history", action="store_true", help="keep every history file under OUT/history")
    args = p.parse_args(argv)
    if args.workers < 2:
        p.error("--workers must be at least 2")
    trials = tuple(args.trials.split(",")) if args.trials else (tuple(TRIALS) if args.long else ("zk",))
    for t in trials:
        if t not in TRIALS:
            p.error(f"unknown trial {t!r}; choose from {', '.join(TRIALS)}")
    faults = tuple(args.faults.split(",")) if args.faults else None
    for k in faults or ():
        if k not in FAULT_KINDS:
            p.error(f"unknown fault kind {k!r}; choose from {', '.join(FAULT_KINDS)}")
    st = Settings(
        seed=args.seed, workers=args.workers, session_timeout=args.session_timeout, long=args.long, trials=trials,
        faults=faults,
        repeat=args.repeat or (3 if args.long else 1), settle=2.0 if args.long else 1.0,
        argv=list(sys.argv[1:] if argv is None else argv),
    )
    signal.signal(signal.SIGTERM, _on_sigterm)
    t0 = time.monotonic()

    def say(msg: str) -> None:
        sys.stderr.write(f"[{time.monotonic() - t0:6.1f}s] {msg}\n")
        sys.stderr.flush()

    import logging

    logging.basicConfig(level=logging.CRITICAL)
    res = run(st, args.out, keep_history=args.keep_history, say=say)
    sys.stdout.write(markdown(res))
    say(f"results in {os.path.abspath(args.out)}")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
