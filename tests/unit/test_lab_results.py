"""The lab's verdict (lab.results.assemble): baselines are marked and reported, only zkrecipes entries fail a run,
and a zkrecipes entry fails on every count docs/safety.rst claims is 0 for it."""

from __future__ import annotations

import json

import pytest

from lab.catalog import HARD_CHECKS, Settings
from lab.results import assemble
from lab.trial import Trial


def _totals(**bad):
    t = {"accepted_overlaps": 0, "unsafe": 0, "unsafe_accepted": 0, "lost_increments": 0, "out_of_order": 0,
         "notices_late": 0, "orphans": 0, "hung": 0, "notices_needed": 2, "notices_got": 2,
         "readers_overlapped": True, "findings": []}
    t.update(bad)
    return {"totals": t, "rows": {}}


def _assemble(impls):
    checked = {"t": {"impls": impls}}
    return assemble(Settings(), checked, {}, {}, 1.0)


def test_baselines_are_marked_and_never_fail_the_run():
    res = _assemble({"fair": _totals(), "kazoo": _totals(accepted_overlaps=3, notices_got=0, unsafe=2),
                     "redis": _totals(lost_increments=5, out_of_order=7, notices_late=1)})
    assert [res["totals"][i]["baseline"] for i in ("fair", "kazoo", "redis")] == [False, True, True]
    assert res["totals"]["kazoo"]["accepted_overlaps"] == 3  # reported as found
    assert res["passed"] and res["failures"] == []


def test_the_claims_are_every_count_the_docs_promise_is_zero():
    assert set(HARD_CHECKS) == {"accepted_overlaps", "unsafe", "lost_increments", "out_of_order", "notices_late",
                                "orphans", "hung"}


@pytest.mark.parametrize("bad,word", [
    (dict(accepted_overlaps=1), "accepted_overlaps"), (dict(unsafe=1), "unsafe"),
    (dict(lost_increments=1), "lost_increments"), (dict(out_of_order=1), "out_of_order"),
    (dict(notices_late=1), "notices_late"), (dict(orphans=1), "orphans"), (dict(hung=1), "hung"),
    (dict(notices_got=1), "missed notices"),
])
@pytest.mark.parametrize("impl", ["fair", "rw", "election", "cli", "sem", "aio-fair", "aio-sem", "aio-rw", "mk-zk",
                                  "mc-zk"])
def test_a_zkrecipes_entry_fails_on_each_violation(impl, bad, word):
    res = _assemble({impl: _totals(**bad), "kazoo": _totals()})
    assert not res["passed"] and any(word in f for f in res["failures"]), (bad, res["failures"])


def test_a_claim_that_was_not_measured_fails():
    t = _totals()
    del t["totals"]["out_of_order"]
    res = _assemble({"fair": t})
    assert not res["passed"] and res["failures"] == ["zkrecipes FairLock: out_of_order was not measured"]


def test_the_fenced_txn_half_may_be_refused_stale_commits_but_none_applied():
    """Its workers write after their read without a check() by design: a stale commit is an unsafe overlap
    that ZooKeeper must refuse; one it applied fails the run."""
    refused = _assemble({"txn": _totals(unsafe=3, unsafe_accepted=0)})
    assert refused["passed"], refused["failures"]
    applied = _assemble({"txn": _totals(unsafe=3, unsafe_accepted=1)})
    assert not applied["passed"] and applied["failures"] == ["zkrecipes FairLock + transaction(): unsafe_accepted = 1"]
    for bad in (dict(lost_increments=1), dict(out_of_order=1), dict(notices_late=1)):
        assert not _assemble({"txn": _totals(**bad)})["passed"], bad


def _rows(**hits):
    return {kind: {"faults": 1, "hits": n} for kind, n in hits.items()}


def test_a_holder_fault_kind_that_struck_no_holder_fails_the_run():
    fair, rw = _totals(), _totals()
    fair["rows"] = _rows(pause=1, **{"session-expiry": 0, "leader-kill": 0})
    rw["rows"] = _rows(pause=0, **{"session-expiry": 0, "leader-kill": 0})
    res = _assemble({"fair": fair, "rw": rw})
    assert res["failures"] == ["trial t: session-expiry struck no holder (1 injected)"]  # not leader-kill: no holder
    rw["rows"]["session-expiry"]["hits"] = 1  # a hit of any of the trial's entries counts
    assert _assemble({"fair": fair, "rw": rw})["passed"]


def test_a_skipped_holder_fault_fails_and_a_baseline_trial_is_only_measured():
    fair, kazoo = _totals(), _totals()
    fair["rows"] = {"pause": {"faults": 0, "hits": 0}}  # scheduled, but no holder was found to aim it at
    assert _assemble({"fair": fair})["failures"] == ["trial t: pause struck no holder (0 injected)"]
    kazoo["rows"] = _rows(pause=0)
    assert _assemble({"kazoo": kazoo})["passed"]


def test_the_nemesis_tells_whether_a_holder_fault_struck_its_hold(tmp_path):
    """Trial.struck: a pause strikes when it begins, an expiry when it is done; a hold whose release began
    before then was not struck (the run then injects that kind again)."""
    trial = Trial("zk", Settings(), str(tmp_path), print, None, None)
    history = tmp_path / "w-0-0.jsonl"
    history.write_text(json.dumps({"t": 10.0, "ev": "release_start", "hold": "h1"}) + "\n")
    for n, (kind, start, end, expected) in enumerate([
        ("pause", 9.9, 15.0, True), ("pause", 10.1, 15.0, False),
        ("session-expiry", 9.8, 9.95, True), ("session-expiry", 9.8, 10.05, False),
        ("holder-kill", 9.0, 9.1, True),
    ]):
        fid = f"f{n}"
        trial.targets[fid] = (str(history), "h1")
        with open(trial.journal.path, "a") as f:
            f.write(json.dumps({"t": start, "ev": "fault_start", "id": fid, "kind": kind}) + "\n")
            f.write(json.dumps({"t": end, "ev": "fault_end", "id": fid}) + "\n")
        assert trial.struck(fid) is expected, (kind, start, end)
    trial.targets["gone"] = (str(history), "h2")  # a hold that never began its release (its worker was killed)
    with open(trial.journal.path, "a") as f:
        f.write(json.dumps({"t": 20.0, "ev": "fault_start", "id": "gone", "kind": "holder-kill"}) + "\n")
        f.write(json.dumps({"t": 20.1, "ev": "fault_end", "id": "gone"}) + "\n")
    assert trial.struck("gone") and not trial.struck(None) and not trial.struck("unknown")
    trial.journal.close()


def test_repeat_per_trial_multiplies_only_that_trials_faults(tmp_path):
    """``--repeat revoke=2``: the revoke trial injects each of its kinds twice, the others once, as they would
    in invocations of their own (test_safety runs every short trial in one)."""
    import pytest

    from lab.run import parse_repeat

    assert parse_repeat("") == (None, {})
    assert parse_repeat("3,revoke=2") == (3, {"revoke": 2})
    for bad in ("0", "revoke=", "nosuch=2", "x"):
        with pytest.raises(ValueError, match="bad --repeat item"):
            parse_repeat(bad)
    st = Settings(repeats={"revoke": 2})
    plans = {}
    for name in ("revoke", "handover", "zk"):
        (tmp_path / name).mkdir()
        plans[name] = Trial(name, st, str(tmp_path / name), print, None, None).schedule()
    assert sorted(k for k, _ in plans["revoke"]) == ["pause", "pause", "session-expiry", "session-expiry"]
    assert sorted(k for k, _ in plans["handover"]) == ["pause", "session-expiry"]
    assert len(plans["zk"]) == 8  # every fault kind once
    alone = tmp_path / "alone"
    alone.mkdir()
    assert Trial("revoke", Settings(repeat=2), str(alone), print, None, None).schedule() == plans["revoke"]


def test_the_nemesis_sees_a_late_pause_as_the_checker_does(tmp_path):
    """Trial.struck (whether to inject a holder fault again) agrees with the checker: a pause whose target
    still recorded its release_start after the SIGSTOP was sent did not strike that hold."""
    import json

    for release_start, struck in ((1.09, False), (1.05, True)):
        d = tmp_path / f"r{release_start}"
        d.mkdir()
        trial = Trial("zk", Settings(), str(d), print, None, None)
        history = d / "w-1-0.jsonl"
        history.write_text("".join(json.dumps(e) + "\n" for e in (
            {"t": 0.9, "ev": "grant", "pid": 7, "hold": "a"},
            {"t": release_start, "ev": "release_start", "pid": 7, "hold": "a"},
            {"t": 6.01, "ev": "release", "pid": 7, "hold": "a"})))
        with open(trial.journal.path, "w") as f:
            f.write(json.dumps({"t": 1.0, "ev": "fault_start", "id": "zk-1", "kind": "pause", "target_pid": 7}) + "\n")
            f.write(json.dumps({"t": 6.0, "ev": "fault_end", "id": "zk-1", "stopped": 1.07}) + "\n")
        trial.targets["zk-1"] = (str(history), "a")
        assert trial.struck("zk-1") is struck, release_start
        trial.journal.close()
