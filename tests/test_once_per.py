"""``zkrecipes lock PATH --once-per KEY`` and ``lock.once(key)``: one run per key across processes.

Real ``zkrecipes`` subprocesses race on the session's ensemble (its servers have TTL nodes: the kit starts
them with ``zookeeper.extendedTypesEnabled``); the fallback without TTL nodes runs on a one-server
ensemble of its own started without that property. The job appends a line per run to a file, so the number
of runs is counted, not inferred; orderings are forced by release files and waited for with deadlines.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest
from kazoo.client import KazooClient
from lockhelpers import children
from test_cli import DEADLINE, Cli, no_traceback, wait_until

from zkrecipes import FairLock, LockError, LockLost, ReadWriteLock, Semaphore, once
from zkrecipes.testing import Ensemble, expire_session

JOB = r'''
import os, sys, time
log, name, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
release = sys.argv[4] if len(sys.argv) > 4 else None
with open(log, "a") as f:
    f.write(f"{name} {time.monotonic()} {os.getpid()}\n")
deadline = time.monotonic() + 60
while release and not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.01)
sys.exit(status)
'''


class Job:
    """The command: ``python job.py LOG NAME STATUS [RELEASE]``; one line in LOG per run."""

    def __init__(self, cli: Cli) -> None:
        self.cli = cli
        self.log = cli.workdir / "runs.txt"
        self.script = cli.workdir / "job.py"
        self.script.write_text(JOB)

    def cmd(self, name: str, status: int = 0, wait: bool = False) -> list:
        extra = [str(self.cli.release_file(name))] if wait else []
        return ["--", sys.executable, str(self.script), str(self.log), name, str(status), *extra]

    def runs(self) -> list:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def cli(zk_ensemble, zk_namespace, tmp_path):
    c = Cli(zk_ensemble.hosts + zk_namespace, tmp_path)
    yield c
    c.close()


@pytest.fixture
def job(cli):
    return Job(cli)


def lock_args(cli: Cli, key: str, *extra: str) -> list:
    return ["lock", "/job", "--hosts", cli.hosts, "--once-per", key, *extra]


def test_racing_hosts_run_once_and_late_arrivals_skip(cli, job, zk):
    first = cli.start(*lock_args(cli, "fire-1"), *job.cmd("first", wait=True), tag="first")
    wait_until(lambda: job.runs(), "the first runs its job")
    others = [cli.start(*lock_args(cli, "fire-1"), *job.cmd(f"other{i}"), tag=f"other{i}") for i in range(3)]
    wait_until(lambda: len(children(zk, "/job")) == 4, "the three others wait in line behind the first")
    cli.release("first")
    assert first.wait() == 0, first.stderr
    for p in others:
        assert p.wait() == 0, p.stderr
        assert "fire-1 was done already" in p.stderr
        no_traceback(p.stderr)
    assert [r.split()[0] for r in job.runs()] == ["first"]
    late = cli.run(*lock_args(cli, "fire-1"), *job.cmd("late"))
    assert late.returncode == 0, late.stderr
    coded = cli.run(*lock_args(cli, "fire-1", "--exit-if-done", "3"), *job.cmd("coded"))
    assert coded.returncode == 3, coded.stderr
    assert "done already" in coded.stderr
    assert len(job.runs()) == 1
    assert zk.exists("/job-done/fire-1") is not None  # the marker is a sibling of the lock path
    assert children(zk, "/job") == []


def test_failed_run_leaves_key_open(cli, job):
    failed = cli.run(*lock_args(cli, "k"), *job.cmd("failed", status=1))
    assert failed.returncode == 1, failed.stderr
    retry = cli.run(*lock_args(cli, "k"), *job.cmd("retry"))
    assert retry.returncode == 0, retry.stderr
    after = cli.run(*lock_args(cli, "k", "--exit-if-done", "9"), *job.cmd("after"))
    assert after.returncode == 9, after.stderr
    assert [r.split()[0] for r in job.runs()] == ["failed", "retry"]


def test_killed_run_leaves_key_open(cli, job, zk):
    """SIGKILL of zkrecipes mid-command: no marker; the next run waits for the dead session's node, then runs."""
    victim = cli.start(*lock_args(cli, "k", "--session-timeout", "2"), *job.cmd("victim", wait=True), tag="victim")
    line = wait_until(lambda: job.runs(), "the victim runs its job")[0]
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    os.kill(int(line.split()[2]), signal.SIGKILL)  # its orphaned job too
    nxt = cli.run(*lock_args(cli, "k"), *job.cmd("next"))
    assert nxt.returncode == 0, nxt.stderr
    assert [r.split()[0] for r in job.runs()] == ["victim", "next"]
    assert zk.exists("/job-done/k") is not None


def test_terminated_run_leaves_key_open(cli, job):
    """SIGTERM to zkrecipes is forwarded; the job dies of it (status 143): not done."""
    victim = cli.start(*lock_args(cli, "k"), *job.cmd("victim", wait=True), tag="victim")
    wait_until(lambda: job.runs(), "the victim runs its job")
    os.kill(victim.pid, signal.SIGTERM)
    assert victim.wait() == 128 + signal.SIGTERM, victim.stderr
    nxt = cli.run(*lock_args(cli, "k"), *job.cmd("next"))
    assert nxt.returncode == 0, nxt.stderr
    assert [r.split()[0] for r in job.runs()] == ["victim", "next"]


def test_keys_are_independent(cli, job):
    for key in ("a", "b", "a", "b", "c"):
        r = cli.run(*lock_args(cli, key), *job.cmd(key))
        assert r.returncode == 0, r.stderr
    assert [r.split()[0] for r in job.runs()] == ["a", "b", "c"]


def test_keep_expiry_opens_key_again(cli, job):
    first = cli.run(*lock_args(cli, "k", "--keep", "2s"), *job.cmd("first"))
    assert first.returncode == 0, first.stderr
    ended = time.monotonic()  # after the marker was written

    def rerun() -> bool:
        r = cli.run(*lock_args(cli, "k", "--keep", "2s"), *job.cmd("again"))
        assert r.returncode == 0, r.stderr
        return len(job.runs()) == 2

    # runs until the job runs again; every run before the keep passed skipped it (a loaded machine may
    # start the first of them after the keep already: the start time below is what decides)
    wait_until(rerun, "the key opens again once its 2 s keep passed")
    started = float(job.runs()[1].split()[1])
    assert started - ended >= 2.0 - 0.2  # judged by the server's clock; ours ticks at the same rate


@pytest.mark.parametrize("bad, message", [
    (["--once-per", ""], "must not be empty"),
    (["--once-per", "a/b"], "must not contain '/'"),
    (["--once-per", ".."], "does not make a usable node name"),
    (["--once-per", "k", "--keep", "0"], "keep must be > 0"),
    (["--once-per", "k", "--keep", "1w"], "not a duration"),
    (["--once-per", "k", "--keep", "-5"], "not a duration"),
    (["--once-per", "k", "--exit-if-done", "300"], "exit status 0..255"),
    (["--once-per", "k", "--read"], "--once-per needs a lock one host holds at a time"),
    (["--once-per", "k", "-n", "2"], "--once-per needs a lock one host holds at a time"),
    (["--keep", "5"], "go with --once-per"),
    (["--exit-if-done", "1"], "go with --once-per"),
])
def test_bad_input_exits_2_before_any_request(cli, tmp_path, bad, message):
    """Against a port nothing listens on: a connection attempt would exit 69 after --connect-timeout."""
    r = cli.run("lock", "/job", "--hosts", "127.0.0.1:1", "--connect-timeout", "20", *bad, "--", "true",
                timeout=10)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    no_traceback(r.stderr.replace("error:", ""))  # argparse's own "error:" prefix


# -- the Python API ---------------------------------------------------------------------------------------
def test_python_api_runs_once_and_marks_only_on_done(zk_factory):
    a, b = zk_factory(), zk_factory()
    with FairLock(a, "/job").once("k") as run:
        assert run
        # no done(): the job "failed"
    with FairLock(b, "/job").once("k") as run:
        assert run
        run.done()
        with pytest.raises(LockError):
            run.done()
    with FairLock(a, "/job").once("k") as run:
        assert not run
    with ReadWriteLock(a, "/job").write().once("other") as run:  # one queue with FairLock, same markers
        assert run


def test_done_is_fenced_by_the_hold(zk_factory):
    """A holder whose session expired before done() cannot mark the key: LockLost, and it stays open."""
    a, b = zk_factory(), zk_factory()
    with pytest.raises(LockLost):
        with FairLock(a, "/job").once("k") as run:
            assert run
            expire_session(a)
            run.done()
    with FairLock(b, "/job").once("k") as run:
        assert run


def test_bad_python_input_before_any_request():
    client = KazooClient(hosts="127.0.0.1:1")  # never started: any request would raise
    lock = FairLock(client, "/job")
    for key in ("", "a/b", ".", "x" * 5000, 5):
        with pytest.raises((TypeError, ValueError), match="once key"):
            lock.once(key)
    for keep in (0, -1, float("nan"), float("inf"), "1d", True):
        with pytest.raises((TypeError, ValueError), match="keep"):
            lock.once("k", keep)
    with pytest.raises(LockError, match="one process holds at a time"):
        ReadWriteLock(client, "/job").read().once("k")
    with pytest.raises(LockError, match="one process holds at a time"):
        Semaphore(client, "/job", 2).once("k")
    assert once.parse_keep("1d") == 86400 and once.parse_keep("90m") == 5400 and once.parse_keep("90") == 90


# -- cleanup: TTL markers on this ensemble, persistent markers swept without TTL nodes -----------------------
def race(hosts: str, key: str, n: int = 4) -> int:
    """``n`` clients run ``once(key)`` at once; returns how many ran the job."""
    ran = []
    barrier = threading.Barrier(n)

    def one() -> None:
        client = KazooClient(hosts=hosts)
        client.start(30)
        try:
            barrier.wait(DEADLINE)
            with FairLock(client, "/job").once(key) as run:
                if run:
                    ran.append(key)
                    run.done()
        finally:
            client.stop()
            client.close()

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert not any(t.is_alive() for t in threads)
    return len(ran)


def test_ttl_markers_vanish_on_their_own(zk_ensemble, zk_namespace, zk):
    assert race(zk_ensemble.hosts + zk_namespace, "ttl") == 1
    assert zk.exists("/job-done/ttl") is not None
    with FairLock(zk, "/job").once("short", keep=1.0) as run:
        run.done()
    assert zk not in once._no_ttl  # the server took TTL nodes
    wait_until(lambda: zk.exists("/job-done/short") is None, "the server deletes the 1 s TTL marker")


@pytest.fixture(scope="module")
def plain_ensemble():
    """One server without zookeeper.extendedTypesEnabled: it refuses TTL nodes."""
    with Ensemble(size=1, extended_types=False) as ens:
        yield ens


def test_without_ttl_nodes_markers_are_persistent_and_swept(plain_ensemble):
    hosts = plain_ensemble.hosts
    assert race(hosts, "fire-1") == 1
    zk = KazooClient(hosts=hosts)
    zk.start(30)
    try:
        with FairLock(zk, "/job").once("old", keep=1.0) as run:
            run.done()
        assert zk in once._no_ttl  # the server answered UnimplementedError: persistent markers
        written = zk.exists("/job-done/old").ctime
        with FairLock(zk, "/job").once("old", keep=3600) as run:
            assert not run  # within the looker's keep the key stays done (however loaded the machine)
        # the one with keep=1 decides on the server's clock: the marker's ctime against its own lock node's.
        # Both are read here, so the expectation follows from the state, not from a bet that it looks in 1 s
        lock = FairLock(zk, "/job")
        with lock.once("old", keep=1.0) as run:
            looked_at = zk.exists(lock.node).ctime
            assert bool(run) is (looked_at >= written + 1000), (looked_at - written, bool(run))
            if run:  # looked after its keep (a slow machine): the stale marker was deleted; write it again
                run.done()
        wait_until(lambda: zk.exists("/job-done/old").ctime / 1000 + 1.0 < time.time() - 0.5,
                   "the marker is older than its keep")  # (the server and we share the machine's clock)
        assert zk.exists("/job-done/old") is not None  # no TTL: nobody deleted it yet
        with FairLock(zk, "/job").once("new", keep=1.0) as run:  # writing a marker sweeps the stale ones
            run.done()
        assert sorted(zk.get_children("/job-done")) == ["fire-1", "new"]  # fire-1 is kept a day
        assert zk.exists("/job-done/old") is None
        with FairLock(zk, "/job").once("old", keep=1.0) as run:
            assert run
    finally:
        zk.stop()
        zk.close()
