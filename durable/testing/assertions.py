"""Assertions on runs for tests, with messages that say what the run did instead."""

from __future__ import annotations

from typing import Any

from durable.api import RunInfo, get_run
from durable.engine.vocab import CheckpointKind, RunStatus
from durable.runtime import get_engine
from durable.testing.faults import step_name

# Checkpoint kinds that record a call of a step (dispatched or local).
STEP_KINDS = frozenset({CheckpointKind.STEP, CheckpointKind.LOCAL})


def assert_completed(run_id: str) -> RunInfo:
    """The run (following continue-as-new) completed; returns it. Otherwise says its status and error."""
    run = get_run(run_id, follow=True)
    if run.status != RunStatus.COMPLETED:
        error = (run.error or {}).get("message") if isinstance(run.error, dict) else run.error
        detail = f": {error}" if error else ""
        raise AssertionError(f"run {run.id!r} is {run.status}, not completed{detail}")
    return run


def assert_step_called(run_id: str, name: Any, times: int | None = None) -> int:
    """Step ``name`` (a ``@durable.step`` function or a step/``local_step`` name) was called in the run.

    ``times``: exactly that many calls (positions in the history; a retried
    call counts once), else at least one. Returns the number of calls.
    """
    step = step_name(name)
    history = get_engine().store.load_checkpoints(get_run(run_id).id)
    calls = [cp for cp in history.values() if cp.kind in STEP_KINDS and cp.name == step]
    if (times is None and not calls) or (times is not None and len(calls) != times):
        wanted = "at least once" if times is None else f"{times} time(s)"
        seen = sorted({cp.name for cp in history.values() if cp.kind in STEP_KINDS})
        raise AssertionError(
            f"run {run_id!r} called step {step!r} {len(calls)} time(s), expected {wanted}; steps called: {seen}"
        )
    return len(calls)
