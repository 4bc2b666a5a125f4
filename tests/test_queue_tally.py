"""A limited queue's admissions per minute: the two per-minute counts its row keeps (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durable.engine.queue_tally import COLUMNS, QueueTally, minute_of

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_grants_in_one_minute_add_up_and_are_counted_exactly() -> None:
    tally = QueueTally().add(at(5), 3).add(at(40), 2)
    assert tally == QueueTally(T0, 5, 0)
    assert tally.per_minute(at(59.9)) == 5


def test_the_next_minute_makes_the_count_its_prior_and_weighs_it_by_what_is_left_of_the_window() -> None:
    tally = QueueTally().add(at(30), 6).add(at(60), 1)
    assert tally == QueueTally(at(60), 1, 6)
    assert tally.per_minute(at(60)) == 7  # the whole previous minute is still in the window
    assert tally.per_minute(at(90)) == 1 + 3
    assert tally.per_minute(at(119)) == 1 + 0  # 6 x 1/60 rounds to 0


def test_a_gap_of_more_than_a_minute_drops_the_prior_count() -> None:
    assert QueueTally().add(at(0), 4).add(at(125), 2) == QueueTally(at(120), 2, 0)


def test_without_grants_since_the_counts_age_out() -> None:
    tally = QueueTally().add(at(10), 4)
    assert tally.per_minute(at(70)) == round(4 * 50 / 60)
    assert tally.per_minute(at(120)) == 0
    assert QueueTally().per_minute(at(0)) == 0


def test_a_clock_behind_the_rows_minute_adds_to_that_minute_and_never_moves_it_back() -> None:
    tally = QueueTally().add(at(70), 1).add(at(50), 2)
    assert tally == QueueTally(at(60), 3, 0)
    # A reader whose clock is behind the row counts everything the row holds.
    assert QueueTally(at(60), 3, 5).per_minute(at(50)) == 8


def test_a_row_reads_as_its_counts_and_the_minute_truncates() -> None:
    row = dict(zip(COLUMNS, (at(60), 2, 1), strict=True))
    assert QueueTally.of(row) == QueueTally(at(60), 2, 1)
    assert minute_of(at(119.5)) == at(60)
