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

import argparse
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from ._connect import Security
    from ._lock import Lock
    from .once import Once

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

KILL_AFTER = 5.0  # lock --kill-after: SIGTERM to SIGKILL after a revoke request (seconds)
BREAK_GRACE = 10.0  # break --grace: longer than KILL_AFTER, so a CLI holder asked has time to stop and release

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

log = logging.getLogger("zkrecipes.cli")


class CliError(Exception):
    """A failure to report as one line and an exit code (never a traceback)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _fail(message: str, code: int) -> "CliError":
    return CliError(message, code)


class Terminated(BaseException):
    """SIGTERM/SIGHUP while not running a command: unwinds like KeyboardInterrupt (nodes are deleted)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, frame: Optional[FrameType]) -> None:
    raise Terminated(signum)


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# -- connection --------------------------------------------------------------------------------------
def connect(
    hosts: Optional[str], connect_timeout: float, session_timeout: float, security: "Optional[Security]" = None
) -> KazooClient:
    """A started KazooClient (with ``security``, a :class:`zkrecipes._connect.Security`), or CliError naming
    the hosts and the time waited (69), or the authentication that failed (77)."""
    from . import _connect

    source = "--hosts"
    if not hosts:
        hosts, source = os.environ.get("ZK_HOSTS"), "ZK_HOSTS"
    if not hosts:
        raise _fail("no ZooKeeper hosts: pass --hosts H or set ZK_HOSTS (e.g. 127.0.0.1:2181)", EXIT_USAGE)
    security = security or _connect.Security()
    try:
        client = _connect.new_client(hosts, session_timeout, security)
    except (ValueError, TypeError) as exc:
        raise _fail(f"bad {source} {hosts!r}: {exc}", EXIT_USAGE) from None
    try:
        root = _connect.start(client, hosts, connect_timeout, security)
    except _connect.ConnectError as exc:
        _close(client)
        raise _fail(str(exc), exc.code) from None
    except BaseException:
        _close(client)
        raise
    if client.chroot and root is None:
        _close(client)
        raise _fail(f"chroot {client.chroot} does not exist on ZooKeeper at {hosts}: create it first, or leave "
                    f"it out of {source}", EXIT_USAGE)
    return client


def _security(args: argparse.Namespace) -> "Security":
    """The TLS/SASL/auth settings of ``args`` and the environment (kept on ``args`` for error messages)."""
    from . import _connect

    try:
        security = args.security = _connect.from_args(args)
    except _connect.ConnectError as exc:
        raise _fail(str(exc), exc.code) from None
    return security


CLOSE_WAIT = 0.5  # seconds to wait for ZooKeeper to confirm the session's end (one round trip when healthy)
EXIT_BOUND = 1.0  # lock/elect exit this soon after the command ended and the node is gone or the session
# known lost (docs/cli.rst, "When zkrecipes exits"): CLOSE_WAIT, or the release's 0.2 s look at a loss, plus
# the process's own end


def close_wait(client: KazooClient) -> float:
    """How long :func:`_close` waits for ``client``'s session to end: :data:`CLOSE_WAIT`, cut short by the
    doubt clock's lost moment (nothing is gained by waiting once the session is known lost), and 0 if no
    request was ever answered (no session, so no node)."""
    from .session import SessionWatcher

    d = SessionWatcher.of(client).lost_by()
    if d is None:
        return 0.0
    return max(0.0, min(CLOSE_WAIT, d[1] - time.monotonic()))


def _close(client: KazooClient) -> None:
    """Stop (ending the session, so our ephemeral nodes go at once) and close; never raises. Returns once
    that is done or after :func:`close_wait`: kazoo's ``stop()`` waits for its connection thread, which on
    a silent link is stuck in a reconnection's handshake for up to the session timeout (or in a back-off
    sleep); the stop then finishes on a daemon thread, or not at all if the process exits first."""
    limit = close_wait(client)
    done = threading.Event()

    def stop() -> None:
        try:
            client.stop()
            client.close()
        except Exception:
            log.debug("closing the ZooKeeper client failed", exc_info=True)
        finally:
            done.set()

    threading.Thread(target=stop, name="zkrecipes-close", daemon=True).start()
    if not done.wait(limit):
        log.info("the ZooKeeper session did not end within %.2f s: not waiting for it (it expires on its own)", limit)


# -- running a command under a hold ----------------------------------------------------------------
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
    from .session import OVERDUE

    return round(max(0.0, (1.0 - OVERDUE) * timeout - kill_margin(timeout)), 3)  # 1.2, not 1.1999999999999998


class Held:
    """What :func:`run_held` watches: a lock or an election (``state`` and ``lost``) on ``client``, and a
    lock's ``revoke_requested`` (``revoke``; None for an election: it is never asked)."""

    def __init__(self, client: KazooClient, participant: Any, noun: str, revoke: Any = None) -> None:
        from ._kazoo import session_id

        self.client, self.participant, self.noun, self.revoke = client, participant, noun, revoke
        self.session = session_id(client)  # the hold's: lost in this same session means its node was deleted

    def in_doubt(self) -> bool:
        return self.participant.state in ("suspended", "lost") or bool(self.participant.lost.is_set())

    def revoked(self) -> bool:
        return self.revoke is not None and bool(self.revoke.is_set())

    def kill_by(self) -> Optional[float]:
        """Monotonic time the child must be killed by: the lost deadline minus the margin (None: unknown)."""
        from ._kazoo import session_timeout
        from .session import SessionWatcher

        d = SessionWatcher.of(self.client).deadlines()
        return None if d is None else d[1] - kill_margin(session_timeout(self.client))

    def reason(self) -> str:
        if self.participant.lost.is_set():
            from ._kazoo import session_id
            from .session import SessionWatcher

            d = SessionWatcher.of(self.client).deadlines()
            if session_id(self.client) == self.session and (d is None or time.monotonic() < d[1]):
                return f"{self.noun} was broken: its node was deleted (zkrecipes break, or by hand)"
            return _loss_reason(self.client, f"lost {self.noun}")
        from ._kazoo import session_timeout

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
        raise _fail(f"command not found: {cmd[0]}", EXIT_NOTFOUND) from None
    except PermissionError:
        raise _fail(f"command not executable: {cmd[0]}", EXIT_NOEXEC) from None
    except OSError as exc:
        raise _fail(f"cannot run {cmd[0]}: {exc.strerror or exc}", EXIT_NOEXEC) from None
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
                    raise _fail(reason, code)
                wait = min(wait, at - now)
            wake.wait(max(0.0, wait))
            status = proc.poll()
            if status is None:
                continue
            if term_at is not None:
                raise _fail(reason, code)
            return Outcome(_child_status(status), bool(forwarded))
    finally:
        held.participant.remove_listener(told)
        for s, h in old.items():
            signal.signal(s, h)


def _check_grace(grace: Optional[float], session_timeout: float) -> Optional[float]:
    """Refuse a ``--grace`` longer than the session timeout leaves (see :func:`grace_window`)."""
    if grace is None:
        return None
    window = grace_window(session_timeout)
    if grace > window:
        raise _fail(f"--grace {grace:g} is longer than the {window:g} s a {session_timeout:g} s session timeout "
                    f"leaves between doubt and the lost deadline; use --grace {window:g} or less, or a longer "
                    f"--session-timeout", EXIT_USAGE)
    return grace


def _loss_reason(client: KazooClient, what: str) -> str:
    """One line on why a hold was lost: no answer within the session timeout, or expiry told by the server."""
    if client.client_state in ("CLOSED", "AUTH_FAILED"):  # kazoo gave up: e.g. its login refused on reconnecting
        return f"{what}: the ZooKeeper client gave up reconnecting (was its login refused?)"
    from ._kazoo import session_timeout
    from .session import SessionWatcher

    d = SessionWatcher.of(client).deadlines()
    if d is not None and time.monotonic() >= d[1]:
        return f"{what}: no answer from ZooKeeper within the session timeout ({session_timeout(client):g} s)"
    return f"{what}: the ZooKeeper session expired"


def _token_env(token: Optional[int], node: Optional[str]) -> Dict[str, str]:
    return {"ZKRECIPES_TOKEN": "" if token is None else str(token), "ZKRECIPES_NODE": node or ""}


class Progress:
    """How many are ahead of us while we wait, from the lock's own listings (told by the engine each time
    the acquire is about to wait): no thread, no watch and no request of its own, so N waiters cost O(N).
    Printed to stderr when ``show``; kept for the timeout message either way."""

    def __init__(self, lock: Lock, path: str, show: bool) -> None:
        self.path, self.show = path, show
        from ._lock import on_ahead

        self.ahead: Optional[int] = None
        on_ahead(lock, self.seen)

    def seen(self, n: int) -> None:
        """The acquiring thread: ``n`` nodes are ahead of ours now."""
        if n != self.ahead:
            self.ahead = n
            if self.show:
                sys.stderr.write(f"\rwaiting for {self.path}: {n} ahead   ")
                sys.stderr.flush()

    def stop(self) -> None:
        if self.show and self.ahead is not None:
            sys.stderr.write("\n")


def cmd_lock(args: argparse.Namespace) -> int:
    from . import ExclusiveLock, FairLock, LockError, ReadWriteLock, Semaphore

    path = _check_path(args.path)
    cmd = _check_cmd(args.cmd, "lock")
    identifier = _check_identifier(args.identifier)
    if args.exclusive and args.protocol != "zkrecipes":
        raise _fail(f"--exclusive has no --protocol {args.protocol} (that library has no such lock); use --write",
                    EXIT_USAGE)
    if args.leases and args.protocol != "zkrecipes":
        raise _fail(f"-n has no --protocol {args.protocol} (zkrecipes' semaphore only)", EXIT_USAGE)
    grace = _check_grace(args.grace, args.session_timeout)
    _check_once(args, path)
    security = _security(args)
    client = connect(args.hosts, args.connect_timeout, args.session_timeout, security)
    try:
        lock: Lock
        if args.exclusive:
            lock = ExclusiveLock(client, path, identifier, acl=security.acl())
        elif args.leases:
            lock = Semaphore(client, path, args.leases, identifier, acl=security.acl())
        elif args.protocol == "curator" and not (args.read or args.write):  # Curator's InterProcessMutex
            lock = FairLock(client, path, identifier, protocol="curator", acl=security.acl())
        else:
            rw = ReadWriteLock(client, path, identifier, protocol=args.protocol, acl=security.acl())
            lock = rw.read() if args.read else rw.write()
        revoke = lock.revoke_requested  # listen: each hold follows its node (a revoke request, a break: told)
        progress = Progress(lock, path, args.progress or sys.stderr.isatty())
        try:
            got = lock.acquire(timeout=args.timeout)
        except LockError as exc:  # misuse found in ZooKeeper: another library's nodes, -n disagreeing
            raise _fail(str(exc), EXIT_USAGE) from None
        except KeyboardInterrupt:
            raise _fail(f"interrupted while waiting for {path}", EXIT_INTERRUPTED) from None
        except Terminated as sig:
            raise _fail(f"terminated (signal {sig.signum}) while waiting for {path}", 128 + sig.signum) from None
        finally:
            progress.stop()
        if not got:
            ahead = "?" if progress.ahead is None else progress.ahead  # None: it never got to wait in line
            raise _fail(f"timed out waiting for {path} ({ahead} ahead)", EXIT_TEMPFAIL)
        try:
            run = None if args.once_per is None else _once_open(lock, args)
            if run is not None and not run:
                return int(args.exit_if_done)
            outcome = run_held(cmd, _token_env(lock.token, lock.node),
                               Held(client, lock, f"the lock on {path}", revoke), grace, args.kill_after)
            if run is not None and outcome.status == 0:
                _once_done(run, path)
            return outcome.status
        finally:
            lock.release()
    finally:
        _close(client)


def _check_once(args: argparse.Namespace, path: str) -> None:
    """Refuse --once-per's options where they mean nothing or could not hold (exit 2, no request)."""
    from . import once

    if args.once_per is None:
        if args.keep is not None or args.exit_if_done is not None:
            raise _fail("--keep and --exit-if-done go with --once-per KEY", EXIT_USAGE)
        return
    if args.read or args.leases:
        raise _fail(f"--once-per needs a lock one host holds at a time, not {'--read' if args.read else '-n'}",
                    EXIT_USAGE)
    try:
        once.validate_key(path, args.once_per)
    except ValueError as exc:
        raise _fail(f"bad --once-per: {exc}", EXIT_USAGE) from None
    args.keep = once.DEFAULT_KEEP if args.keep is None else args.keep
    args.exit_if_done = 0 if args.exit_if_done is None else args.exit_if_done


def _once_open(lock: Lock, args: argparse.Namespace) -> "Once":
    """With the lock held: the --once-per key's turn, looked at (stderr says so when it was done already)."""
    run = lock.once(args.once_per, args.keep)
    if not run.look():
        print(f"zkrecipes: {args.once_per} was done already ({run.marker}, kept {args.keep:g} s); not running",
              file=sys.stderr)
    return run


def _once_done(run: "Once", path: str) -> None:
    """The command exited 0: mark the key done, or exit 75 if the hold was lost first (the key stays open)."""
    from .errors import LockLost

    try:
        run.done()
    except LockLost as exc:
        raise _fail(f"the command succeeded but {run.key} was not marked done, so it stays open: {exc}",
                    EXIT_TEMPFAIL) from None


def _keep(text: str) -> float:
    from .once import parse_keep

    try:
        return parse_keep(text)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _exit_code(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 255:
        raise argparse.ArgumentTypeError(f"--exit-if-done wants an exit status 0..255: {text!r}")
    return value


def cmd_elect(args: argparse.Namespace) -> int:
    from . import LeaderElection, LockError

    path = _check_path(args.path)
    cmd = _check_cmd(args.cmd, "elect")
    identifier = _check_identifier(args.identifier)
    grace = _check_grace(args.grace, args.session_timeout)
    security = _security(args)
    client = connect(args.hosts, args.connect_timeout, args.session_timeout, security)
    election = LeaderElection(client, path, identifier, protocol=args.protocol, acl=security.acl())
    try:
        while True:
            try:
                got = election.campaign(timeout=args.timeout)
            except LockError as exc:  # the path holds another library's nodes: use its --protocol
                raise _fail(str(exc), EXIT_USAGE) from None
            except KeyboardInterrupt:
                raise _fail(f"interrupted while campaigning on {path}", EXIT_INTERRUPTED) from None
            except Terminated as sig:
                raise _fail(f"terminated (signal {sig.signum}) while campaigning on {path}",
                            128 + sig.signum) from None
            if not got:
                raise _fail(f"timed out waiting for leadership of {path}", EXIT_TEMPFAIL)
            try:
                outcome = run_held(cmd, _token_env(election.token, election.node),
                                   Held(client, election, f"leadership of {path}"), grace)
            except CliError as exc:
                if not (args.requeue and exc.code == EXIT_TEMPFAIL):
                    raise
                print(f"zkrecipes: {exc}; campaigning again", file=sys.stderr, flush=True)
                continue
            finally:
                election.resign()
            if not args.requeue or outcome.signalled:
                return outcome.status
    finally:
        election.resign()
        _close(client)


# -- status --------------------------------------------------------------------------------------------
def queue_status(client: KazooClient, path: str) -> List[Dict[str, Any]]:
    """Rows describing the queue at ``path`` (or its exclusive ``lock`` node), in queue order."""
    from kazoo.exceptions import NoNodeError

    from . import _engine, formats, naming

    try:
        children = client.get_children(path)
    except NoNodeError:
        return []
    now = time.time()
    rows: List[Dict[str, Any]] = []
    queue = formats.sort_any(children)  # zkrecipes, kazoo and Curator nodes
    for (found, node), holding in zip(queue, _engine.holding([n for _, n in queue])):  # each kind's wait-rule
        try:
            data, stat = client.get(f"{path}/{node.name}")
        except NoNodeError:  # left between the listing and the read
            continue
        d = naming.read_data(data)
        if found is not None and found.format != formats.ZKRECIPES:  # kazoo/Curator: the id is the data
            d = {"id": formats.contender(found, node, data).identifier}
        rows.append(_row(len(rows), node.name, node.kind, d, node.host, now - stat.ctime / 1000.0, holding))
        rows[-1]["protocol"] = formats.label(found)
        rows[-1]["token"] = stat.czxid  # the fencing token: what ``zkrecipes break --token`` takes
        if node.kind == naming.LEASE:
            rows[-1]["leases"] = node.leases
    if "lock" in children:
        try:
            data, stat = client.get(f"{path}/lock")
            rows.insert(0, _row(0, "lock", "X", naming.read_data(data), "", now - stat.ctime / 1000.0, True))
            rows[0]["protocol"] = "zkrecipes"
            rows[0]["token"] = stat.czxid
        except NoNodeError:
            pass
    return rows


def _row(pos: int, name: str, kind: str, d: Dict[str, Any], host: str, age: float, holding: bool) -> Dict[str, Any]:
    return {
        "position": pos,
        "node": name,
        "kind": kind,
        "host": d.get("host") or host,
        "pid": d.get("pid"),
        "identifier": d.get("id"),
        "age": round(max(0.0, age), 1),  # since the node's creation (server clock; no clock is in sync)
        "state": "holding" if holding else "waiting",
    }


def render_table(path: str, rows: List[Dict[str, Any]]) -> str:
    if not rows:
        return f"{path}: no holders or waiters"
    cols = ["position", "node", "kind", "host", "pid", "identifier", "age", "state"]
    if any("for" in r for r in rows):  # --watch: how long each has held or waited
        cols.insert(cols.index("state") + 1, "for")
    if any("leases" in r for r in rows):
        cols.insert(3, "leases")
    if any(r.get("protocol", "zkrecipes") != "zkrecipes" for r in rows):  # a path shared with kazoo/Curator
        cols.append("protocol")
    cells = [[str(r[c]) if r.get(c) is not None else "-" for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    path = _check_path(args.path)
    client = connect(args.hosts, args.connect_timeout, args.session_timeout, _security(args))
    try:
        if not args.watch:
            rows = queue_status(client, path)
            print(json.dumps(rows) if args.json else render_table(path, rows))
            return 0
        try:
            _watch_status(client, path, args.json)
        except (KeyboardInterrupt, Terminated):
            return 0
        return 0  # (not reached: the watch ends by Ctrl-C)
    finally:
        _close(client)


def _watch_status(client: KazooClient, path: str, as_json: bool) -> None:
    """``status --watch``: a child watch on ``path`` (an exists watch while it is missing) and one read
    per node on each change, no polling of ZooKeeper. Each row gets ``for``: seconds it has held (since
    this watch saw it start holding; since its creation if it held when first seen) or waited (since its
    creation). Creation times are ZooKeeper's ``ctime``, the server's wall clock, against this machine's
    clock: a skew between them shows in ``for``. A frame is printed when what it shows changed (not for a
    watch that fired on no change); a terminal's table is redrawn each second too."""
    from kazoo.exceptions import NoNodeError

    changed = threading.Event()
    since: Dict[str, Tuple[str, float]] = {}  # node -> (state, when it started: this machine's clock)
    rows: Optional[List[Dict[str, Any]]] = None
    shown: Optional[List[Dict[str, Any]]] = None  # the last frame printed, without its clock-driven fields
    tty = sys.stdout.isatty()
    while True:
        fresh = rows is None or changed.is_set()
        if fresh:
            changed.clear()
            try:
                client.get_children(path, watch=lambda e: changed.set())
            except NoNodeError:
                client.exists(path, watch=lambda e: changed.set())
            rows = queue_status(client, path)
            now = time.time()
            old, since = since, {}
            for r in rows:
                was = old.get(r["node"])
                if was is not None and was[0] == r["state"]:
                    since[r["node"]] = was
                else:  # new (since its creation), or it started holding now
                    since[r["node"]] = (r["state"], now if was is not None else now - r["age"])
        assert rows is not None
        frame = _frame(rows)
        if (fresh and frame != shown) or (tty and not as_json):
            shown = frame
            now = time.time()
            for r in rows:
                r["for"] = round(max(0.0, now - since[r["node"]][1]), 1)
            if as_json:
                print(json.dumps(rows), flush=True)
            else:
                if tty:
                    sys.stdout.write("\x1b[H\x1b[2J")
                print(time.strftime("%H:%M:%S"), render_table(path, rows), sep="\n", flush=True)
        changed.wait(1.0)


def _frame(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """What a ``status --watch`` frame shows, less ``age`` and ``for`` (they move with the clock alone)."""
    return [{k: v for k, v in r.items() if k not in ("age", "for")} for r in rows]


# -- revoke / break -------------------------------------------------------------------------------------
def cmd_revoke(args: argparse.Namespace) -> int:
    """Ask PATH's holders to let go: their nodes marked (one line each); 1 if nobody holds."""
    from .revoke import request_revoke

    path = _check_path(args.path)
    client = connect(args.hosts, args.connect_timeout, args.session_timeout, _security(args))
    try:
        marked = request_revoke(client, path)
    finally:
        _close(client)
    if not marked:
        raise _fail(f"{path}: no holder to ask", EXIT_FAILED)
    for name in marked:
        print(f"{path}/{name}: revoke requested")
    return 0


def cmd_break(args: argparse.Namespace) -> int:
    """Ask, wait up to --grace, then delete the holder's node of PATH whose token is N; 1, nothing
    touched, if no holder has it."""
    from .errors import LockError
    from .revoke import break_lock

    path = _check_path(args.path)
    client = connect(args.hosts, args.connect_timeout, args.session_timeout, _security(args))
    try:
        broken = break_lock(client, path, args.token, grace=args.grace)
    except LockError as exc:
        raise _fail(str(exc), EXIT_FAILED) from None
    finally:
        _close(client)
    if broken.released:
        print(f"{path}/{broken}: released by its holder within the {args.grace:g} s grace (token {args.token}); "
              "nothing deleted")
    elif args.grace:
        print(f"{path}/{broken}: deleted (token {args.token}): its holder did not let go within {args.grace:g} s")
    else:
        print(f"{path}/{broken}: deleted (token {args.token})")
    return 0


def _token(text: str) -> int:
    from .revoke import validate_token

    try:
        return validate_token(int(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--token wants a fencing token (a czxid: the holder's "
                                         f"ZKRECIPES_TOKEN, or its token in status --json): {text!r} ({exc})") from None


# -- argument checks (before any ZooKeeper call) --------------------------------------------------------
def _check_path(path: str) -> str:
    from . import naming

    try:
        return naming.validate_path(path)
    except (TypeError, ValueError) as exc:
        raise _fail(f"bad path: {exc}", EXIT_USAGE) from None


def _check_identifier(identifier: Optional[str]) -> Optional[str]:
    from . import naming

    if identifier is None:
        return None
    try:
        return naming.validate_label("--identifier", identifier)
    except (TypeError, ValueError) as exc:
        raise _fail(f"bad identifier: {exc}", EXIT_USAGE) from None


def _check_cmd(cmd: Optional[List[str]], command: str) -> List[str]:
    if not cmd:
        raise _fail(f"missing command: usage: zkrecipes {command} PATH [options] -- CMD [ARGS...]", EXIT_USAGE)
    return cmd


MAX_SECONDS = 86400.0  # a day: any longer wait is a typo (and kazoo's millisecond fields overflow)
MAX_SESSION_TIMEOUT = 3600.0  # servers cap sessions far lower (maxSessionTimeout, 40 s by default)


def _nonneg(text: str, limit: float = MAX_SECONDS) -> float:
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


def _leases(text: str) -> int:
    from . import naming

    try:
        return naming.validate_max_leases(int(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"-n wants a whole number of leases >= 1: {text!r} ({exc})") from None


def _positive(text: str, limit: float = MAX_SECONDS) -> float:
    value = _nonneg(text, limit)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds: {text!r}")
    return value


def _session_timeout(text: str) -> float:
    return _positive(text, MAX_SESSION_TIMEOUT)


def build_parser() -> argparse.ArgumentParser:
    from . import _connect

    p = argparse.ArgumentParser(
        prog="zkrecipes",
        description="ZooKeeper locks and leader election from the shell.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def common(sp: argparse.ArgumentParser, session_default: float = 10.0) -> None:
        sp.add_argument("--hosts", help="ZooKeeper connect string (default: $ZK_HOSTS)")
        sp.add_argument("--connect-timeout", type=_positive, default=10.0, metavar="S",
                        help="give up reaching ZooKeeper after S seconds (default 10)")
        sp.add_argument("--session-timeout", type=_session_timeout, default=session_default, metavar="S",
                        help="ZooKeeper session timeout; a hold suspended this long is lost (default 10)")
        _connect.add_options(sp)

    fmt = argparse.RawDescriptionHelpFormatter
    lk = sub.add_parser("lock", help="run CMD while holding a lock", epilog=EXIT_CODES, formatter_class=fmt,
                        usage="%(prog)s PATH [options] -- CMD [ARGS...]",
                        description="Hold PATH (fair write lock by default) while CMD runs; exit with CMD's "
                                    "status. The fencing token is exported as ZKRECIPES_TOKEN.")
    lk.add_argument("path", metavar="PATH")
    mode = lk.add_mutually_exclusive_group()
    mode.add_argument("--read", action="store_true", help="shared read lock")
    mode.add_argument("--write", action="store_true", help="exclusive fair write lock (default)")
    mode.add_argument("--exclusive", action="store_true", help="simple exclusive lock (<PATH>/lock node)")
    mode.add_argument("-n", "--leases", type=_leases, metavar="N",
                      help="take one of N leases: at most N commands run at once (a semaphore)")
    lk.add_argument("--timeout", type=_nonneg, metavar="S", help="give up waiting after S seconds (exit 75)")
    lk.add_argument("--identifier", metavar="ID", help="shown to others in status")
    lk.add_argument("--grace", type=_nonneg, metavar="S",
                    help="when the hold falls in doubt CMD gets SIGTERM, and SIGKILL S seconds later (at most, "
                         "and by default, just before the session could expire: see docs/cli.rst)")
    lk.add_argument("--kill-after", type=_nonneg, default=KILL_AFTER, metavar="S",
                    help=f"when a revoke is requested (zkrecipes revoke, or break asking first) CMD gets SIGTERM, "
                         f"and SIGKILL S seconds later if still running (default {KILL_AFTER:g}); then the lock "
                         f"is released and zkrecipes exits {EXIT_REVOKED}")
    lk.add_argument("--progress", action="store_true", help="show how many are ahead even when not a tty")
    lk.add_argument("--protocol", choices=("zkrecipes", "kazoo", "curator"), default="zkrecipes",
                    help="node format, to share PATH with kazoo or Curator processes (default zkrecipes); "
                         "curator: InterProcessMutex, or with --read/--write InterProcessReadWriteLock")
    lk.add_argument("--once-per", metavar="KEY",
                    help="run CMD once per KEY across every host running this with the same PATH and KEY: "
                         "the others (also later ones) exit 0 without running it; a failed or cut-off run "
                         "leaves KEY open (see docs/cli.rst)")
    lk.add_argument("--keep", type=_keep, metavar="DURATION",
                    help="with --once-per: how long KEY stays done, e.g. 1d (default), 12h, 30m, 90 (seconds)")
    lk.add_argument("--exit-if-done", type=_exit_code, metavar="N",
                    help="with --once-per: exit N instead of 0 when KEY was done already")
    common(lk)
    lk.set_defaults(func=cmd_lock, parser=lk)

    el = sub.add_parser("elect", help="run CMD while leader", epilog=EXIT_CODES, formatter_class=fmt,
                        usage="%(prog)s PATH [options] -- CMD [ARGS...]",
                        description="Campaign on PATH; run CMD while leader; exit with CMD's status.")
    el.add_argument("path", metavar="PATH")
    el.add_argument("--identifier", metavar="ID")
    el.add_argument("--timeout", type=_nonneg, metavar="S", help="give up campaigning after S seconds (exit 75)")
    el.add_argument("--requeue", action="store_true", help="campaign again each time CMD ends")
    el.add_argument("--grace", type=_nonneg, metavar="S", help="as for lock")
    el.add_argument("--protocol", choices=("zkrecipes", "kazoo", "curator"), default="zkrecipes",
                    help="node format, to share PATH with kazoo's Election or Curator's LeaderLatch")
    common(el)
    el.set_defaults(func=cmd_elect, parser=el)

    st = sub.add_parser("status", help="show holders and waiters of PATH", epilog=EXIT_CODES, formatter_class=fmt)
    st.add_argument("path", metavar="PATH")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--watch", action="store_true",
                    help="redraw on every change until Ctrl-C, with FOR: seconds each has held or waited")
    common(st)
    st.set_defaults(func=cmd_status, parser=st)

    rv = sub.add_parser("revoke", help="ask the holder(s) of PATH to let go", epilog=REVOKE_EXIT_CODES,
                        formatter_class=fmt,
                        description="Mark each current holder's node of PATH (a revoke request ZooKeeper "
                                    "stores; nothing is deleted). Holders that listen are told; prints the "
                                    "nodes marked.")
    rv.add_argument("path", metavar="PATH")
    common(rv)
    rv.set_defaults(func=cmd_revoke, parser=rv)

    br = sub.add_parser("break", help="delete the node of PATH's holder whose token is N", formatter_class=fmt,
                        epilog=REVOKE_EXIT_CODES,
                        description="Ask the holder of PATH whose fencing token (czxid) is N to let go, wait "
                                    "up to --grace seconds for its node to go, then delete exactly that node "
                                    "if it is still there; refuse, touching nothing, if no current holder has "
                                    "that token.")
    br.add_argument("path", metavar="PATH")
    br.add_argument("--token", type=_token, required=True, metavar="N",
                    help="the holder's fencing token (ZKRECIPES_TOKEN of its command)")
    br.add_argument("--grace", type=_nonneg, default=BREAK_GRACE, metavar="S",
                    help=f"seconds the holder asked has to let go before its node is deleted (default "
                         f"{BREAK_GRACE:g}, more than lock's --kill-after default); 0 deletes at once")
    common(br)
    br.set_defaults(func=cmd_break, parser=br)

    dm = sub.add_parser("demo", help="run the demo (starts a local ensemble unless --hosts/ZK_HOSTS)",
                        epilog=EXIT_CODES, formatter_class=fmt)
    dm.add_argument("--hosts", help="use this ensemble instead of starting one")
    dm.add_argument("--workers", type=int, default=3, metavar="N", help="worker processes per recipe (default 3)")
    dm.add_argument("--seconds", type=_positive, default=20.0, metavar="S", help="length of the run (default 20)")
    _connect.add_options(dm)
    dm.set_defaults(func=cmd_demo, parser=dm)
    return p


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import MAX_WORKERS, MIN_SECONDS, run_demo

    if not 2 <= args.workers <= MAX_WORKERS:
        raise _fail(f"--workers must be between 2 and {MAX_WORKERS}, got {args.workers}", EXIT_USAGE)
    if args.seconds < MIN_SECONDS:
        raise _fail(f"--seconds must be at least {MIN_SECONDS:g} (a failover takes a session timeout), "
                    f"got {args.seconds:g}", EXIT_USAGE)
    from .testing import ZooKeeperNotFound

    def demo_connect(hosts: str, security: "Optional[Security]") -> KazooClient:
        return connect(hosts, 10.0, 10.0, security)

    try:
        return run_demo(hosts=args.hosts, workers=args.workers, seconds=args.seconds, out=sys.stdout,
                        connect=demo_connect, security=_security(args))
    except ZooKeeperNotFound as exc:
        raise _fail(f"cannot start the embedded demo ensemble: {exc}", EXIT_UNAVAILABLE) from None
    except Terminated:
        raise _fail("demo terminated", EXIT_TERMINATED) from None


def _version() -> str:
    from . import __version__

    return __version__


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


def _split_command(argv: List[str]) -> Tuple[List[str], Optional[List[str]]]:
    """(options, command): the command is everything after the first ``--``, None without one."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def _parse(argv: List[str]) -> argparse.Namespace:
    head, cmd = _split_command(argv)
    args, extras = build_parser().parse_known_args(head)
    takes_cmd = args.command in ("lock", "elect")
    if extras:
        if takes_cmd and cmd is None and not extras[0].startswith("-"):
            args.parser.error(f"put '--' before the command: zkrecipes {args.command} PATH [options] -- "
                              + " ".join(extras))
        args.parser.error("unrecognized arguments: " + " ".join(extras))
    if cmd is not None and not takes_cmd:
        args.parser.error(f"'{args.command}' takes no command after '--'")
    args.cmd = cmd
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``zkrecipes`` console script; returns the exit status."""
    _setup_logging()
    args = _parse(list(sys.argv[1:] if argv is None else argv))
    threading.excepthook = _thread_error  # kazoo's I/O thread dies on some SASL refusals: no traceback
    old = {s: signal.signal(s, _terminate) for s in _STOP_SIGNALS}
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

        from . import _connect

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


if __name__ == "__main__":
    sys.exit(main())
