"""A throw-away redis-server for tests: installed with apt-get when missing (as make test does for
ZooKeeper), started on a free loopback port, killed afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Iterator

import pytest

from zkrecipes.testing import free_ports


def redis_server_binary() -> str:
    """Path of redis-server, installing Debian's package if it is missing; skips (with why) only when
    it cannot be installed here (not root, or no apt-get)."""
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("redis-server is missing and cannot be installed here (needs root and apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq", "--no-install-recommends",
                    "redis-server"], env=env, check=True, capture_output=True, timeout=600)
    found = shutil.which("redis-server")
    assert found, "apt-get installed redis-server, but it is not on PATH"
    return found


def redis_server() -> Iterator[str]:
    """Yield the URL of a fresh redis-server (no persistence) on loopback; stop it afterwards."""
    binary = redis_server_binary()
    port = free_ports(1)[0]
    workdir = tempfile.mkdtemp(prefix="zkrecipes-test-redis-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", workdir], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while True:
            assert proc.poll() is None, f"redis-server exited with {proc.returncode}"
            try:
                with socket.create_connection(("127.0.0.1", port), 0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "redis-server did not answer within 15 s"
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
