"""Django signals for run lifecycle, so an app can react in-process.

Sent after the write they announce has committed, in the process that made it::

    from django.dispatch import receiver
    from durable.signals import run_completed

    @receiver(run_completed)
    def notify(sender, run, **kwargs):   # sender: the workflow name; run: durable.RunInfo
        ...

Receivers must be quick and must not raise (errors are logged and ignored);
for durable reactions subscribe a workflow with ``on_event=["run.completed:<wf>"]``.

The module keeps the Django convention's name (``<app>.signals``, where
Django users look for an app's signals, and a documented public module they
connect to) although durable also has *workflow* signals (``durable.signal``,
``ctx.wait_signal``): those are messages to one run, these are in-process
notifications about runs. Renaming it would break every receiver.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

from durable.engine.vocab import RunStatus

run_suspended = Signal()
run_blocked = Signal()
run_completed = Signal()
run_failed = Signal()
run_cancelled = Signal()
run_dead = Signal()
# A lifecycle event reached a subscriber: kwargs source (RunInfo), subscriber, outcome.
lifecycle_delivered = Signal()
# Retention is about to delete a batch of finished runs: kwargs runs, a list of
# {"run": {...}, "checkpoints": [...], "waiters": [...], "buffered_signals": [...]} (JSON).
# Sent with sender=None before the delete; unlike the signals above a receiver that raises
# keeps the whole batch (nothing deleted, retried at the next pass): archive, then return.
runs_evicted = Signal()

BY_STATUS: dict[str, Signal] = {
    RunStatus.SUSPENDED: run_suspended,
    RunStatus.BLOCKED: run_blocked,
    RunStatus.COMPLETED: run_completed,
    RunStatus.FAILED: run_failed,
    RunStatus.CANCELLED: run_cancelled,
    RunStatus.DEAD: run_dead,
}


def send_status(status: str, run: Any) -> None:
    """Engine listener: forward a committed turn's outcome to the matching Django signal."""
    signal = BY_STATUS.get(status)
    if signal is not None and signal.has_listeners():
        from durable.results import RunInfo

        signal.send_robust(sender=run.workflow, run=RunInfo.from_record(run))


def send_lifecycle(run: Any, subscriber: str, outcome: str) -> None:
    if lifecycle_delivered.has_listeners():
        from durable.results import RunInfo

        lifecycle_delivered.send_robust(
            sender=run.workflow, source=RunInfo.from_record(run), subscriber=subscriber, outcome=outcome
        )
