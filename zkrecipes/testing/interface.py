"""The one interface of the kit's ensembles, whoever runs the servers.

A test written against these members runs unchanged on every ensemble the ``zk_ensemble`` and
``zk_local_ensemble`` fixtures may hand it:

- :class:`EnsembleView` -- what every ensemble tells about its servers: connect strings, four-letter
  words, settings, modes, the leader. :class:`~zkrecipes.testing.Ensemble`,
  :class:`~zkrecipes.testing.ExternalEnsemble` and :class:`~zkrecipes.testing.DockerEnsemble` have it.
- :class:`ControllableEnsemble` -- an :class:`EnsembleView` whose servers can also be stopped, killed,
  paused, resumed and started: :class:`~zkrecipes.testing.Ensemble` (local processes) and
  :class:`~zkrecipes.testing.DockerEnsemble` (containers).

Both are structural types (``typing.Protocol``): a class has the interface by having the members, and
mypy checks that the three classes do (at the end of this module). Anything else on a class (the local
ensemble's ``client_ports``, ``tick_ms``, ``workdir``; the Docker one's ``containers``) is its own, and a
test that uses it runs on that kind of ensemble only. Server ``i`` is always the ``i``-th server of
``hosts`` (0-based); a bad index raises ValueError naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Protocol, Sequence, Tuple


class EnsembleView(Protocol):
    """What every ensemble tells about its servers. Nothing here changes a server."""

    @property
    def size(self) -> int:
        """Number of servers."""
        ...

    @property
    def hosts(self) -> str:
        """Connect string of all servers, in server order, without a chroot."""
        ...

    def host(self, i: int) -> str:
        """Connect string of server ``i`` alone (``host:port``)."""
        ...

    def four_letter(self, i: int, word: str, timeout: float = 2.0) -> str:
        """Send a four-letter word (``srvr``, ``wchp``, ``cons`` ...) to server ``i``; its reply, '' if none."""
        ...

    def conf(self, i: int) -> Dict[str, str]:
        """Settings of server ``i`` from its ``conf`` four-letter word (``{}`` if it does not answer)."""
        ...

    def session_timeout_bounds(self) -> Tuple[int, int]:
        """``(minSessionTimeout, maxSessionTimeout)`` in ms: the session timeouts the servers grant."""
        ...

    def running(self, i: int) -> bool:
        """True while server ``i`` is up: its process or container exists (paused or not), or, for servers
        the kit does not control, it accepts connections."""
        ...

    def mode(self, i: int) -> Optional[str]:
        """``"leader"``, ``"follower"``, ``"standalone"`` or None if server ``i`` does not serve."""
        ...

    def serving(self, i: int) -> bool:
        """True when server ``i`` is in a quorum and answers clients."""
        ...

    def leader(self) -> Optional[int]:
        """Index of the ZooKeeper leader (or the standalone server), or None if there is none now."""
        ...

    def wait_serving(self, indexes: Optional[Sequence[int]] = None, timeout: float = 60.0) -> None:
        """Wait until the given servers (default: all running ones) serve and a leader exists; TimeoutError
        after ``timeout`` seconds, RuntimeError at once if a server waited for has exited."""
        ...

    def close(self) -> None:
        """Release what the object started (servers it started itself); idempotent."""
        ...


class ControllableEnsemble(EnsembleView, Protocol):
    """An :class:`EnsembleView` whose servers the kit can take down and bring back.

    Each call returns once the server is in the new state (stopped, killed and gone, frozen, running).
    """

    def start(self, i: Optional[int] = None, wait: bool = True) -> ControllableEnsemble:
        """Start server ``i`` (or every stopped one) and, with ``wait``, wait until it serves; returns self."""
        ...

    def stop(self, i: int, timeout: float = 10.0) -> None:
        """Stop server ``i`` (SIGTERM, SIGKILL after ``timeout``) and wait until it has exited."""
        ...

    def kill(self, i: int) -> None:
        """Kill server ``i`` (SIGKILL: a crash) and wait until it has exited."""
        ...

    def pause(self, i: int) -> None:
        """Freeze server ``i`` (SIGSTOP, or the cgroup freezer); :meth:`resume` continues it."""
        ...

    def resume(self, i: int) -> None:
        """Continue a server frozen by :meth:`pause` (nothing for one that is not frozen)."""
        ...

    def pids(self) -> List[Optional[int]]:
        """Host process id of each server, None for one not running."""
        ...


if TYPE_CHECKING:  # mypy --strict holds each ensemble class to its interface (names, arguments, types)
    from .ensemble import Ensemble
    from .external import DockerEnsemble, ExternalEnsemble

    def _conforms(local: Ensemble, docker: DockerEnsemble, external: ExternalEnsemble) -> None:
        controllable: List[ControllableEnsemble] = [local, docker]
        views: List[EnsembleView] = [local, docker, external]
        del controllable, views
