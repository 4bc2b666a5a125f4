"""What tracing and metrics cost: workloads 1 and 4 with OpenTelemetry on and off, paired.

    bench/.venv/bin/python -m bench.otel                 # standard sizes (about 8 minutes on 2 cores)
    bench/.venv/bin/python -m bench.otel --size quick    # try the harness

"On" is ``DURABLE["OPENTELEMETRY"] = True`` with the OpenTelemetry SDK installed
in every process (spans through a batch processor to an exporter that drops
them, metrics to a reader nobody collects: what a deployment pays for
recording, without its network; bench/apps.py). "Off" is the engine's no-op
observer.

Pairing, so that a drifting machine does not decide the answer:

- workload 1 (3 local steps; the completion-signal and the caller-thread
  modes): one measuring process with the SDK installed; each repetition
  runs the same batch with the observer off and on, in alternating order, and
  the ratio on/off is taken per repetition;
- workload 4 (3 dispatched steps on ``celery worker -c 2``): each repetition
  starts a worker with OpenTelemetry on or off and measures a burst from a
  starter process configured the same way, again alternating the order.

Prints, and writes to ``bench/results/otel-<timestamp>.json``: per workload the
medians (min/max) of both sides, the median of the per-repetition ratios
(throughput on/off; 1.0 = no cost), the load average around every repetition,
and a warning when the load exceeded the cores.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import harness
from bench.common import PrivatePostgres
from bench.conditions import describe, machine, warn_if_noisy, write_result
from bench.harness import Harness
from bench.pairing import alternate, ratios


@dataclass(frozen=True)
class Feature:
    """What a paired on/off benchmark switches (bench.codec reuses this one's harness).

    ``name`` names the results file; ``w1_flags`` are the ``bench.ours inproc`` flags of each side
    (one measuring process configured for "on"); ``env_var`` configures w4's worker and starter.
    """

    name: str
    w1_flags: dict[str, list[str]]
    env_var: str


OTEL = Feature("otel", {"off": ["--observer", "off"], "on": []}, "BENCH_OTEL")

SIZES = {
    "standard": {"w1_workflows": 200, "w1_reps": 9, "w4_workflows": 200, "w4_reps": 5},
    "quick": {"w1_workflows": 20, "w1_reps": 2, "w4_workflows": 60, "w4_reps": 2},
}


def _ratios(raw: dict[str, list[dict[str, Any]]], metric: str, samples: list[dict[str, Any]]) -> dict[str, Any]:
    r = ratios(
        [x[metric]["median"] for x in raw["on"]], [x[metric]["median"] for x in raw["off"]], higher_is_better=True
    )
    cond = describe(samples)
    return {
        "off": r["peer"],
        "on": r["ours"],
        "ratio_on_off_paired": r["paired"],
        "ratio_of_medians": r["of_medians"],
        "conditions": cond,
        "loadavg_1m": cond["loadavg_1m"],
    }


def run_w1(h: Harness, s: dict[str, int], mode: str, feature: Feature = OTEL) -> dict[str, Any]:
    server = h.server("ours")  # the feature's env var is set: this process is configured for "on"
    argv = ["inproc", "--mode", mode, "--workflows", s["w1_workflows"], "--reps", 1]
    server.call(*argv, "--warmup", 20)

    def measure(side: str, rep: int) -> dict[str, Any]:
        return server.call(*argv, "--warmup", 3, *feature.w1_flags[side])

    raw, samples = alternate(s["w1_reps"], ["off", "on"], measure, h.sample)
    return {**_ratios(raw, "workflows_per_s", samples), "workflows": s["w1_workflows"]}


def run_w4(h: Harness, s: dict[str, int], feature: Feature = OTEL) -> dict[str, Any]:
    h.stop_servers()
    n = s["w4_workflows"]

    def measure(side: str, rep: int) -> dict[str, Any]:
        os.environ[feature.env_var] = "1" if side == "on" else ""  # inherited by the worker and the starter
        return h.burst_on_new_worker(n)

    raw, samples = alternate(s["w4_reps"], ["off", "on"], measure, h.sample)
    os.environ[feature.env_var] = "1"
    return {**_ratios(raw, "workflows_per_s", samples), "workflows": n}


def _line(name: str, r: dict[str, Any]) -> str:
    p = r["ratio_on_off_paired"]
    return (
        f"{name:<28} off {r['off']['median']:8.1f}/s ({r['off']['min']:.1f}-{r['off']['max']:.1f})  "
        f"on {r['on']['median']:8.1f}/s ({r['on']['min']:.1f}-{r['on']['max']:.1f})  "
        f"on/off paired {p['median']:.3f} ({p['min']:.3f}-{p['max']:.3f}), of medians {r['ratio_of_medians']:.3f}, "
        f"load {r['loadavg_1m']['median']:.1f} (max {r['loadavg_1m']['max']:.1f})"
    )


def main(feature: Feature = OTEL, doc: str | None = __doc__) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m bench.{feature.name}", description=doc)
    parser.add_argument("--size", choices=sorted(SIZES), default="standard")
    parser.add_argument("--out", default=str(harness.BENCH / "results"))
    args = parser.parse_args()
    args.rev, args.pg = None, "private"
    args.database_url, args.dbos_url = harness.DEFAULT_DB, harness.DEFAULT_DBOS_DB
    os.environ[feature.env_var] = "1"
    tmp = Path(tempfile.mkdtemp(prefix=f"durable-bench-{feature.name}-"))
    pythonpath, code = harness.code_under_test(args, tmp)
    (tmp / "logs").mkdir()
    private = PrivatePostgres(tmp)
    args.database_url, args.dbos_url = f"{private.url}/bench", f"{private.url}/bench_dbos"
    args.redis_url, redis = harness.bench_redis(tmp)
    h = Harness(args, tmp / "logs", pythonpath)
    started = datetime.now(UTC)
    results: dict[str, Any] = {}
    try:
        harness.reset_database(args.database_url)
        harness.reset_redis(args.redis_url)
        h.run([harness.PY, "-m", "django", "migrate", "-v0"])
        info = machine(args.database_url, args.redis_url, code, private=True)
        s = SIZES[args.size]
        results["w1_signal"] = run_w1(h, s, "signal", feature)
        results["w1_caller"] = run_w1(h, s, "caller", feature)
        results["w4_dispatched"] = run_w4(h, s, feature)
    finally:
        h.stop_all()
        private.stop()
        if redis is not None:
            redis.stop()
    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    conditions = h.conditions.report()
    print(f"\nmachine: {info['cpu']}, {info['cores']} cores; {info['durable_code']}; commit {info['commit_latency']}")
    for name, r in results.items():
        print(_line(name, r))
    warn_if_noisy(conditions)
    out = {"started_at": started.isoformat(), "size": args.size, "sizes": s, "noisy": conditions["noisy"]}
    out.update(
        machine=info, conditions=conditions, results=results, logs=str(h.logdir),
        finished_in_s=round(time.time() - started.timestamp()),
    )  # fmt: skip
    print(f"results: {write_result(args.out, f'{feature.name}-', started, out)}")


if __name__ == "__main__":
    main()
