"""Lifecycle events: workflows that start when other workflows complete or fail.

A workflow subscribes with ``on_event=["run.completed:checkout",
"run.failed:checkout"]``. Delivery is as durable as the run itself:

1. The terminal status write of a run records, in the same UPDATE, which
   subscribers its event is owed to (``Run.lifecycle["owed"]``,
   ``Run.lifecycle_owed``), from this process's registry and the
   subscriptions live workers advertise. A run is never terminal without a
   record of whom it owes.
2. Publishing (right after the terminal commit, then by a sweep for anything
   still owed after a short grace) takes the run's lifecycle lease, re-reads
   it, starts each owed subscriber under a deterministic run id
   (``<source>:<ending>:<subscriber>``) and writes back what happened in the
   same transaction. Any number of publishers therefore start a subscriber
   once. A subscriber whose ``where`` raises, whose input is refused, or whose
   start fails is recorded under ``failed`` with the reason and is not retried
   until a republish.
3. A heal sweep looks at runs settled recently for subscribers registered
   after they settled, and republish (API, command, admin) redelivers on demand.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from durable.engine import logs
from durable.engine.new_runs import clean_input, run_fields
from durable.engine.ports import RunRecord
from durable.engine.registry import WorkflowDef
from durable.engine.serialization import or_reason
from durable.engine.vocab import RunStatus
from durable.exceptions import DurableError, WorkflowNotFound

if TYPE_CHECKING:
    from durable.engine.core import Engine

logger = logging.getLogger("durable.lifecycle")

ENDINGS: tuple[str, ...] = (RunStatus.COMPLETED, RunStatus.FAILED)
PUBLISH_LEASE = timedelta(seconds=30)
# The live publish runs right after the terminal commit; the sweep waits this long first.
SWEEP_GRACE = timedelta(seconds=2)
HEAL_WINDOW = timedelta(minutes=10)


_ENDING_OF: dict[str, str] = {
    RunStatus.COMPLETED: RunStatus.COMPLETED,
    RunStatus.FAILED: RunStatus.FAILED,
    RunStatus.DEAD: RunStatus.FAILED,
}


def ending_of(status: str) -> str | None:
    """The lifecycle ending a terminal status publishes (dead runs publish ``failed``)."""
    return _ENDING_OF.get(status)


def event_name(ending: str, workflow: str) -> str:
    return f"run.{ending}:{workflow}"


def subscribers_for(engine: Engine, workflow: str, ending: str) -> list[str]:
    """Every workflow owed ``run.<ending>:<workflow>``: registered here or advertised by live workers."""
    name = event_name(ending, workflow)
    local = {wf.name for wf in engine.registry.subscribers(name)}
    remote = set(engine.fleet.subscribers(name))
    return sorted(local | remote)


def owed_record(engine: Engine, workflow: str, status: str) -> dict[str, Any] | None:
    """The ``lifecycle`` column to write with a terminal status (None: nothing owed)."""
    ending = ending_of(status)
    if ending is None:
        return None
    subs = subscribers_for(engine, workflow, ending)
    return {"owed": subs} if subs else None


def build_event(run: RunRecord, ending: str) -> dict[str, Any]:
    """The event a subscriber's ``where`` and ``input`` see (and, by default, its input)."""
    return {
        "event": event_name(ending, run.workflow),
        "ending": ending,
        "workflow": run.workflow,
        "version": run.version,
        "run_id": run.id,
        "namespace": run.namespace,
        "status": run.status,
        # A run failed by codec_error may hold a payload that did not decode: its event stays JSON.
        "input": or_reason(run.input),
        "output": or_reason(run.output),
        "error": run.error,
        "tags": list(run.tags or []),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


def publish(
    engine: Engine,
    run_id: str,
    *,
    only: Iterable[str] | None = None,
    republish: bool = False,
) -> dict[str, str]:
    """Deliver a settled run's lifecycle event to what it owes (or, on republish, to ``only``).

    Returns ``{subscriber: outcome}`` with outcomes ``started``, ``coalesced``,
    ``skipped`` (its ``where`` said no), ``failed: <reason>``,
    ``not_subscribed`` (republish of a subscriber that does not take this
    ending: reported, not marked), ``elsewhere`` (not registered in this
    process; stays owed for a worker that has it), or ``{"*": "busy"}`` when
    another publisher holds the run.
    """
    store = engine.store
    now = engine.clock.now()
    # One holder per publish call, even between threads of one process.
    holder = f"{engine.owner}/{uuid.uuid4().hex[:8]}"
    run = store.take_lifecycle_lease(run_id, holder, now, now + PUBLISH_LEASE)
    if run is None:
        return {"*": "busy"}
    try:
        return _publish_held(engine, run, holder, only, republish)
    finally:
        store.release_lifecycle_lease(run_id, holder)


@dataclass
class _Delivery:
    """One publish of a run's lifecycle event: the record it started from and what it decided."""

    run: RunRecord
    ending: str
    republish: bool
    owed: list[str]
    started: dict[str, str]
    coalesced: dict[str, bool]
    failed: dict[str, str]
    skipped: list[str]
    remaining: list[str] = field(default_factory=list)
    report: dict[str, str] = field(default_factory=dict)
    new_runs: list[dict[str, Any]] = field(default_factory=list)
    batched: list[tuple[WorkflowDef, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, run: RunRecord, ending: str, republish: bool) -> _Delivery:
        record = run.lifecycle or {}
        return cls(
            run,
            ending,
            republish,
            owed=list(record.get("owed", [])),
            started=dict(record.get("started", {})),
            coalesced=dict(record.get("coalesced", {})),
            failed=dict(record.get("failed", {})),
            skipped=list(record.get("skipped", [])),
        )

    def fail(self, sub: str, reason: str) -> None:
        self.failed[sub] = reason
        self.report[sub] = "failed: " + reason

    def record(self) -> dict[str, Any]:
        """The ``lifecycle`` column to write back."""
        return {
            **(self.run.lifecycle or {}),
            "owed": sorted(set(self.remaining)),
            "started": self.started,
            "coalesced": self.coalesced,
            "failed": self.failed,
            "skipped": self.skipped,
        }


def _publish_held(
    engine: Engine, run: RunRecord, holder: str, only: Iterable[str] | None, republish: bool
) -> dict[str, str]:
    ending = ending_of(run.status)
    if ending is None:
        return {}
    delivery = _Delivery.of(run, ending, republish)
    targets = list(only) if only is not None else list(delivery.owed)
    delivery.remaining = [sub for sub in delivery.owed if sub not in targets]
    event = build_event(run, ending)
    for sub in targets:
        _deliver(engine, delivery, sub, event)
    created = _write_back(engine, delivery, holder)
    for new_id in created:
        engine.transport.dispatch_turn(new_id)
    for sub, outcome in delivery.report.items():
        engine.emit_lifecycle(run, sub, outcome)
    return delivery.report


# A subscriber that does not take the event (its ``where`` said no, or failed, or its input was refused).
_REFUSED = object()


def _deliver(engine: Engine, delivery: _Delivery, sub: str, event: dict[str, Any]) -> None:
    """Decide what publishing to ``sub`` does, and queue its start (or its batch) if any."""
    report = delivery.report
    try:
        wf = engine.registry.get_workflow(sub)
    except WorkflowNotFound:
        report[sub] = "elsewhere"
        if sub in delivery.owed or delivery.republish:
            delivery.remaining.append(sub)
        return
    if event["event"] not in wf.on_event:
        report[sub] = "not_subscribed"
    elif sub in delivery.coalesced and sub not in delivery.failed:
        # Its accumulator may have fired already: routing it again would start it twice.
        report[sub] = "coalesced"
    elif sub in delivery.started and not delivery.republish:
        report[sub] = "started"
    else:
        value = _subscriber_input(engine, delivery, wf, event)
        if value is not _REFUSED:
            _start(engine, delivery, wf, value)


def _subscriber_input(engine: Engine, delivery: _Delivery, wf: WorkflowDef, event: dict[str, Any]) -> Any:
    sub = wf.name
    try:
        wanted = True if wf.where is None else bool(wf.where(event))
    except Exception as exc:  # noqa: BLE001 - a failing predicate is recorded, not retried
        delivery.fail(sub, f"where raised {type(exc).__name__}: {exc}")
        return _REFUSED
    if not wanted:
        if sub not in delivery.skipped:
            delivery.skipped.append(sub)
        delivery.report[sub] = "skipped"
        return _REFUSED
    try:
        value = wf.event_input(event) if wf.event_input is not None else event
        return clean_input(wf, value, engine.settings.max_payload_bytes)
    except Exception as exc:  # noqa: BLE001 - a refused input is recorded, not retried
        delivery.fail(sub, f"input refused: {exc}")
        return _REFUSED


def _start(engine: Engine, delivery: _Delivery, wf: WorkflowDef, value: Any) -> None:
    sub, run = wf.name, delivery.run
    delivery.failed.pop(sub, None)
    if wf.debounce is not None or wf.batch is not None:
        delivery.batched.append((wf, value))
        delivery.coalesced[sub] = True
        delivery.report[sub] = "coalesced"
        return
    sub_id = f"{run.id[:200]}:{delivery.ending}:{sub}"
    delivery.new_runs.append(
        run_fields(
            wf,
            sub_id,
            value,
            now=engine.clock.now(),
            namespace=run.namespace,
            tags=[f"after:{run.workflow}"],
            search_attributes={"source_run": run.id},
        )
    )
    delivery.started[sub] = sub_id
    delivery.report[sub] = "started"


def _write_back(engine: Engine, delivery: _Delivery, holder: str) -> list[str]:
    """Write the starts and the record in one transaction; on failure, record the starts as failed."""
    run = delivery.run
    batched = [(wf.name, value, run.id, batch_policy(wf)) for wf, value in delivery.batched]
    make = batch_run_maker(engine)
    try:
        return engine.store.finish_lifecycle(
            run.id, holder, engine.clock.now(), delivery.record(), delivery.new_runs, batched, make
        )
    except DurableError:
        raise
    except Exception as exc:
        logger.warning("lifecycle publish of %s failed: %s", run.id, exc, exc_info=True, extra=logs.of_run(run))
        for sub in list(delivery.report):
            if delivery.report[sub] in ("started", "coalesced"):
                delivery.started.pop(sub, None)
                delivery.coalesced.pop(sub, None)
                delivery.fail(sub, f"start failed: {exc}")
        return engine.store.finish_lifecycle(run.id, holder, engine.clock.now(), delivery.record(), [], [], make)


def batch_policy(wf: WorkflowDef) -> dict[str, Any]:
    """The accumulator policy of a debounce or batch subscriber (see ``Store.accumulate``)."""
    if wf.debounce is not None:
        return {"debounce": wf.debounce}
    assert wf.batch is not None
    return {"size": wf.batch[0], "window": wf.batch[1]}


def batch_run_maker(engine: Engine) -> Callable[[str, int, list[Any]], dict[str, Any] | None]:
    """``make_batch_run(subscriber, batch_id, events)``: the run a fired accumulator starts.

    It starts the subscriber with the last event (debounce) or the list (batch);
    None when the subscriber is not registered in this process (another one fires it).
    """

    def make_batch_run(subscriber: str, batch_id: int, events: list[Any]) -> dict[str, Any] | None:
        try:
            wf = engine.registry.get_workflow(subscriber)
        except WorkflowNotFound:
            return None
        kind = "debounce" if wf.debounce is not None else "batch"
        value = events[-1] if kind == "debounce" else events
        return run_fields(
            wf,
            f"{subscriber}:{kind}:{batch_id}",
            value,
            now=engine.clock.now(),
            namespace="default",
            tags=[f"lifecycle-{kind}"],
        )

    return make_batch_run
