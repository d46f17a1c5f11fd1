"""The session watcher's doubt clock, decided client-side: replies' send times scripted, no ZooKeeper."""

from __future__ import annotations

import time
from typing import Any, List

from kazoo.protocol.states import KeeperState

from zkrecipes import _kazoo, session
from zkrecipes.session import CONNECTED, LOST, OVERDUE, SUSPENDED, SessionWatcher, lost_lead

T = 4.0  # the granted session timeout


class Connection:  # what the seam keeps on kazoo's ConnectionHandler
    pass


class Client:  # what the watcher reads of a KazooClient
    _state = KeeperState.CONNECTED
    _session_id = 0x1234
    _session_timeout = 10000  # asked for 10 s; the server granted T
    client_id = (0x1234, b"")

    def __init__(self) -> None:
        self._connection = Connection()

    def add_listener(self, fn: Any) -> None:
        pass


def watcher(answered_ago: float) -> tuple:
    client = Client()
    heard = _kazoo._heard(client._connection)
    heard.granted, heard.answered = T, time.monotonic() - answered_ago
    w = SessionWatcher(client)  # type: ignore[arg-type]
    events: List[str] = []
    w._subs.add(events.append)  # told on this thread: the test is the dispatcher
    return client, heard, w, events


def test_a_live_link_is_not_in_doubt_and_the_next_look_is_the_in_doubt_moment():
    _, heard, w, events = watcher(answered_ago=0.1)
    assert w._follow_clock() == heard.answered + OVERDUE * T
    assert events == []
    assert _kazoo.session_timeout(Client()) == 10.0 and w.deadlines() == (heard.answered + T / 2, heard.answered + T)


def test_overdue_replies_are_doubt_then_answers_again_are_a_reconnection():
    _, heard, w, events = watcher(answered_ago=T / 2 + 0.1)
    assert w._follow_clock() == heard.answered + T - 0.2  # next: the lost deadline, less the lead
    assert w._follow_clock() == heard.answered + T - 0.2  # told once
    assert events == [SUSPENDED]
    heard.answered = time.monotonic()  # a ping answered: the holds verify their nodes
    w._follow_clock()
    assert events == [SUSPENDED, CONNECTED]


def test_the_lost_deadline_is_told_once_and_counts_from_the_send_not_from_the_doubt():
    _, heard, w, events = watcher(answered_ago=T - lost_lead(T) + 0.01)  # just before the server may expire
    assert w._follow_clock() is None
    assert w._follow_clock() is None
    assert events == [LOST]  # at once: no waiting for a suspension to last a session timeout


def test_a_stall_of_our_own_is_left_to_the_stall_check_but_not_the_lost_deadline():
    _, heard, w, events = watcher(answered_ago=T / 2 + 0.1)
    w.stalled_at = time.monotonic()  # the dispatcher noticed it stood still after the in-doubt moment
    w._follow_clock()
    assert events == []  # holds are stale and confirm with a read instead
    heard.answered = time.monotonic() - T - 0.01
    w._follow_clock()
    assert events == [LOST]


def test_a_stall_noticed_before_the_dispatcher_runs_again_is_covered_by_a_read_sent_after_the_notice():
    # just resumed (SIGCONT, a GC pause): an owner's check() notices the stall before the dispatcher thread
    # runs, confirms its hold with one read, and asks again -- still before the dispatcher runs. The same
    # overrun is not a new stall: the hold is confirmed (a false LockLost once in 4 runs of test_aio's
    # stalled-process test on ZooKeeper 3.9.3, where the read came back before the dispatcher woke)
    _, _, w, _ = watcher(answered_ago=0.1)
    verified = time.monotonic() - 5.0  # the hold was last confirmed before the stall
    w._wake_by = time.monotonic() - w.stall_limit - 1.0  # the dispatcher is a second past the stall limit
    assert w.stalled_since(verified)  # noticed here first: the hold must be confirmed
    asked = time.monotonic()  # the confirming read's send time; it found the node ours
    assert not w.stalled_since(asked)
    assert w.stalled_since(verified)  # a hold not confirmed since the notice stays stale


def test_a_process_frozen_before_the_dispatcher_first_waited_is_stalled(monkeypatch):
    # a hold made just before a SIGSTOP starts the dispatcher thread, which has not waited yet when the process
    # stands still: the first is_held after the resume must still find the hold unconfirmed (the thread is not
    # run here: it never got to run before the freeze)
    class NotRun:
        def __init__(self, **kwargs: Any) -> None:
            pass

        def start(self) -> None:
            pass

    monkeypatch.setattr(session.threading, "Thread", NotRun)
    _, _, w, _ = watcher(answered_ago=0.1)
    w.stall_limit = 0.05  # a short limit: the freeze below outlasts the tick and the limit
    verified = time.monotonic()  # the hold was confirmed when it was made
    w.subscribe(lambda event: None)
    assert not w.stalled_since(verified)  # not yet: the thread may still be starting
    time.sleep(session._TICK + w.stall_limit + 0.05)  # the freeze
    assert w.stalled_since(verified)
