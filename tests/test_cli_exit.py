"""When ``zkrecipes lock`` / ``elect`` exits (docs/cli.rst, "When zkrecipes exits"): within
:data:`zkrecipes.cli.EXIT_BOUND` of the later of its command's end and its node gone or its session
known lost, and never with its command still running.

Every moment is one the test observes on the machine's one monotonic clock: the command's end (its
/proc entry), the fault, the next holder's start, zkrecipes' exit (a thread blocked in waitpid). After a
partition the session is known lost (the doubt clock: ``sent + T - min(0.2, T/20)``, ``sent`` before the
fault) before ``fault + T`` and before the server can expire it, so before the next holder starts: the
earlier of those two bounds that moment from above.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest
from test_cli import DEADLINE, OVERLAP_SCRIPT, Cli, Proc, _until_gone, dump_stacks, queue, wait_until

from zkrecipes.cli import EXIT_BOUND
from zkrecipes.testing import Partition

T = 3.0  # --session-timeout of the partitioned run (the test ensemble's tickTime of 200 ms grants it as asked)


@pytest.fixture
def cli(zk_ensemble, zk_namespace, tmp_path):
    c = Cli(zk_ensemble.hosts + zk_namespace, tmp_path)
    yield c
    c.close()


def running(pid: int) -> bool:
    """Process ``pid`` exists and has not ended (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class ExitClock:
    """When a background zkrecipes exits, seen by a thread blocked in its waitpid from the start; and whether
    its command (``child``, once known) was still running at that moment."""

    def __init__(self, proc: Proc) -> None:
        self.proc = proc
        self.child: int | None = None
        self.at: float | None = None
        self.child_running = False
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        self.proc.popen.wait()
        self.at = time.monotonic()
        self.child_running = self.child is not None and running(self.child)

    def wait(self, timeout: float = DEADLINE) -> float:
        """The exit's monotonic time; fails the test if it does not exit in time."""
        deadline = time.monotonic() + timeout
        while self.at is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.at is None:
            dump_stacks(self.proc.popen)
            pytest.fail(f"zkrecipes (pid {self.proc.pid}) did not exit within {timeout} s; stderr: {self.proc.stderr}")
        return self.at


@pytest.mark.parametrize("command,fault", [("lock", "silent"), ("lock", "silent-stubborn"), ("lock", "closed"),
                                           ("elect", "silent")])
def test_exit_follows_the_session_known_lost_after_a_partition(cli, zk_ensemble, zk_namespace, zk, command, fault):
    """A's zkrecipes reaches ZooKeeper through a link that freezes (silent: open, nothing delivered) or is
    cut; B's waits directly. A's command is stopped; A exits once it has ended and the session is known
    lost (no connection comes back to delete the node): within EXIT_BOUND of the later of the two."""
    script = cli.workdir / "overlap.py"
    script.write_text(OVERLAP_SCRIPT)
    stubborn = "1" if fault.endswith("stubborn") else "0"  # ignores SIGTERM: killed before the lost deadline
    with Partition(zk_ensemble.hosts) as link:
        a = cli.start(command, "/exit", "--hosts", link.hosts + zk_namespace, "--session-timeout", f"{T:g}", "--",
                      sys.executable, str(script), str(cli.log), "A", stubborn, tag="A")
        a_exit = ExitClock(a)
        child = a_exit.child = cli.wait_event("A", "start")["pid"]
        gone: list = []
        threading.Thread(target=lambda: gone.append(_until_gone(child)), daemon=True).start()
        b = cli.start(command, "/exit", "--hosts", cli.hosts, "--session-timeout", f"{T:g}", "--",
                      sys.executable, str(script), str(cli.log), "B", "0", tag="B")
        wait_until(lambda: len(queue(zk, "/exit")) == 2, "B queued behind A")
        fault_at = link.freeze() if fault.startswith("silent") else (link.cut(), time.monotonic())[1]
        b_start = cli.wait_event("B", "start")["t"]
        exit_at = a_exit.wait()
        assert a.popen.returncode == 75, a.stderr
        assert b.wait() == 0, b.stderr
        wait_until(lambda: gone, "A's command seen ended")
    assert not a_exit.child_running, "zkrecipes exited while its command still ran"
    known_lost_by = min(fault_at + T, b_start)  # the session was known lost before both
    since = max(gone[0], known_lost_by)
    timeline = {"A's command ended": gone[0] - fault_at, "B started": b_start - fault_at,
                "A exited": exit_at - fault_at}
    print(f"\n{command} {fault}: " + ", ".join(f"{k} {v:+.2f}" for k, v in timeline.items()))
    assert exit_at - since <= EXIT_BOUND, (
        f"zkrecipes exited {exit_at - since:.2f} s after its command ended and its session was known lost "
        f"(documented: at most {EXIT_BOUND:g} s); timeline from the fault: {timeline}")


@pytest.mark.parametrize("command", ["lock", "elect"])
def test_exit_follows_the_command_and_the_node_is_gone_by_then(cli, zk, command):
    """The plain paths: a command that ends; a run stopped while waiting (SIGINT). Each exits within
    EXIT_BOUND, its node already deleted."""
    path = f"/plain-{command}"
    p = cli.start(command, path, "--hosts", cli.hosts, *cli.holder("ends", status=3), tag="ends")
    clock = ExitClock(p)
    clock.child = cli.wait_event("ends", "start")["pid"]
    cli.release("ends")
    ended = cli.wait_event("ends", "end")["t"]
    exit_at = clock.wait()
    assert p.popen.returncode == 3, p.stderr
    assert queue(zk, path) == [], "the node outlived zkrecipes"
    assert not clock.child_running
    assert exit_at - ended <= EXIT_BOUND, f"exited {exit_at - ended:.2f} s after its command ended"

    holder = cli.start(command, path, "--hosts", cli.hosts, *cli.holder("holder"), tag="holder")
    cli.wait_event("holder", "start")
    waiter = cli.start(command, path, "--hosts", cli.hosts, *cli.holder("waiter"), tag="waiter")
    clock = ExitClock(waiter)
    wait_until(lambda: len(queue(zk, path)) == 2, "the second run queued")
    signalled = time.monotonic()
    os.kill(waiter.pid, signal.SIGINT)
    exit_at = clock.wait()
    assert waiter.popen.returncode == 130, waiter.stderr
    assert len(queue(zk, path)) == 1, "the waiter's node outlived it"
    assert exit_at - signalled <= EXIT_BOUND, f"exited {exit_at - signalled:.2f} s after SIGINT"
    cli.release("holder")
    assert holder.wait() == 0, holder.stderr

def test_a_silent_server_ends_the_connect_timeout_not_a_session_timeout_later(cli, zk_ensemble):
    """``--connect-timeout 1`` against a server that accepts and never answers: exit 69 about a second
    after the start, not after the handshake's own time-out (the session timeout, 20 s here)."""
    with Partition(zk_ensemble.hosts) as link:
        link.freeze()
        started = time.monotonic()
        r = cli.run("lock", "/x", "--hosts", link.hosts, "--connect-timeout", "1", "--session-timeout", "20",
                    "--", "true")
        took = time.monotonic() - started
    assert r.returncode == 69, r.stderr
    assert r.stderr == f"zkrecipes: cannot reach ZooKeeper at {link.hosts} within 1 s\n"
    assert took < 1 + EXIT_BOUND + 3.0, f"took {took:.1f} s"  # 3 s for starting Python on a busy machine
