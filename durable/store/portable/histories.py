"""A run's history as the portable store reads it, and the signals buffered for it."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from durable.engine.ports import CheckpointRecord, HistoryDelta
from durable.models import BufferedSignal, Checkpoint
from durable.store.portable.shared import CP_FIELDS, StoreBase, cp_record


class HistoryRows(StoreBase):
    def load_checkpoints(self, run_id: str) -> dict[int, CheckpointRecord]:
        rows = Checkpoint.objects.filter(run_id=run_id).order_by("seq").values(*CP_FIELDS)
        return {row["seq"]: cp_record(row) for row in rows}

    def load_histories(self, run_ids: list[str]) -> dict[str, dict[int, CheckpointRecord]]:
        """The checkpoints of several runs in one query, by run id (a run without any is absent)."""
        histories: dict[str, dict[int, CheckpointRecord]] = {}
        rows = Checkpoint.objects.filter(run_id__in=run_ids).order_by("run_id", "seq").values("run_id", *CP_FIELDS)
        for row in rows:
            histories.setdefault(row["run_id"], {})[row["seq"]] = cp_record(row)
        return histories

    def load_delta(self, run_id: str, seqs: list[int], after: int) -> HistoryDelta:
        """The run's checkpoints at ``seqs`` or past ``after``, and its count of checkpoints (two queries).

        Read by the run's lease holder, so nothing inserts or deletes the
        run's checkpoints between the two.
        """
        history = Checkpoint.objects.filter(run_id=run_id)
        rows = history.filter(Q(seq__in=seqs) | Q(seq__gt=after)).order_by("seq").values(*CP_FIELDS)
        return HistoryDelta({row["seq"]: cp_record(row) for row in rows}, history.count())

    def next_signal(self, run_id: str, name: str, skip: list[int]) -> tuple[int, Any] | None:
        row = (
            BufferedSignal.objects.filter(run_id=run_id, name=name)
            .exclude(id__in=skip)
            .order_by("id")
            .values_list("id", "payload")
            .first()
        )
        return (row[0], row[1]) if row is not None else None
