"""The safety lab: can two holders ever both act? Jepsen-style evidence, rerunnable with one command.

``python -m lab.run [--long] [--seed N] [--out DIR]`` (``make safety`` runs ``--long``)

The run starts one 3-server ZooKeeper ensemble on 127.0.0.1, shared by its trials one after another (each on
paths of its own; a server a trial left down is started again before the next), and, for the Redis baseline, a
``redis-server``. A trial (:class:`lab.trial.Trial`) starts ≥ 8 worker processes (:mod:`lab.worker`), each
with its own session and its own loopback :class:`~zkrecipes.testing.Partition` proxies (one per server, run
by this process). Workers loop acquire → read-modify-write a :class:`~lab.fenced.FencedRegister` → release and
record every step. Meanwhile this process -- the nemesis -- injects a seeded schedule of
faults and records them:

``leader-kill``      SIGKILL the ZooKeeper leader, restart it after a second
``follower-kill``    the same for a follower
``quorum-loss``      stop two of three servers past the session timeout, then restart them
``session-expiry``   expire the current holder's session server-side (a second connection with its
                     session id and password, published by the worker, closes the session)
``partition``        cut the current holder's proxies for longer than the session timeout, then heal
``silent-partition`` freeze them instead: connections stay open, nothing is delivered either way (the
                     partition real networks make: the holder hears of it only when replies are overdue)
``pause``            SIGSTOP the current holder longer than the session timeout, then SIGCONT
``holder-kill``      SIGKILL the current holder and start a replacement worker

Trials (``--trials``, comma-separated):

``zk``         zkrecipes FairLock, ReadWriteLock and LeaderElection, three threads per worker on one session
``kazoo``      kazoo's ``Lock`` (baseline)
``redis``      the classic ``SET NX PX`` lock (baseline; ZooKeeper server faults map to killing, or stopping,
               the single redis-server, and session expiry to expiring the holder's key server-side; there
               is no follower to kill)
``cli``        ``zkrecipes lock`` commands whose children must never run at once, under silent and closed
               partitions of the holder's link (:mod:`lab.cli_trial`)
``semaphore``  zkrecipes ``Semaphore`` and kazoo's (baseline), 3 leases; the checker counts holders inside
               at once (:mod:`lab.semaphore_trial`)
``txn``        a counter in a ZooKeeper node under a FairLock: half the workers write through
               ``lock.transaction()``, the other half (the unfenced control, baseline) with a plain ``set``
               (:mod:`lab.txn_trial`)
``aio``        the asyncio FairLock, ReadWriteLock and Semaphore, several tasks per worker on one event loop
               (:mod:`lab.aio_trial`)
``mixed-kazoo``, ``mixed-curator``
               zkrecipes ``FairLock(protocol="kazoo"|"curator")`` beside kazoo's ``Lock`` or Curator's
               ``InterProcessMutex`` (Java workers, baselines) on one path, every hold fenced and verified,
               plus a default-format fleet that must be refused beside kazoo (:mod:`lab.mixed_trial`)
``handover``   ``FairLock(owner="object")`` taken on one thread and released on another (:mod:`lab.handover_trial`)
``multilock``  ``MultiLock`` over two paths, even slots listing them in one order, odd in the other; deadlocks
               counted from the locks' states (:mod:`lab.multilock_trial`)
``revoke``     an operator thread here asks holders to let go (``request_revoke``) and breaks the hung ones
               (``break_lock``); their late writes must be refused by the register (:mod:`lab.revoke_trial`)

The short run (default, used by ``make test``) runs the ``zk`` trial with each fault once; ``--trials
semaphore,txn,aio`` (or ``handover,multilock,revoke``) without ``--long`` runs those with ``pause`` and
``session-expiry`` only, aimed at their zkrecipes recipes; ``--faults`` picks the kinds; ``--long`` runs
every trial with each fault three times (the ``cli`` trial: 20 silent partitions and 5 cuts). Without
``--long``, the mixed trials inject one ``session-expiry`` and one ``pause``. When every fault of a holder
kind has struck no holder (the holder released before the fault landed), that kind is injected again, up
to ``RETRIES`` more times.

The verdict comes from :mod:`lab.check`, which reads only the recorded histories.
Results go to ``DIR/results.json``, ``DIR/results.md`` and ``DIR/results.inc`` (an reStructuredText
fragment for the docs); ``--keep-history`` also keeps every history file under ``DIR/history``. The exit
status is 1 when a zkrecipes entry (not a baseline: kazoo, Curator, Redis, the unfenced control) broke
what docs/safety.rst claims for it (``HARD_CHECKS``: an accepted or unsafe overlap -- for the ``txn``
trial an applied stale operation, for ``revoke`` an accepted one --, a lost increment, a grant out of
order, a missed or late loss notice, an orphan node, a hung worker; ``MORE_CHECKS``: a trial's own, such
as a MultiLock deadlock), or failed a trial's own check (a mixed trial's valid overlaps or refusals),
or when a holder fault kind scheduled in a trial with a zkrecipes entry struck no holder.
Every process started is killed (process groups, and parent-death signals) however the run ends.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional

from zkrecipes.testing import Ensemble, four_letter

from . import cli_trial, mixed_trial
from .catalog import FAULT_KINDS, MIXED_TRIALS, SHORT_KINDS, TRIAL_MODULES, TRIALS, Settings
from .check import check_trial
from .redis_server import RedisServer, redis_version
from .results import assemble, markdown, write_results
from .trial import _ROOT, Journal, Trial


# -- the whole run ---------------------------------------------------------------------------------------------
def redis_available() -> bool:
    if not shutil.which("redis-server"):
        return False
    try:
        import redis  # noqa: F401
    except ImportError:
        return False
    return True


def _versions(ens: Optional[Ensemble]) -> dict:
    import kazoo

    from zkrecipes import __version__

    env = {"zkrecipes": __version__, "kazoo": getattr(kazoo, "__version__", "?"), "python": platform.python_version(),
           "cpus": os.cpu_count(), "platform": platform.platform()}
    src = _ROOT
    if os.path.exists(os.path.join(src, ".git")):  # provenance: the commit (.git is a file in a worktree)
        git = ["git", "-C", src]
        head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(git + ["status", "--porcelain", "--", "zkrecipes"], capture_output=True,
                               text=True).stdout.strip()
        if head:
            env["commit"] = head + ("+local changes" if dirty else "")
    if ens is not None:
        first = four_letter(ens.client_ports[0], "srvr").splitlines()
        version = first[0].split(":", 1)[1].split(",")[0].strip() if first else "?"
        env["zookeeper"] = re.sub(r"-\$\{[^}]*\}", "", version)  # Debian's build leaves "-${mvngit.commit.id}"
    if shutil.which("redis-server"):
        env["redis_server"] = redis_version() or "?"
    return env


def shared_ensemble(ens: Optional[Ensemble], workdir: str, say: Callable[[str], None]) -> Ensemble:
    """The run's one ZooKeeper ensemble, ready for the next trial: every server running and serving, a
    leader elected. A server a trial left down is started again; an ensemble that cannot be brought back
    within a minute is replaced by a fresh one (trials keep to their own paths, so they can share it)."""
    if ens is not None:
        try:
            for i in range(ens.size):
                if not ens.running(i):
                    ens.start(i, wait=False)
            ens.wait_serving(timeout=60)
            return ens
        except (RuntimeError, TimeoutError) as exc:
            say(f"the shared ensemble did not recover ({exc}); starting a fresh one")
            ens.close()
    ens = Ensemble(size=3, tick_ms=200, workdir=tempfile.mkdtemp(prefix="zookeeper-servers-", dir=workdir)).start()
    say(f"ZooKeeper ensemble at {ens.hosts} (leader: server {ens.leader()}), shared by the run's trials")
    return ens


def run(st: Settings, out: str, keep_history: bool = False, say: Callable[[str], None] = print) -> dict:
    """Run the lab with settings ``st``; write results under ``out``; return the results dict.

    The trials run one after another on one shared 3-server ensemble (:func:`shared_ensemble`), each on
    paths of its own; the Redis baseline gets its own ``redis-server``."""
    t_start = time.monotonic()
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="zkrecipes-chaos-")
    skipped = {}
    checked = {}
    envinfo: dict = {}
    ens: Optional[Ensemble] = None
    try:
        for name in st.trials:
            why = mixed_trial.skip_reason(name) if name in MIXED_TRIALS else None
            if name == "redis" and not redis_available():
                why = "redis-server or the redis client is not installed"
            if why:
                skipped[name] = why
                say(f"trial {name}: skipped ({skipped[name]})")
                continue
            d = os.path.join(tmp, name)
            os.makedirs(d)
            redis_srv = None
            try:
                if name == "redis":
                    redis_srv = RedisServer(d)
                    redis_srv.start()
                    say(f"trial {name}: redis-server on 127.0.0.1:{redis_srv.port}")
                else:
                    ens = shared_ensemble(ens, tmp, say)
                    say(f"trial {name}: on the ensemble at {ens.hosts} (leader: server {ens.leader()})")
                envinfo.update(_versions(ens if name != "redis" else None))
                if name == "cli":
                    journal = Journal(os.path.join(d, "nemesis.jsonl"))
                    try:
                        cli_trial.CliTrial(st, d, say, ens, journal).run()
                    finally:
                        journal.close()
                elif name in MIXED_TRIALS:
                    mixed_trial.MixedTrial(name, st, d, say, ens).run()
                else:
                    Trial(name, st, d, say, ens if name != "redis" else None, redis_srv).run()
            finally:
                if redis_srv is not None:
                    redis_srv.close()
            mod = cli_trial if name == "cli" else TRIAL_MODULES.get(name)
            checked[name] = mod.check(d) if mod is not None else \
                mixed_trial.check(d) if name in MIXED_TRIALS else check_trial(d)
            say(f"trial {name}: checked")
        results = assemble(st, checked, skipped, envinfo, time.monotonic() - t_start)
    finally:
        if ens is not None:
            ens.close()
        if keep_history:
            dest = os.path.join(out, "history")
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(tmp, dest, ignore=shutil.ignore_patterns("zookeeper-servers*"))
        shutil.rmtree(tmp, ignore_errors=True)
    write_results(results, out)
    return results


def parse_repeat(text: str) -> tuple:
    """``--repeat``'s value: ``(N or None, {trial: N})`` from comma-separated ``N`` and ``TRIAL=N`` items;
    ValueError naming a bad item."""
    repeat, repeats = None, {}
    for item in text.split(",") if text else ():
        trial, _, n = item.rpartition("=")
        if not n.isdigit() or int(n) < 1 or (trial and trial not in TRIALS):
            raise ValueError(f"bad --repeat item {item!r}: N or TRIAL=N (N >= 1, TRIAL one of {', '.join(TRIALS)})")
        if trial:
            repeats[trial] = int(n)
        else:
            repeat = int(n)
    return repeat, repeats


def _on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--long", action="store_true", help="every trial, each fault 3 times")
    p.add_argument("--seed", type=int, default=1, help="seed of the fault schedule and the workers (default 1)")
    p.add_argument("--out", default="safety-results", help="directory for results.json/.md/.inc")
    p.add_argument("--trials", help=f"comma-separated subset of {','.join(TRIALS)} (default: zk; --long: all)")
    p.add_argument("--faults", help=f"comma-separated fault kinds, only these (default: all; the short run of "
                                    f"{', '.join(TRIAL_MODULES)}: {', '.join(SHORT_KINDS)})")
    p.add_argument("--repeat", help="instances of each fault kind (default 1; --long: 3); comma-separated, "
                                   "TRIAL=N items set it for one trial (--repeat revoke=2)")
    p.add_argument("--workers", type=int, default=8, help="worker processes per trial (default 8)")
    p.add_argument("--session-timeout", type=float, default=3.0, help="session timeout / lock lease, s (3)")
    p.add_argument("--keep-history", action="store_true", help="keep every history file under OUT/history")
    args = p.parse_args(argv)
    if args.workers < 2:
        p.error("--workers must be at least 2")
    trials = tuple(args.trials.split(",")) if args.trials else (tuple(TRIALS) if args.long else ("zk",))
    for t in trials:
        if t not in TRIALS:
            p.error(f"unknown trial {t!r}; choose from {', '.join(TRIALS)}")
    try:
        repeat, repeats = parse_repeat(args.repeat or "")
    except ValueError as exc:
        p.error(str(exc))
    faults = tuple(args.faults.split(",")) if args.faults else None
    for k in faults or ():
        if k not in FAULT_KINDS:
            p.error(f"unknown fault kind {k!r}; choose from {', '.join(FAULT_KINDS)}")
    st = Settings(
        seed=args.seed, workers=args.workers, session_timeout=args.session_timeout, long=args.long, trials=trials,
        faults=faults,
        repeat=repeat or (3 if args.long else 1), repeats=repeats, settle=2.0 if args.long else 1.0,
        argv=list(sys.argv[1:] if argv is None else argv),
    )
    signal.signal(signal.SIGTERM, _on_sigterm)
    t0 = time.monotonic()

    def say(msg: str) -> None:
        sys.stderr.write(f"[{time.monotonic() - t0:6.1f}s] {msg}\n")
        sys.stderr.flush()

    import logging

    logging.basicConfig(level=logging.CRITICAL)
    res = run(st, args.out, keep_history=args.keep_history, say=say)
    sys.stdout.write(markdown(res))
    say(f"results in {os.path.abspath(args.out)}")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
