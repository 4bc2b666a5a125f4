"""The benchmark's durable workflows (auto-discovered: ``bench`` is an installed app)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import durable
from bench import probe


def noop(i: int) -> int:
    return i


@durable.workflow(name="bench_local")
def local_steps(ctx: Any, n: int) -> int:
    """``n`` in-process steps (``ctx.local_step``), each checkpointed."""
    for i in range(n):
        ctx.local_step(f"s{i}", noop, i)
    return n


# Dispatched steps. Names without a dot route to the default queue ("durable").
@durable.step(name="bench_first")
def first_step(notify: bool) -> int:
    info = durable.current_step()
    probe.first(info.run_id if info else "?")
    return 1


@durable.step(name="bench_mid")
def mid_step() -> int:
    return 2


@durable.step(name="bench_last")
def last_step(notify: bool) -> int:
    info = durable.current_step()
    probe.last(info.run_id if info else "?", notify)
    return 3


@durable.workflow(name="bench_dispatched")
def dispatched(ctx: Any, data: dict[str, Any]) -> list[int]:
    """Three dispatched steps (``ctx.step``), each a Celery hop to a worker."""
    notify = bool(data.get("notify"))
    return [ctx.step(first_step, notify), ctx.step(mid_step), ctx.step(last_step, notify)]


@durable.workflow(name="bench_eager")
def eager_steps(ctx: Any, n: int) -> int:
    """``n`` dispatched steps (``ctx.step``) of the default queue, nothing else: a process that
    consumes that queue runs them in the turn (``EAGER_STEPS``), as a Celery worker does."""
    for _ in range(n):
        ctx.step(mid_step)
    return n


@durable.workflow(name="bench_dispatched_n")
def dispatched_n(ctx: Any, n: int) -> int:
    """``n`` dispatched steps; the last one tells the driver (Redis) that it ran."""
    for _ in range(n - 1):
        ctx.step(mid_step)
    ctx.step(last_step, True)
    return n


@durable.workflow(name="bench_sleeper")
def sleeper(ctx: Any, due: float) -> float:
    """Sleep until the shared moment ``due`` (a UNIX timestamp)."""
    ctx.sleep_until(datetime.fromtimestamp(due, UTC))
    return due


# Recovery after kill -9 (bench/recovery.py): one step that hangs on its first attempt.
def _record_execution(**fields: Any) -> None:
    import json
    import os
    import time

    path = os.environ.get("BENCH_RECOVERY_LOG")
    if path:
        line = json.dumps({**fields, "pid": os.getpid(), "at": time.time()}) + "\n"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


@durable.step(name="bench_recovery_hang", retries=3, backoff="10ms")
def recovery_hang(hang: float) -> int:
    """Records each execution; the first attempt hangs (its worker is killed meanwhile)."""
    import time

    info = durable.current_step()
    attempt = info.attempt if info else 0
    _record_execution(run=info.run_id if info else "?", attempt=attempt)
    if attempt == 1:
        time.sleep(hang)
    return attempt


@durable.step(name="bench_recovery_filler")
def recovery_filler(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


@durable.workflow(name="bench_recovery")
def recovery(ctx: Any, hang: float) -> int:
    return int(ctx.step(recovery_hang, hang))


@durable.workflow(name="bench_recovery_fill")
def recovery_filler_run(ctx: Any, seconds: float) -> float:
    return float(ctx.step(recovery_filler, seconds))


@durable.workflow(name="bench_fanin")
def fanin_wait(ctx: Any) -> Any:
    """Wait for signal ``go`` and end with its payload (``bench.fanin``)."""
    return ctx.wait_signal("go")
