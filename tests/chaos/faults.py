"""Faults the chaos suite injects, their seeded schedule, and how long recovery took.

Each fault kind is a method of :class:`Faults`. Kills are ``kill -9`` of a role's
whole process tree, restarted a seeded 0.5-3 s later. Recovery is measured per
fault by :class:`Recovery`: the work in flight that the fault hit (for a kill, the
turns and steps its processes held; for a database or Redis fault, every pending or
running run and step) is snapshotted, and the fault's recovery time is how long
until every piece of it moved on (settled, claimed again, or its run ended).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.db.models import Q
from django.utils import timezone

from bench.common import PrivatePostgres, PrivateRedis
from durable.engine.vocab import SETTLED, UNSETTLED, CheckpointKind, CheckpointStatus, RunStatus
from durable.models import Checkpoint, Run
from durable.runtime import get_engine
from durable.tasks import execute_step, run_turn
from tests.chaos.fleet import BEAT, DURABLE_WORKERS, REMOTE_WORKERS, TURN_WORKERS, ChaosCluster
from tests.chaos.workload import Plan, cancel, retrying, start
from tests.integration.harness import DB_ERRORS, Sweeper

LATE = {"late": "a result delivered after the step had settled"}
STUCK_AFTER = 300.0  # hang guard: work a fault hit that has not moved on by then is stuck
ACTIVE_RUNS = (RunStatus.PENDING, RunStatus.RUNNING)


def schedule(kinds: tuple[str, ...], repeat: int, rng: random.Random) -> list[str]:
    """Every kind ``repeat`` times, in a seeded order."""
    out = [k for k in kinds for _ in range(repeat)]
    rng.shuffle(out)
    return out


@dataclass
class Hit:
    """One injected fault and the in-flight work it hit."""

    kind: str
    detail: str
    at: float  # monotonic
    steps: dict[tuple[str, int], tuple[str, int]]  # (run, seq) -> (status, attempts)
    runs: dict[str, tuple[str, str | None, int]]  # run -> (status, locked_by, turns)
    recovered_at: float | None = None
    first_progress_at: float | None = None
    settled_before: int = 0
    wall: str = field(default_factory=lambda: timezone.now().isoformat(timespec="milliseconds"))

    def recovery_s(self) -> float | None:
        return None if self.recovered_at is None else round(self.recovered_at - self.at, 2)

    def report(self) -> dict[str, Any]:
        first = None if self.first_progress_at is None else round(self.first_progress_at - self.at, 2)
        return {
            "kind": self.kind,
            "at": self.wall,
            "detail": self.detail,
            "steps_hit": len(self.steps),
            "runs_hit": len(self.runs),
            "recovery_s": self.recovery_s(),
            "first_progress_s": first,
        }


def _owned_by(pids: set[int]) -> Q:
    q = Q(pk__in=[])
    for pid in pids:
        q |= Q(locked_by__contains=f":{pid}:")  # owner ids are host:pid:suffix
    return q


def _held_count(pids: set[int]) -> int:
    if not pids:
        return 0
    runs = Run.objects.filter(_owned_by(pids), status=RunStatus.RUNNING).count()
    return runs + Checkpoint.objects.filter(_owned_by(pids), status=CheckpointStatus.RUNNING).count()


def snapshot(pids: set[int] | None) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """What is in flight: held by ``pids``, or (``None``) everything pending or running."""
    steps = Checkpoint.objects.filter(kind=CheckpointKind.STEP, status__in=UNSETTLED)
    runs = Run.objects.filter(status__in=ACTIVE_RUNS)
    if pids is not None:
        steps, runs = steps.filter(_owned_by(pids)), runs.filter(_owned_by(pids))
    else:  # a step waiting out its retry delay is not in flight
        steps = steps.exclude(retry_at__gt=timezone.now())
    return (
        {(r, s): (st, a) for r, s, st, a in steps.values_list("run_id", "seq", "status", "attempts")},
        {r: (st, lb, t) for r, st, lb, t in runs.values_list("id", "status", "locked_by", "turns")},
    )


def _settled_count() -> int:
    return Checkpoint.objects.filter(status__in=SETTLED).count()


class Recovery(threading.Thread):
    """Polls the database every half second until the work each :class:`Hit` hit has moved on."""

    def __init__(self) -> None:
        super().__init__(name="chaos-recovery", daemon=True)
        self.hits: list[Hit] = []
        self.stuck: list[Hit] = []
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def add(self, hit: Hit) -> None:
        with self._lock:
            self.hits.append(hit)

    def open(self) -> list[Hit]:
        with self._lock:
            return [h for h in self.hits if h.recovered_at is None]

    def run(self) -> None:
        while not self._halt.wait(0.5):
            try:
                self._poll()
            except DB_ERRORS:
                connections.close_all()

    def _poll(self) -> None:
        now = time.monotonic()
        for hit in self.open():
            if hit.first_progress_at is None and _settled_count() > hit.settled_before:
                hit.first_progress_at = now
            still = not_moved_on(hit)
            if not still:
                hit.recovered_at = now
                hit.first_progress_at = hit.first_progress_at or now
            elif now - hit.at > STUCK_AFTER and hit not in self.stuck:
                self.stuck.append(hit)
                hit.detail += f"; stuck after {STUCK_AFTER:.0f}s: {still[:10]}"

    def wait_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.open() and time.monotonic() < deadline:
            time.sleep(0.5)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


def not_moved_on(hit: Hit) -> list[str]:
    """The pieces of work ``hit`` found in flight that are still where they were (empty: recovered)."""
    run_ids = {*hit.runs, *(r for r, _ in hit.steps)}
    ended = set(
        Run.objects.filter(id__in=run_ids)
        .exclude(status__in=[*ACTIVE_RUNS, RunStatus.SUSPENDED])
        .values_list("id", flat=True)
    )
    rows = Checkpoint.objects.filter(run_id__in={r for r, _ in hit.steps}, kind=CheckpointKind.STEP)
    steps = {(r, s): (st, a) for r, s, st, a in rows.values_list("run_id", "seq", "status", "attempts")}
    runs = {
        r: (st, lb, t)
        for r, st, lb, t in Run.objects.filter(id__in=hit.runs).values_list("id", "status", "locked_by", "turns")
    }
    still = []
    for key, (_, attempts) in hit.steps.items():
        cur = steps.get(key)
        if key[0] in ended or cur is None or cur[0] in SETTLED or cur[1] > attempts:
            continue
        still.append(f"step {key[0]}#{key[1]} {cur[0]} attempts={cur[1]}")
    for run_id, before in hit.runs.items():
        if run_id not in ended and runs.get(run_id) == before:
            still.append(f"run {run_id} {before[0]} locked_by={before[1]}")
    return still


@dataclass
class Faults:
    """Injects faults of every kind into a running :class:`ChaosCluster`."""

    cluster: ChaosCluster
    pg: PrivatePostgres
    redis: PrivateRedis
    plan: Plan
    rng: random.Random
    recovery: Recovery
    counts: dict[str, int] = field(default_factory=dict)
    late_accepted: int = 0
    sweeper_errors: list[str] = field(default_factory=list)
    _restarts: list[threading.Thread] = field(default_factory=list)

    def inject(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        getattr(self, kind)()

    def _hit(self, kind: str, detail: str, pids: set[int] | None, at: float | None = None) -> Hit:
        steps, runs = retrying("snapshot", lambda: snapshot(pids))
        hit = Hit(kind, detail, at or time.monotonic(), steps, runs, settled_before=retrying("count", _settled_count))
        self.recovery.add(hit)
        return hit

    def _kill_and_restart(self, kind: str, role: str) -> set[int]:
        at = time.monotonic()
        pids = self.cluster.kill(role)
        self._hit(kind, role, pids, at)
        delay = self.rng.uniform(0.5, 3.0)

        def restart() -> None:
            time.sleep(delay)
            self.cluster.spawn_role(role)

        t = threading.Thread(target=restart, name=f"restart-{role}", daemon=True)
        t.start()
        self._restarts.append(t)
        return pids

    def busiest(self, roles: tuple[str, ...], wait: float = 3.0) -> str:
        """The live role of ``roles`` holding the most turns and steps now (waiting up to ``wait``
        seconds for one to hold any): a kill that hits work in flight tests recovery."""
        roles = tuple(r for r in roles if r in self.cluster.roles)
        deadline = time.monotonic() + wait
        while True:
            pids = self.cluster.pids()
            held = {r: retrying("held", lambda r=r: _held_count(pids.get(r, set()))) for r in roles}
            best = max(held.values(), default=0)
            if best or time.monotonic() > deadline:
                return self.rng.choice([r for r in roles if held[r] == best])
            time.sleep(0.1)

    def kill_celery_worker(self) -> None:
        self._kill_and_restart("kill_celery_worker", self.busiest((*TURN_WORKERS, *REMOTE_WORKERS)))

    def kill_beat(self) -> None:
        self._kill_and_restart("kill_beat", BEAT)

    def kill_durable_worker(self) -> None:
        self._kill_and_restart("kill_durable_worker", self.busiest(DURABLE_WORKERS))

    def poison_step(self) -> None:
        """Start a run whose step kills its worker process on every attempt (see ``chaos.poisoned``)."""
        start(self.plan.add_poisoned())

    def pg_restart(self) -> None:
        hit = self._hit("pg_restart", "pg_ctl restart -m immediate", None)
        connections.close_all()
        self.pg.restart("immediate")
        hit.detail += f" (down {time.monotonic() - hit.at:.1f}s)"

    def redis_flushall(self) -> None:
        self._hit("redis_flushall", "FLUSHALL", None)
        self.cluster.redis.flushall()

    def redis_restart(self) -> None:
        hit = self._hit("redis_restart", "kill -9 redis-server, start again", None)
        self.redis.kill()
        time.sleep(self.rng.uniform(0.5, 2.0))
        self.redis.start()
        hit.detail += f" (down {time.monotonic() - hit.at:.1f}s)"

    def _some_steps(self, n: int, **filters: Any) -> list[tuple[str, int, str | None]]:
        rows = list(
            Checkpoint.objects.filter(run_id__in=list(self.plan.by_id), kind=CheckpointKind.STEP, **filters)
            .order_by("?")
            .values_list("run_id", "seq", "queue")[:n]
        )
        return rows

    def duplicate_delivery(self) -> None:
        """Every chosen step and turn message sent twice more: once now, once 3 s late."""
        steps = retrying("steps", lambda: self._some_steps(20))
        runs = self.rng.sample(list(self.plan.by_id), min(20, len(self.plan.by_id)))
        for countdown in (None, 3):
            for run_id, seq, q in steps:
                execute_step.apply_async(args=[run_id, seq], queue=q or "durable", countdown=countdown)
            for run_id in runs:
                run_turn.apply_async(args=[run_id], queue="durable", countdown=countdown)

    def late_result(self) -> None:
        """A result for steps that have settled already: the store must keep the first one."""
        store, now = get_engine().store, timezone.now()
        chosen = retrying("steps", lambda: self._some_steps(20, status=CheckpointStatus.COMPLETED))
        for run_id, seq, _ in chosen:
            retrying("late", lambda: store.finish_step(run_id, seq, now, output=LATE))
        keys = {(r, s) for r, s, _ in chosen}
        rows = Checkpoint.objects.filter(run_id__in={r for r, _ in keys}, output=LATE).values_list("run_id", "seq")
        self.late_accepted += len(keys & set(retrying("late", lambda: list(rows))))

    def sweeper_race(self) -> None:
        """Two more sweepers in this process, racing each other and beat for 8 seconds."""
        sweepers = [Sweeper(0.05), Sweeper(0.05)]
        for s in sweepers:
            s.start()

        def finish() -> None:
            time.sleep(8)
            for s in sweepers:
                s.stop()
                self.sweeper_errors.extend(s.errors)

        threading.Thread(target=finish, name="sweeper-race", daemon=True).start()

    def cancel_race(self) -> None:
        """kill -9 a turn worker, then at once cancel runs, those it held first, racing their recovery."""
        pids = self._kill_and_restart("cancel_race", self.busiest((*TURN_WORKERS, *DURABLE_WORKERS)))
        held = set(retrying("held", lambda: list(Run.objects.filter(_owned_by(pids)).values_list("id", flat=True))))
        targets = [p for p in self.plan.of("cancellable") if p.started_at is not None and not p.cancel_sent]
        targets.sort(key=lambda p: p.run_id not in held)
        for p in targets[: self.rng.randint(2, 6)]:
            cancel(p)

    def join_restarts(self) -> None:
        for t in self._restarts:
            t.join(timeout=60)
