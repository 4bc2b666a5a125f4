"""How the run commands print runs: a table, one run with its timeline, or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import Any

from durable.display import format_duration, format_time, wake_reason
from durable.engine.ports import CheckpointRecord
from durable.engine.vocab import Admission, CheckpointStatus
from durable.results import RunInfo

ERROR_WIDTH = 60


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def to_json(value: Any) -> str:
    """Indented JSON; times in ISO 8601."""
    return json.dumps(value, indent=2, sort_keys=True, default=_jsonable, ensure_ascii=False)


def run_dict(run: RunInfo) -> dict[str, Any]:
    return asdict(run)


def checkpoint_dict(cp: CheckpointRecord) -> dict[str, Any]:
    return asdict(cp)


def error_summary(error: dict[str, Any] | None, width: int = ERROR_WIDTH) -> str:
    """``code: start of the message`` on one line."""
    if not error:
        return ""
    code = error.get("code") or error.get("type") or "error"
    message = " ".join(str(error.get("message") or "").split())
    text = f"{code}: {message}" if message else str(code)
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns, two spaces apart; the last column is not padded."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        lines.append("  ".join([*cells, str(row[-1])]).rstrip())
    return "\n".join(lines)


def runs_table(runs: list[RunInfo]) -> str:
    rows = [[r.id, r.status, r.workflow, r.namespace, format_time(r.created_at), error_summary(r.error)] for r in runs]
    return table(["ID", "STATUS", "WORKFLOW", "NAMESPACE", "CREATED", "ERROR"], rows)


def _compact(value: Any, width: int = 100) -> str:
    text = json.dumps(value, sort_keys=True, default=_jsonable, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _duration(start: datetime | None, end: datetime | None) -> str:
    return format_duration(end - start) if start and end else ""


def _wake(run: RunInfo, history: list[CheckpointRecord]) -> str:
    if run.wake_at is None or run.is_terminal:
        return ""
    return f"{format_time(run.wake_at)} ({wake_reason(run.wake_at, history)[1]})"


def _status(cp: CheckpointRecord) -> str:
    """A checkpoint's status; a step of a limited queue waiting for its admission says why."""
    if cp.admission != Admission.WAITING or cp.status != CheckpointStatus.PENDING:
        return cp.status
    from durable.queues import step_wait_reason

    return f"{cp.status} (waiting: {step_wait_reason(cp.queue, cp.queue_key)})"


def run_text(run: RunInfo, history: list[CheckpointRecord]) -> str:
    """One run: its fields, then its history as a timeline (one line per position)."""
    fields = [
        ("run", run.id),
        ("workflow", f"{run.workflow} v{run.version}"),
        ("status", run.status),
        ("namespace", run.namespace),
        ("tags", ", ".join(run.tags)),
        ("parent", run.parent_id or ""),
        ("retry of", run.retry_of or ""),
        ("forked from", f"{run.forked_from} at #{run.forked_at_seq}" if run.forked_from else ""),
        ("continued to", run.continued_to or ""),
        ("singleton", f"key {run.singleton_key}" if run.singleton_key is not None else ""),
        ("created", format_time(run.created_at)),
        ("started", format_time(run.started_at)),
        ("finished", format_time(run.finished_at)),
        ("duration", _duration(run.started_at, run.finished_at)),
        ("next wake", _wake(run, history)),
        ("input", _compact(run.input)),
        ("output", _compact(run.output) if run.output is not None else ""),
        ("error", error_summary(run.error, 200)),
    ]
    lines = [f"{name:<13}{value}" for name, value in fields if value]
    lines.append("")
    if not history:
        lines.append("no history yet")
        return "\n".join(lines)
    rows = [
        [
            str(cp.seq),
            format_time(cp.started_at or cp.enqueued_at),
            cp.kind,
            cp.name,
            _status(cp),
            str(cp.attempts),
            _duration(cp.started_at, cp.finished_at),
            error_summary(cp.error) or (_compact(cp.output, 60) if cp.output is not None else ""),
        ]
        for cp in history
    ]
    lines.append(table(["#", "AT", "KIND", "NAME", "STATUS", "TRIES", "TOOK", "RESULT"], rows))
    return "\n".join(lines)
