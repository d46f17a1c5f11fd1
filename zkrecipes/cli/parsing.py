"""The command line's options (argparse): every command's parser, and the split at the first ``--``."""

from __future__ import annotations

import argparse
from typing import Any, Callable, List, Optional, Tuple

from .checks import exit_code, keep, leases, nonneg, positive, session_timeout, token
from .commands import cmd_break, cmd_demo, cmd_elect, cmd_lock, cmd_revoke
from .exits import EXIT_CODES, EXIT_REVOKED, REVOKE_EXIT_CODES
from .status import cmd_status

KILL_AFTER = 5.0  # lock --kill-after: SIGTERM to SIGKILL after a revoke request (seconds)
BREAK_GRACE = 10.0  # break --grace: longer than KILL_AFTER, so a CLI holder asked has time to stop and release


def build_parser() -> argparse.ArgumentParser:
    from .. import _connect

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
        sp.add_argument("--connect-timeout", type=positive, default=10.0, metavar="S",
                        help="give up reaching ZooKeeper after S seconds (default 10)")
        sp.add_argument("--session-timeout", type=session_timeout, default=session_default, metavar="S",
                        help="ZooKeeper session timeout; a hold suspended this long is lost (default 10)")
        _connect.add_options(sp)

    def command(name: str, func: Callable[[argparse.Namespace], int], **kw: Any) -> argparse.ArgumentParser:
        """A command's parser: what runs it, --help's layout, and PATH first (all but demo take one)."""
        sp = sub.add_parser(name, formatter_class=argparse.RawDescriptionHelpFormatter, **kw)
        sp.set_defaults(func=func, parser=sp)
        if name != "demo":
            sp.add_argument("path", metavar="PATH")
        return sp

    lk = command("lock", cmd_lock, help="run CMD while holding a lock", epilog=EXIT_CODES,
                 usage="%(prog)s PATH [options] -- CMD [ARGS...]",
                 description="Hold PATH (fair write lock by default) while CMD runs; exit with CMD's "
                             "status. The fencing token is exported as ZKRECIPES_TOKEN.")
    mode = lk.add_mutually_exclusive_group()
    mode.add_argument("--read", action="store_true", help="shared read lock")
    mode.add_argument("--write", action="store_true", help="exclusive fair write lock (default)")
    mode.add_argument("--exclusive", action="store_true", help="simple exclusive lock (<PATH>/lock node)")
    mode.add_argument("-n", "--leases", type=leases, metavar="N",
                      help="take one of N leases: at most N commands run at once (a semaphore)")
    lk.add_argument("--timeout", type=nonneg, metavar="S", help="give up waiting after S seconds (exit 75)")
    lk.add_argument("--identifier", metavar="ID", help="shown to others in status")
    lk.add_argument("--grace", type=nonneg, metavar="S",
                    help="when the hold falls in doubt CMD gets SIGTERM, and SIGKILL S seconds later (at most, "
                         "and by default, just before the session could expire: see docs/cli.rst)")
    lk.add_argument("--kill-after", type=nonneg, default=KILL_AFTER, metavar="S",
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
    lk.add_argument("--keep", type=keep, metavar="DURATION",
                    help="with --once-per: how long KEY stays done, e.g. 1d (default), 12h, 30m, 90 (seconds)")
    lk.add_argument("--exit-if-done", type=exit_code, metavar="N",
                    help="with --once-per: exit N instead of 0 when KEY was done already")
    common(lk)

    el = command("elect", cmd_elect, help="run CMD while leader", epilog=EXIT_CODES,
                 usage="%(prog)s PATH [options] -- CMD [ARGS...]",
                 description="Campaign on PATH; run CMD while leader; exit with CMD's status.")
    el.add_argument("--identifier", metavar="ID")
    el.add_argument("--timeout", type=nonneg, metavar="S", help="give up campaigning after S seconds (exit 75)")
    el.add_argument("--requeue", action="store_true", help="campaign again each time CMD ends")
    el.add_argument("--grace", type=nonneg, metavar="S", help="as for lock")
    el.add_argument("--protocol", choices=("zkrecipes", "kazoo", "curator"), default="zkrecipes",
                    help="node format, to share PATH with kazoo's Election or Curator's LeaderLatch")
    common(el)

    st = command("status", cmd_status, help="show holders and waiters of PATH", epilog=EXIT_CODES)
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--watch", action="store_true",
                    help="redraw on every change until Ctrl-C, with FOR: seconds each has held or waited")
    common(st)

    common(command("revoke", cmd_revoke, help="ask the holder(s) of PATH to let go", epilog=REVOKE_EXIT_CODES,
                   description="Mark each current holder's node of PATH (a revoke request ZooKeeper "
                               "stores; nothing is deleted). Holders that listen are told; prints the "
                               "nodes marked."))

    br = command("break", cmd_break, help="delete the node of PATH's holder whose token is N",
                 epilog=REVOKE_EXIT_CODES,
                 description="Ask the holder of PATH whose fencing token (czxid) is N to let go, wait "
                             "up to --grace seconds for its node to go, then delete exactly that node "
                             "if it is still there; refuse, touching nothing, if no current holder has "
                             "that token.")
    br.add_argument("--token", type=token, required=True, metavar="N",
                    help="the holder's fencing token (ZKRECIPES_TOKEN of its command)")
    br.add_argument("--grace", type=nonneg, default=BREAK_GRACE, metavar="S",
                    help=f"seconds the holder asked has to let go before its node is deleted (default "
                         f"{BREAK_GRACE:g}, more than lock's --kill-after default); 0 deletes at once")
    common(br)

    dm = command("demo", cmd_demo, help="run the demo (starts a local ensemble unless --hosts/ZK_HOSTS)",
                 epilog=EXIT_CODES)
    dm.add_argument("--hosts", help="use this ensemble instead of starting one")
    dm.add_argument("--workers", type=int, default=3, metavar="N", help="worker processes per recipe (default 3)")
    dm.add_argument("--seconds", type=positive, default=20.0, metavar="S", help="length of the run (default 20)")
    _connect.add_options(dm)
    return p


def _version() -> str:
    from .. import __version__

    return __version__


def _split_command(argv: List[str]) -> Tuple[List[str], Optional[List[str]]]:
    """(options, command): the command is everything after the first ``--``, None without one."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def parse(argv: List[str]) -> argparse.Namespace:
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
