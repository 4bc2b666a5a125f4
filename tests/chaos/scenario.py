"""The chaos run: start the planned runs at a steady pace, inject the seeded faults among them,
wait until every run has ended, then verify (see :mod:`tests.chaos.verify`).

Deadlines here are hang guards only (minutes): correctness is the exact counts of
the verifier; recovery times are measured and reported.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections import Counter
from typing import Any

from django.db import connections

from durable.engine.vocab import SETTLED, RunStatus
from durable.models import Checkpoint, Run
from tests.chaos.faults import Faults, Recovery, schedule
from tests.chaos.fleet import ChaosCluster
from tests.chaos.kinds import KINDS
from tests.chaos.verify import verify
from tests.chaos.workload import Plan, Signaller, cancel, plan, retrying, schedule_signals, start

SETTLE = {"short": 420.0, "long": 900.0}  # hang guard: every run has ended by then
ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.DEAD)


def timeline(p: Plan, kinds: list[str], window: float, rng: random.Random) -> list[tuple[float, str, Any]]:
    """Starts spread evenly over ``window``; faults spread over it too (after a warm-up), jittered."""
    events: list[tuple[float, str, Any]] = [(window * i / len(p.runs), "start", r) for i, r in enumerate(p.runs)]
    gap = (window - 5.0) / max(1, len(kinds))
    events += [(5.0 + gap * i + rng.uniform(0, gap / 2), "fault", k) for i, k in enumerate(kinds)]
    return sorted(events, key=lambda e: e[0])


def ended(run_ids: list[str]) -> int:
    return Run.objects.filter(id__in=run_ids, status__in=ENDED).count()


def wait_ended(run_ids: list[str], timeout: float) -> str:
    """Wait (a hang guard) until every run has ended; "" then, else what is still going on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if retrying("count", lambda: ended(run_ids)) == len(run_ids):
            return ""
        time.sleep(1.0)
    return retrying("report", lambda: progress_report(run_ids))


def progress_report(run_ids: list[str]) -> str:
    rows = Run.objects.filter(id__in=run_ids).exclude(status__in=ENDED)
    lines = []
    for r in rows[:40]:
        lines.append(f"{r.id} {r.status} locked_by={r.locked_by} wake={r.wake_at} updated={r.updated_at}")
        for cp in Checkpoint.objects.filter(run_id=r.id).exclude(status__in=SETTLED).order_by("seq"):
            lines.append(
                f"   #{cp.seq} {cp.kind} {cp.name} {cp.status} attempts={cp.attempts} dispatches={cp.dispatches}"
            )
    return "\n".join(lines)


def run_chaos(
    args: argparse.Namespace, cluster: ChaosCluster, pg: Any, redis: Any, mode: dict[str, Any]
) -> dict[str, Any]:
    rng = random.Random(args.seed)
    the_plan = plan(args.runs or mode["runs"], args.seed)
    excluded = {k for k in args.exclude.split(",") if k}
    if args.fleet == "celery":
        excluded.add("kill_durable_worker")
    kinds = schedule(tuple(k for k in KINDS if k not in excluded), mode["repeat"], rng)
    signaller, recovery = Signaller(), Recovery()
    recovery.start()
    faults = Faults(cluster, pg, redis, the_plan, rng, recovery)
    t0 = time.monotonic()
    loads = []
    for at, what, item in timeline(the_plan, kinds, mode["window"], rng):
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        if what == "start":
            start(item)
            if item.shape == "signals":
                schedule_signals(signaller, item, rng)
        else:
            faults.inject(item)
            loads.append(round(os.getloadavg()[0], 2))
    faults.join_restarts()
    for p in the_plan.of("cancellable"):
        if not p.cancel_sent:
            cancel(p)
    run_ids = list(the_plan.by_id)
    stuck = wait_ended(run_ids, SETTLE[args.mode])
    settled_at = time.monotonic()
    recovery.wait_all(60)
    signaller.stop()
    recovery.stop()
    connections.close_all()
    failures, figures = verify(the_plan)
    failures += extra_failures(faults, signaller, recovery)
    if stuck:
        failures.insert(0, f"runs not ended {SETTLE[args.mode]:.0f}s after the last start:\n{stuck}")
    return {
        "mode": args.mode,
        **figures,
        "faults_injected": dict(Counter(kinds)),
        "excluded_fault_kinds": sorted(excluded),
        "signals_sent": signaller.sent,
        "late_results_accepted": faults.late_accepted,
        "recovery": recovery_figures(recovery),
        "load_avg_at_faults": loads,
        "workload_s": round(settled_at - t0, 1),
        "process_exits": cluster.exits,
        "restarts": cluster.restarts,
        "faults": [h.report() for h in recovery.hits],
        "failures": failures,
    }


def extra_failures(faults: Faults, signaller: Signaller, recovery: Recovery) -> list[str]:
    out = [f"signal not sent: {e}" for e in signaller.errors]
    if faults.late_accepted:
        out.append(f"{faults.late_accepted} late step results were accepted after their step had settled")
    out += [f"fault {h.kind} never recovered: {h.detail}" for h in recovery.stuck]
    out += [f"fault {h.kind} ({h.detail}) not recovered when the runs ended" for h in recovery.open()]
    return out


def recovery_figures(recovery: Recovery) -> dict[str, Any]:
    """Worst and median time from a fault until the work it hit moved on, overall and per kind."""
    per: dict[str, list[float]] = {}
    first: dict[str, list[float]] = {}
    for h in recovery.hits:
        r = h.report()
        if r["recovery_s"] is not None and (h.steps or h.runs):
            per.setdefault(h.kind, []).append(r["recovery_s"])
        if r["first_progress_s"] is not None:
            first.setdefault(h.kind, []).append(r["first_progress_s"])
    all_s = [v for vs in per.values() for v in vs]
    return {
        "worst_s": max(all_s) if all_s else None,
        "median_s": statistics.median(all_s) if all_s else None,
        "worst_by_kind_s": {k: max(v) for k, v in sorted(per.items())},
        "worst_first_progress_by_kind_s": {k: max(v) for k, v in sorted(first.items())},
    }
