"""The mixed-fleet trials' checker (lab.mixed_trial.check) on scripted histories: fencing hides two valid
holders at once behind rejections, so the checker must find them from the holds' verifications; and the
refusal entry fails on any hold or an unclear refusal."""

from __future__ import annotations

import json
import os
import time

from lab.catalog import Settings
from lab.fenced import FencedRegister, StaleToken
from lab.mixed_trial import check
from lab.results import assemble

PATH = "/zkrecipes-chaos/x-mixed-kazoo/mixed-kazoo"
GOOD = ("/p: refusing to queue with protocol='zkrecipes': child 'x__lock__0000000001' is a kazoo Lock node; "
        "Fix: share this path with FairLock ... protocol='kazoo' ...")


class History:
    """A trial directory written the way lab.run and lab.mixed_worker write it."""

    def __init__(self, d, refusal: bool = True) -> None:
        self.d = str(d)
        with open(os.path.join(self.d, "meta.json"), "w") as f:
            json.dump({"trial": "mixed-kazoo", "impls": ["mk-zk", "mk-kazoo"], "session_timeout": 3.0,
                       "fault_kinds": [], "paths": {"mk-zk": PATH, "mk-kazoo": PATH},  # no fault scheduled
                       "plan": [], "seed": 1}, f)
        open(os.path.join(self.d, "nemesis.jsonl"), "w").close()
        self.reg = FencedRegister(os.path.join(self.d, "register-mixed-kazoo.jsonl"))
        self.t0 = time.monotonic()
        if refusal:  # the refusal fleet's one attempt, refused as it should be
            self.ev(100, "start", 0.0, impl="mk-refusal")
            self.ev(100, "acquire", 0.1, impl="mk-refusal", req="100.1100.mk-refusal.0", mode="x")
            self.ev(100, "refused", 0.2, impl="mk-refusal", req="100.1100.mk-refusal.0", error=GOOD)

    def ev(self, slot: int, ev: str, t: float, **kw) -> None:
        rec = {"t": self.t0 + t, "wall": 0.0, "ev": ev, "slot": slot, "gen": 0, "pid": 1000 + slot, **kw}
        with open(os.path.join(self.d, f"w-{slot}-0.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")

    def hold(self, slot: int, impl: str, n: int, grant: float, verify_at: float, result: str = "alive",
             token: int = 0) -> str:
        h = f"{slot}.{1000 + slot}.{impl}.{n}"
        self.ev(slot, "acquire", grant - 0.01, impl=impl, req=h, mode="x")
        self.ev(slot, "grant", grant, impl=impl, req=h, hold=h, mode="x", token=token, node=f"{PATH}/n{token}",
                seq=token, session="1")
        self.ev(slot, "verify", verify_at, impl=impl, hold=h, t0=self.t0 + verify_at, result=result)
        self.ev(slot, "release_start", verify_at + 0.01, impl=impl, hold=h)
        self.ev(slot, "release", verify_at + 0.02, impl=impl, hold=h, lost=None)
        return h

    def start(self, *slots_impls) -> None:
        for slot, impl in slots_impls:
            self.ev(slot, "start", 0.0, impl=impl)

    def verdict(self) -> dict:
        self.reg.close()
        return assemble(Settings(), {"mixed-kazoo": check(self.d)}, {}, {}, 1.0)


def test_one_holder_at_a_time_passes(tmp_path):
    h = History(tmp_path)
    h.start((0, "mk-zk"), (4, "mk-kazoo"))
    a = h.hold(0, "mk-zk", 0, 1.0, 1.5, token=10)
    b = h.hold(4, "mk-kazoo", 0, 1.6, 2.0, token=20)
    h.reg.write(10, h.reg.read(10, hold=a) + 1, hold=a)
    h.reg.write(20, h.reg.read(20, hold=b) + 1, hold=b)
    res = h.verdict()
    zk = res["totals"]["mk-zk"]
    assert zk["valid_overlaps"] == 0 and zk["accepted_overlaps"] == 0 and zk["lost_increments"] == 0
    assert zk["verified"] == {"alive": 1, "gone": 0, "error": 0}
    assert res["totals"]["mk-kazoo"]["baseline"] and not zk["baseline"]
    assert res["passed"], res["failures"]


def test_two_verified_holders_at_once_fail_the_zkrecipes_entry(tmp_path):
    h = History(tmp_path)
    h.start((0, "mk-zk"), (4, "mk-kazoo"))
    h.hold(4, "mk-kazoo", 0, 1.0, 3.0, token=10)  # valid from 1.0 until at least 3.0
    h.hold(0, "mk-zk", 0, 2.0, 2.5, token=20)  # granted at 2.0 while the kazoo node was still there
    res = h.verdict()
    assert res["totals"]["mk-zk"]["valid_overlaps"] == 1
    assert res["totals"]["mk-kazoo"]["valid_overlaps"] == 1
    assert not res["passed"] and any("valid overlaps = 1" in f for f in res["failures"]), res["failures"]


def test_a_gone_node_is_a_stale_holder_not_a_valid_overlap(tmp_path):
    h = History(tmp_path)
    h.start((0, "mk-zk"), (4, "mk-kazoo"))
    h.hold(4, "mk-kazoo", 0, 1.0, 3.0, result="gone", token=10)  # paused past its session: fenced, not valid
    h.hold(0, "mk-zk", 0, 2.0, 2.5, token=20)
    res = h.verdict()
    assert res["totals"]["mk-zk"]["valid_overlaps"] == 0 and res["passed"], res["failures"]


def test_a_rejection_while_the_node_was_still_ours_is_a_valid_overlap(tmp_path):
    h = History(tmp_path)
    h.start((0, "mk-zk"), (4, "mk-kazoo"))
    a = h.hold(0, "mk-zk", 0, 1.0, 1.1, token=10)
    b = "4.1004.mk-kazoo.0"
    h.reg.read(10, hold=a)
    h.reg.read(20, hold=b)  # a later node acted while ours was queued ahead ...
    try:
        h.reg.write(10, 1, hold=a)
    except StaleToken:
        pass
    res = h.verdict()  # ... and ours was verified alive afterwards
    assert res["totals"]["mk-zk"]["valid_overlaps"] == 1
    assert res["totals"]["mk-zk"]["accepted_overlaps"] == 0  # what fencing alone would have shown
    assert not res["passed"]


def test_the_refusal_entry_fails_on_a_hold_or_an_unclear_refusal(tmp_path):
    h = History(tmp_path)
    res = h.verdict()
    assert res["totals"]["mk-refusal"]["refused"] == 1 and res["passed"], res["failures"]
    (tmp_path / "bad").mkdir()
    h = History(tmp_path / "bad", refusal=False)  # a refusal that names no format, and an attempt that held
    h.ev(100, "start", 0.0, impl="mk-refusal")
    h.ev(100, "acquire", 1.0, impl="mk-refusal", req="100.1100.mk-refusal.0", mode="x")
    h.ev(100, "refused", 1.1, impl="mk-refusal", req="100.1100.mk-refusal.0", error="LockError: no")
    h.ev(100, "acquire", 1.2, impl="mk-refusal", req="100.1100.mk-refusal.1", mode="x")
    h.ev(100, "grant", 1.3, impl="mk-refusal", req="100.1100.mk-refusal.1", hold="100.1100.mk-refusal.1",
         mode="x", token=5, node=f"{PATH}/h-W-0000000005", seq=5, session="1")
    res = h.verdict()
    bad = [f for f in res["failures"] if "default format" in f]
    assert any("held 1 times" in f for f in bad) and any("did not name" in f for f in bad), res["failures"]
    assert any("refused 1 of 2" in f for f in bad), res["failures"]
