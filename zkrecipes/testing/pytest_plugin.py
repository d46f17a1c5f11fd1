"""pytest plugin (entry point ``pytest11``): a session-wide ZooKeeper ensemble and per-test clients.

Fixtures:

- ``zk_ensemble`` (session): a 3-server :class:`~zkrecipes.testing.Ensemble` started once, or the
  external ensemble named by ``ZK_HOSTS``.
- ``zk_local_ensemble``: the same ensemble, for tests that kill, stop or pause servers; skipped with a
  reason when ``ZK_HOSTS`` points at an external ensemble.
- ``zk_namespace``: a fresh chroot path for the test, e.g. ``/zkrecipes-test/test_x-1a2b3c``.
- ``zk``: a started ``KazooClient`` chrooted to ``zk_namespace``.
- ``zk_factory``: ``zk_factory(**kazoo_kwargs)`` makes more started clients on the same chroot, each
  with its own session; ``zk_factory(hosts=...)`` connects elsewhere (e.g. through a ``Partition``).
  All are closed at the end of the test.
- ``zk_tls_ensemble`` (session): a one-server ensemble with mutual TLS on ``secure_hosts``
  (``client_tls``: a client's kazoo keyword arguments), started the first time a test asks for it.
- ``zk_sasl_ensemble`` (session): a one-server ensemble that requires SASL DIGEST-MD5 of every session,
  users ``alice`` and ``bob`` with random passwords (``sasl_users``, ``client_sasl(user)``).
"""

from __future__ import annotations

import os
import re
import secrets
import uuid
from typing import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from .ensemble import Ensemble, ZooKeeperNotFound

NAMESPACE_ROOT = "/zkrecipes-test"


_CONTROL = ("start", "stop", "kill", "pause", "resume", "leader", "mode", "serving", "wait_serving", "host")


class ExternalEnsemble:
    """Stands in for :class:`Ensemble` when ``ZK_HOSTS`` names an ensemble this process did not start.

    Only ``hosts`` is real; calling a server-control method skips the test with a reason.
    """

    def __init__(self, hosts: str) -> None:
        self.hosts = hosts

    def __getattr__(self, name: str):
        if name not in _CONTROL:
            raise AttributeError(name)
        pytest.skip(f"needs a local ensemble to control servers ({name}); ZK_HOSTS={self.hosts!r} is external")


@pytest.fixture(scope="session")
def zk_ensemble() -> Iterator[object]:
    """The session's ZooKeeper ensemble: 3 local servers started once (tick 200 ms), or ``ZK_HOSTS``."""
    hosts = os.environ.get("ZK_HOSTS")
    if hosts:
        yield ExternalEnsemble(hosts)
        return
    try:
        ens = Ensemble(size=3, tick_ms=200)
    except ZooKeeperNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    with ens:
        yield ens


@pytest.fixture
def zk_local_ensemble(zk_ensemble) -> Iterator[Ensemble]:
    """The local ensemble, for tests that kill, stop or pause servers (skipped with ``ZK_HOSTS``).

    After the test every server is running and serving again, whatever the test did.
    """
    if isinstance(zk_ensemble, ExternalEnsemble):
        pytest.skip(f"needs a local ensemble to kill/stop servers; ZK_HOSTS={zk_ensemble.hosts!r} is external")
    yield zk_ensemble
    for i in range(zk_ensemble.size):
        zk_ensemble.resume(i)
    zk_ensemble.start()


@pytest.fixture
def zk_namespace(request, zk_ensemble) -> Iterator[str]:
    """A fresh chroot path for this test, created before it and deleted (recursively) after it."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    path = f"{NAMESPACE_ROOT}/{name}-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=zk_ensemble.hosts)
    root.start(timeout=30)
    try:
        root.ensure_path(path)
    finally:
        root.stop()
        root.close()
    yield path
    root = KazooClient(hosts=zk_ensemble.hosts)
    try:
        root.start(timeout=30)
        root.delete(path, recursive=True)
    except Exception:  # best effort: a test may have left the ensemble without quorum
        pass
    finally:
        root.stop()
        root.close()


@pytest.fixture
def zk_factory(zk_ensemble, zk_namespace) -> Iterator[Callable[..., KazooClient]]:
    """``make(hosts=None, start=True, **kazoo_kwargs)``: more clients on the test's chroot, each with its
    own session (default session timeout 10 s); all stopped and closed after the test."""
    clients: list[KazooClient] = []

    def make(hosts: str | None = None, start: bool = True, **kwargs) -> KazooClient:
        kwargs.setdefault("timeout", 10.0)
        client = KazooClient(hosts=(hosts or zk_ensemble.hosts) + zk_namespace, **kwargs)
        clients.append(client)
        if start:
            client.start(timeout=30)
        return client

    yield make
    for c in clients:
        try:
            c.stop()
            c.close()
        except Exception:  # keep closing the others
            pass


@pytest.fixture
def zk(zk_factory) -> KazooClient:
    """A started KazooClient chrooted to ``zk_namespace``."""
    return zk_factory()


def _local(what: str, **kwargs) -> Iterator[Ensemble]:
    try:
        ens = Ensemble(size=1, tick_ms=200, **kwargs)
    except ZooKeeperNotFound as exc:
        if os.environ.get("ZK_HOSTS"):  # an external ensemble cannot be reconfigured: say so, do not fail
            pytest.skip(f"{what} needs a local ZooKeeper install ({exc})")
        pytest.fail(str(exc), pytrace=False)
    with ens:
        yield ens


@pytest.fixture(scope="session")
def zk_tls_ensemble() -> Iterator[Ensemble]:
    """One local server with mutual TLS on ``secure_hosts`` (``client_tls``: kazoo keyword arguments);
    its plain ``hosts`` port stays open. Started once, the first time a test asks for it."""
    yield from _local("a TLS ensemble", tls=True)


@pytest.fixture(scope="session")
def zk_sasl_ensemble() -> Iterator[Ensemble]:
    """One local server that requires SASL DIGEST-MD5 of every session, for the users ``alice`` and ``bob``
    (random passwords in ``sasl_users``; ``client_sasl("bob")`` gives kazoo keyword arguments). Started
    once, the first time a test asks for it."""
    users = {name: secrets.token_urlsafe(12) for name in ("alice", "bob")}
    yield from _local("a SASL ensemble", sasl_users=users)
