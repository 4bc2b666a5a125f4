"""Replay a run's recorded history against the current code: is a change safe for runs in flight?

    from durable.testing import assert_replayable

    assert_replayable(run_id)                     # a run in this database
    assert_replayable(load_history("order.json"))  # exported with manage.py durable_export ID

The workflow function runs in memory, as a turn would run it, with every
durable operation answered from the history: nothing is written, no step
body runs, no time passes. Replay stops successfully at the first position
the history does not hold (what a run in flight would execute next), or when
the workflow returns or raises. It fails with :class:`ReplayDivergence`,
naming the first diverging position, when the code asks for another
operation than the one recorded there (a reordered, renamed, added or
removed step, sleep, signal...), when it ends before the positions the
history recorded (an operation removed from the end), or, for a run that
completed, when it goes on past the position where the run returned.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from durable import runtime
from durable.engine.clock import FakeClock
from durable.engine.core import Engine
from durable.engine.history import History
from durable.engine.outcome import execute
from durable.engine.ports import CheckpointRecord, RunRecord
from durable.engine.turn_state import Turn
from durable.engine.vocab import RunStatus
from durable.exceptions import InvalidInput, LeaseLost, RunNotFound, Suspend
from durable.store.memory import MemoryStore
from durable.transports.manual import ManualTransport

FORMAT = "durable.history/1"


class ReplayDivergence(AssertionError):
    """The current code does not replay a recorded history.

    ``position`` is the first diverging position; ``recorded`` and ``code`` say
    what the history holds there and what the code asked for (``None``: nothing).
    """

    def __init__(self, run_id: str, position: int, recorded: str | None, code: str | None) -> None:
        self.run_id, self.position, self.recorded, self.code = run_id, position, recorded, code
        if code is None:
            what = f"the code ended, but the history records {recorded} there"
        elif recorded is None:
            what = f"the run returned before it, but the code asks for {code}"
        else:
            what = f"the code asked for {code}, but the history records {recorded}"
        super().__init__(f"run {run_id!r} does not replay at position {position}: {what}")


@dataclasses.dataclass(frozen=True)
class Replayed:
    """What a successful replay went through: ``positions`` of the history, and how it stopped."""

    run_id: str
    positions: int
    stopped: str  # "returned", "raised" or "waiting" (at the first position the history does not hold)


class _Frontier(Suspend):
    """The code reached a position the history does not hold: replay is complete."""


class _ReplayHistory(History):
    """A History that never lets the code past what was recorded, and remembers the first divergence."""

    __slots__ = ("divergence", "frontier")

    def __init__(self, run_id: str, records: dict[int, CheckpointRecord]) -> None:
        super().__init__(run_id, records, FakeClock(), cancelling=False)
        self.divergence: ReplayDivergence | None = None
        self.frontier: tuple[int, str] | None = None  # the first position not recorded, and what the code asked

    def take(self, name: str, kind: str) -> tuple[int, CheckpointRecord | None]:
        seq = self.seq + 1
        cp = self.records.get(seq)
        if cp is None:
            self.frontier = (seq, f"{kind} {name!r}")
            raise _Frontier()
        if (cp.name, cp.kind) != (name, kind) and self.divergence is None:
            self.divergence = ReplayDivergence(self.run_id, seq, f"{cp.kind} {cp.name!r}", f"{kind} {name!r}")
        return super().take(name, kind)


def export_history(run_id: str) -> dict[str, Any]:
    """The run and its checkpoints as JSON-ready data (what ``manage.py durable_export`` writes)."""
    store = runtime.get_engine().store
    run = store.get_run(run_id) if isinstance(run_id, str) and run_id else None
    if run is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    checkpoints = store.load_checkpoints(run_id)
    return {
        "format": FORMAT,
        "run": _plain(dataclasses.asdict(run)),
        "checkpoints": [_plain(dataclasses.asdict(checkpoints[seq])) for seq in sorted(checkpoints)],
    }


def load_history(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """An exported history from a file path, a JSON string or an already parsed mapping (checked)."""
    if isinstance(source, Mapping):
        doc = dict(source)
    else:
        text = str(source)
        path = Path(text)
        try:
            doc = json.loads(path.read_text() if not text.lstrip().startswith("{") else text)
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"cannot read an exported history from {text[:80]!r}: {exc}") from None
    if (
        doc.get("format") != FORMAT
        or not isinstance(doc.get("run"), dict)
        or not isinstance(doc.get("checkpoints"), list)
    ):
        raise InvalidInput(f"not an exported history (format {FORMAT!r} with 'run' and 'checkpoints')")
    return doc


def assert_replayable(run: str | Mapping[str, Any]) -> Replayed:
    """Replay ``run`` (a run id, or an exported history) against the current code; raise on divergence."""
    doc = export_history(run) if isinstance(run, str) else load_history(run)
    record = _record(RunRecord, doc["run"])
    records = {cp.seq: cp for cp in (_record(CheckpointRecord, c) for c in doc["checkpoints"])}
    engine = Engine(
        MemoryStore(),
        ManualTransport(),
        runtime.settings(),
        registry=runtime.registry,
        clock=FakeClock(record.created_at),
    )
    wf = engine.registry.get_workflow(record.workflow, record.version)
    history = _ReplayHistory(record.id, records)
    history.cancelling = record.cancel_requested
    turn = Turn(engine, record, history)
    try:
        outcome = execute(turn, wf.fn, wf.takes_input)  # the frontier is a Suspend: a waiting outcome
    except LeaseLost:
        raise AssertionError(f"run {record.id!r}: replay needed to write, so the code left the history") from None
    if history.divergence is not None:
        raise history.divergence
    stopped = _STOPPED.get(RunStatus(outcome.status), "raised")
    later = [seq for seq in records if seq > history.seq]
    if later and stopped != "waiting":
        cp = records[min(later)]
        raise ReplayDivergence(record.id, cp.seq, f"{cp.kind} {cp.name!r}", None)
    if history.frontier is not None and record.status == RunStatus.COMPLETED:
        # A run that returned must return at the same place: code past its end changed what it does.
        raise ReplayDivergence(record.id, history.frontier[0], None, history.frontier[1])
    return Replayed(record.id, history.seq, stopped)


_STOPPED = {RunStatus.COMPLETED: "returned", RunStatus.SUSPENDED: "waiting", RunStatus.BLOCKED: "waiting"}


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value.isoformat() if isinstance(value, datetime) else value for key, value in values.items()}


def _record(cls: Any, values: Mapping[str, Any]) -> Any:
    """A RunRecord/CheckpointRecord from exported values (ISO timestamps parsed; unknown keys ignored)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        if name not in fields:
            continue
        if isinstance(value, str) and "datetime" in str(fields[name].type):
            value = datetime.fromisoformat(value)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise InvalidInput(f"exported history: {exc}") from None
