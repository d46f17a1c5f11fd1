"""A pytest plugin (``-p kazoo_adapter``) that runs kazoo's own lock and election tests, unmodified, on
zkrecipes' recipes in object mode (tests/test_kazoo_suite.py starts it in a subprocess).

* ``client.Lock``, ``ReadLock``, ``WriteLock``, ``Semaphore`` and ``Election`` of every client kazoo's harness
  makes return the classes below: kazoo's API (names, return values, exceptions) over zkrecipes'
  :class:`~zkrecipes.FairLock`, :class:`~zkrecipes.ReadWriteLock`'s sides and :class:`~zkrecipes.Semaphore`
  built with ``owner="object"``, and :class:`~zkrecipes.LeaderElection`. They translate conventions only
  (kazoo raises ``LockTimeout``/``CancelledError`` where zkrecipes returns False; kazoo's ``release()``
  returns a bool; ``contenders()`` lists identifiers); the waiting, the nodes and the hand-offs are ours.
* kazoo's harness connects to ``ZKRECIPES_KAZOO_HOSTS`` (a server of the test session's ensemble) instead
  of starting servers of its own, so its certificate generation (pyOpenSSL, pyjks) never runs: those two
  modules are only imported by ``kazoo.testing.common``, and stand-ins are put in their place when they
  are not installed.
"""

from __future__ import annotations

import functools
import os
import sys
import types
from typing import Any, Callable, Iterator, List, Optional

for _name in ("OpenSSL", "jks"):  # imported by kazoo.testing.common, used only to make TLS certificates
    try:
        __import__(_name)
    except ImportError:
        _stub = types.ModuleType(_name)

        def _absent(attr: str, _module: str = _name) -> Any:
            raise AttributeError(f"{_module} is not installed: kazoo's harness makes no certificates here")

        _stub.__getattr__ = _absent  # type: ignore[method-assign]
        sys.modules[_name] = _stub

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import CancelledError  # noqa: E402
from kazoo.exceptions import LockTimeout as KazooLockTimeout  # noqa: E402
from kazoo.testing import harness  # noqa: E402

import zkrecipes  # noqa: E402

HOSTS = os.environ["ZKRECIPES_KAZOO_HOSTS"]


class _Server:
    running = True
    address = secure_address = HOSTS


class _Cluster:
    """The test session's server, where kazoo's harness expects a cluster it started."""

    def __iter__(self) -> Iterator[_Server]:
        return iter([_Server()])

    def start(self) -> None:
        pass

    stop = terminate = reset = start

    def get_logs(self) -> List[str]:
        return []


harness.get_global_cluster = lambda: _Cluster()


class _Held:
    """kazoo's lock API over an object-owned zkrecipes lock ``self._lock``."""

    _lock: Any

    def __init__(self) -> None:
        self.cancelled = False

    @property
    def is_acquired(self) -> bool:
        return self._lock.node is not None

    @property
    def node(self) -> Optional[str]:
        node = self._lock.node
        return None if node is None else node.rsplit("/", 1)[1]

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None, ephemeral: bool = True) -> bool:
        if not ephemeral:
            raise NotImplementedError("zkrecipes' nodes are ephemeral: a hold ends with its session")
        if not blocking:
            timeout = None  # (kazoo ignores a timeout with blocking=False)
        if self._lock.acquire(blocking, timeout):
            return True
        if self.cancelled:  # kazoo raises where zkrecipes returns False
            self.cancelled = False
            raise CancelledError()
        if blocking and timeout is not None and not self.is_acquired:  # kazoo: waited for another's node
            raise KazooLockTimeout(f"Failed to acquire lock on {self._lock.path} after {timeout} seconds")
        return False  # a try, or a wait for this same object (kazoo returns False then)

    def release(self) -> bool:
        if self._lock.node is None:
            return False
        self._lock.release()
        return True

    def cancel(self) -> None:
        self.cancelled = True
        self._lock.cancel()

    def contenders(self) -> List[str]:
        return [c.identifier or "" for c in self._lock.contenders()]

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class Lock(_Held):
    def __init__(self, client: KazooClient, path: str, identifier: Optional[str] = None, **_: Any) -> None:
        super().__init__()
        self._lock = zkrecipes.FairLock(client, path, identifier, protocol="kazoo", owner="object")


class ReadLock(_Held):
    def __init__(self, client: KazooClient, path: str, identifier: Optional[str] = None, **_: Any) -> None:
        super().__init__()
        self._lock = zkrecipes.ReadWriteLock(client, path, identifier, protocol="kazoo", owner="object").read()


class WriteLock(_Held):
    def __init__(self, client: KazooClient, path: str, identifier: Optional[str] = None, **_: Any) -> None:
        super().__init__()
        self._lock = zkrecipes.ReadWriteLock(client, path, identifier, protocol="kazoo", owner="object").write()


class Semaphore(_Held):
    def __init__(self, client: KazooClient, path: str, identifier: Optional[str] = None, max_leases: int = 1) -> None:
        super().__init__()
        self._lock = zkrecipes.Semaphore(client, path, max_leases, identifier, owner="object")

    def lease_holders(self) -> List[str]:
        return list(self._lock.lease_holders())


class Election:
    def __init__(self, client: KazooClient, path: str, identifier: Optional[str] = None) -> None:
        self._election = zkrecipes.LeaderElection(client, path, identifier, protocol="kazoo")

    def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if not callable(func):  # zkrecipes: TypeError, as Python's own calls; kazoo: ValueError
            raise ValueError("leader function is not callable")
        self._election.run(func, *args, **kwargs)  # a cancel() returns None, as kazoo's does

    def cancel(self) -> None:
        self._election.cancel()

    def contenders(self) -> List[str]:
        return [c.identifier or "" for c in self._election.contenders()]


class AdaptedClient(KazooClient):  # type: ignore[misc]  # kazoo is untyped
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, recipe in (("Lock", Lock), ("ReadLock", ReadLock), ("WriteLock", WriteLock),
                             ("Semaphore", Semaphore), ("Election", Election)):
            setattr(self, name, functools.partial(recipe, self))


harness.KazooClient = AdaptedClient  # every client kazoo's harness makes (self.client, _get_client())
