"""The command line's exit codes, what ``--help`` says of them, and the two ways a command ends early:
:class:`CliError` (one line and an exit code, never a traceback) and :class:`Terminated` (SIGTERM/SIGHUP)."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Optional

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69
EXIT_SOFTWARE = 70
EXIT_TEMPFAIL = 75
EXIT_NOPERM = 77
EXIT_REVOKED = 79  # lock: a revoke was requested, the command stopped and the lock released (no sysexits code)
EXIT_NOEXEC = 126
EXIT_NOTFOUND = 127
EXIT_INTERRUPTED = 130

EXIT_TERMINATED = 128 + signal.SIGTERM

EXIT_CODES = f"""exit codes:
  N    lock/elect: the command's own exit status (128+S if it died of signal S)
  0    lock --once-per: KEY was done already, the command not run (--exit-if-done N: N instead);
       revoke: every holder printed was asked; break: the holder let go within --grace, or its node was deleted
  {EXIT_FAILED}    demo: a verdict check failed; revoke: no holder to ask;
       break: no current holder has that token (nothing deleted)
  {EXIT_USAGE}    bad usage or input (path, missing command, chroot, a path another recipe uses, ...)
  {EXIT_UNAVAILABLE}   cannot reach ZooKeeper (or, for demo, no local ZooKeeper to start)
  {EXIT_SOFTWARE}   internal error (ZKRECIPES_LOG=debug shows the traceback)
  {EXIT_TEMPFAIL}   timed out waiting, or the lock/leadership fell in doubt or was lost while the command ran
       (the command was stopped; a lock whose node was deleted, e.g. by break: killed at once)
  {EXIT_NOPERM}   authentication required or refused, or not authorized by the path's ACL
  {EXIT_REVOKED}   lock: revoke requested while the command ran: it got SIGTERM (SIGKILL after --kill-after),
       then the lock was released
  {EXIT_NOEXEC}  command not executable;  {EXIT_NOTFOUND}  command not found
  {EXIT_INTERRUPTED}  interrupted (SIGINT) while waiting;  {EXIT_TERMINATED}  terminated (SIGTERM/SIGHUP) while waiting

Everything after the first "--" is the command; zkrecipes options go before it.
"""

REVOKE_EXIT_CODES = f"""exit codes:
  0    revoke: every holder printed was asked; break: the holder let go within --grace, or its node was deleted
  {EXIT_FAILED}    revoke: no holder to ask; break: no current holder has that token (nothing deleted)
  {EXIT_USAGE}    bad usage or input
  {EXIT_UNAVAILABLE}   cannot reach ZooKeeper
  {EXIT_SOFTWARE}   internal error (ZKRECIPES_LOG=debug shows the traceback)
  {EXIT_NOPERM}   authentication required or refused, or not authorized by the path's ACL
"""


class CliError(Exception):
    """A failure to report as one line and an exit code (never a traceback)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: int) -> "CliError":
    """The error to raise for ``message`` and exit ``code``: ``raise fail(...)``."""
    return CliError(message, code)


class Terminated(BaseException):
    """SIGTERM/SIGHUP while not running a command: unwinds like KeyboardInterrupt (nodes are deleted)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def terminate(signum: int, frame: Optional[FrameType]) -> None:
    """The SIGTERM/SIGHUP handler while no command runs: raise :class:`Terminated`."""
    raise Terminated(signum)

