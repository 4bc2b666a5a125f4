"""The runtime API on limited step queues: ``durable.list_queues``, ``configure_queue``, ``pause_queue``...

A queue is limited when ``DURABLE["QUEUES"]`` names it; its row in
``durable_queue`` stores overrides of the settings' limits (an override
wins; None there turns a limit off) and its paused flag. Every function
validates first and raises :class:`~durable.InvalidInput` on a bad limit or
:class:`~durable.QueueNotFound` for a queue the settings do not name;
nothing is written then. A change takes effect at the next admission in
every process (admission reads the row under its lock), and the queue is
asked to admit at once after it, so a raised limit or a resume does not
wait for a sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durable import runtime
from durable.engine import admission
from durable.engine.core import Engine
from durable.engine.plan_queues import LIMIT_NAMES, QueueLimits, apply_overrides, effective_limits, wait_reason
from durable.engine.ports import QueueRecord
from durable.exceptions import InvalidInput, QueueNotFound

_UNSET: Any = object()


@dataclass(frozen=True)
class QueueInfo:
    """A limited queue as it stands: its limits in force and where they come from, and what it holds now.

    ``limits``: in force (``settings`` with ``overrides`` winning);
    ``running``: steps holding a slot; ``waiting``: steps waiting for one
    (``oldest_waiting``: the earliest dispatch among them);
    ``admitted_last_minute``: admissions granted in the last 60 seconds, as
    the queue row's per-minute counts estimate them
    (:class:`~durable.engine.queue_tally.QueueTally`).
    """

    name: str
    limits: dict[str, Any]
    settings: dict[str, Any]
    overrides: dict[str, Any]
    paused: bool
    running: int
    waiting: int
    oldest_waiting: datetime | None
    admitted_last_minute: int
    updated_at: datetime | None

    def as_json(self) -> dict[str, Any]:
        """The JSON form of the REST API."""
        return {
            "name": self.name,
            **self.limits,
            "settings": self.settings,
            "overrides": self.overrides,
            "paused": self.paused,
            "running": self.running,
            "waiting": self.waiting,
            "oldest_waiting": self.oldest_waiting.isoformat() if self.oldest_waiting else None,
            "admitted_last_minute": self.admitted_last_minute,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


def _engine() -> Engine:
    return runtime.get_engine()


def _defaults(engine: Engine, name: Any) -> QueueLimits:
    queues: dict[str, QueueLimits] = engine.settings.queues
    if not isinstance(name, str) or name not in queues:
        known = ", ".join(sorted(queues)) or "none"
        raise QueueNotFound(f"no limited queue {name!r} in DURABLE['QUEUES'] (limited queues: {known})")
    return queues[name]


def _info(engine: Engine, name: str, row: QueueRecord | None) -> QueueInfo:
    defaults = engine.settings.queues[name]
    overrides = dict(row.overrides) if row is not None else {}
    stats = engine.store.queue_stats(name, engine.clock.now())
    return QueueInfo(
        name=name,
        limits=effective_limits(defaults, overrides).as_json(),
        settings=defaults.as_json(),
        overrides=overrides,
        paused=row.paused if row is not None else False,
        running=stats.running,
        waiting=stats.waiting,
        oldest_waiting=stats.oldest_waiting,
        admitted_last_minute=stats.admitted_last_minute,
        updated_at=row.updated_at if row is not None else None,
    )


def list_queues() -> list[QueueInfo]:
    """Every limited queue (``DURABLE["QUEUES"]``), by name, with its limits and figures."""
    engine = _engine()
    rows = engine.store.queue_rows()
    return [_info(engine, name, rows.get(name)) for name in sorted(engine.settings.queues)]


def get_queue(name: str) -> QueueInfo:
    """One limited queue; :class:`~durable.QueueNotFound` if the settings do not name it."""
    engine = _engine()
    _defaults(engine, name)
    return _info(engine, name, engine.store.queue_rows().get(name))


def configure_queue(
    name: str,
    *,
    concurrency: Any = _UNSET,
    rate: Any = _UNSET,
    key_concurrency: Any = _UNSET,
    reset: bool = False,
) -> QueueInfo:
    """Override limits of ``name`` at runtime; the limits not named keep their current override.

    A value of None turns that limit off (whatever the settings say);
    ``reset=True`` first drops every override (back to the settings).
    """
    engine = _engine()
    defaults = _defaults(engine, name)
    if not isinstance(reset, bool):
        raise InvalidInput(f"reset must be a boolean, got {reset!r}")
    given = {"concurrency": concurrency, "rate": rate, "key_concurrency": key_concurrency}
    changes = {key: value for key, value in given.items() if value is not _UNSET}
    apply_overrides(defaults, changes, f"queue {name!r}")  # validates; raises InvalidInput
    row = engine.store.queue_rows().get(name)
    overrides = {} if reset or row is None else dict(row.overrides)
    overrides.update(changes)
    overrides = {key: overrides[key] for key in LIMIT_NAMES if key in overrides}
    engine.store.configure_queue(name, engine.clock.now(), overrides=overrides)
    admission.admit_next(engine, [name])
    return get_queue(name)


def pause_queue(name: str) -> QueueInfo:
    """Stop admitting steps of ``name``; its waiting steps stay, admitted ones run to their end."""
    return _set_paused(name, True)


def resume_queue(name: str) -> QueueInfo:
    """Admit steps of ``name`` again (at once, up to its limits)."""
    return _set_paused(name, False)


def _set_paused(name: str, paused: bool) -> QueueInfo:
    engine = _engine()
    _defaults(engine, name)
    engine.store.configure_queue(name, engine.clock.now(), paused=paused)
    if not paused:
        admission.admit_next(engine, [name])
    return get_queue(name)


def step_wait_reason(queue: str | None, key: str | None) -> str | None:
    """Why a waiting step of ``queue`` (with ``key``) is not admitted yet, in words; None if not limited."""
    engine = _engine()
    if queue is None or queue not in engine.settings.queues:
        return None
    row = engine.store.queue_rows().get(queue)
    limits = effective_limits(engine.settings.queues[queue], row.overrides if row is not None else {})
    stats = engine.store.queue_stats(queue, engine.clock.now(), key)
    return wait_reason(queue, row is not None and row.paused, limits, stats.running, stats.key_running)
