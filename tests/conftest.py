"""Fixtures shared by the ZooKeeper tests (the kit's own fixtures -- zk_ensemble, zk, zk_factory,
zk_namespace -- come from the zkrecipes.testing pytest plugin). Plain helpers live in lockhelpers.py."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from lockhelpers import RECIPES


@pytest.fixture(params=sorted(RECIPES))
def make_lock(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Each mutex recipe in turn: ``make_lock(client, path, **kwargs)``."""
    return RECIPES[request.param]

