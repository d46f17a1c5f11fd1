"""Child processes that cannot outlive the process that started them (used by the kit, the lab and bench),
and the error when the program a child would run (ZooKeeper, java, a TLS tool) is not installed."""

from __future__ import annotations

import contextlib
import ctypes
import signal

_PR_SET_PDEATHSIG = 1


class ZooKeeperNotFound(RuntimeError):
    """No ZooKeeper server install (jar) or no ``java`` could be found on this machine."""


def die_with_parent() -> None:
    """``preexec_fn`` for :class:`subprocess.Popen`: the child gets SIGKILL when its parent dies (Linux).

    Runs in the child between fork and exec; elsewhere it does nothing. Pass it only from the main thread:
    the parent-death signal fires when the *thread* that forked ends."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
