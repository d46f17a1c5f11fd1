"""docs/examples/bloom_dedup.py, run as documented: with the lock every URL is crawled exactly once;
without it the same fleet crawls some twice; a stale token's write is refused by the fence."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from redishelper import redis_server

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "bloom_dedup.py"


@pytest.fixture
def redis_url():
    yield from redis_server()


def run_example(zk_ensemble, zk_namespace, redis_url: str, *args: str) -> dict:
    env = dict(os.environ, ZK_HOSTS=zk_ensemble.hosts + zk_namespace, REDIS_URL=redis_url)
    proc = subprocess.run([sys.executable, str(EXAMPLE), *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_with_the_lock_every_url_is_crawled_exactly_once(zk_ensemble, zk_namespace, redis_url):
    out = run_example(zk_ensemble, zk_namespace, redis_url, "--workers", "4")
    print(out)
    assert out["exit_codes"] == [0] * 4
    assert out["duplicates"] == 0 and out["missed"] == 0
    assert out["crawled"] == out["distinct"] == out["urls"]


def test_without_the_lock_duplicates_are_counted(zk_ensemble, zk_namespace, redis_url):
    out = run_example(zk_ensemble, zk_namespace, redis_url, "--workers", "4", "--no-lock")
    print(out)
    assert out["exit_codes"] == [0] * 4
    # four workers read the same frontier in step; each check is 5 ms ahead of its add
    assert out["duplicates"] > 0, out
    assert out["missed"] == 0


def test_the_fence_refuses_a_stale_token(redis_url):
    import redis

    spec = importlib.util.spec_from_file_location("bloom_dedup", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = redis.Redis.from_url(redis_url)
    mod.add(r, "https://a.example/", 100)
    mod.add(r, "https://b.example/", 100)  # the same holder again: fine
    with pytest.raises(redis.ResponseError, match="STALE token 99 < 100"):
        mod.add(r, "https://c.example/", 99)
    assert mod.seen(r, "https://a.example/") and not mod.seen(r, "https://c.example/")
