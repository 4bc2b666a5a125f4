"""The machine a benchmark ran on, the conditions of every repetition, and the result file.

Every result file (``bench/results/*.json``) carries the machine (CPU, cores,
RAM, versions), and every repetition carries the load average and the commit
latency measured right after it: one single-insert transaction
(``BEGIN; INSERT; COMMIT``, fsync'd, the unit ``pgbench`` measures), timed from
Python with psycopg as our steps are. When the load exceeded the cores at any
sample the run is ``"noisy": true`` and a warning is printed: its ratios are not
conclusive.
"""

from __future__ import annotations

import json
import os
import platform
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.common import pg_url, summary
from bench.pairing import noisy

PROBE_TABLE = "bench_commit_probe"


class Conditions:
    """Samples the load average and the commit latency of one PostgreSQL database.

    One connection, opened on first use and kept (a new connection per sample
    would time the connection, not the commit). Each :meth:`sample` runs
    ``commits`` single-insert transactions and reports their p50/p90.
    """

    def __init__(self, url: str, commits: int = 50) -> None:
        self.url = pg_url(url)
        self.commits = commits
        self.samples: list[dict[str, Any]] = []
        self._conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.url)
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {PROBE_TABLE} (x int)")
            self._conn.commit()
        return self._conn

    def commit_latency(self, commits: int | None = None) -> dict[str, float]:
        """p50/p90 in ms of ``commits`` single-insert transactions, each committed (fsync'd)."""
        conn = self._connection()
        lat = []
        for _ in range(commits or self.commits):
            t = time.perf_counter()
            conn.execute(f"INSERT INTO {PROBE_TABLE} VALUES (1)")
            conn.commit()
            lat.append((time.perf_counter() - t) * 1000)
        conn.execute(f"TRUNCATE {PROBE_TABLE}")
        conn.commit()
        lat.sort()
        return {"p50_ms": round(lat[len(lat) // 2], 3), "p90_ms": round(lat[(len(lat) * 9) // 10], 3)}

    def sample(self) -> dict[str, Any]:
        """The load average and the commit latency now; kept in :attr:`samples` and returned."""
        commit = self.commit_latency()
        out = {
            "at": round(time.time(), 1),
            "loadavg_1m": round(os.getloadavg()[0], 2),
            "commit_p50_ms": commit["p50_ms"],
            "commit_p90_ms": commit["p90_ms"],
        }
        self.samples.append(out)
        return out

    def report(self) -> dict[str, Any]:
        """Summaries over every sample so far, and the noisy flag."""
        return describe(self.samples)

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.execute(f"DROP TABLE IF EXISTS {PROBE_TABLE}")
            self._conn.commit()
            self._conn.close()


def describe(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Load and commit-latency summaries of ``samples``, with ``noisy`` (load above the cores)."""
    cores = os.cpu_count() or 1
    loads = [s["loadavg_1m"] for s in samples]
    return {
        "samples": len(samples),
        "cores": cores,
        "loadavg_1m": summary(loads),
        "commit_p50_ms": summary([s["commit_p50_ms"] for s in samples]),
        "commit_p90_ms": summary([s["commit_p90_ms"] for s in samples]),
        "noisy": noisy(loads, cores),
    }


def machine(database_url: str, redis_url: str, code: str, *, private: bool) -> dict[str, Any]:
    """CPU, cores, RAM, versions of everything measured, and the commit latency at the start."""
    import redis

    with psycopg.connect(pg_url(database_url), autocommit=True) as conn:
        show = {k: conn.execute(f"SHOW {k}").fetchone()[0] for k in _PG_SETTINGS}  # type: ignore[index]
    where = "a private cluster started by the benchmark" if private else "the shared server"
    probe = Conditions(database_url, commits=100)
    try:
        commit = probe.commit_latency()
    finally:
        probe.close()
    return {
        "cpu": _cpu(),
        "cores": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "django": _version("django"),
        "postgresql": f"{show.pop('server_version')} ({where})",
        "postgresql_settings": show,
        "redis": redis.Redis.from_url(redis_url).info("server").get("redis_version"),
        "celery": _version("celery"),
        "dbos": _version("dbos"),
        "psycopg": _version("psycopg"),
        "sqlalchemy": _version("sqlalchemy"),
        "durable_code": code,
        "commit_latency": commit,
    }


_PG_SETTINGS = ("server_version", "synchronous_commit", "fsync", "shared_preload_libraries", "shared_buffers")


def _version(pkg: str) -> str:
    import importlib.metadata as md

    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return "?"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def print_machine(info: dict[str, Any]) -> None:
    load = f"load {info['loadavg_at_start']}" + (f" → {info['loadavg_at_end']}" if "loadavg_at_end" in info else "")
    commit = info["commit_latency"]
    print(
        f"machine: {info['cpu']}, {info['cores']} cores, {info['ram_gib']} GiB RAM; {load}; "
        f"single-insert commit {commit['p50_ms']} ms p50 / {commit['p90_ms']} ms p90 at the start"
    )
    print(
        f"versions: Python {info['python']}, Django {info['django']}, PostgreSQL {info['postgresql']}, "
        f"Redis {info['redis']}, Celery {info['celery']}, dbos {info['dbos']}, psycopg {info['psycopg']}, "
        f"SQLAlchemy {info['sqlalchemy']}; {info['durable_code']}"
    )


def warn_if_noisy(report: dict[str, Any]) -> None:
    """A loud warning when the load exceeded the cores during the run."""
    if not report.get("noisy"):
        return
    load = report["loadavg_1m"]
    bar = "!" * 78
    print(
        f"\n{bar}\nWARNING: NOISY RUN. The 1-minute load average reached {load['max']:.2f} "
        f"(median {load['median']:.2f}) on {report['cores']} cores: other work competed for the CPU.\n"
        "The ratios below are NOT conclusive; measure again on a quiet machine.\n"
        f"{bar}"
    )


def write_result(out_dir: str | Path, prefix: str, started: datetime, doc: dict[str, Any]) -> Path:
    """Write ``doc`` to ``<out_dir>/<prefix><UTC time>.json``; return the path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{prefix}{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return path
