"""The namespace of the runs a transport announces, read once per run and remembered.

A transport that routes by namespace (Celery with ``NAMESPACE_QUEUES``) or
runs only some namespaces' work (the inline transport of a scoped
``durable_worker``) needs the run's namespace; callers pass it where they hold
the run (a turn's steps, its children, its own next turn, a start), otherwise
it is read from the run's row. A run's namespace never changes, so a
remembered answer never goes stale; the memory is bounded (forgotten whole
when full). Safe from many threads: a race only reads a row twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durable.engine.core import Engine

# Runs remembered per process; past it the memory starts again (one read per run then).
REMEMBERED = 10_000


class RunNamespaces:
    def __init__(self, get_engine: Callable[[], Engine]) -> None:
        self._get_engine = get_engine
        self._known: dict[str, str] = {}

    def of(self, run_id: str, given: str | None = None) -> str | None:
        """The namespace of ``run_id``: ``given`` when the caller knows it, else its row's (None: no such run)."""
        found = given if given is not None else self._known.get(run_id)
        if found is None:
            run = self._get_engine().store.get_run(run_id)
            if run is None:
                return None
            found = run.namespace
        if len(self._known) >= REMEMBERED:
            self._known = {}
        self._known[run_id] = found
        return found
