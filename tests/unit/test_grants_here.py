"""GrantsHere counts granted steps queued on this process's threads until they begin or their lease lapses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durable.engine.grants_here import GrantsHere

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_step_counts_in_its_queue_from_add_until_it_begins() -> None:
    here = GrantsHere()
    until = T0 + timedelta(seconds=60)
    here.add("a", "r1", 1, until)
    here.add("a", "r1", 2, until)
    here.add("b", "r2", 1, until)
    assert (here.queued("a", T0), here.queued("b", T0), here.queued("c", T0)) == (2, 1, 0)
    here.begin("r1", 1)
    here.begin("r1", 1)  # a second begin (a redelivery) changes nothing
    here.begin("r9", 4)  # never added here
    assert (here.queued("a", T0), here.queued("b", T0)) == (1, 1)
    here.begin("r1", 2)
    assert here.queued("a", T0) == 0


def test_an_entry_lapses_at_its_grants_admission_lease() -> None:
    here = GrantsHere()
    here.add("a", "r1", 1, T0 + timedelta(seconds=10))
    here.add("a", "r1", 2, T0 + timedelta(seconds=20))
    assert here.queued("a", T0 + timedelta(seconds=9)) == 2
    assert here.queued("a", T0 + timedelta(seconds=10)) == 1  # the database would admit step 1 again now
    assert here.queued("a", T0 + timedelta(seconds=25)) == 0
    assert here.queued("a", T0) == 0  # dropped for good, not only hidden


def test_a_step_granted_again_counts_once_in_its_latest_queue_and_lease() -> None:
    here = GrantsHere()
    here.add("a", "r1", 1, T0 + timedelta(seconds=10))
    here.add("b", "r1", 1, T0 + timedelta(seconds=30))  # granted again (its first grant lapsed elsewhere)
    assert (here.queued("a", T0), here.queued("b", T0)) == (0, 1)
    assert here.queued("b", T0 + timedelta(seconds=15)) == 1  # the earlier lease is not this entry's
    here.add("b", "r2", 1, T0 + timedelta(seconds=20))
    assert here.queued("b", T0 + timedelta(seconds=25)) == 1  # r2's lease lapsed, r1's holds
    assert here.queued("b", T0 + timedelta(seconds=30)) == 0
    here.add("a", "r3", 1, T0 + timedelta(seconds=40))  # counting starts afresh after everything lapsed
    assert here.queued("a", T0 + timedelta(seconds=35)) == 1
