"""One rule for tests that need a tool this machine may lack: skip, saying why -- unless ``CI=true``.

``make test`` installs what these tests need itself (a JDK and Curator, redis-server; scripts/bootstrap.sh
and tests/redishelper.py), and CI (``.ci/run``) sets ``CI=true``: there a missing tool means a broken
set-up, and a skip would pass it off as green. scripts/test-pythons.sh applies the same rule to the other
supported Pythons.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """Whether ``CI`` is set to true (``true``, ``1`` or ``yes``, any case), as CI services and .ci/run do."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing_tool(reason: str) -> NoReturn:
    """Skip the calling test for a tool ``make test`` installs itself, with ``reason``; under ``CI=true``
    fail it instead."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: make test installs it, so it must be here)", pytrace=False)
    pytest.skip(reason)
