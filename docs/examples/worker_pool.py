"""A pool of workers of which exactly one, the leader, hands out jobs.

Run it against any ZooKeeper ensemble::

    ZK_HOSTS=127.0.0.1:2181 python worker_pool.py /examples/reports

Every worker has its own ZooKeeper session (in real life: its own process or machine) and runs
``election.run(lead, requeue=True)``. The leader does up to three jobs, then steps down and queues
again, so leadership goes round the pool. Before each side effect the leader calls ``check()``, and it
passes its fencing token to the store, which refuses a token lower than the highest it has seen.
"""

import os
import sys
import threading
import time

from kazoo.client import KazooClient

from zkrecipes import LeaderElection, LockLost

HOSTS = os.environ.get("ZK_HOSTS", "127.0.0.1:2181")
PATH = sys.argv[1] if len(sys.argv) > 1 else "/examples/reports"
WORKERS = 3
JOBS_PER_TERM = 3


class FencedStore:
    """Stands in for the database the leader writes to: it rejects writes with stale tokens."""

    def __init__(self):
        self._lock = threading.Lock()
        self.highest = 0

    def write(self, token, job, worker):
        with self._lock:
            if token < self.highest:
                raise PermissionError(f"stale token {token} < {self.highest}: {worker} is no longer leader")
            self.highest = token
            print(f"done {job} by {worker} token {token}", flush=True)


store = FencedStore()
todo = [f"report-{n}" for n in range(1, 10)]
todo_lock = threading.Lock()
finished = threading.Event()


def worker(election):
    def lead():
        token = election.token
        print(f"{election.identifier} leads with token {token}", flush=True)
        for _ in range(JOBS_PER_TERM):
            try:
                election.check()  # before each side effect: still the leader?
            except LockLost:
                print(f"{election.identifier} is no longer sure it leads; stepping down", flush=True)
                return
            with todo_lock:
                job = todo.pop(0) if todo else None
            if job is None:
                finished.set()
                return
            time.sleep(0.1)  # the work itself
            store.write(token, job, election.identifier)  # pass the token downstream
        # Returning ends the term: run() resigns, the next worker in line leads, and with
        # requeue=True this worker queues again at the back.

    election.run(lead, requeue=True)  # returns None once cancel() is called


def main():
    clients = [KazooClient(hosts=HOSTS, timeout=5.0) for _ in range(WORKERS)]
    for client in clients:
        client.start(timeout=30)
    elections = [LeaderElection(c, PATH, identifier=f"worker-{k}") for k, c in enumerate(clients, 1)]
    threads = [threading.Thread(target=worker, args=(e,)) for e in elections]
    for t in threads:
        t.start()
    if not finished.wait(60):
        print("the jobs did not finish within 60 s", flush=True)
    for e in elections:
        e.cancel()  # stop campaigning; a leader finishes its term first
    for t in threads:
        t.join()
    for client in clients:
        client.stop()
        client.close()
    if todo:
        sys.exit(1)
    print("all 9 jobs done; the store never saw a stale token", flush=True)


if __name__ == "__main__":
    main()
