"""Failure injection for tests: make a step raise, or make its process die after it ran.

    with inject_failure(charge_card, times=2):          # the first two executions raise
        run = run_until_settled(durable.start(order, data))

    with inject_crash(charge_card) as crash:            # runs, then the process "dies"
        run = run_until_settled(durable.start(order, data))
    assert crash.hits == 1 and run.status == "completed"  # ran twice: at least once

An injected crash raises :class:`SimulatedCrash` (a ``BaseException``, so
neither the engine nor a workflow's ``except Exception`` can catch it) after
the step's body returned and before its result is written, as a killed
worker would leave it. :func:`~durable.testing.drive` and
:func:`~durable.testing.run_until_settled` absorb it as the death of this
process: the leases it held lapse at once, so the next pass recovers the run
(or the step) as the sweeps recover a dead worker's, under the same rules
(a lost step counts as an attempt; ``worker_lost`` after its retries).

Injections are process-wide (every engine and thread of this process) and
last until their block ends; each hit is counted under a lock, so ``times``
is exact with concurrent turns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from durable import runtime
from durable.engine.faults import StepFaults
from durable.exceptions import InvalidInput


class SimulatedCrash(BaseException):
    """The process running step ``step`` died (injected) after the step ran, before its result was written."""

    def __init__(self, step: str) -> None:
        super().__init__(f"injected crash after step {step!r} ran (its result was not written)")
        self.step = step


@dataclass
class Injection:
    """One injected fault: for step ``step``, the next ``times`` executions; ``hits`` counts those done."""

    step: str
    times: int
    crash: bool
    error: BaseException | type[BaseException] | None = None
    hits: int = 0

    def make_error(self) -> BaseException:
        """The exception an injected failure raises (an instance of ``error``, else a ``RuntimeError``)."""
        if self.error is None:
            return RuntimeError(f"injected failure of step {self.step!r}")
        return self.error() if isinstance(self.error, type) else self.error


class _Faults(StepFaults):
    """The installed injections (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: list[Injection] = []
        self.previous: StepFaults | None = None

    def run(self, name: str, body: Callable[[], Any]) -> Any:
        injection = self._take(name)
        if injection is None:
            return body()
        if not injection.crash:
            raise injection.make_error()
        body()
        raise SimulatedCrash(name)

    def _take(self, name: str) -> Injection | None:
        with self.lock:
            for injection in self.active:
                if injection.step == name and injection.hits < injection.times:
                    injection.hits += 1
                    return injection
        return None


_faults = _Faults()


def step_name(step: Any) -> str:
    """The name of ``step``: a ``@durable.step`` function's, or the name given (clear error otherwise)."""
    sd = getattr(step, "__durable_step__", None)
    if sd is not None:
        return str(sd.name)
    if isinstance(step, str) and step:
        return step
    raise InvalidInput(f"{step!r} is neither a @durable.step function nor a step name (local_step names work too)")


@contextmanager
def _injected(injection: Injection) -> Iterator[Injection]:
    if isinstance(injection.times, bool) or not isinstance(injection.times, int) or injection.times < 1:
        raise InvalidInput(f"times must be a positive integer, got {injection.times!r}")
    with _faults.lock:
        if not _faults.active:
            _faults.previous = runtime.install_faults(_faults)
        _faults.active.append(injection)
    try:
        yield injection
    finally:
        with _faults.lock:
            _faults.active.remove(injection)
            if not _faults.active and _faults.previous is not None:
                runtime.install_faults(_faults.previous)
                _faults.previous = None


def inject_failure(
    step: Any, times: int = 1, error: BaseException | type[BaseException] | None = None
) -> AbstractContextManager[Injection]:
    """The next ``times`` executions of ``step`` raise ``error`` (default a ``RuntimeError``) instead of running.

    ``step`` is a ``@durable.step`` function or a step name (a ``local_step``'s name too).
    The error goes through the step's retry policy like any other: raise
    ``durable.FatalError`` to skip the retries.
    """
    return _injected(Injection(step_name(step), times, crash=False, error=error))


def inject_crash(step: Any, times: int = 1) -> AbstractContextManager[Injection]:
    """The next ``times`` executions of ``step`` run, then their process dies before the result is written."""
    return _injected(Injection(step_name(step), times, crash=True))
