"""One runner, without ZooKeeper: a composition's parts (``Part``) run on both drivers through the one loop
(``Transport.drive``) under the run's deadline, and ``all_or_none`` takes all or gives back what it took."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List, Optional, Tuple

import pytest

from zkrecipes._drive import Driver, never
from zkrecipes._engine import NOW, DeadlinePassed, Steps
from zkrecipes._multilock import all_or_none, give_all_back
from zkrecipes._transport import Part
from zkrecipes.aio._driver import AioDriver


class FakeClient:
    """What a driver asks of a client when no request is sent: whether it was stopped."""

    _stopped = threading.Event()
    chroot = ""


def value(v: Any) -> Steps[Any]:
    """Steps that ask for the driver's clock (answered without a request), then return ``v``."""
    yield NOW
    return v


def failing(error: BaseException) -> Steps[Any]:
    yield NOW
    raise error


def threaded(steps: Steps[Any], deadline: Optional[float] = None, nowait: bool = False) -> Any:
    return Driver(FakeClient(), deadline, never, None, nowait).run(steps)  # type: ignore[arg-type]


def on_loop(steps: Steps[Any], deadline: Optional[float] = None, nowait: bool = False) -> Any:
    async def body() -> Any:
        return await AioDriver(FakeClient(), deadline, None, nowait).run(steps)  # type: ignore[arg-type]

    return asyncio.run(body())


RUNNERS = [threaded, on_loop]


def parts(*asked: Part) -> Steps[List[Any]]:
    got = []
    for part in asked:
        got.append((yield part))
    return got


@pytest.mark.parametrize("run", RUNNERS)
def test_a_part_is_answered_with_its_steps_value_and_its_error_is_thrown_in(run):
    assert run(parts(Part(value(1)), Part(value("two"), cleanup=True))) == [1, "two"]

    def caught() -> Steps[str]:
        try:
            yield Part(failing(KeyError("k")))
        except KeyError:
            return "caught"
        return "not raised"

    assert run(caught()) == "caught"


def recording(run: Any, seen: List[Tuple[Optional[float], bool]]) -> Any:
    """A lock's own ``_run`` for ``run``'s front (a coroutine function on asyncio), noting its arguments."""
    def runner(steps: Steps[Any], deadline: Optional[float], nowait: bool) -> Any:
        seen.append((deadline, nowait))
        return threaded(steps, deadline, nowait)

    async def aio_runner(steps: Steps[Any], deadline: Optional[float], nowait: bool) -> Any:
        seen.append((deadline, nowait))
        return await AioDriver(FakeClient(), deadline, None, nowait).run(steps)  # type: ignore[arg-type]

    return aio_runner if run is on_loop else runner


@pytest.mark.parametrize("run", RUNNERS)
def test_a_part_runs_by_the_lock_runner_it_names_with_the_runs_deadline(run):
    seen: List[Tuple[Optional[float], bool]] = []
    runner = recording(run, seen)
    deadline = time.monotonic() + 60
    assert run(parts(Part(value(1), run=runner), Part(value(2), run=runner)), deadline, True) == [1, 2]
    assert seen == [(deadline, True), (deadline, True)]  # one deadline for every part, not one each


@pytest.mark.parametrize("run", RUNNERS)
def test_no_part_is_run_once_the_deadline_has_passed_but_a_cleanup_is(run):
    started: List[str] = []

    def noted(name: str) -> Steps[str]:
        started.append(name)
        yield NOW
        return name

    def steps() -> Steps[List[str]]:
        out = []
        try:
            yield Part(noted("late"))
        except DeadlinePassed:
            out.append("deadline")
        out.append((yield Part(noted("undo"), cleanup=True)))
        return out

    assert run(steps(), time.monotonic() - 1) == ["deadline", "undo"]
    assert started == ["undo"]


@pytest.mark.parametrize("run", RUNNERS)
def test_within_bounds_a_part_by_a_shorter_deadline(run):
    seen: List[Tuple[Optional[float], bool]] = []
    runner = recording(run, seen)
    before = time.monotonic()
    run(parts(Part(value(1), run=runner, within=0.5)), None)
    run(parts(Part(value(1), run=runner, within=500.0)), before + 60)
    assert seen[0][0] is not None and before + 0.5 <= seen[0][0] <= time.monotonic() + 0.5
    assert seen[1][0] == before + 60  # the run's deadline comes first


# -- all or none ---------------------------------------------------------------------------------------
class Ledger:
    def __init__(self, misses: Tuple[str, ...] = (), raises: Optional[BaseException] = None,
                 release_fails: Tuple[str, ...] = ()) -> None:
        self.misses, self.raises, self.release_fails = misses, raises, release_fails
        self.log: List[str] = []

    def take(self, name: str) -> Steps[bool]:
        yield NOW
        if name == "boom" and self.raises is not None:
            raise self.raises
        self.log.append(f"take {name}")
        return name not in self.misses

    def give_back(self, name: str) -> Steps[None]:
        yield NOW
        self.log.append(f"give {name}")
        if name in self.release_fails:
            raise RuntimeError(f"release of {name}")


@pytest.mark.parametrize("run", RUNNERS)
def test_all_or_none_takes_all_in_order(run):
    ledger = Ledger()
    assert run(all_or_none(["a", "b", "c"], ledger.take, ledger.give_back)) is True
    assert ledger.log == ["take a", "take b", "take c"]


@pytest.mark.parametrize("run", RUNNERS)
def test_all_or_none_gives_back_in_reverse_after_a_miss(run):
    ledger = Ledger(misses=("c",))
    assert run(all_or_none(["a", "b", "c", "d"], ledger.take, ledger.give_back)) is False
    assert ledger.log == ["take a", "take b", "take c", "give b", "give a"]


@pytest.mark.parametrize("run", RUNNERS)
def test_all_or_none_gives_back_then_raises_on_an_error(run):
    ledger = Ledger(raises=KeyboardInterrupt(), release_fails=("a",))
    with pytest.raises(KeyboardInterrupt):  # the error raised is the news, not the failed give-back
        run(all_or_none(["a", "b", "boom", "c"], ledger.take, ledger.give_back))
    assert ledger.log == ["take a", "take b", "give b", "give a"]


@pytest.mark.parametrize("run", RUNNERS)
def test_all_or_none_gives_every_part_back_and_raises_the_first_failure_after_a_miss(run):
    ledger = Ledger(misses=("c",), release_fails=("b", "a"))
    with pytest.raises(RuntimeError, match="release of b"):
        run(all_or_none(["a", "b", "c"], ledger.take, ledger.give_back))
    assert ledger.log == ["take a", "take b", "take c", "give b", "give a"]


@pytest.mark.parametrize("run", RUNNERS)
def test_a_deadline_passed_before_a_parts_turn_is_a_miss(run):
    ledger = Ledger()

    def take(name: str) -> Steps[bool]:
        if name == "b":
            raise DeadlinePassed()  # as the Part of b would, its turn come after the deadline
        return (yield from ledger.take(name))

    assert run(all_or_none(["a", "b", "c"], take, ledger.give_back)) is False
    assert ledger.log == ["take a", "give a"]


def test_give_all_back_returns_the_first_error_and_gives_back_every_part():
    ledger = Ledger(release_fails=("c", "a"))
    error = threaded(give_all_back(["a", "b", "c"], ledger.give_back))
    assert isinstance(error, RuntimeError) and str(error) == "release of c"
    assert ledger.log == ["give c", "give b", "give a"]
