"""README.md's Python blocks, run as written on an empty namespace of the real ensemble.

Each block is taken from README.md verbatim; the only change is the connection string
(``hosts="127.0.0.1:2181"`` -> the test ensemble with the test's chroot). The names the README leaves to
the reader (``store``, ``data``, ``call_payment_api``, ``serve_as_leader``, ``db``) are given as recording
stand-ins, and each test asserts what the README says the code does. A README edit that breaks a block
fails here.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest
from kazoo.exceptions import NoNodeError
from lockhelpers import children

from zkrecipes import TransactionFailed

README = Path(__file__).resolve().parent.parent / "README.md"
README_HOSTS = 'hosts="127.0.0.1:2181"'
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def readme_block(marker: str) -> str:
    """The one ```python block of README.md that contains ``marker``."""
    blocks = [b for b in BLOCK.findall(README.read_text()) if marker in b]
    assert len(blocks) == 1, f"README.md has {len(blocks)} python blocks containing {marker!r}"
    return blocks[0]


def test_readme_python_blocks_are_all_covered():
    """Every ```python block of README.md is one of the blocks run below (a new block gets a test)."""
    blocks = BLOCK.findall(README.read_text())
    markers = ("lock.transaction()", "from zkrecipes import aio", "from zkrecipes.testing import Ensemble")
    covered = [b for b in blocks if any(m in b for m in markers)]
    assert len(blocks) == 3 and covered == blocks, f"{len(blocks)} blocks; uncovered: {set(blocks) - set(covered)}"


def test_readme_threaded_block_runs_on_an_empty_namespace(zk_ensemble, zk_namespace, zk):
    """The "In Python" block, fenced write included, top to bottom on a chroot with nothing in it."""
    code = readme_block("lock.transaction()")
    assert code.count(README_HOSTS) == 1, f"README's client no longer connects with {README_HOSTS}"
    code = code.replace(README_HOSTS, f"hosts={zk_ensemble.hosts + zk_namespace!r}")
    assert zk.get_children("/") == []  # empty: nothing made beforehand
    writes: List[Dict[str, Any]] = []
    calls: List[str] = []
    ns: Dict[str, Any] = {"__name__": "readme"}

    def serve_as_leader() -> None:
        assert ns["election"].is_leader
        calls.append("leader")

    def transfer() -> None:  # under the MultiLock: one node on each path, a is taken before b
        nodes = {p: children(zk, p) for p in ("/accounts/a", "/accounts/b")}
        assert [len(n) for n in nodes.values()] == [1, 1], nodes
        czxid = {p: zk.exists(f"{p}/{n[0]}").czxid for p, n in nodes.items()}
        assert czxid["/accounts/a"] < czxid["/accounts/b"], czxid  # the global order, not the list's
        calls.append("transfer")

    ns.update(
        store=SimpleNamespace(write=lambda data, fencing_token: writes.append({"data": data, "token": fencing_token})),
        data=b"report",
        call_payment_api=lambda: calls.append("payment"),
        serve_as_leader=serve_as_leader,
        transfer=transfer,
    )
    try:
        exec(compile(code, f"{README}:In Python", "exec"), ns)
    finally:
        if "zk" in ns:  # the README's own client
            ns["zk"].stop()
            ns["zk"].close()
    assert [w["data"] for w in writes] == [b"report"] and isinstance(writes[0]["token"], int), writes
    assert calls == ["payment", "transfer", "leader"]
    assert children(zk, "/accounts/a") == children(zk, "/accounts/b") == []  # the MultiLock released both
    assert zk.get("/config/current")[0] == b"v2"  # the fenced write was applied
    assert not ns["lock"].is_held


def test_readme_asyncio_block_runs_and_a_refused_op_raises(zk, zk_namespace):
    """The asyncio block: handle() writes with a token; charge() records a charge under an existing order,
    and for an order with no node raises TransactionFailed with nothing applied, as its comment says."""
    ns: Dict[str, Any] = {"__name__": "readme_aio", "zk": zk}
    writes: List[Any] = []
    payments: List[str] = []

    async def db_write(*args: Any, fencing_token: int) -> None:
        writes.append(fencing_token)

    async def call_payment_api(order: str) -> None:
        payments.append(order)

    ns.update(db=SimpleNamespace(write=db_write), call_payment_api=call_payment_api)
    exec(compile(readme_block("from zkrecipes import aio"), f"{README}:asyncio", "exec"), ns)

    asyncio.run(ns["handle"]("acct-1"))
    assert len(writes) == 1 and isinstance(writes[0], int)

    zk.ensure_path("/orders/42")  # the order exists before it is charged
    asyncio.run(ns["charge"]("42"))
    assert zk.exists("/orders/42/charged") is not None

    with pytest.raises(TransactionFailed) as failed:
        asyncio.run(ns["charge"]("43"))  # no /orders/43: ZooKeeper refuses the create
    assert isinstance(failed.value.error, NoNodeError), failed.value
    assert zk.exists("/orders/43") is None
    assert payments == ["42", "43"]
    assert zk.get_children("/sem/payment-api") == []  # every lease released, the failed one too


def test_readme_ensemble_block_starts_zookeeper_and_the_holder_is_told(monkeypatch):
    """The test kit block, as written: it starts its own ZooKeeper, expires the session and asserts the
    holder was told; the server is stopped and its directory deleted at the end."""
    import zkrecipes.testing

    made: List[Any] = []

    class Recorded(zkrecipes.testing.Ensemble):  # the block's Ensemble, kept to look at afterwards
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(zkrecipes.testing, "Ensemble", Recorded)  # what the block imports
    ns: Dict[str, Any] = {"__name__": "readme_ensemble"}
    try:
        exec(compile(readme_block("from zkrecipes.testing import Ensemble"), f"{README}:Ensemble", "exec"), ns)
    finally:
        if "zk" in ns:
            ns["zk"].stop()
            ns["zk"].close()
    assert ns["lock"].state == "lost" and len(made) == 1
    assert made[0]._closed and not os.path.exists(made[0].workdir)
