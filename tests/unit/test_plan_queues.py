"""Admission decisions without a database (durable.engine.plan_queues)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durable.engine.plan_queues import (
    RATE_LOOKAHEAD,
    Candidate,
    QueueLimits,
    Rate,
    claimable,
    effective_limits,
    fair_order,
    parse_rate,
    plan_queue_admission,
    rank_within_keys,
    step_key,
    wait_reason,
)
from durable.exceptions import InvalidInput

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def cand(i: int, key: str | None = None, priority: int = 0, served: float | None = None) -> Candidate:
    return Candidate(i, f"r{i}", 1, key, priority, at(i), served=at(served) if served is not None else None)


def test_rates_parse_per_second_minute_and_hour():
    assert parse_rate("20/s", "x") == Rate(20, 1.0)
    assert parse_rate(" 100 / m ", "x") == Rate(100, 60.0)
    assert str(parse_rate("5000/h", "x")) == "5000/h"
    assert parse_rate(None, "x") is None
    for bad in ("20", "20/d", "-1/s", "0/s", 20, "1.5/s"):
        with pytest.raises(InvalidInput, match="rate must be a string like"):
            parse_rate(bad, "x")


def test_overrides_win_and_a_broken_stored_override_falls_back_to_the_settings():
    defaults = QueueLimits(concurrency=5, rate=Rate(20, 1.0))
    assert effective_limits(defaults, {"concurrency": 1}) == QueueLimits(1, Rate(20, 1.0))
    assert effective_limits(defaults, {"rate": None}) == QueueLimits(5, None)
    assert effective_limits(defaults, {"concurrency": "many"}) == defaults


def test_round_robin_order_ranks_then_least_recently_served_then_arrival():
    rows = rank_within_keys([cand(1, "hot"), cand(2, "hot"), cand(3, "hot"), cand(4, "a"), cand(5, "b", served=-1)])
    assert [c.id for c in fair_order(rows)] == [1, 4, 5, 2, 3]
    served = [c if c.key != "hot" else Candidate(**{**c.__dict__, "served": at(9)}) for c in rows]
    assert [c.id for c in fair_order(served)][:3] == [4, 5, 1]  # the key served last goes last


def test_priority_comes_before_fairness():
    rows = rank_within_keys([cand(1, "a"), cand(2, "b", priority=3), cand(3, "b", priority=3)])
    assert [c.id for c in fair_order(rows)] == [2, 3, 1]


def test_choose_respects_concurrency_keys_and_the_rate_spacing():
    plan = plan_queue_admission("q", at(0), QueueLimits(), 60.0, 100)
    rows = rank_within_keys([cand(i, "k" if i < 3 else None) for i in range(1, 6)])
    grants, _ = plan.choose(QueueLimits(concurrency=3, key_concurrency=1), 1, {"k": 0}, rows, None)
    assert [g.id for g in grants] == [1, 3]  # one slot taken; key k at most one
    rate = QueueLimits(rate=Rate(4, 1.0))
    grants, next_at = plan.choose(rate, 0, {}, rows, at(0.1))
    starts = [g.start for g in grants]
    assert starts == [at(0.1), at(0.35), at(0.6), at(0.85), at(1.1)]
    assert next_at == at(1.35) and all(s < at(0) + RATE_LOOKAHEAD for s in starts)
    assert grants[0].until == at(60.1)


def test_a_rate_grants_nothing_beyond_its_lookahead():
    plan = plan_queue_admission("q", at(0), QueueLimits(), 60.0, 100)
    grants, next_at = plan.choose(QueueLimits(rate=Rate(1, 60.0)), 0, {}, [cand(1)], at(5))
    assert grants == () and next_at == at(5)


def test_claimable_only_while_admitted_started_and_not_lapsed():
    assert claimable(None, None, None, at(0))
    assert not claimable("waiting", None, None, at(0))
    assert not claimable("admitted", at(1), at(61), at(0.5))
    assert claimable("admitted", at(1), at(61), at(1))
    assert not claimable("admitted", at(1), at(61), at(61))


def test_keys_and_reasons():
    assert step_key(42, "s") == "42" and step_key(None, "s") is None
    with pytest.raises(InvalidInput, match="a queue key must be a string"):
        step_key(["x"], "s")
    with pytest.raises(InvalidInput, match="at most 255"):
        step_key("x" * 256, "s")
    limits = QueueLimits(concurrency=2, key_concurrency=1, rate=Rate(1, 1.0))
    assert "paused" in wait_reason("q", True, limits, 0, 0)
    assert "concurrency limit (2 of 2 running)" in wait_reason("q", False, limits, 2, 0)
    assert "key_concurrency" in wait_reason("q", False, limits, 1, 1)
    assert "rate limit" in wait_reason("q", False, limits, 1, 0)
