"""Retention in memory: the same reads, claim and compare-and-set delete as the portable store's."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from durable.engine.retention import Evicted, ExpiredRun, ExpiryRule, Line, needed
from durable.engine.vocab import ACTIVE, RUN_TOKEN, TERMINAL
from durable.store.memory.base import MemoryBase, atomically, locked
from durable.store.memory.tables import Row, as_json

_EXPIRED = ("id", "workflow", "status", "finished_at", "parent_id", "retry_of", "continued_to")
# The tables keyed to a run, under the names the portable store exports them with.
KEYED = ("buffered_signals", "checkpoints", "waiters")
DB_TABLES = {
    "buffered_signals": "durable_bufferedsignal",
    "checkpoints": "durable_checkpoint",
    "waiters": "durable_signalwaiter",
}


def _jsonable(row: Row) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, (datetime, date)) else as_json(v) for k, v in row.items()}


class RetentionPart(MemoryBase):
    """The retention sweep's reads and writes over the memory tables."""

    def _free(self, row: Row, now: datetime) -> bool:
        return not row["lifecycle_owed"] and (row["locked_until"] is None or row["locked_until"] < now)

    @locked
    def expired_runs(
        self, rule: ExpiryRule, now: datetime, after: tuple[datetime, str] | None, limit: int
    ) -> list[ExpiredRun]:
        found = [
            r
            for r in self.tables.runs.values()
            if rule.covers(r["workflow"], r["status"], r["finished_at"])
            and self._free(r, now)
            and (after is None or (r["finished_at"], r["id"]) > after)
        ]
        found.sort(key=lambda r: (r["finished_at"], r["id"]))
        return [ExpiredRun(**{name: r[name] for name in _EXPIRED}) for r in found[:limit]]

    def retention_lineage(self, ids: set[str]) -> dict[str, Line]:
        rows = [self.tables.runs[rid] for rid in ids if rid in self.tables.runs]
        return {r["id"]: Line(r["status"], r["parent_id"], r["continued_to"]) for r in rows}

    def retention_waited(self, ids: set[str]) -> set[str]:
        names = {w["name"] for w in self.tables.waiters.values()}
        return {rid for rid in ids if RUN_TOKEN + rid in names}

    def retention_retried(self, ids: set[str]) -> set[str]:
        return {r["retry_of"] for r in self.tables.runs.values() if r["retry_of"] in ids and r["status"] in ACTIVE}

    @locked
    def needed_runs(self, runs: list[ExpiredRun]) -> set[str]:
        return needed(runs, self)

    @atomically
    def claim_expired(self, ids: list[str], owner: str, now: datetime, lease_until: datetime) -> list[str]:
        taken = []
        for rid in ids:
            row = self.tables.runs.get(rid)
            if row is not None and row["status"] in TERMINAL and self._free(row, now):
                self.tables.set(row, locked_by=owner, locked_until=lease_until)
            if row is not None and row["locked_by"] == owner:
                taken.append(row)
        taken.sort(key=lambda r: (r["finished_at"], r["id"]))
        return [r["id"] for r in taken]

    def _keyed(self, run_id: str) -> dict[str, list[Row]]:
        history = self.tables.checkpoints.get(run_id, {})
        return {
            "buffered_signals": [s for s in self.tables.ordered(self.tables.signals) if s["run_id"] == run_id],
            "checkpoints": [history[seq] for seq in sorted(history)],
            "waiters": [w for w in self.tables.ordered(self.tables.waiters) if w["run_id"] == run_id],
        }

    @locked
    def export_runs(self, ids: list[str]) -> list[dict[str, Any]]:
        exported = []
        for rid in ids:
            row = self.tables.runs.get(rid)
            if row is None:
                continue
            entry: dict[str, Any] = {"run": _jsonable(row)}
            for name, rows in self._keyed(rid).items():
                entry[name] = [_jsonable(r) for r in rows]
            exported.append(entry)
        return exported

    @atomically
    def evict_runs(self, ids: list[str], owner: str) -> Evicted:
        rows = [
            r
            for rid in ids
            if (r := self.tables.runs.get(rid)) is not None
            and r["locked_by"] == owner
            and r["status"] in TERMINAL
            and not r["lifecycle_owed"]
        ]
        keep = needed([ExpiredRun(**{name: r[name] for name in _EXPIRED}) for r in rows], self)
        counts = {table: 0 for table in (*DB_TABLES.values(), "durable_run")}
        by_status: dict[str, int] = {}
        for row in rows:
            if row["id"] in keep:
                self.tables.set(row, locked_by=None, locked_until=None)
                continue
            for name, keyed in self._keyed(row["id"]).items():
                counts[DB_TABLES[name]] += len(keyed)
            self._delete_waiters([row["id"]])
            for signal in self._keyed(row["id"])["buffered_signals"]:
                self.tables.drop(self.tables.signals, signal["id"])
            self.tables.drop(self.tables.checkpoints, row["id"])
            self.tables.drop(self.tables.runs, row["id"])
            counts["durable_run"] += 1
            by_status[row["status"]] = by_status.get(row["status"], 0) + 1
        return Evicted(runs=by_status, rows=counts)

    @atomically
    def release_expired(self, ids: list[str], owner: str) -> None:
        for rid in ids:
            row = self.tables.runs.get(rid)
            if row is not None and row["locked_by"] == owner and row["status"] in TERMINAL:
                self.tables.set(row, locked_by=None, locked_until=None)
