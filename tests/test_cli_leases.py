"""``zkrecipes lock -n N``: a lease of an N-semaphore per command, and ``zkrecipes status`` showing leases."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from test_cli import Cli, queue, status_json, wait_until

INSIDE_SCRIPT = r'''
import json, os, sys, time

room, log = sys.argv[1:3]
me = os.path.join(room, str(os.getpid()))
open(me, "w").close()  # in the room while the lease is held
deadline = time.monotonic() + 3.0
peak = 0
while time.monotonic() < deadline:  # wait (bounded) for company, so that two at once really happens
    peak = max(peak, len(os.listdir(room)))
    if peak >= 2:
        break
    time.sleep(0.01)
for _ in range(20):  # stay a little, still counting
    peak = max(peak, len(os.listdir(room)))
    time.sleep(0.01)
os.remove(me)
with open(log, "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "peak": peak, "token": os.environ["ZKRECIPES_TOKEN"]}) + "\n")
'''


@pytest.fixture
def cli(zk_ensemble, zk_namespace, tmp_path):
    c = Cli(zk_ensemble.hosts + zk_namespace, tmp_path)
    yield c
    c.close()


def test_lock_n2_with_six_processes_never_runs_more_than_two(cli: Cli, zk):
    room = cli.workdir / "room"
    room.mkdir()
    script = cli.workdir / "inside.py"
    script.write_text(INSIDE_SCRIPT)
    log = cli.workdir / "peaks.jsonl"
    procs = [cli.start("lock", "-n", "2", "/sem", "--hosts", cli.hosts, "--", sys.executable, str(script), str(room),
                       str(log), tag=f"p{i}") for i in range(6)]
    assert [p.wait(90) for p in procs] == [0] * 6, [p.stderr for p in procs]
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == 6
    assert max(r["peak"] for r in runs) == 2  # two at once, never three
    assert len({r["token"] for r in runs}) == 6
    assert queue(zk, "/sem") == []


def test_status_shows_leases_holding_and_waiting(cli: Cli, zk):
    a = cli.start("lock", "-n", "2", "/s", "--identifier", "a", "--hosts", cli.hosts, *cli.holder("a"), tag="a")
    cli.wait_event("a", "start")
    b = cli.start("lock", "-n", "2", "/s", "--identifier", "b", "--hosts", cli.hosts, *cli.holder("b"), tag="b")
    cli.wait_event("b", "start")
    c = cli.start("lock", "--leases", "2", "/s", "--identifier", "c", "--hosts", cli.hosts, *cli.holder("c"),
                  tag="c")
    wait_until(lambda: len(queue(zk, "/s")) == 3, "c queued")
    rows = status_json(cli, "/s")
    assert [(x["identifier"], x["kind"], x["leases"], x["state"]) for x in rows] == [
        ("a", "S", 2, "holding"), ("b", "S", 2, "holding"), ("c", "S", 2, "waiting")]
    r = cli.run("status", "/s", "--hosts", cli.hosts)
    header, *lines = [line.split() for line in r.stdout.splitlines()]
    assert header[:4] == ["POSITION", "NODE", "KIND", "LEASES"] and [ln[3] for ln in lines] == ["2", "2", "2"]
    cli.release("a")
    cli.wait_event("c", "start")
    cli.release("b")
    cli.release("c")
    assert [p.wait() for p in (a, b, c)] == [0, 0, 0]


def test_a_run_whose_n_disagrees_with_the_holders_exits_2(cli: Cli, zk):
    a = cli.start("lock", "-n", "2", "/m", "--hosts", cli.hosts, *cli.holder("a"), tag="a")
    cli.wait_event("a", "start")
    r = cli.run("lock", "-n", "3", "/m", "--hosts", cli.hosts, "--", "true")
    assert r.returncode == 2 and "max_leases 3 disagrees with the holders' 2" in r.stderr, r.stderr
    r = cli.run("lock", "/m", "--hosts", cli.hosts, "--timeout", "0.5", "--", "true")
    # a plain lock on a semaphore's path is refused, not queued behind the lease until it times out
    assert r.returncode == 2 and "/m: a ReadWriteLock cannot share this path" in r.stderr, r.stderr
    assert "is a node of a Semaphore (max_leases 2)" in r.stderr, r.stderr
    cli.release("a")
    assert a.wait() == 0
    assert queue(zk, "/m") == []


def test_bad_lease_counts_are_usage_errors(cli: Cli):
    for args in (["-n", "0"], ["-n", "two"], ["-n", "2", "--read"], ["-n", "-3"]):
        r = cli.run("lock", *args, "/x", "--hosts", cli.hosts, "--", "true")
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and r.stderr.strip()


def test_lease_holders_say_none_for_no_identifier_as_status_does(cli: Cli, zk):
    """``lease_holders()`` (both fronts) and ``status --json`` agree: None (null) for a holder built without
    an identifier, in queue order."""
    from zkrecipes import Semaphore, aio

    plain = Semaphore(zk, "/ids", 3).acquire_leases(1)
    named = Semaphore(zk, "/ids", 3, identifier="w").acquire_leases(1)
    sem = Semaphore(zk, "/ids", 3)
    assert sem.lease_holders() == [None, "w"]
    assert [row["identifier"] for row in status_json(cli, "/ids")] == [None, "w"]

    async def aio_holders() -> list:
        return await aio.Semaphore(zk, "/ids", 3).lease_holders()

    assert asyncio.run(aio_holders()) == [None, "w"]
    for lease in plain + named:
        lease.release()
    assert sem.lease_holders() == []
