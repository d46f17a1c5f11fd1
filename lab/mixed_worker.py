"""Worker loops of the lab's mixed-fleet trials (:mod:`lab.mixed_trial`), run by :mod:`lab.worker`.

Every contender of a mixed trial -- zkrecipes in kazoo's or Curator's node format, kazoo's own ``Lock``,
Curator's ``InterProcessMutex`` -- fences its register operations with its node's czxid (zkrecipes:
``lock.token``; kazoo and Curator: one extra ``exists`` read after the grant), and before releasing *verifies*
its hold: a ``sync`` then an ``exists`` of its node, through its own session. A node found still there
and still ours proves the hold was valid from its grant at least until the verification began; the
checker then requires that no two verified intervals of different holds intersect (two valid holders at
once), which fencing alone would hide behind rejections.

- ``mk-zk`` / ``mc-zk``: :class:`~zkrecipes.FairLock` with ``protocol="kazoo"`` / ``"curator"``, state
  listeners recorded (the loss notices the checker requires of zkrecipes);
- ``mk-kazoo``: kazoo's ``Lock``; its only check is ``is_acquired``;
- ``mc-curator``: a Java child (``lab/LabCuratorWorker.java``) hosting several Curator contenders, each
  with its own session; this process performs their register operations (Java cannot take the register's
  ``flock``), publishes their sessions for the nemesis, and writes their history. Its only check is
  ``isOwnedByCurrentThread()``;
- ``mk-refusal``: zkrecipes' default node format on the mixed-kazoo path; every attempt must end in a
  :class:`~zkrecipes.LockError` naming kazoo's format (recorded as ``refused``), never a hold.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import threading
import time
from typing import Callable, Optional

from .fenced import FencedRegister, StaleToken
from .worker_base import NotHeld, Worker, _seq, _sid

REFUSAL_ATTEMPTS = 5


def run(w: Worker) -> None:
    impl = w.cfg["impl"]
    if impl in ("mk-zk", "mc-zk"):
        run_zkrecipes(w, "kazoo" if impl == "mk-zk" else "curator")
    elif impl == "mk-kazoo":
        run_kazoo(w)
    elif impl == "mc-curator":
        run_curator(w)
    elif impl == "mk-refusal":
        run_refusal(w)
    else:
        raise ValueError(f"unknown mixed impl {impl!r}")


def verify(client, node: str, token: int, timeout: float) -> str:
    """``alive`` when, after a sync, ``node`` still exists with czxid ``token`` and is owned by our session."""
    try:
        client.sync_async(node.rsplit("/", 1)[0]).get(timeout=timeout)
        stat = client.exists(node)
    except Exception as exc:
        return f"error:{type(exc).__name__}"
    cid = client.client_id
    if stat is not None and stat.czxid == token and cid and stat.ephemeralOwner == cid[0]:
        return "alive"
    return "gone"


def _hold_loop(w: Worker, impl: str, client, acquire: Callable[[], bool], granted: Callable[[], tuple],
               check: Callable[[], None], release: Callable[[], None], lost_types: tuple, current: dict,
               rnd: random.Random) -> None:
    """acquire -> grant (token, node) -> fenced read-modify-write -> verify -> release, until stopped."""
    reg = FencedRegister(w.cfg["registers"][impl])
    T = w.cfg["session_timeout"]
    n = 0
    while not w.stopping():
        req = f"{w.slot}.{os.getpid()}.{impl}.{n}"
        n += 1
        w.rec("acquire", impl=impl, req=req, mode="x")
        try:
            ok = acquire()
        except Exception as exc:
            w.rec("acquire_error", impl=impl, req=req, error=f"{type(exc).__name__}: {exc}")
            w.stop.wait(0.1)
            continue
        if not ok:
            w.rec("acquire_fail", impl=impl, req=req)
            continue
        current["hold"] = req
        token, node = granted()
        w.rec("grant", impl=impl, req=req, hold=req, mode="x", token=token, node=node, seq=_seq(node),
              session=_sid(client))
        try:
            if token is None:
                w.rec("no_token", impl=impl, hold=req)  # the hold was gone before we could read its czxid
            else:
                w.critical(impl, check, reg, token, req, rnd, lost_types)
                t0 = time.monotonic()
                w.rec("verify", impl=impl, hold=req, t0=t0, result=verify(client, node, token, T))
        finally:
            w.rec("release_start", impl=impl, hold=req)
            try:
                release()
            except Exception as exc:
                w.rec("release_error", impl=impl, hold=req, error=f"{type(exc).__name__}: {exc}")
            w.rec("release", impl=impl, hold=req, lost=None)
            current.pop("hold", None)
    reg.close()


def run_zkrecipes(w: Worker, protocol: str) -> None:
    from zkrecipes import FairLock, LockLost

    impl = w.cfg["impl"]
    client = w.connect()
    path = w.cfg["path"]
    lock = FairLock(client, path, identifier=w.ident, protocol=protocol)
    current: dict = {}
    lock.add_listener(w._state_recorder(impl, current))
    w.cancels.append(lock.cancel)
    rnd = random.Random(f"{w.cfg['seed']}-{impl}")
    _hold_loop(w, impl, client, lambda: lock.acquire(timeout=max(0.01, w.remaining())),
               lambda: (lock.token, lock.node), lock.check, lock.release, (LockLost,), current, rnd)
    w.close_client(client, [path])


def run_kazoo(w: Worker) -> None:
    from kazoo.exceptions import CancelledError, LockTimeout

    impl = w.cfg["impl"]
    client = w.connect()
    path = w.cfg["path"]
    holder: dict = {"lock": client.Lock(path, identifier=w.ident)}
    w.cancels.append(lambda: holder["lock"].cancel())

    def acquire() -> bool:
        try:
            return bool(holder["lock"].acquire(timeout=max(0.01, w.remaining())))
        except (LockTimeout, CancelledError):
            return False
        except Exception:
            holder["lock"] = client.Lock(path, identifier=w.ident)  # a fresh object, as a careful user would
            raise

    def granted() -> tuple:
        node = f"{path}/{holder['lock'].node}"
        try:
            stat = client.exists(node)  # the czxid: one extra read
        except Exception:
            stat = None
        cid = client.client_id
        token = stat.czxid if stat is not None and cid and stat.ephemeralOwner == cid[0] else None
        return token, node

    def check() -> None:
        if not holder["lock"].is_acquired:
            raise NotHeld("kazoo Lock.is_acquired is False")

    def release() -> None:
        try:
            holder["lock"].release()
        except Exception:
            holder["lock"] = client.Lock(path, identifier=w.ident)
            raise

    rnd = random.Random(f"{w.cfg['seed']}-{impl}")
    _hold_loop(w, impl, client, acquire, granted, check, release, (NotHeld,), {}, rnd)
    w.close_client(client, [path])


def run_refusal(w: Worker) -> None:
    """Default-format FairLocks on the kazoo fleet's path: each attempt must be refused, never held."""
    from zkrecipes import FairLock, LockError

    impl = w.cfg["impl"]
    client = w.connect()
    path = w.cfg["path"]
    for n in range(w.cfg.get("attempts", REFUSAL_ATTEMPTS)):
        req = f"{w.slot}.{os.getpid()}.{impl}.{n}"
        lock = FairLock(client, path, identifier=w.ident)
        w.rec("acquire", impl=impl, req=req, mode="x")
        try:
            ok = lock.acquire(timeout=5.0)
        except LockError as exc:
            w.rec("refused", impl=impl, req=req, error=str(exc), state=lock.state)
            continue
        except Exception as exc:
            w.rec("acquire_error", impl=impl, req=req, error=f"{type(exc).__name__}: {exc}")
            continue
        if not ok:
            w.rec("acquire_fail", impl=impl, req=req)
            continue
        w.rec("grant", impl=impl, req=req, hold=req, mode="x", token=lock.token, node=lock.node, seq=_seq(lock.node),
              session=_sid(client))
        w.rec("release_start", impl=impl, hold=req)
        lock.release()
        w.rec("release", impl=impl, hold=req, lost=None)
    w.close_client(client, [path])


# -- the Curator half: a JVM of contenders, this process their register and recorder ---------------------------
def run_curator(w: Worker) -> None:
    from zkrecipes.testing._proc import die_with_parent

    cfg = w.cfg
    impl = cfg["impl"]
    k_count = int(cfg["contenders"])
    lo, hi = cfg["hold"]
    java = shutil.which("java") or "java"
    argv = [java, *cfg["java_opts"], "-cp", cfg["classpath"], "LabCuratorWorker", cfg["hosts"], cfg["path"],
            str(k_count), str(int(cfg["session_timeout"] * 1000)), str(int(lo * 1000)), str(int(hi * 1000)),
            str(random.Random(cfg["seed"]).getrandbits(31))]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, text=True,
                            bufsize=1, preexec_fn=die_with_parent)
    send_lock = threading.Lock()

    def send(line: str) -> None:
        with send_lock:
            try:
                assert proc.stdin is not None
                proc.stdin.write(line + "\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                pass

    w.cancels.append(lambda: send("stop"))
    reg = FencedRegister(cfg["registers"][impl])
    sessions: dict = {}
    own: list = []
    pid = os.getpid()

    def label(k: str, n: str) -> str:
        return f"{w.slot}.{pid}.{impl}.{k}-{n}"

    def at(ns: str) -> float:
        return int(ns) / 1e9

    assert proc.stdout is not None
    for line in proc.stdout:
        p = line.rstrip("\n").split(" ")
        ev = p[0]
        if ev == "session":
            k, sid, pw = int(p[1]), int(p[2], 16), p[3]
            sessions[k] = sid
            w.rec("session", session=p[2], contender=k)
            _publish(f"{cfg['session_file'][:-5]}-{k}.json", {"session": sid, "password": pw, "pid": pid})
            if len(sessions) == k_count and not os.path.exists(cfg["session_file"]):
                _publish(cfg["session_file"], {"session": sessions[0], "password": pw, "pid": pid,
                                               "contenders": k_count})
        elif ev == "state":
            state = {"SUSPENDED": "SUSPENDED", "LOST": "LOST"}.get(p[2], "CONNECTED")
            sid = sessions.get(int(p[1]))
            w.rec("zk_state", state=state, curator_state=p[2], contender=int(p[1]),
                  session=f"{sid:x}" if sid else None)
        elif ev == "acquire":
            w.rec("acquire", impl=impl, req=label(p[1], p[2]), mode="x", t=at(p[3]), contender=int(p[1]))
        elif ev in ("acquire_fail", "release_start", "release"):
            kw = {"req": label(p[1], p[2])} if ev == "acquire_fail" else {"hold": label(p[1], p[2])}
            w.rec(ev, impl=impl, t=at(p[3]), **kw)
        elif ev == "acquire_error":
            w.rec(ev, impl=impl, req=label(p[1], p[2]), error=" ".join(p[3:]))
        elif ev == "grant":
            token = int(p[4])
            sid = sessions.get(int(p[1]))
            w.rec("grant", impl=impl, req=label(p[1], p[2]), hold=label(p[1], p[2]), mode="x",
                  token=token if token >= 0 else None, node=f"{cfg['path']}/{p[3]}", seq=_seq(p[3]),
                  session=f"{sid:x}" if sid else None, t=at(p[5]), contender=int(p[1]))
            if token < 0:
                w.rec("no_token", impl=impl, hold=label(p[1], p[2]))
        elif ev == "op":
            hold = label(p[1], p[2])
            token = int(p[4])
            try:
                if p[3] == "read":
                    reply = f"ok {reg.read(token, hold=hold)}"
                else:
                    reg.write(token, int(p[5]), hold=hold)
                    reply = "ok 0"
            except StaleToken as exc:
                w.rec("rejected", impl=impl, hold=hold, token=token, error=str(exc))
                reply = "stale"
            send(f"reply {p[1]} {reply}")
        elif ev == "check_fail":
            w.rec(ev, impl=impl, hold=label(p[1], p[2]), error=" ".join(p[3:]))
        elif ev == "done":
            w.rec(ev, impl=impl, hold=label(p[1], p[2]))
        elif ev == "verify":
            w.rec("verify", impl=impl, hold=label(p[1], p[2]), t0=at(p[3]), result=p[4])
        elif ev == "release_error":
            w.rec(ev, impl=impl, hold=label(p[1], p[2]), error=" ".join(p[3:]))
        elif ev == "final":
            own += [n for n in p[2].split(",") if n != "-"]
        elif ev == "final_error":
            w.rec("final_error", error=" ".join(p[1:]), contender=p[1])
        elif ev == "exit":
            break
    w.rec("final", own_nodes=own)
    reg.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    if proc.returncode not in (0, None):
        w.rec("crash", error=f"the JVM exited with {proc.returncode}")


def _publish(path: str, info: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)


def session_file_of(base: str, contender: Optional[int]) -> str:
    """The session file of one contender of a JVM slot (``base`` is the slot's session file)."""
    return base if contender is None else f"{base[:-5]}-{contender}.json"
