"""One contender of the interop tests (tests/test_interop.py) in its own process: kazoo's own recipes, or
zkrecipes in a given protocol. Records every hold on CLOCK_MONOTONIC (``time.monotonic()``).

usage: interop_worker.py HOSTS PATH RECIPE HOLDS HOLD_MS
  RECIPE: kazoo-lock | kazoo-read | kazoo-write | kazoo-election
          zk-fair:PROTO | zk-read:PROTO | zk-write:PROTO | zk-elect:PROTO | zk-latch:PROTO
          (PROTO: zkrecipes, kazoo, curator)
stdin "go" starts it; stdout: "ready", per hold "hold RECIPE NODE T0 T1" (seconds), then "done", or
"error RECIPE TYPE MESSAGE" (a LockError from zkrecipes is reported, not raised).
"""

from __future__ import annotations

import sys
import time

from kazoo.client import KazooClient


def say(*words: object) -> None:
    print(*words, flush=True)


def main() -> int:
    hosts, path, recipe, holds, hold_ms = sys.argv[1:6]
    pause = int(hold_ms) / 1000.0
    zk = KazooClient(hosts=hosts, timeout=10.0)
    zk.start(30)
    name, _, proto = recipe.partition(":")
    if name.startswith("kazoo-"):
        make = {
            "kazoo-lock": lambda: zk.Lock(path, "kazoo-worker"),
            "kazoo-read": lambda: zk.ReadLock(path, "kazoo-worker"),
            "kazoo-write": lambda: zk.WriteLock(path, "kazoo-worker"),
            "kazoo-election": lambda: zk.Election(path, "kazoo-worker"),
        }[name]
    else:
        from zkrecipes import FairLock, LeaderElection, LeaderLatch, ReadWriteLock

        kw = {"protocol": proto} if proto else {}  # no protocol: what the code did before it had one
        make = {
            "zk-fair": lambda: FairLock(zk, path, "zk-worker", **kw),
            "zk-read": lambda: ReadWriteLock(zk, path, "zk-worker", **kw).read(),
            "zk-write": lambda: ReadWriteLock(zk, path, "zk-worker", **kw).write(),
            "zk-elect": lambda: LeaderElection(zk, path, "zk-worker", **kw),
            "zk-latch": lambda: LeaderLatch(zk, path, "zk-worker", **kw),
        }[name]
    say("ready")
    if sys.stdin.readline().strip() != "go":
        return 1
    try:
        for _ in range(int(holds)):
            obj = make()
            if name == "kazoo-election":
                seen: list = []

                def lead(election=obj, seen=seen) -> None:
                    t0 = time.monotonic()
                    time.sleep(pause)
                    seen.append((election.lock.node, t0, time.monotonic()))

                obj.run(lead)
                node, t0, t1 = seen[0]
            elif name == "zk-latch":  # as CuratorWorker's latch: start, await, hold, close
                obj.start()
                assert obj.wait()
                t0 = time.monotonic()
                time.sleep(pause)
                t1 = time.monotonic()
                node = obj.election.node.rsplit("/", 1)[1]
                obj.close()
            elif name == "zk-elect":
                obj.campaign()
                t0 = time.monotonic()
                time.sleep(pause)
                t1 = time.monotonic()
                node = obj.node.rsplit("/", 1)[1]
                obj.resign()
            else:
                obj.acquire()
                t0 = time.monotonic()
                time.sleep(pause)
                t1 = time.monotonic()
                node = obj.node
                node = node.rsplit("/", 1)[-1] if node else "?"
                obj.release()
            say("hold", recipe, node, repr(t0), repr(t1))
    except Exception as exc:  # a refusal is a result of the test, reported to it
        import traceback

        traceback.print_exc()
        say("error", recipe, type(exc).__name__, str(exc).replace("\n", " "))
    finally:
        zk.stop()
        zk.close()
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
