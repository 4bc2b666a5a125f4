"""Measurements of DBOS Transact (run by ``bench/run.py`` in its own process).

    python -m bench.peer_dbos inproc --mode start --workflows 200 --steps 3 --reps 5
    python -m bench.peer_dbos counts-inproc
    python -m bench.peer_dbos queue --workflows 1000 --reps 3      (dbos_app workers running)
    python -m bench.peer_dbos isolated --samples 20 [--poll 0.001]  (dbos_app workers running)
    python -m bench.peer_dbos counts-queue                          (workers with BENCH_SQL_COUNT=1)

``--mode start`` is ``DBOS.start_workflow(wf, ...).get_result()`` (the workflow
runs on DBOS's executor threads, the caller waits on its future); ``--mode
direct`` calls the workflow function in the caller's thread.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from dbos import DBOS, DBOSClient, SetWorkflowID

from bench import common, dbos_app, probe, sqlcount

# DBOS's own background threads (queue polling, notification listener, ...)
# are not part of a workflow's cost: only statements from the threads that
# ran workflows are attributed in the counts.
WORKFLOW_THREADS = ("MainThread", "dbos-executor", "bench-caller")


def one_workflow(mode: str, wid: str, steps: int) -> None:
    with SetWorkflowID(wid):
        if mode == "start":
            result = DBOS.start_workflow(dbos_app.d_local, steps).get_result()
        elif mode == "direct":
            result = dbos_app.d_local(steps)
        else:
            raise ValueError(mode)
    if result != steps:
        raise RuntimeError(f"{wid} returned {result!r}")


def run_batch(mode: str, prefix: str, workflows: int, steps: int, threads: int) -> float:
    if threads == 1:
        t0 = time.perf_counter()
        for i in range(workflows):
            one_workflow(mode, f"{prefix}-0-{i}", steps)
        return time.perf_counter() - t0
    per = [workflows // threads + (1 if i < workflows % threads else 0) for i in range(threads)]
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def caller(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per[t]):
                one_workflow(mode, f"{prefix}-{t}-{i}", steps)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    pool = [threading.Thread(target=caller, args=(t,), name=f"bench-caller-{t}") for t in range(threads)]
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


def cmd_inproc(args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    run_batch(args.mode, f"warm-{tag}", args.warmup, args.steps, args.threads)
    secs = [
        run_batch(args.mode, f"{args.mode}-{tag}-{rep}", args.workflows, args.steps, args.threads)
        for rep in range(args.reps)
    ]
    return {
        "mode": args.mode,
        "workflows": args.workflows,
        "steps": args.steps,
        "threads": args.threads,
        "reps": args.reps,
        "seconds": common.summary(secs),
        "workflows_per_s": common.summary([args.workflows / s for s in secs]),
        "ms_per_step": common.summary([s * 1000 / (args.workflows * args.steps) for s in secs]),
    }


def _counted(fn: Callable[[], Any]) -> dict[str, Any]:
    url = dbos_app.database_url()
    before = sqlcount.counter.snapshot()
    server, _ = common.counted_server(url, fn, idle=3.0)
    after = sqlcount.counter.snapshot()
    out = sqlcount.diff(after, before)
    out["server_write_txns"] = server["write_txns"]
    out["pgss"] = server["pgss"]
    return out


def cmd_counts_inproc(args: argparse.Namespace) -> dict[str, Any]:
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
    out["ignored_background"] = dict(sqlcount.counter.ignored)
    out["method"] = (
        f"{args.workflows} workflows of 1 step vs {args.workflows} of {1 + args.extra} steps; "
        "client side: SQLAlchemy before_cursor_execute/commit events on the workflow threads only; "
        "server side: write transactions (xids assigned) and pg_stat_statements, minus DBOS's background "
        "polling measured over 3 idle seconds before each batch and prorated"
    )
    return out


# -- queues -------------------------------------------------------------------------
def _client() -> DBOSClient:
    return DBOSClient(system_database_url=dbos_app.database_url())


def _enqueue(client: DBOSClient, wid: str, notify: bool) -> None:
    client.enqueue(
        {"queue_name": dbos_app.QUEUE, "workflow_name": dbos_app.d_dispatched.__qualname__, "workflow_id": wid}, notify
    )


def _finished(prefix: str) -> tuple[int, int, float | None]:
    with psycopg.connect(common.pg_url(dbos_app.database_url()), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'SUCCESS'), "
            "count(*) FILTER (WHERE status IN ('ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')), "
            "max(updated_at) FROM dbos.workflow_status WHERE workflow_uuid LIKE %s",
            [prefix + "%"],
        ).fetchone()
    return int(row[0]), int(row[1]), (row[2] / 1000.0 if row[2] is not None else None)


def _finish_times(prefix: str) -> dict[str, float]:
    with psycopg.connect(common.pg_url(dbos_app.database_url()), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT workflow_uuid, updated_at FROM dbos.workflow_status "
            "WHERE workflow_uuid LIKE %s AND status = 'SUCCESS'",
            [prefix + "%"],
        ).fetchall()
    return {wid: ts / 1000.0 for wid, ts in rows}


def _wait_all(prefix: str, n: int, timeout: float) -> None:
    def done() -> bool:
        ok, bad, _ = _finished(prefix)
        if bad:
            raise RuntimeError(f"{bad} workflows {prefix}* failed")
        return ok >= n

    common.wait_for(done, f"{n} workflows {prefix}*", timeout, interval=0.1)


def queue_burst(client: DBOSClient, prefix: str, n: int, timeout: float) -> dict[str, Any]:
    starts: dict[str, float] = {}
    t0 = time.time()
    for i in range(n):
        wid = f"{prefix}-{i}"
        starts[wid] = time.time()
        _enqueue(client, wid, False)
    started = time.time()
    _wait_all(prefix + "-", n, timeout)
    ends = _finish_times(prefix + "-")
    firsts = probe.first_times()
    lat = [(firsts[w] - starts[w]) * 1000 for w in starts if w in firsts]
    elapsed = max(ends.values()) - t0
    return {
        "seconds": elapsed,
        "start_seconds": started - t0,
        "workflows_per_s": n / elapsed,
        "first_step_ms_p50": common.percentile(lat, 50),
        "first_step_ms_p99": common.percentile(lat, 99),
    }


# sum(0.9 ** k) = 10: a worker at interval I reaches a much lower setting after about 10 * I seconds.
RAMP_POLLS_PER_INTERVAL = 10.0


@contextmanager
def polling(client: DBOSClient, seconds: float | None) -> Iterator[float]:
    """The queue polled every ``seconds`` for the duration of the block (None: as registered).

    The workers reload the queue's row before every poll, but a worker's own
    interval comes down to a lower setting only by a factor of 0.9 per poll
    (it backs off on contention and recovers gradually): from 1 s to 1 ms that
    takes about 10 s of polls, waited here before measuring. A higher setting
    applies at the next poll, so the registered interval put back afterwards
    lets the other systems' repetitions run beside DBOS at its default.
    """
    registered = float(os.environ.get("BENCH_DBOS_POLL", "1.0"))
    if seconds is None:
        yield registered
        return
    queue = client.retrieve_queue(dbos_app.QUEUE)
    if queue is None:
        raise RuntimeError(f"DBOS queue {dbos_app.QUEUE!r} is not registered: are the workers running?")
    queue.set_polling_interval_sec(seconds)
    if seconds < registered:
        time.sleep(registered * RAMP_POLLS_PER_INTERVAL + 1.0)
    try:
        yield seconds
    finally:
        queue.set_polling_interval_sec(registered)


def cmd_queue(args: argparse.Namespace) -> dict[str, Any]:
    client = _client()
    tag = uuid.uuid4().hex[:6]
    with polling(client, args.poll) as interval:
        queue_burst(client, f"qwarm-{tag}", args.warmup, args.timeout)
        reps = [queue_burst(client, f"q-{tag}-{rep}", args.workflows, args.timeout) for rep in range(args.reps)]
    client.destroy()
    return {
        "workflows": args.workflows,
        "reps": args.reps,
        "poll_interval_s": interval,
        "workflows_per_s": common.summary([r["workflows_per_s"] for r in reps]),
        "first_step_ms_p50": common.summary([r["first_step_ms_p50"] for r in reps]),
        "first_step_ms_p99": common.summary([r["first_step_ms_p99"] for r in reps]),
        "start_seconds": common.summary([r["start_seconds"] for r in reps]),
    }


def cmd_isolated(args: argparse.Namespace) -> dict[str, Any]:
    client = _client()
    tag = uuid.uuid4().hex[:6]
    prefix = f"qiso-{tag}"
    starts: dict[str, float] = {}
    with polling(client, args.poll) as interval:
        for i in range(args.warmup + args.samples):
            wid = f"{prefix}-{i}" if i >= args.warmup else f"qisowarm-{tag}-{i}"
            t = time.time()
            _enqueue(client, wid, True)
            probe.wait_done(wid, timeout=60)
            if i >= args.warmup:
                starts[wid] = t
            common.wait_for(lambda wid=wid: _finished(wid)[0] >= 1, wid, 30, 0.002)
    client.destroy()
    ends = _finish_times(prefix + "-")
    firsts = probe.first_times()
    lat = [(firsts[w] - starts[w]) * 1000 for w in starts]
    e2e = [(ends[w] - starts[w]) * 1000 for w in starts]
    return {
        "samples": args.samples,
        "poll_interval_s": interval,
        "first_step_ms": {"p50": common.percentile(lat, 50), "p99": common.percentile(lat, 99)},
        "end_to_end_ms": {"p50": common.percentile(e2e, 50), "p99": common.percentile(e2e, 99)},
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.peer_dbos")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("serve", help="read one JSON list of arguments per line; answer each with @@RESULT")
    p = sub.add_parser("inproc")
    p.add_argument("--mode", choices=["start", "direct"], default="start")
    p.add_argument("--workflows", type=int, default=200)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20)
    p = sub.add_parser("counts-inproc")
    p.add_argument("--mode", choices=["start", "direct"], default="start")
    p.add_argument("--workflows", type=int, default=40)
    p.add_argument("--extra", type=int, default=10)
    p = sub.add_parser("queue")
    p.add_argument("--workflows", type=int, default=1000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument(
        "--poll", type=float, help="the queue's polling interval for this command (s; default: as registered)"
    )
    p = sub.add_parser("isolated")
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--poll", type=float, help="the queue's polling interval for this command (s; default: as registered)"
    )
    return parser


COMMANDS = {"inproc": cmd_inproc, "counts-inproc": cmd_counts_inproc, "queue": cmd_queue, "isolated": cmd_isolated}
_launched = False


def run_command(args: argparse.Namespace) -> dict[str, Any]:
    global _launched
    if args.cmd in ("inproc", "counts-inproc"):
        if args.cmd == "counts-inproc":
            sqlcount.install_sqlalchemy()
            sqlcount.counter.only_threads = WORKFLOW_THREADS
        if not _launched:
            dbos_app.launch(queues=[])  # in-process workloads only: never a queue worker
            _launched = True
    return COMMANDS[args.cmd](args)


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    try:
        if args.cmd != "serve":
            common.emit(run_command(args))
        else:
            common.serve(lambda argv: run_command(parser.parse_args(argv)))
    finally:
        if _launched:
            DBOS.destroy(workflow_completion_timeout_sec=0)


if __name__ == "__main__":
    main()
