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
import json
import os
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import PrivatePostgres
from bench.run import (
    BENCH,
    DEFAULT_DB,
    DEFAULT_DBOS_DB,
    DEFAULT_REDIS,
    PY,
    Harness,
    code_under_test,
    machine,
    reset_database,
    reset_redis,
    summary,
)

SIZES = {
    "standard": {"w1_workflows": 200, "w1_reps": 9, "w4_workflows": 200, "w4_reps": 5},
    "quick": {"w1_workflows": 20, "w1_reps": 2, "w4_workflows": 60, "w4_reps": 2},
}


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _ratios(raw: dict[str, list[dict[str, Any]]], metric: str) -> dict[str, Any]:
    on = [r[metric]["median"] for r in raw["on"]]
    off = [r[metric]["median"] for r in raw["off"]]
    paired = [a / b for a, b in zip(on, off, strict=True)]
    return {
        "off": summary(off),
        "on": summary(on),
        "ratio_on_off_paired": summary(paired),
        "ratio_of_medians": statistics.median(on) / statistics.median(off),
    }


def run_w1(h: Harness, s: dict[str, int], mode: str) -> dict[str, Any]:
    server = h.server("ours")  # BENCH_OTEL=1: the SDK and the OpenTelemetry observer in this process
    argv = ["inproc", "--mode", mode, "--workflows", s["w1_workflows"], "--reps", 1]
    server.call(*argv, "--warmup", 20)
    raw: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    loads: list[float] = []
    for rep in range(s["w1_reps"]):
        order = ("off", "on") if rep % 2 == 0 else ("on", "off")
        for side in order:
            extra = ["--observer", "off"] if side == "off" else []
            raw[side].append(server.call(*argv, "--warmup", 3, *extra))
            loads.append(_load())
    return {**_ratios(raw, "workflows_per_s"), "loadavg_1m": summary(loads), "workflows": s["w1_workflows"]}


def run_w4(h: Harness, s: dict[str, int]) -> dict[str, Any]:
    h.stop_servers()
    raw: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    loads: list[float] = []
    n = s["w4_workflows"]
    for rep in range(s["w4_reps"]):
        order = ("off", "on") if rep % 2 == 0 else ("on", "off")
        for side in order:
            otel = "1" if side == "on" else ""
            os.environ["BENCH_OTEL"] = otel  # inherited by the worker and the starter
            worker = h.celery_worker()
            try:
                raw[side].append(
                    h.measure(
                        "ours", "dispatched", "--workflows", n, "--reps", 1, "--warmup", 10, BENCH_TRANSPORT="celery"
                    )
                )
            finally:
                h.stop(worker)
            loads.append(_load())
    os.environ["BENCH_OTEL"] = "1"
    return {**_ratios(raw, "workflows_per_s"), "loadavg_1m": summary(loads), "workflows": n}


def _line(name: str, r: dict[str, Any]) -> str:
    p = r["ratio_on_off_paired"]
    return (
        f"{name:<28} off {r['off']['median']:8.1f}/s ({r['off']['min']:.1f}-{r['off']['max']:.1f})  "
        f"on {r['on']['median']:8.1f}/s ({r['on']['min']:.1f}-{r['on']['max']:.1f})  "
        f"on/off paired {p['median']:.3f} ({p['min']:.3f}-{p['max']:.3f}), of medians {r['ratio_of_medians']:.3f}, "
        f"load {r['loadavg_1m']['median']:.1f} (max {r['loadavg_1m']['max']:.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.otel", description=__doc__)
    parser.add_argument("--size", choices=sorted(SIZES), default="standard")
    parser.add_argument("--out", default=str(BENCH / "results"))
    args = parser.parse_args()
    args.rev, args.pg, args.redis_url = None, "private", DEFAULT_REDIS
    args.database_url, args.dbos_url = DEFAULT_DB, DEFAULT_DBOS_DB
    os.environ["BENCH_OTEL"] = "1"
    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-otel-"))
    pythonpath, code = code_under_test(args, tmp)
    (tmp / "logs").mkdir()
    private = PrivatePostgres(tmp)
    args.database_url, args.dbos_url = f"{private.url}/bench", f"{private.url}/bench_dbos"
    h = Harness(args, tmp / "logs", pythonpath)
    started = datetime.now(UTC)
    results: dict[str, Any] = {}
    try:
        reset_database(args.database_url)
        reset_redis(args.redis_url)
        subprocess.run([PY, "-m", "django", "migrate", "-v0"], env=h.env(), cwd=h.logdir, check=True)
        info = machine(args, code)
        s = SIZES[args.size]
        results["w1_signal"] = run_w1(h, s, "signal")
        results["w1_caller"] = run_w1(h, s, "caller")
        results["w4_dispatched"] = run_w4(h, s)
    finally:
        h.stop_all()
        private.stop()
    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    noisy = max(r["loadavg_1m"]["max"] for r in results.values()) > (os.cpu_count() or 1)
    print(f"\nmachine: {info['cpu']}, {info['cores']} cores; {info['durable_code']}; commit {info['commit_latency']}")
    for name, r in results.items():
        print(_line(name, r))
    if noisy:
        print("WARNING: the load average exceeded the cores during the run; the ratios are not conclusive")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"otel-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    doc = {"started_at": started.isoformat(), "size": args.size, "sizes": s, "noisy": noisy}
    doc.update(
        machine=info, results=results, logs=str(h.logdir), finished_in_s=round(time.time() - started.timestamp())
    )
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
