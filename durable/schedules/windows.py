"""Where a schedule's windows fall: pure functions of the spec and an instant.

Every instant here is aware and in UTC. A window is identified by its instant
alone, so any process computing from the same spec finds the same windows
(and the same run ids, :func:`run_id`).

Cron expressions are matched on naive wall-clock times of the schedule's
timezone, then each match is mapped to one instant (:func:`to_instant`):

* a wall-clock time that exists once is that instant;
* one that happens twice (clocks going back) is its first occurrence, so it
  fires once;
* one that does not exist (clocks going forward) is the first valid instant
  after it, the end of the gap; several matches inside one gap collapse into
  that one window.

The mapping never decreases, so windows stay in order and none is doubled.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from durable.schedules.spec import Schedule, cron_iter

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TICK = timedelta(microseconds=1)
# Wider than any offset change of a current zone (a repeated hour is at most 2 h today).
_FOLD_MARGIN = timedelta(hours=3)


def local_naive(instant: datetime, zone: ZoneInfo) -> datetime:
    """The wall-clock time of ``instant`` in ``zone``, without tzinfo."""
    return instant.astimezone(zone).replace(tzinfo=None)


def to_instant(naive: datetime, zone: ZoneInfo) -> datetime:
    """The instant of wall-clock time ``naive`` in ``zone`` (the module docstring's rule)."""
    first = naive.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if local_naive(first, zone) == naive:
        return first
    # In a gap: the two folds give instants on either side of the transition; find it.
    lo, hi = sorted((first, naive.replace(tzinfo=zone, fold=1).astimezone(UTC)))
    lo_s, hi_s = int(lo.timestamp()), int(hi.timestamp()) + 1
    while lo_s + 1 < hi_s:
        mid = (lo_s + hi_s) // 2
        if local_naive(datetime.fromtimestamp(mid, UTC), zone) >= naive:
            hi_s = mid
        else:
            lo_s = mid
    return datetime.fromtimestamp(hi_s, UTC)


def _every_us(spec: Schedule) -> int:
    assert spec.every is not None
    return max(1, round(float(spec.every) * 1_000_000))


def _anchor(spec: Schedule) -> datetime:
    return spec.start_at or EPOCH


def _every_after(spec: Schedule, after: datetime) -> datetime:
    step = _every_us(spec)
    anchor = _anchor(spec)
    offset = (after - anchor) // _TICK
    k = offset // step + 1
    if spec.start_at is not None:
        k = max(k, 0)
    return anchor + timedelta(microseconds=k * step)


def _every_at_or_before(spec: Schedule, until: datetime) -> datetime | None:
    step = _every_us(spec)
    anchor = _anchor(spec)
    k = ((until - anchor) // _TICK) // step
    if spec.start_at is not None and k < 0:
        return None
    return anchor + timedelta(microseconds=k * step)


def _cron_forward(spec: Schedule, after: datetime) -> Iterator[datetime]:
    """Cron windows strictly after ``after``, ascending (no end bound applied)."""
    assert spec.cron is not None
    zone = spec.zone
    it = cron_iter(spec.cron, local_naive(after, zone))
    last = after
    while True:
        instant = to_instant(it.get_next(datetime), zone)
        if instant > last:
            last = instant
            yield instant


def _cron_backward(spec: Schedule, until: datetime) -> Iterator[datetime]:
    """Cron windows at or before ``until``, descending (no start bound applied)."""
    assert spec.cron is not None
    zone = spec.zone
    # A start later than ``until``'s wall clock: a repeated hour maps later wall-clock times before it.
    it = cron_iter(spec.cron, local_naive(until, zone) + _FOLD_MARGIN, reverse=True)
    last: datetime | None = None
    while True:
        instant = to_instant(it.get_prev(datetime), zone)
        if instant <= until and (last is None or instant < last):
            last = instant
            yield instant


def next_window(spec: Schedule, after: datetime) -> datetime | None:
    """The first window strictly after ``after`` within the spec's bounds (None: no more)."""
    if spec.start_at is not None and after < spec.start_at:
        after = spec.start_at - _TICK
    if spec.every is not None:
        found: datetime | None = _every_after(spec, after)
    else:
        found = next(_cron_forward(spec, after), None)
    if found is None or (spec.end_at is not None and found > spec.end_at):
        return None
    return found


def first_window(spec: Schedule, at_or_after: datetime) -> datetime | None:
    """The first window at or after ``at_or_after``."""
    return next_window(spec, at_or_after - _TICK)


def upcoming(spec: Schedule, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` windows strictly after ``after`` (fewer if the schedule ends)."""
    found: list[datetime] = []
    while len(found) < count:
        nxt = next_window(spec, found[-1] if found else after)
        if nxt is None:
            break
        found.append(nxt)
    return found


def between(spec: Schedule, start: datetime, end: datetime, limit: int) -> list[datetime]:
    """Windows in ``[start, end]`` ascending, at most ``limit + 1`` (so a caller sees an overflow)."""
    found: list[datetime] = []
    nxt = first_window(spec, start)
    while nxt is not None and nxt <= end and len(found) <= limit:
        found.append(nxt)
        nxt = next_window(spec, nxt)
    return found


def last_windows(spec: Schedule, until: datetime, count: int, not_before: datetime) -> list[datetime]:
    """The last ``count`` windows in ``[not_before, until]``, ascending."""
    if spec.end_at is not None and until > spec.end_at:
        until = spec.end_at
    floor = max(not_before, spec.start_at) if spec.start_at is not None else not_before
    found: list[datetime] = []
    if spec.every is not None:
        nxt = _every_at_or_before(spec, until)
        while nxt is not None and nxt >= floor and len(found) < count:
            found.append(nxt)
            nxt = nxt - timedelta(microseconds=_every_us(spec))
    else:
        for instant in _cron_backward(spec, until):
            if instant < floor or len(found) >= count:
                break
            found.append(instant)
    return found[::-1]


def jitter_delay(key: str, window: datetime, jitter: float | None) -> timedelta:
    """The stable part of ``jitter`` seconds that ``window`` of schedule ``key`` waits (whole milliseconds)."""
    if not jitter:
        return timedelta(0)
    digest = hashlib.sha256(f"{key}\x00{window.isoformat()}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(milliseconds=int(fraction * jitter * 1000))


def run_id(key: str, window: datetime) -> str:
    """The id of the run that starts ``window`` of schedule ``key``: the same on every process."""
    window = window.astimezone(UTC)
    return f"{key}@{window:%Y%m%dT%H%M%S}{f'.{window:%f}' if window.microsecond else ''}Z"
