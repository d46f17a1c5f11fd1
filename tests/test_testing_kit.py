"""The public test kit (zkrecipes.testing) against real ZooKeeper servers.

These tests check what users of the kit rely on: that the faults it injects really happen (a killed
leader, an expired session, a cut link) and that an Ensemble cleans up after itself.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from zkrecipes._kazoo_ops import FAR_XID
from zkrecipes.testing import Ensemble, Partition, expire_session

# Reconnect quickly while a Partition is cut, so healing is noticed in well under a second
# (kazoo's default backoff doubles up to an hour).
FAST_RECONNECT = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5}


def wait_until(predicate, timeout: float, what: str) -> None:
    """Poll ``predicate`` until it is true; fail the test with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.02)


class StateLog:
    """Records every KazooState a client reports (and when: ``at``), and waits for one with a deadline."""

    def __init__(self, client) -> None:
        self.seen: list[str] = []
        self.at: list[float] = []
        self._cond = threading.Condition()
        client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        with self._cond:
            self.seen.append(state)
            self.at.append(time.monotonic())
            self._cond.notify_all()

    def mark(self) -> int:
        with self._cond:
            return len(self.seen)

    def wait_for(self, state: str, since: int = 0, timeout: float = 15.0) -> int:
        """Return the index of the first ``state`` recorded at or after ``since``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for k in range(since, len(self.seen)):
                    if self.seen[k] == state:
                        return k
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    pytest.fail(f"no {state} within {timeout} s (states since #{since}: {self.seen[since:]})")
                self._cond.wait(remaining)


def session_id(client) -> int:
    cid = client.client_id
    assert cid is not None, "client has no live session"
    return cid[0]


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- Ensemble: killing the leader -------------------------------------------------------------------------


def test_killing_the_leader_keeps_the_ensemble_serving(zk_local_ensemble, zk, zk_factory):
    ens = zk_local_ensemble
    ens.wait_serving(timeout=60)
    zk.create("/before", b"written before the crash")
    old_session = session_id(zk)

    old_leader = ens.leader()
    assert old_leader is not None
    assert ens.mode(old_leader) == "leader"
    old_pid = ens.pids()[old_leader]
    assert old_pid is not None
    try:
        ens.kill(old_leader)
        assert not ens.running(old_leader)
        assert ens.pids()[old_leader] is None
        assert pid_gone(old_pid), "kill() returned but the server process still exists"

        ens.wait_serving(timeout=60)  # the two survivors serve and elect a leader
        new_leader = ens.leader()
        assert new_leader is not None and new_leader != old_leader
        assert ens.mode(new_leader) == "leader"

        fresh = zk_factory()
        assert fresh.get("/before")[0] == b"written before the crash"
        fresh.create("/after", b"written after the crash")

        # The client that may have been on the dead leader reconnects, keeps its session, sees the write.
        wait_until(lambda: zk.connected, 30, "old client reconnected")
        assert session_id(zk) == old_session
        assert zk.retry(zk.get, "/after")[0] == b"written after the crash"
    finally:
        if not ens.running(old_leader):
            ens.start(old_leader)
        ens.wait_serving(timeout=60)
    assert ens.serving(old_leader)
    assert all(ens.serving(k) for k in range(ens.size))
    new_pid = ens.pids()[old_leader]
    assert new_pid is not None and new_pid != old_pid


# -- expire_session -----------------------------------------------------------------------------------------


def test_expire_session_loses_session_and_ephemerals(zk, zk_factory):
    observer = zk_factory()
    states = StateLog(zk)

    zk.create("/eph", b"mine", ephemeral=True)
    observer.sync("/")  # another session's server may lag behind the leader: catch up before reading
    assert observer.exists("/eph") is not None
    old_session = session_id(zk)

    expire_session(zk, timeout=30)

    k = states.wait_for(KazooState.LOST, timeout=5)
    states.wait_for(KazooState.CONNECTED, since=k + 1, timeout=5)
    assert zk.connected
    assert session_id(zk) != old_session
    # ZooKeeper deletes an expired session's ephemerals; another client must not see it.
    observer.sync("/")
    assert observer.exists("/eph") is None
    # The client is usable again on its new session.
    zk.create("/eph", b"again", ephemeral=True)
    observer.sync("/")
    assert observer.get("/eph")[0] == b"again"


def test_expire_session_twin_closes_at_an_xid_the_clients_requests_never_have(zk, caplog):
    """The twin's Close goes out at FAR_XID, not 1: a follower takes a committed write for the local one it
    waits on with the same session and xid, so a Close at xid 1 committed while the client, back on its
    session at another server, waited on its first request there (xid 1, a sync) was answered as that
    request too -- kazoo's connection thread died of "xids do not match" (3 runs in 7 of 30 expiries under a
    stream of syncs; 1 in 49 of test_election's watch expiry test under load)."""
    caplog.set_level(logging.DEBUG, logger="kazoo.client")
    expire_session(zk, timeout=30)
    closes = [
        r.args[0] for r in caplog.records
        if r.msg.startswith("Sending request") and type(r.args[1]).__name__ == "Close"
    ]
    assert closes and set(closes) == {FAR_XID}, closes
    assert zk.exists("/") is not None  # and the client works on its new session


def test_expire_session_tries_again_when_the_twin_loses_the_session_before_its_start_returns(zk, monkeypatch):
    starts: list = []
    start = KazooClient.start

    def first_times_out(self, timeout=15):  # as kazoo's start() when the client took the session back first
        starts.append(self)
        if len(starts) == 1:
            raise KazooTimeoutError("Connection time-out")
        return start(self, timeout)

    old = session_id(zk)
    monkeypatch.setattr(KazooClient, "start", first_times_out)
    expire_session(zk, timeout=30)
    assert len(starts) == 2 and zk.connected and session_id(zk) != old


def test_expire_session_rejects_unusable_clients(zk_factory):
    with pytest.raises(TypeError, match="KazooClient"):
        expire_session("127.0.0.1:2181")
    not_started = zk_factory(start=False)
    with pytest.raises(ValueError, match="connected"):
        expire_session(not_started)


# -- Partition -----------------------------------------------------------------------------------------------


def test_partition_cut_and_quick_heal_keeps_the_session(zk_ensemble, zk_factory):
    observer = zk_factory()
    with Partition(zk_ensemble.hosts) as p:
        assert p.hosts == f"127.0.0.1:{p.port}"
        client = zk_factory(hosts=p.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)
        states = StateLog(client)
        client.create("/eph", b"x", ephemeral=True)
        sid = session_id(client)
        observer.sync("/")  # the observer may be on another server: it must have seen the node appear
        assert observer.exists("/eph") is not None

        p.cut()
        assert p.is_cut
        k = states.wait_for(KazooState.SUSPENDED, timeout=5)
        assert not client.connected
        p.heal()
        assert not p.is_cut
        states.wait_for(KazooState.CONNECTED, since=k + 1, timeout=3.5)  # well within the 4 s session

        assert KazooState.LOST not in states.seen
        assert session_id(client) == sid
        assert observer.exists("/eph") is not None, "ephemeral lost although the session survived"
        assert client.get("/eph")[0] == b"x"
        client.stop()


def test_partition_cut_past_session_timeout_loses_the_session(zk_ensemble, zk_factory):
    observer = zk_factory()
    with Partition(zk_ensemble.hosts) as p:
        client = zk_factory(hosts=p.hosts, timeout=2.0, connection_retry=FAST_RECONNECT)
        states = StateLog(client)
        client.create("/eph", b"x", ephemeral=True)
        sid = session_id(client)
        observer.sync("/")  # the observer may be on another server: it must have seen the node appear
        assert observer.exists("/eph") is not None

        p.cut()
        states.wait_for(KazooState.SUSPENDED, timeout=5)
        # While cut, the client cannot reach the servers, so the server expires the session: its
        # ephemeral node disappears for everyone else.
        wait_until(lambda: observer.exists("/eph") is None, 20, "server expired the cut-off session")
        assert not client.connected
        mark = states.mark()
        p.heal()

        k = states.wait_for(KazooState.LOST, timeout=10)
        states.wait_for(KazooState.CONNECTED, since=max(k, mark) + 1, timeout=10)
        assert session_id(client) != sid
        assert client.exists("/eph") is None
        client.stop()


def _client_socket_open(client) -> bool:
    """kazoo's connection still has its socket (a cut closes it; a freeze does not)."""
    sock = client._connection._socket
    return sock is not None and sock.fileno() != -1


def test_freeze_keeps_the_connection_open_delivers_nothing_and_the_server_expires_the_session(
        zk_ensemble, zk_factory):
    observer = zk_factory()
    with Partition(zk_ensemble.hosts) as p:
        client = zk_factory(hosts=p.hosts, timeout=3.0, connection_retry=FAST_RECONNECT)
        states = StateLog(client)
        client.create("/frozen-eph", b"x", ephemeral=True)
        observer.sync("/")
        assert observer.exists("/frozen-eph") is not None

        frozen_at = p.freeze()
        assert p.is_frozen and not p.is_cut
        reply = client.exists_async("/")  # sent into the silence: no answer while frozen
        time.sleep(0.5)  # the fault itself: half a second of silence, less than the 2 s read timeout
        assert not reply.ready(), "a reply came through a frozen link"
        assert client.connected and _client_socket_open(client), "a freeze must not close the connection"
        assert KazooState.SUSPENDED not in states.seen

        k = states.wait_for(KazooState.SUSPENDED, timeout=10)  # only once a heartbeat goes unanswered:
        # the request above reset kazoo's heartbeat clock; its ping goes out after read_timeout/2 (2 s / 2)
        # minus up to 0.4 s of jitter, and goes unanswered after as long again -- at least 1.2 s after the
        # freeze, where a closed connection would have been noticed at once
        assert states.at[k] - frozen_at >= 1.0, f"suspended {states.at[k] - frozen_at:.2f} s after the freeze"
        # the server hears nothing either, so it expires the session after the timeout
        wait_until(lambda: observer.exists("/frozen-eph") is None, 20, "server expired the frozen session")
        p.heal()
        assert not p.is_frozen
        k = states.wait_for(KazooState.LOST, since=k, timeout=15)
        states.wait_for(KazooState.CONNECTED, since=k, timeout=15)
        assert client.exists("/frozen-eph") is None
        client.stop()


def test_freeze_and_quick_heal_delivers_what_was_held_back(zk_ensemble, zk_factory):
    with Partition(zk_ensemble.hosts) as p:
        client = zk_factory(hosts=p.hosts, timeout=4.0, connection_retry=FAST_RECONNECT)
        states = StateLog(client)
        sid = client.client_id[0]
        p.freeze()
        write = client.create_async("/held-back", b"y")
        time.sleep(0.3)  # the fault itself: shorter than any timeout
        assert not write.ready()
        p.heal()
        assert write.get(timeout=5) == "/held-back"  # delivered once the link flows again
        assert client.client_id[0] == sid and KazooState.LOST not in states.seen
        client.stop()


def test_freeze_of_one_server_leaves_new_connections_unanswered(zk_ensemble):
    with Partition(zk_ensemble.hosts) as p:
        p.freeze(server=0)
        answered = []
        for _ in range(3):  # connections go to servers 0, 1, 2 in turn: the first is accepted, never answered
            with socket.create_connection(("127.0.0.1", p.port), timeout=2) as s:
                s.sendall(b"ruok")
                s.settimeout(1.0)
                try:
                    answered.append(s.recv(16))
                except socket.timeout:
                    answered.append(None)
        assert answered[0] is None and answered[1:] == [b"imok", b"imok"], answered
        with pytest.raises(ValueError, match="server must be an index below 3, got 3"):
            p.freeze(server=3)


# -- Ensemble basics -----------------------------------------------------------------------------------------


def test_single_server_ensemble_starts_serves_and_cleans_up():
    with Ensemble(size=1) as ens:
        assert ens.running(0) and ens.serving(0)
        assert ens.mode(0) == "standalone"
        assert ens.leader() == 0
        pid = ens.pids()[0]
        workdir = ens.workdir
        assert pid is not None and not pid_gone(pid)
        assert os.path.isdir(workdir)
        client = KazooClient(hosts=ens.hosts, timeout=4.0)
        client.start(timeout=30)
        try:
            client.create("/hello", b"world")
            assert client.get("/hello")[0] == b"world"
        finally:
            client.stop()
            client.close()

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not os.path.exists(workdir)
    assert ens.pids() == [None]
    with pytest.raises(RuntimeError, match="closed"):
        ens.start()


@pytest.mark.parametrize(
    ("kwargs", "shown"),
    [
        ({"size": 0}, "0"),
        ({"size": -2}, "-2"),
        ({"size": "3"}, "'3'"),
        ({"tick_ms": "x"}, "'x'"),
        ({"tick_ms": 5}, "5"),
    ],
)
def test_ensemble_rejects_invalid_arguments(kwargs, shown):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=rf"{name}.*got {shown}$"):
        Ensemble(**kwargs)


def test_server_index_out_of_range_raises_value_error():
    ens = Ensemble(size=1)  # configured, not started
    try:
        calls = [ens.start, ens.stop, ens.kill, ens.pause, ens.resume, ens.running, ens.mode, ens.host]
        calls.append(lambda i: ens.wait_serving([i], timeout=0.1))
        for call in calls:
            for bad in (1, -1, 7):
                with pytest.raises(ValueError, match=rf"0\.\.0, got {bad}$"):
                    call(bad)
        assert ens.host(0) == f"127.0.0.1:{ens.client_ports[0]}"
        assert ens.pids() == [None]  # nothing was started by the bad calls
    finally:
        ens.close()
    assert not os.path.exists(ens.workdir)


# -- import without pytest -----------------------------------------------------------------------------------


def test_kit_imports_without_pytest():
    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "import zkrecipes.testing as t\n"
        "assert t.Ensemble and t.Partition and t.expire_session\n"
        "try:\n"
        "    import zkrecipes.testing.pytest_plugin\n"
        "except ImportError:\n"
        "    print('blocked')\n"
        "else:\n"
        "    print('pytest was importable')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # The plugin (which does need pytest) failing proves pytest really was blocked in the child.
    assert r.stdout.strip() == "blocked"


def test_zk_fixture_is_chrooted_to_a_fresh_namespace(zk, zk_namespace, zk_ensemble):
    assert zk_namespace.startswith("/zkrecipes-test/")
    name = f"n-{uuid.uuid4().hex[:6]}"
    zk.create(f"/{name}", b"v")
    root = KazooClient(hosts=zk_ensemble.hosts, timeout=4.0)
    root.start(timeout=30)
    try:
        assert root.get(f"{zk_namespace}/{name}")[0] == b"v"
        assert root.get_children(zk_namespace) == [name]
    finally:
        root.stop()
        root.close()
