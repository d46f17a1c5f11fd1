"""zkrecipes benchmark (issue 7): every measure, side by side, in one run on one ZooKeeper ensemble.

    python bench/run.py            # full run (make bench): 3 servers with forceSync=yes, a few minutes
    python bench/run.py --smoke    # every measure with tiny sizes, in seconds (tests/test_bench_smoke.py)
    python bench/run.py --hosts H  # use an ensemble that is already running instead of starting one

Writes ``latest.json``, ``latest.md`` and ``latest.png`` to ``--out`` (default ``bench/results``).
Implementations alternate op by op (uncontended) and run by run (contended, herd, read/write), so
drift on a busy machine hits all of them alike; ratios to the floors measured in the same run are
the result, absolute times are context.
"""

from __future__ import annotations

import os
import sys
import time
import uuid

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness, measures, report  # noqa: E402
from lab.redis_server import RedisServer, redis_version  # noqa: E402

FULL = {
    "uncontended": {"ops": 80, "blocks": 5},
    "contended": {"sizes": [2, 8, 32], "reps": 3, "duration": 2.0, "floor_samples": 40},
    "herd": {
        "sizes": [2, 10, 100, 500],
        "handoffs": {2: 20, 10: 20, 100: 12, 500: 6},
        "reps": {2: 2, 10: 2, 100: 2, 500: 1},
    },
    "read_write": {
        "peak_readers": 32,
        "peak_reps": 3,
        "mixed_sessions": 32,
        "mixed_duration": 3.0,
        "mixed_reps": 2,
        "starve_readers": 8,
        "starve_duration": 3.0,
        "reader_hold": 0.02,
    },
    "one_client": {"threads": 64, "duration": 2.0, "reps": 3},
    "profile_ops": 300,
    "semaphore": {
        "cases": [[2, 10, "oldest"], [2, 100, "oldest"], [5, 100, "oldest"], [5, 100, "newest"]],
        "handoffs": 15,
        "reps": 2,
    },
    "tries": {"n": 100},
    "budget_s": 480,  # the herd runs share what is left of it, so that make bench ends within 10 minutes
}

SMOKE = {
    "uncontended": {"ops": 4, "blocks": 2},
    "contended": {"sizes": [2, 3], "reps": 1, "duration": 0.3, "floor_samples": 4},
    "herd": {"sizes": [2, 4], "handoffs": {2: 3, 4: 3}, "reps": {2: 1, 4: 1}},
    "read_write": {
        "peak_readers": 4,
        "peak_reps": 1,
        "mixed_sessions": 4,
        "mixed_duration": 0.4,
        "mixed_reps": 1,
        "starve_readers": 2,
        "starve_duration": 0.4,
        "reader_hold": 0.02,
    },
    "one_client": {"threads": 4, "duration": 0.3, "reps": 1},
    "profile_ops": 10,
    "semaphore": {"cases": [[2, 3, "oldest"], [2, 3, "newest"]], "handoffs": 3, "reps": 1},
    "tries": {"n": 3},
    "budget_s": 120,
}


log = harness.logger("bench")


def run(hosts: str, cfg: dict, smoke: bool, ensemble_desc: str, redis_ports: list) -> dict:
    counters = harness.Counters()
    pool = harness.Pool(hosts, counters)
    root = f"/zkrecipes-bench/{uuid.uuid4().hex[:12]}"
    ctx = measures.Ctx(
        pool=pool, counters=counters, root=root, log=log, redis=redis_ports, deadline=time.monotonic() + cfg["budget_s"]
    )
    t0 = time.monotonic()
    result: dict = {"config": cfg}
    try:
        pool.grow(1)[0].ensure_path(root)
        zk_version = harness.server_version(pool.servers)
        u = cfg["uncontended"]
        result["uncontended"] = measures.uncontended(ctx, u["ops"], u["blocks"])
        c = cfg["contended"]
        result["contended"] = measures.contended(ctx, c["sizes"], c["reps"], c["duration"], c["floor_samples"])
        rw = cfg["read_write"]
        result["read_write"] = measures.read_write(ctx, **rw)
        o = cfg["one_client"]
        result["one_client"] = measures.one_client(ctx, o["threads"], o["duration"], o["reps"])
        result["profile"] = measures.profile_fairlock(ctx, cfg["profile_ops"])
        sm = cfg["semaphore"]
        result["semaphore"] = measures.semaphore(ctx, [tuple(c) for c in sm["cases"]], sm["handoffs"], sm["reps"])
        result["tries"] = measures.tries(ctx, cfg["tries"]["n"])
        h = cfg["herd"]
        log(f"herd: growing the pool to {max(h['sizes']) + 1} sessions")
        result["herd"] = measures.herd(ctx, h["sizes"], h["handoffs"], h["reps"])
        measures.cleanup(ctx)
    finally:
        pool.close()
    result["meta_partial"] = {"zookeeper": zk_version, "duration_s": time.monotonic() - t0}
    return result


def write_report(result: dict, out: str) -> None:
    md = harness.write_report(out, "latest", result, report.markdown, report.plot)
    log(f"wrote {out}/latest.json, latest.md" + ("" if "\nNo plot: " in md else ", latest.png"))


def main(argv=None) -> int:
    ap = harness.arguments(__doc__)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks that every measure runs")
    ap.add_argument("--no-redis", action="store_true", help="skip the Redis baseline")
    ap.add_argument("--no-force-sync", action="store_true", help="start the ensemble with forceSync=no")
    ap.add_argument("--report-only", action="store_true", help="re-render latest.md and latest.png from latest.json")
    args = ap.parse_args(argv)
    if args.report_only:
        write_report(harness.read_json(args.out, "latest"), args.out)
        return 0
    cfg = SMOKE if args.smoke else FULL
    record = harness.Run("run.py", argv, with_machine=True)
    redis_reason = "skipped (--no-redis)" if args.no_redis else harness.redis_absent_reason()
    servers = []
    try:
        if redis_reason is None:
            for fsync in (False, True):
                s = RedisServer(fsync_always=fsync)
                servers.append(s)
                s.__enter__()
            redis_ports = [(measures.REDIS, servers[0].port), (measures.REDIS_FSYNC, servers[1].port)]
            redis_desc = (
                f"redis-server {redis_version()} on loopback, one unreplicated server; "
                "plain (no persistence) and appendfsync always"
            )
        else:
            redis_ports = []
            redis_desc = f"absent: {redis_reason}"
        with harness.zookeeper(args.hosts, log, force_sync=not args.no_force_sync,
                               external_note="forceSync as configured there", show_tick=True) as (hosts, ens_desc):
            log(f"ensemble: {ens_desc}; redis: {redis_desc}")
            result = run(hosts, cfg, args.smoke, ens_desc, redis_ports)
    finally:
        for s in servers:
            s.close()
    partial = result.pop("meta_partial")
    result["meta"] = record.meta(
        smoke=args.smoke,
        measure_duration_s=partial["duration_s"],
        ensemble=ens_desc,
        zookeeper=partial["zookeeper"],
        redis=redis_desc,
        redis_present=bool(redis_ports),
        contenders="threads of this one process; each contender its own KazooClient session unless stated",
    )
    result["targets"] = report.targets(result)
    harness.write_json(args.out, "latest", result)
    write_report(result, args.out)
    for t in result["targets"]:
        mark = "met " if t["met"] else "MISS"
        log(f"target {mark} {t['target']}: {t['measured']!r} (limit {t['limit']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
