"""Per-key benchmark (issue 10): one lock per key in a long-running service, on one client.

    python bench/per_key.py                 # make bench: 3 local servers, forceSync=no, about two minutes
    python bench/per_key.py --smoke --hosts H   # tiny sizes against a running ensemble (tests)

Measures, zkrecipes FairLock and kazoo Lock side by side, each contender in its own process (a fresh
interpreter, so live objects and RSS are its own), one after the other and repeated:
- memory: live zkrecipes objects and RSS after N distinct keys, each locked once by a fresh lock object
  that is then dropped;
- wire requests per acquire+release on a new key (its parent exists) and on a hot key;
- throughput of 32 threads on one client over 1k and 100k key spaces, against raw create+delete
  (ephemeral-sequential under the key, parent made on NoNode) from the same threads, on a client our
  recipes attend (``zkrecipes._kazoo.attend``: the I/O thread's select the recipes run on), so the ratio
  compares the recipe's work, not two I/O paths (issue 48); and, for the ratio reported before issue 48,
  the same raw calls on a client as kazoo makes it (kazoo's stock select), kept beside the rows; and, in
  FairLock's process, FairLock and raw alternating in blocks (ABBA) on FairLock's own client, a ratio
  that load drift between the processes cannot move.
Writes ``per_key.json`` and ``per_key.md`` to ``--out`` (default ``bench/results``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kazoo.client import KazooClient  # noqa: E402

from bench import harness  # noqa: E402

IMPLS = ("zkrecipes FairLock", "kazoo Lock", "raw create+delete")
RAW, STOCK_RAW = IMPLS[2], "raw create+delete, kazoo's stock select"
RUNS = IMPLS + (STOCK_RAW,)  # every contender, each in its own process


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _zk_objects() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o).__module__.startswith("zkrecipes"))


def _factory(impl: str, client: KazooClient):
    """op(path): one acquire+release of ``impl`` on a fresh lock object for ``path``."""
    if impl == IMPLS[0]:
        from zkrecipes import FairLock

        def op(path: str) -> None:
            lock = FairLock(client, path)
            lock.acquire()
            lock.release()

    elif impl == IMPLS[1]:
        from kazoo.recipe.lock import Lock

        def op(path: str) -> None:
            lock = Lock(client, path)
            lock.acquire()
            lock.release()

    else:

        def op(path: str) -> None:
            made = client.create(path + "/n-", b"", ephemeral=True, sequence=True, makepath=True)
            client.delete(made)

    return op


def worker(args: argparse.Namespace) -> dict:
    """One contender, in its own process: every measure for ``args.impl``."""
    client = KazooClient(hosts=args.hosts, timeout=10.0)
    if args.impl == RAW:  # on the I/O path our recipes run on, as a FairLock on this client would make it
        from zkrecipes import _kazoo

        _kazoo.attend(client)
    client.start(30)
    counters = harness.Counters()
    harness.instrument(client, counters)
    op = _factory(args.impl, client)
    base = f"{args.root}/{uuid.uuid4().hex[:8]}"
    client.ensure_path(base + "/mem")
    out: dict = {"impl": args.impl}
    # wire requests: new key under an existing parent, then the same key hot
    op(base + "/mem/warm")
    before = counters.snapshot()
    op(base + "/mem/new-key")
    req, _ = harness.delta(before, counters.snapshot())
    out["requests_new_key"] = sum(req.values())
    out["requests_new_key_by_type"] = req
    before = counters.snapshot()
    for _ in range(10):
        op(base + "/mem/new-key")
    req, _ = harness.delta(before, counters.snapshot())
    out["requests_hot_key"] = sum(req.values()) / 10
    # memory after N dropped keys (threads, so that it takes seconds, not minutes)
    objs0, rss0 = _zk_objects(), _rss_kib()
    _threads(args.threads, lambda i, n: op(f"{base}/mem/k{n}"), count=args.keys)
    out["dropped_keys"] = args.keys
    out["live_object_growth"] = _zk_objects() - objs0
    out["rss_growth_mb"] = (_rss_kib() - rss0) / 1024
    # throughput over key spaces
    out["throughput"] = {}
    for space in args.spaces:
        rng = random.Random(space)
        t0 = time.monotonic()
        done = _threads(
            args.threads,
            lambda i, n, space=space, rng=rng: op(f"{base}/s{space}/k{rng.randrange(space)}"),
            duration=args.duration,
        )
        # over the window plus the calls in flight at its end, so a slow first call still counts
        out["throughput"][str(space)] = done / (time.monotonic() - t0)
    if args.impl == IMPLS[0]:  # FairLock and raw alternating on this one client: a ratio load drift spares
        out["paired"] = {str(space): _paired(op, _factory(RAW, client), args, f"{base}/p{space}", space)
                         for space in args.spaces}
    client.stop()
    client.close()
    return out


def _paired(lock_op, raw_op, args: argparse.Namespace, base: str, space: int, blocks: int = 4) -> dict:
    """FairLock's and raw's acquire+release/s on the same client (one our recipes attend) from the same
    threads, in ``blocks`` blocks each of ``args.duration / blocks`` s, alternating; and their ratio."""
    rng = random.Random(space)
    done, spent = {"lock": 0, "raw": 0}, {"lock": 0.0, "raw": 0.0}
    for k in range(2 * blocks):
        name, op = (("lock", lock_op), ("raw", raw_op))[k % 2 if k // 2 % 2 == 0 else 1 - k % 2]  # ABBA
        where = f"{base}/{name}/k"
        t0 = time.monotonic()
        done[name] += _threads(args.threads, lambda i, n, op=op, where=where: op(f"{where}{rng.randrange(space)}"),
                               duration=args.duration / blocks)
        spent[name] += time.monotonic() - t0
    rates = {name: done[name] / spent[name] for name in done}
    return {"lock_per_s": rates["lock"], "raw_per_s": rates["raw"], "ratio": rates["lock"] / rates["raw"]}


def _threads(n: int, fn, count: int | None = None, duration: float | None = None) -> int:
    """Run ``fn(thread, k)`` from ``n`` threads, ``count`` calls in all or those started in ``duration`` s:
    calls made."""
    lock = threading.Lock()
    state = {"next": 0, "done": 0, "stop": False}

    def run(i: int) -> None:
        while True:
            with lock:
                if state["stop"] or (count is not None and state["next"] >= count):
                    return
                k = state["next"]
                state["next"] += 1
            fn(i, k)
            with lock:
                state["done"] += 1

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    if duration is not None:
        time.sleep(duration)
        with lock:
            state["stop"] = True
    for t in threads:
        t.join(120)
    return state["done"]


def _spawn(impl: str, hosts: str, root: str, cfg: dict) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", impl, "--hosts", hosts, "--root", root,
           "--keys", str(cfg["keys"]), "--threads", str(cfg["threads"]), "--duration", str(cfg["duration"]),
           "--spaces", *map(str, cfg["spaces"])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{impl} worker failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def markdown(result: dict) -> str:
    m = result["meta"]
    rows = dict(result["rows"])
    if result.get("stock_raw"):
        rows[STOCK_RAW] = result["stock_raw"]
    cols = [i for i in RUNS if i in rows]
    spaces = [str(s) for s in result["config"]["spaces"]]
    lines = [
        f"Run {m['started']} · {m['ensemble']} · {m['duration_s']:.0f} s · "
        f"{result['config']['threads']} threads on one client, {result['config']['reps']} reps (median)",
        "",
        f"*{RAW}* runs on a client our recipes attend (their I/O path: zkrecipes' select on kazoo's I/O "
        f"thread), as FairLock's does; *{STOCK_RAW}* on a client as kazoo makes it, as kazoo's Lock does. "
        "The ratio to raw compares like with like; the ratio to the stock select is the one reported before "
        "issue 48.",
        "",
        "| measure | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]

    def row(label: str, key, fmt: str) -> None:
        cells = [fmt.format(key(rows[i])) for i in cols]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    n = result["config"]["keys"]
    row(f"live zkrecipes objects after {n:,} dropped keys", lambda r: r["live_object_growth"], "{:+d}")
    row(f"RSS growth after {n:,} dropped keys (MB)", lambda r: r["rss_growth_mb"], "{:+.1f}")
    row("wire requests, new key (parent exists)", lambda r: r["requests_new_key"], "{:d}")
    row("wire requests, hot key", lambda r: r["requests_hot_key"], "{:.0f}")
    for s in spaces:
        row(f"acquire+release/s, {int(s):,} keys", lambda r, s=s: r["throughput"][s], "{:.0f}")
        for base, label in ((RAW, "raw"), (STOCK_RAW, "raw on kazoo's stock select")):
            if base in rows:
                raw = rows[base]["throughput"][s]
                row(f"... ratio to {label}, {int(s):,} keys", lambda r, s=s, raw=raw: r["throughput"][s] / raw,
                    "{:.2f}x")
        paired = rows[IMPLS[0]].get("paired", {}).get(s)
        if paired:
            cells = [f"{paired['ratio']:.2f}x ({paired['lock_per_s']:.0f} / {paired['raw_per_s']:.0f})"]
            lines.append(f"| ... FairLock / raw alternating on FairLock's client, {int(s):,} keys | "
                         + " | ".join(cells + ["—"] * (len(cols) - 1)) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = harness.arguments(__doc__)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks that every measure runs")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--spaces", type=int, nargs="+", default=[1000, 100000])
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args(argv)
    if args.worker:
        args.impl = args.worker
        print(json.dumps(worker(args)))
        return 0
    if args.smoke:
        args.keys, args.threads, args.duration, args.spaces, args.reps = 50, 4, 0.3, [10, 1000], 1
    cfg = {"keys": args.keys, "threads": args.threads, "duration": args.duration, "spaces": args.spaces,
           "reps": args.reps}
    record = harness.Run()
    with harness.zookeeper(args.hosts) as (hosts, desc):
        root = f"/zkrecipes-bench-keys/{uuid.uuid4().hex[:12]}"
        runs: dict = {i: [] for i in RUNS}
        for rep in range(args.reps):
            for impl in harness.rotate(list(RUNS), rep):  # rotate the order: drift hits all alike
                print(f"[per-key] rep {rep + 1}: {impl}", file=sys.stderr, flush=True)
                runs[impl].append(_spawn(impl, hosts, root, cfg))
        rows = {}
        for impl, rs in runs.items():
            r = dict(rs[0])
            for key in ("live_object_growth", "rss_growth_mb", "requests_hot_key"):
                r[key] = statistics.median([x[key] for x in rs])
            r["live_object_growth"] = int(r["live_object_growth"])
            r["throughput"] = {s: statistics.median([x["throughput"][s] for x in rs]) for s in rs[0]["throughput"]}
            r["throughput_by_rep"] = [x["throughput"] for x in rs]
            rows[impl] = r
    result = {"config": cfg, "rows": rows, "stock_raw": rows.pop(STOCK_RAW), "meta": record.meta(ensemble=desc)}
    harness.write_json(args.out, "per_key", result)
    print(harness.write_report(args.out, "per_key", result, markdown), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
