"""Schedules: workflows that start on their own, every N or on a cron expression.

* :mod:`durable.schedules.spec`: :class:`Schedule`, the validated spec.
* :mod:`durable.schedules.windows`: where windows fall (pure, clock-driven).
* :mod:`durable.schedules.plan`: what each write of a schedule row changes (pure).
* :mod:`durable.schedules.sync`: code schedules onto their rows, field by field.
* :mod:`durable.schedules.sweep`: the sweep that starts due windows (run by
  every tick: Celery beat's ``durable-sweep``, ``durable_worker``, ``durable.testing.drive``).
* :mod:`durable.schedules.service`: the runtime API (``durable.create_schedule`` ...).
"""

from __future__ import annotations

from durable.schedules.spec import Overlap, Schedule

__all__ = ["Overlap", "Schedule"]
