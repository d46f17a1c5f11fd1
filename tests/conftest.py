"""Fixtures shared by the ZooKeeper tests (the kit's own fixtures -- zk_ensemble, zk, zk_factory,
zk_namespace -- come from the zkrecipes.testing pytest plugin). Plain helpers live in lockhelpers.py."""

from __future__ import annotations

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
