"""The lab's ``revoke`` trial: an operator asks holders to let go and breaks the ones that do not.

Workers hold a :class:`~zkrecipes.FairLock` that listens (a state listener, and ``revoke_requested``
read once, so every hold follows its node). Most holds are *cooperative*: ``check()``, read the fenced
register with the token, then wait for ``revoke_requested`` up to ``COOPERATIVE`` (0.2-0.6 s; a request ends
the wait at once: the holder lets go early), ``check()``, write, release. A share ``STUBBORN`` of the holds
play a hung holder: after the read they hear nothing for ``STUBBORN_HOLD`` seconds and then write
*without* a ``check()`` -- the write a broken holder makes when it wakes up.

The *operator* is a thread of the nemesis process (:func:`prepare`) on its own session: every
``EVERY`` seconds it calls :func:`zkrecipes.request_revoke` on the lock, waits ``BREAK_AFTER``, and
calls :func:`zkrecipes.break_lock` with the token of each marked holder whose node is still there. Every
``STALE_EVERY``-th round it also tries to break with a token whose holder is gone (an older holder's),
which must be refused (``LockError``) with nothing deleted. It records each call in ``nemesis.jsonl``.

What is checked (:func:`check`, beside :func:`lab.check.check_trial`), and what is not:

- a broken holder is *not* guaranteed to hear of the break before the next holder is granted: the
  operator deletes its node, and the holder learns when its node watch fires (it listens) or when it
  next checks. The guarantee that protects the resource is the fencing token: the next holder's token
  is higher, so once the next holder has used the register, the broken holder's operations are refused.
  ``unsafe`` (a hold acting after a later grant) is therefore expected from stubborn holders and only
  reported; the claim is ``stale_accepted`` = 0: no accepted operation of a hold after an accepted
  operation of a hold granted later -- beside 0 accepted overlaps and 0 lost increments;
- every broken hold still in progress when the break was done is told it lost (a ``lost`` listener call
  or a failed ``check()``) by the end of its release (as :func:`lab.check.check_trial` counts notices):
  ``notices`` of the ``break`` row, at most the session
  timeout + 1 s late (measured from the break, or from the end of a pause or partition the holder was in);
- every marked hold still in progress ``REVOKE_SLACK`` after it could hear of the mark (after the mark
  was stored, or after the pause or partition the nemesis had it in then), and not lost by then (a lost
  hold's node goes, and its mark with it), sees ``"revoke-requested"`` (``revoke_notices_missed`` = 0),
  also one marked at the head of the queue before its ``acquire()`` returned;
- in both counts, a hold whose process the nemesis killed (``holder-kill``) ends at the kill: nobody is
  left to tell, though its node stays (marked, broken) until its session expires;
- a break with a gone holder's token is refused and deletes nothing (``wrong_breaks`` = 0), and a break
  of a marked holder whose node was still there a moment before is done or refused because it just left.
"""

from __future__ import annotations

import glob
import json
import os
import random
import threading
import time

from .check import ROW_KEYS, _load_jsonl, check_trial
from .fenced import read_log

IMPLS = ("revoke",)
STUBBORN = 0.2  # share of hung holds: they ignore the request and write without a check()
COOPERATIVE = (0.2, 0.6)  # s a cooperative holder holds unless asked to let go
STUBBORN_HOLD = 1.5  # s a hung holder hears nothing
EVERY = (0.5, 1.5)  # s between the operator's rounds
BREAK_AFTER = 0.5  # s the operator waits between asking and breaking
STALE_EVERY = 4  # every n-th round also tries a gone holder's token (must be refused)
REVOKE_SLACK = 0.25  # s: a hold that releases within this of the mark may not have been told


# -- the worker side ------------------------------------------------------------------------------------
def run_worker(w) -> None:
    """A ``revoke`` worker: one listening FairLock; cooperative and stubborn holds."""
    from zkrecipes import FairLock, LockLost

    from .fenced import FencedRegister, StaleToken
    from .worker_base import _seq, _sid

    impl = "revoke"
    client = w.connect()
    path = f"{w.cfg['root']}/{impl}"
    lock = FairLock(client, path, identifier=w.ident)
    current: dict = {}
    lock.add_listener(w._state_recorder(impl, current))
    asked = lock.revoke_requested  # read once: every hold follows its node from now on
    w.cancels.append(lock.cancel)
    reg = FencedRegister(w.cfg["registers"][impl])
    rnd = random.Random(f"{w.cfg['seed']}-{impl}")
    n = 0
    while not w.stopping():
        req = f"{w.slot}.{os.getpid()}.{impl}.{n}"
        n += 1
        w.rec("acquire", impl=impl, req=req, mode="x")
        # named before the acquire: a mark put on our node before acquire() returns (the operator's listing
        # found it at the head) is told as the hold begins, maybe before acquire() returns
        current["hold"] = req
        try:
            ok = lock.acquire(timeout=max(0.01, w.remaining()))
        except Exception as exc:
            current.pop("hold", None)
            w.rec("acquire_error", impl=impl, req=req, error=f"{type(exc).__name__}: {exc}")
            w.stop.wait(0.1)
            continue
        if not ok:
            current.pop("hold", None)
            w.rec("acquire_fail", impl=impl, req=req)
            continue
        token, node = lock.token, lock.node
        stubborn = rnd.random() < STUBBORN
        w.rec("grant", impl=impl, req=req, hold=req, mode="x", token=token, node=node, seq=_seq(node),
              session=_sid(client), stubborn=stubborn)
        try:
            if token is None:
                w.rec("no_token", impl=impl, hold=req)
                continue
            lock.check()
            v = reg.read(token, hold=req)
            if stubborn:
                time.sleep(STUBBORN_HOLD)  # hung: hears nothing, then writes without looking
            else:
                if asked.wait(rnd.uniform(*COOPERATIVE)):
                    w.rec("let_go", impl=impl, hold=req)
                lock.check()
            reg.write(token, v + 1, hold=req)
            w.rec("done", impl=impl, hold=req)
        except LockLost as exc:
            w.rec("check_fail", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
        except StaleToken as exc:
            w.rec("rejected", impl=impl, hold=req, token=token, error=str(exc))
        finally:
            w.rec("release_start", impl=impl, hold=req)
            try:
                lock.release()
            except Exception as exc:
                w.rec("release_error", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
            w.rec("release", impl=impl, hold=req, lost=lock.lost.is_set())
            current.pop("hold", None)
    reg.close()
    w.close_client(client, [path])


# -- the operator (a thread of the nemesis process) ---------------------------------------------------
def prepare(trial) -> None:
    """Start the operator thread; it stops when the trial's stop file appears."""
    trial.operator = threading.Thread(target=_operator, args=(trial,), name="operator", daemon=True)
    trial.operator.start()


def finish(trial) -> None:
    trial.operator.join(30)


def _operator(trial) -> None:
    from kazoo.client import KazooClient

    from zkrecipes import LockError, break_lock, request_revoke

    from .worker_base import FAST_RECONNECT

    path = trial.paths["revoke"]
    rnd = random.Random(f"{trial.st.seed}-operator")
    journal = trial.journal
    client = KazooClient(hosts=trial.ens.hosts, timeout=10.0, connection_retry=dict(FAST_RECONNECT))
    client.start(timeout=30)
    gone: list = []  # tokens of holders broken or released: a break with one must be refused
    n = 0
    try:
        while not os.path.exists(trial.stop_file):
            time.sleep(rnd.uniform(*EVERY))
            if os.path.exists(trial.stop_file):
                break
            n += 1
            try:
                t0 = time.monotonic()
                marked = request_revoke(client, path)
                t1 = time.monotonic()
                tokens = {}
                for name in marked:
                    stat = client.exists(f"{path}/{name}")
                    if stat is not None:
                        tokens[name] = stat.czxid
                journal("revoke", start=t0, end=t1, nodes=marked, tokens=tokens)
                time.sleep(BREAK_AFTER)
                for name, token in tokens.items():
                    there = client.exists(f"{path}/{name}") is not None
                    b0 = time.monotonic()
                    try:
                        broken = break_lock(client, path, token)
                        journal("break", start=b0, end=time.monotonic(), node=broken, token=token, was_there=there)
                    except LockError as exc:
                        journal("break_refused", start=b0, end=time.monotonic(), node=name, token=token,
                                was_there=there, error=str(exc))
                    gone.append(token)
                if n % STALE_EVERY == 0 and gone:
                    token = gone[-1]
                    before = sorted(client.get_children(path))
                    b0 = time.monotonic()
                    try:
                        broken = break_lock(client, path, token)
                        journal("wrong_break", start=b0, end=time.monotonic(), token=token, node=broken,
                                queue=before)
                    except LockError as exc:
                        journal("stale_break_refused", start=b0, end=time.monotonic(), token=token, error=str(exc))
            except Exception as exc:  # a server fault of the long run: recorded, the operator goes on
                journal("operator_error", error=f"{type(exc).__name__}: {exc}")
    finally:
        client.stop()
        client.close()


# -- the checker side ------------------------------------------------------------------------------------
def stale_accepted(log: list, grants: dict) -> list:
    """Accepted register operations of a hold made after an accepted operation of a hold granted later
    (``grants``: hold -> grant time): what fencing must refuse. Returns the offending records."""
    out = []
    latest = None  # the latest-granted hold seen so far in the register's order
    for rec in log:
        hold = rec.get("hold")
        if not rec["ok"] or hold not in grants:
            continue
        if latest is not None and grants[hold] < grants[latest]:
            out.append(rec)
        elif latest is None or grants[hold] > grants[latest]:
            latest = hold
    return out


def judge(res: dict, events: list, nemesis: list, log: list, T: float) -> None:
    """Add the revoke trial's own counts to ``res["impls"]["revoke"]`` (see the module's docstring)."""
    r = res["impls"]["revoke"]
    t, rows = r["totals"], r["rows"]
    mine = [e for e in events if e.get("impl") == "revoke"]
    # every hold first: a listener may be told (a mark seen as the hold begins) before the grant is recorded
    holds: dict = {e["hold"]: {"id": e["hold"], "pid": e["pid"], "token": e.get("token"), "node": e.get("node") or "",
                               "grant": e["t"], "end": None, "release": None, "notices": [], "revoke_told": [],
                               "stubborn": e.get("stubborn")} for e in mine if e["ev"] == "grant"}
    for e in mine:
        if e["ev"] == "release_start" and e["hold"] in holds:
            holds[e["hold"]]["end"] = e["t"]
        elif e["ev"] == "release" and e["hold"] in holds:
            holds[e["hold"]]["release"] = e["t"]
        elif e["ev"] == "state" and e.get("hold") in holds:
            if e.get("state") == "lost":
                holds[e["hold"]]["notices"].append(e["t"])
            elif e.get("state") == "revoke-requested":
                holds[e["hold"]]["revoke_told"].append(e["t"])
        elif e["ev"] == "check_fail" and e["hold"] in holds:
            holds[e["hold"]]["notices"].append(e["t"])
    # a hold whose process the nemesis killed (holder-kill) ends at the kill, as check_trial ends it: from
    # then on nobody listens (its node stays until its session expires, and the operator may mark or break it)
    kills = {f["target_pid"]: f["start"] for f in res["faults"] if f["kind"] == "holder-kill" and f.get("target_pid")}
    for h in holds.values():
        if h["end"] is None and h["pid"] in kills:
            h["end"] = h["release"] = kills[h["pid"]]
    def can_hear(pid: int, t: float) -> float:
        """When a holder in ``pid`` could hear of something done at ``t``: then, or when a pause or
        partition of the nemesis that had it at ``t`` ended."""
        return max([t] + [f["end"] for f in res["faults"] if f.get("target_pid") == pid
                          and f["kind"] in ("pause", "partition", "silent-partition") and f["start"] <= t <= f["end"]])

    by_token = {h["token"]: h for h in holds.values() if h["token"] is not None}
    row = rows.setdefault("break", {key: 0 for key in ROW_KEYS} | {"max_notice_delay": None})
    findings = t["findings"]
    for e in nemesis:
        if e["ev"] != "break":
            continue
        row["faults"] += 1
        h = by_token.get(e["token"])
        if h is None or (h["end"] is not None and h["end"] <= e["end"]):
            continue  # released before the break was done (or killed): nothing to tell
        row["hits"] += 1
        row["notices_needed"] += 1
        last = h["release"] or h["end"]  # (as check_trial: a notice while release() runs counts)
        told = [x for x in h["notices"] if x >= e["start"] and (last is None or x <= last)]
        if not told:
            findings.append({"what": "missed break notice", "t": e["end"], "hold": h["id"]})
            continue
        row["notices_got"] += 1
        delay = round(max(0.0, told[0] - can_hear(h["pid"], e["end"])), 3)
        row["max_notice_delay"] = max(row["max_notice_delay"] or 0.0, delay)
        if delay > T + 1.0:
            row["notices_late"] += 1
            findings.append({"what": "late break notice", "t": e["end"], "hold": h["id"], "delay": delay})
    for key in ("notices_needed", "notices_got", "notices_late"):
        t[key] += row[key]
    if row["max_notice_delay"] is not None:
        t["max_notice_delay"] = max(t.get("max_notice_delay") or 0.0, row["max_notice_delay"])
    needed = told = missed = 0
    for e in nemesis:
        if e["ev"] != "revoke":
            continue
        for name in e["nodes"]:
            # the hold of that node (names are never reused), even one whose grant was recorded after the
            # mark: the operator marks the head of the queue, which may not have heard of its grant yet
            h = next((h for h in holds.values() if h["node"].endswith("/" + name)), None)
            if h is None or (h["end"] is not None and h["end"] <= e["end"]):
                continue  # released before the mark was stored
            ref = can_hear(h["pid"], e["end"])
            if any(x <= ref + REVOKE_SLACK for x in h["notices"]):
                continue  # lost (its session, a break) before it could hear: its node and mark are gone
            needed += 1
            if any(e["start"] - 0.05 <= x <= (h["end"] or x) for x in h["revoke_told"]):
                told += 1
            elif h["end"] is None or h["end"] > ref + REVOKE_SLACK:
                missed += 1  # (one released within REVOKE_SLACK of the mark may not have heard)
                findings.append({"what": "missed revoke request", "t": e["end"], "hold": h["id"]})
    grants = {h["id"]: h["grant"] for h in holds.values()}
    stale = stale_accepted(log, grants)
    findings += [{"what": "stale operation accepted", "t": rec["t"], "hold": rec["hold"], "seq": rec["seq"]}
                 for rec in stale]
    findings.sort(key=lambda f: f["t"])
    count = {ev: sum(1 for e in nemesis if e["ev"] == ev)
             for ev in ("revoke", "break", "break_refused", "stale_break_refused", "wrong_break", "operator_error")}
    t.update(stale_accepted=len(stale), revoke_notices_needed=needed, revoke_notices_got=told,
             revoke_notices_missed=missed,
             wrong_breaks=count["wrong_break"], operator=count,
             stubborn_holds=sum(1 for h in holds.values() if h["stubborn"]),
             let_go=sum(1 for e in events if e.get("impl") == "revoke" and e["ev"] == "let_go"))
    t["note"] = (f"{count['revoke']} revoke requests (told {told} of the {needed} holds in progress, {missed} missed), "
                 f"{t['let_go']} let go early; {count['break']} breaks ({row['hits']} of a hold in progress, "
                 f"{row['notices_got']}/{row['notices_needed']} told), {count['break_refused']} refused (holder "
                 f"gone), {count['stale_break_refused']}/{count['stale_break_refused'] + count['wrong_break']} "
                 f"breaks with a gone holder's token refused; {len(stale)} stale operations accepted, "
                 f"{t['ops_rejected']} refused")
    if not count["break"]:
        t.setdefault("failed_checks", []).append("the operator broke no hold")
    if count["operator_error"] and not count["revoke"]:
        t.setdefault("failed_checks", []).append("the operator failed every round")


def check(path: str) -> dict:
    """Verdict of one ``revoke`` trial directory, in :func:`lab.check.check_trial`'s shape, plus the
    counts of :func:`judge`."""
    res = check_trial(path)
    with open(os.path.join(path, "meta.json")) as f:
        T = float(json.load(f)["session_timeout"])
    events = []
    for p in sorted(glob.glob(os.path.join(path, "w-*.jsonl"))):
        events.extend(_load_jsonl(p))
    events.sort(key=lambda e: e["t"])
    nemesis = _load_jsonl(os.path.join(path, "nemesis.jsonl"))
    log, _ = read_log(os.path.join(path, "register-revoke.jsonl"))
    judge(res, events, nemesis, log, T)
    return res
