"""The seam's one-shot result (zkrecipes._kazoo.Result): what kazoo's I/O thread and our driver rely on."""

from __future__ import annotations

import threading
import time

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler

from zkrecipes._kazoo import Result


@pytest.fixture
def handler():
    h = SequentialThreadingHandler()
    yield h
    if h.running:
        h.stop()


def test_value_and_exception_are_told_once(handler):
    r = Result(handler)
    assert r and not r.ready() and r.exception is None  # kazoo tests a result's truth
    r.set(("/p/n-0000000001", "stat"))
    r.set_exception(NoNodeError())  # a second answer is ignored
    assert r.ready() and r.successful() and r.exception is None
    assert r.value == ("/p/n-0000000001", "stat") and r.get() == r.value and r.get(block=False) == r.value
    e = Result(handler)
    e.set_exception(NoNodeError())
    assert e.ready() and not e.successful() and isinstance(e.exception, NoNodeError)
    with pytest.raises(NoNodeError):
        e.get()


def test_wait_times_out_then_wakes_every_waiter_when_set(handler):
    r = Result(handler)
    t0 = time.monotonic()
    assert r.wait(0.05) is False and time.monotonic() - t0 >= 0.04
    with pytest.raises(KazooTimeoutError):
        r.get(timeout=0)
    with pytest.raises(KazooTimeoutError):
        r.get(block=False)
    woken = []
    threads = [threading.Thread(target=lambda: woken.append(r.wait(10))) for _ in range(3)]
    for t in threads:
        t.start()
    r.set(7)
    for t in threads:
        t.join(10)
    assert woken == [True, True, True] and r.wait() and r.get(timeout=0) == 7


def test_callbacks_run_once_on_the_completion_thread_before_or_after_the_answer(handler):
    handler.start()
    seen = []
    done = threading.Event()

    def cb(res):
        seen.append((res.get(block=False), threading.current_thread() is not threading.main_thread()))
        if len(seen) == 2:
            done.set()

    r = Result(handler)
    r.rawlink(cb)  # before the answer
    r.set(1)
    r2 = Result(handler)
    r2.set(2)
    r2.rawlink(cb)  # after it
    assert done.wait(10)
    assert sorted(seen) == [(1, True), (2, True)]


def test_callbacks_run_at_once_without_a_running_handler(handler):
    r = Result(handler)
    seen = []
    r.rawlink(lambda res: seen.append(res.exception))
    exc = NoNodeError()
    r.set_exception(exc)
    assert seen == [exc]


def test_on_ready_runs_on_the_setting_thread_once_or_at_once_if_set(handler, caplog):
    handler.start()  # (a running completion thread: on_ready must not use it)
    r, seen = Result(handler), []
    r.on_ready(lambda: seen.append(threading.current_thread()))
    setter = threading.Thread(target=r.set, args=(1,))  # kazoo's I/O thread in real use
    setter.start()
    setter.join(10)
    r.set(2)  # a second answer is ignored, and so is its callback
    assert seen == [setter] and r.get(block=False) == 1
    r.on_ready(lambda: seen.append("now"))  # already set: at once, on the caller
    assert seen == [setter, "now"]
    failing = Result(handler)
    failing.on_ready(lambda: 1 / 0)
    failing.set_exception(NoNodeError())  # the setter survives a failing callback: logged
    assert failing.ready() and "a reply's callback failed" in caplog.text


def test_a_second_on_ready_is_not_lost(handler):
    r, seen, done = Result(handler), [], threading.Event()
    r.on_ready(lambda: seen.append("first"))
    r.on_ready(lambda: (seen.append("second"), done.set()))  # (not overwriting the first)
    handler.start()
    r.set(1)
    assert done.wait(10) and sorted(seen) == ["first", "second"]
