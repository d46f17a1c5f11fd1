"""The lab's ``txn`` trial: does ``lock.transaction()`` keep a counter stored in ZooKeeper exact under faults?

Here the resource is ZooKeeper itself: a counter in a node (JSON ``{"value": n, "hold": ...}``),
incremented under a zkrecipes :class:`~zkrecipes.FairLock`. The even worker slots are the *fenced* half
(``txn``): ``check()``, read the counter, work for ``WINDOW`` (0.2-0.6 s), then write ``value + 1``
through ``lock.transaction()``, which commits only while the hold lives. The odd slots are the *unfenced
control* (``txn-control``): the same steps on a counter and lock of their own, but a plain ``set``. Neither
half calls ``check()`` between its read and its write (the transaction is the fenced half's check), and
both send a write that ZooKeeper refused with ``SessionExpiredError`` (nothing applied) again, up to
``RETRIES`` attempts in all with a doubling delay from ``RETRY_DELAY``, as kazoo's own ``client.retry``
does by default (``ignore_expire``). A holder paused, expired or cut off in that window thus writes
anyway in the control, in its client's new session -- kazoo also sends a request queued while it
reconnects in whatever session it then has -- and is refused in the fenced half (``LockLost``: the hold
went with the old session).

Every read and write is recorded with the node version ZooKeeper returned; a set bumps the version by
one, so the version orders the writes, and once the workers are gone the nemesis reads the counters
(``counter`` events): *lost increments* = applied writes (the final version) - the final value. For the
per-fault rows and the overlap counts, :func:`check` rebuilds a register-shaped log in ZooKeeper's order
(a write at version w; a read of version v after the write of v) from the histories and hands it to
:func:`lab.check.check_trial`. The workers also mirror each read and each applied write into the
trial's file register (unfenced) so that the nemesis can see progress and aim at a holder between its
read and its write; that file is not judged.
"""

from __future__ import annotations

import glob
import json
import os
import random
import time

from .check import check_trial
from .fenced import FencedRegister

IMPLS = ("txn", "txn-control")
WINDOW = (0.2, 0.6)  # seconds between a hold's read and its write, the same in both halves
RETRIES = 4  # attempts at a write refused with SessionExpiredError (nothing applied), in both halves,
RETRY_DELAY = 0.2  # s before the second, doubled before each further one


def counter_path(root: str, impl: str) -> str:
    return f"{root}/counters/{impl}"


def _decode(data: bytes) -> dict:
    return json.loads(data.decode()) if data else {"value": 0, "hold": None}


# -- the nemesis side --------------------------------------------------------------------------------------
def prepare(trial) -> None:
    """Create both counters (value 0, version 0) before the workers start."""
    for impl in IMPLS:
        trial.mon.create(counter_path(trial.root, impl), json.dumps({"value": 0, "hold": None}).encode(),
                         makepath=True)


def finish(trial) -> None:
    """Record each counter's final value and version (every worker has exited)."""
    for impl in IMPLS:
        path = counter_path(trial.root, impl)
        try:
            trial.mon.sync(path)
            data, stat = trial.mon.get(path)
            trial.journal("counter", impl=impl, value=_decode(data)["value"], version=stat.version)
        except Exception as exc:
            trial.journal("counter_error", impl=impl, error=repr(exc))


# -- the worker side ---------------------------------------------------------------------------------------
def run_worker(w) -> None:
    """A ``txn`` worker: the fenced half (even slots) or the unfenced control (odd slots)."""
    from kazoo.exceptions import ConnectionLoss, KazooException, SessionExpiredError

    from zkrecipes import FairLock, LockLost

    from .worker_base import _seq, _sid

    impl = IMPLS[w.slot % 2]
    client = w.connect()
    root = w.cfg["root"]
    lock_path, counter = f"{root}/{impl}", counter_path(root, impl)
    lock = FairLock(client, lock_path, identifier=w.ident)
    current: dict = {}
    lock.add_listener(w._state_recorder(impl, current))
    w.cancels.append(lock.cancel)
    probe = FencedRegister(w.cfg["registers"][impl])
    rnd = random.Random(f"{w.cfg['seed']}-{impl}")
    n = 0
    while not w.stopping():
        req = f"{w.slot}.{os.getpid()}.{impl}.{n}"
        n += 1
        w.rec("acquire", impl=impl, req=req, mode="x")
        try:
            ok = lock.acquire(timeout=max(0.01, w.remaining()))
        except Exception as exc:
            w.rec("acquire_error", impl=impl, req=req, error=f"{type(exc).__name__}: {exc}")
            w.stop.wait(0.1)
            continue
        if not ok:
            w.rec("acquire_fail", impl=impl, req=req)
            continue
        current["hold"] = req
        node = lock.node
        w.rec("grant", impl=impl, req=req, hold=req, mode="x", token=lock.token, node=node, seq=_seq(node),
              session=_sid(client))
        read = False
        try:
            lock.check()
            data, stat = client.get(counter)
            value = _decode(data)["value"]
            read = True
            w.rec("zread", impl=impl, hold=req, version=stat.version, value=value)
            probe.read(None, hold=req)  # for the nemesis: a holder between its read and its write
            time.sleep(rnd.uniform(*WINDOW))
            new = json.dumps({"value": value + 1, "hold": req}).encode()
            for attempt in range(1, RETRIES + 1):
                try:
                    if impl == "txn":
                        tx = lock.transaction()
                        tx.set_data(counter, new)
                        wstat = tx.commit()[-1]
                    else:
                        wstat = client.set(counter, new)
                    break
                except SessionExpiredError as exc:  # applied nothing: again, as kazoo's retry does by default
                    if attempt == RETRIES:
                        raise
                    w.rec("zwrite_retry", impl=impl, hold=req, attempt=attempt, error=f"{type(exc).__name__}")
                    time.sleep(RETRY_DELAY * 2 ** (attempt - 1))  # kazoo's retry backs off too
            w.rec("zwrite", impl=impl, hold=req, ok=True, version=wstat.version, value=value + 1)
            probe.write(None, value + 1, hold=req)
            w.rec("done", impl=impl, hold=req)
        except LockLost as exc:  # check() before the read, or the fenced commit: nothing applied
            if read:
                w.rec("zwrite", impl=impl, hold=req, ok=False, error=f"{type(exc).__name__}: {exc}")
            w.rec("check_fail", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
        except ConnectionLoss as exc:  # in flight when the connection went: applied or not, unknown
            w.rec("zwrite" if read else "zread_error", impl=impl, hold=req, ok=None,
                  error=f"{type(exc).__name__}: {exc}")
        except KazooException as exc:  # SessionExpired and the like: ZooKeeper applied nothing
            w.rec("zwrite" if read else "zread_error", impl=impl, hold=req, ok=False,
                  error=f"{type(exc).__name__}: {exc}")
        finally:
            w.rec("release_start", impl=impl, hold=req)
            try:
                lock.release()
            except Exception as exc:
                w.rec("release_error", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
            w.rec("release", impl=impl, hold=req, lost=lock.lost.is_set())
            current.pop("hold", None)
    probe.close()
    w.close_client(client, [lock_path])


# -- the checker side --------------------------------------------------------------------------------------
def _load(path: str) -> list:
    out = []
    with open(path, "rb") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # cut short by SIGKILL
    return out


def zk_log(events: list, impl: str, final: dict | None) -> tuple:
    """A register-shaped log of ``impl``'s counter, in ZooKeeper's order, from the workers' ``zread`` and
    ``zwrite`` events; ``final`` (the nemesis's ``counter`` event) gives the last record's value and
    applied writes (the node's version). Returns ``(records, 0)`` like :func:`lab.fenced.read_log`."""
    value_at = {0: 0}
    reads, writes, refused = [], [], []
    last_read: dict = {}
    for e in events:
        if e.get("impl") != impl:
            continue
        if e["ev"] == "zread":
            value_at[e["version"]] = e["value"]
            last_read[e["hold"]] = e
            reads.append(e)
        elif e["ev"] == "zwrite" and e.get("ok"):
            value_at[e["version"]] = e["value"]
            writes.append(e)
        elif e["ev"] == "zwrite" and e.get("ok") is False:
            refused.append(e)
    keyed = []
    for e in writes:
        seen = value_at.get(e["version"] - 1, e["value"] - 1)  # unknown: a write of unknown outcome was there
        keyed.append(((e["version"], 0, e["t"]), {"op": "write", "ok": True, "arg": e["value"], "seen": seen,
                                                  "value": e["value"], "writes": e["version"]}, e))
    for e in reads:
        keyed.append(((e["version"], 1, e["t"]), {"op": "read", "ok": True, "arg": None, "seen": e["value"],
                                                  "value": e["value"], "writes": e["version"]}, e))
    for e in refused:
        r = last_read.get(e["hold"])
        keyed.append(((r["version"] if r else 0, 2, e["t"]), {"op": "write", "ok": False, "arg": None}, e))
    keyed.sort(key=lambda k: k[0])
    out = []
    state = {"value": 0, "writes": 0}
    for seq, (_key, rec, e) in enumerate(keyed, 1):
        if rec["ok"]:
            state = {"value": rec["value"], "writes": rec["writes"]}
        out.append({**rec, **state, "seq": seq, "token": None, "shared": False, "hold": e["hold"], "pid": e["pid"],
                    "t": e["t"]})
    if final is not None:
        end = {"value": final["value"], "writes": final["version"]}
        if out:
            out[-1].update(end)
        else:
            out.append({"op": "final", "ok": True, "seq": 1, "hold": None, "t": 0.0, "seen": 0, "arg": None,
                        "shared": False, **end})
    return out, 0


def check(path: str) -> dict:
    """Verdict of one ``txn`` trial directory, in :func:`lab.check.check_trial`'s shape, plus each
    counter's final value and version, the writes whose outcome is unknown and ``unsafe_accepted`` (the
    operations of unsafe overlaps that were applied)."""
    events = []
    for p in sorted(glob.glob(os.path.join(path, "w-*.jsonl"))):
        events.extend(_load(p))
    events.sort(key=lambda e: e["t"])
    nemesis = _load(os.path.join(path, "nemesis.jsonl"))
    finals = {e["impl"]: e for e in nemesis if e["ev"] == "counter"}
    logs = {impl: zk_log(events, impl, finals.get(impl)) for impl in IMPLS}
    res = check_trial(path, logs=logs)
    for impl in (i for i in IMPLS if i in res["impls"]):
        t = res["impls"][impl]["totals"]
        f = finals.get(impl)
        t["counter"] = None if f is None else {"value": f["value"], "version": f["version"]}
        t["unknown_writes"] = sum(1 for e in events if e.get("impl") == impl and e["ev"] == "zwrite"
                                  and e.get("ok") is None)
        # stale acts ZooKeeper let through: accepted operations after a later conflicting grant (the fenced
        # half's stale commits must all be refused)
        t["unsafe_accepted"] = sum(f["accepted"] for f in t["findings"] if f["what"] == "unsafe overlap")
        if f is None:
            t["findings"].append({"what": "final counter not read", "t": 0.0})
    return res
