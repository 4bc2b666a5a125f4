"""The peer: the same workloads written for DBOS Transact, and its queue worker process.

    python -m bench.dbos_app worker     # a DBOS process that runs workflows from the "bench" queue

``BENCH_DBOS_URL`` is DBOS's own system database (default ``.../bench_dbos``).
``BENCH_DBOS_POLL`` is the queue's polling interval (DBOS's default: 1 s).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig

from bench import probe

QUEUE = "bench"


def database_url() -> str:
    return os.environ.get("BENCH_DBOS_URL", "postgresql://postgres@127.0.0.1:5432/bench_dbos")


def config() -> DBOSConfig:
    return {"name": "bench", "system_database_url": database_url(), "log_level": "WARNING"}


@DBOS.step()
def d_step(i: int) -> int:
    return i


@DBOS.workflow()
def d_local(n: int) -> int:
    """``n`` ``@DBOS.step`` calls: the peer of ``bench_local``."""
    for i in range(n):
        d_step(i)
    return n


@DBOS.step()
def q_first(key: str) -> int:
    probe.first(key)
    return 1


@DBOS.step()
def q_mid() -> int:
    return 2


@DBOS.step()
def q_last(key: str, notify: bool) -> int:
    probe.last(key, notify)
    return 3


@DBOS.workflow()
def d_dispatched(notify: bool) -> list[int]:
    """Three steps of a workflow taken from a DBOS queue: the peer of ``bench_dispatched``."""
    key = DBOS.workflow_id or "?"
    return [q_first(key), q_mid(), q_last(key, notify)]


def launch(*, queues: list[str] | None = None) -> None:
    """Start DBOS in this process; ``queues``: the queues it takes work from (None: all)."""
    DBOS(config=config())
    if queues is not None:
        DBOS.listen_queues(queues)
    DBOS.launch()


def register_queue() -> Any:
    return DBOS.register_queue(
        QUEUE, polling_interval_sec=float(os.environ.get("BENCH_DBOS_POLL", "1.0")), on_conflict="always_update"
    )


def worker() -> None:
    from bench import sqlcount

    if sqlcount.enabled():
        sqlcount.install_sqlalchemy()
        sqlcount.start_flusher("dbos")
    launch(queues=[QUEUE])
    register_queue()
    ready = os.environ.get("BENCH_READY_FILE")
    if ready:
        Path(ready).write_text(str(os.getpid()))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy(workflow_completion_timeout_sec=0)


if __name__ == "__main__":
    if sys.argv[1:] == ["worker"]:
        worker()
    else:
        sys.exit("usage: python -m bench.dbos_app worker")
