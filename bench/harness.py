"""Shared machinery of the benchmark: a pool of counted client sessions, timing statistics, Redis.

Every ``KazooClient`` of the pool is instrumented at the client: each request kazoo writes to
the socket is counted by its wire type, and each watch notification the server delivers
(``ConnectionHandler._read_watch_event``, one per event per session) is counted too. Pings and the
session handshake are not requests in this sense and are not counted.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import math
import os
import re
import shutil
import subprocess
import threading
import time
from typing import Callable, Optional

from kazoo.client import KazooClient

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
        k = i % len(self.servers)
        rotated = self.servers[k:] + self.servers[:k]
        client = KazooClient(hosts=",".join(rotated), randomize_hosts=False, timeout=self.session_timeout)
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


def median(values: list) -> Optional[float]:
    s = sorted(v for v in values if v is not None)
    return percentile(s, 0.5) if s else None


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or not b else a / b


def rotate(items: list, k: int) -> list:
    k %= len(items)
    return items[k:] + items[:k]


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
