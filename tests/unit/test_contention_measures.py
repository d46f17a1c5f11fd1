"""The contention benchmark's arithmetic (bench/contention.py): hand-offs, the window, overlaps, targets."""

from __future__ import annotations

from bench.contention import AIO, FAIR, KAZOO, analyse, markdown, split, targets

MS = 1_000_000  # ns


def _g(who, call, acq, rel, ret=None):
    """A grant in ms: acquire call, acquire return, release call (, release return)."""
    return (who, call * MS, acq * MS, rel * MS, (rel if ret is None else ret) * MS)


def test_handoff_is_release_call_to_next_acquire_return_and_only_window_grants_count():
    grants = [
        _g("0:0", 0, 1, 2),  # before the window: counted as the predecessor only
        _g("1:0", 1, 5, 6),  # hand-off 3 ms (2 -> 5)
        _g("0:0", 3, 8, 9, 12),  # hand-off 2 ms; release took 3 ms
        _g("1:0", 7, 3009, 3010),  # a 3 s stall: hand-off 3000 ms, waited 3002 ms
        _g("1:0", 3011, 4000, 4001),  # after the window
    ]
    row = analyse(grants, ["0:0", "1:0", "2:0"], 4 * MS, 3100 * MS)
    assert row["grants"] == 3 and row["grants_total"] == 5
    assert row["handoff"]["n"] == 3 and row["handoff"]["p50_ms"] == 3 and row["handoff"]["max_ms"] == 3000
    assert row["handoffs_over_100ms"] == 1 and row["handoffs_over_1s"] == 1
    assert row["wait"]["max_ms"] == 3002 and row["release"]["max_ms"] == 3
    assert row["per_contender"] == {"min": 0, "median": 1, "max": 2, "zero": 1}  # contender 2:0 got none
    assert row["overlaps"] == 0
    assert abs(row["grants_per_s"] - 3 / 3.096) < 1e-9
    assert row["slow"] == [{"kind": "hand-off", "ms": 3000, "at_s": 0.005, "from": "0:0", "to": "1:0",
                            "release_ms": 3, "same_process": False}]


def test_a_release_over_1s_is_listed_with_when_the_next_holder_got_the_lock():
    grants = [_g("0:0", 0, 1, 2, 1502), _g("0:1", 0, 4, 5), _g("1:0", 0, 6, 7)]
    row = analyse(grants, ["0:0", "0:1", "1:0"], 0, 10 * MS)
    assert row["slow"] == [{"kind": "release", "ms": 1500, "at_s": 0.002, "from": "0:0",
                            "next_acquired_after_ms": 2}]
    assert row["release"]["max_ms"] == 1500 and row["handoff"]["max_ms"] == 2


def test_intersecting_holds_are_counted_even_behind_a_long_hold():
    grants = [_g("a", 0, 1, 10), _g("b", 0, 14, 15), _g("c", 0, 5, 6), _g("d", 0, 9, 13)]
    # c (5..6) lies inside a (1..10), and so does the start of d (9..13), though c ended before it
    assert analyse(grants, ["a", "b", "c", "d"], 0, 100 * MS)["overlaps"] == 2
    grants.append(_g("e", 0, 12, 16))  # inside d, and b (14..15) inside e
    assert analyse(grants, ["a", "b", "c", "d", "e"], 0, 100 * MS)["overlaps"] == 4


def _row(impl, n, p50, p99, mx, gps, layout="spawned", floor=None):
    return {"impl": impl, "n": n, "rep": 0, "layout": layout, "processes": n, "per_process": 1, "grants_per_s": gps,
            "handoff_to_floor": None if floor is None else p50 / floor,
            "handoff": {"n": 10, "p50_ms": p50, "p90_ms": p99, "p99_ms": p99, "max_ms": mx},
            "handoffs_over_100ms": int(mx > 100), "wait": {"max_ms": mx}, "release": {"max_ms": 1.0},
            "per_contender": {"min": 1, "median": 2, "max": 3, "zero": 0}, "overlaps": 0, "errors": 0}


def test_targets_compare_each_zkrecipes_front_with_kazoo_in_the_same_layout_and_n_and_with_the_floor():
    rows = [_row(FAIR, 10, 1.5, 4.0, 2990.0, 300, floor=1.2), _row(AIO, 10, 1.5, 3.0, 20.0, 600, floor=0.9),
            _row(KAZOO, 10, 1.6, 3.5, 30.0, 500, floor=1.2), _row(FAIR, 1000, 2.0, 3.9, 19.0, 400),
            _row(KAZOO, 1000, 3.4, 7.2, 22.0, 266),
            # the forked layout is judged against kazoo's forked row, not the spawned one
            _row(FAIR, 10, 1.5, 3.6, 20.0, 450, layout="forked"), _row(KAZOO, 10, 1.6, 3.7, 30.0, 500, layout="forked")]
    got = {(t["layout"], t["n"], t["impl"], t["target"]): t["met"] for t in targets(rows, [10, 1000])}
    assert got == {
        ("spawned", 10, FAIR, "max hand-off (ms)"): False,
        ("spawned", 10, FAIR, "hand-off p99 (ms) <= kazoo's"): False,
        ("spawned", 10, FAIR, "grants/s >= kazoo's"): False,
        ("spawned", 10, FAIR, "hand-off p50 / floor p50"): True,  # 1.25x
        ("spawned", 10, AIO, "max hand-off (ms)"): True,
        ("spawned", 10, AIO, "hand-off p99 (ms) <= kazoo's"): True,
        ("spawned", 10, AIO, "grants/s >= kazoo's"): True,
        ("spawned", 10, AIO, "hand-off p50 / floor p50"): False,  # 1.67x
        ("spawned", 1000, FAIR, "max hand-off (ms)"): True,
        ("spawned", 1000, FAIR, "hand-off p99 (ms) <= kazoo's"): True,
        ("spawned", 1000, FAIR, "grants/s >= kazoo's"): True,
        ("spawned", 1000, FAIR, "hand-off p99 <= 2x p50 (ms)"): True,
        ("forked", 10, FAIR, "max hand-off (ms)"): True,
        ("forked", 10, FAIR, "hand-off p99 (ms) <= kazoo's"): True,
        ("forked", 10, FAIR, "grants/s >= kazoo's"): False,
    }
    result = {"rows": rows, "targets": targets(rows, [10, 1000]), "curator_absent": "",
              "floors": [{"rep": 0, "n": 10, "p50_ms": 1.2, "p90_ms": 1.5, "p99_ms": 3.0, "max_ms": 4.0,
                          "read": {"p50_ms": 1.1}, "delete": {"p50_ms": 1.0}, "same_server_p50_ms": 1.1,
                          "other_server_p50_ms": 1.3, "n_samples": 300, "lost": 0}],
              "config": {"reps": 1, "work_us": 200, "warmup_s": 5, "window_s": 20, "session_s": 10},
              "meta": {"started": "now", "command": "c", "ensemble": "e", "zookeeper": "3.8", "duration_s": 1,
                       "machine": {"commit": "abc", "loadavg_start": [1.0], "cpus": 2}, "loadavg_end": [1.0]}}
    rows[0]["slow"] = [{"kind": "hand-off", "ms": 2990.0, "at_s": 4.0, "from": "3:0", "to": "7:0",
                        "release_ms": 2.5, "same_process": False}]
    md = markdown(result)
    assert ("- N = 10 spawned zkrecipes FairLock: hand-off 2,990 ms at 4.0 s, 3:0 -> 7:0; "
            "that release() returned after 2.5 ms") in md
    assert "| 10 | spawned | zkrecipes FairLock | max hand-off (ms) | 2,990.0 | 100.0 | **no** |" in md
    assert "| 10 | spawned | zkrecipes aio FairLock | hand-off p50 / floor p50 | 1.67x | 1.50x | **no** |" in md
    assert "**2,990.0**" in md and "| 1.25x |" in md
    assert "| 10 | 1.20 / 1.50 / 3.00 / 4.00 | 1.10 | 1.10 / 1.30 | 1.00 | 300 | 0 |" in md  # the floor


def test_split_puts_each_cross_process_handoff_at_the_notification_that_woke_the_next_holder():
    grants = [
        _g("0:0", 0, 1, 2),  # before the window
        _g("1:0", 0, 5, 6),  # from 0:0 (release call 2): notification read at 3.5, watch function at 4
        _g("1:1", 0, 7, 8),  # same process: local
        _g("0:0", 0, 10, 11),  # from 1:1 (release call 8): no notification read in 8..10: found it free
        _g("1:0", 0, 30, 31),  # from 0:0 (release call 11): read at 12, watch function at 13 -- the tail
    ]
    reads = {"1": [1_500_000, 3_500_000, 12_000_000], "0": [7_000_000]}  # 1.5, 7: before the release call
    events = {"1": [4_000_000, 13_000_000]}
    s = split(grants, 3 * MS, 100 * MS, reads, events)
    assert (s["matched"], s["local"], s["unmatched"]) == (2, 1, 1)
    assert s["server"]["p50_ms"] == 1.0 and s["server"]["max_ms"] == 1.5  # 2 -> 3.5, 11 -> 12
    assert s["client"]["p50_ms"] == 1.5 and s["client"]["max_ms"] == 18  # 3.5 -> 5, 12 -> 30
    assert s["dispatch"]["p50_ms"] == 0.5 and s["dispatch"]["max_ms"] == 1  # 3.5 -> 4, 12 -> 13
    assert s["after_event"]["max_ms"] == 17
    # the p99 of the 4 hand-offs (3, 1, 2, 19 ms) is the 19 ms one: its time went to the client side
    assert s["tail"] == {"n": 1, "of": 1, "handoff_p50_ms": 19, "server_p50_ms": 1, "client_p50_ms": 18,
                         "dispatch_p50_ms": 1}
