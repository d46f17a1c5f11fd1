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
import traceback
from typing import Callable, Optional

from .fenced import FencedRegister, StaleToken

FAST_RECONNECT = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5}
RW_WRITE_SHARE = 0.25
FENCED = ("fair", "rw", "election")  # implementations whose register operations must carry a token
MIXED_IMPLS = ("mk-zk", "mk-kazoo", "mk-refusal", "mc-zk", "mc-curator")  # lab.mixed_worker's loops
TRIAL_MODULES = {"semaphore": "lab.semaphore_trial", "txn": "lab.txn_trial", "aio": "lab.aio_trial",
                 "handover": "lab.handover_trial", "multilock": "lab.multilock_trial", "revoke": "lab.revoke_trial"}
REDIS_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


class Recorder:
    """Appends one JSON line per event to the worker's history (one write(2) per line, O_APPEND)."""

    def __init__(self, path: str, slot: int, gen: int) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._base = {"slot": slot, "gen": gen, "pid": os.getpid()}

    def __call__(self, ev: str, **kw) -> None:
        rec = {"t": time.monotonic(), "wall": time.time(), "ev": ev, **self._base, **kw}
        os.write(self._fd, (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode())


class NotHeld(Exception):
    """A baseline's own check (``is_acquired``) says the lock is not held."""


class Worker:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.slot = cfg["slot"]
        self.rec = Recorder(cfg["out"], self.slot, cfg["gen"])
        self.rnd = random.Random(cfg["seed"])
        self.stop = threading.Event()
        self.cancels: list = []  # callables that stop a pending acquire
        self.ident = f"s{self.slot}-p{os.getpid()}"

    # -- common -------------------------------------------------------------------------------------
    def stopping(self) -> bool:
        return self.stop.is_set() or time.monotonic() >= self.cfg["stop_at"]

    def remaining(self) -> float:
        return max(0.0, self.cfg["stop_at"] - time.monotonic())

    def hold_time(self, rnd: random.Random) -> float:
        lo, hi = self.cfg["hold"]
        return rnd.uniform(lo, hi)

    def rmw(self, impl: str, check: Callable[[], None], reg: FencedRegister, token, hold: str, rnd, shared=False):
        """The critical section: check, read, hold, check, write (readers: check, read, hold, check, read)."""
        pause = self.hold_time(rnd)
        check()
        checked = time.monotonic()  # kept with the operation: a pause may freeze us between check and act
        v = reg.read(token, hold=hold, shared=shared, checked=checked)
        time.sleep(pause)
        check()
        checked = time.monotonic()
        if shared:
            reg.read(token, hold=hold, shared=True, checked=checked)
        else:
            reg.write(token, v + 1, hold=hold, checked=checked)
        self.rec("done", impl=impl, hold=hold)

    def critical(self, impl: str, check, reg, token, hold: str, rnd, lost_types: tuple, shared=False) -> None:
        if token is None and impl in FENCED:
            self.rec("no_token", impl=impl, hold=hold)  # the hold was lost before we could read its token
            return
        try:
            self.rmw(impl, check, reg, token, hold, rnd, shared)
        except lost_types as exc:
            self.rec("check_fail", impl=impl, hold=hold, error=f"{type(exc).__name__}: {exc}")
        except StaleToken as exc:
            self.rec("rejected", impl=impl, hold=hold, token=token, error=str(exc))

    def run(self) -> int:
        self.rec("start", impl=self.cfg["impl"], ident=self.ident)
        watcher = threading.Thread(target=self._watch_stop, name="stop-watch", daemon=True)
        watcher.start()
        try:
            if self.cfg["impl"] == "zk":
                self.run_zk()
            elif self.cfg["impl"] == "kazoo":
                self.run_kazoo()
            elif self.cfg["impl"] == "redis":
                self.run_redis()
            elif self.cfg["impl"] in MIXED_IMPLS:
                from . import mixed_worker

                mixed_worker.run(self)
            elif self.cfg["impl"] in TRIAL_MODULES:  # trials whose workers live in modules of their own
                importlib.import_module(TRIAL_MODULES[self.cfg["impl"]]).run_worker(self)
            else:
                raise ValueError(f"unknown impl {self.cfg['impl']!r}")
        except BaseException as exc:
            self.rec("crash", error=f"{type(exc).__name__}: {exc}", tb=traceback.format_exc())
            raise
        self.rec("exit")
        return 0

    def _watch_stop(self) -> None:
        while not self.stop.is_set():
            if os.path.exists(self.cfg["stop_file"]) or time.monotonic() >= self.cfg["stop_at"]:
                self.rec("stop")
                self.stop.set()
                for fn in list(self.cancels):
                    try:
                        fn()
                    except Exception as exc:
                        self.rec("cancel_error", error=repr(exc))
                return
            time.sleep(0.05)

    # -- ZooKeeper clients ----------------------------------------------------------------------------
    def connect(self):
        from kazoo.client import KazooClient

        client = KazooClient(
            hosts=self.cfg["hosts"], timeout=self.cfg["session_timeout"], connection_retry=dict(FAST_RECONNECT)
        )

        def on_state(state) -> None:  # kazoo's thread: record and return
            cid = client.client_id
            self.rec("zk_state", state=str(state), session=f"{cid[0]:x}" if cid else None)

        client.add_listener(on_state)
        client.start(timeout=30)
        threading.Thread(target=self._publish_session, args=(client,), name="session-pub", daemon=True).start()
        return client

    def _publish_session(self, client) -> None:
        """Keep ``session_file`` naming our current session (id, password), for the nemesis."""
        last = None
        while not self.stop.is_set():
            cid = client.client_id
            if cid and client.connected and cid[0] != last:
                last = cid[0]
                self.rec("session", session=f"{cid[0]:x}")
                tmp = self.cfg["session_file"] + ".tmp"
                with open(tmp, "w") as f:
                    json.dump({"session": cid[0], "password": cid[1].hex(), "pid": os.getpid()}, f)
                os.replace(tmp, self.cfg["session_file"])
            time.sleep(0.02)

    def own_nodes(self, client, paths: list) -> list:
        """Nodes under ``paths`` still owned by our session (after everything was released)."""
        from kazoo.exceptions import NoNodeError

        cid = client.client_id
        if not cid or not client.connected:
            return []
        out = []
        for path in paths:
            try:
                children = client.get_children(path)
            except NoNodeError:
                continue
            for name in children:
                stat = client.exists(f"{path}/{name}")
                if stat is not None and stat.ephemeralOwner == cid[0]:
                    out.append(f"{path}/{name}")
        return out

    def close_client(self, client, paths: list) -> None:
        try:
            self.rec("final", own_nodes=self.own_nodes(client, paths))
        except Exception as exc:
            self.rec("final_error", error=repr(exc))
        client.stop()
        client.close()

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

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except BaseException as exc:
            self.rec("crash", error=f"{type(exc).__name__}: {exc}", tb=traceback.format_exc(), loop=fn.__name__)

    def _state_recorder(self, impl: str, current: dict):
        def on_state(_obj, state: str) -> None:
            self.rec("state", impl=impl, hold=current.get("hold"), state=state)

        return on_state

    def loop_fair(self, client, paths, rnd) -> None:
        from zkrecipes import FairLock

        lock = FairLock(client, paths["fair"], identifier=self.ident)
        current: dict = {}
        lock.add_listener(self._state_recorder("fair", current))
        self.cancels.append(lock.cancel)
        self._lock_loop("fair", client, lambda: (lock, "x"), rnd, current)

    def loop_rw(self, client, paths, rnd) -> None:
        from zkrecipes import ReadWriteLock

        rw = ReadWriteLock(client, paths["rw"], identifier=self.ident)
        current: dict = {}
        for side in (rw.read(), rw.write()):
            side.add_listener(self._state_recorder("rw", current))
            self.cancels.append(side.cancel)

        def pick():
            return (rw.write(), "x") if rnd.random() < RW_WRITE_SHARE else (rw.read(), "s")

        self._lock_loop("rw", client, pick, rnd, current)

    def _lock_loop(self, impl: str, client, pick, rnd, current: dict) -> None:
        """Loop over one zkrecipes lock; ``pick()`` returns (lock object, mode "x" or "s") for each round.
        ``current["hold"]`` names the hold in progress, for the state listeners."""
        from zkrecipes import LockLost

        reg = FencedRegister(self.cfg["registers"][impl])
        n = 0
        while not self.stopping():
            lock, mode = pick()
            req = f"{self.slot}.{os.getpid()}.{impl}.{n}"
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


def _seq(node: Optional[str]) -> Optional[int]:
    if not node:
        return None
    digits = node[-10:]
    return int(digits) if digits.isdigit() else None


def _sid(client) -> Optional[str]:
    cid = client.client_id
    return f"{cid[0]:x}" if cid else None


def main(argv: Optional[list] = None) -> int:
    import logging

    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        cfg = json.load(f)
    logging.basicConfig(level=logging.CRITICAL)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the nemesis asks for stacks when a lock stalls
    return Worker(cfg).run()


if __name__ == "__main__":
    sys.exit(main())
