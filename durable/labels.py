"""Human labels of the engine's statuses and kinds, for the admin and the API (values are durable.engine.vocab's)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _

from durable.engine.vocab import Admission, CheckpointKind, CheckpointStatus, RunStatus

RUN_STATUS_LABELS = {
    RunStatus.QUEUED: _("Queued"),
    RunStatus.PENDING: _("Pending"),
    RunStatus.RUNNING: _("Running"),
    RunStatus.SUSPENDED: _("Suspended"),
    RunStatus.BLOCKED: _("Blocked"),
    RunStatus.COMPLETED: _("Completed"),
    RunStatus.FAILED: _("Failed"),
    RunStatus.CANCELLED: _("Cancelled"),
    RunStatus.DEAD: _("Dead"),
}
CHECKPOINT_STATUS_LABELS = {
    CheckpointStatus.PENDING: _("Pending"),
    CheckpointStatus.RUNNING: _("Running"),
    CheckpointStatus.COMPLETED: _("Completed"),
    CheckpointStatus.FAILED: _("Failed"),
}
CHECKPOINT_KIND_LABELS = {
    CheckpointKind.STEP: _("Dispatched step"),
    CheckpointKind.LOCAL: _("Local step"),
    CheckpointKind.SLEEP: _("Sleep"),
    CheckpointKind.SIGNAL: _("Signal"),
    CheckpointKind.NOW: _("Time"),
    CheckpointKind.UUID: _("UUID"),
    CheckpointKind.SIDE_EFFECT: _("Side effect"),
    CheckpointKind.CHILD: _("Child workflow"),
    CheckpointKind.START_CHILD: _("Started child"),
    CheckpointKind.WAIT_RUN: _("Wait for run"),
    CheckpointKind.EVENT: _("Named event"),
    CheckpointKind.UPDATE: _("Update"),
    CheckpointKind.ATTRIBUTES: _("Search attributes"),
    CheckpointKind.TRANSACTION: _("Database transaction"),
    CheckpointKind.COMPENSATION: _("Compensation"),
    CheckpointKind.ENTITY: _("Entity operation"),
    CheckpointKind.CALLBACK: _("Callback"),
    CheckpointKind.CALLBACK_WAIT: _("Wait for callback"),
    CheckpointKind.BREAKPOINT: _("Breakpoint"),
}
RUN_STATUS_CHOICES = [(status.value, label) for status, label in RUN_STATUS_LABELS.items()]
CHECKPOINT_STATUS_CHOICES = [(status.value, label) for status, label in CHECKPOINT_STATUS_LABELS.items()]
ADMISSION_LABELS = {Admission.WAITING: _("Waiting for its queue"), Admission.ADMITTED: _("Admitted")}
ADMISSION_CHOICES = [(value.value, label) for value, label in ADMISSION_LABELS.items()]
CHECKPOINT_KIND_CHOICES = [(kind.value, label) for kind, label in CHECKPOINT_KIND_LABELS.items()]
