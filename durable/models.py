"""Durable state: runs, their checkpoints, signal waiters and buffered signals.

These tables are the truth: a sweep re-derives from them all a worker or broker holds. All writes go
through :mod:`durable.store`. User payloads are ``PayloadField`` columns (encoded by ``DURABLE["CODEC"]``).
"""

from __future__ import annotations

from django.db import models

from durable.codecs.fields import PayloadField

# Re-exported: the dashboard and older imports read the statuses from here.
from durable.engine.vocab import ACTIVE as ACTIVE
from durable.engine.vocab import TERMINAL as TERMINAL
from durable.engine.vocab import Admission as Admission
from durable.engine.vocab import CheckpointKind as CheckpointKind
from durable.engine.vocab import CheckpointStatus as CheckpointStatus
from durable.engine.vocab import EntityOpStatus
from durable.engine.vocab import RunStatus as RunStatus

# Re-exported: the admin and the API read the labels and choices from here.
from durable.labels import ADMISSION_CHOICES as ADMISSION_CHOICES
from durable.labels import ADMISSION_LABELS as ADMISSION_LABELS
from durable.labels import CHECKPOINT_KIND_CHOICES as CHECKPOINT_KIND_CHOICES
from durable.labels import CHECKPOINT_KIND_LABELS as CHECKPOINT_KIND_LABELS
from durable.labels import CHECKPOINT_STATUS_CHOICES as CHECKPOINT_STATUS_CHOICES
from durable.labels import CHECKPOINT_STATUS_LABELS as CHECKPOINT_STATUS_LABELS
from durable.labels import RUN_STATUS_CHOICES as RUN_STATUS_CHOICES
from durable.labels import RUN_STATUS_LABELS as RUN_STATUS_LABELS
from durable.runtime import now as clock_now


def _set(column: str) -> models.Q:
    """A partial index's condition: only rows where ``column`` is set."""
    return models.Q(**{f"{column}__isnull": False})


class Run(models.Model):
    """One execution of one workflow version.

    ``id`` is chosen by the caller (or generated) and doubles as the idempotency
    key of :func:`durable.start`. ``locked_by``/``locked_until`` form the lease:
    only the holder may write the run's outcome, and every such write checks it.
    ``wake_at`` is when a suspended run should next be looked at (a timer, a
    retry, or the reconcile fallback).
    """

    id = models.CharField(primary_key=True, max_length=255)
    workflow = models.CharField(max_length=200)
    version = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=16, choices=RUN_STATUS_CHOICES, default=RunStatus.PENDING)
    namespace = models.CharField(max_length=100, default="default")
    input = PayloadField(null=True, blank=True)
    output = PayloadField(null=True, blank=True)
    error = PayloadField(null=True, blank=True, error=True)
    wake_at = models.DateTimeField(null=True, blank=True)
    locked_by = models.CharField(max_length=100, null=True, blank=True)
    locked_until = models.DateTimeField(null=True, blank=True)
    recovery_attempts = models.PositiveIntegerField(default=0)
    # Turns taken so far (the first one has no history to read).
    turns = models.PositiveIntegerField(default=0)
    tags = models.JSONField(default=list, blank=True)
    search_attributes = models.JSONField(default=dict, blank=True)
    priority = models.IntegerField(default=0)
    parent_id = models.CharField(max_length=255, null=True, blank=True)
    # Lineage: the failed run this one retries with corrected input.
    retry_of = models.CharField(max_length=255, null=True, blank=True)
    # Lineage: durable.fork made this run from that one's history before position forked_at_seq.
    forked_from = models.CharField(max_length=255, null=True, blank=True)
    forked_at_seq = models.PositiveIntegerField(null=True, blank=True)
    # Continue-as-new: the run that carries on from this one.
    continued_to = models.CharField(max_length=255, null=True, blank=True)
    # Values published with ctx.set_event(key, value), read with durable.get_event.
    query_values = PayloadField(default=dict, blank=True)
    # ctx.patched(...) change ids this run took the new code path for.
    patches = models.JSONField(default=list, blank=True)
    # durable.cancel(compensate=True) asked this run to undo its steps and stop.
    cancel_requested = models.BooleanField(default=False)
    # Some run has registered (at some point) to wait for this one: set under this row's lock
    # by the waiter's commit, so a run that completes with it false has no one to wake.
    awaited = models.BooleanField(default=False)
    # A suspension's dispatched steps not settled yet, when it knows them exactly (every step it
    # waits on was created by the suspending commit); NULL otherwise. A step result counts it
    # down under this row's lock and wakes the run only at zero or on a failure: a fan-out of n
    # steps is woken once, not by each of its results. Written by every suspension.
    awaiting_steps = models.IntegerField(null=True, blank=True)
    # Lifecycle event delivery: {"owed": [...], "started": {sub: run}, "coalesced": {...},
    # "failed": {sub: reason}, "skipped": [...]}, written with the terminal status. For a
    # settled run, locked_by/locked_until are the lease of whoever publishes it.
    lifecycle = models.JSONField(default=dict, blank=True)
    lifecycle_owed = models.BooleanField(default=False)
    deadline_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=clock_now)
    updated_at = models.DateTimeField(default=clock_now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The trace context ({"traceparent": ..., "tracestate": ...}) of the caller of start(),
    # continued by every later turn and step of the run (DURABLE["OPENTELEMETRY"]).
    trace_context = models.JSONField(null=True, blank=True)
    # A singleton workflow's run (@workflow(singleton=...)): its key, the key's limit when it
    # was started, and its place in the key's FIFO queue (SingletonSlot.tail when admitted).
    singleton_key = models.CharField(max_length=200, null=True, blank=True)
    singleton_limit = models.PositiveIntegerField(null=True, blank=True)
    singleton_seq = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        permissions = [("view_payloads", "Can view workflow payloads (inputs, outputs, errors, signals)")]
        indexes = [
            # due timers / wakes, and pending runs to pick up
            models.Index(fields=["status", "wake_at"], name="durable_run_status_wake"),
            # pending runs in the order a worker claims them (highest priority, oldest first), so
            # a page claim walks the index and stops at its page instead of sorting every pending
            # run; only pending rows enter it, so a run's later writes do not maintain it
            models.Index(
                fields=["-priority", "created_at"],
                name="durable_run_pending",
                condition=models.Q(status=RunStatus.PENDING),
            ),
            # orphans: running with an expired lease (only running rows: a turn's other writes skip it)
            models.Index(
                fields=["locked_until"],
                name="durable_run_running_lease",
                condition=models.Q(status=RunStatus.RUNNING),
            ),
            # lists per namespace and status, newest first
            models.Index(fields=["namespace", "status", "-created_at"], name="durable_run_ns_status_created"),
            models.Index(fields=["workflow", "-created_at"], name="durable_run_wf_created"),
            models.Index(fields=["workflow", "status", "-created_at"], name="durable_run_wf_status_created"),
            models.Index(fields=["-created_at"], name="durable_run_created"),
            # execution timeouts
            models.Index(fields=["deadline_at"], name="durable_run_deadline", condition=_set("deadline_at")),
            # lifecycle events still owed to subscribers
            models.Index(
                fields=["finished_at"], name="durable_run_lifecycle_owed", condition=models.Q(lifecycle_owed=True)
            ),
            # heal: runs settled recently, per workflow. Partial, as the three below: no run write is HOT.
            models.Index(
                fields=["workflow", "finished_at"], name="durable_run_wf_finished", condition=_set("finished_at")
            ),
            # children, retries, forks of a run (equality only: no LIKE index)
            models.Index(fields=["parent_id"], name="durable_run_parent", condition=_set("parent_id")),
            models.Index(fields=["retry_of"], name="durable_run_retry_of", condition=_set("retry_of")),
            models.Index(fields=["forked_from"], name="durable_run_forked_from", condition=_set("forked_from")),
            # retention: finished runs of a status, oldest finish first (only finished rows enter it,
            # so a turn's status writes on the way do not maintain it)
            models.Index(
                fields=["status", "finished_at", "id"],
                name="durable_run_expiry",
                condition=models.Q(status__in=[str(status) for status in TERMINAL]),
            ),
            # a singleton key's holders and its FIFO queue (only singleton runs are indexed)
            models.Index(
                fields=["workflow", "singleton_key", "status", "singleton_seq"],
                name="durable_run_singleton",
                condition=_set("singleton_key"),
            ),
            # keys with runs waiting for a slot (the admission sweep)
            models.Index(
                fields=["workflow", "singleton_key"],
                name="durable_run_queued",
                condition=models.Q(status=RunStatus.QUEUED),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow} v{self.version} {self.id} ({self.status})"


class Checkpoint(models.Model):
    """The recorded outcome of the durable operation at position ``seq`` of a run.

    Written once per ``(run, seq)``: the unique constraint is what makes a step's
    outcome exactly-once even if the step itself ran twice.
    """

    # No index of its own: the unique (run, seq) constraint serves every lookup by run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints", db_index=False)
    seq = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=CHECKPOINT_KIND_CHOICES)
    status = models.CharField(max_length=16, choices=CHECKPOINT_STATUS_CHOICES)
    input = PayloadField(null=True, blank=True)
    output = PayloadField(null=True, blank=True)
    error = PayloadField(null=True, blank=True, error=True)
    attempts = models.PositiveIntegerField(default=0)
    # Timer due time; for a dispatched step, when a sweep should (re)dispatch it if
    # no worker took it (pending) or presume its worker lost (running, the lease).
    wake_at = models.DateTimeField(null=True, blank=True)
    # A failed attempt's retry is not claimed before this.
    retry_at = models.DateTimeField(null=True, blank=True)
    timeout_at = models.DateTimeField(null=True, blank=True)
    queue = models.CharField(max_length=200, null=True, blank=True)
    locked_by = models.CharField(max_length=100, null=True, blank=True)
    dispatches = models.PositiveIntegerField(default=0)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    progress = PayloadField(null=True, blank=True)
    events = PayloadField(default=list, blank=True)
    # A step of a limited queue (DURABLE["QUEUES"]): its key (key_concurrency, fairness), where
    # it stands with its queue (None for other steps) and when its last admission let it start.
    queue_key = models.CharField(max_length=255, null=True, blank=True)
    admission = models.CharField(max_length=16, choices=ADMISSION_CHOICES, null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    # A limited queue's step: its run's priority (which never changes), so that an admission
    # ranks the backlog from one index without reading the runs; 0 for other checkpoints.
    priority = models.IntegerField(default=0, db_default=0)

    class Meta:
        ordering = ("run_id", "seq")
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="durable_checkpoint_run_seq")]
        indexes = [
            # dispatched steps to (re)deliver, retries due, expired step leases
            models.Index(
                fields=["status", "wake_at"],
                name="durable_cp_step_due",
                condition=models.Q(kind="step", status__in=["pending", "running"]),
            ),
            # a limited queue's slot holders: admitted and unsettled (a waiting step is not in it, so
            # that the reads of the backlog cannot be planned on this index instead of the next)
            models.Index(
                fields=["queue", "wake_at"],
                name="durable_cp_queue_held",
                condition=models.Q(admission="admitted", status__in=["pending", "running"]),
            ),
            # a limited queue's backlog: each (priority, key)'s oldest steps, one range of the index.
            # No kind in its condition (only steps are admitted), so that its reads need not name
            # one: a read that names kind "step" could be planned on the due-steps index instead.
            models.Index(
                fields=["queue", "priority", "queue_key", "enqueued_at", "id"],
                name="durable_cp_queue_backlog",
                condition=models.Q(admission__isnull=False, status="pending"),
            ),
            # when each key of a limited queue was last admitted (round robin). Steps without a key,
            # and the admissions per minute, are counted on the queue's row instead: an entry here
            # is written again by every later update of the step (claim, heartbeats, result).
            models.Index(
                fields=["queue", "queue_key", "admitted_at"],
                name="durable_cp_queue_served",
                condition=models.Q(admitted_at__isnull=False, queue_key__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.kind} {self.name} ({self.status})"


class SignalWaiter(models.Model):
    """A suspended run waiting on token ``name`` at position ``seq``.

    Tokens: a signal name; ``__run__:<id>`` for another run settling (children,
    ``wait_for_run``); ``__event__:<name>`` for a named event, with ``match``.
    Replaced as a whole by each suspension of the run, and deleted by its own
    run id and position only, so a waiter is never removed on another run's behalf.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="waiters")
    name = models.CharField(max_length=300)
    seq = models.PositiveIntegerField()
    match = PayloadField(null=True, blank=True)
    created_at = models.DateTimeField(default=clock_now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="durable_waiter_run_seq")]
        indexes = [
            # Every lookup names the token (a sender, a publisher, a wake: and the run, for a
            # signal's sender); one by run alone takes the unique (run, seq). One index with the
            # name first, so no plan can find a token by scanning an index that leads with the run.
            models.Index(fields=["name", "run"], name="durable_waiter_name_run"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} waits for {self.name!r} (#{self.seq})"


class BufferedSignal(models.Model):
    """A signal delivered to a run, kept until a ``wait_signal`` consumes it (FIFO per name)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="buffered_signals")
    name = models.CharField(max_length=200)
    payload = PayloadField(null=True, blank=True)
    created_at = models.DateTimeField(default=clock_now)

    class Meta:
        ordering = ("id",)
        indexes = [models.Index(fields=["run", "name", "id"], name="durable_signal_run_name")]

    def __str__(self) -> str:
        return f"signal {self.name!r} for {self.run_id}"


class BufferedEvent(models.Model):
    """A named event that no waiting run took yet; kept once per event id for the first match."""

    event_id = models.CharField(max_length=255, unique=True)
    name = models.CharField(max_length=200)
    payload = PayloadField(null=True, blank=True)
    # Delivered (to waiters or a buffered taker): kept so the same event id is never delivered twice.
    consumed = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=clock_now)

    class Meta:
        ordering = ("id",)
        indexes = [models.Index(fields=["name", "id"], name="durable_event_name", condition=models.Q(consumed=False))]

    def __str__(self) -> str:
        return f"event {self.name!r} ({self.event_id})"


class LifecycleBatch(models.Model):
    """Lifecycle events accumulated for a ``debounce`` or ``batch`` subscriber.

    One open row per subscriber (and key); events are appended under its row
    lock and the row is deleted in the same transaction that starts the
    subscriber run, so an event is delivered in exactly one batch.
    """

    subscriber = models.CharField(max_length=200)
    key = models.CharField(max_length=255, default="")
    events = PayloadField(default=list)
    source_ids = models.JSONField(default=list)
    opened_at = models.DateTimeField(default=clock_now)
    fire_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["subscriber", "key"], name="durable_lifecycle_batch_key")]

    def __str__(self) -> str:
        return f"{self.subscriber} batch of {len(self.events)}"


class SingletonSlot(models.Model):
    """The admission row of one singleton key: locked by every start and hand-over of that key.

    Whoever admits a run of ``(workflow, key)`` (a start, a slot handed over,
    the admission sweep) first locks this row, then counts the key's runs
    holding a slot (the truth is the runs' statuses, never a counter here),
    so admissions of one key are serialised across processes. ``tail`` is
    the last queue position given out (FIFO order of the queued runs);
    ``limit`` the key's limit as the code declared it at the last start.
    """

    workflow = models.CharField(max_length=200)
    key = models.CharField(max_length=200)
    limit = models.PositiveIntegerField(default=1)
    tail = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(default=clock_now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workflow", "key"], name="durable_singleton_slot_key")]

    def __str__(self) -> str:
        return f"{self.workflow} singleton {self.key!r} (limit {self.limit})"


class Entity(models.Model):
    """The state of entity ``(name, key)`` and its op count (the last op's position); not keyed to a run.

    Written only by ``Store.apply_entity_op``, which locks this row first: one op of a key at a time.
    """

    name = models.CharField(max_length=100)
    key = models.CharField(max_length=200)
    state = PayloadField(null=True, blank=True)
    ops = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(default=clock_now)
    updated_at = models.DateTimeField(default=clock_now)

    class Meta:
        ordering = ("name", "key")
        verbose_name_plural = "entities"
        constraints = [models.UniqueConstraint(fields=["name", "key"], name="durable_entity_name_key")]

    def __str__(self) -> str:
        return f"{self.name}[{self.key}]"


class EntityOp(models.Model):
    """An operation applied to an entity: its position, argument and result (or error).

    Written with the entity's new state. An entity keeps its newest ``history`` rows (1,000 by
    default); the op id is unique per entity, so a repeat of a logged op is answered from its row.
    """

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="log", db_index=False)
    op_id = models.CharField(max_length=300)
    seq = models.BigIntegerField()
    op = models.CharField(max_length=100)
    arg = PayloadField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=[(s.value, s.value.capitalize()) for s in EntityOpStatus])
    result = PayloadField(null=True, blank=True)
    error = PayloadField(null=True, blank=True, error=True)
    created_at = models.DateTimeField(default=clock_now)

    class Meta:
        ordering = ("entity_id", "seq")
        constraints = [
            # Also the index of every read and prune by entity (newest positions first).
            models.UniqueConstraint(fields=["entity", "seq"], name="durable_entity_op_seq"),
            models.UniqueConstraint(fields=["entity", "op_id"], name="durable_entity_op_id"),
        ]

    def __str__(self) -> str:
        return f"{self.entity_id}#{self.seq} {self.op} ({self.status})"


class WorkerDescriptor(models.Model):
    """A live worker process advertising what it can execute.

    Written by the worker at start and refreshed by its heartbeat; a row whose
    ``expires_at`` passed is a worker presumed gone. Dispatch consults these rows
    so a step no live worker serves parks its run ``blocked`` instead of
    disappearing into a queue nobody reads.
    """

    id = models.CharField(primary_key=True, max_length=100)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    steps = models.JSONField(default=list)
    workflows = models.JSONField(default=list)
    capabilities = models.JSONField(default=dict)
    protocol = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField(default=clock_now)
    heartbeat_at = models.DateTimeField(default=clock_now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ("hostname", "pid")

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid} ({', '.join(self.queues)})"


class Schedule(models.Model):
    """A schedule: when ``workflow`` starts on its own, and where its windows stand.

    Written only through :mod:`durable.store` executing a
    :class:`durable.schedules.plan.SchedulePlan` (compare-and-set on
    ``revision``). ``due_at`` is when a sweep next looks at the row (the next
    window plus its jitter); ``code_spec`` is what the code declared at the
    last sync, so a deploy changes only the fields the code changed.
    """

    key = models.CharField(primary_key=True, max_length=200)
    workflow = models.CharField(max_length=200)
    spec = models.JSONField(default=dict)
    paused = models.BooleanField(default=False)
    origin = models.CharField(max_length=16)
    code_spec = models.JSONField(null=True, blank=True)
    next_window = models.DateTimeField(null=True, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)
    buffered = models.DateTimeField(null=True, blank=True)
    last_run_id = models.CharField(max_length=255, null=True, blank=True)
    last_window = models.DateTimeField(null=True, blank=True)
    skipped = models.PositiveIntegerField(default=0)
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=clock_now)
    updated_at = models.DateTimeField(default=clock_now)

    class Meta:
        ordering = ("key",)
        indexes = [models.Index(fields=["due_at"], name="durable_schedule_due", condition=models.Q(paused=False))]

    def __str__(self) -> str:
        return self.key


class Queue(models.Model):
    """A limited step queue's runtime state: overrides of its limits, paused, its rate's next start.

    ``DURABLE["QUEUES"]`` gives the limits; a limit named in ``overrides``
    wins over the setting (None there turns it off). Admission locks this
    row, so it is also what serialises admitters of one queue. Written only
    through :mod:`durable.store` (admission, :func:`durable.queues.configure`).
    """

    name = models.CharField(primary_key=True, max_length=200)
    overrides = models.JSONField(default=dict, blank=True)
    paused = models.BooleanField(default=False)
    # The earliest start the rate limit grants next (spacing starts one interval apart).
    rate_next_at = models.DateTimeField(null=True, blank=True)
    # Admissions per minute (durable.engine.queue_tally): the minute of the latest grants,
    # the grants in it and in the minute before; rewritten by every grant.
    admitted_minute = models.DateTimeField(null=True, blank=True)
    admitted_count = models.IntegerField(default=0, db_default=0)
    admitted_prior = models.IntegerField(default=0, db_default=0)
    # When a step without a key was last admitted (round robin; keyed steps': durable_cp_queue_served).
    unkeyed_served_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=clock_now)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name + (" (paused)" if self.paused else "")
