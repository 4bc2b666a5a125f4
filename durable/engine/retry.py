"""Retry policy: how many times a failing step runs again, and how long it waits."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from durable.engine.durations import Duration, to_seconds
from durable.exceptions import InvalidInput

_KINDS = ("fixed", "exponential")


@dataclass(frozen=True)
class Backoff:
    """Delay before retry ``n`` (1-based).

    ``fixed``: always ``initial``. ``exponential``: ``initial * factor ** (n - 1)``.
    Either is capped at ``max`` and then spread by ``jitter`` (a fraction: 0.1 means
    up to 10% shorter or longer), so a herd of failures does not retry in step.
    """

    kind: str = "exponential"
    initial: float = 1.0
    factor: float = 2.0
    max: float = 300.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise InvalidInput(f"backoff kind must be one of {_KINDS}, got {self.kind!r}")
        for field in ("initial", "factor", "max", "jitter"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidInput(f"backoff {field} must be a non-negative number, got {value!r}")
        if self.jitter > 1:
            raise InvalidInput(f"backoff jitter is a fraction between 0 and 1, got {self.jitter!r}")

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        if self.kind == "fixed":
            base = self.initial
        else:
            base = self.initial * (self.factor ** max(retry - 1, 0))
        base = min(base, self.max)
        if self.jitter:
            spread = base * self.jitter
            base += (rng or random).uniform(-spread, spread)
        return max(base, 0.0)


BackoffSpec = Backoff | str | Duration | None
# The policy of every step that names none (frozen, so one instance serves them all).
_DEFAULT_BACKOFF = Backoff()


def make_backoff(spec: BackoffSpec) -> Backoff:
    """Normalise what users write after ``backoff=``.

    ``None`` / ``"exponential"``: exponential from 1s, capped at 5 minutes.
    ``"fixed"``: 1s every time. A duration (``"2s"``, ``5``, timedelta): fixed at
    that delay. A :class:`Backoff`: as given.
    """
    if spec is None:
        return _DEFAULT_BACKOFF
    if isinstance(spec, Backoff):
        return spec
    if spec in _KINDS:
        return Backoff(kind=str(spec))
    return Backoff(kind="fixed", initial=to_seconds(spec))


def check_retries(retries: object) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidInput(f"retries must be a non-negative integer, got {retries!r}")
    return retries


def retry_delay(sd: Any, error: dict[str, Any], attempt: int) -> float | None:
    """Seconds until the next attempt of a step whose ``attempt`` failed with ``error``; None: no retry."""
    if error["retryable"] and attempt <= sd.retries:
        delay: float = sd.backoff.delay(attempt)
        return delay
    return None
