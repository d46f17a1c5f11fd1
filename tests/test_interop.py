"""Sharing a path with kazoo's own recipes and with Apache Curator (Java), against the real libraries.

kazoo runs in other processes (tests/interop_worker.py); Curator 5.4 from Debian's libcurator-recipes-java
runs in a JVM (tests/interop/CuratorWorker.java, compiled here into a cache dir). Every hold is recorded on
CLOCK_MONOTONIC in its own process and compared: no two conflicting holds overlap, grants follow queue
order, readers of both libraries share, the default protocol refuses a path that holds their nodes, and
revocation requests pass both ways between zkrecipes and Curator (tests/interop/CuratorRevoke.java).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time

import interop
import pytest
from lockhelpers import Acquirer, StateLog, children, wait_until
from toolskip import missing_tool

from zkrecipes import FairLock, LeaderElection, LockError, ReadWriteLock, formats, request_revoke

HOLDS = 52  # per mix: at least 50


@pytest.fixture(scope="module")
def curator_cp():
    classpath, reason = interop.curator_classpath()
    if classpath is None:
        missing_tool(f"Curator interop needs a JDK and Curator: {reason}")
    return classpath


@pytest.fixture
def hosts(zk_ensemble, zk_namespace, zk):
    # kazoo's recipes make their parent persistent only if it is missing (ensure_path, then create): a
    # container parent of ours, reaped in between, fails kazoo's create. Real fleets share persistent paths.
    zk.ensure_path("/shared")
    return zk_ensemble.hosts + zk_namespace


def test_java_nanotime_and_python_monotonic_are_one_clock(curator_cp, hosts):
    """The holds of both languages are compared on one time line: CLOCK_MONOTONIC."""
    assert time.get_clock_info("monotonic").implementation == "clock_gettime(CLOCK_MONOTONIC)"
    w = interop.curator_worker(curator_cp, hosts, "/clock", ["mutex"], 0, 0)
    try:
        w.wait_line("ready", 90)
        for _ in range(3):
            before = time.monotonic()
            n = len(w.lines)
            w.send("now")
            wait_until(lambda n=n: len(w.lines) > n, 10, "the JVM's clock reading")
            after = time.monotonic()
            java = int(w.lines[n].split()[1]) / 1e9
            assert before <= java <= after, (before, java, after)
        w.send("go")
        w.wait_line("done", 30)
    finally:
        w.stop()


MIXES = {m[0]: m for m in interop.MIXES}
MIXES["zkrecipes protocol=kazoo + default (the switch)"] = (
    "switch", ["zk-fair:kazoo", "zk-write:kazoo", "zk-fair:zkrecipes", "zk-read:zkrecipes"], [], "kazoo")


@pytest.mark.parametrize("mix", list(MIXES))
def test_mixed_fleet_never_overlaps_and_keeps_queue_order(request, hosts, mix):
    _, python, curator, proto = MIXES[mix]
    classpath = request.getfixturevalue("curator_cp") if curator else None
    per = -(-HOLDS // (len(python) + len(curator)))
    res = interop.run_mix(hosts, "/mix", [r.format(p=f":{proto}") for r in python], curator, per, 5, classpath)
    assert res.errors == []
    assert len(res.holds) >= 50
    assert {h.who.split(":")[0] for h in res.holds} == ({"python", "curator"} if curator else {"python"})
    assert interop.switches(res.holds) >= 3  # the libraries really alternated
    assert interop.overlapping(res.holds) == 0
    bad = interop.order_violations(res.holds)
    assert bad == [], "\n".join(f"{x}\n  vs {w}" for x, w in bad[:5])


def _foreign(request, hosts, lib, recipe, holds, hold_ms):
    """A kazoo (python worker) or Curator (JVM) contender of ``recipe`` that starts at once."""
    if lib == "kazoo":
        w = interop.python_worker(hosts, "/shared", f"kazoo-{recipe}", holds, hold_ms)
    else:
        w = interop.curator_worker(request.getfixturevalue("curator_cp"), hosts, "/shared",
                                   [{"lock": "mutex"}.get(recipe, recipe)], holds, hold_ms)
    w.wait_line("ready", 90)
    w.send("go")
    return w


@pytest.mark.parametrize("lib", ["kazoo", "curator"])
def test_readers_of_both_libraries_share(request, zk, hosts, lib):
    rw = ReadWriteLock(zk, "/shared", protocol=lib)
    # ours held: the foreign reader gets its read lock meanwhile
    with rw.read():
        t0 = time.monotonic()
        w = _foreign(request, hosts, lib, "read", 1, 10)
        try:
            w.wait_line("done", 60)
            t1 = time.monotonic()
        finally:
            w.stop()
    hold = [ln for ln in w.lines if ln.startswith("hold")]
    assert hold, w.lines
    scale = 1e9 if lib == "curator" else 1.0
    a, b = (float(x) / scale for x in hold[0].split()[3:5])
    assert t0 < a < b < t1
    # theirs held: ours gets the read lock meanwhile
    w = _foreign(request, hosts, lib, "read", 1, 4000)
    try:
        wait_until(lambda: children(zk, "/shared"), 60, "the foreign reader's node")
        assert rw.read().acquire(timeout=3.0)
        rw.read().release()
        w.wait_line("done", 60)
    finally:
        w.stop()


@pytest.mark.parametrize("lib", ["kazoo", "curator"])
def test_grants_follow_queue_order_among_mixed_contenders(request, zk, zk_factory, hosts, lib):
    """A (foreign) queues, then B (zkrecipes, another process), then C (zkrecipes here): A, B, C hold in turn."""
    first = FairLock(zk, "/shared", protocol=lib)
    assert first.acquire()
    a = _foreign(request, hosts, lib, "lock", 1, 50)
    b = interop.python_worker(hosts, "/shared", f"zk-fair:{lib}", 1, 50)
    try:
        wait_until(lambda: len(children(zk, "/shared")) == 2, 60, "A's node")
        b.wait_line("ready", 60)
        b.send("go")
        wait_until(lambda: len(children(zk, "/shared")) == 3, 60, "B's node")
        c_done = threading.Event()
        c = Acquirer(FairLock(zk_factory(), "/shared", protocol=lib), hold_until=c_done, timeout=60)
        wait_until(lambda: len(children(zk, "/shared")) == 4, 60, "C's node")
        first.release()
        assert c.wait(60)
        c_t0 = time.monotonic()
        c_done.set()
        assert c.released.wait(30)
        a.wait_line("done", 60)
        b.wait_line("done", 60)
    finally:
        a.stop()
        b.stop()
    scale = 1e9 if lib == "curator" else 1.0  # a: Curator reports nanoseconds
    a1 = float(a.wait_line("hold", 1).split()[4]) / scale
    b0, b1 = (float(x) for x in b.wait_line("hold", 1).split()[3:5])
    assert a1 <= b0 and b1 <= c_t0


@pytest.mark.parametrize("lib", ["kazoo", "curator"])
@pytest.mark.parametrize("recipe", ["fair", "read", "write", "election"])
def test_default_protocol_refuses_a_path_with_foreign_nodes(request, zk, hosts, lib, recipe):
    w = _foreign(request, hosts, lib, "lock", 1, 5000)
    try:
        wait_until(lambda: children(zk, "/shared"), 60, "the foreign holder's node")
        obj = {"fair": lambda: FairLock(zk, "/shared"), "read": lambda: ReadWriteLock(zk, "/shared").read(),
               "write": lambda: ReadWriteLock(zk, "/shared").write(),
               "election": lambda: LeaderElection(zk, "/shared")}[recipe]()
        go = obj.campaign if recipe == "election" else obj.acquire
        with pytest.raises(LockError) as err:
            go(timeout=3)
        msg = str(err.value)
        assert f"protocol='{lib}'" in msg and ("kazoo Lock" if lib == "kazoo" else "Curator InterProcessMutex") in msg
        assert "refusing to queue with protocol='zkrecipes'" in msg
        assert [n for n in children(zk, "/shared") if formats.own(n)] == []  # our node was deleted
        assert obj.state == "idle"
    finally:
        w.stop()


def test_default_protocol_refuses_a_foreign_node_that_joins_while_it_waits(zk, zk_factory, hosts):
    holder = FairLock(zk, "/shared", identifier="holder")
    assert holder.acquire()
    middle = FairLock(zk_factory(), "/shared", identifier="middle")
    m = Acquirer(middle, timeout=60)
    wait_until(lambda: len(children(zk, "/shared")) == 2, 15, "middle's node")
    last = FairLock(zk_factory(), "/shared", identifier="last")
    waiter = Acquirer(last, timeout=60)
    wait_until(lambda: len(children(zk, "/shared")) == 3, 15, "last's node")
    k = interop.python_worker(hosts, "/shared", "kazoo-lock", 1, 3000)  # kazoo ignores our nodes: it holds now
    try:
        k.wait_line("ready", 60)
        k.send("go")
        wait_until(lambda: len(children(zk, "/shared")) == 4, 30, "the kazoo node")
        middle.cancel()  # last's predecessor goes: it lists the queue again and finds the kazoo node
        assert m.wait() is False
        with pytest.raises(LockError, match="kazoo Lock"):
            waiter.wait()
        assert not [n for n in children(zk, "/shared") if formats.own(n) and n != holder.node.rsplit("/", 1)[1]]
    finally:
        holder.release()
        k.wait_line("done", 30)
        k.stop()


def test_contenders_and_status_read_every_format(request, zk, hosts, zk_ensemble, zk_namespace):
    ours = FairLock(zk, "/shared", identifier="ours", protocol="kazoo")
    assert ours.acquire()
    w = _foreign(request, hosts, "kazoo", "lock", 1, 20000)
    try:
        wait_until(lambda: len(children(zk, "/shared")) == 2, 60, "kazoo's node")
        got = [(c.identifier, c.kind) for c in ours.contenders()]
        assert got == [("ours", "W"), ("kazoo-worker", "W")]
        cli = [sys.executable, "-m", "zkrecipes.cli", "status", "/shared", "--json", "--hosts", hosts]
        rows = json.loads(subprocess.run(cli, capture_output=True, text=True, timeout=60, check=True).stdout)
        assert [(r["identifier"], r["protocol"], r["state"]) for r in rows] == [
            ("ours", "kazoo (zkrecipes)", "holding"), ("kazoo-worker", "kazoo", "waiting")]
        table = subprocess.run(cli[:-3] + cli[-2:], capture_output=True, text=True, timeout=60, check=True).stdout
        assert "PROTOCOL" in table.splitlines()[0] and "kazoo (zkrecipes)" in table
        lock = [sys.executable, "-m", "zkrecipes.cli", "lock", "/shared", "--timeout", "5", "--hosts", hosts, "--",
                "true"]  # the default protocol on a path with kazoo's own node: refused, exit 2
        out = subprocess.run(lock, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "protocol='kazoo'" in out.stderr, out.stderr
    finally:
        ours.release()
        w.stop()


@pytest.mark.parametrize("lib,marker", [("kazoo", "__lock__"), ("curator", "-latch-")])
def test_cli_elect_and_lock_take_a_protocol(hosts, lib, marker):
    cmd = [sys.executable, "-m", "zkrecipes.cli", "elect", "/cli", "--protocol", lib, "--hosts", hosts,
           "--", sys.executable, "-c", "import os; print(os.environ['ZKRECIPES_NODE'])"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert marker in out.stdout
    cmd[3] = "lock"
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert ("__lock__" if lib == "kazoo" else "-lock-") in out.stdout  # Curator: InterProcessMutex
    out = subprocess.run(cmd[:5] + ["--read"] + cmd[5:], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert ("__rlock__" if lib == "kazoo" else "-__READ__") in out.stdout
    out = subprocess.run(cmd[:5] + ["--exclusive"] + cmd[5:], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and f"--exclusive has no --protocol {lib}" in out.stderr


# -- everything else is unchanged in the foreign formats ------------------------------------------------
RECIPES = {
    "fair": lambda c, p, proto, **kw: FairLock(c, p, protocol=proto, **kw),
    "read": lambda c, p, proto, **kw: ReadWriteLock(c, p, protocol=proto, **kw).read(),
    "write": lambda c, p, proto, **kw: ReadWriteLock(c, p, protocol=proto, **kw).write(),
}


@pytest.mark.parametrize("proto", ["kazoo", "curator"])
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_lost_create_reply_finds_our_node_by_the_guid_in_its_name(zk, monkeypatch, proto, recipe):
    from test_locks import lose_next_create_reply

    lock = RECIPES[recipe](zk, "/lostreply", proto)
    created = lose_next_create_reply(zk, monkeypatch)
    assert lock.acquire(timeout=10)
    assert created and zk.unchroot(created[0]) == lock.node
    assert children(zk, "/lostreply") == [lock.node.rsplit("/", 1)[1]]  # adopted, not created twice
    lock.release()
    assert children(zk, "/lostreply") == []


@pytest.mark.parametrize("proto", ["kazoo", "curator"])
def test_session_loss_timeout_cancel_and_tokens_in_foreign_formats(zk, zk_factory, proto):
    from lockhelpers import StateLog

    from zkrecipes.testing import expire_session

    client = zk_factory()
    lock = FairLock(client, "/same", protocol=proto)
    states = StateLog(lock)
    assert lock.acquire()
    first = lock.token
    other = FairLock(zk, "/same", protocol=proto)
    assert other.acquire(timeout=0.3) is False  # a timeout leaves no node behind
    waiter = Acquirer(other, timeout=30)
    wait_until(lambda: len(children(zk, "/same")) == 2, 10, "the waiter's node")
    other.cancel()
    assert waiter.wait() is False
    assert len(children(zk, "/same")) == 1
    expire_session(client)
    states.wait_for("lost")
    assert lock.lost.is_set() and not lock.is_held
    lock.release()
    assert other.acquire(timeout=10) and other.token > first
    other.release()
    assert children(zk, "/same") == []


@pytest.mark.parametrize("proto,tag", [("kazoo", "__lock__"), ("curator", "-latch-")])
def test_election_in_foreign_format(zk, zk_factory, proto, tag):
    a = LeaderElection(zk, "/elect", identifier="a", protocol=proto)
    b = LeaderElection(zk_factory(), "/elect", identifier="b", protocol=proto)
    assert a.campaign(timeout=10) and tag in a.node
    assert b.campaign(timeout=0.3) is False
    cand = threading.Thread(target=b.campaign, kwargs={"timeout": 30}, daemon=True)
    cand.start()
    wait_until(lambda: len(children(zk, "/elect")) == 2, 10, "b's node")
    assert [c.identifier for c in b.contenders()] == ["a", "b"] and b.leader().identifier == "a"
    a.resign()
    cand.join(30)
    assert b.is_leader and b.token > 0
    b.resign()


def test_kazoo_format_makes_persistent_parents_as_kazoo_does(zk, hosts):
    """kazoo ensures a lock's parent once per lock object and never makes it again: a container parent,
    reaped while the queue is empty, would fail a kazoo process's next acquire with NoNodeError."""
    with FairLock(zk, "/k/parent", protocol="kazoo"):
        pass
    with FairLock(zk, "/z/parent"):  # the default makes containers: emptied after ours, so once it is
        pass  # reaped, the reaper has looked at ours too
    wait_until(lambda: zk.exists("/z") is None, 15, "the empty container parents were reclaimed")
    assert zk.exists("/k/parent") is not None
    w = interop.python_worker(hosts, "/k/parent", "kazoo-lock", 1, 10)
    try:
        w.wait_line("ready", 60)
        w.send("go")
        w.wait_line("done", 60)
        assert [ln for ln in w.lines if ln.startswith("hold")], w.lines
    finally:
        w.stop()


# -- revocation with Curator's own (docs/revocation.rst) ------------------------------------------------
REVOKE_SOURCE = interop.HERE / "interop" / "CuratorRevoke.java"


@pytest.fixture(scope="module")
def revoke_cp():
    from zkrecipes.testing import _java

    classpath, reason = _java.curator_classpath(REVOKE_SOURCE)
    if classpath is None:
        missing_tool(f"Curator interop needs a JDK and Curator: {reason}")
    return classpath


def _curator_revoke(classpath: str, hosts: str, *args: str) -> interop.Worker:
    java = shutil.which("java") or "java"
    return interop.Worker([java, *interop.JAVA_OPTS, "-cp", classpath, "CuratorRevoke", hosts, *args])


def test_request_revoke_reaches_a_revocable_curator_holder(revoke_cp, zk, hosts):
    """A Curator InterProcessMutex made revocable (``makeRevocable``) holds; our ``request_revoke`` marks
    its node and Curator calls its RevocationListener. Nothing is taken: it holds until it releases."""
    w = _curator_revoke(revoke_cp, hosts, "hold", "/shared")
    try:
        node = w.wait_line("held", 90).split()[1]
        assert request_revoke(zk, "/shared") == [node]
        w.wait_line("revoke-requested", 30)  # Curator's listener was called
        assert zk.get(f"/shared/{node}")[0] == b"__REVOKE__"  # Curator's own mark
        assert children(zk, "/shared") == [node]  # still held by Curator
        assert FairLock(zk, "/shared", protocol="curator").acquire(blocking=False) is False
        w.send("release")
        w.wait_line("released", 30)
        assert w.lines.count("revoke-requested") == 1, w.lines
    finally:
        w.stop()
    assert children(zk, "/shared") == []


@pytest.mark.parametrize("proto", ["zkrecipes", "curator"])
def test_curators_revoker_reaches_a_zkrecipes_holder(revoke_cp, zk, hosts, proto):
    """Curator's ``Revoker.attemptRevoke`` on a zkrecipes holder's node (its own format or Curator's): the
    holder, listening, sees ``revoke_requested`` set and its listeners told; it keeps its hold."""
    lock = FairLock(zk, "/shared", protocol=proto)
    log = StateLog(lock)  # listens: its holds follow their node
    assert lock.acquire(timeout=15)
    try:
        assert not lock.revoke_requested.is_set()
        w = _curator_revoke(revoke_cp, hosts, "revoke", lock.node)
        try:
            w.wait_line("revoked", 90)
        finally:
            w.stop()
        log.wait_for("revoke-requested")
        assert lock.revoke_requested.is_set()
        assert zk.get(lock.node)[0] == b"__REVOKE__"
        lock.check()  # nothing taken
        assert lock.is_held
    finally:
        lock.release()
    assert children(zk, "/shared") == []
