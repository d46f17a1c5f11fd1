"""What every worker process of the safety lab shares (:mod:`lab.worker` runs it, and the trials in modules
of their own build their loops on it): the history :class:`Recorder`, the stop watch (the ``stop_file``
or the hard deadline ``stop_at``; pending acquires cancelled), the critical section (check, read, hold,
check, write on a :class:`~lab.fenced.FencedRegister`), a ZooKeeper session published for the nemesis,
and the nodes a session still owns at the end. A worker never judges itself.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import traceback
from typing import Callable, Optional

from .fenced import FencedRegister, StaleToken

FAST_RECONNECT = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5}
FENCED = ("fair", "rw", "election")  # implementations whose register operations must carry a token


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
        """Run the configured implementation's loops (:meth:`run_impl`) until stopped; a crash is recorded
        and raised."""
        self.rec("start", impl=self.cfg["impl"], ident=self.ident)
        watcher = threading.Thread(target=self._watch_stop, name="stop-watch", daemon=True)
        watcher.start()
        try:
            self.run_impl()
        except BaseException as exc:
            self.rec("crash", error=f"{type(exc).__name__}: {exc}", tb=traceback.format_exc())
            raise
        self.rec("exit")
        return 0

    def run_impl(self) -> None:
        """The loops of ``cfg["impl"]`` (:class:`lab.worker.LabWorker` picks them)."""
        raise NotImplementedError

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

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except BaseException as exc:
            self.rec("crash", error=f"{type(exc).__name__}: {exc}", tb=traceback.format_exc(), loop=fn.__name__)

    def _state_recorder(self, impl: str, current: dict):
        def on_state(_obj, state: str) -> None:
            holds = current.get("holds")
            if holds is None:
                self.rec("state", impl=impl, hold=current.get("hold"), state=state)
            else:  # a lock object shared by threads: the change is every one of their holds'
                self.rec("state", impl=impl, holds=sorted(holds.copy()), state=state)

        return on_state



def _seq(node: Optional[str]) -> Optional[int]:
    if not node:
        return None
    digits = node[-10:]
    return int(digits) if digits.isdigit() else None


def _sid(client) -> Optional[str]:
    cid = client.client_id
    return f"{cid[0]:x}" if cid else None

