"""A worker process of the safety lab (:mod:`lab.run`); not meant to be run by hand.

``python -m lab.worker CONFIG.json`` connects with its own session and loops:
acquire, read-modify-write a :class:`~lab.fenced.FencedRegister` presenting the lock's
fencing token, hold a random short time, release. Every step is appended to the worker's own JSON-lines
history with monotonic (``t``, comparable across processes on one Linux host) and wall-clock (``wall``)
times. The worker never judges itself: the lab's checker reads the histories afterwards.

Implementations (``impl`` in the config):

- ``zk``: three threads on one session -- a :class:`~zkrecipes.FairLock`, a
  :class:`~zkrecipes.ReadWriteLock` (25 % writers) and a :class:`~zkrecipes.LeaderElection`; ``check()``
  before each register operation, the lock's ``token`` presented to the register, listeners recorded.
- ``kazoo``: kazoo's own ``Lock``. It has no fencing token (the node's czxid would take an extra read)
  and never tells a holder its session ended; ``is_acquired`` is checked before each operation (it is
  all kazoo offers) and the register is used unfenced.
- ``semaphore``, ``txn``, ``aio``, ``handover``, ``multilock``, ``revoke``: see :mod:`lab.semaphore_trial`,
  :mod:`lab.txn_trial`, :mod:`lab.aio_trial`, :mod:`lab.handover_trial`, :mod:`lab.multilock_trial` and
  :mod:`lab.revoke_trial` (``run_worker(worker)``, with this class's recorder, client and stop handling).
- ``redis``: the classic single-instance Redis lock: ``SET key token NX PX ttl`` polled every 1 ms,
  released with a Lua compare-and-delete. Its random token is not ordered, so the register is unfenced.

The worker stops when the file ``stop_file`` appears (pending acquires are cancelled) or at the hard
deadline ``stop_at``; before exiting it records which lock nodes its session still owns.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import random
import signal
import sys
import threading
import time
from typing import Optional

from .fenced import FencedRegister
from .worker_base import NotHeld, Worker, _seq, _sid

RW_WRITE_SHARE = 0.25
RW_THREADS = 4  # threads per worker process sharing one ReadWriteLock (issue 48: readers join one node)
MIXED_IMPLS = ("mk-zk", "mk-kazoo", "mk-refusal", "mc-zk", "mc-curator")  # lab.mixed_worker's loops
TRIAL_MODULES = {"semaphore": "lab.semaphore_trial", "txn": "lab.txn_trial", "aio": "lab.aio_trial",
                 "handover": "lab.handover_trial", "multilock": "lab.multilock_trial", "revoke": "lab.revoke_trial"}
REDIS_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


class LabWorker(Worker):
    """A worker of the ``zk``, ``kazoo`` and ``redis`` trials; the mixed fleets' and the other trials' loops
    live in their own modules (:mod:`lab.mixed_worker`, ``lab.<trial>_trial.run_worker``)."""

    def run_impl(self) -> None:
        impl = self.cfg["impl"]
        if impl == "zk":
            self.run_zk()
        elif impl == "kazoo":
            self.run_kazoo()
        elif impl == "redis":
            self.run_redis()
        elif impl in MIXED_IMPLS:
            from . import mixed_worker

            mixed_worker.run(self)
        elif impl in TRIAL_MODULES:  # trials whose workers live in modules of their own
            importlib.import_module(TRIAL_MODULES[impl]).run_worker(self)
        else:
            raise ValueError(f"unknown impl {impl!r}")

    # -- zkrecipes --------------------------------------------------------------------------------------
    def run_zk(self) -> None:
        client = self.connect()
        root = self.cfg["root"]
        paths = {name: f"{root}/{name}" for name in ("fair", "rw", "election")}
        loops = [self.loop_fair, self.loop_rw, self.loop_election]
        threads = []
        for k, fn in enumerate(loops):
            rnd = random.Random(f"{self.cfg['seed']}-{k}")
            t = threading.Thread(target=self._guard, args=(fn, client, paths, rnd), name=fn.__name__, daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        self.close_client(client, list(paths.values()))


    def loop_fair(self, client, paths, rnd) -> None:
        from zkrecipes import FairLock

        lock = FairLock(client, paths["fair"], identifier=self.ident)
        current: dict = {}
        lock.add_listener(self._state_recorder("fair", current))
        self.cancels.append(lock.cancel)
        self._lock_loop("fair", client, lambda: (lock, "x"), rnd, current)

    def loop_rw(self, client, paths, rnd) -> None:
        """RW_THREADS threads share one ReadWriteLock object, as a service's request threads do: readers of
        this process join one read node (with no request while the queue behind it is known clear), and
        every thread writes now and then, so writers come from every process."""
        from zkrecipes import ReadWriteLock

        rw = ReadWriteLock(client, paths["rw"], identifier=self.ident)
        current: dict = {"holds": set()}  # the holds in progress on this object, told of each state change
        for side in (rw.read(), rw.write()):
            side.add_listener(self._state_recorder("rw", current))
            self.cancels.append(side.cancel)

        def loop(k: int) -> None:
            r = rnd if k == 0 else random.Random(f"{self.cfg['seed']}-rw-{k}")

            def pick():
                return (rw.write(), "x") if r.random() < RW_WRITE_SHARE else (rw.read(), "s")

            self._lock_loop("rw", client, pick, r, current, tag=f"t{k}")

        threads = [threading.Thread(target=self._guard, args=(loop, k), name=f"loop_rw-{k}", daemon=True)
                   for k in range(1, RW_THREADS)]
        for t in threads:
            t.start()
        loop(0)
        for t in threads:
            t.join()

    def _lock_loop(self, impl: str, client, pick, rnd, current: dict, tag: str = "") -> None:
        """Loop over one zkrecipes lock; ``pick()`` returns (lock object, mode "x" or "s") for each round.
        ``current["hold"]`` names the hold in progress, for the state listeners (``current["holds"]``, if
        there, every hold in progress of the threads sharing the lock object; ``tag`` tells their
        requests apart)."""
        from zkrecipes import LockLost

        reg = FencedRegister(self.cfg["registers"][impl])
        n = 0
        while not self.stopping():
            lock, mode = pick()
            req = f"{self.slot}.{os.getpid()}.{impl}{tag}.{n}"
            n += 1
            self.rec("acquire", impl=impl, req=req, mode=mode)
            try:
                ok = lock.acquire(timeout=max(0.01, self.remaining()))
            except Exception as exc:
                self.rec("acquire_error", impl=impl, req=req, error=f"{type(exc).__name__}: {exc}")
                self.stop.wait(0.1)
                continue
            if not ok:
                self.rec("acquire_fail", impl=impl, req=req)
                continue
            current["hold"] = req
            current.get("holds", set()).add(req)
            token, node = lock.token, lock.node
            self.rec("grant", impl=impl, req=req, hold=req, mode=mode, token=token, node=node, seq=_seq(node),
                     session=_sid(client))
            try:
                self.critical(impl, lock.check, reg, token, req, rnd, (LockLost,), shared=(mode == "s"))
            finally:
                self.rec("release_start", impl=impl, hold=req)
                try:
                    lock.release()
                except Exception as exc:
                    self.rec("release_error", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
                self.rec("release", impl=impl, hold=req, lost=lock.lost.is_set())
                current.pop("hold", None)
                current.get("holds", set()).discard(req)
        reg.close()

    def loop_election(self, client, paths, rnd) -> None:
        from zkrecipes import LeaderElection, LockLost

        el = LeaderElection(client, paths["election"], identifier=self.ident)
        current: dict = {}
        el.add_listener(self._state_recorder("election", current))
        self.cancels.append(el.cancel)
        reg = FencedRegister(self.cfg["registers"]["election"])
        n = 0
        while not self.stopping():
            req = f"{self.slot}.{os.getpid()}.election.{n}"
            n += 1
            self.rec("acquire", impl="election", req=req, mode="x")
            try:
                ok = el.campaign(timeout=max(0.01, self.remaining()))
            except Exception as exc:
                self.rec("acquire_error", impl="election", req=req, error=f"{type(exc).__name__}: {exc}")
                self.stop.wait(0.1)
                continue
            if not ok:
                self.rec("acquire_fail", impl="election", req=req)
                continue
            current["hold"] = req
            token, node = el.token, el.node
            self.rec("grant", impl="election", req=req, hold=req, mode="x", token=token, node=node, seq=_seq(node),
                     session=_sid(client))
            try:
                self.critical("election", el.check, reg, token, req, rnd, (LockLost,))
            finally:
                self.rec("release_start", impl="election", hold=req)
                lost = el.lost.is_set()
                try:
                    el.resign()
                except Exception as exc:
                    self.rec("release_error", impl="election", hold=req, error=f"{type(exc).__name__}: {exc}")
                self.rec("release", impl="election", hold=req, lost=lost)
                current.pop("hold", None)
        reg.close()

    # -- kazoo's Lock ------------------------------------------------------------------------------------
    def run_kazoo(self) -> None:
        from kazoo.exceptions import CancelledError, LockTimeout

        client = self.connect()
        path = f"{self.cfg['root']}/kazoo"
        reg = FencedRegister(self.cfg["registers"]["kazoo"])
        rnd = random.Random(f"{self.cfg['seed']}-kazoo")
        holder: dict = {"lock": client.Lock(path, identifier=self.ident)}
        self.cancels.append(lambda: holder["lock"].cancel())
        n = 0
        while not self.stopping():
            lock = holder["lock"]
            req = f"{self.slot}.{os.getpid()}.kazoo.{n}"
            n += 1
            self.rec("acquire", impl="kazoo", req=req, mode="x")
            try:
                ok = lock.acquire(timeout=max(0.01, self.remaining()))
            except (LockTimeout, CancelledError):
                ok = False
            except Exception as exc:
                self.rec("acquire_error", impl="kazoo", req=req, error=f"{type(exc).__name__}: {exc}")
                holder["lock"] = client.Lock(path, identifier=self.ident)  # a fresh object, as a careful user would
                self.stop.wait(0.1)
                continue
            if not ok:
                self.rec("acquire_fail", impl="kazoo", req=req)
                if self.stopping():
                    break
                continue
            node = lock.node
            self.rec("grant", impl="kazoo", req=req, hold=req, mode="x", token=None, node=node, seq=_seq(node),
                     session=_sid(client))

            def check(lock=lock) -> None:
                if not lock.is_acquired:
                    raise NotHeld("kazoo Lock.is_acquired is False")

            try:
                self.critical("kazoo", check, reg, None, req, rnd, (NotHeld,))
            finally:
                self.rec("release_start", impl="kazoo", hold=req)
                try:
                    lock.release()
                except Exception as exc:
                    self.rec("release_error", impl="kazoo", hold=req, error=f"{type(exc).__name__}: {exc}")
                    holder["lock"] = client.Lock(path, identifier=self.ident)
                self.rec("release", impl="kazoo", hold=req, lost=None)
        reg.close()
        self.close_client(client, [path])

    # -- the classic Redis lock ------------------------------------------------------------------------
    def run_redis(self) -> None:
        import redis

        r = redis.Redis(host="127.0.0.1", port=self.cfg["redis_port"], socket_timeout=1.0,
                        socket_connect_timeout=1.0)
        key = self.cfg["redis_key"]
        ttl_ms = int(self.cfg["session_timeout"] * 1000)
        release = r.register_script(REDIS_RELEASE)
        reg = FencedRegister(self.cfg["registers"]["redis"])
        rnd = random.Random(f"{self.cfg['seed']}-redis")
        n = 0
        while not self.stopping():
            req = f"{self.slot}.{os.getpid()}.redis.{n}"
            n += 1
            token = f"{self.ident}:{n}:{rnd.getrandbits(64):016x}"
            self.rec("acquire", impl="redis", req=req, mode="x", rtoken=token)
            got = False
            errors = 0
            while not self.stopping():
                try:
                    got = bool(r.set(key, token, nx=True, px=ttl_ms))
                except redis.RedisError:
                    errors += 1
                    got = False
                if got:
                    break
                time.sleep(0.001)
            if not got:
                self.rec("acquire_fail", impl="redis", req=req, errors=errors)
                continue
            self.rec("grant", impl="redis", req=req, hold=req, mode="x", token=None, node=token, seq=None,
                     errors=errors)
            try:
                self.critical("redis", lambda: None, reg, None, req, rnd, ())
            finally:
                self.rec("release_start", impl="redis", hold=req)
                deleted = None
                try:
                    deleted = int(release(keys=[key], args=[token]))
                except redis.RedisError as exc:
                    self.rec("release_error", impl="redis", hold=req, error=f"{type(exc).__name__}: {exc}")
                self.rec("release", impl="redis", hold=req, lost=None, deleted=deleted)
        reg.close()
        try:
            left = r.get(key)
            mine = left is not None and left.decode().startswith(self.ident + ":")
            self.rec("final", own_nodes=[key] if mine else [])
        except redis.RedisError as exc:
            self.rec("final_error", error=repr(exc))
        r.close()


def main(argv: Optional[list] = None) -> int:
    import logging

    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        cfg = json.load(f)
    logging.basicConfig(level=logging.CRITICAL)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the nemesis asks for stacks when a lock stalls
    return LabWorker(cfg).run()


if __name__ == "__main__":
    sys.exit(main())
