"""The retention policy without a database: parsing ages, merging overrides, the store's rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durable.engine.retention import DEFAULT_AGES, ExpiryRule, expiry_rules, merged, parse_ages
from durable.exceptions import InvalidInput

NOW = datetime(2026, 6, 1, tzinfo=UTC)
DAY = 86400.0


def test_ages_parse_durations_and_keep_none():
    assert parse_ages({"completed": "7d", "failed": 60, "dead": None}, "x") == {
        "completed": 7 * DAY,
        "failed": 60.0,
        "dead": None,
    }
    assert merged(DEFAULT_AGES, {"completed": None}) == {**DEFAULT_AGES, "completed": None}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"pending": "1d"}, "where has unknown status 'pending'"),
        ({"completed": "-1d"}, r"where\['completed'\]: invalid duration"),
        ({"completed": 0}, "must be a positive age or None"),
        ({"completed": True}, "cannot be a boolean"),
        (["completed"], "must be a dict of status to age, got list"),
    ],
)
def test_bad_ages_name_the_key_and_the_value(raw, message):
    with pytest.raises(InvalidInput, match=message):
        parse_ages(raw, "where")


def test_rules_per_status_with_overrides_grouped_by_age_and_excluded_from_the_default():
    ages = {"completed": 30 * DAY, "failed": 90 * DAY, "cancelled": None, "dead": None}
    overrides = {"a": {"completed": DAY}, "b": {"completed": DAY, "cancelled": 2 * DAY}, "c": {"failed": None}}
    rules = expiry_rules(ages, overrides, NOW)
    assert rules == [
        ExpiryRule("completed", NOW - timedelta(days=30), exclude=("a", "b", "c")),
        ExpiryRule("completed", NOW - timedelta(days=1), workflows=("a", "b")),
        ExpiryRule("completed", NOW - timedelta(days=30), workflows=("c",)),
        ExpiryRule("failed", NOW - timedelta(days=90), exclude=("a", "b", "c")),
        ExpiryRule("failed", NOW - timedelta(days=90), workflows=("a", "b")),
        ExpiryRule("cancelled", NOW - timedelta(days=2), workflows=("b",)),
    ]
    assert [r.status for r in expiry_rules(ages, {}, NOW, ["failed"])] == ["failed"]


def test_a_rule_covers_what_its_query_selects():
    rule = ExpiryRule("completed", NOW, exclude=("kept",))
    assert rule.covers("w", "completed", NOW - timedelta(seconds=1))
    assert not rule.covers("w", "completed", NOW)
    assert not rule.covers("w", "completed", None)
    assert not rule.covers("kept", "completed", NOW - timedelta(days=1))
    assert not rule.covers("w", "failed", NOW - timedelta(days=1))
    assert ExpiryRule("completed", NOW, workflows=("kept",)).covers("kept", "completed", NOW - timedelta(days=1))
