"""ZooKeeper ensembles this process did not start: named by a connect string, or running in Docker.

:class:`ExternalEnsemble` stands for the servers of a connect string such as ``ZK_HOSTS``: it tells
their mode, the leader and their settings (four-letter words) but cannot control them.
:class:`DockerEnsemble` is one whose servers are Docker containers (``docker/docker-compose.yml``):
it also stops, kills, pauses and starts them through the ``docker`` command, like
:class:`~zkrecipes.testing.Ensemble` does with local processes. :func:`ensemble_from_env` picks one
from ``ZK_HOSTS`` and ``ZK_DOCKER_CONTAINERS``.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple, Union

from .ensemble import four_letter, leader_of, server_conf, wait_until_serving

log = logging.getLogger("zkrecipes.testing.external")

_SERVING = ("leader", "follower", "standalone")


def parse_hosts(hosts: str) -> List[Tuple[str, int]]:
    """``"h1:2181,h2:2182/chroot"`` -> ``[("h1", 2181), ("h2", 2182)]``; ValueError naming a bad part."""
    if not isinstance(hosts, str) or not hosts.strip():
        raise ValueError(f"hosts must be a connect string like '127.0.0.1:2181,127.0.0.1:2182', got {hosts!r}")
    out = []
    for part in hosts.split("/", 1)[0].split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad server {part!r} in connect string {hosts!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    return out


class ExternalEnsemble:
    """The ZooKeeper servers named by a connect string, started by someone else (``ZK_HOSTS``).

    Server ``i`` is the ``i``-th of the connect string. :meth:`mode`, :meth:`leader` and
    :meth:`wait_serving` ask the servers (``srvr``); :meth:`conf` reads a server's settings. This class
    cannot stop or start servers: see :class:`DockerEnsemble`. :meth:`close` does nothing (the servers
    are not ours), so the object can be used wherever an :class:`~zkrecipes.testing.Ensemble` is closed.
    It has the members of :class:`~zkrecipes.testing.EnsembleView`.
    """

    size: int
    """Number of servers."""
    servers: List[Tuple[str, int]]
    """``(host, client port)`` of each server, in the order of the connect string."""

    def __init__(self, hosts: str) -> None:
        self.servers = parse_hosts(hosts)
        self.size = len(self.servers)
        self._bounds: Optional[Tuple[int, int]] = None

    @property
    def hosts(self) -> str:
        """Connect string of all servers (without a chroot)."""
        return ",".join(f"{h}:{p}" for h, p in self.servers)

    def host(self, i: int) -> str:
        """Connect string of server ``i`` alone."""
        h, p = self.servers[self._index(i)]
        return f"{h}:{p}"

    def _index(self, i: int) -> int:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < self.size:
            raise ValueError(f"server index must be in 0..{self.size - 1}, got {i!r}")
        return i

    def four_letter(self, i: int, word: str, timeout: float = 2.0) -> str:
        """Send a four-letter word to server ``i`` and return its reply ('' if it does not answer)."""
        h, p = self.servers[self._index(i)]
        return four_letter(p, word, timeout=timeout, host=h)

    def conf(self, i: int) -> Dict[str, str]:
        """Settings of server ``i`` from its ``conf`` four-letter word (``{}`` if it does not answer)."""
        h, p = self.servers[self._index(i)]
        return server_conf(h, p)

    def session_timeout_bounds(self) -> Tuple[int, int]:
        """``(minSessionTimeout, maxSessionTimeout)`` in ms, as the first answering server reports them.

        Raises RuntimeError if no server answers ``conf`` (four-letter words not allowed?).
        """
        if self._bounds is None:
            for i in range(self.size):
                conf = self.conf(i)
                if "minSessionTimeout" in conf and "maxSessionTimeout" in conf:
                    self._bounds = (int(conf["minSessionTimeout"]), int(conf["maxSessionTimeout"]))
                    break
            else:
                raise RuntimeError(
                    f"no server of {self.hosts!r} answers the 'conf' four-letter word; "
                    "allow it with 4lw.commands.whitelist=* (ZOO_4LW_COMMANDS_WHITELIST)"
                )
        return self._bounds

    def running(self, i: int) -> bool:
        """True while server ``i`` accepts connections on its client port."""
        h, p = self.servers[self._index(i)]
        try:
            with socket.create_connection((h, p), timeout=1.0):
                return True
        except OSError:
            return False

    def mode(self, i: int) -> Optional[str]:
        """``"leader"``, ``"follower"``, ``"standalone"`` or None if server ``i`` does not serve."""
        for line in self.four_letter(i, "srvr", timeout=1.0).splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def serving(self, i: int) -> bool:
        """True when server ``i`` is in a quorum and answers clients."""
        return self.mode(i) in _SERVING

    def leader(self) -> Optional[int]:
        """Index of the ZooKeeper leader (or the standalone server), or None if there is none now."""
        return leader_of(self)

    def wait_serving(self, indexes: Optional[Sequence[int]] = None, timeout: float = 60.0) -> None:
        """Wait until the given servers (default: all running ones) serve and a leader exists."""
        idx = None if indexes is None else [self._index(k) for k in indexes]
        wait_until_serving(self, idx, timeout, self._check_alive, of=f" of {self.hosts!r}")

    def _check_alive(self, idx: Sequence[int]) -> None:
        """Raise if a server waited for can no longer come up (nothing to check without control)."""

    def close(self) -> None:
        """Nothing to do: the servers belong to whoever started them."""

    def __enter__(self) -> "ExternalEnsemble":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} size={self.size} hosts={self.hosts!r}>"


class DockerEnsemble(ExternalEnsemble):
    """An ensemble of ZooKeeper servers in Docker containers, controlled through the ``docker`` command.

    ``containers[i]`` is the container (name or id) of the ``i``-th server of ``hosts``. Besides what
    :class:`ExternalEnsemble` tells, :meth:`stop` (``docker stop``), :meth:`kill` (``docker kill``, a
    crash), :meth:`pause`/:meth:`resume` (``docker pause``/``unpause``: the cgroup freezer, like
    ``SIGSTOP``) and :meth:`start` (``docker start``) act like :class:`~zkrecipes.testing.Ensemble`'s: it
    has the members of :class:`~zkrecipes.testing.ControllableEnsemble`.
    The ``docker`` command reaches the engine named by ``DOCKER_HOST`` (or its default socket). A
    failing ``docker`` call raises RuntimeError with its message. :meth:`close` leaves the containers
    as they are: they belong to ``docker compose``.
    """

    def __init__(self, hosts: str, containers: Sequence[str], *, docker: str = "docker",
                 start_timeout: float = 90.0) -> None:
        super().__init__(hosts)
        if isinstance(containers, str) or not all(isinstance(c, str) and c for c in containers):
            raise ValueError(f"containers must be a sequence of container names, got {containers!r}")
        if len(containers) != self.size:
            raise ValueError(
                f"{len(containers)} containers {list(containers)!r} for the {self.size} servers of {self.hosts!r}; "
                "give one container per server, in the same order"
            )
        exe = shutil.which(docker)
        if exe is None:
            raise RuntimeError(f"no {docker!r} command on PATH to control the containers {list(containers)!r}")
        self.containers = list(containers)
        self.docker = exe
        self.start_timeout = start_timeout

    def _docker(self, *args: str, timeout: float = 120.0) -> str:
        cmd = [self.docker, *args]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{' '.join(cmd)!r} did not finish within {timeout} s") from None
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)!r} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout.strip()

    def _state(self, i: int) -> Tuple[str, int]:
        """(status, host pid) of server ``i``'s container: status is running, paused, exited, ..."""
        out = self._docker("inspect", "-f", "{{.State.Status}} {{.State.Pid}}", self.containers[self._index(i)])
        status, _, pid = out.partition(" ")
        return status, int(pid or 0)

    def running(self, i: int) -> bool:
        """True while server ``i``'s container runs (also while it is paused)."""
        return self._state(i)[0] in ("running", "paused")

    def pids(self) -> List[Optional[int]]:
        """Host process ids of the servers (the JVM is the container's main process); None if not running."""
        out: List[Optional[int]] = []
        for i in range(self.size):
            status, pid = self._state(i)
            out.append(pid if status in ("running", "paused") and pid else None)
        return out

    def start(self, i: Optional[int] = None, wait: bool = True) -> "DockerEnsemble":
        """Start server ``i`` (or every stopped one) and, with ``wait``, wait until it serves."""
        indexes = range(self.size) if i is None else [self._index(i)]
        for k in indexes:
            if not self.running(k):
                self._docker("start", self.containers[k])
                log.debug("started container %s (server %d)", self.containers[k], k)
        if wait:
            self.wait_serving(None if i is None else [i], timeout=self.start_timeout)
        return self

    def stop(self, i: int, timeout: float = 10.0) -> None:
        """Stop server ``i`` (``docker stop``: SIGTERM, SIGKILL after ``timeout``) and wait until it has exited."""
        self.resume(i)
        if self.running(i):
            self._docker("stop", "-t", str(max(0, int(timeout))), self.containers[i], timeout=timeout + 60)

    def kill(self, i: int) -> None:
        """Kill server ``i`` (``docker kill``: SIGKILL, a crash) and wait until it has exited."""
        self.resume(i)
        if self.running(i):
            self._docker("kill", self.containers[i])
            self._docker("wait", self.containers[i])

    def pause(self, i: int) -> None:
        """Freeze server ``i`` (``docker pause``); :meth:`resume` continues it."""
        if self._state(i)[0] == "running":
            self._docker("pause", self.containers[i])

    def resume(self, i: int) -> None:
        """Continue a server frozen by :meth:`pause` (``docker unpause``)."""
        if self._state(i)[0] == "paused":
            self._docker("unpause", self.containers[i])

    def _check_alive(self, idx: Sequence[int]) -> None:
        for k in idx:
            status, _ = self._state(k)
            if status in ("exited", "dead"):
                tail = self._docker("logs", "--tail", "20", self.containers[k])
                raise RuntimeError(f"ZooKeeper container {self.containers[k]} (server {k}) is {status}:\n{tail}")


def ensemble_from_env(environ: Optional[Dict[str, str]] = None) -> Union[ExternalEnsemble, DockerEnsemble, None]:
    """The external ensemble the environment names, or None without ``ZK_HOSTS``.

    ``ZK_HOSTS`` is the connect string; ``ZK_DOCKER_CONTAINERS`` (comma-separated, one container per
    server of ``ZK_HOSTS``, same order) makes it a :class:`DockerEnsemble` the kit can control.
    """
    env = os.environ if environ is None else environ
    hosts = env.get("ZK_HOSTS", "").strip()
    if not hosts:
        return None
    containers = [c.strip() for c in env.get("ZK_DOCKER_CONTAINERS", "").split(",") if c.strip()]
    if containers:
        return DockerEnsemble(hosts, containers)
    return ExternalEnsemble(hosts)
