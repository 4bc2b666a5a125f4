"""Workflows and steps for the fault-injection suite (tests/test_faults.py).

They are imported both by the test process and by ``manage.py durable_worker``
subprocesses (through :mod:`tests.fault_apps`), so every execution is recorded
in a file named by the run's input: the count survives the process that did it,
even one killed with SIGKILL.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import durable


class Crash(BaseException):
    """Simulated death of the process in the middle of a turn.

    A ``BaseException``: it escapes every ``except Exception`` of the engine,
    leaving the run ``running`` under a lease nobody will renew, exactly as a
    killed process does.
    """


# In-process hooks (test process only): called by steps at a chosen moment.
hooks: dict[str, Callable[[], None]] = {}


def record(log: str, name: str) -> None:
    """Append one line ``name`` to ``log`` (one O_APPEND write: safe across processes)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{name}\n".encode())
    finally:
        os.close(fd)


def executions(log: str | Path, name: str) -> int:
    """How many times ``name`` started executing, per ``log``."""
    try:
        lines = Path(log).read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for line in lines if line == name)


def recorded(log: str, name: str) -> str:
    record(log, name)
    return name


def _step_b(log: str, release: str | None, crash: str | None, crash_always: bool) -> str:
    record(log, "B")
    if crash is not None and os.path.exists(crash):
        if not crash_always:
            os.remove(crash)
        raise Crash("process died inside step B")
    if release is not None:
        wait_for_release(release)
    return "B"


def wait_for_release(release: str) -> None:
    """Block until the file ``release`` exists (a minute at most)."""
    deadline = time.monotonic() + 60
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} never appeared")
        time.sleep(0.01)


@durable.workflow(name="fault_three_locals")
def three_locals(ctx: durable.WorkflowContext, inp: dict[str, Any]) -> list[str]:
    """Local steps A, B, C. B can block on a file (``release``) or crash (``crash`` marker file).

    With ``nap`` (seconds), the run first sleeps, so A, B and C run in its second turn.
    """
    log = inp["log"]
    if inp.get("nap"):
        ctx.sleep(inp["nap"])
    a = ctx.local_step("A", recorded, log, "A")
    b = ctx.local_step("B", _step_b, log, inp.get("release"), inp.get("crash"), bool(inp.get("crash_always")))
    c = ctx.local_step("C", recorded, log, "C")
    return [a, b, c]


@durable.workflow(name="fault_sleeper")
def sleeper(ctx: durable.WorkflowContext, inp: dict[str, Any]) -> str:
    ctx.local_step("before", recorded, inp["log"], "before")
    ctx.sleep(inp["seconds"])
    ctx.local_step("after", recorded, inp["log"], "after")
    return "woke"


@durable.workflow(name="fault_echo")
def echo(ctx: durable.WorkflowContext, inp: Any) -> Any:
    return ctx.local_step("echo", lambda: inp)


@durable.workflow(name="fault_wait_one")
def wait_one(ctx: durable.WorkflowContext) -> Any:
    return ctx.wait_signal("go")


@durable.workflow(name="fault_wait_two")
def wait_two(ctx: durable.WorkflowContext) -> list[Any]:
    first = ctx.wait_signal("go")
    second = ctx.wait_signal("go")
    return [first, second]


@durable.step(name="fault_remote")
def remote(log: str, value: int) -> int:
    record(log, "remote")
    hook = hooks.get("remote")
    if hook is not None:
        hook()
    return value * 2


@durable.workflow(name="fault_remote_then_local")
def remote_then_local(ctx: durable.WorkflowContext, inp: dict[str, Any]) -> int:
    doubled = ctx.step(remote, inp["log"], inp["value"])
    ctx.local_step("after", recorded, inp["log"], "after")
    return doubled


@durable.step(name="fault_blocking_remote", retries=2, backoff="10ms")
def blocking_remote(log: str, release: str) -> str:
    """A dispatched step that blocks until ``release`` exists (the test kills its worker meanwhile)."""
    record(log, "blocking_remote")
    wait_for_release(release)
    return "released"


@durable.workflow(name="fault_blocking_remote_then_local")
def blocking_remote_then_local(ctx: durable.WorkflowContext, inp: dict[str, Any]) -> str:
    value = ctx.step(blocking_remote, inp["log"], inp["release"])
    ctx.local_step("after", recorded, inp["log"], "after")
    return value
