"""The lab's mixed-fleet trials: zkrecipes in kazoo's or Curator's node format beside the real thing.

``mixed-kazoo``
    half the workers run :class:`~zkrecipes.FairLock` with ``protocol="kazoo"``, half kazoo's own
    ``Lock``, all on one path. After the fault schedule, a *refusal* fleet -- two processes of
    default-format FairLocks on the same path, five attempts each -- must be refused every time with a
    :class:`~zkrecipes.LockError` naming kazoo's format, and never hold (entry ``mk-refusal``).
``mixed-curator``
    half the contenders run ``FairLock(protocol="curator")`` (one per Python worker), half Curator's
    ``InterProcessMutex`` in Java: a few JVMs (``lab/LabCuratorWorker.java``, 2 contenders each, each
    contender its own session), each the child of a Python worker that fences and records for it.

Every contender fences its register operations with its node's czxid, so a stale holder of any library
is turned away; with fencing, accepted overlaps and lost increments cannot happen at all (a write needs
a token at least as high as every token seen). What remains to judge is the interop itself, so every
contender also *verifies* each hold before releasing it (a ``sync``, then its node still there and its
own: :func:`lab.mixed_worker.verify`). A verified hold was valid from its grant until its verification
began. ``valid_overlaps`` counts pairs of verified holds whose intervals intersect, and holds whose node
was verified alive after the register turned one of their operations away (a later node had acted
while theirs was still queued ahead): two valid holders at once. It must be 0 for the zkrecipes halves.

The short run (no ``--long``) injects only ``session-expiry`` and ``pause`` (one each, alternating
halves); ``--long`` every fault kind, each three times. The kazoo and Curator halves are baselines.
"""

from __future__ import annotations

import bisect
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Optional, Tuple

from zkrecipes.testing import _java

from .check import ROW_KEYS, Windows, _load_jsonl, check_trial
from .fenced import read_log
from .trial import Slot, Trial

SHORT_KINDS = ("session-expiry", "pause")
PER_JVM = 2  # Curator contenders per JVM (each with its own session): 2 cores, keep JVMs few
REFUSAL_FLEET = 2
JAVA_OPTS = ("-Xms16m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
JAVA_SOURCE = Path(__file__).resolve().parent / "LabCuratorWorker.java"


def curator_classpath(java_dir: str = "/usr/share/java") -> Tuple[Optional[str], str]:
    """``(classpath, "")`` with JAVA_SOURCE compiled (the kit's one compile-and-cache helper), or ``(None, why)``."""
    return _java.curator_classpath(JAVA_SOURCE, java_dir)


def skip_reason(name: str) -> Optional[str]:
    """Why trial ``name`` cannot run here (None: it can)."""
    if name == "mixed-curator":
        return curator_classpath()[1] or None
    return None


class MixedTrial(Trial):
    """A mixed fleet on one path and one fenced register, under :class:`lab.trial.Trial`'s nemesis."""

    def __init__(self, name: str, st, workdir: str, say, ensemble) -> None:
        super().__init__(name, st, workdir, say, ensemble, None)
        self.path = f"{self.root}/{name}"
        self.paths = {impl: self.path for impl in self.impls}
        register = os.path.join(workdir, f"register-{name}.jsonl")
        self.registers = {impl: register for impl in self.impls}
        if not st.long:
            self.kinds = list(SHORT_KINDS)
        self.classpath = curator_classpath()[0] if name == "mixed-curator" else None
        half = st.workers // 2
        self.n_zk = half
        if self.classpath is not None:  # the Curator half: JVM slots of PER_JVM contenders each
            foreign = st.workers - half
            self.contenders = [min(PER_JVM, foreign - i) for i in range(0, foreign, PER_JVM)]
            self.slots = [Slot(i) for i in range(half + len(self.contenders))]
        self._contender: Optional[int] = None

    def impl_of(self, slot: Slot) -> str:
        if slot.index >= 100:
            return "mk-refusal"
        return self.impls[0] if slot.index < self.n_zk else self.impls[1]

    def worker_cfg(self, slot: Slot) -> dict:
        cfg = {"path": self.path}
        if self.impl_of(slot) == "mc-curator":
            cfg.update(classpath=self.classpath, java_opts=list(JAVA_OPTS),
                       contenders=self.contenders[slot.index - self.n_zk])
        if slot.index >= 100:
            cfg["hosts"] = self.ens.hosts
        return cfg

    def session_of(self, slot: Slot) -> Optional[dict]:
        if self._contender is None or self.impl_of(slot) != "mc-curator":
            return super().session_of(slot)
        from .mixed_worker import session_file_of

        try:
            with open(session_file_of(slot.session_file, self._contender)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def fresh_holder(self, impl: str, timeout: float = 5.0):
        """As :meth:`Trial.fresh_holder`, on the shared register, for a hold of ``impl``; for a JVM slot
        also remembers which contender holds (session expiry targets its session)."""
        from .fenced import FencedRegister

        self._contender = None
        with FencedRegister(self.registers[impl]) as reg:
            start = reg.state()["seq"]
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                rec = reg.state()
                hold = rec.get("hold") or ""
                parts = hold.split(".")
                if rec["seq"] > start and rec.get("op") == "read" and rec.get("ok") and len(parts) == 4 \
                        and parts[2] == impl:
                    for slot in self.slots:
                        if slot.proc is not None and slot.proc.pid == rec["pid"] and slot.proc.poll() is None:
                            if impl == "mc-curator":
                                self._contender = int(parts[3].split("-")[0])
                            return slot, hold
                    start = rec["seq"]
                time.sleep(0.002)
        return None

    def inject(self, kind: str, target_impl: str) -> None:
        try:
            super().inject(kind, target_impl)
        finally:
            self._contender = None  # the target of this fault only

    def shutdown(self) -> None:
        if self.name == "mixed-kazoo":
            self.refusal_phase()
        super().shutdown()

    def refusal_phase(self) -> None:
        """Default-format FairLocks join the kazoo fleet's path (still busy): each attempt must be refused."""
        fleet = [Slot(100 + i) for i in range(REFUSAL_FLEET)]
        self.journal("refusal_start", slots=[s.index for s in fleet])
        for slot in fleet:
            self.start_worker(slot)
        for slot in fleet:
            try:
                slot.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.journal("hung", slot=slot.index, pid=slot.proc.pid, waited=60)
        self.slots += fleet
        self.journal("refusal_end")
        self.say(f"  refusal: {REFUSAL_FLEET} default-format FairLock processes tried the kazoo fleet's path")


# -- the checker --------------------------------------------------------------------------------------------------
def _side(hold: Optional[str]) -> Optional[str]:
    parts = (hold or "").split(".")
    return parts[2] if len(parts) == 4 else None


def _who(hold: str) -> str:
    """The contender a hold belongs to: its process, or its process and contender for a JVM slot."""
    slot, pid, impl, n = hold.split(".")
    return f"{slot}.{pid}" + (f".{n.split('-')[0]}" if "-" in n else "")


def check(path: str) -> dict:
    """Verdict of one mixed trial directory, in :func:`lab.check.check_trial`'s shape: one entry per half
    (and ``mk-refusal`` for mixed-kazoo). Per-half figures come from :func:`~lab.check.check_trial` run
    on that half's records; overlaps, unsafe overlaps and valid overlaps are judged across both halves."""
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    trial, sides = meta["trial"], list(meta["impls"])
    T = float(meta["session_timeout"])
    log, torn = read_log(os.path.join(path, f"register-{trial}.jsonl"))
    events = []
    for p in sorted(glob.glob(os.path.join(path, "w-*.jsonl"))):
        events.extend(_load_jsonl(p))
    events.sort(key=lambda e: e["t"])
    nemesis = _load_jsonl(os.path.join(path, "nemesis.jsonl"))

    with tempfile.TemporaryDirectory(prefix="lab-mixed-check-") as tmp:  # each half's records, for check_trial
        for p in glob.glob(os.path.join(path, "w-*.jsonl")) + [os.path.join(path, "nemesis.jsonl")]:
            os.symlink(p, os.path.join(tmp, os.path.basename(p)))
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f)
        for side in sides:
            with open(os.path.join(tmp, f"register-{side}.jsonl"), "w") as f:
                f.writelines("\n" + json.dumps(r) for r in log if _side(r.get("hold")) == side)
        res = check_trial(tmp)
    win = Windows(res["faults"], T + 2.0)
    out = {side: res["impls"][side] for side in sides}
    pid_side = {e["pid"]: e.get("impl") for e in events if e["ev"] == "grant"}
    for e in events:
        if e["ev"] == "start":
            pid_side.setdefault(e["pid"], e.get("impl"))

    def add(side: str, key: str, t: float, finding: Optional[dict] = None, n: int = 1) -> None:
        if side not in out:
            return
        r = out[side]["rows"].setdefault(win.kind(t), {k: 0 for k in ROW_KEYS} | {"max_notice_delay": None})
        r[key] += n
        out[side]["totals"][key] = out[side]["totals"].get(key, 0) + n
        if finding is not None:
            out[side]["totals"]["findings"].append(finding)

    for side in sides:  # judged below across both halves
        tot = out[side]["totals"]
        tot["findings"] = [f for f in tot["findings"] if f["what"] not in ("accepted overlap", "unsafe overlap")]
        tot.update(accepted_overlaps=0, unsafe=0, valid_overlaps=0)
        for r in out[side]["rows"].values():
            r.update(accepted_overlaps=0, unsafe=0)
            r["valid_overlaps"] = 0
        tot["lost_increments"] = sum(r["lost_increments"] for r in out[side]["rows"].values())
        final = log[-1] if log else {"value": 0, "writes": 0}
        tot.update(final_value=final["value"], accepted_writes=final["writes"], torn_records=torn)
        tot["crashes"] = [e.get("error") for e in events if e["ev"] == "crash" and pid_side.get(e["pid"]) == side][:10]
        tot["workers"] = len({e["pid"] for e in events if e["ev"] == "start" and e.get("impl") == side})

    # accepted overlaps: interleaved accepted operations of two holds (every hold here is exclusive)
    accepted = [r for r in log if r["ok"] and r.get("hold")]
    spans: dict = {}
    for i, rec in enumerate(accepted):
        spans.setdefault(rec["hold"], [i, i])[1] = i
    active: list = []
    for hid, (a, b) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        active = [(h2, b2) for h2, b2 in active if b2 > a]
        for h2, _ in active:
            t = accepted[a]["t"]
            for side in {_side(hid), _side(h2)}:
                add(side, "accepted_overlaps", t, {"what": "accepted overlap", "t": t, "holds": [h2, hid]})
        active.append((hid, b))

    # holds (both halves) and unsafe overlaps: a hold acting after a later hold of another contender was granted
    grants = {e["hold"]: e for e in events if e["ev"] == "grant" and e.get("impl") in sides}
    order = sorted((e["t"], h) for h, e in grants.items())
    gtimes = [g[0] for g in order]
    ops_by_hold = defaultdict(list)
    for rec in log:
        if rec.get("hold"):
            ops_by_hold[rec["hold"]].append(rec)
    for hid, recs in ops_by_hold.items():
        g = grants.get(hid)
        if g is None:
            continue
        i, j = bisect.bisect_right(gtimes, g["t"]), bisect.bisect_left(gtimes, recs[-1]["t"])
        other = next((order[k][1] for k in range(i, j) if _who(order[k][1]) != _who(hid)), None)
        if other is None:
            continue
        late = [r for r in recs if r["t"] > grants[other]["t"]]
        add(_side(hid), "unsafe", late[0]["t"], {"what": "unsafe overlap", "t": late[0]["t"], "hold": hid,
                                                 "after_grant_of": other, "ops": len(late),
                                                 "accepted": sum(1 for r in late if r["ok"])})

    # valid overlaps: verified holds (node still ours after a sync) whose intervals intersect
    verified = {e["hold"]: e for e in events if e["ev"] == "verify"}
    valid = sorted((grants[h]["t"], v["t0"], h) for h, v in verified.items() if v["result"] == "alive" and h in grants)
    for side in sides:
        got = [v for h, v in verified.items() if _side(h) == side]
        out[side]["totals"]["verified"] = {res_: sum(1 for v in got if v["result"].split(":")[0] == res_)
                                           for res_ in ("alive", "gone", "error")}
    live: list = []
    for g, t0, h in valid:
        live = [(g2, t2, h2) for g2, t2, h2 in live if t2 > g]
        for _g2, _t2, h2 in live:
            if _who(h2) == _who(h):
                continue
            for side in {_side(h), _side(h2)}:
                add(side, "valid_overlaps", g, {"what": "valid overlap", "t": g, "holds": [h2, h],
                                                "why": "both verified valid over intersecting intervals"})
        live.append((g, t0, h))
    for h, v in verified.items():
        if v["result"] == "alive" and any(not r["ok"] for r in ops_by_hold.get(h, [])):
            add(_side(h), "valid_overlaps", v["t0"], {"what": "valid overlap", "t": v["t0"], "hold": h,
                                                      "why": "an operation was rejected, yet the node was ours"})

    # orphans of the shared path, by who made the node; and each half's own final leftovers
    from zkrecipes import formats

    left = set()
    for e in nemesis:
        if e["ev"] == "orphans":
            left.update(n for n in e.get("nodes", []))
    for side in sides:
        mine = set()
        for e in events:
            if e["ev"] == "final" and pid_side.get(e["pid"]) == side:
                mine.update(e.get("own_nodes", []))
        for n in left:
            found = formats.identify(n.rsplit("/", 1)[-1])
            if found is not None and found.format == formats.ZKRECIPES:
                continue  # a default-format node: the refusal fleet's
            if (found is not None and found.ours) == side.endswith("-zk"):
                mine.add(n)
        out[side]["totals"]["orphans"] = len(mine)
        out[side]["totals"]["orphan_nodes"] = sorted(mine)[:20]
    for side in sides:
        tot = out[side]["totals"]
        tot["failed_checks"] = [f"valid overlaps = {tot['valid_overlaps']}"] if tot["valid_overlaps"] else []
        v = tot["verified"]
        tot["note"] = (f"holds verified valid at their end: {v['alive']} (gone {v['gone']}, could not tell "
                       f"{v['error']}); valid overlaps: {tot['valid_overlaps']}")
        tot["findings"].sort(key=lambda f: f["t"])
    if trial == "mixed-kazoo":
        out["mk-refusal"] = _check_refusal(events, nemesis, left)
    return {"impls": out, "faults": res["faults"]}


def _check_refusal(events: list, nemesis: list, left: set) -> dict:
    from zkrecipes import formats

    mine = [e for e in events if e.get("impl") == "mk-refusal"]
    attempts = sum(1 for e in mine if e["ev"] == "acquire")
    refused = [e for e in mine if e["ev"] == "refused"]
    named = [e for e in refused if "kazoo Lock" in e["error"] and "protocol='kazoo'" in e["error"]
             and "refusing to queue with protocol='zkrecipes'" in e["error"]]
    grants = sum(1 for e in mine if e["ev"] == "grant")
    pids = {e["pid"] for e in mine}
    orphans = sorted({n for e in events if e["ev"] == "final" and e["pid"] in pids for n in e.get("own_nodes", [])}
                     | {n for n in left if formats.own(n.rsplit("/", 1)[-1]) is not None})
    crashes = [e.get("error") for e in events if e["ev"] == "crash" and e["pid"] in pids]
    failed = []
    if attempts == 0:
        failed.append("the refusal fleet made no attempt")
    if grants:
        failed.append(f"held {grants} times on a path with kazoo's nodes")
    if len(refused) != attempts:
        failed.append(f"refused {len(refused)} of {attempts} attempts")
    if len(named) != len(refused):
        failed.append(f"{len(refused) - len(named)} refusals did not name kazoo's format and the protocol= to use")
    if crashes:
        failed.append(f"crashed: {crashes[:3]}")
    zero = {k: 0 for k in ROW_KEYS} | {"max_notice_delay": None}
    totals = dict(zero, grants=grants, accepted_writes=0, final_value=None, orphans=len(orphans),
                  orphan_nodes=orphans, hung=0, readers_overlapped=None, crashes=crashes,
                  findings=[{"what": "refusal message", "t": refused[0]["t"], "error": refused[0]["error"]}]
                  if refused else [],
                  attempts=attempts, refused=len(refused), refused_naming_kazoo=len(named),
                  failed_checks=failed, own_rows_only=True,
                  note=f"default-format attempts refused: {len(refused)}/{attempts} (naming kazoo's format: "
                       f"{len(named)}), holds: {grants}")
    return {"totals": totals, "rows": {"none": dict(zero, grants=grants)}}


def main(argv: Optional[list] = None) -> int:
    """``python -m lab.mixed_trial DIR``: re-check a kept trial history (``--keep-history``)."""
    argv = sys.argv[1:] if argv is None else argv
    res = check(argv[0])
    for impl, r in res["impls"].items():
        t = r["totals"]
        print(impl, {k: t.get(k) for k in ("grants", "accepted_overlaps", "valid_overlaps", "unsafe",
                                            "lost_increments", "orphans", "note")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
