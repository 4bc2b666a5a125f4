"""The retention sweep: delete finished runs past their age, batch by batch, each batch archived first.

:func:`prune` does the work (``manage.py durable_prune`` calls it with the
operator's options); :func:`sweep_retention` is what every tick runs: at most
one batch per tick, on its own cadence (``RETENTION_INTERVAL``, again at the
next tick while it keeps finding full batches).

A batch goes through four steps. The store selects runs a rule covers, oldest
first, and drops those an active run still needs
(:func:`durable.engine.retention.needed`). It claims the rest
(compare-and-set on the run lease columns, so racing sweepers take disjoint
batches). The archive hook gets them as JSON (the ``runs_evicted`` signal,
then ``RETENTION_ARCHIVE``); if it raises, the claims are given back, nothing
is deleted, and the next pass retries. Last, the store deletes the runs it
still claims, still finished and still not needed, with every row keyed to
them, in one transaction. Archiving is therefore at-least-once: a batch whose
hook failed half-way, or whose delete failed after the hook, is archived again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from durable.engine.core import Engine
from durable.engine.retention import ExpiredRun, ExpiryRule, expiry_rules
from durable.engine.vocab import TERMINAL
from durable.worker.due import StopCheck, never

logger = logging.getLogger("durable.retention")

#: How long a sweeper's claim on a batch lasts (a sweeper that dies mid-batch frees it by then).
CLAIM_SECONDS = 300.0
#: Pages of candidates one tick looks through at most (runs kept for an active run are skipped over).
SWEEP_PAGES = 10
#: The share of a process's time retention takes while it drains a backlog: after a batch that
#: took t seconds it waits t * (1 - DUTY) / DUTY before the next, so the live work beside it keeps
#: most of the database and the cores (``durable_prune --fast`` does not wait).
DUTY = 0.25

Archive = Callable[[list[dict[str, Any]]], None]


@dataclass
class PruneReport:
    """What a prune did (or, with ``dry_run``, would do).

    ``runs``: runs deleted (would be deleted) per status; ``rows``: rows
    deleted per table; ``kept``: expired runs kept because an active run
    needs them; ``batches``: transactions that deleted; ``archive_error``:
    the hook's failure that stopped the prune (nothing of that batch was
    deleted); ``more``: it stopped at its bound with runs possibly left;
    ``busy``: seconds spent claiming, archiving and deleting.
    """

    dry_run: bool = False
    runs: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    kept: int = 0
    batches: int = 0
    archive_error: str | None = None
    more: bool = False
    busy: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.runs.values())

    def add_runs(self, statuses: Iterable[str]) -> None:
        for status in statuses:
            self.runs[status] = self.runs.get(status, 0) + 1


class ArchiveHook:
    """The archive of an engine's settings: the ``runs_evicted`` signal, then ``RETENTION_ARCHIVE``.

    A receiver or the callable raising stops there: the batch is not deleted.
    :meth:`wanted` is False when neither is set up, and the batch is then not
    even read as JSON (the default, and the cheapest way to delete).
    """

    def __init__(self, path: str | None) -> None:
        self.path = path

    def wanted(self) -> bool:
        from durable.signals import runs_evicted

        return bool(self.path) or runs_evicted.has_listeners()

    def __call__(self, runs: list[dict[str, Any]]) -> None:
        from durable.signals import runs_evicted

        if runs_evicted.has_listeners():
            runs_evicted.send(sender=None, runs=runs)
        if self.path:
            from django.utils.module_loading import import_string

            import_string(self.path)(runs)


def rules_for(engine: Engine, statuses: list[str] | None = None, older_than: float | None = None) -> list[ExpiryRule]:
    """The expiry rules now: the settings' ages and the workflows' overrides, or ``older_than`` for every run."""
    now = engine.clock.now()
    if older_than is not None:
        ages: dict[str, float | None] = {str(s): older_than for s in (statuses or TERMINAL)}
        return expiry_rules(ages, {}, now, statuses)
    return expiry_rules(engine.settings.retention, engine.registry.retention_overrides(), now, statuses)


def prune(
    engine: Engine,
    *,
    statuses: list[str] | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
    max_batches: int | None = None,
    max_pages: int | None = None,
    archive: Archive | None = None,
    should_stop: StopCheck = never,
    pace: Callable[[float], None] | None = None,
    cursors: dict[tuple[Any, ...], tuple[datetime, str]] | None = None,
) -> PruneReport:
    """Delete (``dry_run``: count) the expired runs, ``RETENTION_BATCH`` per transaction.

    ``statuses`` narrows the statuses; ``older_than`` (seconds) replaces every
    age, overrides included. ``archive`` replaces the settings' hook (called
    with every batch). ``pace(seconds)`` is called after each batch with how
    long to rest to keep to :data:`DUTY` (``time.sleep`` to pace, None: flat
    out). Stops after ``max_batches`` deletions or ``max_pages`` pages read
    (``more`` then says so), at the first archive failure, or when ``should_stop()``.
    ``cursors`` (the sweep's, kept between passes) says where each rule's walk
    stopped, so the next pass goes on from there rather than re-reading the
    runs it kept; a rule walked to its end starts again from its oldest run.
    Safe beside any number of other prunes and sweeps: every deletion is
    compare-and-set on a claim.
    """
    walk = _Walk(
        engine,
        PruneReport(dry_run=dry_run),
        archive if archive is not None else ArchiveHook(engine.settings.retention_archive),
        pace,
        max_batches,
        max_pages,
        should_stop,
    )
    walks = cursors if cursors is not None else {}
    for rule in rules_for(engine, statuses, older_than):
        if not walk.rule(rule, walks):
            break
    return walk.report


@dataclass
class _Walk:
    """One prune: its report, its hook and pacing, and the bounds it stops at."""

    engine: Engine
    report: PruneReport
    hook: Archive
    pace: Callable[[float], None] | None
    max_batches: int | None
    max_pages: int | None
    should_stop: StopCheck
    pages: int = 0

    def stop(self) -> bool:
        if self.should_stop() or (self.max_batches is not None and self.report.batches >= self.max_batches):
            return True
        return self.max_pages is not None and self.pages >= self.max_pages

    def rule(self, rule: ExpiryRule, walks: dict[tuple[Any, ...], tuple[datetime, str]]) -> bool:
        """Walk ``rule``'s runs page by page from its cursor; False when the prune must stop here."""
        key, batch = (rule.status, rule.workflows, rule.exclude), self.engine.settings.retention_batch
        while True:
            if self.stop():
                self.report.more = True
                return False
            before = walks.get(key)
            began = time.perf_counter()
            page = self.engine.store.expired_runs(rule, self.engine.clock.now(), before, batch)
            self.pages += 1
            if not page:
                walks.pop(key, None)
                return True
            walks[key] = (page[-1].finished_at, page[-1].id)
            if not self.page(page):
                # The archive failed: the next pass offers that batch again, from where it began.
                walks.pop(key, None)
                if before is not None:
                    walks[key] = before
                return False
            spent = time.perf_counter() - began
            self.report.busy += spent
            if len(page) < batch:
                walks.pop(key, None)
                return True
            if self.pace is not None and not self.report.dry_run:
                self.pace(rest_after(spent))

    def page(self, page: list[ExpiredRun]) -> bool:
        """Drop what an active run needs, then count (dry run) or evict the rest; False if the archive failed."""
        keep = self.engine.store.needed_runs(page)
        free = [run for run in page if run.id not in keep]
        self.report.kept += len(keep)
        if self.report.dry_run:
            self.report.add_runs(run.status for run in free)
            return True
        return not free or _evict(self.engine, free, self.hook, self.report)


def rest_after(busy: float) -> float:
    """How long to rest after ``busy`` seconds of retention work, to keep to :data:`DUTY`."""
    return busy * (1 - DUTY) / DUTY


def _evict(engine: Engine, free: list[ExpiredRun], hook: Archive, report: PruneReport) -> bool:
    """Claim, archive and delete one batch; False when the archive failed (nothing deleted)."""
    store, owner = engine.store, f"{engine.owner}:retention"
    now = engine.clock.now()
    ids = store.claim_expired([run.id for run in free], owner, now, now + timedelta(seconds=CLAIM_SECONDS))
    if not ids:
        return True
    try:
        if not isinstance(hook, ArchiveHook) or hook.wanted():
            hook(store.export_runs(ids))
    except Exception as exc:
        store.release_expired(ids, owner)
        report.archive_error = f"{type(exc).__name__}: {exc}"
        logger.error(
            "retention: the archive hook failed; %d run(s) kept, retried at the next pass",
            len(ids),
            exc_info=True,
            extra={"run_ids": ids[:20]},
        )
        return False
    evicted = store.evict_runs(ids, owner)
    for status, count in evicted.runs.items():
        report.runs[status] = report.runs.get(status, 0) + count
    for table, count in evicted.rows.items():
        report.rows[table] = report.rows.get(table, 0) + count
    report.kept += len(ids) - evicted.count
    report.batches += 1
    return True


def sweep_retention(engine: Engine, *, should_stop: StopCheck = never) -> int:
    """The tick's retention pass: at most one batch, when due; how many runs it deleted.

    Due every ``RETENTION_INTERVAL``; while the last pass stopped with more to
    do, again once it has rested three times as long as its batch took
    (:data:`DUTY`), so a backlog drains one batch per tick between the other
    sweeps and never takes more than a quarter of the process; after an
    archive failure, one interval later.
    """
    now = engine.clock.now()
    due, interval = engine.stats.retention_due, engine.settings.retention_interval
    # A clock that jumped back (a test's fake clock) makes the pass due at once.
    if due is not None and now < due <= now + timedelta(seconds=interval):
        return 0
    cursors = engine.stats.retention_cursors
    report = prune(engine, max_batches=1, max_pages=SWEEP_PAGES, should_stop=should_stop, cursors=cursors)
    again = report.more and report.archive_error is None
    rest = rest_after(report.busy) if again else interval
    engine.stats.retention_due = now + timedelta(seconds=rest)
    return report.count
