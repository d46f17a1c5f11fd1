"""The lab's ``aio`` trial: the asyncio front (:mod:`zkrecipes.aio`) under the same nemesis.

Each worker process runs one event loop with ``TASKS`` (2) tasks per recipe, each task with its own lock
object, all on the process's one session: :class:`aio.FairLock <zkrecipes.aio.FairLock>` (``aio-fair``),
:class:`aio.ReadWriteLock <zkrecipes.aio.ReadWriteLock>` (``aio-rw``, 25 % writers) and
:class:`aio.Semaphore <zkrecipes.aio.Semaphore>` (``aio-sem``, ``LEASES`` = 3), each on its own path and
register. The locks' tasks do the zk trial's read-modify-write of the fenced register with
``await lock.check()`` and the task's ``lock.token``; the semaphore's tasks do the semaphore trial's
unfenced enter/leave. Notices are the asyncio listeners' (called on the loop). Tasks of one process
share the lock's node (the local gate), so one fault hits every task of the process.

The checker is :func:`lab.check.check_trial`, with the semaphore's overlaps counted for N holders
(:func:`lab.semaphore_trial.capacity`).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import traceback

from .check import check_trial
from .fenced import FencedRegister, StaleToken
from .semaphore_trial import LEASES, capacity

IMPLS = ("aio-fair", "aio-rw", "aio-sem")
TASKS = 2
RW_WRITE_SHARE = 0.25


def run_worker(w) -> None:
    """An ``aio`` worker: ``TASKS`` tasks per recipe on one event loop and one session."""
    client = w.connect()
    paths = {impl: f"{w.cfg['root']}/{impl}" for impl in IMPLS}
    asyncio.run(_main(w, client, paths))
    w.close_client(client, list(paths.values()))


async def _main(w, client, paths: dict) -> None:
    tasks = []
    for impl in IMPLS:
        for k in range(TASKS):
            rnd = random.Random(f"{w.cfg['seed']}-{impl}-{k}")
            tasks.append(asyncio.create_task(_guard(w, impl, k, client, paths[impl], rnd), name=f"{impl}-{k}"))
    await asyncio.gather(*tasks)


async def _guard(w, impl: str, k: int, client, path: str, rnd) -> None:
    try:
        await _loop(w, impl, k, client, path, rnd)
    except BaseException as exc:
        w.rec("crash", error=f"{type(exc).__name__}: {exc}", tb=traceback.format_exc(), loop=f"{impl}-{k}")


def _objects(w, impl: str, client, path: str, rnd):
    """This task's lock object(s) and a ``pick()`` giving (lock, mode) for each round."""
    from zkrecipes import aio

    if impl == "aio-fair":
        lock = aio.FairLock(client, path, identifier=w.ident)
        return [lock], lambda: (lock, "x")
    if impl == "aio-rw":
        rw = aio.ReadWriteLock(client, path, identifier=w.ident)
        return [rw.read(), rw.write()], lambda: (rw.write(), "x") if rnd.random() < RW_WRITE_SHARE else (rw.read(), "s")
    sem = aio.Semaphore(client, path, LEASES, identifier=w.ident)
    return [sem], lambda: (sem, "x")


async def _loop(w, impl: str, k: int, client, path: str, rnd) -> None:
    from zkrecipes import LockLost

    from .worker_base import _seq, _sid

    objs, pick = _objects(w, impl, client, path, rnd)
    current: dict = {}
    for obj in objs:
        obj.add_listener(w._state_recorder(impl, current))
        w.cancels.append(obj.cancel)  # callable from the stop-watch thread
    reg = FencedRegister(w.cfg["registers"][impl])
    n = 0
    while not w.stopping():
        lock, mode = pick()
        req = f"{w.slot}.{os.getpid()}.{impl}.{k}.{n}"
        n += 1
        w.rec("acquire", impl=impl, req=req, mode=mode)
        try:
            ok = await lock.acquire(timeout=max(0.01, w.remaining()))
        except Exception as exc:
            w.rec("acquire_error", impl=impl, req=req, error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.1)
            continue
        if not ok:
            w.rec("acquire_fail", impl=impl, req=req)
            continue
        current["hold"] = req
        token, node = lock.token, lock.node
        w.rec("grant", impl=impl, req=req, hold=req, mode=mode, token=token, node=node, seq=_seq(node),
              session=_sid(client))
        try:
            await _critical(w, impl, lock, reg, token, req, rnd, mode == "s")
        except LockLost as exc:
            w.rec("check_fail", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
        except StaleToken as exc:
            w.rec("rejected", impl=impl, hold=req, token=token, error=str(exc))
        finally:
            w.rec("release_start", impl=impl, hold=req)
            try:
                await lock.release()
            except Exception as exc:
                w.rec("release_error", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
            w.rec("release", impl=impl, hold=req, lost=lock.lost.is_set())
            current.pop("hold", None)
    reg.close()


async def _critical(w, impl: str, lock, reg: FencedRegister, token, hold: str, rnd, shared: bool) -> None:
    """Locks: check, read (fenced), hold, check, write (readers read again). The semaphore: check,
    enter, hold, check, leave (unfenced, as in :mod:`lab.semaphore_trial`)."""
    pause = w.hold_time(rnd)
    if impl != "aio-sem" and token is None:
        w.rec("no_token", impl=impl, hold=hold)
        return
    await lock.check()
    checked = time.monotonic()  # kept with the operation: a check that passed before the client heard of a loss
    if impl == "aio-sem":
        reg.read(None, hold=hold, checked=checked)
    else:
        v = reg.read(token, hold=hold, shared=shared, checked=checked)
    await asyncio.sleep(pause)
    await lock.check()
    checked = time.monotonic()
    if impl == "aio-sem":
        reg.read(None, hold=hold, shared=True, checked=checked)
    elif shared:
        reg.read(token, hold=hold, shared=True, checked=checked)
    else:
        reg.write(token, v + 1, hold=hold, checked=checked)
    w.rec("done", impl=impl, hold=hold)


def check(path: str) -> dict:
    """Verdict of one ``aio`` trial directory, in :func:`lab.check.check_trial`'s shape."""
    res = check_trial(path)
    capacity(path, res, "aio-sem", LEASES)
    return res
