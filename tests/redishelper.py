"""redis-server for tests: installed with apt-get when missing (CI on a fresh machine has none), then run
with the lab's throw-away :class:`lab.redis_server.RedisServer`."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Iterator

from toolskip import missing_tool

from lab.redis_server import RedisServer


def ensure_redis_server() -> None:
    """Install Debian's redis-server if it is missing; skip (saying why; under CI=true: fail) only where it
    cannot be installed."""
    if shutil.which("redis-server"):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        missing_tool("redis-server is missing and cannot be installed here (needs root and apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq", "--no-install-recommends",
                    "redis-server"], env=env, check=True, capture_output=True, timeout=600)
    assert shutil.which("redis-server"), "apt-get installed redis-server, but it is not on PATH"


def redis_server() -> Iterator[str]:
    """Yield the URL of a fresh redis-server (no persistence) on loopback; stop it afterwards."""
    ensure_redis_server()
    with RedisServer() as server:
        yield f"redis://127.0.0.1:{server.port}/0"
