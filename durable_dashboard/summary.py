"""Aggregates for the summary page: throughput and failures over time, by workflow, per status.

Charts are drawn server-side as SVG from the numbers computed here. Results
are cached for ``DURABLE_DASHBOARD["SUMMARY_CACHE_SECONDS"]`` per namespace scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db.models import Count, QuerySet
from django.db.models.functions import TruncDay, TruncHour

from durable.models import ACTIVE, RUN_STATUS_CHOICES, Run, RunStatus
from durable_dashboard import conf

WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
SERIES = (("started", "#417690"), (RunStatus.COMPLETED, "#2e7d32"), (RunStatus.FAILED, "#c62828"))
CHART_W, CHART_H = 720, 180


@dataclass
class Bar:
    x: float
    y: float
    height: float
    width: float
    color: str
    title: str


def _floor(when: datetime, hourly: bool) -> datetime:
    when = when.replace(minute=0, second=0, microsecond=0)
    return when if hourly else when.replace(hour=0)


def compute(qs: QuerySet[Run], window: str, now: datetime) -> dict[str, Any]:
    """The summary of ``qs`` (already limited to visible namespaces) over ``window``.

    Three aggregate queries: runs created in the window (by bucket, workflow and
    status), runs that ended in the window (by bucket and status), and runs per status.
    """
    span = WINDOWS.get(window, WINDOWS["24h"])
    hourly = span <= timedelta(hours=48)
    step = timedelta(hours=1) if hourly else timedelta(days=1)
    trunc = TruncHour if hourly else TruncDay
    first = _floor(now - span, hourly) + step
    buckets = []
    t = first
    while t <= now:
        buckets.append(t)
        t += step
    started: dict[datetime, int] = {}
    by_workflow: dict[str, dict[str, int]] = {}
    created = (
        qs.filter(created_at__gte=first)
        .annotate(bucket=trunc("created_at"))
        .values("bucket", "workflow", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in created:
        started[row["bucket"]] = started.get(row["bucket"], 0) + row["n"]
        counts = by_workflow.setdefault(row["workflow"], {"total": 0})
        counts[row["status"]] = counts.get(row["status"], 0) + row["n"]
        counts["total"] += row["n"]
        if row["status"] in ACTIVE:
            counts["active"] = counts.get("active", 0) + row["n"]
    completed: dict[datetime, int] = {}
    failed: dict[datetime, int] = {}
    ended = (
        qs.filter(finished_at__gte=first, status__in=[RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD])
        .annotate(bucket=trunc("finished_at"))
        .values("bucket", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    for ended_row in ended:
        target = completed if ended_row["status"] == RunStatus.COMPLETED else failed
        target[ended_row["bucket"]] = target.get(ended_row["bucket"], 0) + ended_row["n"]
    series = {"started": started, RunStatus.COMPLETED: completed, RunStatus.FAILED: failed}
    by_status = {row["status"]: row["n"] for row in qs.values("status").annotate(n=Count("id")).order_by()}
    return {
        "window": window if window in WINDOWS else "24h",
        "hourly": hourly,
        "buckets": buckets,
        "series": {name: [values.get(b, 0) for b in buckets] for name, values in series.items()},
        "totals": {name: sum(values.values()) for name, values in series.items()},
        "by_status": [(value, label, by_status.get(value, 0)) for value, label in RUN_STATUS_CHOICES],
        "by_workflow": sorted(by_workflow.items(), key=lambda item: -item[1]["total"])[:50],
    }


def cached(qs: QuerySet[Run], window: str, now: datetime, scope: str) -> dict[str, Any]:
    key = f"durable_dashboard:summary:{window}:{scope}"
    data: dict[str, Any] | None = cache.get(key)
    if data is None:
        data = compute(qs, window, now)
        cache.set(key, data, int(conf.get("SUMMARY_CACHE_SECONDS")))
    return data


def time_chart(data: dict[str, Any]) -> dict[str, Any]:
    """SVG geometry of the grouped bar chart (started/completed/failed per bucket)."""
    buckets = data["buckets"]
    peak = max([1, *(v for values in data["series"].values() for v in values)])
    slot = CHART_W / max(len(buckets), 1)
    width = max(slot / (len(SERIES) + 1), 1)
    bars = []
    for i, bucket in enumerate(buckets):
        for j, (name, color) in enumerate(SERIES):
            value = data["series"][name][i]
            height = value * (CHART_H - 10) / peak
            label = f"{bucket:%Y-%m-%d %H:%M}" if data["hourly"] else f"{bucket:%Y-%m-%d}"
            bars.append(
                Bar(
                    round(i * slot + j * width, 2),
                    round(CHART_H - height, 2),
                    round(height, 2),
                    round(width, 2),
                    color,
                    f"{label}: {value} {name}",
                )
            )
    step = max(len(buckets) // 6, 1)
    fmt = "%H:%M" if data["hourly"] else "%m-%d"
    labels = [(round(i * slot, 2), f"{b:{fmt}}") for i, b in enumerate(buckets) if i % step == 0]
    values = sorted({0, (peak + 1) // 2, peak})
    yticks = [(round(CHART_H - v * (CHART_H - 10) / peak, 2), v) for v in values]
    return {
        "bars": bars,
        "labels": labels,
        "yticks": yticks,
        "peak": peak,
        "width": CHART_W,
        "height": CHART_H,
        "legend": SERIES,
    }


def status_chart(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Horizontal bars, one per status, as percentages of the largest."""
    peak = max([1, *(n for _, _, n in data["by_status"])])
    return [
        {"status": v, "label": label, "count": n, "pct": round(n * 100 / peak, 2)} for v, label, n in data["by_status"]
    ]
