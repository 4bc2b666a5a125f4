# ruff: noqa: RUF001
"""Run every benchmark, print the table, write ``bench/results/<timestamp>.json``.

    ./bench/run                      # everything (creates bench/.venv on first use)
    ./bench/run --only w1,w6         # some workloads
    ./bench/run --rev HEAD           # measure a committed revision of durable/ instead of the work tree
    ./bench/run --size quick         # small sizes, to try the harness
    ./bench/run --size issue         # the issue's sizes (1,000 workflows per repetition, 10,000 timers)

Each measurement runs in a process of its own (``bench.ours``, ``bench.peer_dbos``,
``bench.peer_celery``); the worker processes it needs (``celery worker -c 2``,
two DBOS queue workers, two ``durable_worker``) are started here and stopped
afterwards. The databases ``bench`` and ``bench_dbos`` are dropped and created
again at the start of every run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.common import PrivatePostgres

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PY = sys.executable

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/bench"
DEFAULT_DBOS_DB = "postgres://postgres@127.0.0.1:5432/bench_dbos"
DEFAULT_REDIS = "redis://127.0.0.1:6379/11"

# Sizes (see the README for what each workload measures).
SIZES: dict[str, dict[str, int]] = {
    # Smaller sizes: about three minutes on a 2-core machine.
    "standard": {
        "w1_workflows": 50,
        "w1_reps": 5,  # signal vs start_workflow: 5 x 50 per system
        "w1_alt_workflows": 30,
        "w1_alt_reps": 3,  # caller-thread, direct call and wait_for_run modes
        "w2_workflows": 80,
        "w2_reps": 5,
        "w2_alt_reps": 3,
        "w3_reps": 5,
        "w3_alt_reps": 3,
        "w4_workflows": 100,
        "w4_reps": 5,
        "w4_iso": 50,
        "w4_iso_dbos": 10,
        "w5_runs": 1000,
        "w5_lead": 15,
        "w5_reps": 5,
        "w6_workflows": 30,
        "w6_dispatched": 10,
    },
    # The sizes: 1,000 workflows per repetition, 10,000 timers (about twelve minutes here).
    "issue": {
        "w1_workflows": 1000,
        "w1_reps": 5,
        "w1_alt_workflows": 1000,
        "w1_alt_reps": 5,
        "w2_workflows": 1000,
        "w2_reps": 5,
        "w2_alt_reps": 5,
        "w3_reps": 5,
        "w3_alt_reps": 5,
        "w4_workflows": 1000,
        "w4_reps": 5,
        "w4_iso": 100,
        "w4_iso_dbos": 20,
        "w5_runs": 10000,
        "w5_lead": 60,
        "w5_reps": 5,
        "w6_workflows": 30,
        "w6_dispatched": 15,
    },
    "quick": {
        "w1_workflows": 30,
        "w1_reps": 3,
        "w1_alt_workflows": 20,
        "w1_alt_reps": 2,
        "w2_workflows": 40,
        "w2_reps": 3,
        "w2_alt_reps": 2,
        "w3_reps": 3,
        "w3_alt_reps": 2,
        "w4_workflows": 60,
        "w4_reps": 2,
        "w4_iso": 20,
        "w4_iso_dbos": 5,
        "w5_runs": 500,
        "w5_lead": 10,
        "w5_reps": 2,
        "w6_workflows": 10,
        "w6_dispatched": 5,
    },
}
WORKLOADS = ("w1", "w2", "w3", "w6", "w4", "w5")


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


# -- databases, Redis, machine ---------------------------------------------------------
def pg_url(url: str) -> str:
    return "postgresql://" + url.split("://", 1)[1] if url.startswith("postgres://") else url


def reset_database(url: str) -> None:
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
        conn.execute(f'CREATE DATABASE "{name}"')


def reset_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    db = client.connection_pool.connection_kwargs.get("db", 0)
    if db == 0:
        raise SystemExit("refusing to flush Redis database 0: give the benchmark a database of its own")
    client.flushdb()


def commit_latency(url: str) -> dict[str, float]:
    """How long one small durable commit takes on this PostgreSQL right now (fsync included)."""
    with psycopg.connect(pg_url(url)) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (x int)")
        conn.commit()
        lat = []
        for _ in range(100):
            t = time.perf_counter()
            conn.execute("INSERT INTO bench_commit_probe VALUES (1)")
            conn.commit()
            lat.append((time.perf_counter() - t) * 1000)
        conn.execute("DROP TABLE bench_commit_probe")
        conn.commit()
    lat.sort()
    return {"p50_ms": round(lat[49], 2), "p90_ms": round(lat[89], 2)}


def machine(args: argparse.Namespace, code: str) -> dict[str, Any]:
    import importlib.metadata as md

    import redis

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    with psycopg.connect(pg_url(args.database_url), autocommit=True) as conn:
        pg_version = conn.execute("SHOW server_version").fetchone()[0]
        preload = conn.execute("SHOW shared_preload_libraries").fetchone()[0]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
        fsync = conn.execute("SHOW fsync").fetchone()[0]
    info = redis.Redis.from_url(args.redis_url).info("server")
    where = "a private cluster started by the benchmark" if args.pg == "private" else "the shared server"

    def v(pkg: str) -> str:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return "?"

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": mem_gib,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "django": v("django"),
        "postgresql": f"{pg_version} ({where})",
        "postgresql_settings": {"synchronous_commit": sync, "fsync": fsync, "shared_preload_libraries": preload},
        "redis": info.get("redis_version"),
        "celery": v("celery"),
        "dbos": v("dbos"),
        "psycopg": v("psycopg"),
        "sqlalchemy": v("sqlalchemy"),
        "durable_code": code,
        "commit_latency": commit_latency(args.database_url),
    }


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


# -- the workloads -----------------------------------------------------------------------
def paired(
    h: Harness, reps: int, configs: dict[str, tuple[str, list[Any]]], warm: tuple[int, int] = (10, 3)
) -> dict[str, Any]:
    """Alternate one repetition of each configuration, ``reps`` times; summarise each.

    ``warm``: workflows run before the measured ones, in the first repetition and in later ones.
    """
    raw: dict[str, list[dict[str, Any]]] = {key: [] for key in configs}
    for rep in range(reps):
        for key, (module, argv) in configs.items():
            warmup = warm[0] if rep == 0 else warm[1]
            raw[key].append(h.server(module).call(*argv, "--reps", 1, "--warmup", warmup))
    out: dict[str, Any] = {}
    for key, results in raw.items():
        first = dict(results[0])
        for metric in ("seconds", "workflows_per_s", "ms_per_step"):
            first[metric] = summary([r[metric]["median"] for r in results])
        first["reps"] = len(results)
        first.pop("wall_s", None)
        out[key] = first
    return out


def summary(values: list[float]) -> dict[str, Any]:
    from bench.common import summary as _summary

    return _summary(values)


def run_w1(h: Harness, s: dict[str, int]) -> dict[str, Any]:
    n, alt = ["--workflows", s["w1_workflows"]], ["--workflows", s["w1_alt_workflows"]]
    out = paired(
        h,
        s["w1_reps"],
        {
            "ours_signal": ("ours", ["inproc", "--mode", "signal", *n]),
            "dbos_start": ("peer_dbos", ["inproc", "--mode", "start", *n]),
        },
    )
    out.update(
        paired(
            h,
            s["w1_alt_reps"],
            {
                "ours_caller": ("ours", ["inproc", "--mode", "caller", *alt]),
                "dbos_direct": ("peer_dbos", ["inproc", "--mode", "direct", *alt]),
                "ours_wait_for_run": ("ours", ["inproc", "--mode", "wait_for_run", *alt]),
            },
        )
    )
    return out


def run_w2(h: Harness, s: dict[str, int]) -> dict[str, Any]:
    common = ["--workflows", s["w2_workflows"], "--threads", 8]
    out = paired(
        h,
        s["w2_reps"],
        {
            "ours_signal": ("ours", ["inproc", "--mode", "signal", *common]),
            "dbos_start": ("peer_dbos", ["inproc", "--mode", "start", *common]),
        },
        warm=(16, 8),
    )
    out.update(
        paired(
            h,
            s["w2_alt_reps"],
            {
                "ours_caller": ("ours", ["inproc", "--mode", "caller", *common]),
                "dbos_direct": ("peer_dbos", ["inproc", "--mode", "direct", *common]),
            },
            warm=(16, 8),
        )
    )
    return out


def run_w3(h: Harness, s: dict[str, int]) -> dict[str, Any]:
    common = ["--workflows", 1, "--steps", 100]
    out = paired(
        h,
        s["w3_reps"],
        {
            "ours_signal": ("ours", ["inproc", "--mode", "signal", *common]),
            "dbos_start": ("peer_dbos", ["inproc", "--mode", "start", *common]),
        },
        warm=(1, 0),
    )
    out.update(
        paired(
            h,
            s["w3_alt_reps"],
            {
                "ours_caller": ("ours", ["inproc", "--mode", "caller", *common]),
                "dbos_direct": ("peer_dbos", ["inproc", "--mode", "direct", *common]),
            },
            warm=(1, 0),
        )
    )
    return out


def burst_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(results[0])
    for metric in ("workflows_per_s", "first_step_ms_p50", "first_step_ms_p99", "start_seconds"):
        out[metric] = summary([r[metric]["median"] for r in results])
    out["reps"] = len(results)
    out.pop("wall_s", None)
    return out


def run_w4(h: Harness, s: dict[str, int]) -> dict[str, Any]:
    """Celery worker (-c 2) and two DBOS queue workers run side by side; repetitions alternate."""
    out: dict[str, Any] = {}
    n = s["w4_workflows"]
    h.stop_servers()  # the in-process measuring processes are done; give their CPU back
    worker = h.celery_worker()
    dbos_workers = h.dbos_workers(2)
    try:
        out["ours_isolated"] = h.measure("ours", "isolated", "--samples", s["w4_iso"], BENCH_TRANSPORT="celery")
        out["chain_isolated"] = h.measure("peer_celery", "isolated", "--samples", s["w4_iso"])
        out["dbos_isolated"] = h.measure("peer_dbos", "isolated", "--samples", s["w4_iso_dbos"])
        raw: dict[str, list[dict[str, Any]]] = {"ours": [], "chain": [], "dbos": []}
        for rep in range(s["w4_reps"]):
            warm = 20 if rep == 0 else 5
            raw["ours"].append(
                h.measure(
                    "ours", "dispatched", "--workflows", n, "--reps", 1, "--warmup", warm, BENCH_TRANSPORT="celery"
                )
            )
            raw["chain"].append(h.measure("peer_celery", "chain", "--workflows", n, "--reps", 1, "--warmup", warm))
            raw["dbos"].append(h.measure("peer_dbos", "queue", "--workflows", n, "--reps", 1, "--warmup", warm))
        for key, results in raw.items():
            out[key] = burst_summary(results)
    finally:
        h.stop(worker)
        for w in dbos_workers:
            h.stop(w)
    out["setup"] = (
        "celery -A bench.celery_app worker -c 2 (prefork) on queues durable,bench; "
        "2 DBOS processes (python -m bench.dbos_app worker) on one DBOS queue, default polling 1 s, "
        "no concurrency limit; all started for the whole workload, repetitions alternate"
    )
    return out


def run_w5(h: Harness, s: dict[str, int]) -> dict[str, Any]:
    workers = h.durable_workers(2)
    try:
        reps = [
            h.measure("ours", "timers", "--runs", s["w5_runs"], "--lead", s["w5_lead"], BENCH_TRANSPORT="manual")
            for _ in range(s["w5_reps"])
        ]
        ours: dict[str, Any] = {"runs": s["w5_runs"], "lead_s": s["w5_lead"], "reps": len(reps)}
        for metric in ("last_late_ms", "p50_late_ms", "p99_late_ms", "first_late_ms", "woken_per_s"):
            ours[metric] = summary([r[metric] for r in reps])
        ours["all_suspended_before_due"] = all(r["all_suspended_before_due"] for r in reps)
        ours["raw"] = reps
        return {
            "ours": ours,
            "setup": "2 durable_worker processes (inline transport, default WORKER_INTERVAL 1s, SWEEP_BATCH 100); "
            "runs started by a separate process with the manual transport; each repetition a new set of sleepers",
        }
    finally:
        for w in workers:
            h.stop(w)


def run_w6(h: Harness, s: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    n = s["w6_workflows"]
    out["ours_inproc"] = h.server("ours").call("counts-inproc", "--workflows", n)
    out["dbos_inproc"] = h.server("peer_dbos").call("counts-inproc", "--workflows", n)
    worker = h.celery_worker(count_sql=True)
    try:
        out["ours_dispatched"] = h.measure(
            "ours", "counts-dispatched", "--workflows", s["w6_dispatched"], BENCH_TRANSPORT="celery"
        )
    finally:
        h.stop(worker)
    return out


# -- the table -------------------------------------------------------------------------------
def med(d: dict[str, Any] | None, *path: str) -> float | None:
    cur: Any = d
    for key in path:
        if cur is None:
            return None
        cur = cur.get(key)
    if isinstance(cur, dict):
        cur = cur.get("median")
    return float(cur) if isinstance(cur, (int, float)) else None


def fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "—"
    if abs(x) >= 100:
        s = f"{x:,.0f}"
    elif abs(x) >= 10:
        s = f"{x:.1f}"
    else:
        s = f"{x:.2f}"
    return s + unit


def spread(d: dict[str, Any] | None, *path: str) -> str:
    cur: Any = d
    for key in path:
        cur = (cur or {}).get(key)
    if isinstance(cur, dict) and cur.get("min") is not None and cur.get("n", 0) > 1:
        return f" [{fmt(cur['min'])}–{fmt(cur['max'])}]"
    return ""


def rows(res: dict[str, Any], sizes: dict[str, int]) -> list[dict[str, Any]]:
    """(workload, metric, ours, peer, ratio, target) rows for the table and the JSON."""
    out: list[dict[str, Any]] = []
    burst = f"{sizes['w4_workflows']:,}"
    timers = f"{sizes['w5_runs']:,}"

    def add(
        work: str,
        metric: str,
        ours: float | None,
        peer: float | None,
        *,
        higher: bool,
        target: str = "",
        goal: float | None = None,
        unit: str = "",
        ours_spread: str = "",
        peer_spread: str = "",
        peer_name: str = "DBOS",
    ) -> None:
        ratio = None
        if ours is not None and peer not in (None, 0):
            ratio = ours / peer if higher else peer / ours if ours else None
        met = None
        if goal is not None and ratio is not None:
            met = ratio >= goal
        out.append(
            {
                "workload": work,
                "metric": metric,
                "ours": ours,
                "peer": peer,
                "peer_name": peer_name,
                "advantage": ratio,
                "higher_is_better": higher,
                "target": target,
                "met": met,
                "unit": unit,
                "ours_spread": ours_spread,
                "peer_spread": peer_spread,
            }
        )

    w1 = res.get("w1")
    if w1:
        add(
            "1 seq, 3 local steps",
            "workflows/s (inline + completion signal vs start_workflow().get_result())",
            med(w1, "ours_signal", "workflows_per_s"),
            med(w1, "dbos_start", "workflows_per_s"),
            higher=True,
            target="≥3×",
            goal=3,
            ours_spread=spread(w1, "ours_signal", "workflows_per_s"),
            peer_spread=spread(w1, "dbos_start", "workflows_per_s"),
        )
        add(
            "1 seq, 3 local steps",
            "ms per step (same runs)",
            med(w1, "ours_signal", "ms_per_step"),
            med(w1, "dbos_start", "ms_per_step"),
            higher=False,
            unit=" ms",
            ours_spread=spread(w1, "ours_signal", "ms_per_step"),
            peer_spread=spread(w1, "dbos_start", "ms_per_step"),
        )
        add(
            "1 seq, 3 local steps",
            "workflows/s, caller's thread (run_turn vs direct call)",
            med(w1, "ours_caller", "workflows_per_s"),
            med(w1, "dbos_direct", "workflows_per_s"),
            higher=True,
            ours_spread=spread(w1, "ours_caller", "workflows_per_s"),
            peer_spread=spread(w1, "dbos_direct", "workflows_per_s"),
        )
        add(
            "1 seq, 3 local steps",
            "workflows/s, durable.wait_for_run (polling) vs start_workflow().get_result()",
            med(w1, "ours_wait_for_run", "workflows_per_s"),
            med(w1, "dbos_start", "workflows_per_s"),
            higher=True,
            ours_spread=spread(w1, "ours_wait_for_run", "workflows_per_s"),
        )
    w2 = res.get("w2")
    if w2:
        add(
            "2 eight callers",
            "workflows/s (inline + completion signal vs start_workflow().get_result())",
            med(w2, "ours_signal", "workflows_per_s"),
            med(w2, "dbos_start", "workflows_per_s"),
            higher=True,
            ours_spread=spread(w2, "ours_signal", "workflows_per_s"),
            peer_spread=spread(w2, "dbos_start", "workflows_per_s"),
        )
        add(
            "2 eight callers",
            "ms per step (wall / steps)",
            med(w2, "ours_signal", "ms_per_step"),
            med(w2, "dbos_start", "ms_per_step"),
            higher=False,
            unit=" ms",
        )
        add(
            "2 eight callers",
            "workflows/s, callers' threads (run_turn vs direct call)",
            med(w2, "ours_caller", "workflows_per_s"),
            med(w2, "dbos_direct", "workflows_per_s"),
            higher=True,
            ours_spread=spread(w2, "ours_caller", "workflows_per_s"),
            peer_spread=spread(w2, "dbos_direct", "workflows_per_s"),
        )
    w3 = res.get("w3")
    if w3:
        add(
            "3 one workflow, 100 steps",
            "ms per step (inline vs start_workflow)",
            med(w3, "ours_signal", "ms_per_step"),
            med(w3, "dbos_start", "ms_per_step"),
            higher=False,
            unit=" ms",
            ours_spread=spread(w3, "ours_signal", "ms_per_step"),
            peer_spread=spread(w3, "dbos_start", "ms_per_step"),
        )
        add(
            "3 one workflow, 100 steps",
            "ms per step, caller's thread",
            med(w3, "ours_caller", "ms_per_step"),
            med(w3, "dbos_direct", "ms_per_step"),
            higher=False,
            unit=" ms",
            ours_spread=spread(w3, "ours_caller", "ms_per_step"),
            peer_spread=spread(w3, "dbos_direct", "ms_per_step"),
        )
    w4 = res.get("w4")
    if w4:
        add(
            "4 dispatched, 3 steps",
            "workflows/s end to end vs DBOS queue (2 worker processes)",
            med(w4, "ours", "workflows_per_s"),
            med(w4, "dbos", "workflows_per_s"),
            higher=True,
            target="≥2×",
            goal=2,
            ours_spread=spread(w4, "ours", "workflows_per_s"),
            peer_spread=spread(w4, "dbos", "workflows_per_s"),
        )
        add(
            "4 dispatched, 3 steps",
            "workflows/s end to end vs bare Celery chain",
            med(w4, "ours", "workflows_per_s"),
            med(w4, "chain", "workflows_per_s"),
            higher=True,
            peer_name="Celery chain",
            peer_spread=spread(w4, "chain", "workflows_per_s"),
        )
        iso_o = (w4.get("ours_isolated") or {}).get("first_step_ms", {})
        iso_d = (w4.get("dbos_isolated") or {}).get("first_step_ms", {})
        iso_c = (w4.get("chain_isolated") or {}).get("first_step_ms", {})
        add(
            "4 dispatched, 3 steps",
            "start→first step p50, one at a time (vs DBOS queue)",
            iso_o.get("p50"),
            iso_d.get("p50"),
            higher=False,
            unit=" ms",
            target="<10 ms",
        )
        out[-1]["met"] = iso_o.get("p50") is not None and iso_o["p50"] < 10
        add(
            "4 dispatched, 3 steps",
            "start→first step p99, one at a time (vs DBOS queue)",
            iso_o.get("p99"),
            iso_d.get("p99"),
            higher=False,
            unit=" ms",
        )
        add(
            "4 dispatched, 3 steps",
            "start→first step p50, one at a time (vs Celery chain)",
            iso_o.get("p50"),
            iso_c.get("p50"),
            higher=False,
            unit=" ms",
            peer_name="Celery chain",
        )
        add(
            "4 dispatched, 3 steps",
            f"start→first step p50 under the {burst}-workflow burst",
            med(w4, "ours", "first_step_ms_p50"),
            med(w4, "dbos", "first_step_ms_p50"),
            higher=False,
            unit=" ms",
        )
        add(
            "4 dispatched, 3 steps",
            f"start→first step p99 under the {burst}-workflow burst",
            med(w4, "ours", "first_step_ms_p99"),
            med(w4, "dbos", "first_step_ms_p99"),
            higher=False,
            unit=" ms",
        )
        ours_step = 1000 / (3 * med(w4, "ours", "workflows_per_s")) if med(w4, "ours", "workflows_per_s") else None
        chain_step = 1000 / (3 * med(w4, "chain", "workflows_per_s")) if med(w4, "chain", "workflows_per_s") else None
        add(
            "4 dispatched, 3 steps",
            "cost per step at saturation (wall ms / step) vs Celery hop",
            ours_step,
            chain_step,
            higher=False,
            unit=" ms",
            target="≤2× hop",
            goal=0.5,
            peer_name="Celery chain",
        )
        e2e_o = (w4.get("ours_isolated") or {}).get("end_to_end_ms", {}).get("p50")
        e2e_c = (w4.get("chain_isolated") or {}).get("end_to_end_ms", {}).get("p50")
        add(
            "4 dispatched, 3 steps",
            "end to end, one at a time, p50 (vs Celery chain)",
            e2e_o,
            e2e_c,
            higher=False,
            unit=" ms",
            peer_name="Celery chain",
        )
    w5 = (res.get("w5") or {}).get("ours")
    if w5:
        last = med(w5, "last_late_ms")
        add(
            f"5 {timers} timers",
            "last wake after due (durable_worker ×2)",
            last,
            None,
            higher=False,
            unit=" ms",
            target="≤2,000 ms",
            peer_name="—",
            ours_spread=spread(w5, "last_late_ms"),
        )
        out[-1]["met"] = last is not None and last <= 2000 and bool(w5.get("all_suspended_before_due"))
        add(
            f"5 {timers} timers",
            "p50 wake after due",
            med(w5, "p50_late_ms"),
            None,
            higher=False,
            unit=" ms",
            peer_name="—",
            ours_spread=spread(w5, "p50_late_ms"),
        )
        add(
            f"5 {timers} timers",
            "woken per second",
            med(w5, "woken_per_s"),
            None,
            higher=True,
            peer_name="—",
            ours_spread=spread(w5, "woken_per_s"),
        )
    w6 = res.get("w6")
    if w6:
        o, d, od = (w6.get("ours_inproc") or {}), (w6.get("dbos_inproc") or {}), (w6.get("ours_dispatched") or {})
        ops, dps = o.get("per_step", {}), d.get("per_step", {})
        add(
            "6 SQL per in-process step",
            "statements",
            ops.get("statements"),
            dps.get("statements"),
            higher=False,
            target="≤3",
        )
        out[-1]["met"] = ops.get("statements") is not None and ops["statements"] <= 3
        add("6 SQL per in-process step", "transactions (commits)", _txns(ops), _txns(dps), higher=False, target="≤1")
        out[-1]["met"] = _txns(ops) is not None and _txns(ops) <= 1
        add(
            "6 SQL per in-process step",
            "round trips (statements + BEGIN/COMMIT)",
            ops.get("round_trips"),
            dps.get("round_trips"),
            higher=False,
        )
        opg, dpg = ops.get("pgss") or {}, dps.get("pgss") or {}
        add(
            "6 SQL per in-process step",
            "server: statements (pg_stat_statements, incl. FK checks)",
            opg.get("statements"),
            dpg.get("statements"),
            higher=False,
        )
        add(
            "6 SQL per in-process step",
            "server: COMMITs (pg_stat_statements)",
            opg.get("commit"),
            dpg.get("commit"),
            higher=False,
        )
        add(
            "6 SQL per in-process workflow",
            "fixed statements per workflow (start + turn)",
            o.get("per_workflow_fixed", {}).get("statements"),
            d.get("per_workflow_fixed", {}).get("statements"),
            higher=False,
        )
        dps2 = od.get("per_step", {})
        add(
            "6 SQL per dispatched step",
            "statements (driver + workers)",
            dps2.get("statements"),
            0.0,
            higher=False,
            peer_name="Celery chain",
        )
        add(
            "6 SQL per dispatched step",
            "transactions (commits)",
            _txns(dps2),
            0.0,
            higher=False,
            peer_name="Celery chain",
        )
        dpg2 = dps2.get("pgss") or {}
        add(
            "6 SQL per dispatched step",
            "server: statements / COMMITs (pg_stat_statements)",
            dpg2.get("statements"),
            dpg2.get("commit"),
            higher=False,
            peer_name="(commits)",
        )
        out[-1]["advantage"] = None
    return out


def _txns(d: dict[str, Any]) -> float | None:
    if "explicit_txns" not in d:
        return None
    return d["explicit_txns"] + d["autocommit_txns"]


def print_table(table: list[dict[str, Any]]) -> None:
    head = ("workload", "metric", "ours", "peer", "peer value", "advantage", "target")
    lines = []
    for r in table:
        adv = r["advantage"]
        adv_s = "—" if adv is None else f"{adv:.2f}×"
        if r["met"] is True:
            tgt = f"{r['target']} ✓"
        elif r["met"] is False:
            tgt = f"{r['target']} ✗"
        else:
            tgt = r["target"]
        lines.append(
            (
                r["workload"],
                r["metric"],
                fmt(r["ours"], r["unit"]) + r["ours_spread"],
                r["peer_name"],
                fmt(r["peer"], r["unit"]) + r["peer_spread"],
                adv_s,
                tgt,
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=True)]
    sep = "  "
    print(sep.join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print(sep.join("-" * w for w in widths))
    for line in lines:
        print(sep.join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)))
    print(
        "advantage: ours ÷ peer for rates, peer ÷ ours for times and counts (>1 means we are ahead); "
        "[min–max] over repetitions; figures are medians"
    )


def print_sql(res: dict[str, Any]) -> None:
    w6 = res.get("w6") or {}
    for key, title in (
        ("ours_inproc", "django-durable, per in-process step"),
        ("ours_dispatched", "django-durable, per dispatched step (driver + workers)"),
        ("dbos_inproc", "DBOS, per @DBOS.step"),
    ):
        d = w6.get(key)
        if not d:
            continue
        print(f"\n{title}:")
        for sql, n in d["per_step"]["sql"].items():
            print(f"  {n:>6.2f}  {sql[:160]}")
        print("  fixed per workflow:")
        for sql, n in d["per_workflow_fixed"]["sql"].items():
            print(f"  {n:>6.2f}  {sql[:160]}")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="./bench/run", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads (w1..w6)")
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="standard",
        help="standard: ~10 minutes on 2 cores; issue: the issue's sizes; quick: try the harness",
    )
    parser.add_argument("--rev", help="measure durable/ from this git revision instead of the work tree")
    parser.add_argument(
        "--pg",
        choices=["private", "shared"],
        default=os.environ.get("BENCH_PG", "private"),
        help="private: start a PostgreSQL cluster of our own (pg_stat_statements loaded); "
        "shared: use --database-url/--dbos-url",
    )
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    parser.add_argument("--dbos-url", default=os.environ.get("BENCH_DBOS_DATABASE_URL", DEFAULT_DBOS_DB))
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS))
    parser.add_argument("--out", default=str(BENCH / "results"))
    parser.add_argument(
        "--otel",
        action="store_true",
        help="durable with DURABLE['OPENTELEMETRY'] on: the SDK installed in every process, spans and "
        "metrics recorded, spans exported to a discarding exporter (bench/apps.py)",
    )
    args = parser.parse_args()
    if args.otel:
        os.environ["BENCH_OTEL"] = "1"  # inherited by every process this run starts
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    sizes = SIZES[args.size]

    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-"))
    pythonpath, code = code_under_test(args, tmp)
    logdir = tmp / "logs"
    logdir.mkdir()
    private = None
    if args.pg == "private":
        private = PrivatePostgres(tmp)
        args.database_url = f"{private.url}/bench"
        args.dbos_url = f"{private.url}/bench_dbos"
    harness = Harness(args, logdir, pythonpath)
    started = datetime.now(UTC)
    t0 = time.monotonic()
    results: dict[str, Any] = {}
    try:
        print(f"==> resetting {args.database_url}, {args.dbos_url}, {args.redis_url}", flush=True)
        reset_database(args.database_url)
        reset_database(args.dbos_url)
        reset_redis(args.redis_url)
        subprocess.run([PY, "-m", "django", "migrate", "-v0"], env=harness.env(), cwd=logdir, check=True)
        info = machine(args, code)
        print_machine(info)
        for name in only:
            print(f"==> {name}", flush=True)
            t = time.monotonic()
            results[name] = globals()[f"run_{name}"](harness, sizes)
            print(f"   ({time.monotonic() - t:.0f} s)", flush=True)
    finally:
        harness.stop_all()
        if private is not None:
            private.stop()
    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    table = rows(results, sizes)
    print()
    print_machine(info)
    print()
    print_table(table)
    print_sql(results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    doc = {
        "started_at": started.isoformat(),
        "duration_s": round(time.monotonic() - t0, 1),
        "command": " ".join(["./bench/run", *sys.argv[1:]]),
        "size": args.size,
        "otel": bool(args.otel),
        "sizes": sizes,
        "machine": info,
        "table": table,
        "results": results,
        "logs": str(logdir),
    }
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"\nresults: {path}  (process logs: {logdir}; total {doc['duration_s']:.0f} s)")
    shutil.rmtree(tmp / "code", ignore_errors=True)


def print_machine(info: dict[str, Any]) -> None:
    print(
        f"machine: {info['cpu']}, {info['cores']} cores, {info['ram_gib']} GiB RAM; load {info['loadavg_at_start']}"
        + (f" → {info['loadavg_at_end']}" if "loadavg_at_end" in info else "")
        + f"; PostgreSQL commit {info['commit_latency']['p50_ms']} ms p50 / {info['commit_latency']['p90_ms']} ms p90"
    )
    print(
        f"versions: Python {info['python']}, Django {info['django']}, PostgreSQL {info['postgresql']}, "
        f"Redis {info['redis']}, Celery {info['celery']}, dbos {info['dbos']}, psycopg {info['psycopg']}, "
        f"SQLAlchemy {info['sqlalchemy']}; {info['durable_code']}"
    )


if __name__ == "__main__":
    main()
