"""Checked by ``mypy --strict`` in ``make test`` (never run): every public constructor of both fronts takes
its keywords explicitly, so a type checker catches a misspelt one. Each misspelt call carries a
``type: ignore[call-arg]``; strict mode's ``warn_unused_ignores`` fails the check if one stops being an
error (a constructor that went back to ``**kwargs``). The well-typed calls must pass as they are."""

from __future__ import annotations

import tenacity
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE

import zkrecipes
from zkrecipes import aio


def well_typed(zk: KazooClient) -> None:
    retry = tenacity.Retrying()
    zkrecipes.FairLock(zk, "/p", "id", host="h", acl=OPEN_ACL_UNSAFE, retry=retry, tolerate_suspended=True,
                       protocol="kazoo")
    zkrecipes.ExclusiveLock(zk, "/p", "id", host="h", acl=OPEN_ACL_UNSAFE, retry=retry, tolerate_suspended=True)
    zkrecipes.ReadWriteLock(zk, "/p", "id", host="h", acl=OPEN_ACL_UNSAFE, retry=retry, tolerate_suspended=True,
                            protocol="curator")
    zkrecipes.Semaphore(zk, "/p", 3, "id", host="h", acl=OPEN_ACL_UNSAFE, retry=retry, tolerate_suspended=True)
    zkrecipes.LeaderElection(zk, "/p", "id", host="h", acl=OPEN_ACL_UNSAFE, retry=retry, tolerate_suspended=True,
                             protocol="kazoo")
    aio.FairLock(zk, "/p", "id", host="h", acl=OPEN_ACL_UNSAFE, retry=retry, tolerate_suspended=True,
                 protocol="kazoo")
    aio.ExclusiveLock(zk, "/p", "id", host="h", acl=OPEN_ACL_UNSAFE, retry=retry, tolerate_suspended=True)
    aio.ReadWriteLock(zk, "/p", "id", host="h", acl=OPEN_ACL_UNSAFE, retry=retry, tolerate_suspended=True,
                      protocol="curator")
    aio.Semaphore(zk, "/p", 3, "id", host="h", acl=OPEN_ACL_UNSAFE, retry=retry, tolerate_suspended=True)
    aio.LeaderElection(zk, "/p", "id", host="h", acl=OPEN_ACL_UNSAFE, retry=retry, tolerate_suspended=True,
                       protocol="kazoo")
    zkrecipes.MultiLock([zkrecipes.FairLock(zk, "/p"), zkrecipes.Semaphore(zk, "/q", 2)])
    aio.MultiLock([aio.FairLock(zk, "/p"), aio.ReadWriteLock(zk, "/q").read()])


def misspelt(zk: KazooClient) -> None:
    zkrecipes.FairLock(zk, "/p", hots="h")  # type: ignore[call-arg]
    zkrecipes.ExclusiveLock(zk, "/p", retries=None)  # type: ignore[call-arg]
    zkrecipes.ReadLock(zk, "/p", acls=None)  # type: ignore[call-arg]
    zkrecipes.WriteLock(zk, "/p", acls=None)  # type: ignore[call-arg]
    zkrecipes.ReadWriteLock(zk, "/p", tolerate_suspend=True)  # type: ignore[call-arg]
    zkrecipes.Semaphore(zk, "/p", 2, protocl="zkrecipes")  # type: ignore[call-arg]
    zkrecipes.LeaderElection(zk, "/p", hots="h")  # type: ignore[call-arg]
    aio.FairLock(zk, "/p", hots="h")  # type: ignore[call-arg]
    aio.ExclusiveLock(zk, "/p", retries=None)  # type: ignore[call-arg]
    aio.ReadLock(zk, "/p", acls=None)  # type: ignore[call-arg]
    aio.WriteLock(zk, "/p", acls=None)  # type: ignore[call-arg]
    aio.ReadWriteLock(zk, "/p", tolerate_suspend=True)  # type: ignore[call-arg]
    aio.Semaphore(zk, "/p", 2, protocl="zkrecipes")  # type: ignore[call-arg]
    aio.LeaderElection(zk, "/p", hots="h")  # type: ignore[call-arg]
    zkrecipes.MultiLock(lock=[])  # type: ignore[call-arg]
    zkrecipes.Semaphore(zk, "/p", "2")  # type: ignore[arg-type]
    aio.FairLock(zk, "/p", tolerate_suspended="yes")  # type: ignore[arg-type]


def plain_with_on_aio(zk: KazooClient) -> None:
    """A plain ``with`` on an asyncio object stays a type error (the runtime TypeError's ``__enter__`` is
    hidden from type checkers)."""
    with aio.FairLock(zk, "/p"):  # type: ignore[attr-defined]
        pass
