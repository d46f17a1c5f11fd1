"""tests/toolskip.py: a test whose tool is missing skips with its reason, and fails instead under CI=true."""

from __future__ import annotations

import pytest
from toolskip import in_ci, missing_tool


@pytest.mark.parametrize("value,ci", [("true", True), ("TRUE", True), ("1", True), ("yes", True), ("", False),
                                      ("false", False), ("0", False), (None, False)])
def test_ci_is_read_from_the_environment(monkeypatch, value, ci):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert in_ci() is ci


def test_a_missing_tool_skips_with_its_reason(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no JDK here"):
        missing_tool("no JDK here")


def test_under_ci_a_missing_tool_fails(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"no JDK here \(CI=true: make test installs it"):
        missing_tool("no JDK here")
