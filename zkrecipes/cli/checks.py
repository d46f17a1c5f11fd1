"""What the user typed, checked before any ZooKeeper call: the path, the identifier, the command, and
the options' values (argparse types: seconds, leases, tokens, --keep, --exit-if-done)."""

from __future__ import annotations

import argparse
import math
from typing import List, Optional

from .exits import EXIT_USAGE, fail


def check_path(path: str) -> str:
    """PATH if it is a valid lock path, else CliError 2."""
    from .. import naming

    try:
        return naming.validate_path(path)
    except (TypeError, ValueError) as exc:
        raise fail(f"bad path: {exc}", EXIT_USAGE) from None


def check_identifier(identifier: Optional[str]) -> Optional[str]:
    """--identifier if valid (or None), else CliError 2."""
    from .. import naming

    if identifier is None:
        return None
    try:
        return naming.validate_label("--identifier", identifier)
    except (TypeError, ValueError) as exc:
        raise fail(f"bad identifier: {exc}", EXIT_USAGE) from None


def check_cmd(cmd: Optional[List[str]], command: str) -> List[str]:
    """The command after ``--``, or CliError 2 if there is none."""
    if not cmd:
        raise fail(f"missing command: usage: zkrecipes {command} PATH [options] -- CMD [ARGS...]", EXIT_USAGE)
    return cmd


MAX_SECONDS = 86400.0  # a day: any longer wait is a typo (and kazoo's millisecond fields overflow)
MAX_SESSION_TIMEOUT = 3600.0  # servers cap sessions far lower (maxSessionTimeout, 40 s by default)


def nonneg(text: str, limit: float = MAX_SECONDS) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if math.isnan(value):  # float() reads 'nan'
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r} (not a number)")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds: {text!r}")
    if not value <= limit:  # inf as well
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds up to {limit:g}: {text!r}")
    return value


def leases(text: str) -> int:
    from .. import naming

    try:
        return naming.validate_max_leases(int(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"-n wants a whole number of leases >= 1: {text!r} ({exc})") from None


def positive(text: str, limit: float = MAX_SECONDS) -> float:
    value = nonneg(text, limit)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds: {text!r}")
    return value


def session_timeout(text: str) -> float:
    return positive(text, MAX_SESSION_TIMEOUT)


def keep(text: str) -> float:
    from ..once import parse_keep

    try:
        return parse_keep(text)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def exit_code(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 255:
        raise argparse.ArgumentTypeError(f"--exit-if-done wants an exit status 0..255: {text!r}")
    return value


def token(text: str) -> int:
    from ..revoke import validate_token

    try:
        return validate_token(int(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--token wants a fencing token (a czxid: the holder's "
                                         f"ZKRECIPES_TOKEN, or its token in status --json): {text!r} ({exc})") from None
