"""A throw-away ``redis-server`` on a free loopback port: the Redis baseline of the lab and of bench."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import IO, Optional

from zkrecipes.testing import free_ports
from zkrecipes.testing._proc import die_with_parent


def redis_version() -> Optional[str]:
    """The installed ``redis-server`` version, or None."""
    if shutil.which("redis-server") is None:
        return None
    try:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"v=(\S+)", out)
    return m.group(1) if m else out.strip() or None


class RedisServer:
    """One unreplicated ``redis-server`` on 127.0.0.1, no snapshots; ``fsync_always`` appends and fsyncs
    every write. Its files go to ``workdir`` (a temporary folder, removed on close, when not given).
    ``with RedisServer() as r:`` starts and closes it; :meth:`signal` stops or kills it (faults)."""

    def __init__(self, workdir: Optional[str] = None, fsync_always: bool = False) -> None:
        self.port = free_ports(1)[0]
        self._own_dir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="zkrecipes-redis-")
        self.fsync_always = fsync_always
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self._log: IO[bytes] = open(os.path.join(self.workdir, "redis.log"), "ab")

    def start(self, timeout: float = 15.0) -> "RedisServer":
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir", self.workdir]
        cmd += ["--appendonly", "yes", "--appendfsync", "always"] if self.fsync_always else ["--appendonly", "no"]
        main = threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=die_with_parent if main else None)
        deadline = time.monotonic() + timeout
        while not self.ping():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"redis-server did not answer on port {self.port}; see {self.workdir}/redis.log")
            time.sleep(0.05)
        return self

    def ping(self) -> bool:
        """True if the server answers PING."""
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False

    def signal(self, sig: int) -> None:
        """Send ``sig`` and wait for the server to exit (SIGKILL after 10 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        self.signal(signal.SIGKILL)
        self._log.close()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
