"""Benchmark: what a turn costs as a run's history grows (a benchmark, not a timed test).

    python -m bench.resume                                   # PostgreSQL database bench_resume, dropped and made again
    python -m bench.resume --sizes 10,200 --dispatch 10,50 --fanout 10,200 --reps 3   # a quick try

Three figures, each in paired repetitions (every repetition measures every
size back to back, and the ratio is taken within the repetition; the
report gives the median of those ratios beside the ratio of the medians):

1. **Resume**: a run whose history holds ``--sizes`` completed dispatched
   steps waits on a signal; each repetition signals it and times the turn
   that consumes the signal and suspends on the next wait (acquire, history
   load, replay, commit), in this thread on the manual transport. Measured
   with the history cache (``HISTORY_CACHE_SIZE``, the hot path: the turn
   before was this process's) and with it off (every turn reads the whole
   history: the cache-miss path). Target: a 1,000-step history costs at most
   2x a 10-step one.
2. **Dispatched steps**: a run of ``--dispatch`` dispatched steps, one after
   another, with eager execution off; each step is executed as a worker runs
   its delivered message (claim, run, result, and the run's next turn
   inline); the figure is the mean cost per step. Target: within 25% between
   10 and 1,000 steps.
3. **Fan-out**: a run of one ``ctx.gather`` over ``--fanout`` dispatched
   steps: the turn that dispatches them all, each step executed as a
   delivered message, and the turns their results wake (``turns``: the run's
   turns in all); the figure is the mean cost per step, which should not grow
   with the fan-out.

Each repetition records the load average; a repetition at a load above the
machine's cores is flagged and ``"noisy": true`` is written. The result goes
to stdout and to ``bench/results/resume-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

DB = os.environ.get("BENCH_RESUME_DB", "postgres://postgres@127.0.0.1:5432/bench_resume")
os.environ["DATABASE_URL"] = DB
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
RESULTS = Path(__file__).resolve().parent / "results"


def _recreate_database() -> None:
    import psycopg

    base, name = DB.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def _register() -> None:
    import durable

    @durable.step(name="br.work")
    def work(i: int) -> dict[str, Any]:
        return {"i": i, "label": f"item {i}"}

    @durable.workflow(name="br.resume")
    def resume(ctx: Any, n: int) -> int:
        for i in range(n):
            ctx.step(work, i)
        got = 0
        while got < 1_000_000:
            ctx.wait_signal("go")
            got += 1
        return got

    @durable.workflow(name="br.steps")
    def steps(ctx: Any, n: int) -> int:
        return sum(ctx.step(work, i)["i"] for i in range(n))

    @durable.workflow(name="br.fan")
    def fan(ctx: Any, n: int) -> int:
        return sum(out["i"] for out in ctx.gather(*(durable.call(work, i) for i in range(n))))


def _settings(cache: bool) -> dict[str, Any]:
    return {"TRANSPORT": "manual", "EMBEDDED_WORKER": False, "EAGER_STEPS": False, "HISTORY_CACHE_SIZE": 2000 * cache}


def _build_history(run_id: str, n: int) -> None:
    """Settle the run's first step and write steps 2..n as they would have completed, then wake it."""
    from durable.models import Checkpoint, Run
    from durable.runtime import now

    at = now()
    Checkpoint.objects.filter(run_id=run_id, seq=1).update(
        status="completed", output={"i": 0, "label": "item 0"}, attempts=1, started_at=at, finished_at=at
    )
    Checkpoint.objects.bulk_create(
        Checkpoint(
            run_id=run_id,
            seq=i + 1,
            name="br.work",
            kind="step",
            status="completed",
            input={"args": [i], "kwargs": {}},
            output={"i": i, "label": f"item {i}"},
            attempts=1,
            queue="durable",
            enqueued_at=at,
            started_at=at,
            finished_at=at + timedelta(milliseconds=1),
        )
        for i in range(1, n)
    )
    Run.objects.filter(id=run_id).update(wake_at=at)


def _resume_runs(sizes: list[int]) -> dict[int, str]:
    import durable
    from durable.runtime import get_engine

    engine = get_engine()
    ids = {}
    for n in sizes:
        run_id = durable.start("br.resume", n, run_id=f"resume-{n}-{engine.settings.history_cache_size}")
        engine.run_turn(run_id)  # dispatches step 1 and suspends
        _build_history(run_id, n)
        assert engine.run_turn(run_id) == "suspended"  # replays n steps, waits on the signal
        ids[n] = run_id
    return ids


def _time_resume(run_id: str) -> float:
    import durable
    from durable.runtime import get_engine

    durable.signal(run_id, "go")
    started = time.perf_counter()
    status = get_engine().run_turn(run_id)
    seconds = time.perf_counter() - started
    if status != "suspended":
        raise SystemExit(f"{run_id}: the resumed turn ended {status}")
    return seconds


def _time_dispatched(n: int, tag: str) -> float:
    """Seconds per step of a run of ``n`` dispatched steps, each executed here as a delivered message."""
    import durable
    from durable.models import Checkpoint
    from durable.runtime import get_engine

    engine = get_engine()
    run_id = durable.start("br.steps", n, run_id=f"steps-{n}-{tag}")
    started = time.perf_counter()
    engine.run_turn(run_id)
    for seq in range(1, n + 1):
        engine.execute_step(run_id, seq)  # claims it, runs it, and runs the next turn inline
    seconds = time.perf_counter() - started
    status = durable.get_run(run_id).status
    if status != "completed" or Checkpoint.objects.filter(run_id=run_id).count() != n:
        raise SystemExit(f"{run_id}: ended {status}")
    return seconds / n


def _time_fanout(n: int, tag: str, turns: dict[int, int]) -> float:
    """Seconds per step of a ``ctx.gather`` of ``n`` dispatched steps: the turn that dispatches them, each
    step executed here as a delivered message, and the turns their results wake (``turns[n]``: how many)."""
    import durable
    from durable.models import Run
    from durable.runtime import get_engine

    engine = get_engine()
    run_id = durable.start("br.fan", n, run_id=f"fan-{n}-{tag}")
    started = time.perf_counter()
    engine.run_turn(run_id)
    for seq in range(1, n + 1):
        engine.execute_step(run_id, seq)  # the result that wakes the run runs its next turn inline
    seconds = time.perf_counter() - started
    run = Run.objects.get(id=run_id)
    if run.status != "completed" or run.output != n * (n - 1) // 2:
        raise SystemExit(f"{run_id}: ended {run.status}")
    turns[n] = run.turns
    return seconds / n


def _paired(reps: list[dict[int, float]], base: int) -> dict[str, Any]:
    """Per size: median ms, and its ratio to ``base`` (median of per-repetition ratios, and of medians)."""
    out: dict[str, Any] = {}
    for n in reps[0]:
        ms = [rep[n] * 1000 for rep in reps]
        ratios = [rep[n] / rep[base] for rep in reps]
        out[str(n)] = {
            "median_ms": round(statistics.median(ms), 3),
            "min_ms": round(min(ms), 3),
            "paired_ratio": round(statistics.median(ratios), 3),
            "ratio_of_medians": round(statistics.median(ms) / statistics.median(rep[base] * 1000 for rep in reps), 3),
        }
    return out


def resume(sizes: list[int], reps: int, loads: list[float]) -> dict[str, Any]:
    from django.test import override_settings

    out: dict[str, Any] = {}
    for cache in (True, False):
        with override_settings(DURABLE=_settings(cache)):
            ids = _resume_runs(sizes)
            _time_resume(ids[sizes[0]])  # warm up the connection's prepared statements
            measured = []
            for _ in range(reps):
                loads.append(os.getloadavg()[0])
                measured.append({n: _time_resume(ids[n]) for n in sizes})
        out["cached" if cache else "uncached"] = _paired(measured, sizes[0])
    return out


def dispatched(sizes: list[int], reps: int, loads: list[float]) -> dict[str, Any]:
    from django.test import override_settings

    measured = []
    with override_settings(DURABLE=_settings(True)):
        for rep in range(reps):
            loads.append(os.getloadavg()[0])
            measured.append({n: _time_dispatched(n, str(rep)) for n in sizes})
    return _paired(measured, sizes[0])


def fanout(sizes: list[int], reps: int, loads: list[float]) -> dict[str, Any]:
    from django.test import override_settings

    measured = []
    turns: dict[int, int] = {}
    with override_settings(DURABLE=_settings(True)):
        for rep in range(reps):
            loads.append(os.getloadavg()[0])
            measured.append({n: _time_fanout(n, str(rep), turns) for n in sizes})
    return {**_paired(measured, sizes[0]), "turns": {str(n): turns[n] for n in sizes}}


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=_sizes, default=[10, 1000, 5000], help="history sizes of the resume figure")
    parser.add_argument("--dispatch", type=_sizes, default=[10, 100, 1000], help="steps per run, dispatched figure")
    parser.add_argument("--fanout", type=_sizes, default=[10, 100, 1000, 3000], help="steps of one ctx.gather")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    _recreate_database()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    _register()
    loads: list[float] = []
    report: dict[str, Any] = {
        "resume": resume(args.sizes, args.reps, loads),
        "dispatched_per_step": dispatched(args.dispatch, args.reps, loads),
        "fanout_per_step": fanout(args.fanout, args.reps, loads),
    }
    cores = os.cpu_count() or 1
    report["load"] = {"per_repetition": loads, "cores": cores}
    report["noisy"] = max(loads) > cores
    if report["noisy"]:
        print(f"WARNING: load {max(loads):.1f} exceeded the {cores} cores: these figures are noisy", file=sys.stderr)
    text = json.dumps(report, indent=2)
    sys.stdout.write(text + "\n")
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (RESULTS / f"resume-{stamp}.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
