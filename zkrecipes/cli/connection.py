"""Reaching ZooKeeper from the command line, and leaving it: the client made and started from the options
(TLS, SASL, digest identities, :mod:`zkrecipes._connect`), and closed so that our nodes go at once."""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Optional

from .exits import EXIT_USAGE, fail

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from .._connect import Security

log = logging.getLogger("zkrecipes.cli")


def connect(
    hosts: Optional[str], connect_timeout: float, session_timeout: float, security: "Optional[Security]" = None
) -> KazooClient:
    """A started KazooClient (with ``security``, a :class:`zkrecipes._connect.Security`), or CliError naming
    the hosts and the time waited (69), or the authentication that failed (77)."""
    from .. import _connect

    source = "--hosts"
    if not hosts:
        hosts, source = os.environ.get("ZK_HOSTS"), "ZK_HOSTS"
    if not hosts:
        raise fail("no ZooKeeper hosts: pass --hosts H or set ZK_HOSTS (e.g. 127.0.0.1:2181)", EXIT_USAGE)
    security = security or _connect.Security()
    try:
        client = _connect.new_client(hosts, session_timeout, security)
    except (ValueError, TypeError) as exc:
        raise fail(f"bad {source} {hosts!r}: {exc}", EXIT_USAGE) from None
    try:
        root = _connect.start(client, hosts, connect_timeout, security)
    except _connect.ConnectError as exc:
        close(client)
        raise fail(str(exc), exc.code) from None
    except BaseException:
        close(client)
        raise
    if client.chroot and root is None:
        close(client)
        raise fail(f"chroot {client.chroot} does not exist on ZooKeeper at {hosts}: create it first, or leave "
                   f"it out of {source}", EXIT_USAGE)
    return client


def security_from(args: argparse.Namespace) -> "Security":
    """The TLS/SASL/auth settings of ``args`` and the environment (kept on ``args`` for error messages)."""
    from .. import _connect

    try:
        security = args.security = _connect.from_args(args)
    except _connect.ConnectError as exc:
        raise fail(str(exc), exc.code) from None
    return security


CLOSE_WAIT = 0.5  # seconds to wait for ZooKeeper to confirm the session's end (one round trip when healthy)
EXIT_BOUND = 1.0  # lock/elect exit this soon after the command ended and the node is gone or the session
# known lost (docs/cli.rst, "When zkrecipes exits"): CLOSE_WAIT, or the release's 0.2 s look at a loss, plus
# the process's own end


def close_wait(client: KazooClient) -> float:
    """How long :func:`close` waits for ``client``'s session to end: :data:`CLOSE_WAIT`, cut short by the
    doubt clock's lost moment (nothing is gained by waiting once the session is known lost), and 0 if no
    request was ever answered (no session, so no node)."""
    from ..session import SessionWatcher

    d = SessionWatcher.of(client).lost_by()
    if d is None:
        return 0.0
    return max(0.0, min(CLOSE_WAIT, d[1] - time.monotonic()))


def close(client: KazooClient) -> None:
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

