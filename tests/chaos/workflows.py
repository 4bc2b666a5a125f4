"""Workflows and steps of the chaos suite, and the table their side effects go to.

Every execution of a step, a local step or an undo inserts one row into
``chaos_execution`` on its own autocommit connection, before it returns: the row
is a side effect outside the engine's transactions, as a payment or an e-mail
would be, so it survives a turn that is rolled back or a process killed just
after. Counting the rows per step gives how many times each step really ran.

Steps are routed by their name's prefix: ``chaos.*`` to queue ``chaos`` (served
by the Celery workers that also run turns, so these mostly run eagerly inside
the turn), ``remote.*`` to queue ``remote`` (served by a worker that runs no
turns: every such step goes through Redis). Steps with ``timeout=`` and the
steps of a ``gather`` always go through Redis.

Every result is a pure function of the step's arguments, so the verifier can
tell a recorded result that no execution produced (a late or duplicated write)
from a true one.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

import durable
from durable import Backoff, call, child_call

EXECUTIONS_DDL = """
CREATE TABLE IF NOT EXISTS chaos_execution (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL,
    seq integer,
    name text NOT NULL,
    attempt integer,
    kind text NOT NULL,
    pid integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
RETRIES = 10
BACKOFF = Backoff(initial=0.5, factor=2.0, max=2.0)
_local = threading.local()


def _connection() -> psycopg.Connection[Any]:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or getattr(_local, "pid", None) != os.getpid():
        url = os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
        conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
        _local.conn, _local.pid = conn, os.getpid()
    return conn


def record(run_id: str, name: str, kind: str, seq: int | None = None, attempt: int | None = None) -> None:
    """One row per execution. A database error propagates: the step fails and is retried."""
    try:
        _connection().execute(
            "INSERT INTO chaos_execution (run_id, seq, name, attempt, kind, pid) VALUES (%s, %s, %s, %s, %s, %s)",
            [run_id, seq, name, attempt, kind, os.getpid()],
        )
    except psycopg.Error:
        _local.conn = None
        raise


def _record_step(x: int, k: int = 0) -> None:
    """Record the execution, then work for 0-0.3 s (a function of the arguments), so kills find steps in flight."""
    info = durable.current_step()
    assert info is not None, "steps of this suite only run as steps"
    record(info.run_id, info.name, "step", info.seq, info.attempt)
    time.sleep(((x * 7 + k) % 4) / 10)


@durable.step(name="chaos.add", retries=RETRIES, backoff=BACKOFF)
def add(x: int, k: int) -> int:
    _record_step(x, k)
    return x + k


@durable.step(name="remote.mul", retries=RETRIES, backoff=BACKOFF, timeout="5m")
def mul(x: int, k: int) -> int:
    _record_step(x, k)
    return x * k


@durable.step(name="chaos.release", retries=RETRIES, backoff=BACKOFF)
def release(input: dict[str, Any], output: Any) -> None:
    info = durable.current_step()
    assert info is not None
    record(info.run_id, info.name, "undo", info.seq, info.attempt)


@durable.step(name="chaos.reserve", retries=RETRIES, backoff=BACKOFF, compensate=release)
def reserve(x: int) -> int:
    _record_step(x)
    return x


@durable.step(name="chaos.explode")
def explode(x: int) -> int:
    _record_step(x)
    raise durable.FatalError(f"explode({x}) always fails")


def _local_double(run_id: str, x: int) -> int:
    record(run_id, "double", "local")
    return 2 * x


def _local_hold(run_id: str, x: int) -> int:
    record(run_id, "hold", "local")
    return x


def _local_unhold(input: dict[str, Any], output: Any) -> None:
    record(input["args"][0], "unhold", "undo")


@durable.workflow(name="chaos.pipeline")
def pipeline(ctx: durable.WorkflowContext, data: dict[str, Any]) -> int:
    """Eager, local, timer, routed and fanned-out steps; the result is :func:`expected_pipeline`."""
    a = ctx.step(add, data["x"], 1)
    b = ctx.local_step("double", _local_double, ctx.run_id, a, retries=RETRIES, backoff=BACKOFF)
    ctx.sleep(data["sleep"])
    c = ctx.step(mul, b, 3)
    d, e = ctx.gather(call(add, c, 1), call(mul, c, 2))
    return int(d + e)


def expected_pipeline(x: int) -> int:
    c = 3 * (2 * (x + 1))
    return (c + 1) + 2 * c


@durable.workflow(name="chaos.signals")
def signals(ctx: durable.WorkflowContext, data: dict[str, Any]) -> list[Any]:
    """Waits for ``n`` signals ``sig`` one after another; returns their payloads in the order taken."""
    got = [ctx.wait_signal("sig") for _ in range(data["n"])]
    ctx.step(add, len(got), 0)
    return got


@durable.workflow(name="chaos.leaf")
def leaf(ctx: durable.WorkflowContext, data: dict[str, Any]) -> int:
    return int(ctx.step(add, data["x"], 10))


@durable.workflow(name="chaos.parent")
def parent(ctx: durable.WorkflowContext, data: dict[str, Any]) -> int:
    """One child, then two more in a gather; the result is :func:`expected_parent`."""
    x = data["x"]
    a = ctx.child(leaf, {"x": x})
    b, c = ctx.gather(child_call(leaf, {"x": x + 1}), child_call(leaf, {"x": x + 2}))
    return int(a + b + c)


def expected_parent(x: int) -> int:
    return 3 * x + 3 + 30


@durable.workflow(name="chaos.saga")
def saga(ctx: durable.WorkflowContext, data: dict[str, Any]) -> None:
    """Two reservations and a local hold, then a step that always fails: three undos, newest first."""
    x = data["x"]
    ctx.step(reserve, x)
    ctx.local_step("hold", _local_hold, ctx.run_id, x, retries=RETRIES, backoff=BACKOFF, compensate=_local_unhold)
    ctx.step(reserve, x + 1)
    ctx.step(explode, x)


@durable.workflow(name="chaos.cancellable")
def cancellable(ctx: durable.WorkflowContext, data: dict[str, Any]) -> None:
    """A few steps, then a wait no signal ends: only a cancel finishes it."""
    for i in range(data["steps"]):
        ctx.step(add, i, 1)
    ctx.wait_signal("never")


POISON_RETRIES = 2


@durable.step(name="remote.poison", retries=POISON_RETRIES, backoff=BACKOFF, timeout="5m")
def poison(x: int) -> int:
    """Kills the process that runs it, every time: the engine must give up after its retries."""
    _record_step(x)
    os._exit(1)


@durable.workflow(name="chaos.poisoned")
def poisoned(ctx: durable.WorkflowContext, data: dict[str, Any]) -> Any:
    """Catches the poison step's failure: the run completes with the error code it saw."""
    try:
        ctx.step(poison, data["x"])
    except durable.StepFailed as exc:
        return exc.error.get("code")
    return None


STEP_RESULTS = {
    "chaos.add": lambda args: args[0] + args[1],
    "remote.mul": lambda args: args[0] * args[1],
    "chaos.reserve": lambda args: args[0],
}
