"""Recovery time after ``kill -9``, on Celery and on ``durable_worker``: a measurement, not a test.

    .venv/bin/python -m bench.recovery [--kills 5] [--lease 5] [--sweep 1] [--backlog 100]

Starts a throw-away PostgreSQL cluster and a redis-server of its own (free
ports, removed at the end; nothing shared is touched). Each kill: start a run
whose one dispatched step hangs on its first attempt, wait until that attempt
runs, ``kill -9`` the process group of the worker running it, and time from
the kill to the start of the step's second attempt (the work resumed). With
``--backlog N``, N short runs are started just before each kill, so the work
queue is busy when recovery has to happen.

Modes (``--modes``):

``celery-takeover``  two prefork Celery workers (``-Q durable,durable.sweeps``) and beat; the
                     survivor takes over once the lease lapses. Bound: ``LEASE + SWEEP_INTERVAL``.
``celery-restart``   one Celery worker and beat; the killed worker is started again at once, and
                     its start-up releases what its dead predecessor held. Bound: start-up time
                     plus one sweep.
``worker-takeover``  two ``durable_worker`` processes; the survivor takes over. Bound:
                     ``LEASE + WORKER_INTERVAL``.
``worker-restart``   one ``durable_worker``, started again at once. Bound: start-up time.

The machine's load average is printed with the figures: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import wait_for

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
MODES = ("celery-takeover", "celery-restart", "worker-takeover", "worker-restart")
HANG = 600.0  # the first attempt's hang: "forever" (its worker is killed long before)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.popen = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no", "--dir", str(tmp)],
            stdout=(tmp / "redis.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        import redis

        client = redis.Redis.from_url(self.url)

        def ping() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_for(ping, "the private redis-server", 30)

    def stop(self) -> None:
        self.popen.terminate()
        self.popen.wait(timeout=10)


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path, db_url: str, redis_url: str) -> None:
        self.args, self.tmp, self.db_url, self.redis_url = args, tmp, db_url, redis_url
        self.executions = tmp / "executions.log"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.durable = {
            "LEASE": args.lease,
            "STEP_EXECUTION_LEASE": args.lease,
            "SWEEP_INTERVAL": args.sweep,
            "WORKER_INTERVAL": args.sweep,
        }

    def env(self, transport: str, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "DATABASE_URL": self.db_url,
            "CELERY_BROKER_URL": self.redis_url,
            "BENCH_TRANSPORT": transport,
            "BENCH_DURABLE": json.dumps(self.durable),
            "BENCH_RECOVERY_LOG": str(self.executions),
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
            **extra,
        }

    def spawn(self, name: str, cmd: list[str], transport: str, **extra: str) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("ab")
        popen = subprocess.Popen(
            cmd,
            env=self.env(transport, **extra),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = popen
        return popen

    def worker(self, mode: str, name: str) -> subprocess.Popen[bytes]:
        """A Celery worker or a ``durable_worker`` named ``name``; returns once it consumes (or polls)."""
        ready = self.tmp / f"{name}.ready"
        ready.unlink(missing_ok=True)
        if mode.startswith("celery"):
            cmd = [PY, "-m", "celery", "-A", "bench.celery_app", "worker", "-Q", "durable,durable.sweeps"]
            cmd += ["-c", "2", "-n", f"{name}@%h", "--without-mingle", "--without-gossip", "-l", "INFO"]
            popen = self.spawn(name, cmd, "celery", BENCH_READY_FILE=str(ready))
            wait_for(lambda: ready.exists() or popen.poll() is not None, f"{name} to consume", 120)
        else:
            log = self.tmp / f"{name}.log"
            seen = log.stat().st_size if log.exists() else 0
            popen = self.spawn(name, [PY, "-m", "django", "durable_worker"], "inline")
            wait_for(lambda: "running" in log.read_text(errors="replace")[seen:] or popen.poll() is not None, name, 120)
        if popen.poll() is not None:
            raise SystemExit(f"{name} exited with {popen.returncode}; see {self.tmp / (name + '.log')}")
        return popen

    def beat(self) -> None:
        self.spawn(
            "beat", [PY, "-m", "celery", "-A", "bench.celery_app", "beat", "-s", str(self.tmp / "beat-db")], "celery"
        )

    def kill9(self, name: str) -> None:
        popen = self.procs.pop(name)
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        popen.wait(timeout=30)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill9(name)

    def records(self, run_id: str) -> list[dict[str, Any]]:
        try:
            lines = self.executions.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [r for r in map(json.loads, filter(None, lines)) if r["run"] == run_id]

    def attempt(self, run_id: str, attempt: int, timeout: float) -> dict[str, Any]:
        found = wait_for(
            lambda: [r for r in self.records(run_id) if r["attempt"] == attempt], f"attempt {attempt}", timeout
        )
        return dict(found[0])

    def owner_of(self, pid: int) -> str:
        """The name of the worker whose process group ``pid`` (a pool process, or the worker) is in."""
        group = os.getpgid(pid)
        return next(name for name, popen in self.procs.items() if popen.pid == group)


def measure(bench: Bench, mode: str, kills: int) -> dict[str, Any]:
    import durable
    from durable.models import Run

    takeover = mode.endswith("takeover")
    names = ["w1", "w2"] if takeover else ["w1"]
    for name in names:
        bench.worker(mode, f"{mode}-{name}")
    if mode.startswith("celery"):
        bench.beat()
    load_before = os.getloadavg()
    seconds: list[float] = []
    started: list[float] = []  # restart modes: from the kill until the new worker consumes or polls
    runs: list[str] = []
    hung: list[str] = []  # the runs whose step was killed
    for _ in range(kills):
        for _ in range(bench.args.backlog):
            runs.append(durable.start("bench_recovery_fill", 0.05))
        run_id = durable.start("bench_recovery", HANG)
        runs.append(run_id)
        hung.append(run_id)
        first = bench.attempt(run_id, 1, 120)
        victim = bench.owner_of(first["pid"])
        killed_at = time.time()
        bench.kill9(victim)
        if not takeover:
            bench.worker(mode, victim)
            started.append(time.time() - killed_at)
        second = bench.attempt(run_id, 2, bench.args.lease * 4 + 120)
        seconds.append(second["at"] - killed_at)
        print(f"   {mode}: resumed {seconds[-1]:.2f}s after the kill", flush=True)
        if takeover:
            bench.worker(mode, victim)
    wait_for(lambda: Run.objects.filter(id__in=runs).exclude(status="completed").count() == 0, "every run", 300)
    twice = [r for r in hung if len(bench.records(r)) != 2]
    bench.stop_all()
    sweeps = sweep_seconds(bench.tmp, mode)
    interval = bench.args.sweep
    return {
        "mode": mode,
        "kills": kills,
        "seconds": [round(s, 2) for s in seconds],
        "min": round(min(seconds), 2),
        "median": round(statistics.median(seconds), 2),
        "max": round(max(seconds), 2),
        "restart_ready_median": round(statistics.median(started), 2) if started else None,
        "bound": round(bench.args.lease + interval, 2) if takeover else None,
        "within_bound": (max(seconds) <= bench.args.lease + interval) if takeover else None,
        "runs_completed": len(runs),
        "hung_steps_not_run_exactly_twice": twice,
        "sweeps_run": len(sweeps),
        "sweep_seconds_median": round(statistics.median(sweeps), 4) if sweeps else None,
        "sweep_seconds_max": round(max(sweeps), 4) if sweeps else None,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def sweep_seconds(tmp: Path, mode: str) -> list[float]:
    """How long each ``durable.sweep`` task took on this mode's Celery workers (from their logs)."""
    found = []
    for log in tmp.glob(f"{mode}-*.log"):
        for match in re.finditer(
            r"Task durable\.sweep\[[^\]]+\] succeeded in ([0-9.]+)s", log.read_text(errors="replace")
        ):
            found.append(float(match.group(1)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--lease", type=float, default=5.0, help="LEASE and STEP_EXECUTION_LEASE (seconds)")
    parser.add_argument("--sweep", type=float, default=1.0, help="SWEEP_INTERVAL and WORKER_INTERVAL (seconds)")
    parser.add_argument("--backlog", type=int, default=100, help="short runs started before each kill")
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    from bench.common import PrivatePostgres

    with tempfile.TemporaryDirectory(prefix="durable-recovery-") as tmpdir:
        tmp = Path(tmpdir)
        pg, rd = PrivatePostgres(tmp), PrivateRedis(tmp)
        try:
            results = run_all(args, tmp, f"{pg.url}/postgres", rd.url)
        finally:
            rd.stop()
            pg.stop()
    report(args, results)


def run_all(args: argparse.Namespace, tmp: Path, db_url: str, redis_url: str) -> list[dict[str, Any]]:
    os.environ.update(
        DJANGO_SETTINGS_MODULE="bench.settings",
        DATABASE_URL=db_url,
        CELERY_BROKER_URL=redis_url,
        BENCH_TRANSPORT="manual",  # the driver only writes runs; the workers' sweeps find them
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    bench = Bench(args, tmp, db_url, redis_url)
    try:
        return [measure(bench, mode, args.kills) for mode in args.modes.split(",")]
    finally:
        bench.stop_all()


def report(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    print(f"\nrecovery after kill -9: LEASE={args.lease}s, sweep interval={args.sweep}s, backlog={args.backlog}")
    print(f"{'mode':<17} {'min':>6} {'median':>7} {'max':>6} {'bound':>6} {'ready':>6}  load (1/5/15) before → after")
    for r in results:
        bound = f"{r['bound']:.1f}" if r["bound"] is not None else "-"
        ready = f"{r['restart_ready_median']:.2f}" if r["restart_ready_median"] is not None else "-"
        load = f"{'/'.join(map(str, r['load_before']))} → {'/'.join(map(str, r['load_after']))}"
        print(f"{r['mode']:<17} {r['min']:>6.2f} {r['median']:>7.2f} {r['max']:>6.2f} {bound:>6} {ready:>6}  {load}")
    print("ready: median seconds from the kill until the restarted worker consumed (or polled)")
    for r in results:
        if r["sweeps_run"]:
            print(
                f"{r['mode']}: {r['sweeps_run']} sweeps took median {r['sweep_seconds_median']}s, "
                f"max {r['sweep_seconds_max']}s"
            )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = REPO / "bench" / "results" / f"recovery-{stamp}.json"
    out.write_text(json.dumps({"args": vars(args), "cpus": os.cpu_count(), "results": results}, indent=2) + "\n")
    print(f"\nwritten to {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
