"""Measurements of a bare Celery chain of three no-op tasks (the workers must be running).

python -m bench.peer_celery chain --workflows 1000 --reps 3
python -m bench.peer_celery isolated --samples 100
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

from bench import common, probe, tasks
from bench.celery_app import app  # noqa: F401  (makes the bench app current)


def _ends(prefix: str) -> dict[str, float]:
    return {
        k.decode(): float(v) for k, v in probe.client().hgetall("bench:t3").items() if k.decode().startswith(prefix)
    }


def chain_burst(prefix: str, n: int, timeout: float) -> dict[str, Any]:
    starts: dict[str, float] = {}
    t0 = time.time()
    for i in range(n):
        key = f"{prefix}-{i}"
        starts[key] = time.time()
        tasks.start_chain(key, False)
    started = time.time()
    common.wait_for(lambda: len(_ends(prefix + "-")) >= n, f"{n} chains", timeout, interval=0.1)
    ends = _ends(prefix + "-")
    firsts = probe.first_times()
    lat = [(firsts[k] - starts[k]) * 1000 for k in starts if k in firsts]
    elapsed = max(ends.values()) - t0
    return {
        "seconds": elapsed,
        "start_seconds": started - t0,
        "workflows_per_s": n / elapsed,
        "first_step_ms_p50": common.percentile(lat, 50),
        "first_step_ms_p99": common.percentile(lat, 99),
    }


def cmd_chain(args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    chain_burst(f"cwarm-{tag}", args.warmup, args.timeout)
    reps = [chain_burst(f"c-{tag}-{rep}", args.workflows, args.timeout) for rep in range(args.reps)]
    return {
        "workflows": args.workflows,
        "reps": args.reps,
        "workflows_per_s": common.summary([r["workflows_per_s"] for r in reps]),
        "first_step_ms_p50": common.summary([r["first_step_ms_p50"] for r in reps]),
        "first_step_ms_p99": common.summary([r["first_step_ms_p99"] for r in reps]),
        "start_seconds": common.summary([r["start_seconds"] for r in reps]),
    }


def cmd_isolated(args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    prefix = f"ciso-{tag}"
    starts: dict[str, float] = {}
    for i in range(args.warmup + args.samples):
        key = f"{prefix}-{i}" if i >= args.warmup else f"cisowarm-{tag}-{i}"
        t = time.time()
        tasks.start_chain(key, True)
        probe.wait_done(key)
        if i >= args.warmup:
            starts[key] = t
    ends = _ends(prefix + "-")
    firsts = probe.first_times()
    lat = [(firsts[k] - starts[k]) * 1000 for k in starts]
    e2e = [(ends[k] - starts[k]) * 1000 for k in starts]
    return {
        "samples": args.samples,
        "first_step_ms": {"p50": common.percentile(lat, 50), "p99": common.percentile(lat, 99)},
        "end_to_end_ms": {"p50": common.percentile(e2e, 50), "p99": common.percentile(e2e, 99)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peer_celery")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("chain")
    p.add_argument("--workflows", type=int, default=1000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--timeout", type=float, default=300)
    p = sub.add_parser("isolated")
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    common.emit({"chain": cmd_chain, "isolated": cmd_isolated}[args.cmd](args))


if __name__ == "__main__":
    main()
