"""Recovery benchmark (issue 39): how long a lock stays unusable after its holder dies or is cut off.

    python bench/recovery.py              # make bench: session timeouts 4 s and 10 s, 5 trials per case
    python bench/recovery.py --reps 2     # fewer trials
    python bench/recovery.py --smoke --hosts H    # one trial per case at a 2 s session timeout (tests)
    python bench/recovery.py --report-only    # re-render recovery.md / .png from recovery.json

One trial: a *holder* process takes the lock, a *waiter* process (another session) queues behind it, then
one fault hits the holder, and the time from the fault to the waiter's grant is measured:

- ``kill``: SIGKILL of the holder. Its connection closes; the server keeps the session (and the node)
  until the session timeout passes without a word from it.
- ``expire``: the server ends the holder's session now (a second connection with its session id and
  password, closed: :func:`zkrecipes.testing.expire_session`'s way), from the moment that close is sent.
- ``partition``: a silent partition of the holder (:class:`zkrecipes.testing.Partition` frozen:
  connections open, nothing delivered). The holder hears nothing; the server expires its session.

For zkrecipes (``FairLock``, threaded front) and kazoo (``Lock``) the processes are Python, for Curator
(``InterProcessMutex``) JVMs running bench/CuratorRecovery.java; each contender in its own process with
its own session, the holder connected through the partition proxy, on a 3-node forceSync=no loopback
ensemble (tickTime 200 ms) started here. Times are CLOCK_MONOTONIC in every process.

Per trial also: when the holder was *told* (its first SUSPENDED or LOST: for zkrecipes the lock's
listener, for kazoo and Curator the connection state listener) and when it was told LOST, against the
grant; and the doubt clock's origin (the send time of the holder's last request the server answered
before the fault, ``_kazoo.heard(client).answered``; stamped in kazoo's holder too, by importing
zkrecipes' reply stamps, which send nothing), for two checks of zkrecipes: the grant comes no later
than that origin + session timeout + one tick, and the holder is told lost before the grant
(partition; a killed holder can be told nothing, and a forced expiry ends the session on the server
before any deadline, so the holder learns it with everyone else). Violations are counted and listed
(kazoo's origin + T is shown beside ours for comparison). Writes ``recovery.json``,
``recovery.md`` and ``recovery.png`` to ``--out`` (default ``bench/results``).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402
from bench.harness import Proc  # noqa: E402

HERE = Path(__file__).resolve().parent
JAVA_SOURCE = HERE / "CuratorRecovery.java"
JAVA_OPTS = ("-Xms16m", "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
OURS, KAZOO, CURATOR = "zkrecipes FairLock", "kazoo Lock", "Curator InterProcessMutex"
LIBS = (OURS, KAZOO, CURATOR)
FAULTS = ("kill", "expire", "partition")
TICK_MS = 200  # the ensemble's tickTime: the server expires sessions in buckets of one tick
FULL = {"sessions": [4.0, 10.0], "reps": 5}
SMOKE = {"sessions": [2.0], "reps": 1}
FAST_RECONNECT = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5}


log = harness.logger("recovery")


# -- the contender processes (Python) ---------------------------------------------------------------
_out_lock = threading.Lock()


def _say(line: str) -> None:
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def worker(args: argparse.Namespace) -> int:
    """A holder or a waiter: connect, say the session, acquire, report states until killed."""
    from kazoo.client import KazooClient

    if args.role == "holder":  # stamps what kazoo sends and hears (the doubt clock's origin); sends nothing
        from zkrecipes import _kazoo
    client = KazooClient(hosts=args.hosts, timeout=args.session, connection_retry=FAST_RECONNECT)
    client.add_listener(lambda state: _say(f"state {state} {time.monotonic_ns()}"))
    client.start(60)
    sid, password = client.client_id
    _say(f"session {sid:x} {password.hex()}")
    if args.worker == OURS:
        from zkrecipes import FairLock

        lock: Any = FairLock(client, args.path)
        lock.add_listener(lambda _lock, state: _say(f"lock {state} {time.monotonic_ns()}"))
    else:
        from kazoo.recipe.lock import Lock

        lock = Lock(client, args.path)
    lock.acquire()
    _say(f"{'held' if args.role == 'holder' else 'granted'} {time.monotonic_ns()}")
    last = None
    while True:  # until killed; the holder reports the doubt clock's origin as it moves
        if args.role == "holder":
            answered = _kazoo.heard(client).answered
            if answered is not None and answered != last:
                last = answered
                _say(f"answered {int(answered * 1e9)}")
        time.sleep(0.005)


def _argv(lib: str, role: str, hosts: str, path: str, session: float, classpath: Optional[str]) -> List[str]:
    if lib == CURATOR:
        assert classpath is not None
        return ["java", *JAVA_OPTS, "-cp", classpath, "CuratorRecovery", hosts, path, str(int(session * 1000)), role]
    return [sys.executable, os.path.abspath(__file__), "--worker", lib, "--role", role, "--hosts", hosts,
            "--path", path, "--session", str(session)]


# -- one trial --------------------------------------------------------------------------------------
def _expire(hosts: str, sid: int, password: bytes) -> int:
    """End session ``sid`` on the server now: connect with its id and password, close. The close's send time (ns)."""
    from kazoo.client import KazooClient

    twin = KazooClient(hosts=hosts, client_id=(sid, password), timeout=10.0)
    twin.start(30)
    t = time.monotonic_ns()
    twin.stop()
    twin.close()
    return t


def _leader(hosts: str) -> Optional[int]:
    """Index (in ``hosts``) of the server that leads now, by its ``srvr`` reply; None if none says so."""
    from zkrecipes.testing.ensemble import four_letter

    for i, server in enumerate(harness.server_list(hosts)):
        host, port = server.rsplit(":", 1)
        if "Mode: leader" in four_letter(int(port), "srvr", host=host):
            return i
    return None


def trial(lib: str, fault: str, session: float, hosts: str, admin: Any, root: str,
          classpath: Optional[str], first: int = 0) -> Dict[str, Any]:
    from zkrecipes.testing import Partition

    path = f"{root}/{uuid.uuid4().hex[:10]}"
    admin.ensure_path(path)
    servers = harness.server_list(hosts)
    link = Partition(",".join(harness.rotate(servers, first)))  # the holder's server: ``first`` (it connects once)
    holder = Proc(_argv(lib, "holder", link.hosts, path, session, classpath))
    waiter: Optional[Proc] = None
    row: Dict[str, Any] = {"lib": lib, "fault": fault, "session_s": session}
    try:
        deadline = time.monotonic() + 120
        sid_hex, pw_hex = holder.need("session", deadline)[1:3]
        holder.need("held", deadline)
        gone: List[int] = []  # when an observer session (the admin client) saw the holder's node go
        admin.sync(path)  # the admin session may be on a follower that has not applied the holder's create yet
        (node,) = admin.get_children(path)
        if admin.exists(f"{path}/{node}", watch=lambda _event: gone.append(time.monotonic_ns())) is None:
            raise RuntimeError("the holder's node went before the fault")
        # a follower tells the leader that a session spoke only when the leader pings it (every half tick)
        row["holder_server"] = sorted((first + i) % len(servers) for i in set(link._target_of.values()))
        row["leader"] = _leader(hosts)
        row["holder_on_leader"] = row["leader"] in row["holder_server"]
        waiter = Proc(_argv(lib, "waiter", hosts, path, session, classpath))
        while len(admin.get_children(path)) < 2:  # the waiter's node is queued behind the holder's
            if time.monotonic() > deadline:
                raise RuntimeError("the waiter never queued")
            time.sleep(0.02)
        if fault == "kill":
            t0 = time.monotonic_ns()
            holder.proc.send_signal(signal.SIGKILL)
        elif fault == "partition":
            t0 = int(link.freeze() * 1e9)
        else:
            t0 = _expire(hosts, int(sid_hex, 16), bytes.fromhex(pw_hex))
        got = waiter.first("granted", time.monotonic() + 3 * session + 30)
        if got is None:
            raise RuntimeError(f"no grant within {3 * session + 30:.0f} s")
        granted = int(got[1])
        if fault == "partition":
            link.heal()  # let the holder hear the expiry (kazoo reports LOST only then)
        holder.first("~never", time.monotonic() + 1.5)  # the holder's late reports come in meanwhile
        row.update(_timeline(lib, fault, session, holder.words(), t0, granted))
        if gone:  # the server's part ends here: what follows is the notification and the waiter's library
            row["gone_s"] = (gone[0] - t0) / 1e9
            row["grant_after_gone_ms"] = (granted - gone[0]) / 1e6
    except Exception as exc:  # a failed trial is reported as such, never as a figure
        row["error"] = repr(exc)
        log(f"  trial failed: {exc!r}")
    finally:
        for p in (holder, waiter):
            if p is not None:
                p.stop()
        link.close()
    return row


def _timeline(lib: str, fault: str, session: float, lines: List[List[str]], t0: int, granted: int) -> Dict[str, Any]:
    """The trial's row from the holder's reports: times in seconds after the fault."""
    def after(ns: int) -> float:
        return (ns - t0) / 1e9

    doubt = lost = None
    for words in lines:
        if words[0] in ("lock", "state") and len(words) == 3:
            state, t = words[1].upper(), int(words[2])
            if t < t0:
                continue
            if lib == OURS and words[0] != "lock":
                continue  # ours: the lock's own listener is what its user hears
            if state in ("SUSPENDED", "LOST") and doubt is None:
                doubt = t
            if state == "LOST" and lost is None:
                lost = t
    # the doubt clock's origin: the send time of the last request answered before the fault
    answered = max((int(w[1]) for w in lines if w[0] == "answered" and int(w[1]) <= t0), default=None)
    row: Dict[str, Any] = {
        "grant_s": after(granted),
        "told_s": None if doubt is None else after(doubt),
        "lost_s": None if lost is None else after(lost),
        "told_before_grant": None if fault == "kill" else (doubt is not None and doubt < granted),
        "lost_before_grant": None if fault == "kill" else (lost is not None and lost < granted),
    }
    if answered is not None:
        # the grant against the doubt clock's origin: no later than origin + T + one tick (ours; kazoo's
        # the same way, for comparison: the server decides when the old session ends)
        row["origin_s"] = after(answered)
        row["grant_after_origin_plus_t_ms"] = (granted - answered - session * 1e9) / 1e6
        row["bound_ok"] = granted <= answered + session * 1e9 + TICK_MS * 1e6
    return row


def run(hosts: str, cfg: Dict[str, Any], libs: Sequence[str], classpath: Optional[str]) -> List[Dict[str, Any]]:
    rows = []
    with harness.admin(hosts, "recovery") as (admin, root):
        for session in cfg["sessions"]:
            for rep in range(cfg["reps"]):
                for k, fault in enumerate(FAULTS):
                    for lib in harness.rotate(list(libs), rep + k):  # the order rotates: drift hits all alike
                        row = trial(lib, fault, session, hosts, admin, root, classpath, rep)
                        row["rep"] = rep
                        rows.append(row)
                        log(f"T = {session:g} s {fault:9} {lib:26} " + (
                            f"grant {row['grant_s']:+.2f} s, told {_f(row['told_s'], '{:+.2f}')}, "
                            f"lost {_f(row['lost_s'], '{:+.2f}')}" if "error" not in row else row["error"]))
    return rows


# -- report -----------------------------------------------------------------------------------------
def _f(x: Optional[float], fmt: str = "{:.2f}") -> str:
    return harness.cell(x, fmt)


def summarise(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One line per (session timeout, fault, library): grant times' median and max, checks counted."""
    out = []
    for session in sorted({r["session_s"] for r in rows}):
        for fault in FAULTS:
            for lib in LIBS:
                rs = [r for r in rows if r["session_s"] == session and r["fault"] == fault and r["lib"] == lib]
                if not rs:
                    continue
                ok = [r for r in rs if "error" not in r]
                grants = sorted(r["grant_s"] for r in ok)
                told = [r for r in ok if r["told_before_grant"] is not None]
                n_told = sum(1 for r in told if r["told_before_grant"])
                n_lost = sum(1 for r in told if r["lost_before_grant"])
                bound = [r for r in ok if "bound_ok" in r]
                after = sorted(r["grant_after_gone_ms"] for r in ok if "grant_after_gone_ms" in r)
                out.append({
                    "session_s": session, "fault": fault, "lib": lib, "trials": len(rs), "errors": len(rs) - len(ok),
                    "median_s": statistics.median(grants) if grants else None, "max_s": grants[-1] if grants else None,
                    "min_s": grants[0] if grants else None,
                    "told_before_grant": f"{n_told}/{len(told)}" if told else "—",
                    "lost_before_grant": f"{n_lost}/{len(told)}" if told else "—",
                    "bound_violations": sum(1 for r in bound if not r["bound_ok"]) if bound else None,
                    "bound_max_ms": max(r["grant_after_origin_plus_t_ms"] for r in bound) if bound else None,
                    "after_gone_median_ms": statistics.median(after) if after else None,
                    "after_gone_max_ms": after[-1] if after else None,
                })
    return out


def markdown(result: Dict[str, Any]) -> str:
    m, cfg = result["meta"], result["config"]
    lines = [
        harness.run_line(m),
        "",
        f"Seconds from the fault to the waiter's grant, {cfg['reps']} trials per line (median / max). *Told*: "
        "trials where the holder heard SUSPENDED or LOST before the grant; *lost*: LOST before the grant "
        "(a killed holder hears nothing). *Origin + T*: grant minus (send time of the holder's last request "
        "the server answered before the fault, the doubt clock's origin, + session timeout), max over the "
        f"trials, and in how many trials that exceeded one tick ({TICK_MS} ms); zkrecipes and, stamped the "
        "same way in its process, kazoo (Curator: not stamped). *After the node went*: grant minus the moment "
        "an observer session (a third client watching the holder's node) was told the node was deleted: "
        "the library's own part, median / max.",
        "",
    ]
    if result.get("curator_absent"):
        lines += [f"Curator: absent ({result['curator_absent']}).", ""]
    lines += ["| session timeout | fault | library | grant median / max (s) | told | lost | origin + T: max (ms), "
              "over one tick | after the node went (ms) | failed trials |", "|---|---|---|---|---|---|---|---|---|"]
    for s in result["summary"]:
        bound = "—" if s["bound_max_ms"] is None else f"{s['bound_max_ms']:+.0f}, {s['bound_violations']}"
        lines.append(f"| {s['session_s']:g} s | {s['fault']} | {s['lib']} | {_f(s['median_s'])} / "
                     f"**{_f(s['max_s'])}** | {s['told_before_grant']} | {s['lost_before_grant']} | {bound} | "
                     f"{_f(s.get('after_gone_median_ms'), '{:.1f}')} / {_f(s.get('after_gone_max_ms'), '{:.1f}')} | "
                     f"{s['errors']} |")
    bad = [r for r in result["rows"] if "error" in r or (r["lib"] == OURS and (
        r.get("bound_ok") is False or (r["fault"] == "partition" and r.get("lost_before_grant") is False)))]
    if bad:
        lines += ["", "Trials that failed, or where zkrecipes missed a bound (origin: of the doubt clock, "
                  "seconds after the fault):", ""]
        for r in bad:
            what = r.get("error") or (f"grant {r['grant_s']:+.2f} s, lost {_f(r.get('lost_s'))}, origin "
                                      f"{_f(r.get('origin_s'))} s, origin + T "
                                      f"{r['grant_after_origin_plus_t_ms']:+.0f} ms, holder's server "
                                      f"{_WHERE[r.get('holder_on_leader')]}")
            lines.append(f"- T = {r['session_s']:g} s, {r['fault']}, {r['lib']}, trial {r['rep'] + 1}: {what}")
    lines += ["", "Grant minus (origin + T), by where the holder's session lived (kill and partition; all trials "
              "of zkrecipes and kazoo):", ""]
    for where, on_leader in (("the leader", True), ("a follower", False)):
        xs = sorted(r["grant_after_origin_plus_t_ms"] for r in result["rows"] if "bound_ok" in r
                    and r["fault"] != "expire" and r.get("holder_on_leader") is on_leader)
        if xs:
            lines.append(f"- holder on {where}: {len(xs)} trials, median {statistics.median(xs):+.0f} ms, "
                         f"max {xs[-1]:+.0f} ms, over one tick: {sum(1 for x in xs if x > TICK_MS)}")
    return "\n".join(lines) + "\n"


_WHERE = {True: "the leader", False: "a follower", None: "not recorded"}


def plot(result: Dict[str, Any], path: str) -> Optional[str]:
    """Write the plot; return why not (no matplotlib) or None."""
    plt = harness.pyplot()
    if plt is None:
        return harness.NO_MATPLOTLIB
    sessions = sorted({r["session_s"] for r in result["rows"]})
    fig, axes = plt.subplots(1, len(sessions), figsize=(6 * len(sessions), 4.2), squeeze=False)
    width = 0.25
    colours = {OURS: "tab:blue", KAZOO: "tab:orange", CURATOR: "tab:green"}
    for ax, session in zip(axes[0], sessions):
        for j, lib in enumerate(LIBS):
            for k, fault in enumerate(FAULTS):
                ys = [r["grant_s"] for r in result["rows"] if r["session_s"] == session and r["lib"] == lib
                      and r["fault"] == fault and "error" not in r]
                if not ys:
                    continue
                x = k + (j - 1) * width
                ax.scatter([x] * len(ys), ys, s=14, color=colours[lib], alpha=0.7,
                           label=lib if k == 0 else None)
                ax.hlines(statistics.median(ys), x - width / 2.5, x + width / 2.5, color=colours[lib], linewidth=2)
        ax.axhline(session, color="black", linestyle="--", linewidth=1, label=f"session timeout ({session:g} s)")
        ax.set_xticks(range(len(FAULTS)))
        ax.set_xticklabels(["SIGKILL", "session expiry", "silent partition"])
        ax.set_ylabel("fault -> next grant (s)")
        ax.set_ylim(bottom=-0.2, top=session * 1.35)
        ax.set_title(f"session timeout {session:g} s (dots: trials, bars: median)", fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
    harness.save_figure(plt, fig, path, 90,
                        f"Recovery: holder's fault to the next grant · {harness.stamp(result['meta'])}", fontsize=10)
    return None


# -- main -------------------------------------------------------------------------------------------
def main(argv: Optional[List[str]] = None) -> int:
    ap = harness.arguments(__doc__, "connect string of a running ensemble whose tickTime is 200 ms "
                           "(default: start 3 local servers)")
    ap.add_argument("--smoke", action="store_true", help="one trial per case at a 2 s session timeout")
    ap.add_argument("--reps", type=int, help="trials per case (default 5)")
    ap.add_argument("--sessions", type=float, nargs="+", help="session timeouts in seconds (default 4 10)")
    ap.add_argument("--libs", nargs="+", choices=LIBS, default=list(LIBS), metavar="LIB")
    ap.add_argument("--report-only", action="store_true", help="re-render recovery.md/.png from recovery.json")
    ap.add_argument("--worker", choices=(OURS, KAZOO), help=argparse.SUPPRESS)
    ap.add_argument("--role", choices=("holder", "waiter"), help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--session", type=float, default=10.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.report_only:
        print(harness.write_report(args.out, "recovery", harness.read_json(args.out, "recovery"), markdown, plot))
        return 0
    cfg = dict(SMOKE if args.smoke else FULL)
    if args.reps is not None:
        if args.reps < 1:
            ap.error(f"--reps must be at least 1, got {args.reps!r}")
        cfg["reps"] = args.reps
    if args.sessions:
        if any(not 2 * TICK_MS / 1000 <= s <= 40 for s in args.sessions):
            ap.error(f"--sessions must lie between {2 * TICK_MS / 1000:g} and 40 s, got {args.sessions!r}")
        cfg["sessions"] = list(args.sessions)
    libs = list(args.libs)
    classpath, curator_absent = harness.curator(libs, CURATOR, JAVA_SOURCE, log)
    record = harness.Run("recovery.py", argv, with_machine=True)
    with harness.zookeeper(args.hosts, log, external_note=f"tickTime taken as {TICK_MS} ms", show_tick=True,
                           tick_ms=TICK_MS, max_session_ms=40000) as (hosts, desc):
        zk_version = harness.server_version(harness.server_list(hosts))
        rows = run(hosts, cfg, libs, classpath)
    result = {
        "config": cfg, "libs": libs, "curator_absent": curator_absent, "rows": rows, "summary": summarise(rows),
        "meta": record.meta(zookeeper=zk_version, ensemble=desc),
    }
    harness.write_json(args.out, "recovery", result)
    print(harness.write_report(args.out, "recovery", result, markdown, plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
