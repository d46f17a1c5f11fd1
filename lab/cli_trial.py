"""The lab's ``cli`` trial: can two ``zkrecipes lock`` commands ever run at once?

Several loops (threads of the nemesis) each run ``zkrecipes lock PATH --session-timeout T -- CHILD`` over
and over, every one through its own loopback :class:`~zkrecipes.testing.Partition` proxies. Each child
records its start (with the children it still finds running, by pid and a per-trial marker in
``/proc``) and, if it is not stopped, its end; every other child ignores SIGTERM, so the CLI must SIGKILL
it in time. The nemesis freezes (``silent-partition``) or cuts (``partition``) the link of the loop whose
child is running, for longer than the session timeout, then heals it.

The checker counts *overlapping children*: a child that found another one still running when it
started, or two recorded intervals that intersect. Must be 0: the CLI stops its child before the
server can expire the holder's session, on a silent partition as on a closed one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Callable, Optional

from zkrecipes.testing import Ensemble, Partition
from zkrecipes.testing._proc import die_with_parent

KINDS = ("silent-partition", "partition")
LOOPS = 4
NAME = "zkrecipes lock (CLI)"

CHILD = textwrap.dedent(
    """
    import json, os, signal, sys, time
    events, hold, stubborn, marker = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL stops this one
    me = os.getpid()

    def running(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            return False
        return state not in ("Z", "X") and marker.encode() in cmd

    others = []
    with open(events) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r["ev"] == "start" and r["pid"] != me and running(r["pid"]):
                others.append(r["pid"])
    fd = os.open(events, os.O_WRONLY | os.O_APPEND)
    rec = {"ev": "start", "pid": me, "cli": os.getppid(), "t": time.monotonic(), "running": others,
           "token": os.environ.get("ZKRECIPES_TOKEN"), "stubborn": stubborn}
    os.write(fd, (json.dumps(rec) + "\\n").encode())
    end = time.monotonic() + hold
    while time.monotonic() < end:
        time.sleep(0.02)
    os.write(fd, (json.dumps({"ev": "end", "pid": me, "t": time.monotonic()}) + "\\n").encode())
    """
)


def _load(path: str) -> list:
    out = []
    with open(path, "rb") as f:
        for line in f:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


class CliTrial:
    """``zkrecipes lock`` commands under silent and closed partitions of their holder's link."""

    def __init__(self, st, workdir: str, say: Callable[[str], None], ens: Ensemble, journal) -> None:
        self.st, self.dir, self.say, self.ens, self.journal = st, workdir, say, ens, journal
        self.rnd = random.Random(f"{st.seed}-cli")
        self.path = f"/zkrecipes-chaos/{uuid.uuid4().hex[:8]}-cli/lock"
        self.marker = f"zkrecipes-cli-trial-{uuid.uuid4().hex[:12]}"
        self.events = os.path.join(workdir, "children.jsonl")
        open(self.events, "w").close()
        self.child = os.path.join(workdir, f"{self.marker}.py")  # the marker is in every child's cmdline
        with open(self.child, "w") as f:
            f.write(CHILD)
        self.proxies = [[Partition(ens.host(i)) for i in range(ens.size)] for _ in range(LOOPS)]
        self.current: list = [None] * LOOPS  # each loop's running CLI process
        self.stop = threading.Event()
        self.threads: list = []

    def plan(self) -> list:
        # the long run: at least 20 silent partitions (issue 28's bar), a few closed ones beside
        n = {"silent-partition": 20, "partition": 5} if self.st.long else {"silent-partition": 2, "partition": 1}
        kinds = [k for k in KINDS for _ in range(n[k])]
        self.rnd.shuffle(kinds)
        return kinds

    def _loop(self, i: int) -> None:
        T = self.st.session_timeout
        hosts = ",".join(p.hosts for p in self.proxies[i])
        n = 0
        while not self.stop.is_set():
            n += 1
            hold = f"{self.rnd.uniform(3.0, 5.0):.2f}"  # outlasts the fault's notice: every hit child is stopped
            cmd = [sys.executable, "-m", "zkrecipes.cli", "lock", self.path, "--hosts", hosts,
                   "--session-timeout", f"{T:g}", "--timeout", "60", "--",
                   sys.executable, self.child, self.events, hold, "1" if i % 2 else "0", self.marker]
            with open(os.path.join(self.dir, f"cli-{i}.log"), "ab") as log:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                        start_new_session=True, preexec_fn=die_with_parent)
            self.current[i] = proc
            code = proc.wait()
            self.journal("cli_exit", loop=i, run=n, pid=proc.pid, code=code)

    def _holder(self, timeout: float = 15.0) -> Optional[tuple]:
        """The loop whose child is running now, and that child's start record."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            recs = _load(self.events)
            ended = {r["pid"] for r in recs if r["ev"] == "end"}
            for r in reversed([r for r in recs if r["ev"] == "start"]):
                if r["pid"] in ended or time.monotonic() - r["t"] > 0.8:
                    break  # land the fault early in a hold (holds last 3-5 s)
                for i, proc in enumerate(self.current):
                    if proc is not None and proc.pid == r["cli"] and proc.poll() is None:
                        return i, r
                break
            time.sleep(0.05)
        return None

    def run(self) -> None:
        T = self.st.session_timeout
        plan = self.plan()
        with open(os.path.join(self.dir, "meta.json"), "w") as f:
            json.dump({"trial": "cli", "impls": ["cli"], "session_timeout": T, "fault_kinds": list(KINDS),
                       "plan": plan, "seed": self.st.seed, "path": self.path}, f)
        try:
            for i in range(LOOPS):
                t = threading.Thread(target=self._loop, args=(i,), name=f"cli-loop-{i}", daemon=True)
                t.start()
                self.threads.append(t)
            self.say(f"{LOOPS} zkrecipes lock loops up on {self.path}")
            for n, kind in enumerate(plan, 1):
                found = self._holder()
                if found is None:
                    self.journal("fault_skipped", id=f"cli-{n}", kind=kind, reason="no running child found")
                    self.say(f"  {kind}: no running child found; skipped")
                    continue
                i, child = found
                dur = T + (self.rnd.uniform(1.0, 2.0) if self.st.long else 1.5)
                self.journal("fault_start", id=f"cli-{n}", kind=kind, loop=i, child=child["pid"], duration=dur)
                for p in self.proxies[i]:
                    if kind == "partition":
                        p.cut()
                    else:
                        p.freeze()
                time.sleep(dur)  # the fault itself
                for p in self.proxies[i]:
                    p.heal()
                self.journal("fault_end", id=f"cli-{n}")
                self.say(f"  {kind} of the link of loop {i} (child {child['pid']})")
                time.sleep(self.st.settle)
            self.shutdown()
        finally:
            self.cleanup()

    def shutdown(self) -> None:
        T = self.st.session_timeout
        self.stop.set()
        stop_t = self.journal("stop")["t"]
        for i, t in enumerate(self.threads):
            # the commands still queued each wait for the ones ahead to run their child (at most 5 s each)
            t.join(max(0.1, stop_t + T + 12.0 + LOOPS * 5.0 - time.monotonic()))
            if t.is_alive():
                proc = self.current[i]
                self.journal("hung", loop=i, pid=proc.pid if proc else None)
        self.journal("orphans", nodes=self._orphans(T + 4.0))

    def _orphans(self, timeout: float) -> list:
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        zk = KazooClient(hosts=self.ens.hosts, timeout=10.0)
        zk.start(timeout=30)
        try:
            deadline = time.monotonic() + timeout
            while True:
                zk.sync(self.path)
                try:
                    left = [f"{self.path}/{c}" for c in zk.get_children(self.path)]
                except NoNodeError:
                    left = []
                if not left or time.monotonic() > deadline:
                    return left
                time.sleep(0.2)
        finally:
            zk.stop()
            zk.close()

    def cleanup(self) -> None:
        self.stop.set()
        for proc in self.current:
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    proc.wait(10)
        for loop in self.proxies:
            for p in loop:
                with contextlib.suppress(Exception):
                    p.heal()
                    p.close()


def check(path: str) -> dict:
    """Verdict of one cli trial directory, in :func:`lab.check.check_trial`'s shape."""
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    recs = _load(os.path.join(path, "children.jsonl"))
    nemesis = _load(os.path.join(path, "nemesis.jsonl"))
    starts = [r for r in recs if r["ev"] == "start"]
    ends = {r["pid"]: r["t"] for r in recs if r["ev"] == "end"}
    findings = []
    overlapping = set()
    for r in starts:
        if r["running"]:
            overlapping.add(r["pid"])
            findings.append({"what": "a child started while another ran", "t": r["t"], "child": r["pid"],
                             "running": r["running"]})
    by_start = sorted(starts, key=lambda r: r["t"])
    for a, b in zip(by_start, by_start[1:]):  # recorded intervals: the next must start after the last ended
        if a["pid"] in ends and ends[a["pid"]] > b["t"] and b["pid"] not in overlapping:
            overlapping.add(b["pid"])
            findings.append({"what": "intervals intersect", "t": b["t"], "child": b["pid"], "other": a["pid"]})
    tokens = [int(r["token"]) for r in by_start if r.get("token")]
    if any(x >= y for x, y in zip(tokens, tokens[1:])):
        findings.append({"what": "fencing tokens not increasing in start order", "tokens": tokens[:50]})
    faults = {e["id"]: e for e in nemesis if e["ev"] == "fault_start"}
    rows: dict = {kind: {"faults": 0, "hits": 0, "stopped": 0} for kind in meta["fault_kinds"]}  # as scheduled
    stopped = 0
    for f in faults.values():
        row = rows.setdefault(f["kind"], {"faults": 0, "hits": 0, "stopped": 0})
        row["faults"] += 1
        row["hits"] += 1
        if f["child"] not in ends:  # SIGTERM or SIGKILL ended it before its hold ran out
            row["stopped"] += 1
            stopped += 1
    orphans = next((e["nodes"] for e in nemesis if e["ev"] == "orphans"), [])
    hung = sum(1 for e in nemesis if e["ev"] == "hung")
    grants = len(starts)
    common = {"grants": grants, "ops_ok": len(ends), "ops_rejected": 0, "unsafe": len(overlapping),
              "accepted_overlaps": len(overlapping), "lost_increments": 0, "out_of_order": 0, "notices_late": 0,
              "max_notice_delay": None}
    totals = dict(common, accepted_writes=len(ends), final_value=None, notices_needed=len(faults),
                  notices_got=stopped, orphans=len(orphans), orphan_nodes=orphans, hung=hung,
                  readers_overlapped=None, crashes=[], findings=findings, stalls=0, duplicate_nodes=0,
                  faults=len(faults), session_timeout=meta["session_timeout"])
    fault_ends = {e["id"]: e["t"] for e in nemesis if e["ev"] == "fault_end"}
    tail = float(meta["session_timeout"]) + 2.0

    def during(kind: str, t: float) -> bool:  # inside a fault window of ``kind`` (start .. end + T + 2 s)
        return any(f["kind"] == kind and f["t"] <= t <= fault_ends.get(fid, f["t"]) + tail
                   for fid, f in faults.items())

    out_rows = {}
    for kind, r in rows.items():
        n = sum(1 for x in starts if x["pid"] in overlapping and during(kind, x["t"]))
        out_rows[kind] = dict(common, faults=r["faults"], hits=r["hits"], notices_needed=r["hits"],
                              notices_got=r["stopped"], grants=sum(1 for x in starts if during(kind, x["t"])),
                              ops_ok=0, unsafe=n, accepted_overlaps=n)
    return {"impls": {"cli": {"totals": totals, "rows": out_rows}}}
