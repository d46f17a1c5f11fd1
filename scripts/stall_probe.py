"""Issue 30 probe: find hand-offs that wait for a heartbeat, and show where the time went.

N processes loop acquire -> 0.2 ms -> release on one FairLock with a long session (heartbeat rare).
Each process records, per request on its kazoo connection, when it was queued, written to the socket
and answered. Any acquire or release longer than 1 s dumps that process's request timeline to
``<out>/slow.<pid>``. Usage: ``python scripts/stall_probe.py HOSTS [N] [SECONDS] [SESSION_S] [OUT]``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import threading
import time
from typing import Any, List, Tuple

from kazoo.client import KazooClient

from zkrecipes import FairLock


def _instrument(zk: KazooClient, log: List[Tuple[Any, ...]]) -> None:
    """Log socket writes, socket reads and request wake-ups of kazoo's I/O thread."""
    conn, now = zk._connection, time.monotonic
    submit, read_header, send_request, call = conn._submit, conn._read_header, conn._send_request, zk._call

    def _submit(req: Any, timeout: float, xid: Any = None) -> Any:
        log.append((now(), "write", xid, type(req).__name__, getattr(req, "path", None), len(zk._queue)))
        return submit(req, timeout, xid)

    def _read_header(timeout: float) -> Any:
        h = read_header(timeout)
        log.append((now(), "reply", h[0].xid, h[0].err, None, len(zk._queue)))
        return h

    def _send_request(*a: Any) -> Any:
        log.append((now(), "wake", None, None, None, len(zk._queue)))
        return send_request(*a)

    def _call(req: Any, ar: Any) -> Any:
        name = threading.current_thread().name
        log.append((now(), "queue", name, type(req).__name__, getattr(req, "path", None), len(zk._queue)))
        return call(req, ar)

    conn._submit, conn._read_header, conn._send_request, zk._call = _submit, _read_header, _send_request, _call


def worker(hosts: str, secs: float, session: float, out: str, q: Any) -> None:
    zk = KazooClient(hosts=hosts, timeout=session)
    zk.start(30)
    log: List[Tuple[Any, ...]] = []
    _instrument(zk, log)
    lock = FairLock(zk, "/stall-probe")
    spans = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        t0 = time.monotonic()
        lock.acquire()
        t1 = time.monotonic()
        time.sleep(0.0002)
        t2 = time.monotonic()
        lock.release()
        t3 = time.monotonic()
        spans.append((t0, t1, t2, t3))
        if t1 - t0 > 1.0 or t3 - t2 > 1.0:
            with open(os.path.join(out, f"slow.{os.getpid()}"), "a") as f:
                f.write(f"SLOW acquire {t1 - t0:.3f}s release {t3 - t2:.3f}s from {t0:.3f}\n")
                f.writelines(f"{e[0]:.3f} {e[1:]}\n" for e in log if e[0] > t0 - 0.2)
        if len(log) > 5000:
            del log[:4000]
    zk.stop()
    zk.close()
    q.put(spans)


def main() -> None:
    hosts = sys.argv[1]
    n, secs, session = (int(sys.argv[2]) if len(sys.argv) > 2 else 10), 15.0, 30.0
    secs = float(sys.argv[3]) if len(sys.argv) > 3 else secs
    session = float(sys.argv[4]) if len(sys.argv) > 4 else session
    out = sys.argv[5] if len(sys.argv) > 5 else "."
    q: Any = mp.Queue()
    procs = [mp.Process(target=worker, args=(hosts, secs, session, out, q)) for _ in range(n)]
    for p in procs:
        p.start()
    spans = [s for _ in procs for s in q.get()]
    for p in procs:
        p.join()
    grants = sorted((t1, t2) for _, t1, t2, _ in spans)
    hand = sorted(b[0] - a[1] for a, b in zip(grants, grants[1:]))
    print(
        f"grants {len(grants)} hand-off p50 {hand[len(hand) // 2] * 1e3:.1f} ms max {hand[-1] * 1e3:.1f} ms"
        f" release max {max(t3 - t2 for _, _, t2, t3 in spans) * 1e3:.1f} ms over 1 s: {sum(h > 1 for h in hand)}"
    )


if __name__ == "__main__":
    main()
