"""Processes, waits and accounting for the Celery integration suite.

:class:`Cluster` starts real ``celery worker`` (and ``celery beat``)
subprocesses on the test database and our own Redis database, and kills every
one of them at teardown, even when the test failed. :class:`Sweeper` is a
thread of the test process that stands in for beat: it calls
``durable.worker.tick(engine, execute=False)`` a few times a second, which is
exactly what beat's ``durable.sweep`` task does on a worker, so recovered work
is announced through Redis and executed by the workers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.models import Count, Q
from django.utils import timezone

from durable import worker as sweeps
from durable.models import Checkpoint, Run
from durable.runtime import get_engine
from tests.integration.common import BROKER_ENV, LOG_ENV, READY_ENV, SETTINGS_ENV, session
from tests.integration.workflows import read_log

REPO = Path(__file__).resolve().parents[2]
SETTLE = 90.0  # default deadline of explicit waits (seconds): only a stuck run reaches it
DB_ERRORS = (OperationalError, InterfaceError, DatabaseError)


# -- waiting -----------------------------------------------------------------


def wait_until(
    predicate: Callable[[], Any],
    what: str,
    *,
    timeout: float = SETTLE,
    diagnostics: Callable[[], str] | None = None,
    interval: float = 0.05,
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail clearly after ``timeout``.

    Database errors count as "not yet" (the database may be restarting) and drop
    this thread's connection so the next poll reconnects.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except DB_ERRORS as exc:
            last_error = exc
            connections.close_all()
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            detail = diagnostics() if diagnostics is not None else ""
            note = f"\nlast database error: {last_error!r}" if last_error is not None else ""
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}{note}\n{detail}", pytrace=False)
        time.sleep(interval)


# -- processes -----------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    ready_file: Path | None = None
    queues: tuple[str, ...] = ()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill9(self) -> None:
        """SIGKILL the whole process group: no cleanup, no ack, no graceful anything."""
        if self.alive():
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.popen.wait(timeout=10)

    def output(self, tail: int | None = None) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-tail:] if tail else lines)


def database_url() -> str:
    """URL of the *test* database (pytest-django renamed it), for the subprocesses."""
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.fail("the Celery integration suite needs PostgreSQL: set DATABASE_URL=postgres://...")
    user = quote(db.get("USER") or "postgres")
    password = db.get("PASSWORD") or ""
    auth = f"{user}:{quote(password)}" if password else user
    return f"postgres://{auth}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{quote(db['NAME'])}"


class Cluster:
    """Worker and beat subprocesses of one test, a sweeper thread, and the step log."""

    settings_module = "tests.integration.settings"  # of the subprocesses

    def __init__(self, tmp: Path, broker: str, durable_extra: dict[str, Any]) -> None:
        self.tmp = tmp
        self.broker = broker
        self.durable_extra = durable_extra
        self.log = tmp / "steps.log"
        self.procs: list[Proc] = []
        self.sweepers: list[Sweeper] = []
        self.redis = redis.Redis.from_url(broker)

    # -- processes ------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_SETTINGS"))}
        env.update(
            DJANGO_SETTINGS_MODULE=self.settings_module,
            DATABASE_URL=database_url(),
            CELERY_BROKER_URL=self.broker,
            PYTHONUNBUFFERED="1",
            PYTHONPATH=str(REPO),
        )
        env[BROKER_ENV] = self.broker
        env[SETTINGS_ENV] = json.dumps(self.durable_extra)
        env[LOG_ENV] = str(self.log)
        return env

    def _spawn(
        self, name: str, args: list[str], *, ready: bool, env: dict[str, str] | None = None, module: str = "celery"
    ) -> Proc:
        """Start ``python -m <module> <args>`` (by default ``celery -A tests.integration.celery_app``)."""
        log = self.tmp / f"{name}.log"
        env = {**self.env(), **(env or {})}
        ready_file = None
        if ready:
            ready_file = self.tmp / f"{name}.ready"
            env[READY_ENV] = str(ready_file)
        app = ["-A", "tests.integration.celery_app"] if module == "celery" else []
        cmd = [sys.executable, "-m", module, *app, *args]
        with open(log, "ab") as out:  # appended: a process restarted under its name keeps one log
            popen = subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        proc = Proc(name, popen, log, ready_file)
        self.procs.append(proc)
        return proc

    def spawn_worker(
        self,
        name: str,
        queues: Iterable[str] = ("durable", "alpha", "beta"),
        *,
        concurrency: int = 2,
        env: dict[str, str] | None = None,
        pool: str = "threads",
    ) -> Proc:
        queues = tuple(queues)
        proc = self._spawn(
            name,
            [
                "worker",
                "-Q",
                ",".join(queues),
                "-P",
                pool,
                "-c",
                str(concurrency),
                "-n",
                f"{name}-{os.getpid()}@%h",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
                "-l",
                "INFO",
            ],
            ready=True,
            env=env,
        )
        proc.queues = queues
        return proc

    def wait_ready(self, *procs: Proc, timeout: float = SETTLE) -> None:
        def ready() -> bool:
            for p in procs:
                if not p.alive():
                    pytest.fail(f"worker {p.name} exited with {p.popen.returncode}:\n{p.output(60)}", pytrace=False)
            return all(p.ready_file is not None and p.ready_file.exists() for p in procs)

        wait_until(
            ready,
            f"workers {[p.name for p in procs]} to consume their queues",
            timeout=timeout,
            diagnostics=self.diagnostics,
        )

    def workers(self, *specs: tuple[str, Iterable[str]], concurrency: int = 2) -> list[Proc]:
        """Start several workers at once and wait until all of them consume."""
        procs = [self.spawn_worker(name, queues, concurrency=concurrency) for name, queues in specs]
        self.wait_ready(*procs)
        return procs

    def beat(self) -> Proc:
        """Real ``celery beat``: sends ``durable.sweep`` to ``SWEEP_QUEUE`` every ``SWEEP_INTERVAL``."""
        return self._spawn(
            "beat",
            ["beat", "-s", str(self.tmp / "beat-schedule"), "--pidfile=", "-l", "INFO"],
            ready=False,
        )

    def proc_by_pid(self, pid: int) -> Proc:
        for p in self.procs:
            if p.pid == pid:
                return p
        raise AssertionError(f"no process of this test has pid {pid}")

    def sweeper(self, interval: float = 0.25) -> Sweeper:
        sweeper = Sweeper(interval)
        self.sweepers.append(sweeper)
        sweeper.start()
        return sweeper

    def close(self) -> None:
        for sweeper in self.sweepers:
            sweeper.stop()
        for p in self.procs:
            p.kill9()

    # -- observations -----------------------------------------------------------
    def executions(self, run: str | None = None, *, kind: str = "step", **match: Any) -> list[dict[str, Any]]:
        """Log entries of ``kind`` (one per execution start), optionally for one run."""
        out = []
        for entry in read_log(self.log):
            if entry.get("kind") != kind or (run is not None and entry.get("run") != run):
                continue
            if all(entry.get(k) == v for k, v in match.items()):
                out.append(entry)
        return out

    def task_log_lines(self, needle: str) -> list[str]:
        return [line for p in self.procs for line in p.output().splitlines() if needle in line]

    def diagnostics(self) -> str:
        parts = []
        try:
            for run in Run.objects.order_by("created_at"):
                code = run.error and run.error.get("code")
                parts.append(
                    f"run {run.id} {run.status} locked_by={run.locked_by} until={run.locked_until} "
                    f"wake={run.wake_at} rec={run.recovery_attempts} err={code}"
                )
                for cp in Checkpoint.objects.filter(run_id=run.id).order_by("seq"):
                    parts.append(
                        f"   #{cp.seq} {cp.kind} {cp.name} {cp.status} attempts={cp.attempts} "
                        f"wake={cp.wake_at} dispatches={cp.dispatches}"
                    )
        except DB_ERRORS as exc:
            connections.close_all()
            parts.append(f"(database unavailable: {exc!r})")
        for sweeper in self.sweepers:
            parts.append(f"sweeper: ticks={sweeper.ticks} counts={dict(sweeper.counts)} errors={sweeper.errors[-3:]}")
        for entry in read_log(self.log):
            parts.append(f"log: {entry}")
        for p in self.procs:
            parts.append(f"--- {p.name} (pid {p.pid}, alive={p.alive()}) ---\n{p.output(40)}")
        return "\n".join(parts)

    # -- redis -------------------------------------------------------------------
    def _keys(self, pattern: str = "*") -> list[bytes]:
        return list(self.redis.scan_iter(f"{session()}:{pattern}"))

    def forget_messages(self) -> int:
        """Delete every key of this session (queues, unacked messages, bindings)."""
        keys = self._keys()
        return int(self.redis.delete(*keys)) if keys else 0

    def queue_length(self, queue: str) -> int:
        return sum(int(self.redis.llen(key)) for key in self._keys(f"{queue}*") if self.redis.type(key) == b"list")

    def drop_queue(self, queue: str) -> int:
        """Delete the queue's lists (every priority band): the messages in it are lost."""
        keys = [key for key in self._keys(f"{queue}*") if self.redis.type(key) == b"list"]
        return int(self.redis.delete(*keys)) if keys else 0

    def redis_restart(self) -> int:
        """What a Redis restart without persistence does to us: every key gone, every connection dropped.

        Only this session's keys are deleted and only its connections (named
        after the session) are killed, so other users of this Redis server,
        including other runs of this suite, are not disturbed. Returns the
        number of connections killed.
        """
        self.forget_messages()
        killed = 0
        for client in self.redis.client_list():
            if client.get("name") == session():
                killed += int(self.redis.client_kill_filter(_id=client["id"]))
        return killed


class Sweeper:
    """A thread that runs ``sweeps.tick(engine, execute=False)`` every ``interval`` seconds.

    Each tick uses a fresh database connection (closed after the tick), so the
    sweeper survives a database restart; errors are recorded, never raised.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.ticks = 0
        self.counts: Counter[str] = Counter()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="it-sweeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.counts.update(sweeps.tick(get_engine(), execute=False))
            except Exception as exc:
                self.errors.append(repr(exc))
            finally:
                connections.close_all()
            self.ticks += 1
            self._stop.wait(self.interval)

    def wait_ticks(self, n: int, timeout: float = SETTLE) -> None:
        target = self.ticks + n
        wait_until(lambda: self.ticks >= target, f"{n} more sweeper ticks", timeout=timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# -- leases made to lapse ------------------------------------------------------
#
# The workers keep leases far longer than any test waits (common.BASE_DURABLE). Where a
# test needs one to lapse (its holder was killed, its message lost), it writes the expiry
# into the past, as the passing of the lease window would, and the next sweep acts on it.


def _past() -> Any:
    return timezone.now() - timedelta(seconds=1)


def lapse_run_leases(run_ids: Iterable[str]) -> int:
    """The turn leases of these runs (those still ``running``) run out now; returns how many."""
    return Run.objects.filter(id__in=list(run_ids), status="running").update(locked_until=_past())


def steps_held_by(proc: Proc) -> dict[tuple[str, int], int]:
    """The step attempts a (killed) process had claimed and not settled: {(run, seq): attempt}."""
    held = Checkpoint.objects.filter(locked_by__contains=f":{proc.pid}:", kind="step", status="running")
    return {(run, seq): attempts for run, seq, attempts in held.values_list("run_id", "seq", "attempts")}


def lapse_leases_of(proc: Proc) -> int:
    """Every lease a killed process held (its turns' and its steps') runs out now; returns how many."""
    owner = Q(locked_by__contains=f":{proc.pid}:")  # owner ids are host:pid:suffix
    runs = Run.objects.filter(owner, status="running").update(locked_until=_past())
    steps = Checkpoint.objects.filter(owner, kind="step", status="running").update(wake_at=_past())
    return runs + steps


def lapse_step_leases(run_ids: Iterable[str], status: str, seq: int | None = None) -> int:
    """The leases of these runs' steps in ``status`` run out now; returns how many.

    ``running``: the execution lease of a claimed step (its worker died);
    ``pending``: the dispatch lease of a step no worker claimed (its message was lost).
    """
    steps = Checkpoint.objects.filter(run_id__in=list(run_ids), kind="step", status=status)
    if seq is not None:
        steps = steps.filter(seq=seq)
    return steps.update(wake_at=_past())


def lapse_when_stalled(
    lapse: Callable[[], int], progress: Callable[[], Any], *, stall: float = 5.0
) -> Callable[[], None]:
    """A hook for a waiting loop: when ``progress()`` has not changed for ``stall`` seconds, ``lapse()``.

    For outages, where what was cut off is only known afterwards: work that waits
    on a lease (a dispatch whose message was lost, a turn or step whose write
    failed) makes no progress until that lease lapses; the hook makes it lapse
    then, as the lease window passing would. On a slow machine it may lapse a
    lease whose holder is alive but slow: the engine must (and does) cope with
    that too, so the outcome never depends on the machine's speed.
    """
    state = {"seen": progress(), "since": time.monotonic()}

    def check() -> None:
        now, seen = time.monotonic(), progress()
        if seen != state["seen"]:
            state.update(seen=seen, since=now)
        elif now - state["since"] >= stall:
            lapse()
            state["since"] = now

    return check


# -- accounting ----------------------------------------------------------------


@dataclass
class Accounting:
    """What happened to a set of runs, from the database and the execution log."""

    status: dict[str, str]
    output: dict[str, Any]
    checkpoints: dict[str, list[tuple[int, str, str, str, int]]]  # run -> [(seq, kind, name, status, attempts)]
    executions: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # (run, seq) -> attempts logged
    resumes: Counter[str] = field(default_factory=Counter)  # run -> executions of the "after_1" local step

    def step_attempts(self, run: str) -> dict[int, int]:
        return {seq: attempts for seq, kind, _, _, attempts in self.checkpoints[run] if kind == "step"}

    def completed(self) -> int:
        return sum(1 for s in self.status.values() if s == "completed")


def account(cluster: Cluster, run_ids: Iterable[str]) -> Accounting:
    run_ids = list(run_ids)
    dupes = list(
        Checkpoint.objects.filter(run_id__in=run_ids).values("run_id", "seq").annotate(n=Count("id")).filter(n__gt=1)
    )
    assert not dupes, f"more than one checkpoint at a position: {dupes}"
    runs = {r.id: r for r in Run.objects.filter(id__in=run_ids)}
    assert set(runs) == set(run_ids), f"missing runs: {set(run_ids) - set(runs)}"
    cps: dict[str, list[tuple[int, str, str, str, int]]] = defaultdict(list)
    for cp in Checkpoint.objects.filter(run_id__in=run_ids).order_by("run_id", "seq"):
        cps[cp.run_id].append((cp.seq, cp.kind, cp.name, cp.status, cp.attempts))
    executions: dict[tuple[str, int], list[int]] = defaultdict(list)
    for entry in cluster.executions():
        if entry["run"] in runs:
            executions[(entry["run"], entry["seq"])].append(entry["attempt"])
    resumes: Counter[str] = Counter(e["run"] for e in cluster.executions(kind="resumed") if e["run"] in runs)
    return Accounting(
        status={rid: runs[rid].status for rid in run_ids},
        output={rid: runs[rid].output for rid in run_ids},
        checkpoints={rid: cps[rid] for rid in run_ids},
        executions=dict(executions),
        resumes=resumes,
    )


PIPELINE_SHAPE = [
    (1, "step", "alpha.inc"),
    (2, "local", "after_1"),
    (3, "step", "beta.double"),
    (4, "step", "alpha.square"),
]


def assert_pipeline_history(acc: Accounting, run: str) -> None:
    """The run's history is exactly the pipeline's four positions, all completed, one row each."""
    shape = [(seq, kind, name) for seq, kind, name, _, _ in acc.checkpoints[run]]
    assert shape == PIPELINE_SHAPE, f"{run}: history {acc.checkpoints[run]}"
    assert all(status == "completed" for _, _, _, status, _ in acc.checkpoints[run]), acc.checkpoints[run]


def assert_executions_match_attempts(
    acc: Accounting, run: str, killed: Mapping[tuple[str, int], int] | None = None
) -> None:
    """Every execution of a step was a claimed attempt, each attempt executed once.

    The log holds one line per execution with the attempt number the claim
    gave it; attempts are counted by the compare-and-set claim in the database.
    Equality means no step ran without a claim and no claim ran twice. The one
    exception is ``killed`` (see :func:`steps_held_by`): an attempt claimed by a
    process killed before the step began (between the claim's commit and the
    step's first line) never executed.
    """
    for seq, attempts in acc.step_attempts(run).items():
        logged = sorted(acc.executions.get((run, seq), []))
        expected = list(range(1, attempts + 1))
        lost = (killed or {}).get((run, seq))
        assert logged == expected or (lost is not None and logged == [a for a in expected if a != lost]), (
            f"{run} #{seq}: executions logged with attempts {logged}, checkpoint says {attempts} attempt(s)"
        )
