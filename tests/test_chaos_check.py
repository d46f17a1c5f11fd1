"""The safety lab's fenced register and checker on hand-made histories (no ZooKeeper needed).

The checker must flag what it claims to flag -- an interleaving of two holders at the register, a lost
increment, a stale holder acting, an out-of-order grant, a missed loss notice -- and nothing in a clean
history. Histories are written exactly as workers and the nemesis write them, on a fake clock (every
reading 2 ms after the one before, the register's included), so no figure depends on the machine's load.
"""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import pytest

from lab import fenced
from lab.check import check_trial
from lab.fenced import FencedRegister, StaleToken, read_log


class FakeClock:
    """A monotonic clock that moves only when read (2 ms per reading) or advanced."""

    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        self.t = round(self.t + 0.002, 6)
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> FakeClock:
    """The fake clock, read by History and by the register (which stamps every operation it applies)."""
    c = FakeClock()
    monkeypatch.setattr(fenced, "time", SimpleNamespace(monotonic=c.monotonic, time=time.time))
    monkeypatch.setattr(History, "clock", c, raising=False)
    return c


class History:
    """Writes a trial directory: meta.json, one worker file per pid, the register, the nemesis journal."""

    def __init__(self, path, impl: str = "fair", kinds=("pause",)) -> None:
        self.path = str(path)
        self.impl = impl
        with open(os.path.join(self.path, "meta.json"), "w") as f:
            json.dump({"trial": "t", "impls": [impl], "session_timeout": 3.0, "fault_kinds": list(kinds),
                       "paths": {impl: f"/root/{impl}"}}, f)
        self.reg = FencedRegister(os.path.join(self.path, f"register-{impl}.jsonl"))

    clock: FakeClock  # set by the clock fixture

    def now(self) -> float:
        return self.clock.monotonic()

    def ev(self, pid: int, ev: str, **kw) -> None:
        rec = {"t": self.now(), "wall": 0.0, "ev": ev, "slot": pid, "gen": 0, "pid": pid, "impl": self.impl, **kw}
        with open(os.path.join(self.path, f"w-{pid}-0.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")

    def nemesis(self, ev: str, **kw) -> float:
        t = self.now()
        with open(os.path.join(self.path, "nemesis.jsonl"), "a") as f:
            f.write(json.dumps({"t": t, "wall": 0.0, "ev": ev, **kw}) + "\n")
        return t

    def grant(self, pid: int, hold: str, token, seq: int, mode: str = "x", queued: bool = True, node=None) -> None:
        if queued:
            self.ev(pid, "acquire", req=hold, mode=mode)
        self.ev(pid, "grant", req=hold, hold=hold, token=token, seq=seq, mode=mode, node=node)

    def release(self, pid: int, hold: str) -> None:
        self.ev(pid, "release_start", hold=hold)
        self.ev(pid, "release", hold=hold)

    def check(self) -> dict:
        self.reg.close()
        return check_trial(self.path)["impls"][self.impl]["totals"]


def test_register_fences_reads_and_writes(tmp_path):
    with FencedRegister(str(tmp_path / "r.jsonl")) as reg:
        v = reg.read(5, hold="a")
        reg.write(5, v + 1, hold="a")
        assert reg.read(7, hold="b") == 1
        with pytest.raises(StaleToken):
            reg.write(5, 2, hold="a")  # b has read with a higher token
        reg.write(7, 2, hold="b")
        assert reg.read(None) == 2  # unfenced operations are always accepted
        # readers share: both are accepted; a writer older than a reader is not
        assert reg.read(9, hold="r1", shared=True) == 2
        assert reg.read(8, hold="r2", shared=True) == 2
        with pytest.raises(StaleToken):
            reg.write(8, 3, hold="w")
        st = reg.state()
        assert (st["value"], st["writes"], st["high_x"], st["high_s"]) == (2, 2, 7, 9)
    log, torn = read_log(str(tmp_path / "r.jsonl"))
    assert [r["ok"] for r in log] == [True, True, True, False, True, True, True, True, False] and torn == 0


def test_register_skips_a_torn_record(tmp_path):
    path = str(tmp_path / "r.jsonl")
    with FencedRegister(path) as reg:
        reg.write(1, 1)
        with open(path, "ab") as f:
            f.write(b'\n{"seq": 2, "value": 99')  # a writer killed mid-record
        reg.write(2, 2)
        assert reg.state()["value"] == 2
    log, torn = read_log(path)
    assert [r["value"] for r in log] == [1, 2] and torn == 1


def test_clean_history_has_no_findings(tmp_path):
    h = History(tmp_path)
    for k, pid in enumerate((1, 2, 1, 2)):
        hold = f"{pid}.{k}"
        h.grant(pid, hold, token=100 + k, seq=k)
        v = h.reg.read(100 + k, hold=hold)
        h.reg.write(100 + k, v + 1, hold=hold)
        h.release(pid, hold)
    t = h.check()
    assert (t["accepted_overlaps"], t["unsafe"], t["lost_increments"], t["out_of_order"]) == (0, 0, 0, 0)
    assert (t["final_value"], t["accepted_writes"], t["grants"]) == (4, 4, 4)


def test_unfenced_stale_holder_is_an_accepted_overlap_and_loses_an_increment(tmp_path, clock):
    h = History(tmp_path, impl="kazoo")
    h.grant(1, "A", token=None, seq=1)
    va = h.reg.read(None, hold="A")  # A reads, then pauses past its session
    h.grant(2, "B", token=None, seq=2)
    vb = h.reg.read(None, hold="B")
    h.reg.write(None, vb + 1, hold="B")
    h.release(2, "B")
    clock.advance(0.01)
    h.reg.write(None, va + 1, hold="A")  # A wakes up and writes: accepted, B's increment is lost
    h.release(1, "A")
    t = h.check()
    assert t["accepted_overlaps"] == 1
    assert t["lost_increments"] == 1 and t["final_value"] == 1 and t["accepted_writes"] == 2
    assert t["unsafe"] == 1


def test_fenced_stale_holder_is_unsafe_but_rejected(tmp_path, clock):
    h = History(tmp_path)
    h.grant(1, "A", token=10, seq=1)
    va = h.reg.read(10, hold="A")
    h.grant(2, "B", token=20, seq=2)
    vb = h.reg.read(20, hold="B")
    h.reg.write(20, vb + 1, hold="B")
    h.release(2, "B")
    clock.advance(0.01)
    with pytest.raises(StaleToken):
        h.reg.write(10, va + 1, hold="A")
    h.release(1, "A")
    t = h.check()
    assert (t["accepted_overlaps"], t["lost_increments"], t["unsafe"], t["ops_rejected"]) == (0, 0, 1, 1)
    assert t["false_rejections"] == 0


def test_grant_out_of_queue_order(tmp_path):
    h = History(tmp_path)
    h.ev(1, "acquire", req="A", mode="x")  # A queues first (sequence 1) ...
    h.grant(2, "B", token=2, seq=2)  # ... but B (sequence 2) is granted while A waits
    h.release(2, "B")
    h.grant(1, "A", token=1, seq=1, queued=False)
    h.release(1, "A")
    assert h.check()["out_of_order"] == 1


def test_readers_together_are_not_overlaps_but_a_writer_among_them_is(tmp_path):
    h = History(tmp_path, impl="rw")
    h.grant(1, "R1", token=1, seq=1, mode="s")
    h.grant(2, "R2", token=2, seq=2, mode="s")
    h.reg.read(1, hold="R1", shared=True)
    h.reg.read(2, hold="R2", shared=True)
    h.reg.read(1, hold="R1", shared=True)
    h.release(1, "R1")
    h.release(2, "R2")
    t = h.check()
    assert t["accepted_overlaps"] == 0 and t["readers_overlapped"] == 1
    os.makedirs(tmp_path / "w")  # a fresh trial: an unfenced writer among readers
    h2 = History(tmp_path / "w", impl="rw")
    h2.grant(1, "R1", token=None, seq=1, mode="s")
    h2.reg.read(None, hold="R1", shared=True)
    h2.grant(2, "W2", token=None, seq=2, mode="x")
    h2.reg.write(None, 1, hold="W2")
    h2.reg.read(None, hold="R1", shared=True)
    h2.release(2, "W2")
    h2.release(1, "R1")
    assert h2.check()["accepted_overlaps"] == 1


def test_threads_sharing_one_read_node_are_checked_hold_by_hold(tmp_path, clock):
    """Issue 48's lab pattern: threads of one process share a read node (same token and sequence). A writer
    acting among them is an overlap with the joined reader too; a loss told to the shared lock object
    (one ``state`` record naming every hold in progress) tells each of them, and one left out is missed."""
    h = History(tmp_path, impl="rw")
    h.grant(1, "R1", token=None, seq=1, mode="s", node="/root/rw/h-R-0000000001")
    h.grant(1, "R1j", token=None, seq=1, mode="s", node="/root/rw/h-R-0000000001")  # a thread that joined
    h.reg.read(None, hold="R1", shared=True)
    h.reg.read(None, hold="R1j", shared=True)
    h.release(1, "R1")
    h.grant(2, "W2", token=None, seq=2, mode="x")
    h.reg.write(None, 1, hold="W2")
    h.reg.read(None, hold="R1j", shared=True)  # the joined reader, still acting after the writer's grant
    h.release(2, "W2")
    h.release(1, "R1j")
    t = h.check()
    assert t["accepted_overlaps"] == 1 and t["readers_overlapped"] == 1 and t["readers_joined"] == 1

    os.makedirs(tmp_path / "told")
    h2 = History(tmp_path / "told", impl="rw")
    h2.grant(1, "A", token=1, seq=1, mode="s")
    h2.grant(1, "Aj", token=1, seq=1, mode="s")
    h2.grant(1, "Ak", token=1, seq=1, mode="s")
    h2.nemesis("fault_start", id="f1", kind="pause", target_pid=1)
    h2.nemesis("fault_end", id="f1")
    h2.ev(1, "state", holds=["A", "Aj"], state="lost")  # the object's listener named two of the three
    for hid in ("A", "Aj", "Ak"):
        h2.release(1, hid)
    t2 = h2.check()
    assert (t2["notices_needed"], t2["notices_got"]) == (3, 2)
    assert [f["hold"] for f in t2["findings"] if f["what"] == "missed loss notice"] == ["Ak"]


def test_missed_timely_and_late_loss_notices(tmp_path, clock):
    h = History(tmp_path)
    h.grant(1, "A", token=1, seq=1)
    h.nemesis("fault_start", id="f1", kind="pause", target_pid=1)
    h.nemesis("fault_end", id="f1")
    h.ev(1, "state", hold="A", state="lost")  # told one reading (2 ms) after it could reach ZooKeeper again
    h.release(1, "A")
    h.grant(2, "B", token=2, seq=2)
    h.nemesis("fault_start", id="f2", kind="pause", target_pid=2)
    h.nemesis("fault_end", id="f2")
    h.release(2, "B")  # never told
    t = h.check()
    assert (t["notices_needed"], t["notices_got"], t["notices_late"]) == (2, 1, 0)
    assert t["max_notice_delay"] == 0.002
    assert [f["hold"] for f in t["findings"] if f["what"] == "missed loss notice"] == ["B"]

    os.makedirs(tmp_path / "late")
    h2 = History(tmp_path / "late")  # told more than the session timeout (3 s) plus 1 s after: late
    h2.grant(3, "C", token=3, seq=3)
    h2.nemesis("fault_start", id="f3", kind="pause", target_pid=3)
    h2.nemesis("fault_end", id="f3")
    clock.advance(4.1)
    h2.ev(3, "check_fail", hold="C")
    h2.release(3, "C")
    t2 = h2.check()
    assert (t2["notices_needed"], t2["notices_got"], t2["notices_late"], t2["max_notice_delay"]) == (1, 1, 1, 4.102)


def test_stalled_queue_with_nodes_nobody_holds_counts_orphans(tmp_path):
    h = History(tmp_path)
    h.ev(1, "session", session="a1")
    h.ev(2, "session", session="b2")
    h.grant(2, "B", token=7, seq=7, node="/root/fair/vm-W-0000000007")  # B holds 7; the queue is stuck at 5
    queue = [
        {"node": "vm-W-0000000005", "owner": "a1", "pid": 1, "guid": "g1"},  # owned by worker 1, held by nobody
        {"node": "vm-W-0000000006", "owner": "a1", "pid": 1, "guid": "g1"},  # ... and the same acquire again
        {"node": "vm-W-0000000008", "owner": "b2", "pid": 2, "guid": "g2"},
    ]
    h.nemesis("stall", after="quorum-loss", impls=["fair"], waited=30, queues={"fair": queue})
    h.release(2, "B")
    t = h.check()
    assert (t["stalls"], t["duplicate_nodes"], t["stuck_heads"], t["orphans"]) == (1, 1, 1, 1)

    os.makedirs(tmp_path / "held")
    h2 = History(tmp_path / "held")  # a stalled queue whose head is held (a slow holder) has no orphan
    h2.ev(1, "session", session="a1")
    h2.grant(1, "A", token=5, seq=5, node="/root/fair/vm-W-0000000005")
    h2.nemesis("stall", after="pause", impls=["fair"], waited=30,
               queues={"fair": [{"node": "vm-W-0000000005", "owner": "a1", "pid": 1, "guid": "g1"}]})
    h2.release(1, "A")
    t2 = h2.check()
    assert (t2["stalls"], t2["stuck_heads"], t2["orphans"]) == (1, 0, 0)


def _granted_while_frozen(h: History, clock: FakeClock, late_acts: bool, token_read: bool = True) -> None:
    """Worker 2 (B, node token 5) is granted just as the nemesis freezes its process: its grant is recorded
    only once SIGCONT came, 5 s later. Its session expired meanwhile, so Y (token 7) and then Z (token 9),
    queued behind B, were granted in turn; Z is between its read and its write when B records its grant.
    With ``late_acts`` B's check() wrongly passes and it writes (the register refuses token 5); without
    ``token_read`` B's hold was lost before its worker could read the token (only its node is known)."""
    h.ev(2, "acquire", req="B", mode="x")
    h.nemesis("fault_start", id="p", kind="pause", target_pid=2)
    stopped = h.now()
    clock.advance(3.2)  # B's session expires; B's node goes with it
    h.grant(3, "Y", token=7, seq=7)
    vy = h.reg.read(7, hold="Y", checked=h.now())
    h.reg.write(7, vy + 1, hold="Y", checked=h.now())
    h.release(3, "Y")
    clock.advance(1.5)
    h.grant(1, "Z", token=9, seq=9)
    vz = h.reg.read(9, hold="Z", checked=h.now())
    h.nemesis("fault_end", id="p", stopped=stopped)
    h.grant(2, "B", token=5 if token_read else None, seq=5, queued=False)  # recorded after Z's grant, though
    if not token_read:  # ZooKeeper granted it first
        h.ev(2, "no_token", hold="B")
    if late_acts:
        with pytest.raises(StaleToken):
            h.reg.write(5, 1, hold="B", checked=h.now())  # a check after SIGCONT: never excused
    h.ev(2, "check_fail", hold="B")
    h.release(2, "B")
    h.reg.write(9, vz + 1, hold="Z", checked=h.now())
    h.release(1, "Z")


def test_a_grant_recorded_late_by_a_frozen_worker_does_not_make_the_next_holder_unsafe(tmp_path, clock):
    """The open finding of issue 46: a worker frozen between being granted and recording it records its
    grant after holds that queued behind it (higher tokens) were granted once its session had expired. By
    recorded grant times the holder of the moment (Z) acted after a later grant; in the lock's order (the
    tokens) B's grant came first, and B never acted. No unsafe overlap."""
    for token_read in (True, False):  # (a hold lost before its token was read: ordered by its node's number)
        os.makedirs(tmp_path / str(token_read))
        h = History(tmp_path / str(token_read), impl="election")
        _granted_while_frozen(h, clock, late_acts=False, token_read=token_read)
        t = h.check()
        assert (t["unsafe"], t["accepted_overlaps"], t["lost_increments"], t["ops_rejected"]) == (0, 0, 0, 0), \
            (token_read, t["findings"])
        assert t["pause_races"] == 0 and t["out_of_order"] == 0  # (B's request waited across the pause)


def test_a_late_recorded_grant_that_acts_is_the_unsafe_one(tmp_path, clock):
    """The same, but B's check() passes after its process ran again and it writes: a genuine stale act. It is
    B's, after Y's grant (the first of those queued behind B), and it still counts -- where ordering by
    recorded grants blamed Z instead and never saw B's write."""
    h = History(tmp_path, impl="election")
    _granted_while_frozen(h, clock, late_acts=True)
    t = h.check()
    unsafe = [(f["hold"], f["after_grant_of"], f["ops"], f["accepted"]) for f in t["findings"]
              if f["what"] == "unsafe overlap"]
    assert t["unsafe"] == 1 and unsafe == [("B", "Y", 1, 0)], t["findings"]
    assert (t["ops_rejected"], t["false_rejections"], t["pause_races"]) == (1, 0, 0)


def test_a_reader_is_ordered_against_writers_by_token(tmp_path, clock):
    """Readers are ordered against writers only, by token too: a reader ahead of a writer (lower token) that
    acts after the writer's grant is the unsafe one however late its grant was recorded; the writer acting
    after a reader behind it was granted is. (Holds without a token keep the order of their recorded
    grants: the unfenced tests above.)"""
    h = History(tmp_path, impl="rw")
    h.grant(1, "W", token=9, seq=9, mode="x")
    h.reg.read(9, hold="W")
    h.grant(2, "R", token=5, seq=5, mode="s", queued=False)  # a reader ahead of W, recorded late
    with pytest.raises(StaleToken):
        h.reg.read(5, hold="R", shared=True)
    h.grant(3, "R2", token=11, seq=11, mode="s")  # a reader behind W, recorded while W still holds
    h.reg.write(9, 1, hold="W")
    h.release(1, "W")
    h.release(2, "R")
    h.release(3, "R2")
    t = h.check()
    assert sorted((f["hold"], f["after_grant_of"]) for f in t["findings"] if f["what"] == "unsafe overlap") == [
        ("R", "W"), ("W", "R2")]


def test_a_queue_numbered_afresh_is_ordered_by_tokens(tmp_path, clock):
    """A queue's parent reaped once empty and made again numbers its nodes from 0: then the sequence numbers
    (disagreeing with the tokens) are not used, and a stale holder acting after a grant in the new queue
    still counts."""
    h = History(tmp_path)
    h.grant(1, "A", token=9, seq=40)
    va = h.reg.read(9, hold="A")  # A is frozen here; its session expires, its node goes, the parent is reaped
    h.grant(2, "B", token=12, seq=0)  # the first node of the parent made again
    h.release(2, "B")
    clock.advance(0.01)
    h.reg.write(9, va + 1, hold="A")  # accepted: B never wrote
    h.release(1, "A")
    t = h.check()
    assert [(f["hold"], f["after_grant_of"]) for f in t["findings"] if f["what"] == "unsafe overlap"] == [("A", "B")]
