"""Shared machinery of the benchmarks: a pool of counted client sessions, timing statistics, Redis, and
what every benchmark script does around its measures (the ensemble, an admin session, contender
processes on stdio, the result's metadata and its files).

Every ``KazooClient`` of the pool is instrumented at the client: each request kazoo writes to
the socket is counted by its wire type, and each watch notification the server delivers
(``ConnectionHandler._read_watch_event``, one per event per session) is counted too. Pings and the
session handshake are not requests in this sense and are not counted.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from kazoo.client import KazooClient

from zkrecipes.testing import _java
from zkrecipes.testing.ensemble import four_letter

# -- counters -------------------------------------------------------------------------------------


class Counters:
    """Requests sent (by wire type) and watch notifications received, over all instrumented clients."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: collections.Counter = collections.Counter()
        self.notifications = 0

    def request(self, kind: str) -> None:
        with self._lock:
            self.requests[kind] += 1

    def notification(self) -> None:
        with self._lock:
            self.notifications += 1

    def snapshot(self) -> tuple:
        with self._lock:
            return collections.Counter(self.requests), self.notifications

    def total_requests(self) -> int:
        with self._lock:
            return sum(self.requests.values())


def delta(before: tuple, after: tuple) -> tuple:
    """(requests by type, notifications) between two snapshots."""
    req = collections.Counter(after[0])
    req.subtract(before[0])
    return {k: v for k, v in req.items() if v}, after[1] - before[1]


_WIRE_NAMES = {
    "Create": "create",
    "Create2": "create",
    "CreateContainer": "create_container",
    "GetChildren": "get_children",
    "GetChildren2": "get_children",
    "Exists": "exists",
    "GetData": "get_data",
    "SetData": "set_data",
    "Delete": "delete",
    "RemoveWatches": "remove_watches",
    "Transaction": "multi",
    "Close": "close",
    "Sync": "sync",
}


def _wire_name(request: object) -> str:
    name = type(request).__name__.lstrip("_")
    return _WIRE_NAMES.get(name, name.lower())


def instrument(client: KazooClient, counters: Counters) -> None:
    """Count ``client``'s requests (as written to the socket) and received watch notifications.

    Requests are counted in ``ConnectionHandler._submit`` with a positive xid: every operation, however
    it was queued (``KazooClient._call`` or straight onto ``client._queue``), and no ping, handshake,
    auth or watch re-registration.
    """
    conn = client._connection
    submit = conn._submit

    def counted_submit(request, timeout, xid=None):
        if xid is not None and xid > 0:
            counters.request(_wire_name(request))
        return submit(request, timeout, xid)

    conn._submit = counted_submit
    read_watch = conn._read_watch_event

    def counted_watch(buffer, offset):
        counters.notification()
        return read_watch(buffer, offset)

    conn._read_watch_event = counted_watch


# -- client pool ----------------------------------------------------------------------------------


def server_list(hosts: str) -> list:
    """The ``host:port`` entries of a connect string (a chroot suffix is dropped)."""
    return [h for h in hosts.split("/", 1)[0].split(",") if h]


def hosts_for(hosts: str, i: int) -> str:
    """``hosts`` with its server list rotated by ``i`` (process i connects to server i mod size first)."""
    servers = server_list(hosts)
    chroot = hosts.split("/", 1)[1] if "/" in hosts else ""
    return ",".join(rotate(servers, i)) + (f"/{chroot}" if chroot else "")


class Pool:
    """Client sessions shared by every measure; client ``i`` connects to server ``i mod size`` first.

    Pinning makes the server placement of client ``i`` the same for every implementation that uses
    it, so alternating implementations compare like with like.
    """

    def __init__(self, hosts: str, counters: Counters, session_timeout: float = 20.0) -> None:
        self.servers = server_list(hosts)
        self.counters = counters
        self.session_timeout = session_timeout
        self.clients: list = []

    def _make(self, i: int) -> KazooClient:
        client = KazooClient(hosts=",".join(rotate(self.servers, i)), randomize_hosts=False,
                             timeout=self.session_timeout)
        client.start(timeout=60)
        instrument(client, self.counters)
        return client

    def grow(self, n: int) -> list:
        """Make sure at least ``n`` sessions exist; return the first ``n``."""
        missing = range(len(self.clients), n)
        if missing:
            with concurrent.futures.ThreadPoolExecutor(16) as ex:
                self.clients.extend(ex.map(self._make, missing))
        return self.clients[:n]

    def close(self) -> None:
        def stop(c: KazooClient) -> None:
            with contextlib.suppress(Exception):
                c.stop()
            with contextlib.suppress(Exception):
                c.close()

        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            list(ex.map(stop, self.clients))
        self.clients = []

    def quiet(self, clients: list, settle: float = 0.02, timeout: float = 60.0) -> bool:
        """Wait until ``clients`` have no request queued or unanswered and none was sent for ``settle`` s."""
        deadline = time.monotonic() + timeout
        last = self.counters.total_requests()
        since = time.monotonic()
        while time.monotonic() < deadline:
            now = time.monotonic()
            cur = self.counters.total_requests()
            busy = any(c._pending or c._queue for c in clients)
            if busy or cur != last:
                last, since = cur, now
            elif now - since >= settle:
                return True
            time.sleep(0.002)
        return False


def server_watches(servers: list) -> Optional[int]:
    """Total watches registered on all servers (four-letter word ``wchs``); None if unavailable."""
    total = 0
    for s in servers:
        host, port = s.rsplit(":", 1)
        m = re.search(r"Total watches:\s*(\d+)", four_letter(int(port), "wchs", host=host))
        if not m:
            return None
        total += int(m.group(1))
    return total


def server_version(servers: list) -> Optional[str]:
    host, port = servers[0].rsplit(":", 1)
    for line in four_letter(int(port), "srvr", host=host).splitlines():
        if line.startswith("Zookeeper version:"):
            return line.split(":", 1)[1].strip()
    return None


# -- statistics -----------------------------------------------------------------------------------


def percentile(sorted_values: list, q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in 0..1)."""
    if not sorted_values:
        return float("nan")
    idx = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[idx]


def summary(samples: list) -> dict:
    """Median, p99, mean, min, max in milliseconds of samples in seconds."""
    s = sorted(samples)
    if not s:
        return {"n": 0, "median_ms": None, "p99_ms": None, "mean_ms": None, "min_ms": None, "max_ms": None}
    return {
        "n": len(s),
        "median_ms": percentile(s, 0.5) * 1e3,
        "p99_ms": percentile(s, 0.99) * 1e3,
        "mean_ms": sum(s) / len(s) * 1e3,
        "min_ms": s[0] * 1e3,
        "max_ms": s[-1] * 1e3,
    }


def dist_ms(values_ns: Sequence[int], quantiles: Sequence[int] = (50, 90, 99)) -> Dict[str, Any]:
    """``n``, ``pQ_ms`` for each Q in ``quantiles`` and ``max_ms`` of ns values (all None but n when empty)."""
    s = sorted(values_ns)
    out: Dict[str, Any] = {"n": len(s)}
    out.update({f"p{q}_ms": percentile(s, q / 100) / 1e6 if s else None for q in quantiles})
    out["max_ms"] = s[-1] / 1e6 if s else None
    return out


def cell(x: Optional[float], fmt: str = "{:.1f}") -> str:
    """A table cell: ``x`` formatted, or a dash for a figure not measured."""
    return "—" if x is None else fmt.format(x)


def median(values: list) -> Optional[float]:
    s = sorted(v for v in values if v is not None)
    return percentile(s, 0.5) if s else None


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or not b else a / b


def rotate(items: list, k: int) -> list:
    k %= len(items)
    return items[k:] + items[:k]


def in_threads(fn: Callable[[int], None], n: int) -> None:
    """Run ``fn(0)`` .. ``fn(n - 1)``, each on a thread of its own, and wait until all have returned."""
    threads = [threading.Thread(target=fn, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def join_all(threads: list, timeout: float, on_slow: Optional[Callable[[], None]] = None, grace: float = 0.0) -> bool:
    """Join ``threads``; after ``grace`` s call ``on_slow`` every 0.2 s (e.g. to cancel pending acquires).

    Returns True if all ended within ``timeout``.
    """
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        alive = [t for t in threads if t.is_alive()]
        if not alive:
            return True
        if on_slow is not None and time.monotonic() - start >= grace:
            on_slow()
        alive[0].join(0.2)
    return not any(t.is_alive() for t in threads)


# -- Redis ----------------------------------------------------------------------------------------

REDIS_RELEASE = """
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end
"""


def redis_absent_reason() -> Optional[str]:
    """None if the Redis baseline can run, else why not."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (bench/setup.sh installs it with apt-get where run as root)"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "the Python client 'redis' is not installed (pip install -e '.[bench]')"
    return None


def machine() -> dict:
    """What the numbers were measured on."""
    import platform

    info: dict = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()),
    }
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20).stderr
        info["java"] = out.splitlines()[0] if out else None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "-C", root]
        head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            git + ["status", "--porcelain", "--", "zkrecipes"], capture_output=True, text=True, timeout=10
        )
        if head.returncode == 0:
            info["commit"] = head.stdout.strip() + (" (zkrecipes/ has uncommitted changes)" if dirty.stdout else "")
    from importlib.metadata import PackageNotFoundError, version

    for pkg in ("kazoo", "tenacity", "zkrecipes", "redis"):
        with contextlib.suppress(PackageNotFoundError):
            info[pkg] = version(pkg)
    return info


# -- a benchmark script's run ---------------------------------------------------------------------

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
HOSTS_HELP = "connect string of a running ensemble (default: start 3 local servers)"
NO_MATPLOTLIB = "matplotlib is not installed (pip install -e '.[bench]')"


def arguments(doc: Optional[str], hosts_help: str = HOSTS_HELP) -> argparse.ArgumentParser:
    """A benchmark script's command line: its docstring as the help, ``--hosts`` and ``--out``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", help=hosts_help)
    ap.add_argument("--out", default=RESULTS, help="where the result files go (default bench/results)")
    return ap


def logger(name: str) -> Callable[[str], None]:
    """A log function: ``[name   1.2s] message`` on stderr, seconds since this call."""
    t0 = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{name} {time.monotonic() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    return log


class Run:
    """When and how a benchmark run started; ``meta()`` gives the result's ``meta`` at its end.

    With ``script`` the command line is kept (``python bench/SCRIPT ARGS``); with ``with_machine`` what it
    runs on (:func:`machine`, taken now: the load average at the start) and, at the end, the load average.
    """

    def __init__(self, script: Optional[str] = None, argv: Optional[List[str]] = None,
                 with_machine: bool = False) -> None:
        self.started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        self.command = None if script is None else (
            f"python bench/{script}" + " ".join([""] + (argv if argv is not None else sys.argv[1:]))).strip()
        self.machine = machine() if with_machine else None
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def meta(self, **extra: Any) -> Dict[str, Any]:
        out: Dict[str, Any] = {"started": self.started, "duration_s": self.elapsed()}
        if self.command is not None:
            out["command"] = self.command
        if self.machine is not None:
            out.update({"machine": self.machine, "loadavg_end": list(os.getloadavg())})
        out.update(extra)
        return out


@contextlib.contextmanager
def zookeeper(hosts: Optional[str], log: Optional[Callable[[str], None]] = None, *, force_sync: bool = False,
              external_note: str = "", show_tick: bool = False, **options: Any) -> Iterator[Tuple[str, str]]:
    """``(connect string, description)`` of the ensemble to measure: ``hosts`` as given, or 3 local
    servers started here (``force_sync`` and ``options`` as :class:`zkrecipes.testing.Ensemble` takes
    them), closed on leaving, whatever happened."""
    if hosts:
        yield hosts, f"external ensemble {hosts}" + (f" ({external_note})" if external_note else "")
        return
    from zkrecipes.testing import Ensemble

    ensemble = Ensemble(size=3, force_sync=force_sync, **options)
    try:
        if log is not None:
            log("starting 3 ZooKeeper servers")
        ensemble.start()
        desc = f"3 local servers, forceSync={'yes' if force_sync else 'no'}"
        yield ensemble.hosts, desc + (f", tickTime {ensemble.tick_ms} ms" if show_tick else "")
    finally:
        ensemble.close()


@contextlib.contextmanager
def admin(hosts: str, name: str) -> Iterator[Tuple[KazooClient, str]]:
    """An admin session and a fresh root ``/zkrecipes-NAME/<random>`` for the run's paths; the root is
    deleted (best effort) when the run ends normally, the session closed in any case."""
    root = f"/zkrecipes-{name}/{uuid.uuid4().hex[:12]}"
    client = KazooClient(hosts=hosts, timeout=20.0)
    client.start(60)
    try:
        yield client, root
        with contextlib.suppress(Exception):  # a killed contender's node stays until its session ends
            client.delete(root, recursive=True)
    finally:
        client.stop()
        client.close()


def curator(impls: List[str], name: str, source: Any, log: Callable[[str], None]) -> Tuple[Optional[str], str]:
    """``(classpath, "")`` with the Curator worker ``source`` compiled if ``name`` is in ``impls``; else, or
    when Curator cannot run here, ``(None, why)`` with ``name`` taken out of ``impls`` (why is "" if not asked)."""
    if name not in impls:
        return None, ""
    classpath, absent = _java.curator_classpath(source)
    if classpath is None:
        impls.remove(name)
        log(f"Curator left out: {absent}")
    return classpath, absent


class Proc:
    """A contender process on stdio: its stdout lines collected by a thread, lines sent on its stdin."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: List[str] = []
        self._seen = 0  # lines already looked at by wait_for
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

    def _stderr(self) -> str:
        """The end of the process's stderr once it has ended (its stdout closed), else ''."""
        if self._done and self.proc.stderr is not None:
            self.proc.wait(10)
            return self.proc.stderr.read()[-2000:]
        return ""

    def wait_for(self, pred: Callable[[str], bool], what: str, deadline: float) -> str:
        """The first line not looked at before that satisfies ``pred`` (lines are looked at once, in order)."""
        with self._cond:
            while True:
                while self._seen < len(self.lines):
                    line = self.lines[self._seen]
                    self._seen += 1
                    if pred(line):
                        return line
                left = deadline - time.monotonic()
                if self._done or left <= 0:
                    why = "ended" if self._done else "timed out"
                    raise RuntimeError(f"process {self.proc.args!r} {why} before {what!r}: {self._stderr()}")
                self._cond.wait(left)

    def wait_line(self, word: str, deadline: float) -> None:
        self.wait_for(lambda line: line == word, word, deadline)

    def first(self, word: str, deadline: float) -> Optional[List[str]]:
        """The words of the first line so far starting with ``word``, waiting until monotonic ``deadline``;
        None if none came (looks at every line, whatever :meth:`wait_for` has seen)."""
        with self._cond:
            while True:
                for line in self.lines:
                    words = line.split()
                    if words and words[0] == word:
                        return words
                left = deadline - time.monotonic()
                if self._done or left <= 0:
                    return None
                self._cond.wait(left)

    def need(self, word: str, deadline: float) -> List[str]:
        """As :meth:`first`, raising RuntimeError (with the process's stderr) if no such line came."""
        words = self.first(word, deadline)
        if words is None:
            raise RuntimeError(f"{self.proc.args!r}: no {word!r} line: {self._stderr()}")
        return words

    def words(self) -> List[List[str]]:
        """Every line so far, split in words."""
        with self._cond:
            return [line.split() for line in self.lines]

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
                with contextlib.suppress(OSError):
                    f.close()


def run_line(meta: Dict[str, Any], zookeeper: bool = True) -> str:
    """A report's first line, from :meth:`Run.meta` with a machine: when, the command, the commit, the
    ensemble (and with ``zookeeper``, its version), how long, and the load average before and after."""
    mc = meta["machine"]
    zk = f"ZooKeeper {meta.get('zookeeper') or '?'} · " if zookeeper else ""
    return (f"Run {meta['started']} · `{meta['command']}` · commit {mc.get('commit', '?')} · {meta['ensemble']} · "
            f"{zk}{meta['duration_s']:.0f} s · load average {mc['loadavg_start'][0]:.1f} -> "
            f"{meta['loadavg_end'][0]:.1f} on {mc['cpus']} CPUs")


def stamp(meta: Dict[str, Any]) -> str:
    """``<started> · commit <commit>``: which run a figure shows."""
    return f"{meta['started']} · commit {meta['machine'].get('commit', '?')}"


def write_json(out: str, name: str, result: Dict[str, Any]) -> None:
    """``out/NAME.json``: the result, indented, keys sorted (``out`` made if missing)."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")


def write_report(out: str, name: str, result: Dict[str, Any], markdown: Callable[[Dict[str, Any]], str],
                 plot: Optional[Callable[[Dict[str, Any], str], Optional[str]]] = None) -> str:
    """``out/NAME.md`` (and with ``plot``, ``out/NAME.png``; the markdown says why not when it cannot
    draw); returns the markdown."""
    why = plot(result, os.path.join(out, f"{name}.png")) if plot is not None else None
    md = markdown(result) + (f"\nNo plot: {why}.\n" if why else "")
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write(md)
    return md


def pyplot() -> Any:
    """``matplotlib.pyplot`` drawing to files only (the Agg backend), or None if matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(plt: Any, fig: Any, path: str, dpi: int, title: str, **title_options: Any) -> None:
    """Give ``fig`` its title, lay it out, write it to ``path`` and let it go."""
    fig.suptitle(title, **title_options)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def read_json(out: str, name: str) -> Dict[str, Any]:
    """``out/NAME.json`` as written by :func:`write_json` (``--report-only``)."""
    with open(os.path.join(out, f"{name}.json")) as f:
        result: Dict[str, Any] = json.load(f)
    return result
