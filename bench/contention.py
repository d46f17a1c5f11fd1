"""Contention benchmark (issue 30): one lock path, N contenders, four implementations in one run.

    python bench/contention.py                  # make bench: N = 10, 100, 1,000; 5 s warm-up + 20 s each
    python bench/contention.py --quick          # the same sizes, 2 s warm-up + 6 s windows
    python bench/contention.py --smoke --hosts H    # tiny N, about a second each (tests)
    python bench/contention.py --report-only    # re-render contention.md / .png from contention.json

Every contender loops acquire -> 0.2 ms of busy work -> release on one lock path until the window ends.
N = processes x contenders per process: 10 = 10 x 1, 100 = 20 x 5, 1,000 = 50 x 20. Each process has one
ZooKeeper session (a ``KazooClient``; for Curator one ``CuratorFramework`` per JVM shared by its threads,
as Curator's documentation asks), default session timeout 10 s, so kazoo pings every ~3 s and a hand-off
that waits for a heartbeat shows as a ~3 s maximum. Contenders per process are threads, except for
``zkrecipes.aio.FairLock`` (asyncio tasks on one loop). Each contender has its own lock object.

The implementations run one after the other on fresh paths, the order rotating per N (and repetition),
each fleet in its own processes (Curator: JVMs running bench/CuratorContender.java), on a 3-node
forceSync=no loopback ensemble started here (or ``--hosts``). Every grant is timed in the contender on
CLOCK_MONOTONIC (``time.monotonic_ns()``; ``System.nanoTime()`` in Java, the same clock on Linux):
acquire call, acquire return, release call, release return. From those, over the grants whose acquire
returned inside the measured window:

- grants/s; *hand-off* = the previous holder's ``release()`` call to the next holder's ``acquire()``
  return (grants in order of acquire return), p50 / p90 / p99 / max;
- *wait* = ``acquire()`` call to return (max, p99); ``release()`` call to return (max);
- grants per contender (min / median / max over all N contenders, zero included);
- *overlaps*: holds (acquire return .. release call) that intersect an earlier one; must be 0.

Targets (issue 30), reported as met / not met, never as tests: no hand-off above 100 ms at any N; p99
hand-off at or below kazoo's Lock at every N; grants/s at or above kazoo's at every N; at 1,000
contenders p99 within 2x p50. Writes ``contention.json``, ``contention.md`` and ``contention.png``
to ``--out`` (default ``bench/results``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402
from zkrecipes.testing import _java  # noqa: E402

HERE = Path(__file__).resolve().parent
JAVA_SOURCE = HERE / "CuratorContender.java"
JAVA_OPTS = ("-Xms16m", "-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")

FAIR, AIO, KAZOO, CURATOR = "zkrecipes FairLock", "zkrecipes aio FairLock", "kazoo Lock", "Curator InterProcessMutex"
IMPLS = (FAIR, AIO, KAZOO, CURATOR)
OURS = (FAIR, AIO)
BASELINE = KAZOO
HANDOFF_LIMIT_MS = 100.0
SLOW_NS = 1_000_000_000  # hand-offs and releases longer than this are listed one by one

FULL = {"sizes": [[10, 1], [20, 5], [50, 20]], "warmup_s": 5.0, "window_s": 20.0, "reps": 1}
QUICK = {"sizes": [[10, 1], [20, 5], [50, 20]], "warmup_s": 2.0, "window_s": 6.0, "reps": 1}
SMOKE = {"sizes": [[2, 2]], "warmup_s": 0.5, "window_s": 1.5, "reps": 1}


def log(msg: str, _t0: float = time.monotonic()) -> None:
    print(f"[contention {time.monotonic() - _t0:6.1f}s] {msg}", file=sys.stderr, flush=True)


# -- the contender processes ----------------------------------------------------------------------


def _hosts_for(hosts: str, i: int) -> str:
    """``hosts`` with its server list rotated by ``i`` (process i connects to server i mod size first)."""
    servers = harness.server_list(hosts)
    k = i % len(servers)
    chroot = hosts.split("/", 1)[1] if "/" in hosts else ""
    return ",".join(servers[k:] + servers[:k]) + (f"/{chroot}" if chroot else "")


def _contend(lock: Any, start_ns: int, end_ns: int, work_ns: int) -> List[Tuple[int, int, int, int]]:
    """One thread's loop: (acquire call, acquire return, release call, release return) per grant."""
    mono = time.monotonic_ns
    time.sleep(max(0.0, (start_ns - mono()) / 1e9))
    grants = []
    while mono() < end_ns:
        a = mono()
        lock.acquire()
        b = mono()
        while mono() - b < work_ns:  # the holder's work
            pass
        c = mono()
        lock.release()
        grants.append((a, b, c, mono()))
    return grants


async def _contend_aio(make: Callable[[], Any], start_ns: int, end_ns: int, work_ns: int) -> List[Tuple[int, ...]]:
    """One task's loop, as :func:`_contend`."""
    lock = make()
    mono = time.monotonic_ns
    await asyncio.sleep(max(0.0, (start_ns - mono()) / 1e9))
    grants = []
    while mono() < end_ns:
        a = mono()
        await lock.acquire()
        b = mono()
        while mono() - b < work_ns:
            pass
        c = mono()
        await lock.release()
        grants.append((a, b, c, mono()))
    return grants


def worker(args: argparse.Namespace) -> int:
    """One process of a Python fleet: connect, say ``ready``, run after ``go T0 END``, print the grants."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=_hosts_for(args.hosts, args.index), randomize_hosts=False, timeout=args.session)
    client.start(60)
    print("ready", flush=True)
    line = sys.stdin.readline().split()
    if not line or line[0] != "go":
        return 2
    start_ns, end_ns, work_ns = int(line[1]), int(line[2]), args.work_us * 1000
    results: Dict[int, Any] = {}
    if args.worker == AIO:
        from zkrecipes.aio import FairLock as AioFairLock

        async def fleet() -> List[Any]:
            return await asyncio.gather(
                *(_contend_aio(lambda: AioFairLock(client, args.path), start_ns, end_ns, work_ns)
                  for _ in range(args.threads)),
                return_exceptions=True,
            )

        results = dict(enumerate(asyncio.run(fleet())))
    else:
        if args.worker == FAIR:
            from zkrecipes import FairLock

            def make() -> Any:
                return FairLock(client, args.path)
        else:
            from kazoo.recipe.lock import Lock

            def make() -> Any:
                return Lock(client, args.path)

        def run(k: int) -> None:
            try:
                results[k] = _contend(make(), start_ns, end_ns, work_ns)
            except Exception as e:  # reported, counted as an error of the run
                results[k] = e

        threads = [threading.Thread(target=run, args=(k,)) for k in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    out = []
    for k, r in sorted(results.items()):
        if isinstance(r, BaseException):
            out.append(f"error {k} {r!r}".replace("\n", " "))
        else:
            out.extend(f"g {k} {a} {b} {c} {d}" for a, b, c, d in r)
    print("\n".join(out + ["done"]), flush=True)
    client.stop()
    client.close()
    return 0


class Proc:
    """A contender process: lines of its stdout collected by a thread, ``go`` sent on its stdin."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: List[str] = []
        self._cond = threading.Condition()
        self._done = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def wait_line(self, word: str, deadline: float) -> None:
        with self._cond:
            while word not in self.lines:
                left = deadline - time.monotonic()
                if self._done or left <= 0:
                    err = ""
                    if self._done and self.proc.stderr is not None:
                        self.proc.wait(10)
                        err = self.proc.stderr.read()[-2000:]
                    why = "ended" if self._done else "timed out"
                    raise RuntimeError(f"contender {self.proc.args!r} {why} before {word!r}: {err}")
                self._cond.wait(left)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass


def curator_classpath(java_dir: str = "/usr/share/java") -> Tuple[Optional[str], str]:
    """``(classpath, "")`` with JAVA_SOURCE compiled (the kit's one compile-and-cache helper), or ``(None, why)``."""
    return _java.curator_classpath(JAVA_SOURCE, java_dir)


def _argv(impl: str, hosts: str, path: str, i: int, threads: int, session: float, work_us: int,
          classpath: Optional[str]) -> List[str]:
    if impl == CURATOR:
        assert classpath is not None
        java = shutil.which("java") or "java"
        return [java, *JAVA_OPTS, "-cp", classpath, "CuratorContender", _hosts_for(hosts, i), path, str(threads),
                str(int(session * 1000)), str(work_us)]
    return [sys.executable, os.path.abspath(__file__), "--worker", impl, "--hosts", hosts, "--path", path,
            "--index", str(i), "--threads", str(threads), "--session", str(session), "--work-us", str(work_us)]


def run_fleet(impl: str, hosts: str, path: str, procs: int, threads: int, cfg: Dict[str, Any],
              classpath: Optional[str]) -> Dict[str, Any]:
    """Start ``procs`` x ``threads`` contenders of ``impl`` on ``path``, run them, return the row."""
    fleet = [Proc(_argv(impl, hosts, path, i, threads, cfg["session_s"], cfg["work_us"], classpath))
             for i in range(procs)]
    try:
        deadline = time.monotonic() + 240
        for p in fleet:
            p.wait_line("ready", deadline)
        start_ns = time.monotonic_ns() + 200_000_000 + procs * 2_000_000  # every "go" is read by then
        w0 = start_ns + int(cfg["warmup_s"] * 1e9)
        w1 = w0 + int(cfg["window_s"] * 1e9)
        for p in fleet:
            p.send(f"go {start_ns} {w1}")
        deadline = time.monotonic() + (w1 - time.monotonic_ns()) / 1e9 + cfg["drain_s"]
        for p in fleet:
            p.wait_line("done", deadline)
    finally:
        for p in fleet:
            p.stop()
    grants: List[Tuple[str, int, int, int, int]] = []
    errors: List[str] = []
    for i, p in enumerate(fleet):
        for line in p.lines:
            parts = line.split(" ", 2)
            if parts[0] == "g":
                a, b, c, d = (int(x) for x in parts[2].split())  # ns, both languages
                grants.append((f"{i}:{parts[1]}", a, b, c, d))
            elif parts[0] == "error":
                errors.append(f"process {i}: {line}")
    contenders = [f"{i}:{k}" for i in range(procs) for k in range(threads)]
    row = analyse(grants, contenders, w0, w1)
    row.update({"impl": impl, "n": procs * threads, "processes": procs, "per_process": threads,
                "errors": len(errors), "error_samples": errors[:3]})
    return row


# -- the measures ---------------------------------------------------------------------------------


def _ms(ns: float) -> float:
    return ns / 1e6


def _dist(values_ns: List[int]) -> Dict[str, Any]:
    s = sorted(values_ns)
    if not s:
        return {"n": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None}
    return {"n": len(s), "p50_ms": _ms(harness.percentile(s, 0.5)), "p90_ms": _ms(harness.percentile(s, 0.9)),
            "p99_ms": _ms(harness.percentile(s, 0.99)), "max_ms": _ms(s[-1])}


def analyse(grants: Sequence[Tuple[str, int, int, int, int]], contenders: Sequence[str], w0: int,
            w1: int) -> Dict[str, Any]:
    """The row of one run from its grants ``(contender, acquire call, acquire return, release call,
    release return)`` in ns; the window is [w0, w1) of acquire returns."""
    ordered = sorted(grants, key=lambda g: g[2])
    overlaps, held_until = 0, None
    for g in ordered:  # a hold is [acquire return, release call]: inside the real hold, so no false alarm
        if held_until is not None and g[2] < held_until:
            overlaps += 1
        held_until = g[3] if held_until is None else max(held_until, g[3])
    handoffs, waits, releases, inside = [], [], [], []
    for i, g in enumerate(ordered):
        if not w0 <= g[2] < w1:
            continue
        inside.append(g)
        waits.append(g[2] - g[1])
        releases.append(g[4] - g[3])
        if i > 0:
            handoffs.append(g[2] - ordered[i - 1][3])
    slow = []  # every hand-off or release over 1 s, with what the previous holder's release did meanwhile
    for i, g in enumerate(ordered):
        if w0 <= g[2] < w1 and i > 0 and g[2] - ordered[i - 1][3] > SLOW_NS:
            prev = ordered[i - 1]
            slow.append({"kind": "hand-off", "ms": _ms(g[2] - prev[3]), "at_s": (prev[3] - w0) / 1e9,
                         "from": prev[0], "to": g[0], "release_ms": _ms(prev[4] - prev[3]),
                         "same_process": prev[0].split(":")[0] == g[0].split(":")[0]})
        if w0 <= g[2] < w1 and g[4] - g[3] > SLOW_NS:
            slow.append({"kind": "release", "ms": _ms(g[4] - g[3]), "at_s": (g[3] - w0) / 1e9, "from": g[0],
                         "next_acquired_after_ms": _ms(ordered[i + 1][2] - g[3]) if i + 1 < len(ordered) else None})
    per = collections.Counter(g[0] for g in inside)
    counts = sorted(per.get(c, 0) for c in contenders)
    window_s = (w1 - w0) / 1e9
    h = _dist(handoffs)
    return {
        "grants": len(inside),
        "grants_per_s": len(inside) / window_s,
        "handoff": h,
        "handoffs_over_100ms": sum(1 for x in handoffs if x > HANDOFF_LIMIT_MS * 1e6),
        "handoffs_over_1s": sum(1 for x in handoffs if x > 1e9),
        "wait": _dist(waits),
        "release": _dist(releases),
        "per_contender": {"min": counts[0], "median": harness.percentile(counts, 0.5), "max": counts[-1],
                          "zero": sum(1 for c in counts if c == 0)},
        "overlaps": overlaps,
        "grants_total": len(ordered),
        "granted": len({g[0] for g in ordered}),  # contenders granted at least once in the whole run
        "slow": slow,
    }


def targets(rows: List[Dict[str, Any]], sizes: List[int]) -> List[Dict[str, Any]]:
    """Issue 30's targets per N (and repetition) for each zkrecipes front, against kazoo's Lock."""
    out = []
    by = {(r["rep"], r["n"], r["impl"]): r for r in rows}
    for (rep, n, impl), r in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1], IMPLS.index(kv[0][2]))):
        if impl not in OURS:
            continue
        base = by.get((rep, n, BASELINE))
        h = r["handoff"]
        checks: List[Tuple[str, Any, Any, Optional[bool]]] = [
            ("max hand-off (ms)", h["max_ms"], HANDOFF_LIMIT_MS,
             None if h["max_ms"] is None else h["max_ms"] <= HANDOFF_LIMIT_MS)
        ]
        if base is not None and base["handoff"]["p99_ms"] is not None and h["p99_ms"] is not None:
            b99, bgps = base["handoff"]["p99_ms"], base["grants_per_s"]
            checks.append(("hand-off p99 (ms) <= kazoo's", h["p99_ms"], b99, h["p99_ms"] <= b99))
            checks.append(("grants/s >= kazoo's", r["grants_per_s"], bgps, r["grants_per_s"] >= bgps))
        if n == max(sizes) and n >= 1000 and h["p50_ms"] is not None:
            checks.append(("hand-off p99 <= 2x p50 (ms)", h["p99_ms"], 2 * h["p50_ms"], h["p99_ms"] <= 2 * h["p50_ms"]))
        out.extend({"rep": rep, "n": n, "impl": impl, "target": what, "measured": measured, "limit": limit, "met": met}
                   for what, measured, limit, met in checks)
    return out


# -- report ---------------------------------------------------------------------------------------


def _f(x: Optional[float], fmt: str = "{:.1f}") -> str:
    return "—" if x is None else fmt.format(x)


def markdown(result: Dict[str, Any]) -> str:
    m, cfg = result["meta"], result["config"]
    reps = cfg["reps"]
    lines = [
        f"Run {m['started']} · `{m['command']}` · commit {m['machine'].get('commit', '?')} · {m['ensemble']} · "
        f"ZooKeeper {m.get('zookeeper') or '?'} · {m['duration_s']:.0f} s · load average "
        f"{m['machine']['loadavg_start'][0]:.1f} -> {m['loadavg_end'][0]:.1f} on {m['machine']['cpus']} CPUs",
        "",
        f"One lock path; every contender loops acquire -> {cfg['work_us'] / 1000:g} ms busy work -> release; "
        f"{cfg['warmup_s']:g} s warm-up, then {cfg['window_s']:g} s measured; session timeout {cfg['session_s']:g} s; "
        "one session per process (threads, or asyncio tasks for the aio front; Curator: one CuratorFramework "
        "per JVM). Hand-off: previous holder's release() call to the next holder's acquire() return. "
        "Load avg: the machine's 1-minute load average before -> after the row (it has "
        f"{m['machine']['cpus']} CPUs, shared with the ensemble and with other work).",
        "",
    ]
    if result.get("curator_absent"):
        lines += [f"Curator: absent ({result['curator_absent']}).", ""]
    lines += [
        "| N (procs x per proc) | implementation | grants/s | hand-off p50 / p90 / p99 / **max** (ms) "
        "| hand-offs > 100 ms | max wait (ms) | max release (ms) | grants per contender min / median / max "
        "| overlaps | errors | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(result["rows"], key=lambda r: (r["n"], r["rep"], IMPLS.index(r["impl"]))):
        h, pc = r["handoff"], r["per_contender"]
        n = f"{r['n']:,} ({r['processes']}x{r['per_process']})" + (f" rep {r['rep'] + 1}" if reps > 1 else "")
        load = " -> ".join(f"{x:.0f}" for x in r["loadavg"]) if r.get("loadavg") else "—"
        lines.append(
            f"| {n} | {r['impl']} | {r['grants_per_s']:.0f} | {_f(h['p50_ms'])} / {_f(h['p90_ms'])} / "
            f"{_f(h['p99_ms'])} / **{_f(h['max_ms'], '{:,.1f}')}** | {r['handoffs_over_100ms']} | "
            f"{_f(r['wait']['max_ms'], '{:,.1f}')} | {_f(r['release']['max_ms'], '{:,.1f}')} | "
            f"{pc['min']} / {pc['median']:g} / {pc['max']} | {r['overlaps']} | {r['errors']} | {load} |"
        )
    slow = [(r, e) for r in sorted(result["rows"], key=lambda r: (r["n"], r["rep"], IMPLS.index(r["impl"])))
            for e in r.get("slow", [])]
    if slow:
        lines += ["", "Hand-offs and releases over 1 s (*at*: seconds into the window of the release call; "
                  "contenders as process:thread):", ""]
        for r, e in slow:
            where = f"N = {r['n']:,} {r['impl']}" + (f" rep {r['rep'] + 1}" if reps > 1 else "")
            if e["kind"] == "hand-off":
                lines.append(f"- {where}: hand-off {e['ms']:,.0f} ms at {e['at_s']:.1f} s, {e['from']} -> {e['to']}"
                             f"{' (same process)' if e['same_process'] else ''}; that release() returned after "
                             f"{e['release_ms']:,.1f} ms")
            else:
                nxt = e["next_acquired_after_ms"]
                lines.append(f"- {where}: release() of {e['from']} took {e['ms']:,.0f} ms at {e['at_s']:.1f} s; "
                             f"the next holder's acquire() returned {_f(nxt, '{:,.1f}')} ms after the call")
    lines += ["", "### Targets (issue 30; reported, not tested)", "",
              "| N | implementation | target | measured | limit | met |", "|---|---|---|---|---|---|"]
    for t in result["targets"]:
        n = f"{t['n']:,}" + (f" rep {t['rep'] + 1}" if reps > 1 else "")
        fmt = "{:,.0f}" if "grants" in t["target"] else "{:,.1f}"
        met = "—" if t["met"] is None else ("yes" if t["met"] else "**no**")
        measured, limit = _f(t["measured"], fmt), _f(t["limit"], fmt)
        lines.append(f"| {n} | {t['impl']} | {t['target']} | {measured} | {limit} | {met} |")
    return "\n".join(lines) + "\n"


def plot(result: Dict[str, Any], path: str) -> Optional[str]:
    """Write the plot; return why not (no matplotlib) or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]')"
    from matplotlib import ticker

    rows = [r for r in result["rows"] if r["rep"] == 0]
    sizes = sorted({r["n"] for r in rows})
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.5))
    width = 0.8 / max(1, len(impls))
    panels = [
        (axes[0], "grants/s", lambda r: r["grants_per_s"], False),
        (axes[1], "hand-off p99 (ms)", lambda r: r["handoff"]["p99_ms"], True),
        (axes[2], "hand-off max (ms)", lambda r: r["handoff"]["max_ms"], True),
        (axes[3], "release() call to return, max (ms)", lambda r: r["release"]["max_ms"], True),
    ]
    for ax, title, get, logy in panels:
        for j, impl in enumerate(impls):
            xs, ys = [], []
            for k, n in enumerate(sizes):
                found = [r for r in rows if r["n"] == n and r["impl"] == impl]
                if found and get(found[0]) is not None:
                    xs.append(k + (j - (len(impls) - 1) / 2) * width)
                    ys.append(get(found[0]))
            ax.bar(xs, ys, width, label=impl)
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([f"N = {n:,}" for n in sizes])
        ax.set_title(title, fontsize=10)
        if logy:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    axes[2].axhline(HANDOFF_LIMIT_MS, color="black", linestyle="--", linewidth=1, label="target: 100 ms")
    axes[2].legend(fontsize=8, loc="upper left")
    m = result["meta"]
    fig.suptitle(f"One lock, N contenders (session {result['config']['session_s']:g} s) · {m['started']} · "
                 f"commit {m['machine'].get('commit', '?')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return None


def write_report(result: Dict[str, Any], out: str) -> str:
    why = plot(result, os.path.join(out, "contention.png"))
    md = markdown(result)
    if why:
        md += f"\nNo plot: {why}.\n"
    with open(os.path.join(out, "contention.md"), "w") as f:
        f.write(md)
    return md


# -- main -----------------------------------------------------------------------------------------


def run(hosts: str, cfg: Dict[str, Any], impls: Sequence[str], classpath: Optional[str]) -> List[Dict[str, Any]]:
    from kazoo.client import KazooClient

    root = f"/zkrecipes-contention/{uuid.uuid4().hex[:12]}"
    admin = KazooClient(hosts=hosts, timeout=20.0)
    admin.start(60)
    rows = []
    try:
        for rep in range(cfg["reps"]):
            for k, (procs, per) in enumerate(cfg["sizes"]):
                for impl in harness.rotate(list(impls), rep + k):  # the order rotates: drift hits all alike
                    path = f"{root}/{impl.split()[-1].lower()}-{procs * per}-{rep}"
                    admin.ensure_path(path)  # persistent: never reaped while a fleet starts
                    log(f"N = {procs * per} ({procs} x {per}) {impl}")
                    load = os.getloadavg()[0]
                    row = run_fleet(impl, hosts, path, procs, per, cfg, classpath)
                    row.update({"rep": rep, "loadavg": [load, os.getloadavg()[0]]})
                    h = row["handoff"]
                    log(f"  {row['grants_per_s']:.0f} grants/s, hand-off p50 {_f(h['p50_ms'])} p99 "
                        f"{_f(h['p99_ms'])} max {_f(h['max_ms'])} ms, overlaps {row['overlaps']}, "
                        f"errors {row['errors']}")
                    rows.append(row)
        with contextlib.suppress(Exception):  # a killed contender's node stays until its session ends
            admin.delete(root, recursive=True)
    finally:
        admin.stop()
        admin.close()
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the same sizes with 2 s warm-up + 6 s windows")
    ap.add_argument("--smoke", action="store_true", help="tiny N and windows: checks that the tool runs")
    ap.add_argument("--hosts", help="connect string of a running ensemble (default: start 3 local servers)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--reps", type=int, help="repetitions of every run (default 1)")
    ap.add_argument("--session", type=float, default=10.0, help="session timeout in seconds (default 10)")
    ap.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS), metavar="IMPL")
    ap.add_argument("--report-only", action="store_true", help="re-render contention.md/.png from contention.json")
    ap.add_argument("--worker", choices=IMPLS, help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--work-us", type=int, default=200, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.report_only:
        with open(os.path.join(args.out, "contention.json")) as f:
            print(write_report(json.load(f), args.out))
        return 0
    if args.session <= 0:
        ap.error(f"--session must be positive, got {args.session!r}")
    cfg = dict(SMOKE if args.smoke else QUICK if args.quick else FULL)
    if args.reps is not None:
        if args.reps < 1:
            ap.error(f"--reps must be at least 1, got {args.reps!r}")
        cfg["reps"] = args.reps
    cfg.update({"session_s": args.session, "work_us": 200, "drain_s": 120.0})
    impls = list(args.impls)
    classpath, curator_absent = None, ""
    if CURATOR in impls:
        classpath, curator_absent = curator_classpath()
        if classpath is None:
            impls.remove(CURATOR)
            log(f"Curator left out: {curator_absent}")
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python bench/contention.py" + " ".join([""] + (argv if argv is not None else sys.argv[1:]))
    mach = harness.machine()
    t0 = time.monotonic()
    ensemble = None
    try:
        if args.hosts:
            hosts, desc = args.hosts, f"external ensemble {args.hosts}"
        else:
            from zkrecipes.testing import Ensemble

            ensemble = Ensemble(size=3, force_sync=False)
            log("starting 3 ZooKeeper servers")
            ensemble.start()
            hosts, desc = ensemble.hosts, "3 local servers, forceSync=no"
        zk_version = harness.server_version(harness.server_list(hosts))
        rows = run(hosts, cfg, impls, classpath)
    finally:
        if ensemble is not None:
            ensemble.close()
    result = {
        "config": cfg,
        "impls": impls,
        "curator_absent": curator_absent,
        "rows": rows,
        "meta": {"started": started, "command": command.strip(), "ensemble": desc, "zookeeper": zk_version,
                 "duration_s": time.monotonic() - t0, "machine": mach, "loadavg_end": list(os.getloadavg()),
                 "smoke": args.smoke, "quick": args.quick},
    }
    result["targets"] = targets(rows, [p * t for p, t in cfg["sizes"]])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "contention.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    print(write_report(result, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
