"""Real ZooKeeper server processes on loopback, for tests, demos and benchmarks.

:class:`Ensemble` starts ``size`` ZooKeeper servers (``QuorumPeerMain``) from a local install on free
127.0.0.1 ports in a temporary directory, waits until a quorum serves, and tears every process and file
down on :meth:`Ensemble.close` -- also at interpreter exit and, for servers started from the main
thread, when the Python process dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from typing import IO, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from . import _secure as secure
from ._proc import ZooKeeperNotFound, die_with_parent

log = logging.getLogger("zkrecipes.testing.ensemble")

DEBIAN_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
INSTALL_HINT = (
    "no ZooKeeper install found. On Debian/Ubuntu as root: apt-get install -y zookeeper; "
    "elsewhere set ZOOKEEPER_HOME (an unpacked Apache ZooKeeper release) or ZOOKEEPER_CLASSPATH, "
    "or run an ensemble with 'docker compose -f docker/docker-compose.yml up -d' and set "
    "ZK_HOSTS=127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"
)


def find_classpath() -> str:
    """Return the Java classpath of a local ZooKeeper server install, or raise :class:`ZooKeeperNotFound`.

    Looks at ``ZOOKEEPER_CLASSPATH``, then ``ZOOKEEPER_HOME`` (``lib/*.jar`` of a release), then Debian's
    ``zookeeper`` package.
    """
    explicit = os.environ.get("ZOOKEEPER_CLASSPATH")
    if explicit:
        return explicit
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(glob.glob(os.path.join(home, "lib", "*.jar")) + glob.glob(os.path.join(home, "*.jar")))
        if not jars:
            raise ZooKeeperNotFound(f"ZOOKEEPER_HOME={home!r} holds no jar files; " + INSTALL_HINT)
        return os.pathsep.join([os.path.join(home, "conf")] + jars)
    if os.path.exists("/usr/share/java/zookeeper.jar"):
        return DEBIAN_CLASSPATH
    raise ZooKeeperNotFound(INSTALL_HINT)


def find_java() -> str:
    """Return the ``java`` executable (``JAVA_HOME`` first), or raise :class:`ZooKeeperNotFound`."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    java = shutil.which("java")
    if not java:
        raise ZooKeeperNotFound("no 'java' executable on PATH; " + INSTALL_HINT)
    return java


def free_ports(n: int) -> list[int]:
    """Return ``n`` distinct TCP ports that are free on 127.0.0.1 right now."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def four_letter(port: int, word: str, timeout: float = 2.0, host: str = "127.0.0.1") -> str:
    """Send a ZooKeeper four-letter word (``ruok``, ``srvr``, ``wchc`` ...) and return the reply ('' on error)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def server_conf(host: str, port: int, timeout: float = 2.0) -> Dict[str, str]:
    """A server's settings as its ``conf`` four-letter word reports them (``{}`` if it does not answer).

    Keys are ZooKeeper's: ``tickTime``, ``minSessionTimeout``, ``maxSessionTimeout``, ``maxClientCnxns``...
    """
    conf = {}
    for line in four_letter(port, "conf", timeout=timeout, host=host).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            conf[key.strip()] = value.strip()
    return conf


def _server_mode(port: int) -> Optional[str]:
    for line in four_letter(port, "srvr", timeout=1.0).splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


class _Modes(Protocol):
    """What :func:`leader_of` and :func:`wait_until_serving` ask of an ensemble (a part of EnsembleView)."""

    @property
    def size(self) -> int: ...

    def running(self, i: int) -> bool: ...

    def mode(self, i: int) -> Optional[str]: ...

    def serving(self, i: int) -> bool: ...

    def leader(self) -> Optional[int]: ...


def leader_of(view: "_Modes") -> Optional[int]:
    """Index of ``view``'s ZooKeeper leader (or standalone server), or None if there is none now: the one
    implementation of ``leader()`` for every ensemble class."""
    for i in range(view.size):
        if view.mode(i) in ("leader", "standalone"):
            return i
    return None


def wait_until_serving(view: "_Modes", indexes: Optional[List[int]], timeout: float,
                       check_alive: Callable[[Sequence[int]], None], of: str = "", hint: str = "") -> None:
    """The one implementation of ``wait_serving()``: poll until the servers ``indexes`` (already checked;
    None: all running ones) serve and a leader exists; ``check_alive(idx)`` raises RuntimeError at once for
    a server that can no longer come up; TimeoutError after ``timeout`` seconds (``of`` and ``hint`` added
    to its message)."""
    deadline = time.monotonic() + timeout
    while True:
        if indexes is None:
            idx = [k for k in range(view.size) if view.running(k)]
        else:
            idx = indexes
        check_alive(idx)
        if all(view.serving(k) for k in idx) and view.leader() is not None:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"ZooKeeper servers {idx}{of} did not serve within {timeout} s{hint}")
        time.sleep(0.1)


_live: "weakref.WeakSet[Ensemble]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for ens in list(_live):
        ens.close()


class Ensemble:
    """A ZooKeeper ensemble of real server processes on 127.0.0.1.

    ``Ensemble(size=3)`` is a context manager; ``hosts`` is the connect string. ``tick_ms`` sets
    ``tickTime`` (session timeouts may range from 2 ticks to ``max_session_ms``); ``force_sync=False``
    skips the fsync per write (fine for tests, not for benchmarks that claim disk latency).
    ``stop(i)``/``kill(i)``/``start(i)`` take server index ``i`` (0-based); ``leader()`` is the index of
    the current ZooKeeper leader. Everything started is stopped and deleted by :meth:`close`. It has
    the members of :class:`~zkrecipes.testing.ControllableEnsemble`, as a
    :class:`~zkrecipes.testing.DockerEnsemble` has; ``client_ports`` (the servers' ports on 127.0.0.1)
    and the settings above are its own.

    Secured ensembles (see :doc:`/security`): ``tls=True`` makes a throwaway CA and certificates
    (``openssl``, ``keytool``) and has every server also listen with mutual TLS on ``secure_hosts``
    (the Netty server; ``client_tls`` holds a client's KazooClient keyword arguments); the plain ``hosts``
    stay open. ``sasl_users={"bob": "pw"}`` makes every server require SASL DIGEST-MD5 from each session
    (``enforce.auth``, ZooKeeper >= 3.7) for those users; ``client_sasl("bob")`` gives the keyword
    arguments (needs the ``pure-sasl`` package).

    ``extended_types=True`` (the default) starts the servers with ``-Dzookeeper.extendedTypesEnabled=true``,
    which ZooKeeper >= 3.5.3 needs for TTL nodes (``zkrecipes lock --once-per`` uses them for its done
    markers); ``False`` leaves it out, as a server configured by default runs.
    """

    size: int
    """Number of servers."""
    client_ports: List[int]
    """Client port of each server on 127.0.0.1, in server order."""

    def __init__(
        self,
        size: int = 3,
        *,
        force_sync: bool = False,
        tick_ms: int = 200,
        max_session_ms: int = 60000,
        start_timeout: float = 90.0,
        jvm_opts: Sequence[str] = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"),
        classpath: Optional[str] = None,
        workdir: Optional[str] = None,
        tls: bool = False,
        sasl_users: Optional[Mapping[str, str]] = None,
        extended_types: bool = True,
    ) -> None:
        if not isinstance(tls, bool):
            raise ValueError(f"tls must be a bool, got {tls!r}")
        self.sasl_users: Optional[Dict[str, str]] = None if sasl_users is None else secure.check_users(sasl_users)
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        if not isinstance(tick_ms, int) or tick_ms < 10:
            raise ValueError(f"tick_ms must be an int >= 10, got {tick_ms!r}")
        self.size = size
        self.force_sync = force_sync
        self.tick_ms = tick_ms
        self.max_session_ms = max_session_ms
        self.start_timeout = start_timeout
        self.jvm_opts = list(jvm_opts)
        self.extended_types = bool(extended_types)
        self.classpath = classpath or find_classpath()
        self.java = find_java()
        self._own_dir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="zkrecipes-ensemble-")
        ports = free_ports(3 * size + (size if tls else 0))  # one batch: no port handed out twice
        self.client_ports = ports[0:3 * size:3]
        self._peer_ports = list(zip(ports[1:3 * size:3], ports[2:3 * size:3]))
        self.secure_ports: list[int] = ports[3 * size:]
        self._tls: Optional[secure.TlsFiles] = None
        if tls:
            if "netty" not in self.classpath:  # Debian's zookeeper.jar alone: add its Netty jars
                self.classpath = os.pathsep.join([self.classpath, *secure.netty_classpath()])
            try:
                self._tls = secure.make_tls(os.path.join(self.workdir, "tls"))
            except BaseException:
                if self._own_dir:
                    shutil.rmtree(self.workdir, ignore_errors=True)
                raise
        if self.sasl_users:
            secure.write_jaas(os.path.join(self.workdir, "jaas.conf"), self.sasl_users)
        self._procs: List[Optional["subprocess.Popen[bytes]"]] = [None] * size
        self._logs: List[Optional[IO[bytes]]] = [None] * size
        self._lock = threading.RLock()
        self._closed = False
        self._write_configs()
        _live.add(self)

    # -- configuration -------------------------------------------------------------------------
    @property
    def hosts(self) -> str:
        """Connect string of all servers, e.g. ``127.0.0.1:41231,127.0.0.1:41234,...``."""
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    @property
    def secure_hosts(self) -> str:
        """Connect string of the mutual-TLS ports (``tls=True`` only)."""
        self._need_tls()
        return ",".join(f"127.0.0.1:{p}" for p in self.secure_ports)

    @property
    def client_tls(self) -> Dict[str, object]:
        """KazooClient keyword arguments for a TLS client with the client certificate (``tls=True`` only):
        ``use_ssl``, ``ca``, ``certfile``, ``keyfile``, ``verify_certs``."""
        return self._need_tls().client_kwargs()

    def client_sasl(self, user: Optional[str] = None) -> Dict[str, object]:
        """KazooClient keyword arguments (``sasl_options``) to log in as ``user`` (default: the first of
        ``sasl_users``) over DIGEST-MD5."""
        if not self.sasl_users:
            raise ValueError("this ensemble was started without sasl_users")
        user = next(iter(self.sasl_users)) if user is None else user
        if user not in self.sasl_users:
            raise ValueError(f"no SASL user {user!r} in this ensemble (it has {sorted(self.sasl_users)})")
        return {"sasl_options": {"mechanism": "DIGEST-MD5", "username": user, "password": self.sasl_users[user]}}

    def _need_tls(self) -> secure.TlsFiles:
        if self._tls is None:
            raise ValueError("this ensemble was started without tls=True")
        return self._tls

    def host(self, i: int) -> str:
        """Connect string of server ``i`` alone."""
        return f"127.0.0.1:{self.client_ports[self._index(i)]}"

    def four_letter(self, i: int, word: str, timeout: float = 2.0) -> str:
        """Send a four-letter word to server ``i`` and return its reply ('' if it does not answer)."""
        return four_letter(self.client_ports[self._index(i)], word, timeout=timeout)

    def conf(self, i: int) -> Dict[str, str]:
        """Settings of server ``i`` from its ``conf`` four-letter word (``{}`` if it does not answer)."""
        return server_conf("127.0.0.1", self.client_ports[self._index(i)])

    def session_timeout_bounds(self) -> Tuple[int, int]:
        """``(minSessionTimeout, maxSessionTimeout)`` in ms as this ensemble configures its servers:
        ``2 * tick_ms`` and ``max_session_ms``."""
        return (2 * self.tick_ms, self.max_session_ms)

    def _dir(self, i: int) -> str:
        return os.path.join(self.workdir, f"server{i + 1}")

    def _write_configs(self) -> None:
        for i in range(self.size):
            d = self._dir(i)
            os.makedirs(os.path.join(d, "data"), exist_ok=True)
            with open(os.path.join(d, "data", "myid"), "w") as f:
                f.write(str(i + 1))
            lines = [
                f"tickTime={self.tick_ms}",
                "initLimit=50",
                "syncLimit=25",
                f"dataDir={os.path.join(d, 'data')}",
                f"clientPort={self.client_ports[i]}",
                "clientPortAddress=127.0.0.1",
                f"minSessionTimeout={2 * self.tick_ms}",
                f"maxSessionTimeout={self.max_session_ms}",
                f"forceSync={'yes' if self.force_sync else 'no'}",
                "4lw.commands.whitelist=*",
                "admin.enableServer=false",
                "maxClientCnxns=0",
                "autopurge.purgeInterval=0",
            ]
            if self._tls is not None:
                lines += self._tls.server_config(self.secure_ports[i])
            if self.sasl_users:
                lines += secure.SASL_CONFIG
            if self.size > 1:
                lines.append("standaloneEnabled=false")
                for j, (qp, ep) in enumerate(self._peer_ports):
                    lines.append(f"server.{j + 1}=127.0.0.1:{qp}:{ep}")
            with open(os.path.join(d, "zoo.cfg"), "w") as f:
                f.write("\n".join(lines) + "\n")

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> "Ensemble":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, i: Optional[int] = None, wait: bool = True) -> "Ensemble":
        """Start server ``i`` (or every server not running) and, with ``wait``, wait until it serves."""
        with self._lock:
            if self._closed:
                raise RuntimeError("ensemble is closed")
            indexes = range(self.size) if i is None else [self._index(i)]
            for k in indexes:
                if not self.running(k):
                    self._spawn(k)
        if wait:
            try:
                self.wait_serving(None if i is None else [i], timeout=self.start_timeout)
            except BaseException:
                if i is None:
                    self.close()
                raise
        return self

    def _index(self, i: int) -> int:
        if not isinstance(i, int) or not 0 <= i < self.size:
            raise ValueError(f"server index must be in 0..{self.size - 1}, got {i!r}")
        return i

    def _spawn(self, i: int) -> None:
        d = self._dir(i)
        logf = open(os.path.join(d, "server.log"), "ab")
        cmd = [
            self.java,
            *self.jvm_opts,
            "-Dzookeeper.root.logger=INFO,CONSOLE",
            f"-Dzookeeper.log.dir={d}",
            "-Dznode.container.checkIntervalMs=500",
            *(["-Dzookeeper.extendedTypesEnabled=true"] if self.extended_types else []),  # TTL nodes
            "-Dzookeeper.admin.enableServer=false",
            *([f"-Djava.security.auth.login.config={os.path.join(self.workdir, 'jaas.conf')}"]
              if self.sasl_users else []),
            "-cp",
            self.classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            os.path.join(d, "zoo.cfg"),
        ]
        main = threading.current_thread() is threading.main_thread()
        proc = self._procs[i] = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent if main else None,
        )
        old = self._logs[i]
        if old is not None:
            old.close()
        self._logs[i] = logf
        log.debug("started ZooKeeper server %d (pid %d) on port %d", i, proc.pid, self.client_ports[i])

    def running(self, i: int) -> bool:
        """True while the process of server ``i`` is alive."""
        p = self._procs[self._index(i)]
        return p is not None and p.poll() is None

    def mode(self, i: int) -> Optional[str]:
        """``"leader"``, ``"follower"``, ``"standalone"`` or None if server ``i`` does not serve."""
        return _server_mode(self.client_ports[self._index(i)]) if self.running(i) else None

    def serving(self, i: int) -> bool:
        """True when server ``i`` is in a quorum and answers clients."""
        return self.mode(i) in ("leader", "follower", "standalone")

    def leader(self) -> Optional[int]:
        """Index of the ZooKeeper leader (of the standalone server), or None if there is none now."""
        return leader_of(self)

    def wait_serving(self, indexes: Optional[Sequence[int]] = None, timeout: float = 60.0) -> None:
        """Wait until the given servers (default: all running ones) serve and a leader exists."""
        idx = None if indexes is None else [self._index(k) for k in indexes]
        wait_until_serving(self, idx, timeout, self._check_alive, hint=f"; logs in {self.workdir}")

    def _check_alive(self, idx: Sequence[int]) -> None:
        """Raise if a server waited for has exited (naming its log)."""
        for k in idx:
            p = self._procs[k]
            if p is not None and p.poll() is not None:
                log_path = os.path.join(self._dir(k), "server.log")
                raise RuntimeError(f"ZooKeeper server {k} exited with {p.returncode}; see {log_path}")

    def stop(self, i: int, timeout: float = 10.0) -> None:
        """Stop server ``i`` with SIGTERM (SIGKILL after ``timeout``) and wait until it has exited."""
        self._signal(i, signal.SIGTERM, timeout)

    def kill(self, i: int) -> None:
        """Kill server ``i`` with SIGKILL (a crash) and wait until it has exited."""
        self._signal(i, signal.SIGKILL, 10.0)

    def pause(self, i: int) -> None:
        """Freeze server ``i`` (SIGSTOP); :meth:`resume` continues it."""
        p = self._procs[self._index(i)]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        """Continue a server frozen by :meth:`pause`."""
        p = self._procs[self._index(i)]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGCONT)

    def _signal(self, i: int, sig: int, timeout: float) -> None:
        with self._lock:
            p = self._procs[self._index(i)]
            if p is None or p.poll() is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)
                p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def close(self) -> None:
        """Kill every server, wait for the processes, delete the working directory. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for p in self._procs:
                if p is not None and p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        p.send_signal(signal.SIGCONT)
                        p.kill()
            for p in self._procs:
                if p is not None:
                    with contextlib.suppress(Exception):
                        p.wait(10)
            for f in self._logs:
                if f:
                    f.close()
            if self._own_dir:
                shutil.rmtree(self.workdir, ignore_errors=True)
        _live.discard(self)

    def pids(self) -> list[Optional[int]]:
        """Process ids of the servers (None for one not running)."""
        return [p.pid if p is not None and p.poll() is None else None for p in self._procs]

    def __repr__(self) -> str:
        return f"<Ensemble size={self.size} hosts={self.hosts!r}>"
