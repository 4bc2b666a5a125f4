"""The structured fields of durable's log records, and the summary line of a sweep pass.

Every record that concerns a run carries, as ``extra`` attributes of the
:class:`logging.LogRecord` (so a JSON formatter or structlog picks them up),
those of ``run_id``, ``workflow``, ``seq`` (a checkpoint position) and
``step`` (a step name) that apply; a sweep's summary carries ``counts``.
Logger names (all below ``durable``): ``durable.turn`` (turns),
``durable.steps`` (dispatched steps), ``durable.sweeps`` (sweeps),
``durable.lifecycle`` (lifecycle events), ``durable.leases`` (the lease
keeper), ``durable.store`` (stores), ``durable.events`` (events),
``durable.fleet`` (worker advertisement), ``durable.retention`` (retention's
archive failures), ``durable.worker`` (the
``durable_worker`` loop), ``durable.celery`` and ``durable.inline``
(transports) and ``durable`` itself (listeners).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

FIELDS: tuple[str, ...] = ("run_id", "workflow", "seq", "step")


def fields(
    run_id: str | None = None, workflow: str | None = None, seq: int | None = None, step: str | None = None
) -> dict[str, Any]:
    """The ``extra`` of a record about a run: the fields given, the others left out."""
    given = {"run_id": run_id, "workflow": workflow, "seq": seq, "step": step}
    return {name: value for name, value in given.items() if value is not None}


def of_run(run: Any) -> dict[str, Any]:
    """The ``extra`` of a record about ``run`` (a :class:`~durable.engine.ports.RunRecord`)."""
    return fields(run_id=run.id, workflow=run.workflow)


def sweep_summary(logger: logging.Logger, kind: str, counts: Mapping[str, int]) -> None:
    """Log one sweep pass: INFO with its non-zero counts when it did something, else DEBUG.

    An idle beat (one pass every few seconds, all day) therefore writes
    nothing at the default INFO level.
    """
    done = {name: count for name, count in counts.items() if count}
    if done:
        text = ", ".join(f"{name}={count}" for name, count in sorted(done.items()))
        logger.info("%s: %s", kind, text, extra={"counts": dict(counts), "sweep": kind})
    elif logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s: nothing to do", kind, extra={"counts": dict(counts), "sweep": kind})
