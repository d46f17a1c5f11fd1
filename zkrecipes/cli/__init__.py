"""Command line: ``zkrecipes lock | elect | status | revoke | break | demo``.

Run a command only while a lock or leadership is held, see who holds what, or watch a demo.

Everything after the first ``--`` is the command; options of ``zkrecipes`` go before it, on either side
of PATH (``zkrecipes lock /locks/x --timeout 5 -- cmd``).

Exit codes: the command's own status (128+N if it died of signal N), or with ``--once-per`` 0 (or
``--exit-if-done N``) when the key was done already; 0 revoke/break done; 1 the demo's verdict failed,
revoke found no holder, break found no holder with that token; 2 bad usage or input; 69 ZooKeeper
unreachable (or no local ZooKeeper for the demo); 70 internal error; 75 timed out waiting, or the hold fell
in doubt while the command ran (it got SIGTERM, then SIGKILL after ``--grace`` or just before the session
could expire, whichever is first) or was lost (its node deleted: SIGKILL at once);
77 authentication required or refused, or an ACL does not allow what was asked; 79 a revoke was requested
(SIGTERM, SIGKILL after ``--kill-after``, then the lock released);
126/127 command not executable / not found; 130 interrupted (SIGINT), 143 terminated (SIGTERM) while waiting.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any, Optional, Sequence

from .connection import CLOSE_WAIT, EXIT_BOUND, close_wait, connect
from .exits import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOEXEC,
    EXIT_NOPERM,
    EXIT_NOTFOUND,
    EXIT_REVOKED,
    EXIT_SOFTWARE,
    EXIT_TEMPFAIL,
    EXIT_TERMINATED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    REVOKE_EXIT_CODES,
    CliError,
    Terminated,
    terminate,
)
from .parsing import BREAK_GRACE, KILL_AFTER, build_parser, parse
from .status import queue_status, render_table
from .supervise import Held, Outcome, grace_window, kill_margin, run_held

__all__ = [
    "BREAK_GRACE", "CLOSE_WAIT", "EXIT_BOUND", "EXIT_CODES", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_NOEXEC",
    "EXIT_NOPERM", "EXIT_NOTFOUND", "EXIT_REVOKED", "EXIT_SOFTWARE", "EXIT_TEMPFAIL", "EXIT_TERMINATED",
    "EXIT_UNAVAILABLE", "EXIT_USAGE", "KILL_AFTER", "REVOKE_EXIT_CODES", "CliError", "Held", "Outcome",
    "Terminated", "build_parser", "close_wait", "connect", "grace_window", "kill_margin", "main", "queue_status",
    "render_table", "run_held",
]

log = logging.getLogger("zkrecipes.cli")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_parse = parse  # (the name tests/unit/test_cli_messages.py calls)


def _setup_logging() -> None:
    """Quiet by default (errors reach the user as one line from the CLI); ZKRECIPES_LOG=debug|info|...
    turns on the library's and kazoo's logs."""
    level = os.environ.get("ZKRECIPES_LOG")
    fmt = "%(asctime)s %(name)s %(levelname)s %(message)s"
    if not level:
        logging.basicConfig(level=logging.CRITICAL, format=fmt)
        return
    if not isinstance(logging.getLevelName(level.upper()), int):
        print(f"zkrecipes: ignoring ZKRECIPES_LOG={level!r} (use debug, info, warning or error)", file=sys.stderr)
        level = "WARNING"
    logging.basicConfig(level=level.upper(), format=fmt)


def _thread_error(hook_args: Any) -> None:
    log.debug("thread %s died", getattr(hook_args.thread, "name", "?"),
              exc_info=(hook_args.exc_type, hook_args.exc_value, hook_args.exc_traceback))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``zkrecipes`` console script; returns the exit status."""
    _setup_logging()
    args = parse(list(sys.argv[1:] if argv is None else argv))
    threading.excepthook = _thread_error  # kazoo's I/O thread dies on some SASL refusals: no traceback
    old = {s: signal.signal(s, terminate) for s in _STOP_SIGNALS}
    try:
        status: int = args.func(args)
        return status
    except CliError as exc:
        print(f"zkrecipes: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("zkrecipes: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated as sig:
        print(f"zkrecipes: terminated (signal {sig.signum})", file=sys.stderr)
        return 128 + sig.signum
    except Exception as exc:
        from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError

        from .. import _connect

        denied = _connect.failure(exc, getattr(args, "security", None) or _connect.Security(),
                                  getattr(args, "path", None) or "ZooKeeper")
        if denied is not None:
            print(f"zkrecipes: {denied[0]}", file=sys.stderr)
            return denied[1]
        if isinstance(exc, (ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError)):
            print(f"zkrecipes: lost the connection to ZooKeeper ({type(exc).__name__})", file=sys.stderr)
            return EXIT_UNAVAILABLE
        log.debug("internal error", exc_info=True)
        print(f"zkrecipes: internal error: {type(exc).__name__}: {exc} (ZKRECIPES_LOG=debug shows the traceback)",
              file=sys.stderr)
        return EXIT_SOFTWARE
    finally:
        for s, h in old.items():
            signal.signal(s, h)
