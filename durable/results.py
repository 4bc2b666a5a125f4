"""What the client returns: snapshots of runs and reports of what an operation did (frozen values)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from durable.engine.ports import RunRecord
from durable.engine.vocab import TERMINAL


@dataclass(frozen=True)
class RunInfo:
    """A snapshot of a run, as returned by :func:`durable.get_run`."""

    id: str
    workflow: str
    version: int
    status: str
    namespace: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    tags: list[str] = field(default_factory=list)
    search_attributes: dict[str, Any] = field(default_factory=dict)
    parent_id: str | None = None
    retry_of: str | None = None
    forked_from: str | None = None
    forked_at_seq: int | None = None
    continued_to: str | None = None
    wake_at: datetime | None = None
    recovery_attempts: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # A singleton workflow's run: the key it holds (or, ``queued``, waits for) a slot of.
    singleton_key: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_record(cls, rec: RunRecord) -> RunInfo:
        return cls(
            id=rec.id,
            workflow=rec.workflow,
            version=rec.version,
            status=rec.status,
            namespace=rec.namespace,
            input=rec.input,
            output=rec.output,
            error=rec.error,
            tags=list(rec.tags or []),
            search_attributes=dict(rec.search_attributes or {}),
            parent_id=rec.parent_id,
            retry_of=rec.retry_of,
            forked_from=rec.forked_from,
            forked_at_seq=rec.forked_at_seq,
            continued_to=rec.continued_to,
            wake_at=rec.wake_at,
            recovery_attempts=rec.recovery_attempts,
            created_at=rec.created_at,
            updated_at=rec.updated_at,
            started_at=rec.started_at,
            finished_at=rec.finished_at,
            singleton_key=rec.singleton_key,
        )


@dataclass(frozen=True)
class EventResult:
    """What :func:`publish_event` did."""

    event_id: str
    delivered: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    buffered: bool = False
    duplicate: bool = False
    # Debounce/batch subscribers whose accumulator took the event (a full batch's run is in ``started``).
    coalesced: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UpdateResult:
    """What :func:`update` did: ``accepted``, or not with the ``reason``."""

    accepted: bool
    reason: str | None = None

    def __bool__(self) -> bool:
        return self.accepted


@dataclass(frozen=True)
class RunPage:
    """One page of :func:`durable.list_runs`; pass ``next_cursor`` back to get the next one."""

    items: list[RunInfo]
    next_cursor: str | None
