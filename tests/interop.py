"""Mixed fleets on one path: kazoo's own recipes and Apache Curator's (Java) beside zkrecipes, each
contender in its own process (Curator: one JVM, one thread and session per contender), every hold recorded
on CLOCK_MONOTONIC (``time.monotonic()`` in Python, ``System.nanoTime()`` in Java) and compared.

Used by tests/test_interop.py; run as a script for the before/after figures of issue 13:
``.venv/bin/python tests/interop.py [--holds 60] [--zkrecipes-from DIR]`` (DIR: another checkout's root,
e.g. the code before node formats existed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from zkrecipes.testing import _java

HERE = Path(__file__).resolve().parent
WORKER = HERE / "interop_worker.py"
JAVA_SOURCE = HERE / "interop" / "CuratorWorker.java"
JAVA_OPTS = ("-Xms16m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
READERS = ("kazoo-read", "zk-read", "read")


class Hold(NamedTuple):
    who: str  # "python:<recipe>" or "curator:<recipe>"
    kind: str  # "R" or "W"
    node: str
    sequence: int
    t0: float
    t1: float


class Result(NamedTuple):
    holds: List[Hold]
    errors: List[str]  # "error ..." lines of workers (a refusal, say)


def curator_classpath(java_dir: str = "/usr/share/java") -> Tuple[Optional[str], str]:
    """``(classpath, "")`` with JAVA_SOURCE compiled (the kit's one compile-and-cache helper), or ``(None, why)``."""
    return _java.curator_classpath(JAVA_SOURCE, java_dir)


class Worker:
    """A worker process speaking the line protocol of interop_worker.py / CuratorWorker.java."""

    def __init__(self, argv: Sequence[str], env: Optional[Dict[str, str]] = None) -> None:
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.lines: List[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self.lines.append("<eof>")
            self._cond.notify_all()

    def wait_line(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if line.startswith(prefix):
                        return line
                    if line == "<eof>":
                        raise RuntimeError(f"worker {self.proc.args!r} ended before {prefix!r}:\n"
                                           f"{self.lines}\n{self.stderr()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"worker {self.proc.args!r}: no {prefix!r} within {timeout} s: {self.lines}")
                self._cond.wait(left)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read()[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                try:
                    f.close()
                except Exception:
                    pass


def python_worker(hosts: str, path: str, recipe: str, holds: int, hold_ms: int,
                  zkrecipes_from: Optional[str] = None) -> Worker:
    env = dict(os.environ)
    if zkrecipes_from:
        env["PYTHONPATH"] = zkrecipes_from
    return Worker([sys.executable, str(WORKER), hosts, path, recipe, str(holds), str(hold_ms)], env)


def curator_worker(classpath: str, hosts: str, path: str, recipes: Sequence[str], holds: int, hold_ms: int) -> Worker:
    java = shutil.which("java") or "java"
    return Worker([java, *JAVA_OPTS, "-cp", classpath, "CuratorWorker", hosts, path, ",".join(recipes),
                   str(holds), str(hold_ms)])


def sequence_of(node: str) -> int:
    from zkrecipes import formats

    found = formats.identify(node)
    if found is None:
        raise ValueError(f"hold on a node of no known format: {node!r}")
    return found.node.sequence


def run_mix(hosts: str, path: str, python: Sequence[str], curator: Sequence[str], holds: int, hold_ms: int = 10,
            classpath: Optional[str] = None, zkrecipes_from: Optional[str] = None, timeout: float = 120.0) -> Result:
    """Start every contender, then let them go at once; each makes ``holds`` holds. Returns the holds of all.

    ``path`` is made a persistent node first: a container parent that empties for a moment may be reaped
    and made again, restarting the sequence numbers that the order check compares."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts)
    zk.start(30)
    try:
        zk.ensure_path(path)
    finally:
        zk.stop()
        zk.close()
    workers: List[Tuple[str, Worker]] = []
    try:
        for r in python:
            workers.append(("python", python_worker(hosts, path, r, holds, hold_ms, zkrecipes_from)))
        if curator:
            assert classpath is not None
            workers.append(("curator", curator_worker(classpath, hosts, path, curator, holds, hold_ms)))
        for _, w in workers:
            w.wait_line("ready", 90)
        for _, w in workers:
            w.send("go")
        for _, w in workers:
            w.wait_line("done", timeout)
        out, errors = [], []
        for lang, w in workers:
            for line in w.lines:
                parts = line.split(" ")
                if parts[0] == "error":
                    errors.append(f"{lang}: {line}")
                if parts[0] != "hold":
                    continue
                _, recipe, node, a, b = parts
                scale = 1e9 if lang == "curator" else 1.0
                kind = "R" if recipe.split(":")[0] in READERS else "W"
                out.append(Hold(f"{lang}:{recipe}", kind, node, sequence_of(node), float(a) / scale, float(b) / scale))
        return Result(out, errors)
    finally:
        for _, w in workers:
            w.stop()


def conflicts(a: Hold, b: Hold) -> bool:
    return (a.kind == "W" or b.kind == "W") and a.t0 < b.t1 and b.t0 < a.t1


def overlapping(holds: Sequence[Hold]) -> int:
    """How many holds overlap in time with a conflicting hold (a writer's with anything; readers share)."""
    hit = set()
    ordered = sorted(holds, key=lambda h: h.t0)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if b.t0 >= a.t1:
                break
            if conflicts(a, b):
                hit.update((a, b))
    return len(hit)


def order_violations(holds: Sequence[Hold]) -> List[Tuple[Hold, Hold]]:
    """Pairs that broke queue (FIFO) order around a writer: a node queued before a writer's must be released
    before that writer holds, and one queued after it must not hold before the writer released."""
    bad = []
    for w in holds:
        if w.kind != "W":
            continue
        for x in holds:
            if x is w:
                continue
            if x.sequence < w.sequence and x.t1 > w.t0:
                bad.append((x, w))
            elif x.sequence > w.sequence and x.t0 < w.t1:
                bad.append((w, x))
    return bad


def _library(h: Hold) -> str:
    """kazoo, curator, or zkrecipes in one protocol ("zk:kazoo")."""
    if h.who.startswith("curator:") or "kazoo-" in h.who:
        return h.who.split(":")[0] if h.who.startswith("curator:") else "kazoo"
    return "zk:" + h.who.rsplit(":", 1)[1]


def switches(holds: Sequence[Hold]) -> int:
    """How often the lock passed from one library to the other (holds in time order): a mix that mixed."""
    libs = [_library(h) for h in sorted(holds, key=lambda h: h.t0)]
    return sum(1 for a, b in zip(libs, libs[1:]) if a != b)


def shared(holds: Sequence[Hold]) -> int:
    """Pairs of reader holds of different libraries that overlapped (readers of both kinds sharing)."""
    readers = [h for h in holds if h.kind == "R"]
    return sum(1 for i, a in enumerate(readers) for b in readers[i + 1:]
               if a.who.split(":")[0:2] != b.who.split(":")[0:2] and a.t0 < b.t1 and b.t0 < a.t1)


# the mixes of issue 13: (name, python contenders, curator contenders); "{p}" is the zkrecipes protocol
MIXES = [
    ("kazoo Lock + FairLock", ["kazoo-lock", "kazoo-lock", "zk-fair{p}", "zk-fair{p}"], [], "kazoo"),
    ("kazoo WriteLock/ReadLock + ReadWriteLock",
     ["kazoo-write", "kazoo-read", "zk-write{p}", "zk-read{p}"], [], "kazoo"),
    ("kazoo Election + LeaderElection",
     ["kazoo-election", "kazoo-election", "zk-elect{p}", "zk-elect{p}"], [], "kazoo"),
    ("Curator InterProcessMutex + FairLock", ["zk-fair{p}", "zk-fair{p}"], ["mutex", "mutex"], "curator"),
    ("Curator InterProcessReadWriteLock + ReadWriteLock", ["zk-write{p}", "zk-read{p}"], ["write", "read"], "curator"),
    ("Curator LeaderLatch + LeaderElection", ["zk-elect{p}", "zk-elect{p}"], ["latch", "latch"], "curator"),
    ("Curator LeaderLatch + LeaderLatch", ["zk-latch{p}", "zk-latch{p}"], ["latch", "latch"], "curator"),
]


def main() -> int:
    import argparse

    from kazoo.client import KazooClient

    from zkrecipes.testing import Ensemble

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--holds", type=int, default=60, help="holds per mix (default 60)")
    ap.add_argument("--hold-ms", type=int, default=10)
    ap.add_argument("--zkrecipes-from", metavar="DIR", help="import zkrecipes from DIR (e.g. the code before)")
    ap.add_argument("--default", action="store_true", help="zkrecipes in its default protocol (no protocol=)")
    ap.add_argument("--repeat", type=int, default=1, help="run every mix N times")
    args = ap.parse_args()
    classpath, reason = curator_classpath()
    with Ensemble(size=1, tick_ms=200) as ens:
        ens.start()
        zk = KazooClient(hosts=ens.hosts)
        zk.start(30)
        for n, (name, python, curator, proto) in enumerate(MIXES * args.repeat):
            if curator and classpath is None:
                print(f"{name}: skipped ({reason})")
                continue
            p = "" if args.default or args.zkrecipes_from else f":{proto}"
            per = -(-args.holds // (len(python) + len(curator)))
            res = run_mix(ens.hosts, f"/mix{n}", [r.format(p=p) for r in python], curator, per, args.hold_ms,
                          classpath, args.zkrecipes_from)
            print(f"{name} [{'default' if not p else 'protocol=' + proto}]: {len(res.holds)} holds, "
                  f"{overlapping(res.holds)} overlapping, {len(order_violations(res.holds))} out-of-order pairs, "
                  f"{switches(res.holds)} hand-overs between libraries, "
                  f"{shared(res.holds)} cross-library reader overlaps, {len(res.errors)} errors"
                  + (f" (first: {res.errors[0][:160]})" if res.errors else ""), flush=True)
        zk.stop()
        zk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
