"""The soak: runs started at a steady rate for a long time, sampled every 30 seconds.

Each sample: the backlog (runs started and not ended, and messages waiting in
Redis), start→end latency percentiles of the runs that ended in the last 30 s,
and each process's resident memory. The soak fails if the backlog or the total
RSS **keeps growing**: the least-squares slope over the second half of the
samples, times that half's length, exceeds the tolerance, and the last sample is
above the first one of that half. Tolerances: backlog 25 runs or half its mean
over the second half (whichever is larger); RSS 40 MB or 10 % of its mean. A
backlog that rises and drains again, or memory that settles after warm-up,
passes; a steady climb does not. At the end the same verification as the chaos
run applies: every run ended as expected, exact counts.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta
from typing import Any

from django.db import connections
from django.utils import timezone

from bench.common import percentile
from durable.models import Run
from tests.chaos.fleet import ChaosCluster
from tests.chaos.scenario import ENDED
from tests.chaos.verify import verify
from tests.chaos.workload import Planned, Signaller, plan, retrying, schedule_signals, start
from tests.integration.harness import wait_until

SAMPLE_EVERY = 30.0
SOAK_SHAPES = (("pipeline", 60), ("parent", 15), ("signals", 15), ("saga", 10))
BACKLOG_TOL = (25.0, 0.5)  # absolute, fraction of the mean
RSS_TOL = (40.0, 0.10)


def keeps_growing(values: list[float], absolute: float, relative: float) -> tuple[bool, float]:
    """Whether the second half of ``values`` climbs beyond tolerance; returns (verdict, fitted rise)."""
    half = values[len(values) // 2 :]
    if len(half) < 3:
        return False, 0.0
    n = len(half)
    mean_x, mean_y = (n - 1) / 2, sum(half) / n
    slope = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(half)) / sum((i - mean_x) ** 2 for i in range(n))
    rise = slope * (n - 1)
    tolerance = max(absolute, relative * mean_y)
    return rise > tolerance and half[-1] > half[0], round(rise, 1)


def sample(cluster: ChaosCluster, run_ids: list[str], t0: float) -> dict[str, Any]:
    since = timezone.now() - timedelta(seconds=SAMPLE_EVERY)
    done = Run.objects.filter(id__in=run_ids, finished_at__gte=since).values_list("created_at", "finished_at")
    latencies = [(f - c).total_seconds() for c, f in done]
    rss = cluster.rss_mb()
    queues = {q: cluster.queue_length(q) for q in ("durable", "chaos", "remote")}
    return {
        "t_s": round(time.monotonic() - t0),
        "started": len(run_ids),
        "backlog_runs": Run.objects.filter(id__in=run_ids).exclude(status__in=ENDED).count(),
        "queued_messages": sum(queues.values()),
        "ended_last_30s": len(latencies),
        "latency_s": {f"p{p}": _round(percentile(latencies, p)) for p in (50, 95, 99)},
        "rss_mb_total": round(sum(rss.values()), 1),
        "rss_mb": rss,
        "load_avg": round(os.getloadavg()[0], 2),
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def run_soak(args: argparse.Namespace, cluster: ChaosCluster) -> dict[str, Any]:
    import random

    rng = random.Random(args.seed)
    total = int(args.minutes * 60 * args.rate)
    the_plan = plan(total, args.seed, prefix="soak", shapes=SOAK_SHAPES)
    signaller = Signaller()
    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()
    next_sample = t0 + SAMPLE_EVERY
    started: list[str] = []
    for i, p in enumerate(the_plan.runs):
        time.sleep(max(0.0, t0 + i / args.rate - time.monotonic()))
        _start(p, signaller, rng)
        started.append(p.run_id)
        if time.monotonic() >= next_sample:
            samples.append(retrying("sample", lambda: sample(cluster, started, t0)))
            print(f"soak sample: {samples[-1]}", flush=True)
            next_sample += SAMPLE_EVERY
    wait_until(
        lambda: retrying("count", lambda: Run.objects.filter(id__in=started, status__in=ENDED).count()) == len(started),
        "every soak run to end",
        timeout=600,
        interval=1.0,
    )
    samples.append(retrying("sample", lambda: sample(cluster, started, t0)))
    signaller.stop()
    connections.close_all()
    failures, figures = verify(the_plan)
    verdict = soak_verdict(samples, failures)
    return {
        **figures,
        "rate_per_s": args.rate,
        "minutes": args.minutes,
        **verdict,
        "process_exits": cluster.exits,
        "samples": samples,
        "failures": failures,
    }


def _start(p: Planned, signaller: Signaller, rng: Any) -> None:
    start(p)
    if p.shape == "signals":
        schedule_signals(signaller, p, rng)


def soak_verdict(samples: list[dict[str, Any]], failures: list[str]) -> dict[str, Any]:
    """Growth verdicts over the samples taken while runs were being started (the last is the drain)."""
    steady = samples[:-1]
    backlog = [float(s["backlog_runs"] + s["queued_messages"]) for s in steady]
    rss = [float(s["rss_mb_total"]) for s in steady]
    backlog_grows, backlog_rise = keeps_growing(backlog, *BACKLOG_TOL)
    rss_grows, rss_rise = keeps_growing(rss, *RSS_TOL)
    if backlog_grows:
        failures.append(f"backlog keeps growing: +{backlog_rise} over the second half ({backlog})")
    if rss_grows:
        failures.append(f"worker RSS keeps growing: +{rss_rise} MB over the second half ({rss})")
    return {
        "backlog_rise_second_half": backlog_rise,
        "rss_rise_second_half_mb": rss_rise,
        "rss_mb_at_start": rss[0] if rss else None,
        "rss_mb_at_end": rss[-1] if rss else None,
    }
