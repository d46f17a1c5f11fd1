"""The kazoo seam (zkrecipes._kazoo), one test per function, against a real ensemble.

``make test`` runs this file twice: on the installed kazoo (the newest supported) and on the oldest
supported one (kazoo 2.9.0, put first on PYTHONPATH; ZKRECIPES_EXPECT_KAZOO names the version that
must be the one imported, so a run on the wrong kazoo fails instead of passing quietly).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from importlib import metadata

import kazoo
import kazoo.exceptions
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, NoNodeError
from kazoo.protocol.serialization import GetChildren
from kazoo.protocol.states import KazooState
from kazoo.security import OPEN_ACL_UNSAFE
from lockhelpers import LateLink, full_path, server_watches, wait_until

from zkrecipes import FairLock, _kazoo, _kazoo_ops


def test_runs_on_the_expected_kazoo():
    expected = os.environ.get("ZKRECIPES_EXPECT_KAZOO") or metadata.version("kazoo")
    assert kazoo.version.__version__ == expected


def test_nowatcher_is_registered_and_a_late_remove_watches_keeps_the_client_alive(zk):
    assert -121 in kazoo.exceptions.EXCEPTIONS
    zk.create("/seam-nw", b"")
    ar = zk.handler.async_result()
    zk._call(_kazoo_ops.RemoveWatches(full_path(zk, "/seam-nw"), 2), ar)  # no such watch: NOWATCHER
    with pytest.raises(kazoo.exceptions.ZookeeperError):
        ar.get(timeout=10)
    assert ar.exception is kazoo.exceptions.EXCEPTIONS[-121] or type(ar.exception) is kazoo.exceptions.EXCEPTIONS[-121]
    assert zk.exists("/seam-nw") is not None  # the connection survived the unknown-to-old-kazoo reply


def test_session_id_and_is_stopped(zk_factory):
    client = zk_factory()
    assert _kazoo.session_id(client) == client.client_id[0] != 0
    assert not _kazoo.is_stopped(client)
    client.stop()
    assert _kazoo.is_stopped(client)
    assert _kazoo.session_id(client) is None


def test_session_timeout_is_the_granted_one_and_replies_are_stamped_with_their_send_time(zk_factory):
    client = zk_factory(start=False, timeout=3.5)
    assert _kazoo.session_timeout(client) == 3.5  # asked for: no connect response yet
    assert _kazoo.heard(client).granted is None and _kazoo.heard(client).answered is None
    before = time.monotonic()
    client.start(timeout=30)
    h = _kazoo.heard(client)
    assert h.granted == 3.5 and _kazoo.session_timeout(client) == 3.5  # within the servers' bounds: granted
    assert h.answered is not None and before <= h.answered <= time.monotonic()  # the connect's send time
    sent = time.monotonic()
    client.exists("/")
    assert sent <= h.answered <= time.monotonic()  # an answered request: stamped when it was sent
    idle_from = time.monotonic()
    wait_until(lambda: h.answered > idle_from, 10, "an idle client's ping is answered")  # pings count too
    assert h.answered - idle_from < 3.5 / 3 + 1.0  # kazoo pings a third of the timeout after its last send


def test_an_overdue_reply_is_nudged_on_connections_our_recipes_use(zk_ensemble, zk_factory):
    """A server that sits on a reply (ZOOKEEPER-4537) answers once another packet arrives: the client's
    I/O thread sends one, on connections zkrecipes sends on, and only there."""
    link = LateLink(zk_ensemble.hosts)
    try:
        ours, theirs = zk_factory(hosts=link.hosts, timeout=30.0), zk_factory(hosts=link.hosts, timeout=4.0)
        lock = FairLock(ours, "/nudge")
        assert lock.acquire(timeout=10)
        h = _kazoo.heard(ours)
        nudges, t0 = h.nudges, time.monotonic()
        link.arm()
        ours.exists("/nudge")  # a plain kazoo call on our connection is nudged too
        assert link.held_count == 1 and h.nudges == nudges + 1
        assert time.monotonic() - t0 < 2.0  # kazoo's own heartbeat would come after about 10 s
        lock.release()
        link.arm()
        t0 = time.monotonic()
        theirs.exists("/")  # never used by a recipe: left alone, answered after kazoo's heartbeat
        assert link.held_count == 2 and _kazoo.heard(theirs).nudges == 0
        assert time.monotonic() - t0 > 0.5
    finally:
        link.close()


def test_clients_our_recipes_use_select_with_one_poll_and_others_keep_kazoos(zk_factory):
    """``attend`` swaps the threading handler's select for poll_select on clients a recipe is built on,
    and their I/O works through it: requests, watches, and a reconnection after the connection drops."""
    ours, theirs = zk_factory(), zk_factory()
    kazoos = theirs.handler.select
    lock = FairLock(ours, "/poll")
    assert ours.handler.select.func is _kazoo.poll_select  # (with the connection: it nudges, see above)
    assert theirs.handler.select == kazoos and getattr(theirs.handler.select, "func", None) is not _kazoo.poll_select
    assert lock.acquire(timeout=10)
    fired = threading.Event()
    ours.exists("/poll-watched", watch=lambda event: fired.set())
    theirs.create("/poll-watched")
    assert fired.wait(10)
    lock.release()
    states: list = []
    ours.add_listener(states.append)
    ours._connection._socket.shutdown(socket.SHUT_RDWR)  # the I/O thread finds the hang-up in poll_select
    wait_until(lambda: states[-2:] == [KazooState.SUSPENDED, KazooState.CONNECTED], 30, "reconnected")
    assert lock.acquire(timeout=10)
    lock.release()


def test_watch_functions_marked_on_io_thread_run_there_on_clients_our_recipes_use(zk_factory, caplog):
    """On a client a recipe is built on, a watch function marked ``on_io_thread`` runs on kazoo's I/O
    thread as the notification is read (one thread switch less per hand-off), an unmarked one on kazoo's
    event thread as before; a marked one that raises is logged and the I/O thread reads on. A client no
    recipe uses queues every watch function, marked or not."""
    ours, theirs = zk_factory(), zk_factory()
    FairLock(ours, "/io-watch")
    io_thread = ours._connection._connection_routine  # kazoo's I/O thread (its zk_loop)
    ran: dict = {}

    def runner(name: str, fail: bool = False):
        fired = threading.Event()

        def fn(event) -> None:
            ran[name] = threading.current_thread()
            fired.set()
            if fail:
                raise RuntimeError("a failing watch function")

        return fn, fired

    cases = {"marked": (ours, True, False), "unmarked": (ours, False, False), "failing": (ours, True, True),
             "other client": (theirs, True, False)}
    fired = {}
    for name, (client, marked, fail) in cases.items():
        fn, fired[name] = runner(name, fail)
        client.exists(f"/io-watch-{name.replace(' ', '-')}", watch=_kazoo.on_io_thread(fn) if marked else fn)
    for name in cases:
        theirs.create(f"/io-watch-{name.replace(' ', '-')}")
    for name in cases:
        assert fired[name].wait(10), name
    assert ran["marked"] is io_thread and ran["failing"] is io_thread
    assert ran["unmarked"] is not io_thread  # kazoo's event thread
    assert ran["other client"] is not theirs._connection._connection_routine
    # the failing function set its event before raising: the log line follows on the I/O thread
    wait_until(lambda: "a watch function failed" in caplog.text, 10, "the failure logged")
    ours.create("/io-watch-after")  # the I/O thread still works after the failure
    assert ours.exists("/io-watch-after")


def test_session_timeout_is_the_servers_when_it_grants_another(zk_ensemble):
    low = zk_ensemble.session_timeout_bounds()[0]
    client = KazooClient(hosts=zk_ensemble.hosts, timeout=low / 2000.0)  # below minSessionTimeout: raised
    try:
        client.start(timeout=30)
        assert _kazoo.session_timeout(client) == low / 1000.0 != client._session_timeout / 1000.0
    finally:
        client.stop()
        client.close()


def test_submit_pipelines_in_order_and_fails_cleanly_once_stopped(zk_factory):
    client = zk_factory()
    client.create("/seam-submit/a", b"", makepath=True)
    results = _kazoo.submit(client, [GetChildren(full_path(client, "/seam-submit"), None)] * 3)
    assert [r.get(timeout=10) for r in results] == [["a"]] * 3
    client.stop()
    stopped = _kazoo.submit(client, [GetChildren(full_path(client, "/seam-submit"), None)])
    with pytest.raises(ConnectionClosedError):
        stopped[0].get(timeout=10)


def sent_xids(caplog: pytest.LogCaptureFixture) -> list:
    """The xids of the requests kazoo logged as sent (its DEBUG log), pings, auths and connects left out."""
    sent = [r.args[0] for r in caplog.records if r.name == "kazoo.client" and r.msg.startswith("Sending request")]
    return [xid for xid in sent if isinstance(xid, int) and xid > 0]


def test_number_far_numbers_the_next_requests_far_and_the_server_answers_them(zk_factory, caplog):
    client = zk_factory()
    caplog.set_level(logging.DEBUG, logger="kazoo.client")
    caplog.clear()
    _kazoo_ops.number_far(client)
    client.sync("/")  # a request the server commits, as the twin's Close: answered, at its far xid
    assert client.exists("/") is not None
    assert client.get_children("/") is not None  # past 2**31 - 1 kazoo numbers from 1 again
    assert sent_xids(caplog)[:3] == [_kazoo_ops.FAR_XID, _kazoo_ops.FAR_XID + 1, 1]


def test_create_and_list_is_one_pipelined_pair_with_the_chroot_handled(zk):
    zk.create("/seam-cl/other", b"", makepath=True)
    created, listed = _kazoo.create_and_list(zk, "/seam-cl/n-", b"x", OPEN_ACL_UNSAFE, 3, "/seam-cl")
    path, stat = created.get(timeout=10)
    assert path.startswith(full_path(zk, "/seam-cl/n-"))  # create2's reply carries the chroot
    assert stat.ephemeralOwner == zk.client_id[0]
    assert sorted(listed.get(timeout=10)) == sorted(["other", path.rsplit("/", 1)[1]])
    created, listed = _kazoo.create_and_list(zk, "/seam-cl/solo", b"", OPEN_ACL_UNSAFE, 1, None)
    assert listed is None and created.get(timeout=10)[1].ephemeralOwner == zk.client_id[0]


def test_create_container_makes_a_parent_the_server_reaps_once_emptied(zk):
    zk.create("/seam-cc", b"")
    path, stat = _kazoo.create_container(zk, "/seam-cc/parent", OPEN_ACL_UNSAFE).get(timeout=10)
    assert path == full_path(zk, "/seam-cc/parent") and stat.ephemeralOwner == 0
    zk.create("/seam-cc/parent/child", b"")
    zk.delete("/seam-cc/parent/child")
    wait_until(lambda: zk.exists("/seam-cc/parent") is None, 30, "the emptied container parent to be reaped")
    with pytest.raises(NoNodeError):
        _kazoo.create_container(zk, "/seam-cc/no/such/parent", OPEN_ACL_UNSAFE).get(timeout=10)


def test_data_watchers_and_remove_data_watch_client_and_server_side(zk, zk_ensemble):
    zk.create("/seam-w", b"")
    fired = threading.Event()

    def fn(event):
        fired.set()

    zk.get("/seam-w", watch=fn)
    assert _kazoo_ops.data_watchers(zk, "/seam-w") == frozenset({fn})
    full = full_path(zk, "/seam-w")
    wait_until(lambda: full in server_watches(zk_ensemble, "wchp"), 10, "the server to list our watch")
    _kazoo_ops.remove_data_watch(zk, "/seam-w", fn)
    assert _kazoo_ops.data_watchers(zk, "/seam-w") == frozenset()
    zk.sync("/seam-w")  # the removal has reached the server
    assert full not in server_watches(zk_ensemble, "wchp")
    zk.set("/seam-w", b"changed")
    zk.sync("/seam-w")
    assert not fired.is_set()
    _kazoo_ops.remove_data_watch(zk, "/seam-w", fn)  # not watched any more: a no-op


def test_commit_fenced_applies_only_in_the_nodes_session(zk, zk_factory):
    """The race client-side checks cannot close: our session expires between the last look and the send,
    and kazoo sends in the new session. A multi about to go out in another session cannot succeed."""
    from kazoo.protocol.serialization import Create

    from zkrecipes import ExclusiveLock

    holder = ExclusiveLock(zk_factory(), "/seam-fence")
    assert holder.acquire()  # another session holds the very path the fence checks
    ops = [Create(full_path(zk, "/seam-fenced"), b"", list(OPEN_ACL_UNSAFE), 0)]
    sid = _kazoo.session_id(zk)
    results = _kazoo_ops.commit_fenced(zk, ops, sid + 1, "/seam-fence/lock").get(timeout=10)
    assert len(results) == 1 and isinstance(results[0], Exception)  # replaced: nothing applied
    assert zk.exists("/seam-fenced") is None
    results = _kazoo_ops.commit_fenced(zk, ops, sid, "/seam-fence/lock").get(timeout=10)  # our session: passes
    assert results[0] is True and results[1].endswith("/seam-fenced")
    assert zk.exists("/seam-fenced") is not None
    results = _kazoo_ops.commit_fenced(zk, ops, sid, "/seam-fence/nobody").get(timeout=10)  # the node is gone
    assert isinstance(results[0], kazoo.exceptions.NoNodeError)
    holder.release()
