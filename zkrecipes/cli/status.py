"""``zkrecipes status``: who holds and who waits at a path, as a table or JSON, once or ``--watch``-ed.

Rows come from the one listing (:func:`zkrecipes._listing.listing`, synced: what revoke and break act on),
and ``--watch`` follows the path with the one child-watch loop (:func:`zkrecipes._queue_watch.watch_queue`), the
same as :class:`zkrecipes.LeaderWatch`: one listing per change, no polling.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .checks import check_path
from .connection import close, connect, security_from
from .exits import Terminated

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from .._listing import Listed


def queue_status(client: KazooClient, path: str) -> List[Dict[str, Any]]:
    """Rows describing the queue at ``path`` (and its exclusive ``lock`` node first), in queue order."""
    from .. import _listing
    from .._drive import Driver, never

    listed = Driver(client, None, never, None, path=path).run(_listing.listing(path, synced=True, exclusive=True))
    return rows_of(listed)


def rows_of(listed: List[Listed]) -> List[Dict[str, Any]]:
    """The status rows of a listing: ExclusiveLock's ``lock`` (kind ``X``, position 0) and each queue node,
    positions counted among the queue nodes read."""
    from .. import formats, naming

    now = time.time()
    out: List[Dict[str, Any]] = []
    queued = 0
    for x in listed:
        age = now - x.stat.ctime / 1000.0
        if x.found is None and x.node.name == formats.EXCLUSIVE_NODE:
            out.append(_row(0, x, "X", age))
            out[-1]["protocol"] = "zkrecipes"
            out[-1]["token"] = x.contender.token
            continue
        out.append(_row(queued, x, x.node.kind, age))
        out[-1]["protocol"] = formats.label(x.found)
        out[-1]["token"] = x.contender.token  # the fencing token: what ``zkrecipes break --token`` takes
        if x.node.kind == naming.LEASE:
            out[-1]["leases"] = x.node.leases
        queued += 1
    return out


def _row(pos: int, x: Listed, kind: str, age: float) -> Dict[str, Any]:
    c = x.contender
    return {
        "position": pos,
        "node": c.node,
        "kind": kind,
        "host": c.host,
        "pid": c.pid,
        "identifier": c.identifier,
        "age": round(max(0.0, age), 1),  # since the node's creation (server clock; no clock is in sync)
        "state": "holding" if c.holding else "waiting",
    }


def render_table(path: str, rows: List[Dict[str, Any]]) -> str:
    """The rows as a table (or the one line saying nobody is there)."""
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
    """Print PATH's rows once, or on every change with --watch (until Ctrl-C); 0."""
    path = check_path(args.path)
    client = connect(args.hosts, args.connect_timeout, args.session_timeout, security_from(args))
    try:
        if not args.watch:
            found = queue_status(client, path)
            print(json.dumps(found) if args.json else render_table(path, found))
            return 0
        try:
            _watch_status(client, path, args.json)
        except (KeyboardInterrupt, Terminated):
            return 0
        return 0  # (not reached: the watch ends by Ctrl-C)
    finally:
        close(client)


def _watch_status(client: KazooClient, path: str, as_json: bool) -> None:
    """``status --watch``: the listing read again on each change of ``path``'s children (the shared watch
    loop, :func:`zkrecipes._queue_watch.watch_queue`), no polling of ZooKeeper. Each row gets ``for``: seconds it has
    held (since this watch saw it start holding; since its creation if it held when first seen) or waited
    (since its creation). Creation times are ZooKeeper's ``ctime``, the server's wall clock, against this
    machine's clock: a skew between them shows in ``for``. A frame is printed when what it shows changed
    (not for a watch that fired on no change); a terminal's table is redrawn each second too."""
    from .._queue_watch import watch_queue

    since: Dict[str, Tuple[str, float]] = {}  # node -> (state, when it started: this machine's clock)
    shown: Optional[List[Dict[str, Any]]] = None  # the last frame printed, without its clock-driven fields
    current: List[Dict[str, Any]] = []
    tty = sys.stdout.isatty()

    def on_listing(listed: List[Listed], fresh: bool) -> None:
        nonlocal since, shown, current
        if fresh:
            current = rows_of(listed)
            now = time.time()
            old, since = since, {}
            for r in current:
                was = old.get(r["node"])
                if was is not None and was[0] == r["state"]:
                    since[r["node"]] = was
                else:  # new (since its creation), or it started holding now
                    since[r["node"]] = (r["state"], now if was is not None else now - r["age"])
        frame = _frame(current)
        if (fresh and frame != shown) or (tty and not as_json):
            shown = frame
            now = time.time()
            for r in current:
                r["for"] = round(max(0.0, now - since[r["node"]][1]), 1)
            if as_json:
                print(json.dumps(current), flush=True)
            else:
                if tty:
                    sys.stdout.write("\x1b[H\x1b[2J")
                print(time.strftime("%H:%M:%S"), render_table(path, current), sep="\n", flush=True)

    watch_queue(client, path, None, on_listing, threading.Event(), threading.Event(), 1.0, exclusive=True)


def _frame(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """What a ``status --watch`` frame shows, less ``age`` and ``for`` (they move with the clock alone)."""
    return [{k: v for k, v in r.items() if k not in ("age", "for")} for r in rows]
