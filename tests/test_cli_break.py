"""A CLI holder that is broken or asked to let go stops its command before anyone else's starts
(docs/cli.rst, "Revoke and break"; docs/revocation.rst), and ``break_lock(grace=...)`` on both fronts.

The commands stamp ``time.monotonic()`` (one clock for every process on the machine) into a shared log
every few milliseconds while they run; the next holder's command records whether the first one's process
is still alive when it starts. Every wait is on a process, a file or a node, with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time

import pytest
from kazoo.exceptions import NoNodeError
from lockhelpers import LateLink
from test_cli import DEADLINE, Cli, Proc, _until_gone, no_traceback, queue, wait_until

from zkrecipes import FairLock, aio, break_lock
from zkrecipes.cli import BREAK_GRACE, EXIT_REVOKED, EXIT_TEMPFAIL, KILL_AFTER

STAMP_SCRIPT = r'''
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
rec("start", token=int(os.environ["ZKRECIPES_TOKEN"]), node=os.environ["ZKRECIPES_NODE"],
    alive=sorted({e["name"] for e in others if e["ev"] == "start" and alive(e["pid"])}))
if name.startswith("B"):
    rec("end")
    sys.exit(0)
while True:  # runs until stopped (a stubborn one until killed), stamping as it goes
    time.sleep(0.005)
    rec("tick")
'''


@pytest.fixture
def cli(zk_ensemble, zk_namespace, tmp_path):
    c = Cli(zk_ensemble.hosts + zk_namespace, tmp_path)
    (tmp_path / "stamp.py").write_text(STAMP_SCRIPT)
    yield c
    c.close()


def start(cli: Cli, path: str, name: str, *options: str, stubborn: bool = False) -> Proc:
    return cli.start("lock", path, "--hosts", cli.hosts, *options, "--", sys.executable,
                     str(cli.workdir / "stamp.py"), str(cli.log), name, "1" if stubborn else "0", tag=name)


def a_then_b(cli: Cli, zk, path: str, *a_options: str, stubborn: bool = False) -> tuple:
    """A holds ``path`` with a command that runs until stopped; B queues behind it. (A, B, A's start)."""
    a = start(cli, path, "A", *a_options, stubborn=stubborn)
    a_start = cli.wait_event("A", "start")
    cli.wait_event("A", "tick")
    b = start(cli, path, "B")
    wait_until(lambda: len(queue(zk, path)) == 2, "B queued behind A")
    return a, b, a_start


def watch_gone(pid: int) -> list:
    """A thread noting when process ``pid`` has ended: ``[t]`` once it has."""
    gone: list = []
    threading.Thread(target=lambda: gone.append(_until_gone(pid)), daemon=True).start()
    return gone


def assert_one_at_a_time(cli: Cli) -> dict:
    """A's command's last stamp precedes B's first, and A's process had ended when B's command started."""
    a_last = max(e["t"] for e in cli.events("A"))
    b_first = min(e["t"] for e in cli.events("B"))
    b_start = cli.events("B", "start")[0]
    assert a_last < b_first, f"A stamped {a_last - b_first:+.3f} s after B's command started"
    assert b_start["alive"] == [], "B's command started while A's was still running"
    return {"A last": a_last, "B first": b_first}


def test_break_with_defaults_asks_a_cli_holder_which_stops_its_command_and_releases_first(cli, zk):
    """The issue's case: ``zkrecipes break P --token <A's>`` with A's command running and B queued. A is
    asked first; its command gets SIGTERM, A releases and exits 79; B's command starts after A's last stamp;
    nothing is deleted by the break."""
    assert KILL_AFTER < BREAK_GRACE  # the defaults leave a holder that listens time to stop and release
    a, b, a_start = a_then_b(cli, zk, "/brk/defaults")
    asked = time.monotonic()
    r = cli.run("break", "/brk/defaults", "--token", str(a_start["token"]), "--hosts", cli.hosts)
    took = time.monotonic() - asked
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{a_start['node']}: released by its holder within the {BREAK_GRACE:g} s grace")
    assert a.wait() == EXIT_REVOKED, a.stderr
    assert b.wait() == 0, b.stderr
    assert cli.events("A", "sigterm") and cli.events("A", "end")  # stopped by SIGTERM, not killed
    assert "revoke requested; the command was stopped" in a.stderr, a.stderr
    no_traceback(a.stderr)
    seen = assert_one_at_a_time(cli)
    term = cli.events("A", "sigterm")[0]["t"] - asked
    print(f"\nbreak with defaults: returned after {took:.3f} s; A's SIGTERM at {term:+.3f} s; "
          f"B's first stamp {seen['B first'] - seen['A last']:.3f} s after A's last")


def test_break_of_a_stubborn_cli_holder_kills_its_command_after_kill_after(cli, zk):
    """A command that ignores SIGTERM is killed ``--kill-after`` seconds later, still within the break's
    grace: A releases, exits 79, and B's command starts after A's last stamp."""
    a, b, a_start = a_then_b(cli, zk, "/brk/stubborn", "--kill-after", "1", stubborn=True)
    gone = watch_gone(a_start["pid"])
    asked = time.monotonic()
    r = cli.run("break", "/brk/stubborn", "--token", str(a_start["token"]), "--grace", "20", "--hosts", cli.hosts)
    assert r.returncode == 0 and "released by its holder" in r.stdout, (r.stdout, r.stderr)
    assert a.wait() == EXIT_REVOKED, a.stderr
    assert "SIGKILL: it did not stop within --kill-after 1 s" in a.stderr, a.stderr
    assert b.wait() == 0, b.stderr
    term = cli.events("A", "sigterm")
    assert term and not cli.events("A", "end")
    assert [e for e in cli.events("A", "tick") if e["t"] > term[0]["t"]], "A's command stopped at SIGTERM"
    wait_until(lambda: gone, "A's command ended")
    assert gone[0] >= asked + 1.0  # SIGKILL no earlier than --kill-after after the SIGTERM (sent after `asked`)
    assert_one_at_a_time(cli)


def test_break_with_no_grace_kills_the_cli_holders_command_at_once_and_exits_75(cli, zk):
    """``--grace 0`` deletes at once: A hears of the deletion on its node's watch, kills its command
    (SIGKILL, no waiting for SIGTERM: the lock is someone else's already) and exits 75 naming the break.
    B is granted by the same deletion: the window between the two notifications is not closed (documented)."""
    a, b, a_start = a_then_b(cli, zk, "/brk/now", stubborn=True)
    gone = watch_gone(a_start["pid"])
    r = cli.run("break", "/brk/now", "--token", str(a_start["token"]), "--grace", "0", "--hosts", cli.hosts)
    done = time.monotonic()
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{a_start['node']}: deleted (token {a_start['token']})\n"
    assert a.wait() == EXIT_TEMPFAIL, a.stderr
    assert "the lock on /brk/now was broken: its node was deleted" in a.stderr, a.stderr
    no_traceback(a.stderr)
    assert b.wait() == 0, b.stderr
    wait_until(lambda: gone, "A's command ended")
    a_last = max(e["t"] for e in cli.events("A"))
    b_first = min(e["t"] for e in cli.events("B"))
    print(f"\ngrace 0: A's command gone {gone[0] - done:+.3f} s after the break returned; "
          f"A's last stamp {a_last - b_first:+.3f} s from B's first")
    assert gone[0] - done < 1.0  # at once: the notification's travel and a kill, not a session timeout


def test_a_node_deleted_by_hand_stops_the_command_at_once(cli, zk):
    """Not only ``zkrecipes break``: a delete by any client (zkCli's ``delete``) is a break."""
    a = start(cli, "/brk/byhand", "A", stubborn=True)
    a_start = cli.wait_event("A", "start")
    cli.wait_event("A", "tick")
    gone = watch_gone(a_start["pid"])
    zk.delete(a_start["node"])
    deleted = time.monotonic()
    assert a.wait() == EXIT_TEMPFAIL, a.stderr
    assert "was broken: its node was deleted" in a.stderr, a.stderr
    wait_until(lambda: gone, "A's command ended")
    assert gone[0] - deleted < 1.0


def test_a_broken_elect_leader_stops_its_command_before_the_next_leaders_starts(cli, zk):
    """``zkrecipes elect``: the leader follows its node too. ``break`` with defaults (the leader is not asked:
    an election has no revoke request) deletes its node after the grace; the leader's command is killed at
    once, it exits 75, and the next leader's command starts after the first one's last stamp."""
    script = [sys.executable, str(cli.workdir / "stamp.py"), str(cli.log)]
    a = cli.start("elect", "/brk/elect", "--hosts", cli.hosts, "--", *script, "A", "1", tag="A")
    a_start = cli.wait_event("A", "start")
    cli.wait_event("A", "tick")
    b = cli.start("elect", "/brk/elect", "--hosts", cli.hosts, "--", *script, "B", "0", tag="B")
    wait_until(lambda: len(queue(zk, "/brk/elect")) == 2, "B queued behind A")
    gone = watch_gone(a_start["pid"])
    r = cli.run("break", "/brk/elect", "--token", str(a_start["token"]), "--grace", "0.5", "--hosts", cli.hosts)
    done = time.monotonic()
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{a_start['node']}: deleted (token {a_start['token']})"), r.stdout
    assert a.wait() == EXIT_TEMPFAIL, a.stderr
    assert "leadership of /brk/elect was broken: its node was deleted" in a.stderr, a.stderr
    no_traceback(a.stderr)
    assert b.wait() == 0, b.stderr
    wait_until(lambda: gone, "A's command ended")
    assert gone[0] - done < 1.0  # at once: the notification's travel and a kill, not a session timeout
    assert_one_at_a_time(cli)


@pytest.mark.parametrize("stubborn", [False, True])
def test_revoke_stops_a_cli_holders_command_releases_and_exits_79(cli, zk, stubborn):
    """``zkrecipes revoke P``: A's command gets SIGTERM (a stubborn one SIGKILL ``--kill-after`` later), A
    releases and exits 79, then B's command runs."""
    a, b, a_start = a_then_b(cli, zk, "/rv/cli", "--kill-after", "1", stubborn=stubborn)
    gone = watch_gone(a_start["pid"])
    asked = time.monotonic()
    r = cli.run("revoke", "/rv/cli", "--hosts", cli.hosts)
    assert r.returncode == 0 and r.stdout == f"{a_start['node']}: revoke requested\n", (r.stdout, r.stderr)
    assert a.wait() == EXIT_REVOKED, a.stderr
    assert b.wait() == 0, b.stderr
    term = cli.events("A", "sigterm")
    assert term, "A's command was never sent SIGTERM"
    wait_until(lambda: gone, "A's command ended")
    if stubborn:
        assert not cli.events("A", "end") and "SIGKILL" in a.stderr, a.stderr
        assert gone[0] >= asked + 1.0
    else:
        assert cli.events("A", "end") and "SIGKILL" not in a.stderr, a.stderr
    assert_one_at_a_time(cli)


def test_break_deletes_a_holder_that_does_not_let_go_within_the_grace_and_says_so(cli, zk_factory):
    lock = FairLock(zk_factory(), "/brk/deaf")
    lock.revoke_requested  # noqa: B018 -- listens (so it hears the request), but never lets go
    lock.acquire()
    name, token = lock.node.rsplit("/", 1)[1], lock.token
    asked = time.monotonic()
    r = cli.run("break", "/brk/deaf", "--token", str(token), "--grace", "0.5", "--hosts", cli.hosts)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"/brk/deaf/{name}: deleted (token {token}): its holder did not let go within 0.5 s\n"
    assert time.monotonic() - asked >= 0.5
    assert lock.revoke_requested.is_set() and lock.lost.wait(DEADLINE)  # asked first, then broken


def test_kill_after_is_validated_like_the_other_durations(cli):
    for value, says in (("-1", "must be >= 0"), ("inf", "up to 86400"), ("nan", "not a number"), ("x", "not a number")):
        r = cli.run("lock", "/g", "--hosts", "127.0.0.1:1", "--kill-after", value, "--", "true")
        assert r.returncode == 2 and "--kill-after" in r.stderr and says in r.stderr, r.stderr
    r = cli.run("break", "/g", "--token", "5", "--grace", "-1", "--hosts", "127.0.0.1:1")
    assert r.returncode == 2 and "--grace" in r.stderr and "must be >= 0" in r.stderr, r.stderr


# -- break_lock(grace=...) on both fronts ---------------------------------------------------------------
def test_break_lock_with_grace_lets_a_listening_holder_release_and_says_so(zk, zk_factory):
    lock = FairLock(zk_factory(), "/brk/api")
    held, asked = threading.Event(), []

    def holder() -> None:  # holds until asked, then stops at a safe point and releases
        with lock:
            held.set()
            assert lock.revoke_requested.wait(DEADLINE)
            asked.append(lock.node)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(DEADLINE)
    broken = break_lock(zk, "/brk/api", lock.token, grace=DEADLINE)
    t.join(DEADLINE)
    assert asked and broken == asked[0].rsplit("/", 1)[1] and broken.released is True
    assert not lock.lost.is_set()  # it released by itself: nothing was deleted from under it
    with pytest.raises(NoNodeError):
        zk.get(asked[0])


def test_break_lock_with_grace_deletes_a_holder_that_does_not_let_go(zk, zk_factory):
    lock = FairLock(zk_factory(), "/brk/api2")
    lock.revoke_requested  # noqa: B018 -- listens, but does not let go
    lock.acquire()
    start = time.monotonic()
    broken = break_lock(zk, "/brk/api2", lock.token, grace=1.0)
    assert time.monotonic() - start >= 1.0
    assert broken == lock.node.rsplit("/", 1)[1] and broken.released is False
    assert lock.revoke_requested.is_set()  # asked first
    assert lock.lost.wait(DEADLINE)  # then broken
    with pytest.raises(NoNodeError):
        zk.get(lock.node)


def test_aio_break_lock_with_grace(zk, zk_factory):
    client = zk_factory()

    async def main() -> None:
        lock = aio.FairLock(client, "/brk/aio")
        event = lock.revoke_requested
        held: asyncio.Future = asyncio.get_running_loop().create_future()

        async def holder() -> None:  # holds until asked, then releases
            async with lock:
                held.set_result((lock.token, lock.node.rsplit("/", 1)[1]))
                await event.wait()

        task = asyncio.ensure_future(holder())
        token, name = await asyncio.wait_for(held, DEADLINE)
        broken = await aio.break_lock(zk, "/brk/aio", token, grace=DEADLINE)
        await asyncio.wait_for(task, DEADLINE)
        assert broken == name and broken.released is True and not lock.lost.is_set()

        other = aio.FairLock(client, "/brk/aio2")
        await other.acquire()
        start = time.monotonic()
        broken = await aio.break_lock(zk, "/brk/aio2", other.token, grace=0.5)
        assert broken.released is False and zk.exists(other.node) is None and time.monotonic() - start >= 0.5

    asyncio.run(main())


def test_break_lock_grace_is_validated_before_any_request(zk):
    for bad, error in ((-1, ValueError), (float("nan"), ValueError), (float("inf"), ValueError), ("1", TypeError),
                       (True, TypeError)):
        with pytest.raises(error, match="grace"):
            break_lock(zk, "/brk/none", 5, grace=bad)


# -- status --watch: a frame only when it changes ---------------------------------------------------------
def test_status_watch_prints_a_frame_only_when_it_changes(cli, zk_ensemble, zk_namespace, zk_factory):
    """A missing path's exists watch fires when the path is made, with still nobody in it: no second
    'no holders' frame; the next frame is the holder's row. The watcher talks through a proxy that counts
    the replies to its requests, which tells the test when the watcher has read the path again (two
    listings), before it adds the holder: the frame it did not print would have been printed by then."""
    link = LateLink(zk_ensemble.hosts)  # never armed: it only counts
    try:
        w = cli.start("status", "/watched", "--watch", "--json", "--hosts", link.hosts + zk_namespace, tag="watch")
        wait_until(lambda: w.stdout.count("\n") >= 1, "the first frame")
        before = link.replies
        writer = zk_factory()
        writer.create("/watched")
        wait_until(lambda: link.replies >= before + 2, "the watcher's two listings after the path was made")
        writer.create("/watched/host-W-", b"{}", ephemeral=True, sequence=True)
        wait_until(lambda: '"holding"' in w.stdout, "the holder's frame")
        writer.delete("/watched", recursive=True)
        wait_until(lambda: w.stdout.count("\n") >= 3, "the frame after the delete")
        w.popen.send_signal(2)
        assert w.wait() == 0, w.stderr
    finally:
        link.close()
    frames = [json.loads(line) for line in w.stdout.splitlines()]
    assert [[r["state"] for r in f] for f in frames] == [[], ["holding"], []], w.stdout
