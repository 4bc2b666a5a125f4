"""Which runs look stuck: the one definition of a *stale* run (``durable_runs --stale``).

A run is stale when the engine should already have moved it on and has not:

* ``running`` with its lease expired (``locked_until`` in the past): the worker
  holding the turn is gone or hung, and a repair sweep has not yet taken it;
* ``suspended`` with its wake time in the past (``wake_at`` earlier than now): a
  timer, a retry or the reconcile fallback (``RECONCILE_AFTER``, for a run
  waiting on a signal or an event) is due and no sweep has woken it.

Both conditions are index-backed (``status, locked_until`` and ``status, wake_at``).
A healthy deployment shows a stale run only briefly (until the next sweep);
one that stays stale means no worker or beat is sweeping, or a sweep keeps
failing on it. The definition is deliberately narrow: a run that waits long for
a signal is not stale while the sweeps keep re-arming its reconcile fallback.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from durable.engine.vocab import RunStatus


def stale_q(now: datetime) -> Q:
    """The condition on :class:`durable.models.Run` rows that are stale at ``now`` (an aware time)."""
    return Q(status=RunStatus.RUNNING, locked_until__lt=now) | Q(status=RunStatus.SUSPENDED, wake_at__lt=now)


def is_stale(status: str, locked_until: datetime | None, wake_at: datetime | None, now: datetime) -> bool:
    """The same test as :func:`stale_q`, on one run's fields."""
    if status == RunStatus.RUNNING:
        return locked_until is not None and locked_until < now
    if status == RunStatus.SUSPENDED:
        return wake_at is not None and wake_at < now
    return False
