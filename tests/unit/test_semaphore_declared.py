"""Two Semaphore objects on one client and path in one process must agree on max_leases (refused at
construction, before any request, in both fronts)."""

from __future__ import annotations

import gc

import pytest
from kazoo.client import KazooClient

from zkrecipes import Semaphore, aio


def test_a_second_max_leases_on_one_client_and_path_is_refused() -> None:
    client = KazooClient()  # never started: the refusal needs no request
    first = Semaphore(client, "/s", 3)
    same = aio.Semaphore(client, "/s", 3)  # agrees: fine
    with pytest.raises(ValueError, match="max_leases 5 disagrees with 3"):
        Semaphore(client, "/s", 5)
    with pytest.raises(ValueError, match="max_leases 2 disagrees with 3"):
        aio.Semaphore(client, "/s", 2)
    assert Semaphore(client, "/other", 5).max_leases == 5  # another path: its own value
    assert Semaphore(KazooClient(), "/s", 5).max_leases == 5  # another client: another session's business
    del first, same
    gc.collect()
    assert Semaphore(client, "/s", 5).max_leases == 5  # nobody left disagreeing
