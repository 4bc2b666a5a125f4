"""The plan of :func:`durable.fork`: a new run that keeps another run's history before a position.

Pure (no Django, no store): :func:`plan_fork` describes the run to insert and
:func:`forked_history` the checkpoints it starts with; every store executes
the two in one transaction, under the origin's row lock, and unit tests check
them without a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from durable.engine.ports import CheckpointRecord, RunRecord
from durable.engine.vocab import SETTLED, TERMINAL
from durable.exceptions import InvalidInput


@dataclass(frozen=True)
class ForkPlan:
    """Insert ``run`` with ``origin_id``'s settled checkpoints before ``from_seq``.

    Compare-and-set: the origin must still be in one of ``expect`` (a terminal
    status) once its row is locked, so its history does not move while it is
    copied; the insert is idempotent on the new run's id (an existing id
    writes nothing, checkpoints included).
    """

    origin_id: str
    from_seq: int
    run: dict[str, Any]
    expect: tuple[str, ...] = TERMINAL


def check_from_seq(from_seq: Any, history: Mapping[int, CheckpointRecord]) -> int:
    """``from_seq`` if it names a position of ``history`` or the one after its last; else InvalidInput.

    Positions start at 1; forking at 1 keeps nothing (a rerun from the start),
    forking one past the last recorded position keeps the whole history and
    runs the code that came after it again.
    """
    if isinstance(from_seq, bool) or not isinstance(from_seq, int):
        raise InvalidInput(f"from_seq must be an integer position, got {from_seq!r}")
    last = max(history, default=0)
    if from_seq < 1 or from_seq > last + 1:
        raise InvalidInput(
            f"from_seq must be between 1 and {last + 1} (the run's last position is {last}), got {from_seq}"
        )
    return from_seq


def forked_history(history: Mapping[int, CheckpointRecord], from_seq: int) -> list[CheckpointRecord]:
    """The checkpoints the fork starts with: the settled ones before ``from_seq``, in order.

    Each keeps its name, kind, status, input, output, error and times, so the
    fork replays them as the origin did; what belonged to an execution in
    flight (a worker's claim, a timer or retry due) is cleared. A position
    before ``from_seq`` that never settled (a step the origin's cancel cut
    short) is not copied: the fork executes it again.
    """
    check_from_seq(from_seq, history)
    kept = [history[seq] for seq in sorted(history) if seq < from_seq and history[seq].status in SETTLED]
    return [replace(cp, wake_at=None, retry_at=None, timeout_at=None, locked_by=None) for cp in kept]


def plan_fork(origin: RunRecord, from_seq: int, fields: dict[str, Any]) -> ForkPlan:
    """The fork of ``origin`` at ``from_seq``: the new run's ``fields`` with its lineage.

    ``turns`` starts at 1, so its first turn reads the copied history (a run
    on turn 0 has none to read). The origin's ``patches`` are kept: replay
    through the copied positions takes the code paths the origin took.
    """
    run = {
        **fields,
        "forked_from": origin.id,
        "forked_at_seq": from_seq,
        "turns": 1,
        "patches": list(origin.patches or []),
    }
    return ForkPlan(origin.id, from_seq, run)
