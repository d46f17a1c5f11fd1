"""A leader-election worker process for tests/test_election.py (not a test module).

``python election_worker.py HOSTS PATH IDENTIFIER LOGFILE CONTROLDIR``

Runs ``LeaderElection.run(term, requeue=True)`` with a 3 s session and records, one JSON line per event,
flushed at once so that a SIGKILL loses nothing already written (``t`` is ``time.monotonic()``, which on
Linux is one clock for every process of the machine):

- ``ready``: connected, about to campaign (with our session id);
- ``start``: elected (token = fencing token); ``effect``: a side effect done after a passing ``check()``;
  ``end``: the term ended with a passing ``check()`` (the node is deleted after this line is written);
  ``unsure``: ``check()`` raised, so the term ended without further side effects;
- ``state``: a listener call; ``exit``: ``run()`` returned after ``cancel()``.

A term lasts ``TERM`` seconds, longer while ``CONTROLDIR/hold`` exists. A line ``stop`` on stdin, or
stdin closing, sets ``stopping`` and calls ``election.cancel()``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from kazoo.client import KazooClient

from zkrecipes import LeaderElection, LockLost

TERM = 0.15  # seconds of leadership per term unless held
EFFECT_EVERY = 0.02
SESSION_TIMEOUT = 3.0


def main() -> int:
    hosts, path, identifier, logfile, control = sys.argv[1:6]
    out = open(logfile, "a", buffering=1)
    out_lock = threading.Lock()

    def record(event: str, **fields) -> None:
        line = json.dumps({"ev": event, "t": time.monotonic(), "pid": os.getpid(), "id": identifier, **fields})
        with out_lock:
            out.write(line + "\n")  # line buffered: one write(2) per event

    client = KazooClient(
        hosts=hosts,
        timeout=SESSION_TIMEOUT,
        connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5},
    )
    client.start(timeout=30)
    election = LeaderElection(client, path, identifier)
    election.add_listener(lambda _e, state: record("state", state=state))
    stopping = threading.Event()
    hold_file = os.path.join(control, "hold")

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stopping.set()
        election.cancel()

    threading.Thread(target=read_stdin, daemon=True).start()

    def term() -> None:
        token = election.token
        try:
            election.check()
        except LockLost as exc:
            record("unsure", token=token, error=str(exc))
            return
        started = time.monotonic()
        record("start", token=token)
        while not stopping.is_set():
            if time.monotonic() - started >= TERM and not os.path.exists(hold_file):
                break
            try:
                election.check()
            except LockLost as exc:
                record("unsure", token=token, error=str(exc))
                return
            record("effect", token=election.token)
            stopping.wait(EFFECT_EVERY)
        try:
            election.check()
        except LockLost as exc:
            record("unsure", token=token, error=str(exc))
            return
        record("end", token=token)

    record("ready", session=client.client_id[0])
    result = election.run(term, requeue=True)
    record("exit", result=result, state=election.state, leader=election.is_leader)
    client.stop()
    client.close()
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
