"""Metrics hooks (zkrecipes.metrics) on the real ensemble: every recipe on both fronts tells the installed
hooks of its waits, holds, queue positions and state changes; the Prometheus and OpenTelemetry adapters
turn them into their libraries' instruments; ``zkrecipes status --watch`` follows a path."""

from __future__ import annotations

import asyncio
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from lockhelpers import FAST_RECONNECT, LateLink, wait_until
from test_cli import ZKRECIPES, Cli, dump_stacks

import zkrecipes
import zkrecipes.aio as aio
from zkrecipes import FairLock, Semaphore, _kazoo, metrics
from zkrecipes.errors import LockError
from zkrecipes.testing import Partition, expire_session

RECIPES = ("fair", "exclusive", "read", "write", "semaphore", "election")


class Recorder(metrics.Hooks):
    """Hooks that record every event as a tuple, with the thread it came on."""

    def __init__(self) -> None:
        self.events: List[Tuple[Any, ...]] = []
        self.threads: List[str] = []
        self._lock = threading.Lock()

    def _add(self, *event: Any) -> None:
        with self._lock:
            self.events.append(event)
            self.threads.append(threading.current_thread().name)

    def acquired(self, recipe: str, path: str, waited_s: float, outcome: str) -> None:
        self._add("acquired", recipe, path, waited_s, outcome)

    def waiting(self, recipe: str, path: str, ahead: int) -> None:
        self._add("waiting", recipe, path, ahead)

    def released(self, recipe: str, path: str, held_s: float, outcome: str) -> None:
        self._add("released", recipe, path, held_s, outcome)

    def state(self, recipe: str, path: str, old: str, new: str) -> None:
        self._add("state", recipe, path, old, new)

    def retry(self, error: str) -> None:
        self._add("retry", error)

    def nudge(self) -> None:
        self._add("nudge")

    def of(self, kind: str, recipe: str, path: str) -> List[Tuple[Any, ...]]:
        with self._lock:
            return [e[3:] for e in self.events if e[0] == kind and e[1] == recipe and e[2] == path]


@pytest.fixture
def recorder():
    rec = Recorder()
    metrics.install(rec)
    yield rec
    metrics.uninstall()


# -- the recipes, as (holder, contender) makers per front -----------------------------------------------
def make(front: str, recipe: str, client, path: str, holder: bool = False):
    """A lock or election object; for "read", the holder is a writer (a reader waits only for one)."""
    mod: Any = aio if front == "aio" else zkrecipes
    if recipe == "fair":
        return mod.FairLock(client, path)
    if recipe == "exclusive":
        return mod.ExclusiveLock(client, path)
    if recipe == "read":
        pair = mod.ReadWriteLock(client, path)
        return pair.write() if holder else pair.read()
    if recipe == "write":
        return mod.ReadWriteLock(client, path).write()
    if recipe == "semaphore":
        return mod.Semaphore(client, path, 1)
    return mod.LeaderElection(client, path)


def take(obj, timeout: Optional[float]):  # acquire or campaign (a coroutine for aio objects)
    return obj.campaign(timeout=timeout) if hasattr(obj, "campaign") else obj.acquire(timeout=timeout)


def give(obj):
    return obj.resign() if hasattr(obj, "campaign") else obj.release()


def holder_label(recipe: str) -> str:
    return "write" if recipe == "read" else recipe


HELD = {"election": "leader"}
WAITED = {"election": "candidate"}


def check_life(rec: Recorder, recipe: str, path: str, waited_at_least: float) -> None:
    """What every recipe must have told: see the scenario in :func:`test_hooks_see_every_recipe_threads`."""
    held, waiting = HELD.get(recipe, "held"), WAITED.get(recipe, "waiting")
    outcomes = sorted(o for _, o in rec.of("acquired", recipe, path))
    want = ["acquired", "cancelled", "timeout"] + (["acquired"] * 2 if recipe != "read" else [])  # + the holder's 2
    assert outcomes == sorted(want), rec.events
    waits = {o: w for w, o in rec.of("acquired", recipe, path) if o != "acquired"}
    assert 0.25 <= waits["timeout"] < 10, waits  # acquire(timeout=0.3)
    assert waits["cancelled"] >= 0.1, waits  # cancelled after its waiting was told, 0.1 s on
    longest = max(w for w, o in rec.of("acquired", recipe, path) if o == "acquired")
    assert waited_at_least <= longest < 30, rec.of("acquired", recipe, path)  # the waiter waited the holder out
    assert [a for (a,) in rec.of("waiting", recipe, path)] and all(
        a >= 1 for (a,) in rec.of("waiting", recipe, path)), rec.events  # one node (the holder's) ahead, at least
    changes = rec.of("state", recipe, path)
    assert ("idle", waiting) in changes and (waiting, held) in changes and (held, "idle") in changes, changes
    assert (waiting, "idle") in changes, changes  # the timeout and the cancel
    ends = rec.of("released", recipe, path)
    assert ends and all(o == "released" and 0.0 < s < 30 for s, o in ends), ends
    assert any(s >= waited_at_least for s, _ in rec.of("released", holder_label(recipe), path)), rec.events


@pytest.mark.parametrize("recipe", RECIPES)
def test_hooks_see_every_recipe_threads(zk_factory, recorder, recipe):
    """A holder, a waiter that waits it out, a try that times out, a waiter that is cancelled."""
    path = f"/metrics-{recipe}"
    a, b, c = zk_factory(), zk_factory(), zk_factory()
    holder, waiter = make("threads", recipe, a, path, holder=True), make("threads", recipe, b, path)
    assert take(holder, None)
    got: Dict[str, Any] = {}
    go = threading.Event()

    def wait_then_release(obj, name: str) -> None:  # a thread's hold is released by that thread
        got[name] = ok = take(obj, 30)
        go.wait(30)
        if ok:
            give(obj)

    t = threading.Thread(target=wait_then_release, args=(waiter, "waiter"))
    t.start()
    wait_until(lambda: recorder.of("waiting", recipe, path), 15, "the waiter's queue position")
    assert not take(make("threads", recipe, c, path), 0.3)
    hold_start = time.monotonic()
    time.sleep(0.2)  # (a hold with a known least length)
    give(holder)
    go.set()
    t.join(30)
    assert got == {"waiter": True}
    # a cancelled waiter
    assert take(holder, None)
    late = make("threads", recipe, c, path)
    before = len(recorder.of("waiting", recipe, path))
    t = threading.Thread(target=wait_then_release, args=(late, "late"))
    t.start()
    wait_until(lambda: len(recorder.of("waiting", recipe, path)) > before, 15, "the late waiter waiting")
    time.sleep(0.1)
    late.cancel()
    t.join(30)
    assert got["late"] is False
    give(holder)
    check_life(recorder, recipe, path, min(0.2, time.monotonic() - hold_start))
    assert not [n for n in recorder.threads if n.startswith("kazoo")], recorder.threads  # never kazoo's threads


def arun(coro_fn: Callable[[], Any], timeout: float = 60.0) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(coro_fn(), timeout)
    return asyncio.run(main())


async def until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("recipe", RECIPES)
def test_hooks_see_every_recipe_aio(zk_factory, recorder, recipe):
    """The threaded scenario, in tasks of :mod:`zkrecipes.aio`."""
    path = f"/metrics-aio-{recipe}"
    a, b, c = zk_factory(), zk_factory(), zk_factory()

    async def main() -> float:
        holder, waiter = make("aio", recipe, a, path, holder=True), make("aio", recipe, b, path)
        assert await take(holder, None)
        go = asyncio.Event()

        async def wait_then_release(obj) -> bool:
            ok = await take(obj, 30)
            await go.wait()
            if ok:
                await give(obj)
            return bool(ok)

        t = asyncio.ensure_future(wait_then_release(waiter))
        await until(lambda: recorder.of("waiting", recipe, path), 15, "the waiter's queue position")
        assert not await take(make("aio", recipe, c, path), 0.3)
        hold_start = time.monotonic()
        await asyncio.sleep(0.2)
        await give(holder)
        go.set()
        assert await t
        assert await take(holder, None)
        late = make("aio", recipe, c, path)
        before = len(recorder.of("waiting", recipe, path))
        t = asyncio.ensure_future(wait_then_release(late))
        await until(lambda: len(recorder.of("waiting", recipe, path)) > before, 15, "the late waiter waiting")
        await asyncio.sleep(0.1)
        late.cancel()
        assert not await t
        await give(holder)
        return min(0.2, time.monotonic() - hold_start)

    check_life(recorder, recipe, path, arun(main))
    assert not [n for n in recorder.threads if n.startswith("kazoo")], recorder.threads


def test_acquire_that_raises_is_an_error(zk_factory, recorder):
    """A semaphore whose max_leases disagrees with the holders' raises: outcome "error"."""
    a, b = zk_factory(), zk_factory()
    assert Semaphore(a, "/metrics-err", 1).acquire()
    with pytest.raises(LockError):
        Semaphore(b, "/metrics-err", 2).acquire(timeout=10)
    assert [o for _, o in recorder.of("acquired", "semaphore", "/metrics-err")] == ["acquired", "error"]


@pytest.mark.parametrize("front", ["threads", "aio"])
def test_lost_and_suspended_are_told(zk_ensemble, zk_factory, recorder, front):
    """A frozen link: held -> suspended -> held; an expired session: -> lost, and the hold ends "lost"."""
    path = f"/metrics-loss-{front}"

    def changes() -> List[Tuple[Any, ...]]:
        return recorder.of("state", "fair", path)

    with Partition(zk_ensemble.hosts) as p:
        client = zk_factory(hosts=p.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            if front == "aio":
                lock: Any = aio.FairLock(client, path)
                call: Callable[..., Any] = lambda fn: fn()  # noqa: E731
            else:  # the blocking calls off the loop (the lock is the owner: any thread may release)
                lock = FairLock(client, path, owner="object")
                call = lambda fn: loop.run_in_executor(None, fn)  # noqa: E731
            assert await call(lock.acquire)
            p.freeze()
            await until(lambda: ("held", "suspended") in changes(), 15, "suspended")
            p.heal()
            await until(lambda: changes()[-1] == ("suspended", "held"), 15, "held again")
            await loop.run_in_executor(None, expire_session, client)
            await until(lambda: changes()[-1][1] == "lost", 30, "lost")
            await call(lock.release)

        arun(scenario)
    assert recorder.of("released", "fair", path)[-1][1] == "lost"


# -- LeaderLatch and MultiLock report through the recipes they run (docs/metrics.rst) ---------------------
def check_latch_life(rec: Recorder, path: str, observed_waiting: float, first_closed: float) -> None:
    """Two latches on ``path``: the first led, the second waited behind it and led once it closed."""
    acquired = rec.of("acquired", "election", path)
    assert [o for _, o in acquired] == ["acquired", "acquired"], rec.events
    # the second's campaign began before its waiting was observed and ended after the first closed
    assert acquired[1][0] >= first_closed - observed_waiting, (acquired, first_closed - observed_waiting)
    ahead = [a for (a,) in rec.of("waiting", "election", path)]
    assert ahead and all(a >= 1 for a in ahead), rec.events
    changes = rec.of("state", "election", path)
    for change in (("idle", "candidate"), ("candidate", "leader")):
        assert changes.count(change) == 2, changes  # each latch campaigned and led once
    assert len([c for c in changes if c[1] == "idle" and c[0] != "candidate"]) == 2, changes  # and closed
    ends = rec.of("released", "election", path)
    assert [o for _, o in ends] == ["released", "released"], ends
    assert ends[0][0] >= first_closed - observed_waiting  # the first led at least while the second waited


def test_hooks_see_leader_latches_threads(zk_factory, recorder):
    path = "/metrics-latch"
    first, second = zkrecipes.LeaderLatch(zk_factory(), path, "one"), zkrecipes.LeaderLatch(zk_factory(), path, "two")
    first.start()
    assert first.wait(15)
    second.start()
    wait_until(lambda: recorder.of("waiting", "election", path), 15, "the second latch's queue position")
    observed = time.monotonic()
    assert not second.has_leadership
    time.sleep(0.2)  # (a wait with a known least length)
    closing = time.monotonic()
    first.close()
    assert second.wait(15)
    second.close()
    check_latch_life(recorder, path, observed, closing)
    assert not [n for n in recorder.threads if n.startswith("kazoo")], recorder.threads


def test_hooks_see_leader_latches_aio(zk_factory, recorder):
    path = "/metrics-aio-latch"
    a, b = zk_factory(), zk_factory()

    async def main() -> Tuple[float, float]:
        first, second = aio.LeaderLatch(a, path, "one"), aio.LeaderLatch(b, path, "two")
        first.start()
        assert await first.wait(15)
        second.start()
        await until(lambda: recorder.of("waiting", "election", path), 15, "the second latch's queue position")
        observed = time.monotonic()
        await asyncio.sleep(0.2)  # (a wait with a known least length)
        closing = time.monotonic()
        await first.close()
        assert await second.wait(15)
        await second.close()
        return observed, closing

    check_latch_life(recorder, path, *arun(main))


def test_a_multilocks_locks_report_each_on_their_own(zk, zk_factory, recorder):
    """A MultiLock keeps no state of its own: each lock it takes tells its acquire, hold and release under
    its own recipe and path; a miss tells the lock that timed out and the release of what was taken."""
    ml = zkrecipes.MultiLock([FairLock(zk, "/mm/a"), Semaphore(zk, "/mm/b", 2),
                              zkrecipes.ReadWriteLock(zk, "/mm/c").read()])
    assert ml.acquire(timeout=15)
    assert [(e[0], e[1], e[2], e[4]) for e in recorder.events if e[0] == "acquired"] == [
        ("acquired", "fair", "/mm/a", "acquired"), ("acquired", "semaphore", "/mm/b", "acquired"),
        ("acquired", "read", "/mm/c", "acquired")]
    ml.release()
    assert [(e[1], e[2], e[4]) for e in recorder.events if e[0] == "released"] == [
        ("read", "/mm/c", "released"), ("semaphore", "/mm/b", "released"), ("fair", "/mm/a", "released")]
    for recipe, path in (("fair", "/mm/a"), ("semaphore", "/mm/b"), ("read", "/mm/c")):
        changes = recorder.of("state", recipe, path)  # (a stalled machine may add a suspension meanwhile)
        assert changes[:2] == [("idle", "waiting"), ("waiting", "held")] and changes[-1][1] == "idle", changes

    other = FairLock(zk_factory(), "/mm/b2")
    assert other.acquire()
    del recorder.events[:]
    miss = zkrecipes.MultiLock([FairLock(zk, "/mm/a2"), FairLock(zk, "/mm/b2")])
    assert miss.acquire(timeout=0.3) is False
    assert [(e[2], e[4]) for e in recorder.events if e[0] == "acquired"] == [("/mm/a2", "acquired"),
                                                                             ("/mm/b2", "timeout")]
    assert [(e[2], e[4]) for e in recorder.events if e[0] == "released"] == [("/mm/a2", "released")]
    other.release()


def test_nudge_is_told_on_the_clients_io_thread(zk_ensemble, zk_factory, recorder):
    """A server that sits on a reply (ZOOKEEPER-4537, played by LateLink) is nudged by the I/O thread of a
    client our recipes use, and the ``nudge`` hook is called there, once per stuck request."""
    link = LateLink(zk_ensemble.hosts)
    try:
        ours = zk_factory(hosts=link.hosts, timeout=30.0)
        lock = FairLock(ours, "/metrics-nudge")
        assert lock.acquire(timeout=10)
        before = _kazoo.heard(ours).nudges
        told = len([e for e in recorder.events if e == ("nudge",)])
        link.arm()
        ours.exists("/metrics-nudge")  # its reply is held back until the nudge arrives
        assert link.held_count == 1 and _kazoo.heard(ours).nudges == before + 1
        with recorder._lock:
            nudges = [t for e, t in zip(recorder.events, recorder.threads) if e == ("nudge",)]
        assert len(nudges) == told + 1, recorder.events
        assert nudges[-1] == ours._connection._connection_routine.name  # kazoo's I/O thread of that client
        lock.release()
    finally:
        link.close()


def test_prometheus_counts_nudges(zk_ensemble, zk_factory):
    from prometheus_client import CollectorRegistry

    from zkrecipes.metrics import prometheus

    registry = CollectorRegistry()
    prometheus.install(registry=registry)
    link = LateLink(zk_ensemble.hosts)
    try:
        ours = zk_factory(hosts=link.hosts, timeout=30.0)
        FairLock(ours, "/metrics-prom-nudge")  # a client our recipes use: its replies are nudged
        before = registry.get_sample_value("zkrecipes_nudges_total") or 0.0
        link.arm()
        ours.exists("/")
        assert registry.get_sample_value("zkrecipes_nudges_total") == before + 1
    finally:
        link.close()
        metrics.uninstall()


# -- the adapters, with their real libraries -----------------------------------------------------------
def use_locks(zk_factory, path: str) -> None:
    """Two FairLock holds of ``path``, the second waited for at least 0.1 s, and an election."""
    a, b = zk_factory(), zk_factory()
    first, second = FairLock(a, path), FairLock(b, path)
    assert first.acquire()
    got: Dict[str, Any] = {}
    t = threading.Thread(target=lambda: got.setdefault("ok", second.acquire(timeout=30)) and second.release())
    t.start()
    wait_until(lambda: second.state == "waiting", 15, "the second waiting")
    time.sleep(0.1)
    first.release()
    t.join(30)
    assert got == {"ok": True}
    e = zkrecipes.LeaderElection(a, path + "-election")
    assert e.campaign()
    e.resign()


def test_prometheus_adapter_exposes_the_named_metrics(zk_factory):
    from prometheus_client import CollectorRegistry

    from zkrecipes.metrics import prometheus

    registry = CollectorRegistry()
    hooks = prometheus.install(registry=registry)
    try:
        path = "/metrics-prom"
        lock = FairLock(zk_factory(), path)
        assert lock.acquire()
        sample = registry.get_sample_value
        assert sample("zkrecipes_holding", {"recipe": "fair"}) == 1.0
        assert sample("zkrecipes_waiting", {"recipe": "fair"}) == 0.0
        lock.release()
        assert sample("zkrecipes_holding", {"recipe": "fair"}) == 0.0
        use_locks(zk_factory, path)

        wait = {"recipe": "fair", "outcome": "acquired"}
        assert sample("zkrecipes_acquire_wait_seconds_count", wait) >= 3
        assert sample("zkrecipes_acquire_wait_seconds_sum", wait) >= 0.1  # the second waited >= 0.1 s
        assert sample("zkrecipes_hold_seconds_count", {"recipe": "fair", "outcome": "released"}) >= 3
        assert sample("zkrecipes_acquire_wait_seconds_count", {"recipe": "election", "outcome": "acquired"}) == 1
        assert sample("zkrecipes_holding", {"recipe": "election"}) == 0.0
        assert sample("zkrecipes_lost_total", {"recipe": "fair"}) is None  # none yet
        # no path label by default
        assert sample("zkrecipes_acquire_wait_seconds_count", {**wait, "path": path}) is None
        # a lost hold
        client = zk_factory(timeout=4.0)
        lost = FairLock(client, "/metrics-prom-lost")
        assert lost.acquire()
        expire_session(client)
        wait_until(lambda: lost.state == "lost", 30, "lost")
        lost.release()
        assert sample("zkrecipes_lost_total", {"recipe": "fair"}) == 1.0
        assert sample("zkrecipes_hold_seconds_count", {"recipe": "fair", "outcome": "lost"}) == 1.0
        assert sample("zkrecipes_holding", {"recipe": "fair"}) == 0.0
        names = {m.name for m in registry.collect()}
        assert {"zkrecipes_acquire_wait_seconds", "zkrecipes_hold_seconds", "zkrecipes_holding", "zkrecipes_waiting",
                "zkrecipes_lost", "zkrecipes_suspended", "zkrecipes_retries", "zkrecipes_nudges"} <= names
        assert metrics.installed is hooks
    finally:
        metrics.uninstall()


def test_prometheus_suspended_is_counted_after_a_frozen_link(zk_ensemble, zk_factory):
    from prometheus_client import CollectorRegistry

    from zkrecipes.metrics import prometheus

    registry = CollectorRegistry()
    prometheus.install(registry=registry)
    try:
        with Partition(zk_ensemble.hosts) as p:
            client = zk_factory(hosts=p.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)
            lock = FairLock(client, "/metrics-prom-frozen")
            assert lock.acquire()
            p.freeze()
            wait_until(lambda: lock.state == "suspended", 15, "suspended")
            p.heal()
            wait_until(lambda: lock.state == "held", 15, "held again")
            lock.release()
        assert registry.get_sample_value("zkrecipes_suspended_total", {"recipe": "fair"}) == 1.0
        assert registry.get_sample_value("zkrecipes_holding", {"recipe": "fair"}) == 0.0
    finally:
        metrics.uninstall()


def test_prometheus_path_label_maps_paths(zk_factory):
    from prometheus_client import CollectorRegistry

    from zkrecipes.metrics import prometheus

    with pytest.raises(TypeError, match="path_label"):
        prometheus.install(registry=CollectorRegistry(), path_label="/jobs")
    registry = CollectorRegistry()
    prometheus.install(registry=registry, path_label=lambda p: p.split("/")[1])  # the first component
    try:
        client = zk_factory()
        for path in ("/jobs/a", "/jobs/b"):
            with FairLock(client, path):
                pass
        labels = {"recipe": "fair", "path": "jobs", "outcome": "acquired"}
        assert registry.get_sample_value("zkrecipes_acquire_wait_seconds_count", labels) == 2.0
        assert registry.get_sample_value("zkrecipes_holding", {"recipe": "fair", "path": "jobs"}) == 0.0
    finally:
        metrics.uninstall()


def test_prometheus_install_twice_returns_the_same_hooks_and_counts_once(zk_factory):
    """A second ``install(registry)`` (a re-imported module, two libraries calling it) is harmless: the same
    hooks, each event counted once; another path_label for that registry, or a registry holding metrics of
    these names, is a ValueError naming the registry, with nothing registered by the failed call."""
    from prometheus_client import CollectorRegistry, Counter

    from zkrecipes.metrics import prometheus

    registry = CollectorRegistry()
    hooks = prometheus.install(registry=registry)
    try:
        again = prometheus.install(registry=registry)
        assert again is hooks and metrics.installed is hooks
        metrics.uninstall()
        assert prometheus.install(registry=registry) is hooks and metrics.installed is hooks  # installed again
        with FairLock(zk_factory(), "/metrics-twice"):
            assert registry.get_sample_value("zkrecipes_holding", {"recipe": "fair"}) == 1.0
        assert registry.get_sample_value("zkrecipes_acquire_wait_seconds_count",
                                         {"recipe": "fair", "outcome": "acquired"}) == 1.0
        names = sorted(m.name for m in registry.collect())
        with pytest.raises(ValueError, match=f"registry {re.escape(repr(registry))} already has zkrecipes' "
                                             "metrics, installed with path_label=None"):
            prometheus.install(registry=registry, path_label=lambda p: "all")
        assert sorted(m.name for m in registry.collect()) == names and metrics.installed is hooks

        theirs = CollectorRegistry()
        Counter("zkrecipes_lost", "someone else's", registry=theirs)
        with pytest.raises(ValueError, match=f"registry {re.escape(repr(theirs))} already has a metric named "
                                             "like zkrecipes' zkrecipes_lost"):
            prometheus.install(registry=theirs)
        assert [m.name for m in theirs.collect()] == ["zkrecipes_lost"]  # ours before it unregistered
        assert metrics.installed is hooks
    finally:
        metrics.uninstall()


def test_opentelemetry_install_twice_returns_the_same_hooks_and_counts_once(zk_factory):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from zkrecipes.metrics import opentelemetry

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    hooks = opentelemetry.install(meter_provider=provider)
    try:
        assert opentelemetry.install(meter_provider=provider) is hooks and metrics.installed is hooks
        labelled = opentelemetry.install(meter_provider=provider, path_label=lambda p: "all")
        assert labelled is not hooks and metrics.installed is labelled  # the new label, the same instruments
        with FairLock(zk_factory(), "/metrics-otel-twice"):
            pass
        waits = [p for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
                 for m in sm.metrics if m.name == "zkrecipes.acquire.wait" for p in m.data.data_points]
        assert [(dict(p.attributes), p.count) for p in waits] == [
            ({"recipe": "fair", "path": "all", "outcome": "acquired"}, 1)]
    finally:
        metrics.uninstall()
        provider.shutdown()


def test_opentelemetry_adapter_records_the_instruments(zk_factory):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from zkrecipes.metrics import opentelemetry

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    with pytest.raises(TypeError, match="meter_provider"):
        opentelemetry.install(meter_provider="nope")  # type: ignore[arg-type]
    opentelemetry.install(meter_provider=provider)
    try:

        async def main() -> None:
            lock = aio.FairLock(zk_factory(), "/metrics-otel")
            async with lock:
                pass

        arun(main)
        use_locks(zk_factory, "/metrics-otel")
        data = reader.get_metrics_data()
        points: Dict[str, List[Any]] = {}
        units: Dict[str, str] = {}
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                assert sm.scope.name == "zkrecipes"
                for m in sm.metrics:
                    points[m.name] = list(m.data.data_points)
                    units[m.name] = m.unit
        assert {"zkrecipes.acquire.wait", "zkrecipes.hold", "zkrecipes.holding", "zkrecipes.waiting"} <= set(points)
        assert units["zkrecipes.acquire.wait"] == units["zkrecipes.hold"] == "s"
        waits = {(p.attributes["recipe"], p.attributes["outcome"]): p for p in points["zkrecipes.acquire.wait"]}
        assert waits[("fair", "acquired")].count >= 3 and waits[("fair", "acquired")].sum >= 0.1
        assert waits[("election", "acquired")].count == 1
        assert all("path" not in dict(p.attributes) for ps in points.values() for p in ps)  # none by default
        holding = {dict(p.attributes)["recipe"]: p.value for p in points["zkrecipes.holding"]}
        assert holding["fair"] == 0 and holding["election"] == 0
    finally:
        metrics.uninstall()
        provider.shutdown()


def test_importing_zkrecipes_imports_no_metrics_library():
    code = ("import sys, zkrecipes, zkrecipes.aio, zkrecipes.metrics; "
            "print(sorted(m for m in sys.modules if m.startswith(('prometheus_client', 'opentelemetry'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- zkrecipes status --watch ------------------------------------------------------------------------------
def test_status_watch_shows_holders_and_waiters_with_how_long(zk_ensemble, zk_namespace, zk_factory, tmp_path):
    """A row appears when a lock is taken and again when another waits; FOR counts; Ctrl-C exits 0."""
    cli = Cli(zk_ensemble.hosts + zk_namespace, tmp_path)  # (the test's namespace, as zk_factory's clients)
    err = tmp_path / "status.err"  # a file, not a pipe nobody reads while it runs
    with open(err, "w") as err_file:
        proc = subprocess.Popen(ZKRECIPES + ["status", "/watched", "--watch", "--hosts", cli.hosts],
                                stdout=subprocess.PIPE, stderr=err_file, text=True, env=cli.env,
                                stdin=subprocess.DEVNULL)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]

    def screen_with(*words: str, timeout: float = 30.0) -> List[List[str]]:
        """The next table (lines until the next timestamp) with a line containing all ``words``."""
        deadline, table = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            table.append(line.split())
            if any(all(w in row for w in words) for row in table):
                return table
        pytest.fail(f"status --watch showed no row with {words} within {timeout} s (exit {proc.poll()})")

    try:
        screen_with("/watched:", "no")  # "/watched: no holders or waiters"
        client = zk_factory()
        holder = FairLock(client, "/watched", identifier="alpha")
        assert holder.acquire()
        table = screen_with("alpha", "holding")
        header = next(row for row in table if "POSITION" in row)
        assert header == ["POSITION", "NODE", "KIND", "HOST", "PID", "IDENTIFIER", "AGE", "STATE", "FOR"]
        waiter = FairLock(zk_factory(), "/watched", identifier="beta")
        t = threading.Thread(target=lambda: waiter.acquire(timeout=30) and waiter.release())
        t.start()
        table = screen_with("beta", "waiting")
        rows = {row[5]: row for row in table if len(row) == 9 and row[0].isdigit()}
        assert rows["alpha"][7] == "holding" and rows["beta"][7] == "waiting", table
        assert 0 <= float(rows["beta"][8]) <= float(rows["alpha"][8]) < 60, table  # held longer than waited
        time.sleep(0.2)
        holder.release()
        t.join(30)
        screen_with("/watched:", "no")
        proc.send_signal(signal.SIGINT)
        try:
            status = proc.wait(30)
        except subprocess.TimeoutExpired:
            dump_stacks(proc)
            pytest.fail(f"status --watch did not exit within 30 s of SIGINT; stderr: {err.read_text()}")
        assert status == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def test_retry_is_told_with_the_transient_error(recorder):
    """The one retry decision (zkrecipes.retry.Attempts, used by both drivers) tells ``retry``."""
    from kazoo.exceptions import ConnectionLoss, OperationTimeoutError

    from zkrecipes import retry

    attempts = retry.Attempts(None, time.monotonic() + 30)
    assert attempts.next_wait(ConnectionLoss()) is not None
    assert attempts.next_wait(OperationTimeoutError()) is not None
    assert [e for e in recorder.events if e[0] == "retry"] == [("retry", "ConnectionLoss"),
                                                                ("retry", "OperationTimeoutError")]
    assert retry.Attempts(None, time.monotonic() - 1).next_wait(ConnectionLoss()) is None  # deadline: no retry
    assert len([e for e in recorder.events if e[0] == "retry"]) == 2


def test_a_failing_hook_is_logged_and_the_lock_works(zk, caplog):
    class Broken(metrics.Hooks):
        def acquired(self, recipe: str, path: str, waited_s: float, outcome: str) -> None:
            raise RuntimeError("broken hook")

    with pytest.raises(TypeError, match="Hooks"):
        metrics.install(object())  # type: ignore[arg-type]
    metrics.install(Broken())
    try:
        lock = FairLock(zk, "/metrics-broken")
        with caplog.at_level("ERROR", logger="zkrecipes.metrics"):
            assert lock.acquire()
        assert lock.is_held
        lock.release()
        assert "broken hook" in caplog.text
    finally:
        metrics.uninstall()
    assert metrics.installed is None
