"""What the lean hot path caches per process must not leak into a forked child."""

from __future__ import annotations

import json
import os
import threading

import pytest

from zkrecipes import naming


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_writes_its_own_pid_and_new_guids():
    parent_guids = {naming.new_guid() for _ in range(3)}
    assert len(parent_guids) == 3 and all(len(g) > 16 for g in parent_guids)
    assert json.loads(naming.node_data(None, "g", "h"))["pid"] == os.getpid()  # cached for this thread
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once
        try:
            os.write(w, json.dumps([json.loads(naming.node_data(None, naming.new_guid(), "h")), os.getpid()]).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data, child_pid = json.loads(f.read())
    os.waitpid(pid, 0)
    assert data["pid"] == child_pid != os.getpid()
    assert data["guid"][:16] not in {g[:16] for g in parent_guids}  # a new random base
    assert json.loads(naming.node_data(None, "g", "h"))["pid"] == os.getpid()


def test_node_data_names_the_thread_that_queues():
    def data_of_a_new_thread(name: str) -> dict:
        out: dict = {}
        t = threading.Thread(target=lambda: out.update(json.loads(naming.node_data("job", "g", "h"))), name=name)
        t.start()
        t.join()
        return out

    assert data_of_a_new_thread("worker-a")["thread"] == "worker-a"
    assert data_of_a_new_thread("worker-b")["thread"] == "worker-b"  # not the first thread's, cached
    assert json.loads(naming.node_data("job", "g", "h"))["thread"] == threading.current_thread().name
