"""The benchmark's processes: measuring servers, workers, databases, the code under test.

``Harness`` starts every process a workload needs (``python -m bench.<module>``
measuring processes, ``celery worker -c 2``, DBOS queue workers,
``durable_worker``), each in a session of its own so it can be stopped with
its children, and stops them all at the end. ``Harness.conditions`` samples
the load and the commit latency of the benchmark's database between
repetitions (``bench.conditions``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.common import PrivateRedis, pg_url
from bench.conditions import Conditions

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PY = sys.executable

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/bench"
DEFAULT_DBOS_DB = "postgres://postgres@127.0.0.1:5432/bench_dbos"
DEFAULT_REDIS = "redis://127.0.0.1:6379/11"


# -- processes ----------------------------------------------------------------------
@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


class Server:
    """A long-lived measuring process (``python -m bench.<module> serve``): one command per line.

    Keeping the processes warm lets the driver alternate repetitions of our
    engine and the peer, so both see the same machine (load drifts).
    """

    def __init__(self, harness: Harness, module: str) -> None:
        self.module = module
        self.log = harness.logdir / f"{module}-serve.log"
        self.popen = subprocess.Popen(
            [PY, "-m", f"bench.{module}", "serve"],
            env=harness.env(),
            cwd=harness.logdir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("wb"),
            text=True,
            start_new_session=True,
        )
        harness.procs.append(Proc(f"{module}-serve", self.popen, self.log))  # type: ignore[arg-type]

    def call(self, *argv: Any) -> dict[str, Any]:
        args = [str(a) for a in argv]
        print(f"   · {self.module} {' '.join(args)}", flush=True)
        assert self.popen.stdin is not None and self.popen.stdout is not None
        t0 = time.monotonic()
        self.popen.stdin.write(json.dumps(args) + "\n")
        self.popen.stdin.flush()
        while True:
            line = self.popen.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.module} server died:\n{self.log.read_text()[-3000:]}")
            if line.startswith("@@RESULT "):
                result: dict[str, Any] = json.loads(line[len("@@RESULT ") :])
                break
        if "error" in result:
            raise RuntimeError(f"{self.module} {' '.join(args)}: {result['error']}\n{self.log.read_text()[-3000:]}")
        result["wall_s"] = round(time.monotonic() - t0, 1)
        return result


@dataclass
class Harness:
    args: argparse.Namespace
    logdir: Path
    pythonpath: str
    procs: list[Proc] = field(default_factory=list)
    servers: dict[str, Server] = field(default_factory=dict)
    _conditions: Conditions | None = None

    @property
    def conditions(self) -> Conditions:
        """The load and commit-latency sampler of this harness's database (opened on first use)."""
        if self._conditions is None:
            self._conditions = Conditions(self.args.database_url)
        return self._conditions

    def sample(self) -> dict[str, Any]:
        """Machine conditions now (load average, single-insert commit p50/p90), recorded."""
        return self.conditions.sample()

    def server(self, module: str) -> Server:
        if module not in self.servers:
            self.servers[module] = Server(self, module)
        return self.servers[module]

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            BENCH_PGSS="1" if self.args.pg == "private" else "0",
            PYTHONPATH=self.pythonpath,
            DJANGO_SETTINGS_MODULE="bench.settings",
            DATABASE_URL=self.args.database_url,
            BENCH_DBOS_URL=pg_url(self.args.dbos_url),
            CELERY_BROKER_URL=self.args.redis_url,
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def measure(self, module: str, *argv: Any, **env: str) -> dict[str, Any]:
        """Run ``python -m bench.<module> argv...`` and return the JSON it ends with."""
        cmd = [PY, "-m", f"bench.{module}", *map(str, argv)]
        label = " ".join(cmd[2:])
        print(f"   · {label}", flush=True)
        t0 = time.monotonic()
        out = subprocess.run(cmd, env=self.env(**env), cwd=self.logdir, capture_output=True, text=True)
        (self.logdir / f"{module}-{int(time.time() * 1000)}.log").write_text(out.stdout + out.stderr)
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).splitlines()[-25:])
            raise RuntimeError(f"{label} failed ({out.returncode}):\n{tail}")
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("@@RESULT ")][-1]
        result: dict[str, Any] = json.loads(line[len("@@RESULT ") :])
        result["wall_s"] = round(time.monotonic() - t0, 1)
        return result

    def run(self, cmd: list[str], **env: str) -> None:
        """Run ``cmd`` to its end in the benchmark's environment (``env`` on top); raise if it fails."""
        subprocess.run(cmd, env=self.env(**env), cwd=self.logdir, check=True)

    def spawn(self, name: str, cmd: list[str], ready: Any, timeout: float = 60, **env: str) -> Proc:
        log = self.logdir / f"{name}.log"
        popen = subprocess.Popen(
            cmd,
            env=self.env(**env),
            cwd=self.logdir,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        deadline = time.monotonic() + timeout
        while not ready(proc):
            if popen.poll() is not None:
                raise RuntimeError(f"{name} exited ({popen.returncode}):\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {timeout}s:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        return proc

    def stop(self, proc: Proc) -> None:
        """SIGTERM the process group we started (it is its own session), SIGKILL after 20 s."""
        if proc.popen.stdin is not None:
            try:
                proc.popen.stdin.close()  # a server ends at the end of its input
                proc.popen.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if proc.popen.poll() is None:
            try:
                os.killpg(proc.popen.pid, signal.SIGTERM)
                proc.popen.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.popen.wait(timeout=10)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_servers(self) -> None:
        for server in self.servers.values():
            for proc in list(self.procs):
                if proc.popen is server.popen:
                    self.stop(proc)
        self.servers.clear()

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc)
        if self._conditions is not None:
            self._conditions.close()

    # -- the worker processes ----------------------------------------------------------
    def celery_worker(self, *, count_sql: bool = False) -> Proc:
        ready = self.logdir / f"celery-ready-{time.time_ns()}"
        cmd = [
            PY,
            "-m",
            "celery",
            "-A",
            "bench.celery_app",
            "worker",
            "-c",
            "2",
            "-Q",
            "durable,bench",
            "-l",
            "WARNING",
        ]
        return self.spawn(
            "celery-worker" + ("-count" if count_sql else ""),
            cmd,
            lambda p: ready.exists(),
            BENCH_READY_FILE=str(ready),
            BENCH_TRANSPORT="celery",
            BENCH_SQL_COUNT="1" if count_sql else "0",
        )

    def burst_on_new_worker(self, workflows: int, warmup: int = 10) -> dict[str, Any]:
        """One burst of ``workflows`` dispatched 3-step workflows on a ``celery worker -c 2`` started for it.

        A worker of its own per burst: it inherits this process's environment
        as it is now (the OpenTelemetry switch, the code under test).
        """
        worker = self.celery_worker()
        try:
            return self.measure(
                "ours",
                "dispatched",
                "--workflows",
                workflows,
                "--reps",
                1,
                "--warmup",
                warmup,
                BENCH_TRANSPORT="celery",
            )
        finally:
            self.stop(worker)

    def dbos_workers(self, n: int = 2) -> list[Proc]:
        procs = []
        for i in range(n):
            ready = self.logdir / f"dbos-ready-{i}-{time.time_ns()}"
            procs.append(
                self.spawn(
                    f"dbos-worker-{i}",
                    [PY, "-m", "bench.dbos_app", "worker"],
                    lambda p, ready=ready: ready.exists(),
                    BENCH_READY_FILE=str(ready),
                )
            )
        return procs

    def durable_workers(self, n: int = 2) -> list[Proc]:
        return [
            self.spawn(
                f"durable-worker-{i}",
                [PY, "-m", "django", "durable_worker"],
                lambda p: "running" in p.log.read_text(errors="replace"),
                BENCH_TRANSPORT="inline",
            )
            for i in range(n)
        ]


def reset_database(url: str, *, create: bool = True) -> None:
    """Drop the database of ``url`` (its name must contain ``bench``) and, with ``create``, create it empty."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(pg_url(url))
    name = parts.path.lstrip("/")
    if "bench" not in name:
        raise SystemExit(
            f"refusing to drop database {name!r}: the benchmark's databases must have 'bench' in their name"
        )
    admin = urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, ""))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            conn.execute(f'CREATE DATABASE "{name}"')


def reset_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    db = client.connection_pool.connection_kwargs.get("db", 0)
    if db == 0:
        raise SystemExit("refusing to flush Redis database 0: give the benchmark a database of its own")
    client.flushdb()


def bench_redis(tmp: Path, url: str | None = None) -> tuple[str, PrivateRedis | None]:
    """The Redis URL to use (``url``, else ``BENCH_REDIS_URL``, else database 11), and the server if private.

    ``private`` starts a ``redis-server`` of this run's own on a free port (the
    caller stops it): two benchmarks at once then never flush each other's keys.
    """
    url = url or os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS)
    if url != "private":
        return url, None
    server = PrivateRedis(tmp)
    return server.url.rsplit("/", 1)[0] + "/1", server  # reset_redis refuses database 0


def code_under_test(args: argparse.Namespace, tmp: Path) -> tuple[str, str]:
    """A directory holding ``durable`` (work tree or ``--rev``) and ``bench``; and its description."""
    root = tmp / "code"
    root.mkdir()
    (root / "bench").symlink_to(BENCH)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if args.rev:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", args.rev], capture_output=True, text=True, check=True
        ).stdout.strip()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "durable"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
        return str(root), f"durable/ at commit {rev}"
    (root / "durable").symlink_to(REPO / "durable")
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "durable"], capture_output=True, text=True
    ).stdout.strip()
    state = "with uncommitted changes" if dirty else "clean"
    return str(root), f"durable/ work tree at {head.stdout.strip()} ({state})"
