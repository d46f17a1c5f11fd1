"""An asyncio service: per-account locks around read-modify-write, and one leader for the nightly job.

Run it against any ZooKeeper ensemble::

    ZK_HOSTS=127.0.0.1:2181 python aio_service.py /examples/bank

Two service instances (in real life: two processes or machines, each with its own ZooKeeper session)
handle 200 concurrent deposit requests on 5 accounts. Each request holds ``aio.FairLock`` of its
account while it reads, awaits (a slow backend), and writes the balance back, passing the lock's
fencing token to the store. Meanwhile each instance runs ``election.run(nightly)``: exactly one of them
runs the nightly job at a time. Thousands of waiting requests cost no threads: each is a suspended task.
"""

import asyncio
import os
import random
import sys

from kazoo.client import KazooClient

from zkrecipes import LockTimeout, aio

HOSTS = os.environ.get("ZK_HOSTS", "127.0.0.1:2181")
ROOT = sys.argv[1] if len(sys.argv) > 1 else "/examples/bank"
ACCOUNTS = [f"acct-{n}" for n in range(5)]


class Store:
    """Stands in for a database without transactions: a read, a slow computation, a write."""

    def __init__(self):
        self.balances = dict.fromkeys(ACCOUNTS, 0)
        self.highest = dict.fromkeys(ACCOUNTS, 0)

    async def read(self, account):
        await asyncio.sleep(random.random() / 1000)
        return self.balances[account]

    async def write(self, account, value, token):
        if token < self.highest[account]:  # fencing: a holder that lost its lock cannot overwrite
            raise PermissionError(f"stale token {token} for {account}")
        self.highest[account] = token
        await asyncio.sleep(random.random() / 1000)
        self.balances[account] = value


class Service:
    def __init__(self, name, client, store):
        self.name, self.zk, self.store = name, client, store
        self.election = aio.LeaderElection(client, f"{ROOT}/leader", identifier=name)
        self.election.add_listener(lambda e, state: print(f"{name}: election {state}", flush=True))
        self.nightly_runs = 0

    async def deposit(self, account, amount):
        lock = aio.FairLock(self.zk, f"{ROOT}/accounts/{account}", identifier=self.name)
        async with lock.hold(timeout=30):  # LockTimeout if not ours within 30 s; no node is left then
            balance = await self.store.read(account)
            await lock.check()  # still ours? (raises LockLost after a session loss)
            await self.store.write(account, balance + amount, lock.token)

    async def nightly_terms(self, terms):
        for _ in range(terms):  # campaign, lead for one run of the job, resign: the other may lead next
            await self.election.run(self.nightly)

    async def nightly(self):
        print(f"{self.name}: leads, runs the nightly job (token {self.election.token})", flush=True)
        self.nightly_runs += 1
        await asyncio.sleep(0.05)
        await self.election.check()


async def main():
    store = Store()
    clients = [KazooClient(hosts=HOSTS) for _ in range(2)]
    for c in clients:
        c.start(timeout=30)
    services = [Service(f"instance-{i}", c, store) for i, c in enumerate(clients)]
    try:
        requests = [
            services[n % 2].deposit(ACCOUNTS[n % len(ACCOUNTS)], 10) for n in range(200)
        ]  # 200 requests in flight at once, 40 per account
        jobs = [s.nightly_terms(2) for s in services]
        await asyncio.gather(*requests, *jobs)
    except LockTimeout as exc:
        print(f"gave up: {exc}", flush=True)
        raise
    finally:
        for c in clients:
            c.stop()
            c.close()
    print(f"balances {sorted(store.balances.values())}; nightly runs "
          f"{sum(s.nightly_runs for s in services)}", flush=True)
    assert all(b == 400 for b in store.balances.values()), store.balances
    print("all 200 deposits applied; no lost update", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
