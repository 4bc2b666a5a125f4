"""Measurements of django-durable (run by ``bench/run.py`` in its own process).

    python -m bench.ours inproc --mode signal --workflows 200 --steps 3 --reps 5
    python -m bench.ours counts-inproc
    python -m bench.ours dispatched --workflows 1000 --reps 3     (Celery workers running)
    python -m bench.ours isolated --samples 100                   (Celery workers running)
    python -m bench.ours counts-dispatched                         (workers with BENCH_SQL_COUNT=1)
    python -m bench.ours timers --runs 10000 --lead 60             (durable_worker processes running)

``BENCH_TRANSPORT`` (set by the driver) chooses the transport: ``inline`` for
in-process workloads started with ``durable.start`` and completed on the inline
transport's threads, ``manual`` for the caller-thread mode and the timer
workload's starter, ``celery`` for dispatched steps. ``--mode eager`` runs
dispatched steps on the manual transport in a process that serves the default
queue, so each is run in the turn as a Celery worker runs it, without the broker.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

import django

django.setup()

from django.db import connections  # noqa: E402

import durable  # noqa: E402
from bench import common, cpu, probe, sqlcount  # noqa: E402
from durable.models import Run  # noqa: E402
from durable.runtime import get_engine  # noqa: E402

TERMINAL = ("completed", "failed", "cancelled", "dead")


# -- waiting for a run ----------------------------------------------------------
class Completions:
    """Lets a caller block until a run it started settles (the ``run_completed`` signal).

    The in-process analogue of DBOS's ``handle.get_result()`` (a future): the
    engine announces the committed outcome in the process that ran the turn.
    """

    def __init__(self) -> None:
        self._events: dict[str, threading.Event] = {}
        self._status: dict[str, str] = {}
        self._lock = threading.Lock()
        try:
            from durable import signals

            def receiver(sender: Any, run: Any, **kwargs: Any) -> None:
                self._done(run.id, run.status)

            for sig in (signals.run_completed, signals.run_failed, signals.run_cancelled, signals.run_dead):
                sig.connect(receiver, weak=False, dispatch_uid=f"bench-{id(sig)}")
            self.via = "durable.signals.run_completed"
        except ImportError:  # an engine without lifecycle signals: its listener hook
            get_engine().listeners.add(lambda status, run: status in TERMINAL and self._done(run.id, status))
            self.via = "engine listener"

    def expect(self, run_id: str) -> threading.Event:
        ev = threading.Event()
        with self._lock:
            self._events[run_id] = ev
        return ev

    def _done(self, run_id: str, status: str) -> None:
        with self._lock:
            ev = self._events.pop(run_id, None)
            self._status[run_id] = status
        if ev is not None:
            ev.set()

    def status(self, run_id: str) -> str | None:
        return self._status.pop(run_id, None)


_completions: Completions | None = None


def completions() -> Completions:
    global _completions
    if _completions is None:
        _completions = Completions()
    return _completions


def one_workflow(mode: str, run_id: str, steps: int) -> None:
    """Start a workflow of ``steps`` local steps and return when it has completed."""
    if mode == "signal":  # inline transport; the turn runs on its thread pool
        ev = completions().expect(run_id)
        durable.start("bench_local", steps, run_id=run_id)
        if not ev.wait(60):
            raise TimeoutError(f"{run_id} did not complete")
        status = completions().status(run_id)
    elif mode == "caller":  # manual transport; the caller's thread runs the turn
        durable.start("bench_local", steps, run_id=run_id)
        status = get_engine().run_turn(run_id)
    elif mode == "eager":  # manual transport, the default queue served here: a Celery worker's turn
        durable.start("bench_eager", steps, run_id=run_id)
        status = get_engine().run_turn(run_id)
    elif mode == "wait_for_run":  # inline transport; the public polling wait
        durable.start("bench_local", steps, run_id=run_id)
        status = durable.wait_for_run(run_id, timeout=60).status
    else:
        raise ValueError(mode)
    if status != "completed":
        raise RuntimeError(f"{run_id} ended {status}")


def run_batch(mode: str, prefix: str, workflows: int, steps: int, threads: int) -> float:
    """Wall seconds for ``workflows`` workflows, one after another in each of ``threads`` callers."""
    if mode == "wake":
        return wake_batch(prefix, workflows)
    per = [workflows // threads + (1 if i < workflows % threads else 0) for i in range(threads)]
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def caller(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per[t]):
                one_workflow(mode, f"{prefix}-{t}-{i}", steps)
        except BaseException as exc:  # noqa: BLE001 - reported by the driver
            errors.append(exc)
        finally:
            connections.close_all()

    if threads == 1:
        t0 = time.perf_counter()
        for i in range(workflows):
            one_workflow(mode, f"{prefix}-0-{i}", steps)
        return time.perf_counter() - t0
    pool = [threading.Thread(target=caller, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in pool:
        th.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed


def wake_batch(prefix: str, workflows: int) -> float:
    """Wall seconds to wake ``workflows`` sleepers in pages, as ``durable_worker`` wakes them (workload 8's wake).

    Each sleeper is started and its first turn run in this thread (it
    suspends on an hour's sleep, on a fake clock); the clock then moves past
    the hour and the due-run sweep wakes them a page at a time (one claim,
    one history read and one shared commit per page), in this thread. Only the
    wake is timed; an instruction count (``bench.instructions``, shape
    ``wake``) counts the start and the first turn as well.
    """
    from datetime import timedelta

    from durable.testing import fake_clock
    from durable.worker.due import wake_due_runs

    engine = get_engine()
    with fake_clock() as clock:
        due = (clock.now() + timedelta(hours=1)).timestamp()
        for i in range(workflows):
            run_id = f"{prefix}-{i}"
            durable.start("bench_sleeper", due, run_id=run_id)
            engine.run_turn(run_id)
        clock.set(clock.now() + timedelta(hours=1, seconds=1))
        t0 = time.perf_counter()
        woken = 0
        while woken < workflows:
            page = wake_due_runs(engine)
            if not page:
                raise RuntimeError(f"{workflows - woken} sleepers of {prefix} were not due")
            woken += page
        return time.perf_counter() - t0


def cmd_inproc(args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    if args.mode == "eager":  # this process consumes the default queue, as `celery worker -Q durable` does
        from durable.runtime import serve_routes_eagerly

        serve_routes_eagerly(frozenset([None, "durable"]))
    run_batch(args.mode, f"warm-{tag}", args.warmup, args.steps, args.threads)
    secs = []
    for rep in range(args.reps):
        secs.append(run_batch(args.mode, f"{args.mode}-{tag}-{rep}", args.workflows, args.steps, args.threads))
    return {
        "mode": args.mode,
        "via": completions().via if args.mode == "signal" else None,
        "workflows": args.workflows,
        "steps": args.steps,
        "threads": args.threads,
        "reps": args.reps,
        "seconds": common.summary(secs),
        "workflows_per_s": common.summary([args.workflows / s for s in secs]),
        "ms_per_step": common.summary([s * 1000 / (args.workflows * args.steps) for s in secs]),
    }


# -- statements and commits per in-process step -------------------------------------
def _counted(fn: Callable[[], Any]) -> dict[str, Any]:
    url = os.environ["DATABASE_URL"]
    before = sqlcount.counter.snapshot()
    server, _ = common.counted_server(url, fn)
    after = sqlcount.counter.snapshot()
    out = sqlcount.diff(after, before)
    out["server_write_txns"] = server["write_txns"]
    out["pgss"] = server["pgss"]
    return out


def cmd_counts_inproc(args: argparse.Namespace) -> dict[str, Any]:
    sqlcount.install_django()
    tag = uuid.uuid4().hex[:6]
    mode = args.mode
    run_batch(mode, f"cwarm-{tag}", 5, 1, 1)
    small = _counted(lambda: run_batch(mode, f"c1-{tag}", args.workflows, 1, 1))
    big = _counted(lambda: run_batch(mode, f"c11-{tag}", args.workflows, 1 + args.extra, 1))
    three = _counted(lambda: run_batch(mode, f"c3-{tag}", args.workflows, 3, 1))
    out = sqlcount.per_unit(small, big, args.extra * args.workflows, args.workflows)
    out["mode"] = mode
    out["workflow_of_3"] = {
        k: three[k] / args.workflows
        for k in ("statements", "explicit_txns", "autocommit_txns", "write_txns", "server_write_txns")
    }
    out["method"] = (
        f"{args.workflows} workflows of 1 step vs {args.workflows} of {1 + args.extra} steps; "
        "client side: Django execute_wrapper + DatabaseWrapper.commit; server side: write transactions "
        "(xids assigned), minus the cluster's background over 2 idle seconds"
    )
    return out


# -- dispatched steps on Celery ---------------------------------------------------
def _wait_all(prefix: str, n: int, timeout: float) -> None:
    def done() -> bool:
        return Run.objects.filter(id__startswith=prefix, status__in=TERMINAL).count() >= n

    # Counting 100,000 rows ten times a second would compete with the workers it waits for; the
    # figures come from the rows' finished_at, not from when this poll notices.
    interval = 0.1 if n <= 10_000 else 0.5
    try:
        common.wait_for(done, f"{n} runs {prefix}*", timeout, interval=interval)
    finally:
        connections.close_all()


def _finish_times(prefix: str) -> dict[str, float]:
    rows = Run.objects.filter(id__startswith=prefix).values_list("id", "status", "finished_at")
    bad = [(rid, st) for rid, st, _ in rows if st != "completed"]
    if bad:
        raise RuntimeError(f"runs not completed: {bad[:5]}")
    return {rid: fin.timestamp() for rid, _, fin in rows}


def dispatched_burst(prefix: str, n: int, timeout: float) -> dict[str, Any]:
    starts: dict[str, float] = {}
    t0 = time.time()
    for i in range(n):
        rid = f"{prefix}-{i}"
        starts[rid] = time.time()
        durable.start("bench_dispatched", {"notify": False}, run_id=rid)
    started = time.time()
    _wait_all(prefix + "-", n, timeout)
    ends = _finish_times(prefix + "-")
    firsts = probe.first_times()
    lat = [(firsts[r] - starts[r]) * 1000 for r in starts if r in firsts]
    elapsed = max(ends.values()) - t0
    return {
        "seconds": elapsed,
        "start_seconds": started - t0,
        "workflows_per_s": n / elapsed,
        "first_step_ms_p50": common.percentile(lat, 50),
        "first_step_ms_p99": common.percentile(lat, 99),
    }


def cmd_dispatched(args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    dispatched_burst(f"dwarm-{tag}", args.warmup, args.timeout)
    reps = [dispatched_burst(f"d-{tag}-{rep}", args.workflows, args.timeout) for rep in range(args.reps)]
    return {
        "workflows": args.workflows,
        "reps": args.reps,
        "workflows_per_s": common.summary([r["workflows_per_s"] for r in reps]),
        "first_step_ms_p50": common.summary([r["first_step_ms_p50"] for r in reps]),
        "first_step_ms_p99": common.summary([r["first_step_ms_p99"] for r in reps]),
        "start_seconds": common.summary([r["start_seconds"] for r in reps]),
    }


def cmd_isolated(args: argparse.Namespace) -> dict[str, Any]:
    """One workflow in flight at a time: start-to-first-step latency with idle workers."""
    tag = uuid.uuid4().hex[:6]
    prefix = f"iso-{tag}"
    starts: dict[str, float] = {}
    for i in range(args.warmup + args.samples):
        rid = f"{prefix}-{i}" if i >= args.warmup else f"isowarm-{tag}-{i}"
        t = time.time()
        durable.start("bench_dispatched", {"notify": True}, run_id=rid)
        probe.wait_done(rid)
        if i >= args.warmup:
            starts[rid] = t
        common.wait_for(lambda rid=rid: Run.objects.filter(id=rid, status="completed").exists(), rid, 30, 0.002)
    ends = _finish_times(prefix + "-")
    firsts = probe.first_times()
    lat = [(firsts[r] - starts[r]) * 1000 for r in starts]
    e2e = [(ends[r] - starts[r]) * 1000 for r in starts]
    return {
        "samples": args.samples,
        "first_step_ms": {"p50": common.percentile(lat, 50), "p99": common.percentile(lat, 99)},
        "end_to_end_ms": {"p50": common.percentile(e2e, 50), "p99": common.percentile(e2e, 99)},
    }


def cmd_counts_dispatched(args: argparse.Namespace) -> dict[str, Any]:
    """Statements per dispatched step, driver and workers together (workers push theirs to Redis)."""
    sqlcount.install_django()
    url = os.environ["DATABASE_URL"]
    tag = uuid.uuid4().hex[:6]

    def batch(prefix: str, steps: int) -> None:
        for i in range(args.workflows):
            rid = f"{prefix}-{i}"
            durable.start("bench_dispatched_n", steps, run_id=rid)
            probe.wait_done(rid)  # one at a time: the path itself, not contention
        done = lambda: Run.objects.filter(id__startswith=prefix, status="completed").count() >= args.workflows  # noqa: E731
        common.wait_for(done, prefix, 60, 0.2)

    def polls(sql: str) -> bool:
        return "COUNT(*)" in sql.upper() and "durable_run" in sql

    def counted(prefix: str, steps: int) -> dict[str, Any]:
        sqlcount.settle("durable")
        sqlcount.collect("durable")  # the previous batch's, all of it (settled): not this one's
        before = sqlcount.counter.snapshot()
        server, _ = common.counted_server(url, lambda: batch(prefix, steps))
        mine = sqlcount.diff(sqlcount.counter.snapshot(), before)
        sqlcount.settle("durable")  # this batch's tail, pushed after its runs completed
        total = sqlcount.add(mine, sqlcount.collect("durable"))
        # the driver's completion polls are the benchmark's, not the engine's
        n_polls = sum(v for k, v in total["by_statement"].items() if polls(k))
        total["by_statement"] = {k: v for k, v in total["by_statement"].items() if not polls(k)}
        total["statements"] -= n_polls
        total["autocommit_txns"] -= n_polls
        total["server_write_txns"] = server["write_txns"]  # the polls are read-only: no xid
        total["pgss"] = common.pgss_without(server["pgss"], polls)
        return total

    batch(f"cdwarm-{tag}", 1)
    small = counted(f"cd1-{tag}", 1)
    big = counted(f"cd5-{tag}", 1 + args.extra)
    out = sqlcount.per_unit(small, big, args.extra * args.workflows, args.workflows)
    out["method"] = (
        f"{args.workflows} workflows of 1 dispatched step vs {args.workflows} of {1 + args.extra}, one at a time, "
        "on the Celery workers; client side counted in the driver and both worker processes "
        "(Django execute_wrapper, pushed to Redis), the driver's completion polls excluded; "
        "server side: write transactions (xids assigned) and pg_stat_statements, minus the background "
        "measured over 2 idle seconds (fleet heartbeats, other processes' polling)"
    )
    return out


# -- timers -------------------------------------------------------------------------
def cmd_timers(args: argparse.Namespace) -> dict[str, Any]:
    """``runs`` workflows all sleeping until one moment; how late do they wake?"""
    tag = uuid.uuid4().hex[:6]
    prefix = f"t-{tag}-"
    t0 = time.time()
    due = t0 + args.lead
    per = args.runs // args.starters
    errors: list[BaseException] = []

    def starter(s: int) -> None:
        try:
            for i in range(per if s < args.starters - 1 else args.runs - per * (args.starters - 1)):
                durable.start("bench_sleeper", due, run_id=f"{prefix}{s}-{i}")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=starter, args=(s,)) for s in range(args.starters)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    started = time.time() - t0

    def all_asleep() -> bool:
        return Run.objects.filter(id__startswith=prefix, status="suspended").count() >= args.runs

    asleep_at = None
    try:
        common.wait_for(all_asleep, "all sleepers suspended", max(due - time.time(), 1.0), interval=0.25)
        asleep_at = time.time() - t0
    except TimeoutError:
        pass
    # The machine's CPU from the due moment until every run ended: what a wake costs, all told.
    time.sleep(max(due - time.time(), 0.0))
    before = cpu.snapshot()
    _wait_all(prefix, args.runs, args.timeout + args.lead)
    spent = cpu.window(before, cpu.snapshot())
    ends = sorted(_finish_times(prefix).values())
    late = [(e - due) * 1000 for e in ends]
    return {
        "runs": args.runs,
        "lead_s": args.lead,
        "start_seconds": started,
        "all_suspended_before_due": asleep_at is not None,
        "all_suspended_at_s": asleep_at,
        "last_late_ms": late[-1],
        "p50_late_ms": common.percentile(late, 50),
        "p99_late_ms": common.percentile(late, 99),
        "first_late_ms": late[0],
        "woken_per_s": len(ends) / max((ends[-1] - max(ends[0], due)), 1e-3),
        "cpu": cpu.per_unit(spent, args.runs),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.ours")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("serve", help="read one JSON list of arguments per line; answer each with @@RESULT")
    p = sub.add_parser("inproc")
    p.add_argument("--mode", choices=["signal", "caller", "eager", "wait_for_run", "wake"], default="signal")
    p.add_argument("--workflows", type=int, default=200)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument(
        "--observer",
        choices=["settings", "off"],
        default="settings",
        help="off: the engine's no-op observer for this command, whatever OPENTELEMETRY says (bench/otel.py pairs it)",
    )
    p.add_argument(
        "--codec",
        choices=["settings", "off"],
        default="settings",
        help="off: payloads in clear for this command, whatever CODEC says (bench/codec.py pairs it)",
    )
    p = sub.add_parser("counts-inproc")
    p.add_argument("--mode", choices=["signal", "caller"], default="signal")
    p.add_argument("--workflows", type=int, default=40)
    p.add_argument("--extra", type=int, default=10)
    p = sub.add_parser("dispatched")
    p.add_argument("--workflows", type=int, default=1000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--timeout", type=float, default=600)
    p = sub.add_parser("isolated")
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p = sub.add_parser("counts-dispatched")
    p.add_argument("--workflows", type=int, default=20)
    p.add_argument("--extra", type=int, default=4)
    p = sub.add_parser("timers")
    p.add_argument("--runs", type=int, default=10000)
    p.add_argument("--lead", type=float, default=60)
    p.add_argument("--starters", type=int, default=4)
    p.add_argument("--timeout", type=float, default=900)
    return parser


COMMANDS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "inproc": cmd_inproc,
    "counts-inproc": cmd_counts_inproc,
    "dispatched": cmd_dispatched,
    "isolated": cmd_isolated,
    "counts-dispatched": cmd_counts_dispatched,
    "timers": cmd_timers,
}
# The transport each command uses (the mode decides for in-process runs).
MODE_TRANSPORT = {"signal": "inline", "caller": "manual", "wait_for_run": "inline"}


def run_command(args: argparse.Namespace) -> dict[str, Any]:
    from django.conf import settings
    from django.test.utils import override_settings

    transport = os.environ.get("BENCH_TRANSPORT", "inline")
    if getattr(args, "mode", None) in MODE_TRANSPORT:
        transport = MODE_TRANSPORT[args.mode]
    durable = {**settings.DURABLE, "TRANSPORT": transport}
    if getattr(args, "codec", "settings") == "off":
        durable.pop("CODEC", None)
    with override_settings(DURABLE=durable):
        if getattr(args, "observer", "settings") == "off":
            from durable.engine.observe import Observer

            get_engine().observer = Observer()  # this command's engine only (rebuilt for the next one)
        result = COMMANDS[args.cmd](args)
        get_engine().transport.shutdown(wait=True)
    connections.close_all()
    return result


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.cmd != "serve":
        common.emit(run_command(args))
        return
    common.serve(lambda argv: run_command(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
