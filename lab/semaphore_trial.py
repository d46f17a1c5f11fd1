"""The lab's ``semaphore`` trial: are there ever more than N holders of an N-lease semaphore acting at once?

Each worker process (:mod:`lab.worker`) runs two threads on its one session: a zkrecipes
:class:`~zkrecipes.Semaphore` and, as the baseline, kazoo's ``Semaphore``, both with ``LEASES`` (3) leases,
each on its own path and register. A holder loops: acquire; ``check()``, *enter* (a register operation);
hold a random short time; ``check()``, *leave* (a second register operation); release. kazoo's
semaphore has no ``check()`` beyond ``is_acquired`` (which stays True after the session is gone) and
tells its holder nothing.

A single number cannot fence N leases (a lease that outlives N newer grants is still valid, and a stale
lease can be newer than a valid one), so the register is used unfenced and the checker counts instead
(:func:`capacity`): the span of a hold runs from its first to its last accepted register operation, and
an *accepted overlap* is a hold whose span begins while N others are open (N+1 holders inside at once,
in the register's own order). *Unsafe overlaps* count holds that presented an operation while N other
holds were acting (from their grant to their last operation). Operations that raced an instant session
expiry or a pause (:func:`lab.check.races`: checked before the holder's client could have heard of the
expiry, or before its process was frozen; no token could stop them) are counted apart, as
``expiry_races`` and ``pause_races``. A grant is *out of order* when a request
with a lower queue sequence (kazoo: an earlier request) was waiting then and was granted more than
``GRANT_SLACK`` later, with no fault meanwhile: with N leases, a node may hold once fewer than N nodes
are ahead of it, so every waiting node ahead of a new holder may hold too and only noticing it can lag.
The rest of the verdict (grants, loss
notices, orphans, hangs) is :func:`lab.check.check_trial`'s.
"""

from __future__ import annotations

import bisect
import glob
import json
import os
import random
import threading
import time
from collections import defaultdict
from typing import Optional

from .check import RACE_FINDINGS, Windows, check_trial, races
from .fenced import FencedRegister, read_log

LEASES = 3
GRANT_SLACK = 0.5  # s: a waiter ahead that became a holder at the same moment may notice it this much later
IMPLS = ("sem", "kazoo-sem")
CAPACITY = {"sem": LEASES, "kazoo-sem": LEASES}


# -- the worker side ------------------------------------------------------------------------------------
def lease_body(w, impl: str, check, reg: FencedRegister, hold: str, rnd, lost_types: tuple) -> None:
    """The hold's work: check, enter, hold, check, leave (both register operations unfenced)."""
    pause = w.hold_time(rnd)
    try:
        check()
        reg.read(None, hold=hold, checked=time.monotonic())  # when the check passed (see capacity)
        time.sleep(pause)
        check()
        reg.read(None, hold=hold, shared=True, checked=time.monotonic())  # "shared": faults aim at enters only
        w.rec("done", impl=impl, hold=hold)
    except lost_types as exc:
        w.rec("check_fail", impl=impl, hold=hold, error=f"{type(exc).__name__}: {exc}")


def run_worker(w) -> None:
    """A ``semaphore`` worker: a zkrecipes Semaphore thread and a kazoo Semaphore thread on one session."""
    client = w.connect()
    root = w.cfg["root"]
    paths = {impl: f"{root}/{impl}" for impl in IMPLS}
    threads = []
    for k, fn in enumerate((loop_zkrecipes, loop_kazoo)):
        rnd = random.Random(f"{w.cfg['seed']}-{k}")
        t = threading.Thread(target=w._guard, args=(fn, w, client, paths, rnd), name=fn.__name__, daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    w.close_client(client, list(paths.values()))


def loop_zkrecipes(w, client, paths, rnd) -> None:
    from zkrecipes import LockLost, Semaphore

    from .worker_base import _seq, _sid

    sem = Semaphore(client, paths["sem"], LEASES, identifier=w.ident)
    current: dict = {}
    sem.add_listener(w._state_recorder("sem", current))
    w.cancels.append(sem.cancel)
    reg = FencedRegister(w.cfg["registers"]["sem"])
    n = 0
    while not w.stopping():
        req = f"{w.slot}.{os.getpid()}.sem.{n}"
        n += 1
        w.rec("acquire", impl="sem", req=req, mode="x")
        try:
            ok = sem.acquire(timeout=max(0.01, w.remaining()))
        except Exception as exc:
            w.rec("acquire_error", impl="sem", req=req, error=f"{type(exc).__name__}: {exc}")
            w.stop.wait(0.1)
            continue
        if not ok:
            w.rec("acquire_fail", impl="sem", req=req)
            continue
        current["hold"] = req
        node = sem.node
        w.rec("grant", impl="sem", req=req, hold=req, mode="x", token=sem.token, node=node, seq=_seq(node),
              session=_sid(client))
        try:
            lease_body(w, "sem", sem.check, reg, req, rnd, (LockLost,))
        finally:
            w.rec("release_start", impl="sem", hold=req)
            try:
                sem.release()
            except Exception as exc:
                w.rec("release_error", impl="sem", hold=req, error=f"{type(exc).__name__}: {exc}")
            w.rec("release", impl="sem", hold=req, lost=sem.lost.is_set())
            current.pop("hold", None)
    reg.close()


def loop_kazoo(w, client, paths, rnd) -> None:
    from kazoo.exceptions import CancelledError, LockTimeout

    from .worker_base import NotHeld, _sid

    path = paths["kazoo-sem"]

    def fresh():
        return client.Semaphore(path, identifier=w.ident, max_leases=LEASES)

    holder = {"sem": fresh()}
    w.cancels.append(lambda: holder["sem"].cancel())
    reg = FencedRegister(w.cfg["registers"]["kazoo-sem"])
    n = 0
    while not w.stopping():
        sem = holder["sem"]
        req = f"{w.slot}.{os.getpid()}.kazoo-sem.{n}"
        n += 1
        w.rec("acquire", impl="kazoo-sem", req=req, mode="x")
        try:
            ok = sem.acquire(timeout=max(0.01, w.remaining()))
        except (LockTimeout, CancelledError):
            ok = False
        except Exception as exc:
            w.rec("acquire_error", impl="kazoo-sem", req=req, error=f"{type(exc).__name__}: {exc}")
            holder["sem"] = fresh()  # a fresh object, as a careful user would
            w.stop.wait(0.1)
            continue
        if not ok:
            w.rec("acquire_fail", impl="kazoo-sem", req=req)
            continue
        w.rec("grant", impl="kazoo-sem", req=req, hold=req, mode="x", token=None, node=sem.create_path, seq=None,
              session=_sid(client))

        def check(sem=sem) -> None:
            if not sem.is_acquired:
                raise NotHeld("kazoo Semaphore.is_acquired is False")

        try:
            lease_body(w, "kazoo-sem", check, reg, req, rnd, (NotHeld,))
        finally:
            w.rec("release_start", impl="kazoo-sem", hold=req)
            try:
                sem.release()
            except Exception as exc:
                w.rec("release_error", impl="kazoo-sem", hold=req, error=f"{type(exc).__name__}: {exc}")
                holder["sem"] = fresh()
            w.rec("release", impl="kazoo-sem", hold=req, lost=None)
    reg.close()


# -- the checker side ------------------------------------------------------------------------------------
def _events(path: str, impl: Optional[str]) -> list:
    out = []
    for p in sorted(glob.glob(os.path.join(path, "w-*.jsonl"))):
        with open(p, "rb") as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # cut short by SIGKILL
                if impl is None or e.get("impl") == impl:
                    out.append(e)
    out.sort(key=lambda e: e["t"])
    return out


def capacity(path: str, res: dict, impl: str, n: int) -> None:
    """Replace ``res``'s (a :func:`~lab.check.check_trial` result) overlap counts for ``impl`` by the
    counts for ``n`` holders at once: accepted overlaps (a hold whose accepted span begins while ``n``
    others are open, in the register's order) and unsafe overlaps (a hold that acts while ``n`` others
    are acting, from their grant to their last register operation)."""
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    win = Windows(res["faults"], float(meta["session_timeout"]) + 2.0)
    r = res["impls"][impl]
    totals, rows = r["totals"], r["rows"]
    for row in rows.values():
        row["accepted_overlaps"] = row["unsafe"] = 0
    totals["findings"] = [f for f in totals["findings"]
                          if f["what"] not in ("accepted overlap", "unsafe overlap", *RACE_FINDINGS.values())]

    def row(t: float) -> dict:
        return rows.setdefault(win.kind(t), {"accepted_overlaps": 0, "unsafe": 0})

    everything = _events(path, None)
    events = [e for e in everything if e.get("impl") == impl]
    grants = {e["hold"]: e["t"] for e in events if e["ev"] == "grant"}
    sessions = {e["hold"]: e.get("session") for e in events if e["ev"] == "grant"}
    log, _ = read_log(os.path.join(path, f"register-{impl}.jsonl"))
    # an operation that raced an instant expiry or a pause is counted apart (see lab.check.races): no token
    # can stop a lease holder whose check passed before its client heard that its session had ended, or
    # before its process was frozen
    is_raced = races(res["faults"], everything)
    raced = [(rec, kind) for rec in log if rec.get("hold") in grants and (kind := is_raced(rec, sessions[rec["hold"]]))]
    for rec, kind in raced:
        totals["findings"].append({"what": RACE_FINDINGS[kind], "t": rec["t"], "hold": rec["hold"],
                                   "checked": rec.get("checked"), "accepted": rec["ok"]})
    totals["expiry_races"] = sum(1 for _, kind in raced if kind == "expiry")
    totals["pause_races"] = sum(1 for _, kind in raced if kind == "pause")
    raced_seqs = {r["seq"] for r, _ in raced}
    log = [rec for rec in log if rec["seq"] not in raced_seqs]
    accepted = [rec for rec in log if rec["ok"] and rec.get("hold")]
    spans: dict = {}
    for i, rec in enumerate(accepted):
        spans.setdefault(rec["hold"], [i, i])[1] = i
    open_: list = []
    n_acc = 0
    for hid, (a, b) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        open_ = [(h2, b2) for h2, b2 in open_ if b2 > a]
        extra = len(open_) + 1 - n
        if extra > 0:
            n_acc += extra
            t = accepted[a]["t"]
            row(t)["accepted_overlaps"] += extra
            totals["findings"].append({"what": "accepted overlap", "t": t, "hold": hid,
                                       "inside": [h2 for h2, _ in open_]})
        open_.append((hid, b))
    totals["accepted_overlaps"] = n_acc

    ops = defaultdict(list)
    for rec in log:
        if rec.get("hold") in grants:
            ops[rec["hold"]].append(rec["t"])
    acting = sorted((grants[h], ts[-1], h) for h, ts in ops.items())
    starts = [a[0] for a in acting]
    n_unsafe = 0
    for hid, ts in ops.items():
        for t in ts:
            others = [h for s, e, h in acting[: bisect.bisect_right(starts, t)] if e >= t and h != hid]
            if len(others) >= n:
                n_unsafe += 1
                row(t)["unsafe"] += 1
                totals["findings"].append({"what": "unsafe overlap", "t": t, "hold": hid, "acting": others})
                break
    totals["unsafe"] = n_unsafe
    totals["max_holders"] = n
    _out_of_order(events, win, totals, rows, row)
    totals["findings"].sort(key=lambda f: f.get("t", 0.0))


def _out_of_order(events: list, win: Windows, totals: dict, rows: dict, row) -> None:
    """Recount grants out of order for a semaphore (see the module's docstring)."""
    for r in rows.values():
        r["out_of_order"] = 0
    totals["findings"] = [f for f in totals["findings"] if f["what"] != "grant out of order"]
    reqs: dict = {}
    for e in events:
        if e["ev"] == "acquire":
            reqs[e["req"]] = {"start": e["t"], "pid": e["pid"], "grant": None, "seq": None}
        elif e["ev"] == "grant" and e["req"] in reqs:
            reqs[e["req"]].update(grant=e["t"], seq=e.get("seq"))
    granted = sorted((r for r in reqs.values() if r["grant"] is not None), key=lambda r: r["grant"])
    use_seq = all(r["seq"] is not None for r in granted)
    max_wait = max((r["grant"] - r["start"] for r in granted), default=0.0)
    n_ooo = 0
    for i, g in enumerate(granted):
        for r in granted[i + 1:]:
            if r["grant"] - g["grant"] > max_wait:
                break
            if r["pid"] == g["pid"] or r["start"] >= g["grant"] or r["grant"] - g["grant"] <= GRANT_SLACK:
                continue
            if (r["seq"] < g["seq"] if use_seq else r["start"] < g["start"] - 0.002) \
                    and not win.any_between(r["start"], r["grant"]):
                n_ooo += 1
                row(g["grant"])["out_of_order"] += 1
                totals["findings"].append({"what": "grant out of order", "t": g["grant"], "granted": g["seq"],
                                           "waiting": r["seq"], "late_by": round(r["grant"] - g["grant"], 3)})
                break
    totals["out_of_order"] = n_ooo


def check(path: str) -> dict:
    """Verdict of one ``semaphore`` trial directory, in :func:`lab.check.check_trial`'s shape."""
    res = check_trial(path)
    for impl, n in CAPACITY.items():
        if impl in res["impls"]:
            capacity(path, res, impl, n)
    return res
