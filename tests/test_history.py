"""Unit tests of the replay history (durable.engine.history): no database, no turn, a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durable.engine.clock import FakeClock
from durable.engine.history import History, cancelled_error
from durable.engine.ports import CheckpointRecord
from durable.engine.vocab import CheckpointKind, CheckpointStatus
from durable.exceptions import CancelRequested, NonDeterminismError

START = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _cp(seq: int, name: str, kind: str, status: str = CheckpointStatus.COMPLETED, **fields) -> CheckpointRecord:
    return CheckpointRecord(seq=seq, name=name, kind=kind, status=status, **fields)


def _history(*records: CheckpointRecord, cancelling: bool = False) -> History:
    return History("r1", {cp.seq: cp for cp in records}, FakeClock(START), cancelling=cancelling)


def test_positions_replay_what_was_recorded_then_run_new_ground():
    history = _history(_cp(1, "a", CheckpointKind.LOCAL, output=1))
    assert history.is_replaying() and not history.at_frontier()
    seq, cp = history.take("a", CheckpointKind.LOCAL)
    assert (seq, cp.output) == (1, 1)
    assert not history.is_replaying() and history.at_frontier()
    assert history.take("b", CheckpointKind.LOCAL) == (2, None)


def test_another_operation_at_a_recorded_position_is_remembered_as_non_determinism():
    history = _history(_cp(1, "a", CheckpointKind.LOCAL))
    with pytest.raises(NonDeterminismError, match="position 1"):
        history.take("a", CheckpointKind.STEP)
    assert isinstance(history.nondeterminism, NonDeterminismError)


def test_a_cancel_with_undo_stops_at_the_first_operation_without_an_outcome():
    history = _history(
        _cp(1, "a", CheckpointKind.STEP),
        _cp(2, "b", CheckpointKind.STEP, CheckpointStatus.PENDING),
        cancelling=True,
    )
    assert history.take("a", CheckpointKind.STEP)[0] == 1
    with pytest.raises(CancelRequested):
        history.take("b", CheckpointKind.STEP)
    assert history.seq == 2  # a recorded position stays taken: the undo steps go after it
    assert [cp.seq for cp in history.in_flight_up_to(history.seq)] == [2]
    with pytest.raises(CancelRequested):
        history.take("c", CheckpointKind.STEP)
    assert history.seq == 2  # a new one is given back
    history.compensating = True
    assert history.take("undo", CheckpointKind.STEP) == (3, None)


def test_had_waiters_is_read_from_the_history_as_loaded():
    assert not _history(_cp(1, "s", CheckpointKind.SLEEP, CheckpointStatus.PENDING)).had_waiters
    assert _history(_cp(1, "go", CheckpointKind.SIGNAL, CheckpointStatus.PENDING)).had_waiters
    assert not _history(_cp(1, "go", CheckpointKind.SIGNAL)).had_waiters


def test_records_are_built_with_the_clock_and_replay_sees_what_is_remembered():
    history = _history()
    write = history.recorded(1, "now", CheckpointKind.NOW, "x")
    assert write.create and write.record.started_at == write.record.finished_at == START
    pending = history.pending(2, "s", CheckpointKind.SLEEP, wake_at=START + timedelta(hours=1))
    assert (pending.record.status, pending.record.started_at, pending.expect) == (
        CheckpointStatus.PENDING,
        START,
        (CheckpointStatus.PENDING,),
    )
    done = history.completed(2, "s", CheckpointKind.SLEEP, output=None)
    assert (done.create, done.record.status, done.record.finished_at) == (False, CheckpointStatus.COMPLETED, START)
    failed = history.failed(3, "t", CheckpointKind.TRANSACTION, cancelled_error(), create=True, finished_at=None)
    assert failed.record.error["code"] == "cancelled" and failed.record.finished_at is None
    claimed = history.step_record(4, "st", CheckpointStatus.COMPLETED, create=False, claimed_by="me")
    assert (claimed.expect, claimed.claimed_by) == ((CheckpointStatus.RUNNING,), "me")
    history.remember(done.record)
    assert history.records[2] is done.record
