"""Recipes that share a path (issue 37): every ordered pair of distinct recipes, on both fronts and the CLI.

FairLock, ReadWriteLock's two sides and LeaderElection are one queue: the second waits for the first.
A Semaphore's leases and ExclusiveLock's ``lock`` node share a path with nothing: whichever comes second
is refused with a LockError naming the path, the node it found and the recipe that made it, and leaves
no node behind; the first keeps its hold.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import sys
import threading
from typing import Any, Callable, Optional

import pytest
from lockhelpers import children
from test_cli import Cli

import zkrecipes
from zkrecipes import LockError, aio

PATH = "/shared"
LEASES = 2

# recipe -> (make(front, client), the words naming it in a refusal of its node)
RECIPES: "dict[str, tuple[Callable[[Any, Any], Any], str]]" = {
    "fair": (lambda m, c: m.FairLock(c, PATH), "FairLock"),
    "exclusive": (lambda m, c: m.ExclusiveLock(c, PATH), "ExclusiveLock"),
    "read": (lambda m, c: m.ReadWriteLock(c, PATH).read(), "ReadWriteLock (read side)"),
    "write": (lambda m, c: m.ReadWriteLock(c, PATH).write(), "ReadWriteLock (write side)"),
    "semaphore": (lambda m, c: m.Semaphore(c, PATH, LEASES), f"Semaphore (max_leases {LEASES})"),
    "election": (lambda m, c: m.LeaderElection(c, PATH), "LeaderElection"),
}
QUEUE = {"fair", "read", "write", "election"}  # one queue: they wait for each other
TITLES = {"fair": "a FairLock", "exclusive": "an ExclusiveLock", "read": "a ReadWriteLock", "write": "a ReadWriteLock",
          "semaphore": "a Semaphore", "election": "a LeaderElection"}
PAIRS = [(a, b) for a in RECIPES for b in RECIPES if a != b]


class Actor:
    """One recipe object, driven on its front: a thread of its own (threaded), or the test's task (aio)."""

    def __init__(self, recipe: str, front: str, client: Any) -> None:
        self.recipe = recipe
        self.obj = RECIPES[recipe][0](aio if front == "aio" else zkrecipes, client)
        self.election = recipe == "election"
        self._thread = concurrent.futures.ThreadPoolExecutor(1) if front == "threaded" else None

    async def _do(self, fn: Callable[[], Any]) -> Any:
        if self._thread is not None:  # every call on the one thread that owns the hold
            return await asyncio.get_running_loop().run_in_executor(self._thread, fn)
        out = fn()
        return (await out) if inspect.isawaitable(out) else out

    async def take(self, timeout: float) -> bool:
        return bool(await self._do(lambda: (self.obj.campaign if self.election else self.obj.acquire)(timeout=timeout)))

    async def held(self) -> bool:
        """Held, certain, and its check() passes."""
        held = await self._do(lambda: self.obj.is_leader if self.election else self.obj.is_held)
        await self._do(self.obj.check)
        return bool(held)

    async def node(self) -> Optional[str]:
        node = await self._do(lambda: self.obj.node)
        return None if node is None else str(node).rsplit("/", 1)[1]

    async def drop(self) -> None:
        await self._do(self.obj.resign if self.election else self.obj.release)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown()


@pytest.mark.parametrize("front", ["threaded", "aio"])
@pytest.mark.parametrize("first,second", PAIRS, ids=[f"{a}-then-{b}" for a, b in PAIRS])
def test_the_second_recipe_on_a_path_is_refused_or_queues_as_documented(zk, zk_factory, first, second, front):
    async def main() -> None:
        holder, other = Actor(first, front, zk), Actor(second, front, zk_factory())
        try:
            assert await holder.take(10)
            mine = await holder.node()
            assert mine is not None and children(zk, PATH) == [mine]
            if first in QUEUE and second in QUEUE:  # one queue: the second waits its turn, then holds
                assert await other.take(0.3) is False
                assert children(zk, PATH) == [mine] and await holder.held()
                await holder.drop()
                assert await other.take(10) and await other.held()
                await other.drop()
                assert children(zk, PATH) == []
                return
            with pytest.raises(LockError) as err:
                await other.take(10)  # refused at once, not queued until a timeout
            msg = str(err.value)
            assert msg.startswith(f"{PATH}: {TITLES[second]} cannot share this path: child {mine!r} is a node of "), msg
            assert RECIPES[first][1] in msg and "Our node was deleted." in msg, msg
            assert children(zk, PATH) == [mine]  # no node of the refused one left behind
            assert other.obj.state == "idle"
            assert await holder.held()  # the holder keeps its hold
            await holder.drop()
            assert children(zk, PATH) == []
        finally:
            holder.close()
            other.close()

    asyncio.run(main())


@pytest.mark.parametrize("other", ["semaphore", "fair", "read"])
def test_an_exclusive_lock_and_a_queue_that_create_at_once_are_never_both_held(zk, zk_factory, other):
    """Each creates its node and lists the path in one round trip: the later create's listing shows the
    earlier node, so at most one of the two is granted (both may be refused), and nothing is left."""
    rounds = 25
    barrier = threading.Barrier(2)
    outcomes: "dict[str, list]" = {"exclusive": [], other: []}

    def contend(recipe: str, client: Any) -> None:
        lock = RECIPES[recipe][0](zkrecipes, client)
        for _ in range(rounds):
            barrier.wait(30)
            try:
                got: Any = lock.acquire(blocking=False)
            except LockError:
                got = "refused"
            outcomes[recipe].append(got)
            barrier.wait(30)  # both have answered: compare before anyone releases
            if got is True:
                lock.release()
            barrier.wait(30)

    threads = [threading.Thread(target=contend, args=(r, zk_factory())) for r in outcomes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive()
    pairs = list(zip(outcomes["exclusive"], outcomes[other]))
    assert len(pairs) == rounds and (True, True) not in pairs, pairs
    assert any("refused" in p for p in pairs), pairs  # they did meet
    assert children(zk, PATH) == []


# -- the CLI ------------------------------------------------------------------------------------------------
@pytest.fixture
def cli(zk_ensemble, zk_namespace, tmp_path):
    c = Cli(zk_ensemble.hosts + zk_namespace, tmp_path)
    yield c
    c.close()


@pytest.mark.parametrize("mode,holder,made_by", [
    (["--exclusive"], "semaphore", "a Semaphore (max_leases 2)"),
    (["--read"], "semaphore", "a Semaphore (max_leases 2)"),
    (["-n", "2"], "exclusive", "an ExclusiveLock"),
    (["--write"], "exclusive", "an ExclusiveLock"),
], ids=["exclusive-on-semaphore", "read-on-semaphore", "leases-on-exclusive", "write-on-exclusive"])
def test_the_cli_refuses_a_path_held_by_another_recipe_and_never_runs_the_command(cli, zk, mode, holder, made_by):
    lock = RECIPES[holder][0](zkrecipes, zk)
    assert lock.acquire(timeout=10)
    mine = lock.node.rsplit("/", 1)[1]
    ran = cli.workdir / "ran"
    r = cli.run("lock", *mode, PATH, "--hosts", cli.hosts, "--timeout", "20", "--",
                sys.executable, "-c", f"open({str(ran)!r}, 'w').close()")
    assert r.returncode == 2, r.stderr  # docs/cli.rst: exit 2, bad usage or input
    assert f"{PATH}: " in r.stderr and f"child {mine!r} is a node of {made_by}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not ran.exists()
    assert children(zk, PATH) == [mine] and lock.is_held
    lock.release()
