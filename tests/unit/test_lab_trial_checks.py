"""The checkers of the lab's semaphore and txn trials (lab.semaphore_trial, lab.txn_trial) on hand-made
histories: they must flag N+1 holders acting at once, a lost increment in a ZooKeeper counter and the
overlap behind it, and nothing in a clean history."""

from __future__ import annotations

import json
import os

from lab import semaphore_trial, txn_trial


class Trial:
    """A trial directory written by hand, with explicit times: meta.json, worker files, register, nemesis."""

    def __init__(self, path, impls, faults=()) -> None:
        self.path = str(path)
        self.impls = impls
        self.seq = 0
        with open(os.path.join(self.path, "meta.json"), "w") as f:
            json.dump({"trial": "t", "impls": list(impls), "session_timeout": 3.0, "fault_kinds": ["pause"],
                       "paths": {i: f"/root/{i}" for i in impls}}, f)
        with open(os.path.join(self.path, "nemesis.jsonl"), "w") as f:
            for n, (kind, start, end, pid, *stopped) in enumerate(faults):  # stopped: a pause's SIGSTOP sent
                f.write(json.dumps({"t": start, "ev": "fault_start", "id": f"f{n}", "kind": kind,
                                    "target_pid": pid}) + "\n")
                f.write(json.dumps({"t": end, "ev": "fault_end", "id": f"f{n}",
                                    **({"stopped": stopped[0]} if stopped else {})}) + "\n")

    def ev(self, t: float, pid: int, ev: str, impl: str, **kw) -> None:
        rec = {"t": t, "wall": 0.0, "ev": ev, "slot": pid, "gen": 0, "pid": pid, "impl": impl, **kw}
        with open(os.path.join(self.path, f"w-{pid}-0.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")

    def hold(self, impl: str, pid: int, hold: str, t0: float, t1: float, seq=None, requested=None) -> None:
        self.ev(requested if requested is not None else t0 - 0.01, pid, "acquire", impl, req=hold, mode="x")
        self.ev(t0, pid, "grant", impl, req=hold, hold=hold, mode="x", token=None, seq=seq)
        self.ev(t1, pid, "release_start", impl, hold=hold)
        self.ev(t1, pid, "release", impl, hold=hold)

    def op(self, impl: str, t: float, hold: str, pid: int, shared: bool = False, checked=None, ok=True) -> None:
        self.seq += 1
        rec = {"seq": self.seq, "op": "read", "ok": ok, "token": None, "shared": shared, "hold": hold, "pid": pid,
               "t": t, "value": 0, "writes": 0, "seen": 0, "arg": None}
        if checked is not None:
            rec["checked"] = checked
        with open(os.path.join(self.path, f"register-{impl}.jsonl"), "a") as f:
            f.write("\n" + json.dumps(rec))


def _sem(tmp_path, monkeypatch, third_enters_at: float) -> dict:
    """Three holders of a 2-lease semaphore: a and b inside from 1.0 to 2.0; c enters at ``third_enters_at``."""
    tmp_path.mkdir()
    tr = Trial(tmp_path, ["sem"])
    monkeypatch.setitem(semaphore_trial.CAPACITY, "sem", 2)
    events = [(1.0, "a", 1, False), (1.1, "b", 2, False), (third_enters_at, "c", 3, False),
              (2.0, "a", 1, True), (2.1, "b", 2, True), (max(2.2, third_enters_at + 0.1), "c", 3, True)]
    tr.hold("sem", 1, "a", 0.9, 2.05)
    tr.hold("sem", 2, "b", 0.95, 2.15)
    tr.hold("sem", 3, "c", third_enters_at - 0.05, max(2.3, third_enters_at + 0.2))
    for t, hold, pid, leave in sorted(events):
        tr.op("sem", t, hold, pid, shared=leave)
    return semaphore_trial.check(tr.path)["impls"]["sem"]["totals"]


def test_semaphore_checker_flags_more_than_n_holders_inside(tmp_path, monkeypatch):
    bad = _sem(tmp_path / "bad", monkeypatch, 1.5)
    assert bad["accepted_overlaps"] == 1 and bad["unsafe"] >= 1, bad["findings"]
    assert any(f["what"] == "accepted overlap" and f["hold"] == "c" for f in bad["findings"])


def test_semaphore_checker_passes_n_holders(tmp_path, monkeypatch):
    ok = _sem(tmp_path / "ok", monkeypatch, 2.1)  # c is granted once a has left: two inside at most
    assert ok["accepted_overlaps"] == 0 and ok["unsafe"] == 0, ok["findings"]


def test_semaphore_grants_out_of_order_need_a_real_delay(tmp_path):
    """A waiter ahead that noticed its lease a moment after a later node is not out of order; one granted
    seconds later, with no fault to explain it, is."""
    for late, expected in ((0.05, 0), (1.5, 1)):
        d = tmp_path / f"late{late}"
        d.mkdir()
        tr = Trial(d, ["sem"])
        tr.hold("sem", 1, "early", 1.0 + late, 1.0 + late + 0.1, seq=5, requested=0.1)
        tr.hold("sem", 2, "later", 1.0, 1.1, seq=6, requested=0.2)
        tr.op("sem", 1.01, "later", 2)
        tr.op("sem", 1.0 + late + 0.01, "early", 1)
        assert semaphore_trial.check(str(d))["impls"]["sem"]["totals"]["out_of_order"] == expected


def _txn(tmp_path, stale_write_ok: bool) -> dict:
    """Holder a reads the counter (version 0), stands still; b reads version 0 and writes version 1; then a
    writes: a plain set is applied (version 2, value 1), a fenced commit is refused."""
    tr = Trial(tmp_path, ["txn"], faults=[("pause", 1.1, 4.0, 1)])
    tr.hold("txn", 1, "a", 1.0, 4.2, seq=1)
    tr.ev(1.05, 1, "zread", "txn", hold="a", version=0, value=0)
    tr.hold("txn", 2, "b", 3.5, 3.9, seq=2)
    tr.ev(3.6, 2, "zread", "txn", hold="b", version=0, value=0)
    tr.ev(3.8, 2, "zwrite", "txn", hold="b", ok=True, version=1, value=1)
    if stale_write_ok:
        tr.ev(4.1, 1, "zwrite", "txn", hold="a", ok=True, version=2, value=1)
        final = {"value": 1, "version": 2}
    else:
        tr.ev(4.1, 1, "zwrite", "txn", hold="a", ok=False, error="LockLost")
        final = {"value": 1, "version": 1}
    with open(os.path.join(tr.path, "nemesis.jsonl"), "a") as f:
        f.write(json.dumps({"t": 9.0, "ev": "counter", "impl": "txn", **final}) + "\n")
    return txn_trial.check(tr.path)["impls"]["txn"]


def test_txn_checker_counts_a_stale_plain_set_as_a_lost_increment(tmp_path):
    r = _txn(tmp_path, stale_write_ok=True)
    t = r["totals"]
    assert (t["lost_increments"], t["accepted_overlaps"], t["final_value"], t["accepted_writes"]) == (1, 1, 1, 2)
    assert r["rows"]["pause"]["lost_increments"] == 1  # attributed to the fault that caused it
    assert t["counter"] == {"value": 1, "version": 2}


def test_txn_checker_a_refused_fenced_commit_costs_nothing(tmp_path):
    t = _txn(tmp_path, stale_write_ok=False)["totals"]
    assert (t["lost_increments"], t["accepted_overlaps"], t["ops_rejected"]) == (0, 0, 1)


def test_the_unfenced_control_and_kazoos_semaphore_are_baselines():
    from lab.catalog import Settings
    from lab.results import assemble

    def totals(**bad):
        t = {"accepted_overlaps": 0, "unsafe": 0, "unsafe_accepted": 0, "lost_increments": 0, "out_of_order": 0,
             "notices_late": 0, "orphans": 0, "hung": 0, "notices_needed": 1, "notices_got": 1,
             "readers_overlapped": None, "findings": []}
        return {"totals": {**t, **bad}, "rows": {}}

    ok = assemble(Settings(), {"txn": {"impls": {"txn": totals(), "txn-control": totals(lost_increments=4)}},
                               "semaphore": {"impls": {"sem": totals(),
                                                       "kazoo-sem": totals(accepted_overlaps=2, notices_got=0)}}},
                  {}, {}, 1.0)
    assert ok["passed"] and ok["totals"]["txn-control"]["baseline"] and ok["totals"]["kazoo-sem"]["baseline"]
    assert ok["totals"]["txn-control"]["lost_increments"] == 4  # reported as found
    for impl in ("txn", "sem", "aio-sem"):
        bad = assemble(Settings(), {"t": {"impls": {impl: totals(lost_increments=1)}}}, {}, {}, 1.0)
        assert not bad["passed"] and not bad["totals"][impl]["baseline"], impl


def test_an_expiry_needs_a_notice_only_from_a_hold_it_struck(tmp_path):
    """The nemesis journals a session expiry's start before it connects with the holder's session and its
    end once the session is closed: a hold released in between was not struck and cannot be told."""
    from lab.check import check_trial

    for release_at, needed in ((1.05, 0), (1.3, 1)):
        d = tmp_path / f"r{release_at}"
        d.mkdir()
        tr = Trial(d, ["fair"], faults=[("session-expiry", 1.0, 1.2, 1)])
        tr.hold("fair", 1, "a", 0.9, release_at, seq=1)
        r = check_trial(str(d))["impls"]["fair"]
        t = r["totals"]
        assert (t["notices_needed"], t["notices_got"]) == (needed, 0), release_at
        assert r["rows"]["session-expiry"]["hits"] == needed, release_at  # a hit is a hold the fault struck


def test_a_pause_strikes_a_hold_only_once_its_target_is_frozen(tmp_path):
    """A SIGSTOP can take effect milliseconds after the nemesis sent it (seen at a load of 10 on 2 CPUs): a
    target that still recorded its release_start after ``stopped`` let go before it was frozen -- no notice
    is owed and the pause did not strike that hold. A hold still in progress when the target went quiet is
    struck as before, and owes its notice."""
    from lab.check import check_trial

    # pause sent at 1.0 (fault_start), SIGSTOP returned at 1.07 (stopped), SIGCONT at 6.0 (fault_end)
    for release_start, needed in ((1.09, 0), (1.05, 1), (6.5, 1)):
        d = tmp_path / f"r{release_start}"
        d.mkdir()
        tr = Trial(d, ["fair"], faults=[("pause", 1.0, 6.0, 1, 1.07)])
        tr.ev(0.89, 1, "acquire", "fair", req="a", mode="x")
        tr.ev(0.9, 1, "grant", "fair", req="a", hold="a", mode="x", token=None, seq=1)
        tr.ev(release_start, 1, "release_start", "fair", hold="a")
        tr.ev(6.01, 1, "release", "fair", hold="a")
        r = check_trial(str(d))["impls"]["fair"]
        t = r["totals"]
        assert (t["notices_needed"], t["notices_got"]) == (needed, 0), release_start
        assert r["rows"]["pause"]["hits"] == needed, release_start


def _expired_leaseholder(tmp_path, monkeypatch, heard_at: float) -> dict:
    """A 2-lease semaphore: a (pid 1) and b inside; the nemesis expires a's session at once (1.40-1.45) and
    c is granted the freed lease (1.46); a's check passes at 1.47 and it leaves at 1.48; a's client hears
    of the expiry (kazoo's SUSPENDED) at ``heard_at``."""
    tmp_path.mkdir()
    tr = Trial(tmp_path, ["sem"], faults=[("session-expiry", 1.40, 1.45, 1)])
    monkeypatch.setitem(semaphore_trial.CAPACITY, "sem", 2)
    tr.hold("sem", 1, "a", 0.9, 1.5)
    tr.hold("sem", 2, "b", 0.95, 2.15)
    tr.hold("sem", 3, "c", 1.46, 2.3)
    tr.ev(heard_at, 1, "zk_state", None, state="SUSPENDED")
    tr.op("sem", 1.0, "a", 1, checked=0.99)
    tr.op("sem", 1.1, "b", 2)
    tr.op("sem", 1.465, "c", 3)
    tr.op("sem", 1.48, "a", 1, shared=True, checked=1.47)
    tr.op("sem", 2.1, "b", 2, shared=True)
    tr.op("sem", 2.2, "c", 3, shared=True)
    return semaphore_trial.check(tr.path)["impls"]["sem"]["totals"]


def test_a_lease_holder_acting_before_its_client_could_hear_of_an_instant_expiry_is_a_race(tmp_path, monkeypatch):
    """The lab's session-expiry ends a session server-side with no silence first: ZooKeeper frees the lease
    and grants it no later than it tells the holder's client. A holder whose check passed before its client
    heard anything acts on a lease that is gone, and for N leases no token can stop it: counted as a race,
    not an overlap. Once its client has heard, a check that passes is a holder not told in time: it counts."""
    raced = _expired_leaseholder(tmp_path / "raced", monkeypatch, heard_at=1.49)
    assert (raced["accepted_overlaps"], raced["unsafe"], raced["expiry_races"]) == (0, 0, 1), raced["findings"]
    told_late = _expired_leaseholder(tmp_path / "late", monkeypatch, heard_at=1.465)
    assert told_late["accepted_overlaps"] == 1 and told_late["unsafe"] >= 1, told_late["findings"]
    assert told_late["expiry_races"] == 0
    unheard = _expired_leaseholder(tmp_path / "unheard", monkeypatch, heard_at=0.5)  # no sign after the fault
    assert unheard["accepted_overlaps"] == 1 and unheard["expiry_races"] == 0


def test_a_lock_holder_racing_an_instant_expiry_is_no_unsafe_overlap_but_fencing_must_still_refuse(tmp_path):
    """The same race for a fenced lock: the stale operation is rejected by the register (no accepted
    overlap, no false rejection) and counted as a race instead of an unsafe overlap; accepted, it is still
    an accepted overlap."""
    from lab.check import check_trial

    for heard_at, ok, expect in ((1.49, False, (0, 0, 1)), (1.465, False, (0, 1, 0)), (1.49, True, (1, 0, 1))):
        d = tmp_path / f"h{heard_at}-{ok}"
        d.mkdir()
        tr = Trial(d, ["fair"], faults=[("session-expiry", 1.40, 1.45, 1)])
        tr.hold("fair", 1, "a", 0.9, 1.5, seq=1)
        tr.hold("fair", 2, "c", 1.46, 2.3, seq=2)
        tr.ev(heard_at, 1, "zk_state", None, state="SUSPENDED")
        tr.op("fair", 1.0, "a", 1, checked=0.99)
        tr.op("fair", 1.465, "c", 2)
        tr.op("fair", 1.48, "a", 1, checked=1.47, ok=ok)
        tr.op("fair", 2.2, "c", 2)
        t = check_trial(str(d))["impls"]["fair"]["totals"]
        assert (t["accepted_overlaps"], t["unsafe"], t["expiry_races"]) == expect, (heard_at, ok, t["findings"])
        assert t["false_rejections"] == 0


def test_a_holder_frozen_between_its_check_and_its_operation_is_a_pause_race_not_an_unsafe_overlap(tmp_path):
    """The nemesis stops a's process (SIGSTOP sent at 1.401) just after a's check passed and before its
    operation; c is granted once a's session has gone; a's operation arrives when it runs again. No lock can
    stop that, only fencing: counted as a pause race when the register refused it, an accepted overlap when
    it took it. A check that passed once the process ran again is a holder not told: an unsafe overlap."""
    from lab.check import check_trial

    for checked, ok, expect in ((1.4005, False, (0, 0, 1)), (1.4005, True, (1, 0, 1)), (6.45, False, (0, 1, 0))):
        d = tmp_path / f"c{checked}-{ok}"
        d.mkdir()
        tr = Trial(d, ["fair"], faults=[("pause", 1.40, 6.40, 1, 1.401)])
        tr.hold("fair", 1, "a", 0.9, 6.6, seq=1)
        tr.hold("fair", 2, "c", 4.5, 5.5, seq=2)
        tr.op("fair", 1.0, "a", 1, checked=0.99)
        tr.op("fair", 4.6, "c", 2)
        tr.op("fair", 5.4, "c", 2)
        tr.op("fair", 6.5, "a", 1, checked=checked, ok=ok)
        t = check_trial(str(d))["impls"]["fair"]["totals"]
        assert (t["accepted_overlaps"], t["unsafe"], t["pause_races"]) == expect, (checked, ok, t["findings"])
        assert t["false_rejections"] == 0 and t["expiry_races"] == 0
