"""The commands: ``lock`` and ``elect`` (a command run under a hold), ``revoke``, ``break`` and ``demo``
(``status`` is :mod:`zkrecipes.cli.status`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Optional

from .checks import check_cmd, check_identifier, check_path
from .connection import close, connect, security_from
from .exits import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TEMPFAIL,
    EXIT_TERMINATED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    Terminated,
    fail,
)
from .supervise import Held, check_grace, run_held, token_env

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from .._connect import Security
    from .._lock import Lock
    from ..once import Once


class Progress:
    """How many are ahead of us while we wait, from the lock's own listings (told by the engine each time
    the acquire is about to wait): no thread, no watch and no request of its own, so N waiters cost O(N).
    Printed to stderr when ``show``; kept for the timeout message either way."""

    def __init__(self, lock: Lock, path: str, show: bool) -> None:
        self.path, self.show = path, show
        from .._lock import on_ahead

        self.ahead: Optional[int] = None
        on_ahead(lock, self.waiting)

    def waiting(self, n: int) -> None:
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
    """Hold PATH while the command runs (see :func:`~zkrecipes.cli.supervise.run_held`); its exit status."""
    from .. import ExclusiveLock, FairLock, LockError, ReadWriteLock, Semaphore

    path = check_path(args.path)
    cmd = check_cmd(args.cmd, "lock")
    identifier = check_identifier(args.identifier)
    if args.exclusive and args.protocol != "zkrecipes":
        raise fail(f"--exclusive has no --protocol {args.protocol} (that library has no such lock); use --write",
                   EXIT_USAGE)
    if args.leases and args.protocol != "zkrecipes":
        raise fail(f"-n has no --protocol {args.protocol} (zkrecipes' semaphore only)", EXIT_USAGE)
    grace = check_grace(args.grace, args.session_timeout)
    _check_once(args, path)
    security = security_from(args)
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
            raise fail(str(exc), EXIT_USAGE) from None
        except KeyboardInterrupt:
            raise fail(f"interrupted while waiting for {path}", EXIT_INTERRUPTED) from None
        except Terminated as sig:
            raise fail(f"terminated (signal {sig.signum}) while waiting for {path}", 128 + sig.signum) from None
        finally:
            progress.stop()
        if not got:
            ahead = "?" if progress.ahead is None else progress.ahead  # None: it never got to wait in line
            raise fail(f"timed out waiting for {path} ({ahead} ahead)", EXIT_TEMPFAIL)
        try:
            run = None if args.once_per is None else _once_open(lock, args)
            if run is not None and not run:
                return int(args.exit_if_done)
            outcome = run_held(cmd, token_env(lock.token, lock.node),
                               Held(client, lock, f"the lock on {path}", revoke), grace, args.kill_after)
            if run is not None and outcome.status == 0:
                _once_done(run, path)
            return outcome.status
        finally:
            lock.release()
    finally:
        close(client)


def _check_once(args: argparse.Namespace, path: str) -> None:
    """Refuse --once-per's options where they mean nothing or could not hold (exit 2, no request)."""
    from .. import once

    if args.once_per is None:
        if args.keep is not None or args.exit_if_done is not None:
            raise fail("--keep and --exit-if-done go with --once-per KEY", EXIT_USAGE)
        return
    if args.read or args.leases:
        raise fail(f"--once-per needs a lock one host holds at a time, not {'--read' if args.read else '-n'}",
                   EXIT_USAGE)
    try:
        once.validate_key(path, args.once_per)
    except ValueError as exc:
        raise fail(f"bad --once-per: {exc}", EXIT_USAGE) from None
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
    from ..errors import LockLost

    try:
        run.done()
    except LockLost as exc:
        raise fail(f"the command succeeded but {run.key} was not marked done, so it stays open: {exc}",
                   EXIT_TEMPFAIL) from None


def cmd_elect(args: argparse.Namespace) -> int:
    """Run the command while leader of PATH (again each time with --requeue); its exit status."""
    from .. import LeaderElection, LockError

    path = check_path(args.path)
    cmd = check_cmd(args.cmd, "elect")
    identifier = check_identifier(args.identifier)
    grace = check_grace(args.grace, args.session_timeout)
    security = security_from(args)
    client = connect(args.hosts, args.connect_timeout, args.session_timeout, security)
    election = LeaderElection(client, path, identifier, protocol=args.protocol, acl=security.acl())
    try:
        while True:
            try:
                got = election.campaign(timeout=args.timeout)
            except LockError as exc:  # the path holds another library's nodes: use its --protocol
                raise fail(str(exc), EXIT_USAGE) from None
            except KeyboardInterrupt:
                raise fail(f"interrupted while campaigning on {path}", EXIT_INTERRUPTED) from None
            except Terminated as sig:
                raise fail(f"terminated (signal {sig.signum}) while campaigning on {path}",
                           128 + sig.signum) from None
            if not got:
                raise fail(f"timed out waiting for leadership of {path}", EXIT_TEMPFAIL)
            try:
                outcome = run_held(cmd, token_env(election.token, election.node),
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
        close(client)


def cmd_revoke(args: argparse.Namespace) -> int:
    """Ask PATH's holders to let go: their nodes marked (one line each); 1 if nobody holds."""
    from ..revoke import request_revoke

    path = check_path(args.path)
    client = connect(args.hosts, args.connect_timeout, args.session_timeout, security_from(args))
    try:
        marked = request_revoke(client, path)
    finally:
        close(client)
    if not marked:
        raise fail(f"{path}: no holder to ask", EXIT_FAILED)
    for name in marked:
        print(f"{path}/{name}: revoke requested")
    return 0


def cmd_break(args: argparse.Namespace) -> int:
    """Ask, wait up to --grace, then delete the holder's node of PATH whose token is N; 1, nothing
    touched, if no holder has it."""
    from ..errors import LockError
    from ..revoke import break_lock

    path = check_path(args.path)
    client = connect(args.hosts, args.connect_timeout, args.session_timeout, security_from(args))
    try:
        broken = break_lock(client, path, args.token, grace=args.grace)
    except LockError as exc:
        raise fail(str(exc), EXIT_FAILED) from None
    finally:
        close(client)
    if broken.released:
        print(f"{path}/{broken}: released by its holder within the {args.grace:g} s grace (token {args.token}); "
              "nothing deleted")
    elif args.grace:
        print(f"{path}/{broken}: deleted (token {args.token}): its holder did not let go within {args.grace:g} s")
    else:
        print(f"{path}/{broken}: deleted (token {args.token})")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The demo (:mod:`zkrecipes.demo`): 0, or 1 if its verdict failed."""
    from ..demo import MAX_WORKERS, MIN_SECONDS, run_demo

    if not 2 <= args.workers <= MAX_WORKERS:
        raise fail(f"--workers must be between 2 and {MAX_WORKERS}, got {args.workers}", EXIT_USAGE)
    if args.seconds < MIN_SECONDS:
        raise fail(f"--seconds must be at least {MIN_SECONDS:g} (a failover takes a session timeout), "
                   f"got {args.seconds:g}", EXIT_USAGE)
    from ..testing import ZooKeeperNotFound

    def demo_connect(hosts: str, security: "Optional[Security]") -> KazooClient:
        return connect(hosts, 10.0, 10.0, security)

    try:
        return run_demo(hosts=args.hosts, workers=args.workers, seconds=args.seconds, out=sys.stdout,
                        connect=demo_connect, security=security_from(args))
    except ZooKeeperNotFound as exc:
        raise fail(f"cannot start the embedded demo ensemble: {exc}", EXIT_UNAVAILABLE) from None
    except Terminated:
        raise fail("demo terminated", EXIT_TERMINATED) from None
