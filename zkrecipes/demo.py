"""The demo behind ``zkrecipes demo`` / ``make demo``: worker processes use every recipe while things break.

Worker processes (each its own ZooKeeper session) (a) take a FairLock in turn and append to a shared log,
(b) share a ReadWriteLock (readers overlap, writers alone), (c) elect a leader. Part-way through, the
leader worker is killed (SIGKILL); once another worker leads, one ZooKeeper server -- the ZooKeeper
leader -- is killed too (only for the embedded ensemble). The verdict is computed from the histories the
workers recorded, not from what they claim.

The run is driven by the parent: workers stop when their stdin closes, so a run never ends before the
failover it is waiting for, and workers never outlive the demo.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, TextIO, Tuple

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from ._connect import Security
    from .election import LeaderElection
    from .naming import Contender

Event = Dict[str, Any]  # one line of a worker's history
Interval = Tuple[float, float, str]  # (start, end, worker)

SESSION_TIMEOUT = 3.0  # of the workers' sessions: a killed leader is replaced about this long after
FAILOVER_SLACK = 3.0  # allowed on top of it (server tick, ZooKeeper's own elections, a loaded machine)
MIN_SECONDS = 6.0
MAX_WORKERS = 20
WAIT_LIMIT = 30.0  # for a leader to appear / a worker to stop


# -- workers (run as ``python -m zkrecipes.demo worker ...``) ------------------------------------------
def _worker(role: str, hosts: str, path: str, out: str, index: int) -> None:
    from kazoo.client import KazooClient

    from . import FairLock, LeaderElection, LockLost, ReadWriteLock, _connect

    rnd = random.Random(index)
    security = _connect.from_args()  # the parent passed its TLS/SASL/auth settings in our environment
    acl = security.acl()
    client = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT, **security.kazoo_kwargs())
    client.start(timeout=WAIT_LIMIT)
    stop = threading.Event()
    cancellers: List[Callable[[], None]] = []

    def watch_stdin() -> None:  # the parent closes our stdin to end the run (or dies)
        sys.stdin.read()
        stop.set()
        while True:  # a cancel lands only on an acquire already under way: repeat until we are done
            for c in cancellers:
                c()
            time.sleep(0.1)

    threading.Thread(target=watch_stdin, daemon=True).start()
    name = f"{role}-{index}"
    with open(out, "a", buffering=1) as f:

        def rec(ev: str, **kw: Any) -> None:
            f.write(json.dumps({"t": time.monotonic(), "w": name, "pid": os.getpid(), "ev": ev, **kw}) + "\n")

        if role == "fair":
            lock = FairLock(client, f"{path}/fair", identifier=name, acl=acl)
            cancellers.append(lock.cancel)
            while not stop.is_set():
                if not lock.acquire():
                    break
                rec("grant", node=lock.node, token=lock.token)
                with open(os.path.join(os.path.dirname(out), "shared.log"), "a") as log:
                    log.write(f"{name} token={lock.token}\n")
                time.sleep(rnd.uniform(0.02, 0.06))
                rec("release", lost=lock.lost.is_set())
                lock.release()
        elif role == "rw":
            rw = ReadWriteLock(client, f"{path}/rw", identifier=name, acl=acl)
            cancellers.extend([rw.read().cancel, rw.write().cancel])
            while not stop.is_set():
                side = rw.write() if rnd.random() < 0.25 else rw.read()
                kind = "write" if side is rw.write() else "read"
                if not side.acquire():
                    break
                rec("grant", kind=kind, token=side.token)
                time.sleep(rnd.uniform(0.05, 0.12))
                rec("release", kind=kind)
                side.release()
        elif role == "elect":
            election = LeaderElection(client, f"{path}/election", identifier=name, acl=acl)
            cancellers.append(election.cancel)

            def lead() -> None:
                rec("leader", token=election.token)
                try:
                    while not stop.is_set():
                        election.check()
                        time.sleep(0.05)
                    rec("resign")
                except LockLost:
                    rec("lost")

            while not stop.is_set():
                if not election.campaign():
                    break
                lead()
                election.resign()
    client.stop()
    client.close()


# -- the run -----------------------------------------------------------------------------------------
def run_demo(
    hosts: Optional[str],
    workers: int,
    seconds: float,
    out: TextIO,
    connect: "Callable[[str, Optional[Security]], KazooClient]",
    security: "Optional[Security]" = None,
) -> int:
    """Run the demo for about ``seconds`` and print its verdict; 0 when every check passed, 1 otherwise.
    ``connect(hosts, security)`` gives a started client; ``security`` (TLS/SASL/auth for ``hosts``) is
    passed on to the workers in their environment. Without ``hosts`` (or ZK_HOSTS) it starts a local
    ensemble, or raises :class:`~zkrecipes.testing.ZooKeeperNotFound`."""
    from . import _connect

    hosts = hosts or os.environ.get("ZK_HOSTS")
    ensemble = None
    t0 = time.monotonic()

    def say(msg: str) -> None:
        out.write(f"[{time.monotonic() - t0:5.1f}s] {msg}\n")
        out.flush()

    if not hosts:
        security = None  # our own ensemble is an open one
        from .testing import Ensemble

        say("starting a local 3-server ZooKeeper ensemble ...")
        ensemble = Ensemble(size=3, tick_ms=200).start()
        hosts = ensemble.hosts
        say(f"ensemble up at {hosts} (ZooKeeper leader: server {ensemble.leader()})")
    tmp = tempfile.mkdtemp(prefix="zkrecipes-demo-")
    path = f"/zkrecipes-demo/{uuid.uuid4().hex[:8]}"
    procs: List["subprocess.Popen[bytes]"] = []
    client = None
    try:
        client = connect(hosts, security)
        worker_env = dict(os.environ, **(security or _connect.Security()).env())
        say(f"{workers} workers each on a FairLock, a ReadWriteLock and a LeaderElection under {path}, "
            f"about {seconds:g} s")
        start = time.monotonic()
        for role in ("fair", "rw", "elect"):
            for i in range(workers):
                cmd = [sys.executable, "-m", "zkrecipes.demo", "worker", role, hosts, path,
                       os.path.join(tmp, f"{role}-{i}.jsonl"), str(i)]
                procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, env=worker_env))
        from . import LeaderElection

        observer = LeaderElection(client, f"{path}/election")
        leader = _wait_for(lambda: observer.leader(), WAIT_LIMIT)
        kill_t, killed, zk_killed, zk_kill_t = None, None, None, None
        if leader is None or leader.pid is None:
            say(f"no leader elected within {WAIT_LIMIT:g} s")
        else:
            _sleep_until(start + seconds * 0.4)
            now = observer.leader()
            if now is not None and now.pid is not None:
                leader = now
            pid = leader.pid if leader.pid is not None else 0
            killed, kill_t = leader.identifier, time.monotonic()
            if pid > 0:  # (never 0: that would signal our own process group)
                os.kill(pid, signal.SIGKILL)
            say(f"killed the leader worker {leader.identifier} (pid {pid}) with SIGKILL")
            new = _wait_for(lambda: _other_leader(observer, killed), SESSION_TIMEOUT + WAIT_LIMIT)
            if new is not None:
                say(f"{new.identifier} leads now")
        if ensemble is not None:
            _sleep_until(start + seconds * 0.6)
            zk_killed, zk_kill_t = ensemble.leader(), time.monotonic()
            if zk_killed is not None:
                ensemble.kill(zk_killed)
                say(f"killed ZooKeeper server {zk_killed} (the ZooKeeper leader)")
        _sleep_until(max(start + seconds, (zk_kill_t or 0.0) + 1.5))
        say("stopping the workers")
        _stop_all(procs)
        if ensemble is not None and zk_killed is not None:
            ensemble.start(zk_killed)
            say(f"ZooKeeper server {zk_killed} restarted and serving")
        events = _load(tmp)
        ok = _verdict(events, kill_t, killed, zk_killed, zk_kill_t, say)
        lines = 0
        if os.path.exists(os.path.join(tmp, "shared.log")):
            with open(os.path.join(tmp, "shared.log")) as f:
                lines = sum(1 for _ in f)
        say(f"shared log written by fair-lock holders: {lines} lines")
        say("verdict: " + ("PASS, every check held" if ok else "FAIL, see the FAIL lines above"))
        return 0 if ok else 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if client is not None:
            _close_quietly(client)
        if ensemble is not None:
            ensemble.close()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def _wait_for(fn: "Callable[[], Optional[Contender]]", timeout: float) -> "Optional[Contender]":
    """Poll ``fn`` until it returns something truthy or ``timeout`` passes (then None)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = fn()
        except Exception:
            value = None
        if value or time.monotonic() >= deadline:
            return value or None
        time.sleep(0.05)


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _other_leader(observer: "LeaderElection", killed: Optional[str]) -> "Optional[Contender]":
    leader = observer.leader()
    return leader if leader is not None and leader.identifier != killed else None


def _stop_all(procs: "List[subprocess.Popen[bytes]]") -> None:
    """Close every worker's stdin (their signal to stop), then wait; kill the ones that do not stop."""
    for p in procs:
        try:
            if p.stdin is not None:
                p.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + WAIT_LIMIT
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _close_quietly(client: "KazooClient") -> None:
    try:
        client.stop()
        client.close()
    except Exception:
        pass


def _load(tmp: str) -> List[Event]:
    events: List[Event] = []
    for name in os.listdir(tmp):
        if name.endswith(".jsonl"):
            with open(os.path.join(tmp, name)) as f:
                for line in f:
                    try:
                        events.append(json.loads(line))
                    except ValueError:
                        pass  # a worker killed mid-line
    events.sort(key=lambda e: e["t"])
    return events


def _intervals(
    events: List[Event], role: str, kind: Optional[str] = None, killed: Optional[Tuple[Optional[str], float]] = None
) -> List[Tuple[float, float, str, Event]]:
    """[(start, end, worker, grant-event)] from grant/release pairs of one role; a hold still open at the
    end lasts until the end, or until the kill for ``killed`` = (worker, time)."""
    open_: Dict[str, Event] = {}
    out: List[Tuple[float, float, str, Event]] = []
    for e in events:
        if not e["w"].startswith(role + "-") or (kind and e.get("kind") != kind):
            continue
        if e["ev"] in ("grant", "leader"):
            open_[e["w"]] = e
        elif e["ev"] in ("release", "resign", "lost") and e["w"] in open_:
            g = open_.pop(e["w"])
            out.append((g["t"], e["t"], e["w"], g))
    end = events[-1]["t"] if events else 0.0
    for w, g in open_.items():
        out.append((g["t"], killed[1] if killed and killed[0] == w else end, w, g))
    return sorted(out)


def _overlaps(a: List[Tuple[float, float, str, Event]], b: List[Tuple[float, float, str, Event]]) -> int:
    return sum(1 for x in a for y in b if x is not y and x[0] < y[1] and y[0] < x[1])


def _verdict(
    events: List[Event],
    kill_t: Optional[float],
    killed: Optional[str],
    zk_killed: Optional[int],
    zk_kill_t: Optional[float],
    say: Callable[[str], None],
) -> bool:
    checks: List[bool] = []

    def check(ok: bool, text: str) -> None:
        checks.append(ok)
        say(("PASS " if ok else "FAIL ") + text)

    fair = _intervals(events, "fair")
    grants = [g for _, _, _, g in fair]
    tokens = [g["token"] for g in grants]
    # queue order is node creation order (the czxid); sequence numbers restart if the container parent
    # is reaped while every worker is between two acquires, so they are not compared across the run
    check(len(fair) > 0 and tokens == sorted(tokens), f"fair lock: {len(fair)} grants, in FIFO (queue) order")
    check(_overlaps(fair, fair) == 0, "fair lock: no two holders at once")
    check(tokens == sorted(tokens) and len(set(tokens)) == len(tokens), "fair lock: fencing tokens strictly increase")
    writes, reads = _intervals(events, "rw", "write"), _intervals(events, "rw", "read")
    check(_overlaps(writes, writes + reads) == 0, f"rw lock: {len(writes)} writes, none overlapped a reader or writer")
    peak = _peak(reads)
    check(peak >= 2, f"rw lock: {len(reads)} reads, up to {peak} readers held it together")
    leaders = _intervals(events, "elect", killed=(killed, kill_t) if kill_t else None)
    check(_overlaps(leaders, leaders) == 0 and len(leaders) > 0,
          f"election: {len(leaders)} leadership terms, never two leaders at once")
    ltokens = [g["token"] for _, _, _, g in leaders]
    check(ltokens == sorted(ltokens), "election: leader tokens increase")
    if kill_t is None:
        check(False, "election: no leader to kill")
    else:
        after = [s for s, _, w, _ in leaders if s > kill_t and w != killed]
        if after:
            fo = after[0] - kill_t
            check(fo <= SESSION_TIMEOUT + FAILOVER_SLACK, f"election: new leader {fo:.2f} s after the leader "
                  f"was killed (its session timeout: {SESSION_TIMEOUT:g} s)")
        else:
            check(False, "election: no new leader after the leader was killed")
    if zk_killed is not None and zk_kill_t is not None:
        later = [s for s, _, _, _ in fair if s > zk_kill_t]
        check(len(later) > 0, f"fair lock: {len(later)} grants after ZooKeeper server {zk_killed} was killed")
    return all(checks)


def _peak(intervals: List[Tuple[float, float, str, Event]]) -> int:
    points = sorted([(s, 1) for s, _, _, _ in intervals] + [(e, -1) for _, e, _, _ in intervals])
    cur = best = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(prog="python -m zkrecipes.demo")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    for name in ("role", "hosts", "path", "out"):
        w.add_argument(name)
    w.add_argument("index", type=int)
    args = p.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.CRITICAL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    try:
        _worker(args.role, args.hosts, args.path, args.out, args.index)
    except Exception as exc:
        print(f"zkrecipes demo: worker {args.role}-{args.index} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
