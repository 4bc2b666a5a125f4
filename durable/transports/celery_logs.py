"""Celery's own records about the sweep task, demoted to DEBUG.

Celery logs every task it receives and runs, and beat every task it sends, at
INFO. The beat sends ``durable.sweep`` every ``SWEEP_INTERVAL`` (2 s): left
alone, that is three INFO lines every two seconds, saying nothing. The sweep
logs its own summary (``durable.sweeps``, at INFO only when it did something),
and Celery's "succeeded" line of a sweep that did something stays at INFO
(its counts are in it). A failing sweep is still logged by Celery at ERROR.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from durable.transports.celery import SWEEP_TASK

# A count above zero in the repr of the sweep's returned counts ({'timeouts': 0, 'recovered': 1, ...}).
_NONZERO = re.compile(r":\s*[1-9]")
# The loggers that write a line per task: worker receipt, task success, beat send.
CELERY_LOGGERS = ("celery.worker.strategy", "celery.app.trace", "celery.beat")


class QuietSweep(logging.Filter):
    """Lower Celery's INFO records about the sweep task to DEBUG (kept only if DEBUG is enabled)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not _about_sweep(record) or _did_something(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _about_sweep(record: logging.LogRecord) -> bool:
    data: Any = getattr(record, "data", None)
    if isinstance(data, dict) and data.get("name") == SWEEP_TASK:
        return True  # worker: received / succeeded
    args = record.args if isinstance(record.args, tuple) else ()
    return SWEEP_TASK in args  # beat: "Sending due task %s (%s)"


def _did_something(record: logging.LogRecord) -> bool:
    """A "succeeded" record whose returned counts are not all zero (it stays at INFO)."""
    data: Any = getattr(record, "data", None)
    returned = data.get("return_value") if isinstance(data, dict) else None
    return isinstance(returned, str) and _NONZERO.search(returned) is not None


def quiet_sweep_logs() -> None:
    """Install :class:`QuietSweep` on Celery's per-task loggers (once per process)."""
    for name in CELERY_LOGGERS:
        target = logging.getLogger(name)
        if not any(isinstance(f, QuietSweep) for f in target.filters):
            target.addFilter(QuietSweep())
