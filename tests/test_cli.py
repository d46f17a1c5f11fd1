"""The ``zkrecipes`` command line, driven as a user drives it: in subprocesses, against real ZooKeeper.

Every test talks to the session's ensemble through a chroot connect string (``<hosts><zk_namespace>``),
so tests never see each other's locks. The commands run under a lock are small Python scripts
(:data:`HOLD_SCRIPT`) that record start/end/SIGTERM with ``time.monotonic()`` (one clock for every
process on the machine) and hold until the test creates their release file, so every ordering below is
forced by the test, not hoped for.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from lockhelpers import children
from lockhelpers import wait_until as _wait_until

from zkrecipes import naming
from zkrecipes.testing import Partition

_SCRIPT = Path(sys.executable).with_name("zkrecipes")
ZKRECIPES = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "zkrecipes.cli"]
DEADLINE = 30.0  # for anything that should take well under a second (a shared 2-core machine is slow)

HOLD_SCRIPT = r'''
import json, os, signal, sys, time

log, name, release = sys.argv[1:4]
status = int(sys.argv[4]) if len(sys.argv) > 4 else 0


def rec(ev):
    line = {"name": name, "ev": ev, "t": time.monotonic(), "pid": os.getpid(),
            "token": os.environ.get("ZKRECIPES_TOKEN"), "node": os.environ.get("ZKRECIPES_NODE")}
    with open(log, "a") as f:
        f.write(json.dumps(line) + "\n")


def on_term(signum, frame):
    rec("sigterm")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
rec("start")
deadline = time.monotonic() + 60
while not os.path.exists(release):
    if time.monotonic() > deadline:
        rec("gave-up")
        sys.exit(99)
    time.sleep(0.01)
rec("end")
sys.exit(status)
'''


def wait_until(predicate, what: str, timeout: float = DEADLINE):
    """lockhelpers.wait_until with this file's argument order and default deadline."""
    return _wait_until(predicate, timeout, what, interval=0.02)


def no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert not re.search(r"\w(Error|Exception|Warning):", stderr), stderr  # nor a bare "KeyError: ..." line


def dump_stacks(popen: subprocess.Popen) -> None:
    """End a hung zkrecipes with SIGABRT: its faulthandler (PYTHONFAULTHANDLER, set by :class:`Cli`) writes
    every thread's stack to its stderr first, so the failure says where it hung; SIGKILL if that fails."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGABRT)
        try:
            popen.wait(5)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


class Proc:
    """A zkrecipes run in the background, its output in files (no pipe to fill up)."""

    def __init__(self, args: list, workdir: Path, tag: str, env: dict) -> None:
        self.out, self.err = workdir / f"{tag}.out", workdir / f"{tag}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.popen = subprocess.Popen(ZKRECIPES + args, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                          env=env)
        self.pid = self.popen.pid

    def wait(self, timeout: float = DEADLINE) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            dump_stacks(self.popen)
            pytest.fail(f"zkrecipes (pid {self.pid}) did not exit within {timeout} s; stderr: {self.stderr}")

    @property
    def stderr(self) -> str:
        return self.err.read_text()

    @property
    def stdout(self) -> str:
        return self.out.read_text()


class Cli:
    """Runs ``zkrecipes`` against the test's chroot and the holder script, and reads what holders recorded."""

    def __init__(self, hosts: str, workdir: Path) -> None:
        self.hosts = hosts
        self.workdir = workdir
        self.log = workdir / "events.jsonl"
        self.script = workdir / "hold.py"
        self.script.write_text(HOLD_SCRIPT)
        self.env = {k: v for k, v in os.environ.items() if k not in ("ZK_HOSTS", "ZKRECIPES_LOG")}
        self.env["PYTHONFAULTHANDLER"] = "1"  # a hung run's stacks on SIGABRT (dump_stacks)
        self.procs: list[Proc] = []

    def run(self, *args: str, timeout: float = DEADLINE, env: dict | None = None) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(ZKRECIPES + list(args), capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, env=env or self.env)
        except subprocess.TimeoutExpired:
            pytest.fail(f"zkrecipes {' '.join(args)} did not exit within {timeout} s")

    def start(self, *args: str, tag: str) -> Proc:
        proc = Proc(list(args), self.workdir, tag, self.env)
        self.procs.append(proc)
        return proc

    def holder(self, name: str, status: int = 0) -> list:
        """The command part: ``-- python hold.py LOG NAME RELEASE [STATUS]``."""
        return ["--", sys.executable, str(self.script), str(self.log), name, str(self.release_file(name)),
                str(status)]

    def release_file(self, name: str) -> Path:
        return self.workdir / f"release-{name}"

    def release(self, name: str) -> None:
        self.release_file(name).touch()

    def events(self, name: str | None = None, ev: str | None = None) -> list:
        if not self.log.exists():
            return []
        out = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [e for e in out if (name is None or e["name"] == name) and (ev is None or e["ev"] == ev)]

    def wait_event(self, name: str, ev: str, timeout: float = DEADLINE) -> dict:
        return wait_until(lambda: (self.events(name, ev) or [None])[0], f"{name} records {ev!r}", timeout)

    def close(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()


@pytest.fixture
def cli(zk_ensemble, zk_namespace, tmp_path):
    c = Cli(zk_ensemble.hosts + zk_namespace, tmp_path)
    yield c
    c.close()


def queue(zk, path: str) -> list:
    """Names of the queue nodes under ``path`` in the test's chroot (what the CLI created), read after a
    sync so that the server we read from has seen every write the CLI's own server acknowledged."""
    zk.sync("/")
    return children(zk, path)


def status_json(cli: Cli, path: str) -> list:
    r = cli.run("status", path, "--json", "--hosts", cli.hosts)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# -- lock: mutual exclusion, tokens, exit status ---------------------------------------------------------


def test_two_locks_on_one_path_never_overlap_and_tokens_grow(cli, zk):
    a = cli.start("lock", "/jobs/nightly", "--hosts", cli.hosts, *cli.holder("a"), tag="a")
    first = cli.wait_event("a", "start")
    b = cli.start("lock", "/jobs/nightly", "--hosts", cli.hosts, *cli.holder("b"), tag="b")
    wait_until(lambda: len(queue(zk, "/jobs/nightly")) == 2, "the second run queued behind the first")
    assert cli.events("b") == [], "the second command started while the first held the lock"

    cli.release("a")
    second = cli.wait_event("b", "start")
    cli.release("b")
    assert a.wait() == 0 and b.wait() == 0, (a.stderr, b.stderr)

    a_end = cli.events("a", "end")[0]["t"]
    assert a_end <= second["t"], "the two commands overlapped"
    # The fencing token is exported as an int (the lock node's czxid) and grows from one holder to the next.
    assert int(second["token"]) > int(first["token"]) > 0
    assert first["node"].startswith("/jobs/nightly/") and second["node"].startswith("/jobs/nightly/")
    assert first["node"] != second["node"]
    assert queue(zk, "/jobs/nightly") == [], "a lock node outlived its zkrecipes run"
    no_traceback(a.stderr + b.stderr)


def test_command_exit_status_is_passed_through_and_zk_hosts_is_read(cli, zk):
    env = dict(cli.env, ZK_HOSTS=cli.hosts)  # no --hosts: the environment names the ensemble
    r = cli.run("lock", "/exit", "--", sys.executable, "-c", "import sys; sys.exit(3)", env=env)
    assert r.returncode == 3, r.stderr
    assert r.stderr == ""

    kill_self = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    r = cli.run("lock", "/exit", "--", sys.executable, "-c", kill_self, env=env)
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    no_traceback(r.stderr)
    # The lock is given back when the command ends (the session is closed), not a session timeout later.
    wait_until(lambda: queue(zk, "/exit") == [], "the lock node deleted after the command ended", timeout=5)

    r = cli.run("lock", "/exit", "--", sys.executable, "-c", "print('ran')", env=env)
    assert (r.returncode, r.stdout) == (0, "ran\n"), r.stderr


def test_token_and_node_are_exported_for_every_mode(cli):
    show = ["--", sys.executable, "-c", "import os; print(os.environ['ZKRECIPES_TOKEN'], os.environ['ZKRECIPES_NODE'])"]
    seen = []
    for mode in ([], ["--read"], ["--exclusive"], ["--write"]):
        r = cli.run("lock", "/env", *mode, "--hosts", cli.hosts, *show)
        assert r.returncode == 0, r.stderr
        token, node = r.stdout.split()
        seen.append(int(token))
        if mode == ["--exclusive"]:
            assert node == "/env/lock"
        else:
            kind = "R" if mode == ["--read"] else "W"
            assert re.fullmatch(rf"/env/{re.escape(naming.default_host())}-{kind}-\d{{10}}", node), node
    assert seen == sorted(seen) and len(set(seen)) == len(seen), f"tokens did not grow between runs: {seen}"


def test_read_holders_overlap_and_a_writer_waits_for_them(cli, zk):
    r1 = cli.start("lock", "/shared", "--read", "--hosts", cli.hosts, *cli.holder("r1"), tag="r1")
    r2 = cli.start("lock", "/shared", "--read", "--hosts", cli.hosts, *cli.holder("r2"), tag="r2")
    cli.wait_event("r1", "start")
    cli.wait_event("r2", "start")  # both readers run at once: neither has been released yet
    w = cli.start("lock", "/shared", "--write", "--hosts", cli.hosts, *cli.holder("w"), tag="w")
    wait_until(lambda: len(queue(zk, "/shared")) == 3, "the writer queued behind the readers")
    assert cli.events("w") == []

    cli.release("r1")
    assert r1.wait() == 0
    assert cli.events("w") == [], "the writer started while a reader still held the lock"
    cli.release("r2")
    started = cli.wait_event("w", "start")
    cli.release("w")
    assert r2.wait() == 0 and w.wait() == 0
    assert started["t"] >= max(e["t"] for e in cli.events(ev="end") if e["name"] in ("r1", "r2"))


# -- lock: losing the hold, timing out, signals ----------------------------------------------------------


def test_lost_session_terminates_the_command_and_exits_75(cli, zk_ensemble, zk_namespace, zk):
    with Partition(zk_ensemble.hosts) as link:
        proc = cli.start("lock", "/fragile", "--hosts", link.hosts + zk_namespace, "--session-timeout", "2",
                         *cli.holder("victim"), tag="victim")
        cli.wait_event("victim", "start")
        assert len(queue(zk, "/fragile")) == 1
        cut_at = time.monotonic()
        link.cut()
        term = cli.wait_event("victim", "sigterm", timeout=DEADLINE)
        assert proc.wait() == 75
    # In doubt as soon as the connection dropped: stopped well before the session could expire.
    assert term["t"] - cut_at < 2.0, f"SIGTERM came {term['t'] - cut_at:.2f} s after the cut"
    assert cli.events("victim", "end") == []
    lines = proc.stderr.splitlines()
    assert lines == ["zkrecipes: the lock on /fragile fell in doubt (ZooKeeper unreachable or silent): the command "
                     "was stopped before the 2 s session could expire"], proc.stderr
    # The server expired the session too: the lock is free for the next run.
    r = cli.run("lock", "/fragile", "--timeout", "20", "--hosts", cli.hosts, "--", sys.executable, "-c", "")
    assert r.returncode == 0, r.stderr


OVERLAP_SCRIPT = r'''
import json, os, signal, sys, time

log, name, stubborn = sys.argv[1], sys.argv[2], sys.argv[3] == "1"


def alive(pid):  # running (a zombie has ended: its zkrecipes has not reaped it yet)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def rec(ev, **kw):
    with open(log, "a") as f:
        f.write(json.dumps(dict(name=name, ev=ev, t=time.monotonic(), pid=os.getpid(), **kw)) + "\n")


def on_term(signum, frame):
    rec("sigterm")
    if not stubborn:
        rec("end")
        sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
others = [json.loads(line) for line in open(log)] if os.path.exists(log) else []
rec("start", alive=[e["name"] for e in others if e["ev"] == "start" and alive(e["pid"])],
    node=os.environ["ZKRECIPES_NODE"])
if name.startswith("B"):
    rec("end")
    sys.exit(0)
while True:
    time.sleep(0.05)  # hold until signalled (a stubborn one until killed)
'''


@pytest.mark.parametrize("fault", ["silent", "silent-stubborn", "closed-stubborn", "silent", "silent-stubborn",
                                   "elect-silent-stubborn"])
def test_a_partitioned_holder_stops_its_command_before_another_can_start(cli, zk_ensemble, zk_namespace, zk, fault):
    """A's zkrecipes reaches ZooKeeper through a link that freezes (silent: open, nothing delivered) or is
    cut; B's waits directly. B's command must never start while A's runs: A's is signalled when its hold
    falls in doubt and killed before the session can expire (a stubborn one ignores SIGTERM)."""
    from lockhelpers import Freezer

    script = cli.workdir / "overlap.py"
    script.write_text(OVERLAP_SCRIPT)
    stubborn = "1" if fault.endswith("stubborn") else "0"
    command = "elect" if fault.startswith("elect") else "lock"
    link = Freezer(zk_ensemble.hosts) if "silent" in fault else Partition(zk_ensemble.hosts)
    with link:
        a = cli.start(command, "/twice", "--hosts", link.hosts + zk_namespace, "--session-timeout", "3", "--",
                      sys.executable, str(script), str(cli.log), "A", stubborn, tag="A")
        a_start = cli.wait_event("A", "start")
        a_pid = a_start["pid"]
        expired: list = []
        assert zk.exists(a_start["node"], watch=lambda e: expired.append(time.monotonic())) is not None
        gone: list = []
        watcher = threading.Thread(target=lambda: gone.append(_until_gone(a_pid)), daemon=True)
        watcher.start()
        b = cli.start(command, "/twice", "--hosts", cli.hosts, "--session-timeout", "3", "--",
                      sys.executable, str(script), str(cli.log), "B", "0", tag="B")
        wait_until(lambda: len(queue(zk, "/twice")) == 2, "B queued behind A")
        fault_at = link.freeze() if isinstance(link, Freezer) else (link.cut(), time.monotonic())[1]
        b_start = cli.wait_event("B", "start")
        assert a.wait() == 75, a.stderr
        assert b.wait() == 0, b.stderr
        watcher.join(DEADLINE)
    assert b_start["alive"] == [], f"B's command started while A's was still running ({fault})"
    assert gone and gone[0] < b_start["t"]
    term = cli.events("A", "sigterm")
    assert term, "A's command was never signalled"
    a_end = cli.events("A", "end")
    wait_until(lambda: expired, "the server expired A's session")
    assert gone[0] < expired[0]
    timeline = {"sigterm": term[0]["t"] - fault_at, "A gone": gone[0] - fault_at,
                "server expired A": expired[0] - fault_at, "B start": b_start["t"] - fault_at}
    if a_end:
        timeline["A end"] = a_end[0]["t"] - fault_at
        assert a_end[0]["t"] < b_start["t"]
    print(f"\n{fault}: " + ", ".join(f"{k} {v:+.2f}" for k, v in timeline.items()))
    assert term[0]["t"] - fault_at <= 1.5 + 0.5  # in doubt at half the 3 s timeout, at the latest


def _until_gone(pid: int) -> float:
    """Monotonic time at which process ``pid`` is seen ended (exited or a zombie), polled every 5 ms."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except OSError:
            break
        time.sleep(0.005)
    return time.monotonic()


def test_a_grace_longer_than_the_session_timeout_leaves_is_refused(cli):
    r = cli.run("lock", "/g", "--hosts", "127.0.0.1:1", "--session-timeout", "3", "--grace", "2", "--", "true")
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == ["zkrecipes: --grace 2 is longer than the 1.2 s a 3 s session timeout leaves "
                                     "between doubt and the lost deadline; use --grace 1.2 or less, or a longer "
                                     "--session-timeout"], r.stderr
    r = cli.run("lock", "/g", "--hosts", "127.0.0.1:1", "--connect-timeout", "0.5", "--session-timeout", "3",
                "--grace", "1.2", "--", "true")  # the limit itself is allowed: on to connecting (and failing)
    assert r.returncode == 69, r.stderr
    r = cli.run("elect", "/g", "--hosts", "127.0.0.1:1", "--grace", "4.5", "--", "true")  # default 10 s session
    assert r.returncode == 2 and "--grace 4.5 is longer than the 4 s" in r.stderr, r.stderr


@pytest.mark.parametrize("option,value,says", [
    ("--session-timeout", "inf", "up to 3600"),
    ("--session-timeout", "1e9", "up to 3600"),
    ("--session-timeout", "nan", "got 'nan' (not a number)"),
    ("--grace", "NaN", "got 'NaN' (not a number)"),
    ("--connect-timeout", "inf", "up to 86400"),
    ("--timeout", "1e300", "up to 86400"),
    ("--timeout", "-1", "must be >= 0"),
    ("--grace", "inf", "up to 86400"),
])
def test_out_of_range_seconds_exit_2_with_a_message(cli, option, value, says):
    r = cli.run("lock", "/g", "--hosts", "127.0.0.1:1", option, value, "--", "true")
    assert r.returncode == 2, r.stderr
    assert option in r.stderr and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_oversized_identifier_exits_2_naming_the_limit(cli):
    r = cli.run("lock", "/g", "--hosts", "127.0.0.1:1", "--identifier", "x" * 5000, "--", "true")
    assert r.returncode == 2 and "the limit is 4096 bytes" in r.stderr, r.stderr


def test_timeout_exits_75_naming_how_many_were_ahead(cli, zk):
    cli.start("lock", "/busy", "--hosts", cli.hosts, *cli.holder("holder"), tag="holder")
    cli.wait_event("holder", "start")
    cli.release("next")  # the second in line runs and ends as soon as it gets the lock
    nxt = cli.start("lock", "/busy", "--hosts", cli.hosts, *cli.holder("next"), tag="next")
    wait_until(lambda: len(queue(zk, "/busy")) == 2, "the second run queued")
    before = sorted(queue(zk, "/busy"))

    t = time.monotonic()
    r = cli.run("lock", "/busy", "--timeout", "1", "--hosts", cli.hosts, *cli.holder("late"))
    waited = time.monotonic() - t
    assert r.returncode == 75, r.stderr
    assert r.stderr.splitlines() == ["zkrecipes: timed out waiting for /busy (2 ahead)"]
    assert 1.0 <= waited < 15, waited
    assert cli.events("late") == [], "the command ran without the lock"
    assert sorted(queue(zk, "/busy")) == before, "the timed-out run left its node behind"

    cli.release("holder")
    assert nxt.wait() == 0, nxt.stderr


def test_signals_are_forwarded_to_the_command_and_end_a_wait_cleanly(cli, zk):
    # While the command runs, SIGTERM goes to it; zkrecipes exits with the command's status.
    runner = cli.start("lock", "/sig", "--hosts", cli.hosts, "--", sys.executable, "-c",
                       "import time; print('up', flush=True); time.sleep(60)", tag="runner")
    wait_until(lambda: runner.stdout == "up\n", "the command started")
    waiting = cli.start("lock", "/sig", "--hosts", cli.hosts, *cli.holder("waiting"), tag="waiting")
    wait_until(lambda: len(queue(zk, "/sig")) == 2, "the second run queued")

    # While waiting, SIGTERM ends zkrecipes at once and takes its node out of the queue.
    waiting.popen.send_signal(signal.SIGTERM)
    assert waiting.wait() == 128 + signal.SIGTERM
    assert waiting.stderr.splitlines() == [f"zkrecipes: terminated (signal {int(signal.SIGTERM)}) while waiting "
                                           "for /sig"]
    wait_until(lambda: len(queue(zk, "/sig")) == 1, "the waiter's node deleted", timeout=5)
    assert cli.events("waiting") == []

    runner.popen.send_signal(signal.SIGTERM)
    assert runner.wait() == 128 + signal.SIGTERM  # the command died of the forwarded SIGTERM
    no_traceback(runner.stderr)
    wait_until(lambda: queue(zk, "/sig") == [], "the holder's node deleted", timeout=5)


# -- status ------------------------------------------------------------------------------------------------


def test_status_shows_holder_and_waiters(cli, zk):
    a = cli.start("lock", "/q", "--identifier", "alpha", "--hosts", cli.hosts, *cli.holder("alpha"), tag="a")
    cli.wait_event("alpha", "start")
    b = cli.start("lock", "/q", "--read", "--identifier", "beta", "--hosts", cli.hosts, *cli.holder("beta"),
                  tag="b")
    wait_until(lambda: len(queue(zk, "/q")) == 2, "beta queued")
    c = cli.start("lock", "/q", "--identifier", "gamma", "--hosts", cli.hosts, *cli.holder("gamma"), tag="c")
    wait_until(lambda: len(queue(zk, "/q")) == 3, "gamma queued")
    host = naming.default_host()

    r = cli.run("status", "/q", "--hosts", cli.hosts)
    assert r.returncode == 0, r.stderr
    header, *rows = [line.split() for line in r.stdout.splitlines()]
    assert header == ["POSITION", "NODE", "KIND", "HOST", "PID", "IDENTIFIER", "AGE", "STATE"]
    assert [(row[0], row[2], row[3], row[4], row[5], row[7]) for row in rows] == [
        ("0", "W", host, str(a.pid), "alpha", "holding"),
        ("1", "R", host, str(b.pid), "beta", "waiting"),
        ("2", "W", host, str(c.pid), "gamma", "waiting"),
    ]
    assert all(float(row[6]) >= 0 for row in rows)

    rows = status_json(cli, "/q")
    assert [(x["position"], x["kind"], x["identifier"], x["pid"], x["state"]) for x in rows] == [
        (0, "W", "alpha", a.pid, "holding"), (1, "R", "beta", b.pid, "waiting"), (2, "W", "gamma", c.pid, "waiting")]
    assert sorted(x["node"] for x in rows) == sorted(queue(zk, "/q"))
    ages = [x["age"] for x in rows]  # from each node's ctime: the first queued is the oldest
    assert ages == sorted(ages, reverse=True) and 0 <= ages[-1] <= ages[0] < 120, ages

    cli.release("alpha")
    cli.wait_event("beta", "start")  # the reader holds now; the writer behind it still waits
    rows = status_json(cli, "/q")
    assert [(x["identifier"], x["kind"], x["state"]) for x in rows] == [("beta", "R", "holding"),
                                                                       ("gamma", "W", "waiting")]
    cli.release("beta")
    cli.release("gamma")
    assert [p.wait() for p in (a, b, c)] == [0, 0, 0]
    assert status_json(cli, "/q") == []
    r = cli.run("status", "/q", "--hosts", cli.hosts)
    assert (r.returncode, r.stdout) == (0, "/q: no holders or waiters\n")


def test_status_of_an_exclusive_lock_and_an_election(cli, zk):
    ex = cli.start("lock", "/ex", "--exclusive", "--identifier", "solo", "--hosts", cli.hosts, *cli.holder("solo"),
                   tag="ex")
    cli.wait_event("solo", "start")
    rows = status_json(cli, "/ex")
    assert [(x["node"], x["kind"], x["identifier"], x["pid"], x["state"]) for x in rows] == [
        ("lock", "X", "solo", ex.pid, "holding")]

    lead = cli.start("elect", "/el", "--identifier", "first", "--hosts", cli.hosts, *cli.holder("first"), tag="l1")
    first = cli.wait_event("first", "start")
    follow = cli.start("elect", "/el", "--identifier", "second", "--hosts", cli.hosts, *cli.holder("second"),
                       tag="l2")
    wait_until(lambda: len(queue(zk, "/el")) == 2, "the second candidate queued")
    rows = status_json(cli, "/el")
    assert [(x["identifier"], x["state"]) for x in rows] == [("first", "holding"), ("second", "waiting")]
    assert cli.events("second") == []

    cli.release("first")
    second = cli.wait_event("second", "start")
    assert second["t"] >= cli.events("first", "end")[0]["t"], "two leaders at once"
    assert int(second["token"]) > int(first["token"])
    cli.release("second")
    cli.release("solo")
    assert [p.wait() for p in (ex, lead, follow)] == [0, 0, 0]


# -- the demo ------------------------------------------------------------------------------------------------


def test_demo_short_run_ends_with_a_passing_verdict(cli, zk_ensemble, zk_namespace):
    r = cli.run("demo", "--seconds", "6", "--workers", "2", "--hosts", zk_ensemble.hosts + zk_namespace,
                timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    verdicts = [line.split("] ", 1)[1] for line in lines if re.search(r"\] (PASS|FAIL) ", line)]
    assert verdicts and all(v.startswith("PASS ") for v in verdicts), r.stdout
    for check in ("in FIFO (queue) order", "no two holders at once", "fencing tokens strictly increase",
                  "none overlapped a reader or writer", "readers held it together", "never two leaders at once",
                  "leader tokens increase", "after the leader was killed"):
        assert any(check in v for v in verdicts), f"no verdict line about {check!r}:\n{r.stdout}"
    assert lines[-1].endswith("verdict: PASS, every check held"), r.stdout
    no_traceback(r.stderr)


# -- errors a user sees, --help -------------------------------------------------------------------------


BAD_INPUT = {
    "relative path": (["lock", "jobs/x", "--", "true"], 2, "zkrecipes: bad path: lock path must be absolute"),
    "empty path segment": (["lock", "/a//b", "--", "true"], 2, "zkrecipes: bad path: lock path has an empty segment"),
    "reserved path": (["status", "/zookeeper/quota"], 2, "zkrecipes: bad path: lock path must not be inside"),
    "missing command": (["lock", "/x"], 2, "zkrecipes: missing command: usage: zkrecipes lock PATH [options] --"),
    "empty command": (["elect", "/x", "--"], 2, "zkrecipes: missing command: usage: zkrecipes elect PATH"),
    "command without --": (["lock", "/x", "true"], 2, "error: put '--' before the command"),
    "bad --timeout": (["lock", "/x", "--timeout", "soon", "--", "true"], 2,
                      "argument --timeout: not a number of seconds: 'soon'"),
    "negative --timeout": (["lock", "/x", "--timeout", "-1", "--", "true"], 2,
                           "argument --timeout: must be >= 0 seconds: '-1'"),
    "nan --timeout": (["lock", "/x", "--timeout", "nan", "--", "true"], 2,
                      "argument --timeout: must be a number of seconds, got 'nan' (not a number)"),
    "no hosts": (["lock", "/x", "--", "true"], 2, "zkrecipes: no ZooKeeper hosts: pass --hosts H or set ZK_HOSTS"),
    "bad hosts": (["status", "/x", "--hosts", "127.0.0.1:notaport"], 2, "zkrecipes: bad --hosts '127.0.0.1:notaport'"),
    "unreachable": (["lock", "/x", "--hosts", "127.0.0.1:1", "--connect-timeout", "1", "--", "true"], 69,
                    "zkrecipes: cannot reach ZooKeeper at 127.0.0.1:1 within 1 s"),
    "demo workers": (["demo", "--workers", "1", "--hosts", "127.0.0.1:1"], 2,
                     "zkrecipes: --workers must be between 2 and"),
    "demo seconds": (["demo", "--seconds", "2", "--hosts", "127.0.0.1:1"], 2,
                     "zkrecipes: --seconds must be at least 6"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_gets_one_clear_error(case, tmp_path):
    args, code, message = BAD_INPUT[case]
    env = {k: v for k, v in os.environ.items() if k not in ("ZK_HOSTS", "ZKRECIPES_LOG")}
    r = subprocess.run(ZKRECIPES + args, capture_output=True, text=True, timeout=DEADLINE, env=env,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == code, r.stderr
    assert message in r.stderr, r.stderr
    assert r.stdout == ""
    no_traceback(r.stderr)
    if not r.stderr.startswith("usage:"):  # argparse's own errors come with the usage line first
        assert len(r.stderr.splitlines()) == 1, r.stderr


def test_errors_that_need_the_ensemble(cli, zk_ensemble):
    r = cli.run("lock", "/x", "--hosts", cli.hosts, "--", "/no/such/command")
    assert (r.returncode, r.stderr) == (127, "zkrecipes: command not found: /no/such/command\n")
    r = cli.run("lock", "/x", "--hosts", cli.hosts, "--", str(cli.log.parent))  # a directory: not executable
    assert r.returncode == 126, r.stderr
    assert r.stderr.startswith("zkrecipes: command not executable: ")

    missing = zk_ensemble.hosts + "/no-such-chroot-for-zkrecipes"
    r = cli.run("status", "/x", "--hosts", missing)
    assert r.returncode == 2
    assert r.stderr == (f"zkrecipes: chroot /no-such-chroot-for-zkrecipes does not exist on ZooKeeper at {missing}: "
                        "create it first, or leave it out of --hosts\n")


def test_help_lists_the_exit_codes():
    for args in ([], ["lock"], ["elect"]):
        r = subprocess.run(ZKRECIPES + args + ["--help"], capture_output=True, text=True, timeout=DEADLINE)
        assert r.returncode == 0, r.stderr
        codes = r.stdout.split("exit codes:", 1)[1]
        for code, meaning in (("2", "bad usage"), ("69", "cannot reach ZooKeeper"), ("75", "timed out waiting"),
                              ("127", "command not found"), ("130", "interrupted")):
            assert re.search(rf"(^|\s){code}\s+{meaning}", codes), (code, r.stdout)
        assert "the command's own exit status" in codes


def _received(ensemble) -> int:
    """Requests the servers have received so far (the sum of srvr's 'Received' counters)."""
    total = 0
    for i in range(ensemble.size):  # the interface every ensemble has: local, external or Docker
        lines = [ln for ln in ensemble.four_letter(i, "srvr").splitlines() if ln.startswith("Received:")]
        assert lines, f"no srvr reply from server {i} ({ensemble.host(i)})"
        total += int(lines[0].split(":", 1)[1])
    return total


def _fleet_cost(cli, zk, zk_ensemble, path: str, n: int) -> int:
    """Requests the servers received while ``n`` CLI waiters showing --progress passed through ``path``."""
    cli.start("lock", path, "--hosts", cli.hosts, *cli.holder(f"holder{n}"), tag=f"holder{n}")
    cli.wait_event(f"holder{n}", "start")
    before = _received(zk_ensemble)
    waiters = [cli.start("lock", path, "--progress", "--hosts", cli.hosts, "--", sys.executable, "-c", "pass",
                         tag=f"w{n}-{i}") for i in range(n)]
    # (polled slowly: the test's own reads are counted too)
    _wait_until(lambda: len(queue(zk, path)) == n + 1, 60, "every waiter queued", interval=0.25)
    cli.release(f"holder{n}")
    for w in waiters:
        assert w.wait() == 0, w.stderr
        assert "ahead" in w.stderr, w.stderr  # it did show progress
    return _received(zk_ensemble) - before


def test_waiters_cost_requests_linear_in_their_number(cli, zk, zk_ensemble):
    # A fleet of waiters (cron jobs) passing through one lock, each showing --progress: the tracker takes
    # "how many ahead" from the lock's own listings and adds no watch and no request, so the cost per
    # waiter does not grow with the fleet. (A tracker that watched the path and re-read it on every
    # change cost 2,775 requests for 15 waiters, 122 without it: quadratic.)
    small, large = 4, 12
    cost_small = _fleet_cost(cli, zk, zk_ensemble, "/fleet-small", small)
    cost_large = _fleet_cost(cli, zk, zk_ensemble, "/fleet-large", large)
    per_small, per_large = cost_small / small, cost_large / large
    assert per_large < 30, f"{large} CLI waiters cost {cost_large} requests"  # measured: 14 (the old tracker: 116)
    assert per_large < 1.5 * per_small + 3, (cost_small, cost_large)  # linear: the cost per waiter stays flat
