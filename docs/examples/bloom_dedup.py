"""Crawler de-duplication through a Bloom filter shared in Redis, made exact by a zkrecipes lock.

Run it against any ZooKeeper ensemble and Redis server::

    ZK_HOSTS=127.0.0.1:2181 REDIS_URL=redis://127.0.0.1:6379/0 python bloom_dedup.py --workers 4
    ... --no-lock     # the same fleet without the lock: some URLs are crawled twice

A fleet of crawler processes reads one frontier of URLs (each worker also finds a few URLs of its own).
For each URL a worker *checks* the filter (GETBIT at k positions) and, if the URL is new, *adds* it
(SETBIT), then crawls it. "Check, then add" from two workers at once lets both find the URL new: it is
crawled twice. Under a :class:`~zkrecipes.FairLock` the check and the add are one critical section; the
crawl itself runs outside it. The add is *fenced* by the lock's token: a Lua script refuses a token lower
than the last one it saw, so a worker that lost its lock (paused past its session, say) cannot write
after its successor did. Prints one JSON line: URLs crawled, distinct, duplicates, missed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import time
from typing import List, Optional

import redis
from kazoo.client import KazooClient

from zkrecipes import FairLock

BITS = 1 << 20  # 128 KiB of filter: false positives are negligible for thousands of URLs
HASHES = 5
FILTER, FENCE, CRAWLED = "bloom:bits", "bloom:fence", "bloom:crawled"

# KEYS: the filter, the fence; ARGV: the token, then the bit offsets. Refuses a token below the last seen.
FENCED_ADD = """
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[1])
if token < last then
  return redis.error_reply('STALE token ' .. ARGV[1] .. ' < ' .. last)
end
redis.call('SET', KEYS[2], ARGV[1])
for i = 2, #ARGV do redis.call('SETBIT', KEYS[1], ARGV[i], 1) end
return 1
"""


def offsets(url: str) -> List[int]:
    """The k bit positions of ``url`` (slices of its SHA-256)."""
    digest = hashlib.sha256(url.encode()).digest()
    return [int.from_bytes(digest[4 * i:4 * i + 4], "big") % BITS for i in range(HASHES)]


def seen(r: redis.Redis, url: str) -> bool:
    """The check: True if every bit of ``url`` is set (it was added, or a false positive)."""
    pipe = r.pipeline(transaction=False)
    for bit in offsets(url):
        pipe.getbit(FILTER, bit)
    return all(pipe.execute())


def add(r: redis.Redis, url: str, token: Optional[int]) -> None:
    """The add: fenced by ``token`` (raises redis.ResponseError for a stale one); unfenced without one."""
    if token is None:
        pipe = r.pipeline(transaction=False)
        for bit in offsets(url):
            pipe.setbit(FILTER, bit, 1)
        pipe.execute()
    else:
        r.eval(FENCED_ADD, 2, FILTER, FENCE, token, *offsets(url))


def stream(worker: int, frontier: List[str], own: int) -> List[str]:
    """The frontier in order, with ``own`` URLs only this worker finds mixed in."""
    rng = random.Random(worker)
    urls = list(frontier)
    for i in range(own):
        urls.insert(rng.randrange(len(urls) + 1), f"https://worker{worker}.example/page/{i}")
    return urls


def crawl(worker: int, hosts: str, redis_url: str, urls: List[str], use_lock: bool, gap: float, start) -> None:
    """One crawler process: check-and-add each URL (under the lock, fenced), crawl the new ones."""
    r = redis.Redis.from_url(redis_url)
    zk = KazooClient(hosts=hosts)
    zk.start(30)
    lock = FairLock(zk, "/crawler/bloom", identifier=f"crawler-{worker}")
    start.wait(60)  # every crawler is connected: they start together
    try:
        for url in urls:
            if use_lock:
                with lock:
                    new = not seen(r, url)
                    time.sleep(gap)  # whatever a worker does between reading and writing (a round trip, ...)
                    if new:
                        add(r, url, lock.token)
            else:
                new = not seen(r, url)
                time.sleep(gap)
                if new:
                    add(r, url, None)
            if new:
                r.rpush(CRAWLED, url)  # "crawl" it, outside the critical section
    finally:
        zk.stop()
        zk.close()


def run(hosts: str, redis_url: str, workers: int = 4, urls: int = 60, own: int = 5, use_lock: bool = True,
        gap: float = 0.005) -> dict:
    """Run the fleet once on a fresh filter; return what was crawled."""
    r = redis.Redis.from_url(redis_url)
    r.delete(FILTER, FENCE, CRAWLED)
    frontier = [f"https://example.com/page/{i}" for i in range(urls)]
    streams = [stream(w, frontier, own) for w in range(workers)]
    ctx = multiprocessing.get_context("spawn")  # no kazoo or redis state copied from this process
    start = ctx.Barrier(workers + 1)
    procs = [ctx.Process(target=crawl, args=(w, hosts, redis_url, streams[w], use_lock, gap, start))
             for w in range(workers)]
    for p in procs:
        p.start()
    start.wait(120)
    for p in procs:
        p.join(300)
    crawled = [u.decode() for u in r.lrange(CRAWLED, 0, -1)]
    wanted = {u for s in streams for u in s}
    return {
        "lock": use_lock,
        "workers": workers,
        "exit_codes": [p.exitcode for p in procs],
        "urls": len(wanted),
        "crawled": len(crawled),
        "distinct": len(set(crawled)),
        "duplicates": len(crawled) - len(set(crawled)),
        "missed": len(wanted - set(crawled)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--urls", type=int, default=60, help="URLs in the shared frontier")
    ap.add_argument("--no-lock", action="store_true", help="check-then-add without the lock")
    args = ap.parse_args()
    hosts = os.environ.get("ZK_HOSTS", "127.0.0.1:2181")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    print(json.dumps(run(hosts, redis_url, args.workers, args.urls, use_lock=not args.no_lock)), flush=True)


if __name__ == "__main__":
    main()
