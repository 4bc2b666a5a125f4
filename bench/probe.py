"""Timestamps written by the benchmark's steps and tasks to Redis (the same way for every system).

The first step of a dispatched workflow records when it began (``bench:t1``);
the last one, when asked to, pushes to ``bench:done:<key>`` so a driver that
runs one workflow at a time can wait for it without polling a database.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

_client: Any = None
_pid = 0


def url() -> str:
    return os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/11")


def client() -> Any:
    global _client, _pid
    if _client is None or _pid != os.getpid():
        # A burst runs many workflows at once in one process (DBOS runs each on a thread):
        # wait for a free connection rather than fail at redis-py's default cap of 100.
        pool = redis.BlockingConnectionPool.from_url(url(), max_connections=100, timeout=60)
        _client = redis.Redis(connection_pool=pool)
        _pid = os.getpid()
    return _client


def first(key: str) -> None:
    client().hset("bench:t1", key, repr(time.time()))


def last(key: str, notify: bool) -> None:
    if notify:
        client().lpush(f"bench:done:{key}", repr(time.time()))


def first_times() -> dict[str, float]:
    return {k.decode(): float(v) for k, v in client().hgetall("bench:t1").items()}


def wait_done(key: str, timeout: float = 30.0) -> float:
    got = client().blpop(f"bench:done:{key}", timeout=timeout)
    if got is None:
        raise TimeoutError(f"workflow {key} did not finish within {timeout}s")
    return float(got[1])


def reset() -> None:
    c = client()
    keys = list(c.scan_iter("bench:*", count=1000))
    for i in range(0, len(keys), 500):
        c.delete(*keys[i : i + 500])
