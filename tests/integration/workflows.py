"""Workflows and steps of the Celery integration suite.

Imported by the worker subprocesses (auto-discovered through
:mod:`tests.integration.apps`) and by the test process (to start runs).

Every execution of a step (and of the ``hang`` local step) appends one JSON line
to the file named by ``$DURABLE_IT_LOG``, with one ``O_APPEND`` write: the count
survives the process that made it, even one killed with SIGKILL, and lines of
concurrent processes never interleave.

Steps are routed by their name's prefix: ``alpha.*`` to queue ``alpha``,
``beta.*`` to queue ``beta``; turns go to ``durable``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import durable
from tests.integration.common import LOG_ENV

HANG = 120.0  # "forever" for a test: the step or turn is killed long before


def record(**fields: Any) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    fields.setdefault("pid", os.getpid())
    fields.setdefault("at", time.time())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(fields) + "\n").encode())
    finally:
        os.close(fd)


def read_log(path: str | Path) -> list[dict[str, Any]]:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _wait_for_file(path: str, timeout: float = HANG) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {path} never opened")
        time.sleep(0.02)


def _heartbeat_until_open(gate: str) -> None:
    """Heartbeat (progress ``left``: 1 while the gate is shut) until ``gate`` exists, then once more with 0."""
    deadline = time.monotonic() + HANG
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {gate} never opened")
        durable.heartbeat({"left": 1})
        time.sleep(0.05)
    while not durable.heartbeat({"left": 0}) and time.monotonic() < deadline:  # throttled: the next one goes
        time.sleep(0.05)


def _behave(value: int, opts: dict[str, Any] | None) -> int:
    """What every step does, steered by ``opts`` (all optional):

    ``hang_first``  on attempt 1, block for a long time (the test kills the worker);
    ``sleep``       seconds of work; with ``heartbeat``, call ``durable.heartbeat`` meanwhile;
    ``gate``        wait until this file exists before finishing (with ``heartbeat``,
                    heartbeating until then instead of for ``sleep`` seconds);
    ``fail_unless`` raise ``FatalError`` unless this file exists;
    ``fail_if_negative`` raise ``FatalError`` for a negative value.
    """
    info = durable.current_step()
    assert info is not None, "steps of this suite only run dispatched"
    record(kind="step", name=info.name, run=info.run_id, seq=info.seq, attempt=info.attempt)
    opts = opts or {}
    if opts.get("hang_first") and info.attempt == 1:
        time.sleep(HANG)
    seconds = float(opts.get("sleep", 0))
    if opts.get("heartbeat") and opts.get("gate"):
        _heartbeat_until_open(opts["gate"])
    elif opts.get("heartbeat"):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            durable.heartbeat({"left": round(end - time.monotonic(), 2)})
            time.sleep(0.05)
    elif seconds:
        time.sleep(seconds)
    if opts.get("gate"):
        _wait_for_file(opts["gate"])
    if opts.get("fail_unless") and not os.path.exists(opts["fail_unless"]):
        raise durable.FatalError(f"{opts['fail_unless']} is missing")
    if opts.get("fail_if_negative") and value < 0:
        raise durable.FatalError(f"negative value {value}")
    record(kind="step_done", name=info.name, run=info.run_id, seq=info.seq, attempt=info.attempt)
    return value


@durable.step(name="alpha.inc", retries=1, backoff=0)  # a lost worker costs the retry
def alpha_inc(value: int, opts: dict[str, Any] | None = None) -> int:
    return _behave(value, opts) + 1


@durable.step(name="beta.double", retries=1, backoff=0)  # a lost worker costs the retry
def beta_double(value: int, opts: dict[str, Any] | None = None) -> int:
    return _behave(value, opts) * 2


@durable.step(name="alpha.square", retries=1, backoff=0)  # a lost worker costs the retry
def alpha_square(value: int, opts: dict[str, Any] | None = None) -> int:
    return _behave(value, opts) ** 2


@durable.workflow(name="it.pipeline")
def pipeline(ctx: durable.WorkflowContext, data: dict[str, Any]) -> int:
    """Three dispatched steps: ``((x + 1) * 2) ** 2``; ``data["opts"]["1"|"2"|"3"]`` steer them."""
    opts = data.get("opts", {})
    a = ctx.step(alpha_inc, data["x"], opts.get("1"))
    # Runs once per turn that got past step 1: counts resumes, not replays of them.
    ctx.local_step("after_1", record, kind="resumed", run=ctx.run_id, after=1)
    b = ctx.step(beta_double, a, opts.get("2"))
    c = ctx.step(alpha_square, b, opts.get("3"))
    return c


def expected_pipeline(x: int) -> int:
    return ((x + 1) * 2) ** 2


def _hang_local(run_id: str, gate: str | None) -> str:
    """A local step (runs inside the turn): the first execution of a run hangs, later ones pass.

    The first execution is told apart through the shared log, since a local step
    has no attempt number of its own. Later executions wait for ``gate`` if given.
    """
    log = os.environ.get(LOG_ENV)
    earlier = [e for e in read_log(log) if e.get("kind") == "local" and e.get("run") == run_id] if log else []
    record(kind="local", name="hang", run=run_id, execution=len(earlier) + 1)
    if not earlier:
        time.sleep(HANG)
    if gate:
        _wait_for_file(gate)
    record(kind="local_done", name="hang", run=run_id, execution=len(earlier) + 1)
    return "held"


@durable.workflow(name="it.orphan")
def orphan(ctx: durable.WorkflowContext, data: dict[str, Any]) -> int:
    """A turn that hangs in a local step (first time) and then dispatches one step."""
    ctx.local_step("hang", _hang_local, ctx.run_id, data.get("gate"))
    return ctx.step(alpha_inc, data["x"], None)


@durable.step(name="alpha.poison", retries=2, backoff=0)
def alpha_poison() -> None:
    """Takes its worker process down with it, every time (the execution is logged first)."""
    info = durable.current_step()
    assert info is not None, "steps of this suite only run dispatched"
    record(kind="step", name=info.name, run=info.run_id, seq=info.seq, attempt=info.attempt)
    os._exit(1)


@durable.workflow(name="it.guarded")
def guarded(ctx: durable.WorkflowContext, data: dict[str, Any]) -> Any:
    """One poison step, its failure handled by the workflow."""
    try:
        return ctx.step(alpha_poison)
    except durable.StepFailed as exc:
        return {"caught": exc.error["code"], "attempts": exc.attempts}


@durable.workflow(name="it.traced")
def traced(ctx: durable.WorkflowContext, x: int) -> int:
    """Three dispatched steps with a sleep and a signal in between (the trace test)."""
    a = ctx.step(alpha_inc, x, None)
    ctx.sleep("500ms")
    approved = ctx.wait_signal("go")
    b = ctx.step(beta_double, a if approved else 0, None)
    return int(ctx.step(alpha_square, b, None))


# The real-process tests of limited queues and of namespace queues (test_queues.py, test_namespaces.py).
from tests.integration import namespace_workflows as _namespace_workflows  # noqa: E402,F401
from tests.integration import queue_workflows as _queue_workflows  # noqa: E402,F401
