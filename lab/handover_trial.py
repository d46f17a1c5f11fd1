"""The lab's ``handover`` trial: a hold taken on one thread and released on another, under the nemesis.

Each worker process runs two threads on its one session and one :class:`~zkrecipes.FairLock` made with
``owner="object"``: the *taker* acquires and hands the hold (the lock object, its token) to the
*releaser*, which does the zk trial's read-modify-write of the fenced register (``check()``, read with
the token, hold, ``check()``, write) and releases; the taker waits for that release before it acquires
again. Every grant and release records its thread, so the checker can count the holds that really
changed hands (``handed_over``: released by a thread other than the one that took them). A release
that raises is a trial failure (``release_errors``), beside :func:`lab.check.check_trial`'s verdict
(overlaps, notices, orphans: a hand-over that left the node behind is an orphan, hung workers).
"""

from __future__ import annotations

import glob
import os
import queue
import random
import threading

from .check import _load_jsonl, check_trial

IMPLS = ("handover",)


def run_worker(w) -> None:
    """A ``handover`` worker: a taker thread and a releaser thread sharing one object-owned FairLock."""
    from zkrecipes import FairLock, LockLost

    from .fenced import FencedRegister
    from .worker_base import _seq, _sid

    impl = "handover"
    client = w.connect()
    path = f"{w.cfg['root']}/{impl}"
    lock = FairLock(client, path, identifier=w.ident, owner="object")
    current: dict = {}
    lock.add_listener(w._state_recorder(impl, current))
    w.cancels.append(lock.cancel)
    reg = FencedRegister(w.cfg["registers"][impl])
    rnd = random.Random(f"{w.cfg['seed']}-{impl}")
    inbox: queue.Queue = queue.Queue()
    back: queue.Queue = queue.Queue()

    def releaser() -> None:
        while True:
            item = inbox.get()
            if item is None:
                return
            req, token = item
            try:
                if token is None:
                    w.rec("no_token", impl=impl, hold=req)  # lost before the taker could read its token
                else:
                    w.critical(impl, lock.check, reg, token, req, rnd, (LockLost,))
            finally:
                me = threading.current_thread().name
                w.rec("release_start", impl=impl, hold=req, thread=me)
                try:
                    lock.release()
                except Exception as exc:
                    w.rec("release_error", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
                w.rec("release", impl=impl, hold=req, lost=lock.lost.is_set(), thread=me)
                current.pop("hold", None)
                back.put(req)

    rel = threading.Thread(target=w._guard, args=(releaser,), name="releaser", daemon=True)
    rel.start()
    n = 0
    while not w.stopping():
        req = f"{w.slot}.{w.ident}.{impl}.{n}"
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
        token, node = lock.token, lock.node
        w.rec("grant", impl=impl, req=req, hold=req, mode="x", token=token, node=node, seq=_seq(node),
              session=_sid(client), thread=threading.current_thread().name)
        inbox.put((req, token))
        while True:  # the taker waits for the hand-over to end (the releaser records it if it crashes)
            try:
                back.get(timeout=1.0)
                break
            except queue.Empty:
                if not rel.is_alive():
                    raise RuntimeError("the releaser thread ended") from None
    inbox.put(None)
    rel.join()
    reg.close()
    w.close_client(client, [path])


def handovers(path: str, res: dict) -> None:
    """Add ``handed_over`` (holds released on a thread other than the taker's) and ``release_errors`` to
    the ``handover`` totals of ``res``; a release error fails the trial (``failed_checks``)."""
    took: dict = {}
    released: dict = {}
    errors = 0
    for p in sorted(glob.glob(os.path.join(path, "w-*.jsonl"))):
        for e in _load_jsonl(p):
            if e.get("impl") != "handover":
                continue
            if e["ev"] == "grant":
                took[e["hold"]] = e.get("thread")
            elif e["ev"] == "release":
                released[e["hold"]] = e.get("thread")
            elif e["ev"] == "release_error":
                errors += 1
    t = res["impls"]["handover"]["totals"]
    t["handed_over"] = sum(1 for h, th in released.items() if h in took and th is not None and th != took[h])
    t["release_errors"] = errors
    t["note"] = f"{t['handed_over']} of {t['grants']} holds released on another thread; {errors} release errors"
    if errors:
        t.setdefault("failed_checks", []).append(f"{errors} releases from the other thread raised")


def check(path: str) -> dict:
    """Verdict of one ``handover`` trial directory, in :func:`lab.check.check_trial`'s shape."""
    res = check_trial(path)
    handovers(path, res)
    return res
