"""The fork plan (durable.engine.plan_fork): which run and checkpoints a fork writes, without a database."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

import pytest

from durable.engine.plan_fork import check_from_seq, forked_history, plan_fork
from durable.engine.ports import CheckpointRecord, RunRecord
from durable.engine.vocab import TERMINAL, CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import InvalidInput

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def _cp(seq: int, status: str = CheckpointStatus.COMPLETED, **extra: object) -> CheckpointRecord:
    return CheckpointRecord(seq=seq, name=f"s{seq}", kind=CheckpointKind.STEP, status=status, **extra)  # type: ignore[arg-type]


def _origin() -> RunRecord:
    values: dict[str, object] = {f.name: None for f in fields(RunRecord)}
    values.update(id="orig", workflow="wf", version=1, status=RunStatus.FAILED, patches=["p"], tags=[])
    return RunRecord(**values)  # type: ignore[arg-type]


HISTORY = {
    1: _cp(1, output=1, locked_by="w", wake_at=NOW, retry_at=NOW, timeout_at=NOW, started_at=NOW),
    2: _cp(2, CheckpointStatus.RUNNING),
    3: _cp(3, CheckpointStatus.FAILED, error={"message": "x"}),
    4: _cp(4),
}


def test_forked_history_keeps_settled_positions_before_the_fork_and_clears_execution_state() -> None:
    kept = forked_history(HISTORY, 4)
    assert [cp.seq for cp in kept] == [1, 3]
    one = kept[0]
    assert (one.output, one.started_at) == (1, NOW)
    assert (one.locked_by, one.wake_at, one.retry_at, one.timeout_at) == (None, None, None, None)
    assert HISTORY[1].locked_by == "w"  # the origin's records are not changed


def test_forked_history_bounds() -> None:
    assert forked_history(HISTORY, 1) == []
    assert [cp.seq for cp in forked_history(HISTORY, 5)] == [1, 3, 4]
    assert check_from_seq(1, {}) == 1


@pytest.mark.parametrize("bad", [0, -3, 6, True, 1.0, "1", None])
def test_a_position_outside_the_history_is_refused(bad: object) -> None:
    with pytest.raises(InvalidInput, match="from_seq"):
        check_from_seq(bad, HISTORY)


def test_plan_fork_records_the_lineage_and_starts_past_the_first_turn() -> None:
    made = plan_fork(_origin(), 3, {"id": "new", "workflow": "wf", "turns": 0, "forked_from": "spoof"})
    assert (made.origin_id, made.from_seq, made.expect) == ("orig", 3, TERMINAL)
    assert made.run == {
        "id": "new",
        "workflow": "wf",
        "turns": 1,
        "forked_from": "orig",
        "forked_at_seq": 3,
        "patches": ["p"],
    }
