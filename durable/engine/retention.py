"""Retention policy: how long finished runs are kept, and which finished runs are due for deletion.

Pure code (no Django). A policy maps each terminal status to an age in
seconds, or ``None`` to keep runs of that status forever. The process-wide
policy (``DURABLE["RETENTION"]``) is merged onto :data:`DEFAULT_AGES`; a
workflow's own ``retention={...}`` is merged onto that. :func:`expiry_rules`
turns the policies into the store's queries: per status, one rule for every
workflow without an override and one per distinct override age, so a store
can walk each rule's runs oldest first through an index.

The store decides, per candidate, whether an active run still needs it
(:class:`ExpiredRun` carries what that check reads); nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from durable.engine.durations import to_seconds
from durable.engine.vocab import ACTIVE, TERMINAL, RunStatus
from durable.exceptions import InvalidInput

#: Ages in seconds per terminal status (None: kept forever). Completed and cancelled runs
#: are kept 30 days, failed ones 90 (time to notice and requeue), dead ones until an
#: operator acts: a dead run is a dead letter, never deleted on its own.
DEFAULT_AGES: dict[str, float | None] = {
    RunStatus.COMPLETED: 30 * 86400.0,
    RunStatus.CANCELLED: 30 * 86400.0,
    RunStatus.FAILED: 90 * 86400.0,
    RunStatus.DEAD: None,
}
#: A continue-as-new chain longer than this (ahead of a run) keeps the run rather than
#: following the chain further in one check.
MAX_CHAIN_HOPS = 10_000

Ages = dict[str, float | None]


def parse_ages(raw: Any, where: str) -> Ages:
    """Validate a retention mapping ``{status: age or None}``; the ages in seconds.

    Keys are terminal statuses (``completed``, ``cancelled``, ``failed``,
    ``dead``); values are durations (``"30d"``, seconds, a timedelta) greater
    than zero, or ``None`` to keep that status forever. Raises
    :class:`~durable.InvalidInput` naming ``where`` and the bad key or value.
    """
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where} must be a dict of status to age, got {type(raw).__name__}")
    statuses = [str(status) for status in TERMINAL]
    ages: Ages = {}
    for key, value in raw.items():
        if key not in statuses:
            raise InvalidInput(f"{where} has unknown status {key!r}; use {statuses}")
        if value is None:
            ages[key] = None
            continue
        try:
            seconds = to_seconds(value)
        except InvalidInput as exc:
            raise InvalidInput(f"{where}[{key!r}]: {exc}") from None
        if seconds <= 0:
            raise InvalidInput(f"{where}[{key!r}] must be a positive age or None (keep forever), got {value!r}")
        ages[key] = seconds
    return ages


def merged(base: Mapping[str, float | None], override: Mapping[str, float | None] | None) -> Ages:
    """``base`` with the statuses ``override`` names replaced (None in ``override`` keeps forever)."""
    return {**base, **(override or {})}


@dataclass(frozen=True)
class ExpiryRule:
    """Runs of ``status`` finished before ``cutoff``: of ``workflows`` only, or of every workflow not in ``exclude``."""

    status: str
    cutoff: datetime
    workflows: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()

    def covers(self, workflow: str, status: str, finished_at: datetime | None) -> bool:
        """Does a run with these columns fall under this rule (as the stores' query selects)?"""
        if status != self.status or finished_at is None or finished_at >= self.cutoff:
            return False
        if self.workflows is not None:
            return workflow in self.workflows
        return workflow not in self.exclude


def expiry_rules(
    ages: Mapping[str, float | None],
    overrides: Mapping[str, Mapping[str, float | None]],
    now: datetime,
    statuses: Iterable[str] | None = None,
) -> list[ExpiryRule]:
    """The rules selecting what ``ages`` (and each workflow's ``overrides``) let go of at ``now``.

    ``statuses`` narrows the statuses considered (None: every terminal one).
    A workflow with an override never falls under the default rule of a
    status, even where its own age for it is the same.
    """
    chosen = [str(s) for s in (statuses if statuses is not None else TERMINAL)]
    special = tuple(sorted(overrides))
    rules: list[ExpiryRule] = []
    for status in chosen:
        age = ages.get(status)
        if age is not None:
            rules.append(ExpiryRule(status, now - timedelta(seconds=age), exclude=special))
        by_age: dict[float, list[str]] = {}
        for workflow in special:
            own = merged(ages, overrides[workflow]).get(status)
            if own is not None:
                by_age.setdefault(own, []).append(workflow)
        for own, workflows in sorted(by_age.items()):
            rules.append(ExpiryRule(status, now - timedelta(seconds=own), workflows=tuple(workflows)))
    return rules


@dataclass(frozen=True)
class ExpiredRun:
    """A finished run a rule selected: what the protection check and the report need of it."""

    id: str
    workflow: str
    status: str
    finished_at: datetime
    parent_id: str | None
    retry_of: str | None
    continued_to: str | None


@dataclass(frozen=True)
class Evicted:
    """What :meth:`Store.evict_runs` deleted: runs per status, and every row it removed per table."""

    runs: dict[str, int]
    rows: dict[str, int]

    @property
    def count(self) -> int:
        return sum(self.runs.values())


@dataclass(frozen=True)
class Line:
    """A run's place among other runs: its status and the ids it links to."""

    status: str
    parent_id: str | None
    continued_to: str | None


class Lineage(Protocol):
    """The three reads :func:`needed` makes of a store (each over a set of run ids, one query each)."""

    def retention_lineage(self, ids: set[str]) -> dict[str, Line]:
        """The :class:`Line` of each of ``ids`` that exists."""
        ...

    def retention_waited(self, ids: set[str]) -> set[str]:
        """Those of ``ids`` some run waits on (a waiter row ``__run__:<id>``: a child, ``wait_for_run``)."""
        ...

    def retention_retried(self, ids: set[str]) -> set[str]:
        """Those of ``ids`` that an active run retries (``retry_of``)."""
        ...


def _direct(ids: set[str], look: Lineage) -> set[str]:
    """Those of ``ids`` an active run needs as they are: active themselves, with an active parent,
    waited on, or the origin of an active retry."""
    if not ids:
        return set()
    lines = look.retention_lineage(ids)
    parents = {line.parent_id for line in lines.values() if line.parent_id}
    active_parents = {pid for pid, line in look.retention_lineage(parents).items() if line.status in ACTIVE}
    held = {rid for rid, line in lines.items() if line.status in ACTIVE or line.parent_id in active_parents}
    return held | look.retention_waited(ids) | look.retention_retried(ids)


def needed(runs: Iterable[ExpiredRun], look: Lineage) -> set[str]:
    """The ids among finished ``runs`` that an active run still needs, so retention keeps them.

    A run is kept when: its parent is active (a parent waiting on its child);
    some run waits on it (a waiter ``__run__:<id>``: ``ctx.child``,
    ``ctx.wait_for_run``); an active run retries it (the origin of a retry,
    whose success wakes the origin's waiters); a later run of its
    continue-as-new chain is active or kept for one of these reasons (a
    waiter resolves a chain from its first run); or it is the completed retry
    of an origin that is waited on or has an active parent (it stands in for
    the origin). A chain longer than :data:`MAX_CHAIN_HOPS` ahead keeps the run.
    """
    runs = list(runs)
    keep = _direct({r.id for r in runs}, look)
    origins = {r.retry_of for r in runs if r.retry_of}
    held_origins = _direct(origins, look)
    keep |= {r.id for r in runs if r.retry_of in held_origins}
    # Continue-as-new: follow every chain forward together, one hop (a few queries) at a time.
    ahead = {r.id: r.continued_to for r in runs if r.continued_to and r.id not in keep}
    for _ in range(MAX_CHAIN_HOPS):
        if not ahead:
            return keep
        held = _direct(set(ahead.values()), look)
        lines = look.retention_lineage(set(ahead.values()))
        following: dict[str, str] = {}
        for rid, successor in ahead.items():
            if successor in held:
                keep.add(rid)
            elif successor in lines and lines[successor].continued_to:
                following[rid] = str(lines[successor].continued_to)
        ahead = following
    return keep | set(ahead)
