"""Fixtures shared by the ZooKeeper tests (the kit's own fixtures -- zk_ensemble, zk, zk_factory,
zk_namespace -- come from the zkrecipes.testing pytest plugin). Plain helpers live in lockhelpers.py."""

from __future__ import annotations

import os
import signal
from typing import Any, Callable

import pytest
from lockhelpers import MUTEXES, RECIPES

pytest_plugins = ["zkrecipes.testing.pytest_plugin"]  # the kit's fixtures are opt-in, as for any user

# A run started in the background of a non-interactive shell (`make test &`) inherits SIGINT ignored, and so
# would every zkrecipes it starts (Python keeps an inherited SIG_IGN): the tests that press Ctrl-C on a child
# would see it ignored, as a nohup'ed CLI rightly does. Handled here, the children start with the default.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(params=MUTEXES)
def mutex(request: pytest.FixtureRequest) -> str:
    """The name of each mutex recipe in turn: FairLock, ExclusiveLock, ReadWriteLock's write side."""
    return str(request.param)


@pytest.fixture
def make_lock(mutex: str) -> Callable[..., Any]:
    """The recipe named by ``mutex``: ``make_lock(client, path, **kwargs)``."""
    return RECIPES[mutex]


# the longest files first: with two processes (make test's pytest-xdist, one file per process at a time) a
# long file started last would run alone at the end; the order of the tests within each file is kept
_LONGEST_FIRST = ("test_safety.py", "test_bench_smoke.py", "test_tooz.py", "test_interop.py")


_ENSEMBLE_FROM_ENV = ("test_docker_compose.py", "test_docker_compose_tls.py", "test_external_ensemble.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    def rank(item: Any) -> int:
        name = item.path.name
        return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # (stable: every other file keeps its place)
    # make test-docker: only the tests that reach the session ensemble (the containers), by the fixture or by
    # the environment; the others start servers of their own and ran, the same, in make test
    if os.environ.get("ZKRECIPES_ENSEMBLE_TESTS_ONLY") == "1":
        def reaches(item: Any) -> bool:
            return "zk_ensemble" in item.fixturenames or item.path.name in _ENSEMBLE_FROM_ENV

        others = [item for item in items if not reaches(item)]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = [item for item in items if reaches(item)]
