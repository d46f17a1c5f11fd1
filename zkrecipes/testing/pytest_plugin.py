"""pytest plugin (entry point ``pytest11``): a session-wide ZooKeeper ensemble and per-test clients.

Fixtures:

- ``zk_ensemble`` (session): a 3-server :class:`~zkrecipes.testing.Ensemble` started once, or the
  external ensemble named by ``ZK_HOSTS`` (see :func:`~zkrecipes.testing.ensemble_from_env`).
- ``zk_local_ensemble``: the same ensemble, for tests that kill, stop or pause servers: the local one,
  or a :class:`~zkrecipes.testing.DockerEnsemble` (``ZK_HOSTS`` with ``ZK_DOCKER_CONTAINERS``);
  skipped with a reason for any other external ensemble.
- ``zk_namespace``: a fresh chroot path for the test, e.g. ``/zkrecipes-test/test_x-1a2b3c``.
- ``zk``: a started ``KazooClient`` chrooted to ``zk_namespace``.
- ``zk_factory``: ``zk_factory(**kazoo_kwargs)`` makes more started clients on the same chroot, each
  with its own session; ``zk_factory(hosts=...)`` connects elsewhere (e.g. through a ``Partition``).
  All are closed at the end of the test. A session timeout the servers would not grant
  (``minSessionTimeout``/``maxSessionTimeout``, read with ``conf``) skips the test with a reason.
- ``zk_reaps_containers``: skips the test unless the servers reap empty container nodes within
  seconds (``znode.container.checkIntervalMs``).
- ``zk_tls_ensemble`` (session): a one-server ensemble with mutual TLS on ``secure_hosts``
  (``client_tls``: a client's kazoo keyword arguments), started the first time a test asks for it.
- ``zk_sasl_ensemble`` (session): a one-server ensemble that requires SASL DIGEST-MD5 of every session,
  users ``alice`` and ``bob`` with random passwords (``sasl_users``, ``client_sasl(user)``).
"""

from __future__ import annotations

import os
import re
import secrets
import time
import uuid
from typing import Any, Callable, Dict, Iterator, Optional, Union

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import OPEN_ACL_UNSAFE

from .._kazoo import create_container
from ._proc import ZooKeeperNotFound
from .ensemble import Ensemble
from .external import DockerEnsemble, ExternalEnsemble, ensemble_from_env

NAMESPACE_ROOT = "/zkrecipes-test"
REAP_PROBE_SECONDS = 5.0

AnyEnsemble = Union[Ensemble, ExternalEnsemble]


@pytest.fixture(scope="session")
def zk_ensemble() -> Iterator[AnyEnsemble]:
    """The session's ZooKeeper ensemble: 3 local servers started once (tick 200 ms), or ``ZK_HOSTS``."""
    external = ensemble_from_env()
    if external is not None:
        yield external
        return
    try:
        ens = Ensemble(size=3, tick_ms=200)
    except ZooKeeperNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    with ens:
        yield ens


@pytest.fixture
def zk_local_ensemble(zk_ensemble: AnyEnsemble) -> Iterator[Union[Ensemble, DockerEnsemble]]:
    """An ensemble whose servers the test may kill, stop or pause: the local one, or the Docker one.

    Skipped for an external ensemble without ``ZK_DOCKER_CONTAINERS``. After the test every server is
    running and serving again, whatever the test did.
    """
    if not isinstance(zk_ensemble, (Ensemble, DockerEnsemble)):
        pytest.skip(
            f"needs servers it can kill/stop; ZK_HOSTS={zk_ensemble.hosts!r} is external "
            "(ZK_DOCKER_CONTAINERS names none of its containers)"
        )
    yield zk_ensemble
    for i in range(zk_ensemble.size):
        zk_ensemble.resume(i)
    zk_ensemble.start()


@pytest.fixture
def zk_namespace(request: pytest.FixtureRequest, zk_ensemble: AnyEnsemble) -> Iterator[str]:
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
def zk_factory(zk_ensemble: AnyEnsemble, zk_namespace: str) -> Iterator[Callable[..., KazooClient]]:
    """``make(hosts=None, start=True, **kazoo_kwargs)``: more clients on the test's chroot, each with its
    own session (default session timeout 10 s); all stopped and closed after the test. A session
    timeout outside the servers' ``minSessionTimeout`` .. ``maxSessionTimeout`` skips the test."""
    clients: list[KazooClient] = []

    def make(hosts: Optional[str] = None, start: bool = True, **kwargs: Any) -> KazooClient:
        kwargs.setdefault("timeout", 10.0)
        _require_session_timeout(zk_ensemble, kwargs["timeout"])
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
def zk(zk_factory: Callable[..., KazooClient]) -> KazooClient:
    """A started KazooClient chrooted to ``zk_namespace``."""
    return zk_factory()


def _require_session_timeout(ensemble: AnyEnsemble, seconds: float) -> None:
    """Skip the test if the servers would not grant a ``seconds`` session timeout (they would clamp it)."""
    if isinstance(ensemble, Ensemble):
        low, high = 2 * ensemble.tick_ms, ensemble.max_session_ms
    else:
        low, high = ensemble.session_timeout_bounds()
    if not low <= seconds * 1000 <= high:
        pytest.skip(
            f"needs a {seconds:g} s session timeout; the servers of {ensemble.hosts!r} grant "
            f"minSessionTimeout={low} .. maxSessionTimeout={high} ms (conf)"
        )


_reap_seconds: Dict[str, Optional[float]] = {}


@pytest.fixture
def zk_reaps_containers(zk_ensemble: AnyEnsemble) -> None:
    """Skip the test unless the servers delete an emptied container node within a few seconds.

    Lock parents are container nodes; ZooKeeper's leader deletes empty ones every
    ``znode.container.checkIntervalMs`` (a JVM system property, default 60 s, which ``conf`` does not
    report). The local ensemble sets 500 ms; an external one is measured with a probe node, once per
    session.
    """
    if isinstance(zk_ensemble, Ensemble):
        return
    if zk_ensemble.hosts not in _reap_seconds:
        _reap_seconds[zk_ensemble.hosts] = _probe_container_reaping(zk_ensemble.hosts)
    if _reap_seconds[zk_ensemble.hosts] is None:
        pytest.skip(
            f"the servers of {zk_ensemble.hosts!r} did not delete an emptied container node within "
            f"{REAP_PROBE_SECONDS:g} s: their znode.container.checkIntervalMs is longer "
            "(docker/docker-compose.yml sets -Dznode.container.checkIntervalMs=500 in JVMFLAGS)"
        )


def _probe_container_reaping(hosts: str) -> Optional[float]:
    """Seconds until an emptied container node is gone, or None if it is still there after the probe."""
    client = KazooClient(hosts=hosts)
    client.start(timeout=30)
    path = f"{NAMESPACE_ROOT}/container-probe-{uuid.uuid4().hex[:8]}"
    try:
        client.ensure_path(NAMESPACE_ROOT)
        create_container(client, path, OPEN_ACL_UNSAFE).get(timeout=30)
        client.create(path + "/child")  # the server reaps only containers that have had a child
        client.delete(path + "/child")
        t0 = time.monotonic()
        while time.monotonic() - t0 < REAP_PROBE_SECONDS:
            if client.exists(path) is None:
                return time.monotonic() - t0
            time.sleep(0.05)
        return None
    finally:
        try:
            client.delete(path)
        except NoNodeError:
            pass
        client.stop()
        client.close()


def _local(what: str, **kwargs: Any) -> Iterator[Ensemble]:
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
