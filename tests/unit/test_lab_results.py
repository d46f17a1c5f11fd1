"""The lab's verdict (lab.run.assemble): baselines are marked and reported, only zkrecipes entries fail a run."""

from __future__ import annotations

from lab.run import Settings, assemble


def _totals(**bad):
    t = {"accepted_overlaps": 0, "lost_increments": 0, "orphans": 0, "hung": 0, "notices_needed": 2,
         "notices_got": 2, "readers_overlapped": True, "findings": []}
    t.update(bad)
    return {"totals": t, "rows": {}}


def _assemble(impls):
    checked = {"t": {"impls": impls}}
    return assemble(Settings(), checked, {}, {}, 1.0)


def test_baselines_are_marked_and_never_fail_the_run():
    res = _assemble({"fair": _totals(), "kazoo": _totals(accepted_overlaps=3, notices_got=0),
                     "redis": _totals(lost_increments=5)})
    assert [res["totals"][i]["baseline"] for i in ("fair", "kazoo", "redis")] == [False, True, True]
    assert res["totals"]["kazoo"]["accepted_overlaps"] == 3  # reported as found
    assert res["passed"] and res["failures"] == []


def test_a_zkrecipes_entry_fails_on_any_hard_check_or_a_missed_notice():
    for bad, word in ((dict(accepted_overlaps=1), "accepted_overlaps"), (dict(lost_increments=1), "lost_increments"),
                      (dict(orphans=1), "orphans"), (dict(hung=1), "hung"), (dict(notices_got=1), "missed notices")):
        res = _assemble({"election": _totals(**bad), "kazoo": _totals()})
        assert not res["passed"] and any(word in f for f in res["failures"]), (bad, res["failures"])
