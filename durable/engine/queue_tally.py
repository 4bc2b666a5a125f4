"""A limited queue's admissions per minute, kept as two per-minute counts on its row (pure).

Every grant already rewrites its queue's row (the row's new version is what
tells a concurrent admitter it missed those grants), so the count rides in
that write and costs no statement and no index of its own. The row keeps the
minute of its latest grants (``minute``, truncated), the admissions granted
in it (``count``) and those of the minute before (``prior``).

:meth:`QueueTally.per_minute` estimates the admissions of the last 60 seconds
as the count of the current minute plus the share of the previous minute
that still lies inside the window (the previous minute's admissions taken as
spread evenly over it). It is exact while every admission of the window falls
in the current minute, and never off by more than the previous minute's count.

Concurrency: the row is written only under its lock (the grant statement's
or the admission's), so two admitters never lose each other's counts. An
admitter whose clock is behind the row's minute adds to the row's minute
rather than moving it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

MINUTE = timedelta(minutes=1)
# The queue row's columns that hold the counts, in QueueTally's field order.
COLUMNS = ("admitted_minute", "admitted_count", "admitted_prior")


def minute_of(now: datetime) -> datetime:
    """``now`` truncated to its minute (the bucket a grant at ``now`` is counted in)."""
    return now.replace(second=0, microsecond=0)


@dataclass(frozen=True)
class QueueTally:
    """The per-minute admission counts of one queue's row; ``minute`` None before its first grant."""

    minute: datetime | None = None
    count: int = 0
    prior: int = 0

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> QueueTally:
        """The counts of a queue row (a mapping with the :data:`COLUMNS`)."""
        return cls(*(row[name] for name in COLUMNS))

    def add(self, now: datetime, granted: int) -> QueueTally:
        """The counts after ``granted`` admissions at ``now`` (the same arithmetic as PostgreSQL's grant)."""
        bucket = minute_of(now)
        if self.minute is not None and self.minute >= bucket:
            return QueueTally(self.minute, self.count + granted, self.prior)
        prior = self.count if self.minute == bucket - MINUTE else 0
        return QueueTally(bucket, granted, prior)

    def per_minute(self, now: datetime) -> int:
        """Admissions in the 60 seconds before ``now`` (estimated, see the module docstring)."""
        if self.minute is None:
            return 0
        bucket = minute_of(now)
        if self.minute > bucket:  # another process's clock is ahead: its counts are all recent
            return self.count + self.prior
        if self.minute == bucket:
            current, previous = self.count, self.prior
        elif self.minute == bucket - MINUTE:
            current, previous = 0, self.count
        else:
            return 0
        left = 1.0 - (now - bucket) / MINUTE
        return current + round(previous * left)
