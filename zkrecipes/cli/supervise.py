"""Running a command under a hold: the child started, signals sent to us forwarded to it, SIGTERM then
SIGKILL when the hold falls in doubt, is lost or is asked to let go (the doubt clock: the child is gone
before the session could expire), and the exit status it leaves."""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

from .exits import EXIT_NOEXEC, EXIT_NOTFOUND, EXIT_REVOKED, EXIT_TEMPFAIL, EXIT_USAGE, fail

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger("zkrecipes.cli")

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _child_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class Outcome:
    """How a command run by :func:`run_held` ended."""

    def __init__(self, status: int, signalled: bool) -> None:
        self.status = status  # its exit status (128+N if it died of signal N)
        self.signalled = signalled  # we forwarded SIGINT/SIGTERM/SIGHUP to it: the user wants to stop


KILL_MARGIN = 0.1  # of the session timeout (at least MIN_KILL_MARGIN): the child is gone this long before
MIN_KILL_MARGIN = 0.2  # the lost deadline (seconds), for the kill to land and the clocks to differ a little


def kill_margin(timeout: float) -> float:
    """Seconds between the latest SIGKILL and the lost deadline, for a ``timeout`` s session."""
    return max(MIN_KILL_MARGIN, KILL_MARGIN * timeout)


def grace_window(timeout: float) -> float:
    """The longest ``--grace`` a ``timeout`` s session leaves: from the moment a hold falls in doubt
    (no answer for half the timeout) to its SIGKILL moment (the lost deadline minus :func:`kill_margin`)."""
    from ..session import OVERDUE

    return round(max(0.0, (1.0 - OVERDUE) * timeout - kill_margin(timeout)), 3)  # 1.2, not 1.1999999999999998


class Held:
    """What :func:`run_held` watches: a lock or an election (``state`` and ``lost``) on ``client``, and a
    lock's ``revoke_requested`` (``revoke``; None for an election: it is never asked)."""

    def __init__(self, client: KazooClient, participant: Any, noun: str, revoke: Any = None) -> None:
        from .._kazoo import session_id

        self.client, self.participant, self.noun, self.revoke = client, participant, noun, revoke
        self.session = session_id(client)  # the hold's: lost in this same session means its node was deleted

    def in_doubt(self) -> bool:
        return self.participant.state in ("suspended", "lost") or bool(self.participant.lost.is_set())

    def revoked(self) -> bool:
        return self.revoke is not None and bool(self.revoke.is_set())

    def kill_by(self) -> Optional[float]:
        """Monotonic time the child must be killed by: the lost deadline minus the margin (None: unknown)."""
        from .._kazoo import session_timeout
        from ..session import SessionWatcher

        d = SessionWatcher.of(self.client).deadlines()
        return None if d is None else d[1] - kill_margin(session_timeout(self.client))

    def reason(self) -> str:
        if self.participant.lost.is_set():
            from .._kazoo import session_id
            from ..session import SessionWatcher

            d = SessionWatcher.of(self.client).deadlines()
            if session_id(self.client) == self.session and (d is None or time.monotonic() < d[1]):
                return f"{self.noun} was broken: its node was deleted (zkrecipes break, or by hand)"
            return _loss_reason(self.client, f"lost {self.noun}")
        from .._kazoo import session_timeout

        return (f"{self.noun} fell in doubt (ZooKeeper unreachable or silent): the command was stopped before "
                f"the {session_timeout(self.client):g} s session could expire")


def run_held(cmd: Sequence[str], env_extra: Dict[str, str], held: Held, grace: Optional[float],
             kill_after: float = 0.0) -> Outcome:
    """Run ``cmd`` while the hold is certain. When it falls in doubt (or is lost): SIGTERM the command,
    then SIGKILL it ``grace`` seconds later, or earlier so that it is gone :func:`kill_margin` before the
    lost deadline (at once if the hold is lost: the session ended or the node was deleted); then raise
    CliError 75. When a revoke is requested: SIGTERM, SIGKILL ``kill_after`` seconds later (or as
    above, if the hold falls in doubt meanwhile); then raise CliError :data:`EXIT_REVOKED`.

    SIGINT/SIGTERM/SIGHUP sent to us are forwarded to the command while it runs.
    """
    env = dict(os.environ, **env_extra)
    try:
        proc = subprocess.Popen(list(cmd), env=env)
    except FileNotFoundError:
        raise fail(f"command not found: {cmd[0]}", EXIT_NOTFOUND) from None
    except PermissionError:
        raise fail(f"command not executable: {cmd[0]}", EXIT_NOEXEC) from None
    except OSError as exc:
        raise fail(f"cannot run {cmd[0]}: {exc.strerror or exc}", EXIT_NOEXEC) from None
    forwarded = []

    def forward(signum: int, frame: Optional[FrameType]) -> None:
        forwarded.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)

    wake = threading.Event()  # set on each change of the hold and on a revoke request: no 50 ms wait for them

    def told(participant: Any, state: str) -> None:
        wake.set()

    held.participant.add_listener(told)
    old = {s: signal.signal(s, forward) for s in _FORWARDED}
    try:
        term_at: Optional[float] = None  # when the command got SIGTERM
        kill_at = math.inf  # when it gets SIGKILL (before the doubt clock's moment, below)
        doubt, reason, code = False, "", EXIT_TEMPFAIL
        while True:
            wake.clear()
            now = time.monotonic()
            if not doubt and held.in_doubt():
                doubt, reason, code = True, held.reason(), EXIT_TEMPFAIL
                kill_at = min(kill_at, now + grace if grace is not None else math.inf)
            elif term_at is None and held.revoked():
                reason, code = f"{held.noun}: revoke requested; the command was stopped", EXIT_REVOKED
                kill_at = now + kill_after
            if term_at is None and (doubt or code == EXIT_REVOKED):
                log.info("%s: SIGTERM to pid %d", reason, proc.pid)
                proc.terminate()
                term_at = now
            wait = 0.05
            if term_at is not None:
                by = held.kill_by()
                at = kill_at if by is None else min(kill_at, by)
                if held.participant.lost.is_set():  # past the deadline, or the server said so, or broken
                    at, reason, code = now, held.reason(), EXIT_TEMPFAIL
                if now >= at:
                    if proc.poll() is None:
                        log.info("SIGKILL to pid %d", proc.pid)
                        proc.kill()
                        if code == EXIT_REVOKED:
                            reason += f" (SIGKILL: it did not stop within --kill-after {kill_after:g} s)"
                    proc.wait()
                    raise fail(reason, code)
                wait = min(wait, at - now)
            wake.wait(max(0.0, wait))
            status = proc.poll()
            if status is None:
                continue
            if term_at is not None:
                raise fail(reason, code)
            return Outcome(_child_status(status), bool(forwarded))
    finally:
        held.participant.remove_listener(told)
        for s, h in old.items():
            signal.signal(s, h)


def check_grace(grace: Optional[float], session_timeout: float) -> Optional[float]:
    """Refuse a ``--grace`` longer than the session timeout leaves (see :func:`grace_window`)."""
    if grace is None:
        return None
    window = grace_window(session_timeout)
    if grace > window:
        raise fail(f"--grace {grace:g} is longer than the {window:g} s a {session_timeout:g} s session timeout "
                   f"leaves between doubt and the lost deadline; use --grace {window:g} or less, or a longer "
                   f"--session-timeout", EXIT_USAGE)
    return grace


def _loss_reason(client: KazooClient, what: str) -> str:
    """One line on why a hold was lost: no answer within the session timeout, or expiry told by the server."""
    if client.client_state in ("CLOSED", "AUTH_FAILED"):  # kazoo gave up: e.g. its login refused on reconnecting
        return f"{what}: the ZooKeeper client gave up reconnecting (was its login refused?)"
    from .._kazoo import session_timeout
    from ..session import SessionWatcher

    d = SessionWatcher.of(client).deadlines()
    if d is not None and time.monotonic() >= d[1]:
        return f"{what}: no answer from ZooKeeper within the session timeout ({session_timeout(client):g} s)"
    return f"{what}: the ZooKeeper session expired"


def token_env(token: Optional[int], node: Optional[str]) -> Dict[str, str]:
    """The command's environment additions: its hold's fencing token and node."""
    return {"ZKRECIPES_TOKEN": "" if token is None else str(token), "ZKRECIPES_NODE": node or ""}

