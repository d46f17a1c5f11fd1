"""The I/O thread's select (zkrecipes._kazoo.poll_select) answers as kazoo's own ``selector_select`` does:
same ready lists for the same sockets, same errors."""

from __future__ import annotations

import os
import socket
import time

import pytest
from kazoo.handlers.utils import selector_select

from zkrecipes._kazoo import poll_select


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def both(*args):
    ours, theirs = poll_select(*args), selector_select(*args)
    assert ours == theirs
    return ours


def test_nothing_ready_times_out_with_empty_lists(pair):
    a, _ = pair
    t0 = time.monotonic()
    assert both([a], [], [], 0.05) == ([], [], [])
    assert time.monotonic() - t0 >= 0.04  # it waited (rounded up to whole ms, never down to a busy loop)


def test_readable_writable_and_hang_up_are_told_like_kazoo(pair):
    a, b = pair
    assert both([], [a], [], 0) == ([], [a], [])  # an empty send buffer: writable
    b.send(b"x")
    assert both([a, b], [], [], 0) == ([a], [], [])  # only the one with data to read
    assert both([a.fileno()], [], [], 0) == ([a.fileno()], [], [])  # plain fds work too
    b.close()
    a.recv(1)
    assert both([a], [], [], 0) == ([a], [], [])  # a hang-up is readable: the next read tells (b"")
    assert a.recv(1) == b""


def test_blocks_without_a_timeout_until_ready(pair):
    a, b = pair
    b.send(b"x")
    assert poll_select([a], [], [], None) == ([a], [], [])


def test_bad_arguments_raise_like_kazoo(pair):
    a, b = pair
    with pytest.raises(ValueError):
        poll_select([a], [], [], -1)
    with pytest.raises(ValueError):
        selector_select([a], [], [], -1)
    fd = os.dup(b.fileno())
    os.close(fd)  # a descriptor closed under the caller
    for select in (poll_select, selector_select):
        with pytest.raises(ValueError):
            select([fd], [], [], 0)
    b.close()  # a closed socket's fileno() is -1
    for select in (poll_select, selector_select):
        with pytest.raises(TypeError, match="-1"):
            select([b], [], [], 0)


def test_descriptors_above_1024_work(pair):
    a, b = pair
    high = [os.dup2(a.fileno(), 1500)]
    try:
        b.send(b"x")
        assert both(high, [], [], 0) == (high, [], [])
    finally:
        os.close(high[0])
