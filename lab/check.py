"""The safety lab's checker: verdicts computed from recorded histories only.

Inputs (one directory per trial, written by :mod:`lab.run`):

- ``meta.json`` -- the trial's implementations, session timeout and settle time;
- ``w-<slot>-<gen>.jsonl`` -- each worker process's own events (``acquire``, ``grant``, ``state``,
  ``check_fail``, ``rejected``, ``release_start``, ``release``, ``zk_state``, ``final`` ...);
- ``register-<impl>.jsonl`` -- the fenced register's log: every operation, accepted or rejected, in the
  order the register applied them, stamped inside its file lock;
- ``nemesis.jsonl`` -- faults (kind, target, start, end) and the post-run orphan and hang checks.

Definitions (per implementation; every finding is also attributed to the fault whose window -- from its
start to its end plus the session timeout plus 2 s -- contains it, else to ``none``):

accepted overlap
    two conflicting holds (not both readers) whose *accepted* register operations interleave in the
    register's order: hold A has accepted operations both before and after an accepted operation of
    hold B. Must be 0: it means the resource saw two holders at once.
unsafe overlap
    a hold that presented an operation to the register (accepted or not) after a later conflicting hold
    had been granted: two holders acting at once. Usually the older one is stale -- paused, cut off or
    expired, acting after losing its hold -- but it can also be the later grant that was made on stale
    information (a waiter frozen while being granted). Fencing turns the stale side's operations into
    rejections; without fencing they are accepted. *Later* is the lock's own order where both holds' nodes
    are known (a node that queued behind ours: a higher sequence number or czxid), else the order of the
    recorded grants: a worker frozen between being granted and recording it records its grant after holds
    ZooKeeper granted after it (see :func:`first_later`).
expiry and pause races
    operations no lock could have stopped, only fencing (see :func:`races`): the lab's ``session-expiry``
    ends a session server-side at once, so ZooKeeper frees its nodes -- and grants them -- as it tells the
    client, or before; and a ``pause`` may freeze a holder between a ``check()`` that passed and the
    operation it guards. Such an operation -- its ``check()`` passed before the client heard anything of
    the expiry, or before the process was stopped -- is counted here and not as an unsafe overlap (a
    fenced register must still reject it, so it stays in the accepted overlaps of a lock). A check that
    passed after the client heard, or after the process ran again, is a holder not told in time: its
    operations are never excused.
lost increments
    every accepted write stores the value its hold read plus one; a write that overwrote increments it
    did not see lost ``seen + 1 - stored`` of them. The sum equals accepted writes minus the final value.
grants out of order
    a grant made while a conflicting request that queued earlier (lower sequence number; for a lock
    without a queue, an earlier request) was still waiting, with no fault between that request's start
    and its grant.
loss notices
    a hold needs one when its process was the target of a session expiry, partition (cut or silent) or pause while it
    held (an expiry from the moment it was done: a hold released before that could not be told), or
    its client saw the session expire while it held. The notice is the first ``suspended`` or
    ``lost`` listener call or ``check()`` failure during the hold; its delay is measured from the moment
    the holder could reach the lock service again (expiry done, link healed, process continued, or the
    client's own view of the expiry) and must be at most the session timeout plus 1 s.
orphans
    lock nodes (or Redis keys) a worker's session still owned after it released everything; any node
    left under the trial's root once every worker had exited and every session had had time to end; and,
    in a queue that stalled, extra nodes of one acquire (same guid and session) and a head node that its
    live owner did not hold (nobody will ever delete it before that session ends).
"""

from __future__ import annotations

import bisect
import glob
import json
import os
from collections import defaultdict
from typing import Callable, Optional

from .fenced import read_log

TARGETED_SESSION_FAULTS = ("session-expiry", "partition", "silent-partition", "pause", "stall-repair")
EXPIRIES = ("session-expiry", "stall-repair")  # the session ends at the fault's end, not at its start
NOTICE_STATES = ("suspended", "lost")
ROW_KEYS = (
    "faults",
    "hits",
    "grants",
    "ops_ok",
    "ops_rejected",
    "unsafe",
    "accepted_overlaps",
    "lost_increments",
    "out_of_order",
    "notices_needed",
    "notices_got",
    "notices_late",
    "max_notice_delay",
)


def struck_at(fault: dict) -> float:
    """When a fault strikes its target: an expiry when it is done (its end), the other faults when they
    begin -- a pause, once the target is frozen, when it recorded a step after the nemesis's SIGSTOP (its
    ``frozen``, see :func:`frozen_after`). A hold struck is one in progress at that moment."""
    if fault["kind"] in EXPIRIES:
        return float(fault["end"])
    return float(fault.get("frozen", fault["start"]))


def frozen_after(fault: dict, events: list) -> Optional[float]:
    """For a ``pause``: just after the target's last recorded step once the nemesis had sent SIGSTOP
    (``stopped``), if it recorded any before the pause's midpoint -- a stopped process records nothing, so
    it was still running then (on a loaded machine a stop can take effect milliseconds late); else None.
    A hold whose release began in that gap was not struck: it let go before it was frozen."""
    if fault["kind"] != "pause" or "stopped" not in fault or not fault.get("target_pid"):
        return None
    mid = (fault["stopped"] + fault["end"]) / 2
    late = [e["t"] for e in events if e.get("pid") == fault["target_pid"] and fault["stopped"] < e["t"] < mid]
    return max(late) + 1e-6 if late else None


RACE_FINDINGS = {"expiry": "raced an instant expiry", "pause": "frozen between check and act"}


def races(faults: list, events: list):
    """A function ``raced(record, session)``: which race, if any, a register operation (``record``,
    presented by a hold of ``session``) lost before the lock could have told its holder -- ``"expiry"``,
    ``"pause"`` or None. Nothing but a fencing token can stop such an operation.

    ``expiry``: an expiry fault (``session-expiry``, ``stall-repair``) ends the target's session
    server-side with no silence before it, so the server frees (and may grant) the session's nodes no later
    than it tells the client. The operation was presented by the target process (and session, where both
    are known) after the fault began, and the holder's last ``check()`` before it passed (the record's
    ``checked``; else its own stamp, later still) before the client's first sign of the expiry -- kazoo's
    first ``SUSPENDED`` or ``LOST`` after the fault began, as the worker recorded it (``zk_state``, on
    kazoo's thread). No sign recorded: nothing is raced.

    ``pause``: the target process was frozen (SIGSTOP) after the holder's last ``check()`` passed and before
    the operation was presented: the check passed before the nemesis had stopped the process (the fault's
    ``stopped`` stamp; else its start, earlier still) and the operation came after the fault began. A check
    that passed once the process ran again is never excused."""
    heard = defaultdict(list)
    for e in events:
        if e["ev"] == "zk_state" and e.get("state") in ("SUSPENDED", "LOST"):
            heard[e["pid"]].append(e["t"])
    windows = []  # (kind, pid, session, start, checked before)
    for f in faults:
        pid = f.get("target_pid")
        if f["kind"] in EXPIRIES and pid:
            first = min((t for t in heard[pid] if t >= f["start"]), default=None)
            if first is not None:
                windows.append(("expiry", pid, f.get("session"), f["start"], first))
        elif f["kind"] == "pause" and pid:
            windows.append(("pause", pid, None, f["start"], f.get("stopped", f["start"])))

    def raced(rec: dict, session: Optional[str]) -> Optional[str]:
        checked = rec.get("checked", rec["t"])
        for kind, pid, sid, start, before in windows:
            if rec.get("pid") == pid and (sid is None or session is None or sid == session) \
                    and rec["t"] >= start and checked < before:
                return kind
        return None

    return raced


def _number(v) -> bool:
    return type(v) is int  # a czxid or a sequence number (never a bool, a string or None)


def queue_place(holds: list) -> Callable[[dict], Optional[int]]:
    """Where each hold's node stood in the lock's queue, if known: its sequence number, or its token (czxid)
    when the sequence numbers of the holds with both disagree with their tokens somewhere (a queue's
    parent reaped once empty and made again numbers from 0). Both orders are ZooKeeper's: a node can only
    be granted once every conflicting node ahead of it has gone. The sequence number is known for a hold
    lost before its worker could read the token (``no_token``), whose grant was recorded late."""
    both = sorted((o["token"], o["seq"]) for o in holds if _number(o.get("token")) and _number(o.get("seq")))
    by_seq = all(x[1] < y[1] for x, y in zip(both, both[1:]))
    key = "seq" if by_seq else "token"
    return lambda o: o.get(key) if _number(o.get(key)) else None


def _two_earliest(best: tuple, h: dict) -> tuple:
    """The earliest recorded grant among ``best`` and ``h``, and the earliest of another process (if any)."""
    merged = sorted((h, *best), key=lambda o: o["grant"])
    second = next((o for o in merged[1:] if o["pid"] != merged[0]["pid"]), None)
    return (merged[0],) if second is None else (merged[0], second)


def first_later(holds: list, exclusive) -> Callable[[dict, float], Optional[dict]]:
    """A function ``first(h, until)``: of the holds of other processes that conflict with hold ``h``
    (``exclusive(id)``: not a reader) and were granted after it, the one whose grant was recorded first,
    if that was before ``until``; else None.

    *After* is the lock's order where both holds' places in the queue are known (:func:`queue_place`): a
    node that queued behind ours can only be granted once ours has gone. A worker frozen between being
    granted and recording it (SIGSTOP while its read-back or its create's reply was on the way, or as
    ``acquire()`` returned) records the grant after holds granted once its session had expired; by the
    records alone the rightful holder of the moment would be acting after a later grant, and the late one
    -- had it acted -- after none. Other holds are ordered by their recorded grants."""
    place = queue_place(holds)
    by_time = sorted(holds, key=lambda o: o["grant"])
    gtimes = [o["grant"] for o in by_time]
    placed = sorted((o for o in holds if place(o) is not None), key=place)
    places = [place(o) for o in placed]
    # for each k, the two earliest recorded grants (of different processes) among placed[k:]: every hold,
    # and writers only (what a reader conflicts with)
    suffixes = []
    for writers_only in (False, True):
        out: list = [()] * (len(placed) + 1)
        for k in range(len(placed) - 1, -1, -1):
            o = placed[k]
            out[k] = _two_earliest(out[k + 1], o) if not writers_only or exclusive(o["id"]) else out[k + 1]
        suffixes.append(out)

    def first(h: dict, until: float) -> Optional[dict]:
        found = []
        at = place(h)
        if at is not None:
            behind = suffixes[0 if exclusive(h["id"]) else 1][bisect.bisect_right(places, at)]
            found += [o for o in behind if o["pid"] != h["pid"]][:1]
        for o in by_time[bisect.bisect_right(gtimes, h["grant"]):bisect.bisect_left(gtimes, until)]:
            if o["pid"] != h["pid"] and (at is None or place(o) is None) and (exclusive(h["id"]) or exclusive(o["id"])):
                found.append(o)
                break
        best = min(found, key=lambda o: o["grant"], default=None)
        return best if best is not None and best["grant"] < until else None

    return first


def _load_jsonl(path: str) -> list:
    out = []
    with open(path, "rb") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut short by SIGKILL
    return out


class Windows:
    """Fault windows, for attributing a finding at time t to the fault in effect (or ``none``)."""

    def __init__(self, faults: list, tail: float) -> None:
        self.items = sorted(((f["start"], f["end"] + tail, f["kind"]) for f in faults), key=lambda w: w[0])
        self.starts = [w[0] for w in self.items]

    def kind(self, t: float) -> str:
        """The kind of the latest fault whose window contains ``t``, else ``"none"``."""
        for start, end, kind in reversed(self.items[: bisect.bisect_right(self.starts, t)]):
            if start <= t < end:
                return kind
        return "none"

    def any_between(self, a: float, b: float, margin: float = 0.5) -> bool:
        return any(start - margin <= b and a <= end for start, end, _ in self.items)


def check_trial(path: str, logs: Optional[dict] = None) -> dict:
    """Check one trial directory; returns ``{"impls": {impl: {"totals": {...}, "rows": {kind: {...}}}}}``.
    ``logs`` (impl -> ``(records, torn)``, as :func:`~lab.fenced.read_log` returns) stands in for the
    register files of a trial whose resource is not the file register (:mod:`lab.txn_trial`)."""
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    T = float(meta["session_timeout"])
    tail = T + 2.0
    events = []
    for p in sorted(glob.glob(os.path.join(path, "w-*.jsonl"))):
        events.extend(_load_jsonl(p))
    events.sort(key=lambda e: e["t"])
    nemesis = _load_jsonl(os.path.join(path, "nemesis.jsonl")) if os.path.exists(os.path.join(path, "nemesis.jsonl")) \
        else []
    starts = {e["id"]: e for e in nemesis if e["ev"] == "fault_start"}
    faults = []
    for e in nemesis:
        if e["ev"] == "fault_end" and e["id"] in starts:
            f = dict(starts[e["id"]])
            f.update({k: v for k, v in e.items() if k not in ("t", "ev")})
            f["start"], f["end"] = starts[e["id"]]["t"], e["t"]
            faults.append(f)
    for fid, s in starts.items():
        if not any(f["id"] == fid for f in faults):
            f = dict(s)
            f["start"], f["end"] = s["t"], s["t"] + tail
            faults.append(f)
    for f in faults:
        frozen = frozen_after(f, events)
        if frozen is not None:
            f["frozen"] = frozen
    win = Windows(faults, tail)
    kills = {f["target_pid"]: f["start"] for f in faults if f["kind"] == "holder-kill" and f.get("target_pid")}
    last_t = defaultdict(float)
    for e in events:
        last_t[e["pid"]] = e["t"]

    out = {"impls": {}, "faults": faults}
    raced = races(faults, events)
    for impl in meta["impls"]:
        out["impls"][impl] = _check_impl(impl, meta, events, nemesis, faults, win, kills, last_t, path, T,
                                         (logs or {}).get(impl), raced)
    return out


def _check_impl(impl, meta, events, nemesis, faults, win, kills, last_t, path, T, given_log=None,
                raced=lambda rec, session: False) -> dict:
    kinds = ["none"] + [k for k in meta["fault_kinds"]]
    rows = {k: {key: 0 for key in ROW_KEYS} for k in kinds}
    for r in rows.values():
        r["max_notice_delay"] = None
    totals: dict = {"findings": []}

    def row(t: float) -> dict:
        return rows.setdefault(win.kind(t), {key: 0 for key in ROW_KEYS} | {"max_notice_delay": None})

    for f in faults:
        rows.setdefault(f["kind"], {key: 0 for key in ROW_KEYS} | {"max_notice_delay": None})["faults"] += 1

    # -- holds and requests from the workers' histories ---------------------------------------------------
    mine = [e for e in events if e.get("impl") == impl]
    holds: dict = {}
    reqs: dict = {}
    for e in mine:
        ev = e["ev"]
        if ev == "acquire":
            reqs[e["req"]] = {"start": e["t"], "pid": e["pid"], "mode": e.get("mode", "x"), "grant": None,
                              "seq": None, "end": None}
        elif ev == "grant":
            h = {"id": e["hold"], "pid": e["pid"], "slot": e["slot"], "grant": e["t"], "token": e.get("token"),
                 "node": e.get("node"),
                 "seq": e.get("seq"), "mode": e.get("mode", "x"), "session": e.get("session"), "end": None,
                 "release": None, "notices": []}
            holds[e["hold"]] = h
            r = reqs.get(e["req"])
            if r is not None:
                r["grant"], r["seq"], r["end"] = e["t"], e.get("seq"), e["t"]
            row(e["t"])["grants"] += 1
        elif ev in ("acquire_fail", "acquire_error"):
            r = reqs.get(e["req"])
            if r is not None:
                r["end"] = e["t"]
        elif ev == "release_start" and e["hold"] in holds:
            holds[e["hold"]]["end"] = e["t"]
        elif ev == "release" and e["hold"] in holds:
            holds[e["hold"]]["release"] = e["t"]
        elif ev == "state" and e.get("state") in NOTICE_STATES:
            for hid in e.get("holds") or [e.get("hold")]:  # a lock object shared by threads: each hold of it
                if hid in holds:
                    holds[hid]["notices"].append((e["t"], f"listener:{e['state']}"))
        elif ev == "check_fail" and e["hold"] in holds:
            holds[e["hold"]]["notices"].append((e["t"], "check"))
    for h in holds.values():
        dead = kills.get(h["pid"], last_t[h["pid"]])
        if h["end"] is None:
            h["end"] = dead
        if h["release"] is None:
            h["release"] = max(h["end"], dead)
        h["notices"].sort()
    totals["grants"] = len(holds)

    # -- the register's log ---------------------------------------------------------------------------------
    log, torn = given_log if given_log is not None else read_log(os.path.join(path, f"register-{impl}.jsonl"))
    totals["torn_records"] = torn
    ops_by_hold = defaultdict(list)
    for rec in log:
        r = row(rec["t"])
        r["ops_ok" if rec["ok"] else "ops_rejected"] += 1
        if rec.get("hold"):
            ops_by_hold[rec["hold"]].append(rec)
        if rec["ok"] and rec["op"] == "write":
            lost = rec["seen"] + 1 - rec["arg"]
            if lost:
                r["lost_increments"] += lost
                totals["findings"].append(
                    {"what": "lost increment", "t": rec["t"], "hold": rec["hold"], "lost": lost, "seq": rec["seq"]}
                )
    final = log[-1] if log else {"value": 0, "writes": 0}
    totals["final_value"] = final["value"]
    totals["accepted_writes"] = final["writes"]
    totals["lost_increments"] = final["writes"] - final["value"]
    totals["ops_ok"] = sum(1 for r in log if r["ok"])
    totals["ops_rejected"] = sum(1 for r in log if not r["ok"])

    def exclusive(hid: str) -> bool:
        h = holds.get(hid)
        if h is not None:
            return h["mode"] != "s"
        return any(not r["shared"] for r in ops_by_hold.get(hid, []))

    # accepted overlaps: interleaving accepted operations of conflicting holds
    spans: dict = {}
    accepted = [r for r in log if r["ok"] and r.get("hold")]
    for i, rec in enumerate(accepted):
        s = spans.setdefault(rec["hold"], [i, i])
        s[1] = i
    order = sorted(spans.items(), key=lambda kv: kv[1][0])
    active: list = []
    n_acc = 0
    for hid, (a, b) in order:
        active = [(h2, a2, b2) for h2, a2, b2 in active if b2 > a]
        for h2, _a2, _b2 in active:
            if exclusive(hid) or exclusive(h2):
                n_acc += 1
                t = accepted[a]["t"]
                row(t)["accepted_overlaps"] += 1
                totals["findings"].append({"what": "accepted overlap", "t": t, "holds": [h2, hid]})
        active.append((hid, a, b))
    totals["accepted_overlaps"] = n_acc

    # unsafe overlaps: a hold acting after a later conflicting hold was granted (later: see first_later)
    first_after = first_later(list(holds.values()), exclusive)
    involved: set = set()  # holds on either side of an unsafe overlap (or of a raced expiry)
    n_unsafe = 0
    n_raced = {kind: 0 for kind in RACE_FINDINGS}
    for hid, recs in ops_by_hold.items():
        h = holds.get(hid)
        if h is None:
            continue
        first = first_after(h, recs[-1]["t"])
        if first is None:
            continue
        late = [r for r in recs if r["t"] > first["grant"]]
        involved.update((hid, first["id"]))
        excused = [(r, kind) for r in late if (kind := raced(r, h["session"]))]  # see races
        for kind in RACE_FINDINGS:
            ops = [r for r, k in excused if k == kind]
            if ops:
                n_raced[kind] += len(ops)
                totals["findings"].append({"what": RACE_FINDINGS[kind], "t": ops[0]["t"], "hold": hid,
                                           "after_grant_of": first["id"], "ops": len(ops),
                                           "accepted": sum(1 for r in ops if r["ok"])})
        excused_ids = {id(r) for r, _ in excused}
        late = [r for r in late if id(r) not in excused_ids]
        if not late:
            continue
        n_unsafe += 1
        row(late[0]["t"])["unsafe"] += 1
        totals["findings"].append(
            {"what": "unsafe overlap", "t": late[0]["t"], "hold": hid, "after_grant_of": first["id"],
             "ops": len(late), "accepted": sum(1 for r in late if r["ok"])}
        )
    totals["unsafe"] = n_unsafe
    totals["expiry_races"], totals["pause_races"] = n_raced["expiry"], n_raced["pause"]
    # a rejection outside any detected overlap would mean fencing turned away a rightful holder
    totals["false_rejections"] = sum(1 for r in log if not r["ok"] and r.get("hold") not in involved)

    # grants out of order
    granted = sorted((r for r in reqs.values() if r["grant"] is not None), key=lambda r: r["grant"])
    use_seq = all(r["seq"] is not None for r in granted)
    max_wait = max((r["grant"] - r["start"] for r in granted), default=0.0)
    n_ooo = 0
    for i, g in enumerate(granted):
        key_g = g["seq"] if use_seq else g["start"] - 0.002
        for r in granted[i + 1:]:
            if r["grant"] - g["grant"] > max_wait:
                break
            if r["pid"] == g["pid"] or r["start"] >= g["grant"]:
                continue
            if r["mode"] == "s" and g["mode"] == "s":
                continue
            key_r = r["seq"] if use_seq else r["start"]
            if key_r < key_g and not win.any_between(r["start"], r["grant"]):
                n_ooo += 1
                row(g["grant"])["out_of_order"] += 1
                if len([f for f in totals["findings"] if f["what"] == "grant out of order"]) < 20:
                    totals["findings"].append({"what": "grant out of order", "t": g["grant"], "granted": g.get("seq"),
                                               "waiting": r.get("seq")})
                break
    totals["out_of_order"] = n_ooo
    totals["fairness_key"] = "queue sequence" if use_seq else "request time"

    # loss notices
    zk_lost = defaultdict(list)
    for e in events:
        if e["ev"] == "zk_state" and e.get("state") == "LOST":
            zk_lost[e["pid"]].append(e["t"])
    needed = got = late = 0
    max_delay: Optional[float] = None
    for h in holds.values():
        refs = []
        cause_kind = None
        for f in faults:
            if f["kind"] in TARGETED_SESSION_FAULTS and f.get("target_pid") == h["pid"] \
                    and h["grant"] <= struck_at(f) <= h["end"]:
                refs.append(f["end"])
                cause_kind = f["kind"]
        for t in zk_lost.get(h["pid"], []):
            if h["grant"] <= t <= h["release"]:
                refs.append(t)
                cause_kind = cause_kind or win.kind(t)
        if not refs:
            continue
        ref = min(refs)
        needed += 1
        r = rows.setdefault(cause_kind, {key: 0 for key in ROW_KEYS} | {"max_notice_delay": None})
        r["notices_needed"] += 1
        notices = [n for n in h["notices"] if h["grant"] <= n[0] <= h["release"]]
        if not notices:
            totals["findings"].append({"what": "missed loss notice", "t": ref, "hold": h["id"], "cause": cause_kind})
            continue
        got += 1
        r["notices_got"] += 1
        delay = round(notices[0][0] - ref, 3)
        max_delay = delay if max_delay is None else max(max_delay, delay)
        r["max_notice_delay"] = delay if r["max_notice_delay"] is None else max(r["max_notice_delay"], delay)
        if delay > T + 1.0:
            late += 1
            r["notices_late"] += 1
            totals["findings"].append({"what": "late loss notice", "t": ref, "hold": h["id"], "delay": delay,
                                       "cause": cause_kind})
    totals.update(notices_needed=needed, notices_got=got, notices_late=late, max_notice_delay=max_delay)

    # holder hits: targeted faults that struck a process holding this lock (an expiry when it was done)
    for f in faults:
        pid = f.get("target_pid")
        if pid and any(h["pid"] == pid and h["grant"] <= struck_at(f) <= h["end"] for h in holds.values()):
            rows[f["kind"]]["hits"] += 1

    # readers that held together (read/write locks)
    readers = sorted((h["grant"], h["end"]) for h in holds.values() if h["mode"] == "s")
    together = 0
    ends: list = []
    for s, e in readers:
        ends = [x for x in ends if x > s]
        together += len(ends)
        ends.append(e)
    totals["readers_overlapped"] = together if readers else None
    # of those, pairs of one process on one read node: threads that joined a shared read hold (issue 48)
    shared = sorted((h["grant"], h["end"], h["pid"], h["node"]) for h in holds.values()
                    if h["mode"] == "s" and h.get("node"))
    joined = 0
    live: list = []
    for s, e, pid, node in shared:
        live = [x for x in live if x[0] > s]
        joined += sum(1 for _, p, n in live if p == pid and n == node)
        live.append((e, pid, node))
    totals["readers_joined"] = joined if readers else None

    # orphans and hangs
    orphans = []
    suffix = meta["paths"].get(impl)
    for e in events:
        if e["ev"] == "final":
            orphans.extend(n for n in e.get("own_nodes", []) if suffix and (n == suffix or n.startswith(suffix + "/")))
    for e in nemesis:
        if e["ev"] == "orphans":
            orphans.extend(n for n in e.get("nodes", []) if suffix and (n == suffix or n.startswith(suffix + "/")))
    totals["hung"] = sum(1 for e in nemesis if e["ev"] == "hung")
    stalls = [e for e in nemesis if e["ev"] == "stall" and impl in e.get("impls", [])]
    totals["stalls"] = len(stalls)
    ghosts: dict = {}  # nodes of one acquire (same guid, same session) -> how many are extra
    stuck: dict = {}  # head node of a stalled queue that its (live) owner did not hold -> owner pid
    owners = {e["session"]: e["pid"] for e in events if e["ev"] == "session"}
    for e in stalls:
        queue = e.get("queues", {}).get(impl, [])
        head = queue[0] if queue and "node" in queue[0] else None
        pid = owners.get(head["owner"]) if head else None
        if pid is not None and not any(
            h["pid"] == pid and (h.get("node") or "").endswith("/" + head["node"]) and h["grant"] <= e["t"] <= h["end"]
            for h in holds.values()
        ):
            stuck[head["node"]] = pid
        by_guid = defaultdict(list)
        for n in queue:
            if n.get("guid"):
                by_guid[n["guid"]].append(n["node"])
        dups = {g: nodes for g, nodes in by_guid.items() if len(nodes) > 1}
        for nodes in dups.values():
            ghosts[tuple(nodes)] = len(nodes) - 1
        totals["findings"].append({"what": "stall", "t": e["t"], "after": e.get("after"), "waited": e.get("waited"),
                                   "queue_head": queue[:3], "same_acquire_twice": dups})
    for nodes, extra in ghosts.items():
        orphans.extend([f"{suffix}: one of {', '.join(nodes)} (one acquire, {len(nodes)} nodes)"] * extra)
    in_groups = {n for nodes in ghosts for n in nodes}
    orphans.extend(f"{suffix}/{n} (head of a stalled queue; its owner, pid {pid}, did not hold it)"
                   for n, pid in stuck.items() if n not in in_groups)
    totals["duplicate_nodes"] = sum(ghosts.values())
    totals["stuck_heads"] = len(stuck)
    totals["orphans"] = len(orphans)
    totals["orphan_nodes"] = orphans[:20]
    totals["crashes"] = [e.get("error") for e in events if e["ev"] == "crash"][:10]
    totals["workers"] = len({e["pid"] for e in events if e["ev"] == "start"})
    totals["findings"].sort(key=lambda f: f["t"])
    return {"totals": totals, "rows": rows}
