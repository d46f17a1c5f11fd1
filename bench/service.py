"""Service benchmark (issue 48): many threads per process taking one read lock around a little I/O, a writer now
and then; zkrecipes, kazoo, Curator and a no-lock ceiling in one run.

    python bench/service.py                  # make bench: 4 processes x 8 threads, then 1, 4, 16, 64; 2 reps
    python bench/service.py --quick          # a smoke run of seconds: 2 x 2, 0.3 s warm-up, 1 s window
    python bench/service.py --threads 8 --reps 1 --window 5   # one shape, shorter
    python bench/service.py --report-only    # re-render service.md / .png from service.json

The shape: P reader processes x T threads, each thread looping read-acquire -> 1 ms asleep -> release;
one writer process (one thread) looping write-acquire -> 5 ms asleep -> release -> 100 ms asleep. Each
contender runs in processes of its own, on a fresh path, one after the other (the order rotating per
shape and repetition), on a 3-node forceSync=no loopback ensemble started here (or ``--hosts``):

- ``zkrecipes ReadWriteLock``: one ``ReadWriteLock(client, path)`` per process, shared by its threads
  (``rw.read()`` / ``rw.write()``), one ``KazooClient`` per process;
- ``kazoo ReadLock/WriteLock``: one ``ReadLock`` per thread (``WriteLock`` in the writer), one client per
  process;
- ``Curator InterProcessReadWriteLock``: one per JVM shared by its threads, one ``CuratorFramework`` per
  JVM (bench/CuratorService.java, compiled as bench/contention.py compiles its worker);
- ``no lock``: the same loop without a lock, the ceiling.

Process i connects to server i mod 3 first (the writer is process P). Every time is CLOCK_MONOTONIC
(``time.monotonic_ns()``; ``System.nanoTime()`` in Java). Over the grants whose acquire returned in the
measured window (after the warm-up): read grants/s, read acquire (call to return) p50/p99, writer wait
p50/p99/max; *overlaps*: the writer's holds (acquire return .. release call) that meet any reader's hold
(each reader process reports the union of its threads' holds over the whole run); must be 0 for a lock
(for the ceiling it shows the check sees a real overlap). Writes ``service.json``, ``service.md`` and
``service.png`` (read grants/s against threads per process; needs matplotlib, the bench extra) to
``--out`` (default ``bench/results``). Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import bisect
import os
import shutil
import sys
import time
from array import array
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402
from bench.contention import JAVA_OPTS  # noqa: E402  (its JVM flags)
from bench.harness import Proc, cell, hosts_for  # noqa: E402

HERE = Path(__file__).resolve().parent
JAVA_SOURCE = HERE / "CuratorService.java"

OURS, KAZOO, CURATOR, NONE = ("zkrecipes ReadWriteLock", "kazoo ReadLock/WriteLock",
                              "Curator InterProcessReadWriteLock", "no lock (ceiling)")
IMPLS = (OURS, KAZOO, CURATOR, NONE)
HOLD_US, WRITE_HOLD_US, WRITE_PAUSE_US = 1_000, 5_000, 100_000

FULL = {"processes": 4, "threads": [8, 1, 4, 16, 64], "warmup_s": 2.0, "window_s": 10.0, "reps": 2}
QUICK = {"processes": 2, "threads": [2], "warmup_s": 0.3, "window_s": 1.0, "reps": 1}


log = harness.logger("service")


# -- a process of a Python contender --------------------------------------------------------------


def _locks(impl: str, client: Any, path: str, writer: bool) -> Callable[[], Any]:
    """What each thread of the process locks with (None: no lock)."""
    if impl == OURS:
        from zkrecipes import ReadWriteLock

        rw = ReadWriteLock(client, path)  # one per process, shared by its threads
        side = rw.write() if writer else rw.read()
        return lambda: side
    if impl == KAZOO:
        from kazoo.recipe.lock import ReadLock, WriteLock

        cls = WriteLock if writer else ReadLock
        return lambda: cls(client, path)  # one per thread
    return lambda: None


def _loop(lock: Any, go: Tuple[int, int, int], writer: bool, holds: array, out: array) -> None:
    """One thread: (acquire return, release call) of every hold into ``holds``; a reader's acquire call->return
    for the grants in the window, or the writer's (call, return, release call, release return), into ``out``."""
    start, stop, w0 = go
    mono, hold, pause = time.monotonic_ns, HOLD_US / 1e6, WRITE_PAUSE_US / 1e6
    if writer:
        hold = WRITE_HOLD_US / 1e6
    time.sleep(max(0.0, (start - mono()) / 1e9))
    while mono() < stop:
        a = mono()
        if lock is not None:
            lock.acquire()
        b = mono()
        time.sleep(hold)  # the request's I/O
        c = mono()
        if lock is not None:
            lock.release()
        d = mono()
        holds.extend((b, c))
        if writer:
            out.extend((a, b, c, d))
            time.sleep(pause)
        elif w0 <= b < stop:
            out.append(b - a)


def union(holds: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """The union of intervals, as disjoint intervals in order."""
    merged: List[Tuple[int, int]] = []
    for b, c in sorted(holds):
        if merged and b <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], c))
        else:
            merged.append((b, c))
    return merged


def worker(args: argparse.Namespace) -> int:
    """One process of a Python contender, on stdio (the lines of bench/CuratorService.java)."""
    writer = args.role == "writer"
    threads = 1 if writer else args.threads
    client = None
    if args.worker != NONE:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=args.hosts, randomize_hosts=False, timeout=args.session)
        client.start(60)
    try:
        make = _locks(args.worker, client, args.path, writer)
        print("ready", flush=True)
        line = sys.stdin.readline().split()
        if not line or line[0] != "go":
            return 2
        go = (int(line[1]), int(line[2]), int(line[3]))
        holds, outs = [array("q") for _ in range(threads)], [array("q") for _ in range(threads)]
        errors: Dict[int, str] = {}

        def run(k: int) -> None:
            try:
                _loop(make(), go, writer, holds[k], outs[k])
            except Exception as e:  # reported, counted as an error of the run
                errors[k] = repr(e).replace("\n", " ")

        harness.in_threads(run, threads)
        lines = []
        if writer:
            v = outs[0]
            lines += [f"w {v[j]} {v[j + 1]} {v[j + 2]} {v[j + 3]}" for j in range(0, len(v), 4)]
        else:
            lines.append(f"n {sum(len(o) for o in outs)}")
            lines.append(" ".join(["a", *(str(x) for o in outs for x in o)]))
            pairs = [(h[j], h[j + 1]) for h in holds for j in range(0, len(h), 2)]
            lines += [f"u {b} {c}" for b, c in union(pairs)]
        lines += [f"error {k} {e}" for k, e in sorted(errors.items())]
        print("\n".join(lines + ["done"]), flush=True)
    finally:
        if client is not None:
            client.stop()
            client.close()
    return 0


# -- one run of one contender ---------------------------------------------------------------------


def _argv(impl: str, role: str, hosts: str, path: str, threads: int, session: float,
          classpath: Optional[str]) -> List[str]:
    if impl == CURATOR:
        assert classpath is not None
        return [shutil.which("java") or "java", *JAVA_OPTS, "-cp", classpath, "CuratorService", hosts, path, role,
                str(threads), str(int(session * 1000)), str(WRITE_HOLD_US if role == "writer" else HOLD_US),
                str(WRITE_PAUSE_US)]
    return [sys.executable, os.path.abspath(__file__), "--worker", impl, "--role", role, "--hosts", hosts,
            "--path", path, "--threads", str(threads), "--session", str(session)]


def _dist(values_ns: List[int]) -> Dict[str, Any]:
    return harness.dist_ms(values_ns, (50, 99))


def overlaps(writes: List[Tuple[int, int, int, int]], unions: List[List[Tuple[int, int]]]) -> int:
    """How many of the writer's holds meet a hold of any reader process (``unions``: per process, disjoint and
    in order). Holds are acquire return .. release call, inside the real hold, so an overlap is real."""
    starts = [[u[0] for u in un] for un in unions]
    seen = 0
    for _a, b, c, _d in writes:
        for un, st in zip(unions, starts):
            j = bisect.bisect_left(st, c) - 1  # the last reader interval that began before the write ended
            if j >= 0 and un[j][1] > b:
                seen += 1
                break
    return seen


def start_fleet(impl: str, hosts: str, path: str, procs: int, threads: int, cfg: Dict[str, Any],
                classpath: Optional[str]) -> List[Proc]:
    """Start P reader processes x ``threads`` and one writer process of ``impl`` on ``path`` (the writer last)."""
    fleet = [Proc(_argv(impl, "reader", hosts_for(hosts, i), path, threads, cfg["session_s"], classpath))
             for i in range(procs)]
    fleet.append(Proc(_argv(impl, "writer", hosts_for(hosts, procs), path, 1, cfg["session_s"], classpath)))
    return fleet


def run_fleet(impl: str, fleet: List[Proc], threads: int, cfg: Dict[str, Any]) -> Dict[str, Any]:
    """Run a fleet every process of which said ``ready``, stop it, and return its row."""
    try:
        start = time.monotonic_ns() + 200_000_000 + len(fleet) * 2_000_000  # every "go" is read by then
        w0 = start + int(cfg["warmup_s"] * 1e9)
        w1 = w0 + int(cfg["window_s"] * 1e9)
        for p in fleet:
            p.send(f"go {start} {w1} {w0}")
        deadline = time.monotonic() + (w1 - time.monotonic_ns()) / 1e9 + 120
        for p in fleet:
            p.wait_line("done", deadline)
    finally:
        for p in fleet:
            p.stop()
    grants, lat, unions, errors = 0, [], [], []
    writes: List[Tuple[int, int, int, int]] = []
    for i, p in enumerate(fleet):
        un = []
        for line in p.lines:
            word, _, rest = line.partition(" ")
            if word == "n":
                grants += int(rest)
            elif word == "a":
                lat.extend(int(x) for x in rest.split())
            elif word == "u":
                b, c = rest.split()
                un.append((int(b), int(c)))
            elif word == "w":
                a, b, c, d = (int(x) for x in rest.split())
                writes.append((a, b, c, d))
            elif word == "error":
                errors.append(f"process {i}: {line}")
        if i < len(fleet) - 1:
            unions.append(un)
    in_window = [w for w in writes if w0 <= w[1] < w1]
    window_s = (w1 - w0) / 1e9
    return {"impl": impl, "processes": len(fleet) - 1, "threads": threads, "read_grants": grants,
            "read_grants_per_s": grants / window_s, "read_acquire": _dist(lat) if impl != NONE else _dist([]),
            "writer_grants": len(in_window), "writer_wait": _dist([w[1] - w[0] for w in in_window]),
            "overlaps": overlaps(writes, unions), "writer_holds": len(writes), "errors": len(errors),
            "error_samples": errors[:3]}


def run(hosts: str, cfg: Dict[str, Any], impls: List[str], classpath: Optional[str]) -> List[Dict[str, Any]]:
    """Every repetition and shape, the contenders one after the other in rotating order."""
    rows = []
    with harness.admin(hosts, "service") as (admin, root):
        for rep in range(cfg["reps"]):
            for k, threads in enumerate(cfg["threads"]):
                # every fleet of the shape starts and connects at once, then waits idle for its turn: the
                # start-up (interpreters, JVMs) never overlaps a measured run
                fleets = {}
                try:
                    for impl in impls:
                        path = f"{root}/{impl.split()[0].lower()}-{threads}-{rep}"
                        admin.ensure_path(path)
                        fleets[impl] = start_fleet(impl, hosts, path, cfg["processes"], threads, cfg, classpath)
                    deadline = time.monotonic() + 240
                    for p in (p for fleet in fleets.values() for p in fleet):
                        p.wait_line("ready", deadline)
                    for impl in harness.rotate(impls, rep + k):  # drift hits all alike
                        log(f"rep {rep + 1}: {cfg['processes']} x {threads} {impl}")
                        load = os.getloadavg()[0]
                        row = run_fleet(impl, fleets[impl], threads, cfg)
                        row.update({"rep": rep, "loadavg": [load, os.getloadavg()[0]]})
                        ra, ww = row["read_acquire"], row["writer_wait"]
                        log(f"  {row['read_grants_per_s']:,.0f} reads/s, acquire p50 {_f(ra['p50_ms'])} ms, "
                            f"writer wait p99 {_f(ww['p99_ms'])} ms, overlaps {row['overlaps']}, "
                            f"errors {row['errors']}")
                        rows.append(row)
                finally:
                    for p in (p for fleet in fleets.values() for p in fleet):
                        p.stop()
    return rows


# -- report ---------------------------------------------------------------------------------------


_f = cell


def markdown(result: Dict[str, Any]) -> str:
    m, cfg = result["meta"], result["config"]
    lines = [
        harness.run_line(m, zookeeper=False), "",
        f"{cfg['processes']} reader processes x T threads, each loop read-acquire -> {HOLD_US / 1000:g} ms asleep "
        f"-> release; one writer process: write-acquire -> {WRITE_HOLD_US / 1000:g} ms -> release -> "
        f"{WRITE_PAUSE_US / 1000:g} ms pause; {cfg['warmup_s']:g} s warm-up, {cfg['window_s']:g} s measured; "
        "each contender in its own processes, contenders interleaved. Overlaps: writer holds that met a "
        "reader's hold (must be 0 for a lock; the ceiling has no lock). x ceiling / x kazoo: read grants/s "
        "over the no-lock row's and kazoo's of the same T and rep.", "",
    ]
    if result.get("curator_absent"):
        lines += [f"Curator: absent ({result['curator_absent']}).", ""]
    lines += ["| T | rep | contender | read grants/s | x ceiling | x kazoo | read acquire p50 / p99 (ms) "
              "| writer wait p50 / p99 / max (ms) | writes | overlaps of writer holds (whole run) | errors |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = result["rows"]
    by = {(r["threads"], r["rep"], r["impl"]): r for r in rows}
    for t in cfg["threads"]:
        for rep in range(cfg["reps"]):
            for impl in result["impls"]:
                r = by.get((t, rep, impl))
                if r is None:
                    continue
                ceil, kaz = by.get((t, rep, NONE)), by.get((t, rep, KAZOO))
                ra, ww = r["read_acquire"], r["writer_wait"]
                lock = "" if impl != NONE else " (no lock)"
                lines.append(
                    f"| {t} | {rep + 1} | {impl} | {r['read_grants_per_s']:,.0f} "
                    f"| {_f(harness.ratio(r['read_grants_per_s'], ceil and ceil['read_grants_per_s']), '{:.2f}')} "
                    f"| {_f(harness.ratio(r['read_grants_per_s'], kaz and kaz['read_grants_per_s']), '{:.2f}')} "
                    f"| {_f(ra['p50_ms'], '{:.2f}')} / {_f(ra['p99_ms'])} "
                    f"| {_f(ww['p50_ms'])} / {_f(ww['p99_ms'])} / {_f(ww['max_ms'])} | {r['writer_grants']} "
                    f"| {r['overlaps']} of {r['writer_holds']}{lock} | {r['errors']} |")
    return "\n".join(lines) + "\n"


def plot(result: Dict[str, Any], path: str) -> Optional[str]:
    """Read grants/s, read acquire p50 and writer wait p99 against threads per process (median over reps);
    return why not (no matplotlib) or None."""
    plt = harness.pyplot()
    if plt is None:
        return harness.NO_MATPLOTLIB
    rows, ts = result["rows"], sorted(result["config"]["threads"])
    panels = [("read grants/s", lambda r: r["read_grants_per_s"]),
              ("read acquire p50 (ms)", lambda r: r["read_acquire"]["p50_ms"]),
              ("writer wait p99 (ms)", lambda r: r["writer_wait"]["p99_ms"])]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4.5))
    for ax, (title, get) in zip(axes, panels):
        for impl in result["impls"]:
            if impl == NONE and "grants" not in title:  # the ceiling neither waits nor is waited for
                continue
            pts = [(t, harness.median([get(r) for r in rows if r["impl"] == impl and r["threads"] == t]))
                   for t in ts]
            pts = [(t, y) for t, y in pts if y]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "--" if impl == NONE else "-", marker="o",
                        label=impl)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ts)
        ax.set_xticklabels([str(t) for t in ts])
        ax.set_xlabel(f"threads per process ({result['config']['processes']} reader processes)", fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    harness.save_figure(plt, fig, path, 80, f"Service pattern: read 1 ms, a writer every ~0.1 s · "
                        f"{harness.stamp(result['meta'])}", fontsize=10)
    return None


# -- main -----------------------------------------------------------------------------------------


def main(argv: Optional[List[str]] = None) -> int:
    ap = harness.arguments(__doc__)
    ap.add_argument("--quick", action="store_true", help="a smoke run of seconds (2 x 2, 0.3 s + 1 s)")
    ap.add_argument("--window", type=float, help="measured seconds per run (default 10)")
    ap.add_argument("--warmup", type=float, help="warm-up seconds per run (default 2)")
    ap.add_argument("--processes", type=int, help="reader processes (default 4)")
    ap.add_argument("--threads", help="comma-separated threads per process (default 8,1,4,16,64)")
    ap.add_argument("--reps", type=int, help="repetitions (default 2)")
    ap.add_argument("--session", type=float, default=10.0, help="session timeout in seconds (default 10)")
    ap.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS), metavar="IMPL")
    ap.add_argument("--report-only", action="store_true", help="re-render service.md/.png from service.json")
    ap.add_argument("--worker", choices=(OURS, KAZOO, NONE), help=argparse.SUPPRESS)
    ap.add_argument("--role", choices=("reader", "writer"), help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.threads = int(args.threads or 1)
        return worker(args)
    if args.report_only:
        print(harness.write_report(args.out, "service", harness.read_json(args.out, "service"), markdown, plot))
        return 0
    cfg = dict(QUICK if args.quick else FULL)
    for key, value in (("window_s", args.window), ("warmup_s", args.warmup), ("processes", args.processes),
                       ("reps", args.reps)):
        if value is not None:
            if value < 0 or (value == 0 and key != "warmup_s"):
                ap.error(f"--{key.split('_')[0]} must be positive, got {value!r}")
            cfg[key] = value
    if args.threads:
        cfg["threads"] = [int(t) for t in args.threads.split(",")]
        if any(t < 1 for t in cfg["threads"]):
            ap.error(f"--threads takes positive integers, got {args.threads!r}")
    cfg["session_s"] = args.session
    impls = list(args.impls)
    classpath, curator_absent = harness.curator(impls, CURATOR, JAVA_SOURCE, log)
    record = harness.Run("service.py", argv, with_machine=True)
    with harness.zookeeper(args.hosts, log) as (hosts, desc):
        rows = run(hosts, cfg, impls, classpath)
    result = {"config": cfg, "impls": impls, "curator_absent": curator_absent, "rows": rows,
              "meta": record.meta(ensemble=desc, quick=args.quick)}
    harness.write_json(args.out, "service", result)
    print(harness.write_report(args.out, "service", result, markdown, plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
