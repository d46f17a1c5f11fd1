"""The command line's messages that need no ZooKeeper: limits in the unit the user typed, and every
command's exit codes listed by ``--help`` (docs/cli.rst, "Exit codes")."""

from __future__ import annotations

import re

import pytest

from zkrecipes import cli


def _usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli._parse(list(argv))
    assert exit_.value.code == cli.EXIT_USAGE
    return capsys.readouterr().err


@pytest.mark.parametrize("keep,limit", [
    ("400d", "at most 366d (366 days), got '400d'"),
    ("9000h", "at most 8784h (366 days), got '9000h'"),
    ("600000m", "at most 527040m (366 days), got '600000m'"),
    ("40000000", "at most 31622400 seconds (366 days), got '40000000'"),
    ("40000000s", "at most 31622400 seconds (366 days), got '40000000s'"),
])
def test_the_keep_limit_is_in_the_unit_typed(capsys: pytest.CaptureFixture[str], keep: str, limit: str) -> None:
    err = _usage_error(capsys, "lock", "/x", "--once-per", "k", "--keep", keep, "--", "true")
    assert limit in err and "e+" not in err, err


def test_seconds_limits_print_without_an_exponent(capsys: pytest.CaptureFixture[str]) -> None:
    for option in ("--timeout", "--kill-after", "--grace"):
        err = _usage_error(capsys, "lock", "/x", option, "1e9", "--", "true")
        assert "up to 86400: '1e9'" in err and "e+" not in err.replace("'1e9'", ""), err
    err = _usage_error(capsys, "break", "/x", "--token", "5", "--grace", "1e9")
    assert "up to 86400" in err, err


def _codes(text: str) -> dict:
    """``--help``'s exit code list: code -> its meaning (continuation lines joined)."""
    entries: dict = {}
    code = None
    for line in text.split("exit codes:", 1)[1].splitlines():
        m = re.match(r"  (\d+|N)\s+(.*)", line)
        if m:
            code = m.group(1)
            entries[code] = entries.get(code, "") + " " + m.group(2)
        elif line.startswith("       ") and code is not None:
            entries[code] += " " + line.strip()
        else:
            code = None
    return entries


@pytest.mark.parametrize("argv", [[], ["lock"], ["elect"], ["status"], ["demo"]])
def test_help_lists_every_commands_exit_codes(capsys: pytest.CaptureFixture[str], argv: list) -> None:
    with pytest.raises(SystemExit):
        cli._parse(argv + ["--help"])
    codes = _codes(capsys.readouterr().out)
    for code, meaning in (("0", "revoke: every holder printed was asked"), ("0", "break: the holder let go"),
                          ("1", "demo: a verdict check failed"), ("1", "revoke: no holder to ask"),
                          ("1", "break: no current holder has that token"), ("75", "timed out waiting"),
                          ("75", "or was lost"), ("79", "lock: revoke requested")):
        assert meaning in codes.get(code, ""), (code, meaning, codes)
    assert cli.EXIT_REVOKED == 79


@pytest.mark.parametrize("command", ["revoke", "break"])
def test_revoke_and_break_help_list_their_codes(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit):
        cli._parse([command, "--help"])
    out = capsys.readouterr().out
    assert set(_codes(out)) == {"0", "1", "2", "69", "70", "77"}, out
    if command == "break":
        assert "--grace" in out and f"default {cli.BREAK_GRACE:g}" in out, out


def test_lock_help_documents_kill_after_and_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli._parse(["lock", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--kill-after S when a revoke is requested" in out and f"(default {cli.KILL_AFTER:g})" in out, out
    assert cli.KILL_AFTER < cli.BREAK_GRACE
