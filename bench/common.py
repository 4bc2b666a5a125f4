"""Helpers shared by the measuring processes and the driver: statistics, timing, PostgreSQL."""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median, min and max (and the raw values) of a list of repetitions."""
    vals = [float(v) for v in values]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals), "values": vals}


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-p * len(ordered) // 100))))
    return ordered[rank - 1]


def emit(result: dict[str, Any]) -> None:
    """The last line a measuring process prints: its result as JSON."""
    sys.stdout.write("\n@@RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def pg_url(url: str) -> str:
    """A libpq URL (psycopg wants ``postgresql://``; django-environ accepts ``postgres://``)."""
    return "postgresql://" + url.split("://", 1)[1] if url.startswith("postgres://") else url


def db_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def admin_url(url: str) -> str:
    """The same server, maintenance database ``postgres``."""
    parts = urlsplit(pg_url(url))
    return urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, parts.fragment))


def next_xid(url: str) -> int:
    """The cluster's next transaction id: it advances by one for every transaction that writes.

    Read from the server's shared state, so it is exact at once, unlike
    ``pg_stat_database.xact_commit``: a backend on a persistent connection that
    flushed its statistics less than a second before publishes the next ones
    only after ``PGSTAT_IDLE_INTERVAL`` (10 s) of idleness, so a reading taken
    1.3 s after the work missed commits and a per-step difference could come
    out negative. Read-only transactions take no id (and fsync nothing).
    Cluster-wide: other databases' writers count too (measured and subtracted
    as background by :func:`counted_server`).
    """
    with psycopg.connect(admin_url(url), autocommit=True) as conn:
        row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
        return int(row[0]) if row else 0


def pgss_enabled() -> bool:
    return os.environ.get("BENCH_PGSS") == "1"


def pgss_reset(url: str) -> None:
    with psycopg.connect(admin_url(url), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def pgss_read(url: str) -> dict[str, Any]:
    """Statements the database of ``url`` executed since the last reset (pg_stat_statements)."""
    with psycopg.connect(admin_url(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s.query, s.calls FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = %s",
            [db_name(url)],
        ).fetchall()
    return _pgss_totals({q: float(c) for q, c in rows})


def counted_server(url: str, fn: Callable[[], Any], idle: float = 2.0) -> tuple[dict[str, Any], Any]:
    """Run ``fn``; what the server saw: write transactions (xids) and (when loaded) pg_stat_statements.

    The cluster's background activity (a peer's polling threads, worker
    heartbeats, autovacuum) is first measured for ``idle`` seconds and
    subtracted, prorated to the time ``fn`` took. Both counters are exact at
    once (no statistics flush to wait for); a short pause lets the last
    statements of other processes land.
    """
    bg_xids = 0.0
    bg: dict[str, float] = {}
    if idle > 0:
        x0 = next_xid(url)
        if pgss_enabled():
            pgss_reset(url)
        t = time.monotonic()
        time.sleep(idle)
        spent = time.monotonic() - t
        if pgss_enabled():
            bg = {q: c / spent for q, c in pgss_read(url)["by_statement"].items()}
        bg_xids = (next_xid(url) - x0) / spent
    before = next_xid(url)
    if pgss_enabled():
        pgss_reset(url)
    t0 = time.monotonic()
    value = fn()
    time.sleep(0.3)
    took = time.monotonic() - t0
    pgss = None
    if pgss_enabled():
        raw = pgss_read(url)["by_statement"]
        by = {q: c - bg.get(q, 0.0) * took for q, c in raw.items()}
        pgss = _pgss_totals({q: c for q, c in by.items() if c > 0.5})
    xids = next_xid(url) - before - bg_xids * took
    return {"write_txns": xids, "pgss": pgss, "seconds": took}, value


UTILITY = ("BEGIN", "COMMIT", "ROLLBACK")


def _pgss_totals(by: dict[str, float]) -> dict[str, Any]:
    def kind(q: str) -> str:
        words = q.strip().upper().split(None, 1)
        return words[0] if words else ""  # "BEGIN ISOLATION LEVEL ..." is a BEGIN

    return {
        "statements": sum(c for q, c in by.items() if kind(q) not in UTILITY),
        "begin": sum(c for q, c in by.items() if kind(q) == "BEGIN"),
        "commit": sum(c for q, c in by.items() if kind(q) == "COMMIT"),
        "calls": sum(by.values()),
        "by_statement": by,
    }


def pgss_without(pgss: dict[str, Any] | None, pattern: Callable[[str], bool]) -> dict[str, Any] | None:
    if pgss is None:
        return None
    return _pgss_totals({q: c for q, c in pgss["by_statement"].items() if not pattern(q)})


def serve(run: Callable[[list[str]], dict[str, Any]]) -> None:
    """Answer one command (a JSON list of arguments) per stdin line with an ``@@RESULT`` line."""
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            result = run(json.loads(line))
        except Exception as exc:  # noqa: BLE001 - reported to the driver
            import traceback

            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {exc}"}
        emit(result)


def wait_for(predicate: Callable[[], Any], what: str, timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# -- private servers ---------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivatePostgres:
    """A throw-away PostgreSQL cluster of our own, on a free port, in ``tmp``.

    Same binaries and default settings (fsync and synchronous_commit on) as the
    machine's server, but nothing else connects to it or restarts it: the
    benchmark reads its statement counts from it (``pgss=True`` loads
    pg_stat_statements), and the chaos suite restarts it at will. As root, the
    server runs as the ``postgres`` user (PostgreSQL refuses to run as root).
    """

    def __init__(self, tmp: Path, *, pgss: bool = True, max_connections: int = 200) -> None:
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        initdb = shutil.which("initdb") or (str(bins[-1]) if bins else None)
        if initdb is None:
            raise SystemExit("no initdb found: install PostgreSQL's server binaries or pass --pg shared")
        self.bindir = Path(initdb).parent
        self.datadir = tmp / "pg"
        self.datadir.mkdir()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(tmp, "postgres")
            shutil.chown(self.datadir, "postgres")
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.port = free_port()
        self._run("initdb", "-D", str(self.datadir), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        self.opts = f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1"
        self.opts += f" -c max_connections={max_connections}"
        if pgss:
            self.opts += " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
        self.start()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}"
        if pgss:
            with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self.prefix, str(self.bindir / tool), *args], capture_output=True)
        if done.returncode:
            raise subprocess.CalledProcessError(done.returncode, [tool, *args], done.stdout, done.stderr)

    def start(self) -> None:
        log = str(self.datadir / "server.log")
        self._run("pg_ctl", "-D", str(self.datadir), "-o", self.opts, "-l", log, "-w", "start")

    def restart(self, mode: str = "immediate") -> None:
        """Stop (``immediate``: like a crash, every connection cut, no checkpoint) and start again."""
        self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "stop")
        self.start()

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.datadir), "-m", "fast", "-w", "stop")
        except subprocess.CalledProcessError as exc:
            print(f"could not stop the private PostgreSQL: {exc.stderr!r}", file=sys.stderr)


class PrivateRedis:
    """A ``redis-server`` of our own on a free port, without persistence: a restart loses every key."""

    def __init__(self, tmp: Path) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise SystemExit("no redis-server found: install Redis")
        self.port = free_port()
        self.log = tmp / "redis.log"
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        import redis

        args = [str(self.binary), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        client = redis.Redis.from_url(self.url)
        wait_for(lambda: _pings(client), f"redis-server on port {self.port}", timeout=30)

    def kill(self) -> None:
        """SIGKILL the server (no shutdown, no save)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill()


def _pings(client: Any) -> bool:
    import redis

    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
