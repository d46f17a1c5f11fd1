"""One trial of the safety lab (:mod:`lab.run`): its worker processes and the nemesis that strikes them.

A :class:`Trial` runs one lock implementation (or the three zkrecipes recipes) on an ensemble it is
given: it starts the workers (:mod:`lab.worker`) behind their own :class:`~zkrecipes.testing.Partition`
proxies, injects a seeded schedule of faults (``lab.catalog.FAULT_KINDS``) aimed at the current holder
or at the servers, records each one in ``nemesis.jsonl`` (:class:`Journal`), waits for the locks to
move again after each, then stops the workers and lists the nodes left behind. It judges nothing: the
checker reads the histories afterwards. Every process it starts is killed however it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from typing import Callable, Optional

from zkrecipes.testing import Ensemble, Partition
from zkrecipes.testing._proc import die_with_parent

from .catalog import (
    BASELINES,
    FAULT_KINDS,
    HOLDER_FAULTS,
    IMPL_NAMES,
    REDIS_KEY,
    RETRIES,
    SHORT_KINDS,
    TRIAL_MODULES,
    TRIALS,
    Settings,
)
from .check import _load_jsonl, frozen_after, struck_at
from .fenced import FencedRegister
from .redis_server import RedisServer

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: workers import lab


def _killpg(proc: Optional[subprocess.Popen], sig: int) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)



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
        fault = {"kind": mine["fault_start"]["kind"], "start": mine["fault_start"]["t"], "end": mine["fault_end"]["t"],
                 "target_pid": mine["fault_start"].get("target_pid")}
        if "stopped" in mine["fault_end"]:
            fault["stopped"] = mine["fault_end"]["stopped"]
        events = _load_jsonl(history)
        frozen = frozen_after(fault, events)  # a pause that took effect late: as the checker sees it
        if frozen is not None:
            fault["frozen"] = frozen
        at = struck_at(fault)
        released = [e["t"] for e in events if e["ev"] == "release_start" and e.get("hold") == hold]
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
        kinds = [k for k in self.kinds for _ in range(self.st.repeat_of(self.name))]
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

                from .worker_base import FAST_RECONNECT

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
