"""No node outlives its owner, even when nothing of the owner's runs any more (issue 37, item 2):

- a hold whose asyncio task ended is released although its event loop is closing or closed
  (``asyncio.run(lock.acquire())``): another client's contender is granted, our node is gone, the lock
  no longer says "held", and the "released" warning comes only once the node is gone;
- a process that exits while a thread (the main thread, a worker) or a task that ended (or whose loop
  was closed under it) still holds, without ``release()`` and without stopping its client, deletes its
  nodes at exit instead of leaving them until the server expires its session (30 s here).

And two hints (item 6): a plain ``with`` on an aio object points to ``async with``; a blocking threaded
acquire on an event loop's thread warns once per lock object.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from lockhelpers import children, wait_until

import zkrecipes
from zkrecipes import aio

# aio recipe -> (make it, make a threaded contender that it blocks)
RECIPES: Dict[str, Tuple[Callable[[Any, str], Any], Callable[[Any, str], Any]]] = {
    "FairLock": (lambda zk, p: aio.FairLock(zk, p), lambda zk, p: zkrecipes.FairLock(zk, p)),
    "ExclusiveLock": (lambda zk, p: aio.ExclusiveLock(zk, p), lambda zk, p: zkrecipes.ExclusiveLock(zk, p)),
    "ReadWriteLock.read": (lambda zk, p: aio.ReadWriteLock(zk, p).read(),
                           lambda zk, p: zkrecipes.ReadWriteLock(zk, p).write()),
    "ReadWriteLock.write": (lambda zk, p: aio.ReadWriteLock(zk, p).write(),
                            lambda zk, p: zkrecipes.ReadWriteLock(zk, p).read()),
    "Semaphore": (lambda zk, p: aio.Semaphore(zk, p, 1), lambda zk, p: zkrecipes.Semaphore(zk, p, 1)),
}
GRANT_DEADLINE = 5.0  # seconds; without the release the contender waits until the owner's client stops


def _gone(zk: Any, node: str, token: int) -> bool:
    """Our node (``token``: its czxid) no longer exists; an ExclusiveLock's successor reuses the name."""
    zk.sync(node.rsplit("/", 1)[0])
    stat = zk.exists(node)
    return stat is None or stat.czxid != token


class ReleaseLog(logging.Handler):
    """Records every "released" warning of zkrecipes and whether our node was gone when it was logged."""

    def __init__(self, zk: Any) -> None:
        super().__init__(logging.WARNING)
        self.zk = zk
        self.node: Optional[Tuple[str, int]] = None
        self.seen: List[Tuple[str, bool]] = []  # (message, node gone at that moment)
        self.ready = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if self.node is not None and self.node[0] in msg and "ended without releasing" in msg:
            self.seen.append((msg, _gone(self.zk, *self.node)))
            self.ready.set()

    def __enter__(self) -> "ReleaseLog":
        logging.getLogger("zkrecipes").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("zkrecipes").removeHandler(self)


class Contender:
    """A threaded lock of another client acquiring on its own thread; ``granted`` once it holds."""

    def __init__(self, lock: Any) -> None:
        self.lock, self.granted, self.done = lock, threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        if self.lock.acquire(timeout=30):
            self.granted.set()
            self.done.wait(30)
            self.lock.release()

    def finish(self) -> None:
        self.done.set()
        self.thread.join(15)
        assert not self.thread.is_alive()


def _states(lock: Any) -> List[Tuple[str, threading.Thread]]:
    told: List[Tuple[str, threading.Thread]] = []
    lock.add_listener(lambda _lock, state: told.append((state, threading.current_thread())))
    return told


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_hold_left_by_asyncio_run_is_released_as_its_loop_closes(zk_factory, recipe):
    a, b = zk_factory(), zk_factory()
    make, make_contender = RECIPES[recipe]
    path = f"/closed-{recipe.lower()}"
    lock = make(a, path)
    told = _states(lock)
    contender: List[Contender] = []
    released = ReleaseLog(b)

    async def forgetful() -> Tuple[str, int]:
        assert await lock.acquire(timeout=10)  # and returns without release(): asyncio.run closes the loop
        node, token = lock.node, lock.token
        released.node = (node, token)
        contender.append(Contender(make_contender(b, path)))
        if recipe != "ExclusiveLock":  # (an ExclusiveLock's waiter makes no node: it watches ours)
            deadline = time.monotonic() + 10
            while len(children(b, path)) < 2:  # the contender is queued behind us
                assert time.monotonic() < deadline, "the contender never queued"
                await asyncio.sleep(0.01)
        assert not contender[0].granted.is_set()
        return node, token

    with released:
        node, token = asyncio.run(forgetful())
        closed = time.monotonic()
        try:
            assert contender[0].granted.wait(GRANT_DEADLINE), "the contender is still blocked by the closed loop's hold"
            granted_after = time.monotonic() - closed
            assert _gone(b, node, token)
            wait_until(lambda: lock.state != "held", 5, "the lock no longer says held")  # (once the delete's
            wait_until(lambda: told and told[-1][0] == "idle", 5, "the listener told 'idle'")  # reply is in)
            assert released.ready.wait(5), "no warning naming the path and the ended task"
        finally:
            contender[0].finish()
    [(msg, gone_then)] = released.seen
    assert gone_then, f"'released' was logged before the node was gone: {msg}"
    assert msg.startswith(f"{path}: released ") and "task" in msg, msg
    assert granted_after < GRANT_DEADLINE  # measured: about one round trip after the loop closed
    assert not children(b, path)


def test_run_until_complete_then_close_releases_the_hold(zk_factory):
    """A loop run by hand: stopped after the acquire, closed without cancelling anything."""
    a, b = zk_factory(), zk_factory()
    lock = aio.FairLock(a, "/by-hand")
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(lock.acquire(timeout=10))
    finally:
        loop.close()
    wait_until(lambda: not children(b, "/by-hand"), GRANT_DEADLINE, "the closed loop's node deleted")
    wait_until(lambda: lock.state == "idle", 5, "the lock no longer held")
    other = zkrecipes.FairLock(b, "/by-hand")
    assert other.acquire(blocking=False)
    other.release()


def test_a_task_that_ends_holding_as_asyncio_run_returns_is_released(zk_factory):
    """The task's release is handed over while asyncio.run cancels what is left and closes the loop."""
    a, b = zk_factory(), zk_factory()
    lock = aio.FairLock(a, "/background")
    released = ReleaseLog(b)

    async def main() -> None:
        async def worker() -> None:
            assert await lock.acquire(timeout=10)
            released.node = (lock.node, lock.token)

        await asyncio.ensure_future(worker())  # main returns at once: the loop closes right away

    with released:
        asyncio.run(main())
        wait_until(lambda: not children(b, "/background"), GRANT_DEADLINE, "the ended task's node deleted")
        wait_until(lambda: lock.state == "idle", 5, "the lock no longer held")
        assert released.ready.wait(5), "no warning naming the path and the ended task"
    [(msg, gone_then)] = released.seen
    assert gone_then, f"'released' was logged before the node was gone: {msg}"


def test_in_a_live_loop_the_listeners_are_told_on_the_loops_thread(zk_factory):
    """The node of an ended task is deleted off the loop; its listeners still run on the loop's thread."""
    a = zk_factory()
    lock = aio.FairLock(a, "/live")
    told = _states(lock)

    async def main() -> None:
        async def worker() -> None:
            assert await lock.acquire(timeout=10)

        await asyncio.ensure_future(worker())
        deadline = time.monotonic() + 10
        while lock.state != "idle":  # the loop keeps running: it tells its own listeners
            assert time.monotonic() < deadline, "the ended task's hold was never released"
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert [s for s, _ in told] == ["waiting", "held", "idle"]
    assert {t for _, t in told} == {threading.main_thread()}
    assert not children(a, "/live")


# -- interpreter exit ---------------------------------------------------------------------------------
CHILD = textwrap.dedent("""
    import asyncio, logging, sys, threading
    from kazoo.client import KazooClient
    import zkrecipes
    from zkrecipes import aio

    logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
    hosts, path, who = sys.argv[1:4]
    no_thread_at_exit, who = who.endswith("-nothread"), who.replace("-nothread", "")
    zk = KazooClient(hosts=hosts, timeout=30.0)  # far longer than the test waits: no expiry helps it
    zk.start(timeout=30)
    if who == "main":
        lock = zkrecipes.FairLock(zk, path)
        assert lock.acquire(timeout=10)
        node = lock.node
    elif who == "worker":  # a non-daemon thread that ends holding just before the process exits
        lock, got = zkrecipes.FairLock(zk, path), threading.Event()
        go = threading.Event()

        def work():
            assert lock.acquire(timeout=10)
            got.set()
            go.wait(30)

        worker = threading.Thread(target=work, name="worker")
        worker.start()
        got.wait(10)
        node = zk.get_children(path)[0]
    elif who == "pending":  # a task still waiting, holding, in a loop closed without cancelling it
        lock, loop = aio.FairLock(zk, path), asyncio.new_event_loop()
        got = loop.create_future()

        async def holder():
            assert await lock.acquire(timeout=10)
            got.set_result(lock.node)
            await asyncio.Event().wait()

        task = loop.create_task(holder())
        node = loop.run_until_complete(got)
        loop.close()
    else:  # "task": asyncio.run(lock.acquire()) as the last thing the process does
        lock = aio.FairLock(zk, path)
        node = None
    if node is not None:
        print(node.rsplit("/", 1)[-1], flush=True)
        sys.stdin.readline()  # the test has seen the node
    if who == "worker":
        go.set()
    elif who == "task":
        asyncio.run(lock.acquire(timeout=10))
    if no_thread_at_exit:  # as on Python >= 3.12: "can't create new thread at interpreter shutdown"
        def refuse(self):
            raise RuntimeError("can't create new thread at interpreter shutdown")

        threading.Thread.start = refuse
    # no release(), no zk.stop(): the process just ends
""")


@pytest.mark.parametrize("who", ["main", "worker", "task", "pending", "main-nothread"])
def test_a_process_that_exits_holding_deletes_its_node(zk_ensemble, zk_namespace, zk, who):
    path = f"/exit-{who}"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, zk_ensemble.hosts + zk_namespace, path, who],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if who != "task":
            node = proc.stdout.readline().strip()
            assert node and children(zk, path) == [node], (node, proc.stderr.read() if not node else "")
            proc.stdin.write("seen\n")
            proc.stdin.flush()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    exited = time.monotonic()
    assert proc.returncode == 0, err
    wait_until(lambda: not children(zk, path), 3.0, f"the exited process's node deleted (stderr: {err})")
    assert time.monotonic() - exited < 3.0  # the session (30 s) has not expired: the process deleted it
    owner = {"main": "thread 'MainThread'", "worker": "thread 'worker'", "task": "task <Task finished",
             "pending": "task <Task pending", "main-nothread": "thread 'MainThread'"}[who]
    assert f"{path}: released " in err and f"its owner, {owner}" in err, err


# -- hints --------------------------------------------------------------------------------------------
AIO_OBJECTS: Dict[str, Callable[[Any, str], Any]] = {
    "FairLock": lambda zk, p: aio.FairLock(zk, p),
    "ExclusiveLock": lambda zk, p: aio.ExclusiveLock(zk, p),
    "ReadLock": lambda zk, p: aio.ReadWriteLock(zk, p).read(),
    "WriteLock": lambda zk, p: aio.ReadWriteLock(zk, p).write(),
    "Semaphore": lambda zk, p: aio.Semaphore(zk, p, 2),
    "LeaderElection": lambda zk, p: aio.LeaderElection(zk, p),
}


@pytest.mark.parametrize("name", sorted(AIO_OBJECTS))
def test_a_plain_with_on_an_aio_object_points_to_async_with(zk, name):
    obj = AIO_OBJECTS[name](zk, "/hint")
    with pytest.raises(TypeError, match=f"aio.{name} is for asyncio: use 'async with'"):
        with obj:
            pytest.fail("entered")
    assert not zk.exists("/hint")  # refused before any request


def test_a_blocking_threaded_acquire_in_a_running_loop_warns_once_per_lock(zk):
    first, second = zkrecipes.FairLock(zk, "/in-loop"), zkrecipes.FairLock(zk, "/in-loop-2")

    async def main() -> None:
        for _ in range(3):
            with first:
                pass
        assert first.acquire(blocking=False)  # cannot block: no warning needed
        first.release()
        second.acquire()
        second.release()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # count our once-per-lock, not the warnings registry's once-per-line
        asyncio.run(main())
        first.acquire()  # no loop runs on this thread now
        first.release()
    ours = [w for w in caught if issubclass(w.category, RuntimeWarning) and "event loop" in str(w.message)]
    assert len(ours) == 2, [str(w.message) for w in ours]
    assert "'/in-loop'" in str(ours[0].message) and "'/in-loop-2'" in str(ours[1].message)
    assert all("zkrecipes.aio.FairLock" in str(w.message) for w in ours)
    assert ours[0].filename == __file__  # points at the caller's ``with``, not into zkrecipes
