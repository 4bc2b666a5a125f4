"""Around every step body: nothing, unless a test installed faults (``durable.testing.inject_failure``).

The engine calls :meth:`StepFaults.run` with the step's name and its body at
each of the three places a step body runs (a local step in its turn, an eager
step in a worker's turn, a dispatched step on a worker). The base class just
calls the body; the test kit's subclass raises an injected error instead, or
lets the body run and then simulates the process dying before the step's
result is written. Nothing here imports Django or Celery.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class StepFaults:
    """No faults: a step body runs as written (one method call per step)."""

    def run(self, name: str, body: Callable[[], Any]) -> Any:
        """Run step ``name``'s ``body`` and return its result."""
        return body()


NO_FAULTS = StepFaults()
