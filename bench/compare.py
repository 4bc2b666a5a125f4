"""Two revisions of durable/, paired: is the work tree as fast as a baseline revision?

    bench/.venv/bin/python -m bench.compare --base 9bc6bb8              # standard sizes
    bench/.venv/bin/python -m bench.compare --base HEAD~5 --only w1,w4 --size quick

Each revision gets its own database (migrated by its own code) in one private
PostgreSQL cluster, and its own measuring processes; every repetition runs
the same workload on both, in alternating order, and the ratio work tree /
base is taken per repetition, so load that drifts during the run moves both
sides of a pair alike. Workloads (as ``./bench/run`` defines them):

- w1: 3 local steps, completion-signal mode and caller-thread mode (throughput);
- w3: 100 local steps per workflow, 10 workflows per repetition (throughput);
- w4: 3 dispatched steps on ``celery worker -c 2`` started from the same
  revision for each repetition (throughput);
- w5: sleepers woken by two ``durable_worker`` from the same revision
  (lateness of the last wake; lower is better, so its ratio is inverted);
- w6: statements and commits per in-process step of the work tree (not paired).

Prints per workload both medians (min-max), the paired ratio (median, min,
max; above 1.0 the work tree is faster) and the ratio of medians, and writes
``bench/results/compare-<time>.json`` with the load average of every
repetition and ``"noisy": true`` when the load exceeded the cores.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import PrivatePostgres
from bench.run import (
    BENCH,
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
    "standard": {"w1": 100, "w1_reps": 7, "w3": 10, "w3_reps": 5, "w4": 200, "w4_reps": 5, "w5": 2000, "w5_reps": 3},
    "quick": {"w1": 20, "w1_reps": 2, "w3": 2, "w3_reps": 2, "w4": 40, "w4_reps": 1, "w5": 200, "w5_reps": 1},
}
SIDES = ("base", "head")


def _harness(tmp: Path, side: str, rev: str | None, private: PrivatePostgres) -> tuple[Harness, str]:
    args = argparse.Namespace(rev=rev, pg="private", redis_url=DEFAULT_REDIS, dbos_url=DEFAULT_DBOS_DB)
    args.database_url = f"{private.url}/bench_{side}"
    root = tmp / side
    root.mkdir()
    pythonpath, code = code_under_test(args, root)
    (root / "logs").mkdir()
    h = Harness(args, root / "logs", pythonpath)
    reset_database(args.database_url)
    subprocess.run([PY, "-m", "django", "migrate", "-v0"], env=h.env(), cwd=h.logdir, check=True)
    return h, code


def _alternate(reps: int, measure: Callable[[str], dict[str, Any]]) -> tuple[dict[str, list[Any]], list[float]]:
    raw: dict[str, list[Any]] = {side: [] for side in SIDES}
    loads: list[float] = []
    for rep in range(reps):
        for side in SIDES if rep % 2 == 0 else tuple(reversed(SIDES)):
            raw[side].append(measure(side))
            loads.append(round(os.getloadavg()[0], 2))
    return raw, loads


def _compare(raw: dict[str, list[float]], loads: list[float], higher_is_better: bool = True) -> dict[str, Any]:
    base, head = raw["base"], raw["head"]
    paired = [(h / b if higher_is_better else b / h) for b, h in zip(base, head, strict=True)]
    of_medians = statistics.median(head) / statistics.median(base)
    return {
        "base": summary(base),
        "head": summary(head),
        "head_vs_base_paired": summary(paired),
        "head_vs_base_of_medians": of_medians if higher_is_better else 1 / of_medians,
        "higher_is_better": higher_is_better,
        "loadavg_1m": summary(loads),
    }


def run_inproc(hs: dict[str, Harness], mode: str, workflows: int, steps: int, reps: int) -> dict[str, Any]:
    argv = ["inproc", "--mode", mode, "--workflows", workflows, "--steps", steps, "--reps", 1]
    for h in hs.values():
        h.server("ours").call(*argv, "--warmup", max(2, 20 // steps))
    raw, loads = _alternate(reps, lambda side: hs[side].server("ours").call(*argv, "--warmup", 1))
    rates = {side: [r["workflows_per_s"]["median"] for r in raw[side]] for side in SIDES}
    return {**_compare(rates, loads), "workflows": workflows, "steps": steps, "mode": mode}


def run_w4(hs: dict[str, Harness], n: int, reps: int) -> dict[str, Any]:
    def measure(side: str) -> dict[str, Any]:
        h = hs[side]
        worker = h.celery_worker()
        try:
            return h.measure(
                "ours", "dispatched", "--workflows", n, "--reps", 1, "--warmup", 10, BENCH_TRANSPORT="celery"
            )
        finally:
            h.stop(worker)

    for h in hs.values():
        h.stop_servers()
    raw, loads = _alternate(reps, measure)
    rates = {side: [r["workflows_per_s"]["median"] for r in raw[side]] for side in SIDES}
    return {**_compare(rates, loads), "workflows": n}


def run_w5(hs: dict[str, Harness], runs: int, reps: int) -> dict[str, Any]:
    def measure(side: str) -> dict[str, Any]:
        h = hs[side]
        workers = h.durable_workers(2)
        try:
            return h.measure("ours", "timers", "--runs", runs, "--lead", 15, BENCH_TRANSPORT="manual")
        finally:
            for w in workers:
                h.stop(w)

    raw, loads = _alternate(reps, measure)
    late = {side: [max(r["last_late_ms"], 1.0) for r in raw[side]] for side in SIDES}
    return {**_compare(late, loads, higher_is_better=False), "runs": runs, "metric": "last_late_ms"}


def _line(name: str, r: dict[str, Any]) -> str:
    p, unit = r["head_vs_base_paired"], "/s" if r["higher_is_better"] else " ms"
    return (
        f"{name:<12} base {r['base']['median']:8.1f}{unit} ({r['base']['min']:.1f}-{r['base']['max']:.1f})  "
        f"head {r['head']['median']:8.1f}{unit} ({r['head']['min']:.1f}-{r['head']['max']:.1f})  "
        f"head/base paired {p['median']:.3f} ({p['min']:.3f}-{p['max']:.3f}), of medians "
        f"{r['head_vs_base_of_medians']:.3f}; load {r['loadavg_1m']['median']:.1f} (max {r['loadavg_1m']['max']:.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("--base", required=True, help="the baseline revision (git)")
    parser.add_argument("--only", default="w1,w3,w4,w5,w6")
    parser.add_argument("--size", choices=sorted(SIZES), default="standard")
    parser.add_argument("--out", default=str(BENCH / "results"))
    args = parser.parse_args()
    only, s = [w.strip() for w in args.only.split(",")], SIZES[args.size]
    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-compare-"))
    private = PrivatePostgres(tmp)
    started = datetime.now(UTC)
    results: dict[str, Any] = {}
    try:
        reset_redis(DEFAULT_REDIS)
        base, base_code = _harness(tmp, "base", args.base, private)
        head, head_code = _harness(tmp, "head", None, private)
        hs = {"base": base, "head": head}
        info = machine(copy.copy(head.args), head_code)
        info["base_code"] = base_code
        if "w1" in only:
            results["w1_signal"] = run_inproc(hs, "signal", s["w1"], 3, s["w1_reps"])
            results["w1_caller"] = run_inproc(hs, "caller", s["w1"], 3, s["w1_reps"])
        if "w3" in only:
            results["w3_signal"] = run_inproc(hs, "signal", s["w3"], 100, s["w3_reps"])
        if "w6" in only:
            results["w6_head"] = head.server("ours").call("counts-inproc", "--workflows", 30)
        if "w4" in only:
            results["w4"] = run_w4(hs, s["w4"], s["w4_reps"])
        if "w5" in only:
            results["w5"] = run_w5(hs, s["w5"], s["w5_reps"])
    finally:
        for h in (locals().get("base"), locals().get("head")):
            if h is not None:
                h.stop_all()
        private.stop()
    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    paired = {k: v for k, v in results.items() if "head_vs_base_paired" in v}
    noisy = any(r["loadavg_1m"]["max"] > (os.cpu_count() or 1) for r in paired.values())
    print(f"\nmachine: {info['cpu']}, {info['cores']} cores; commit {info['commit_latency']}")
    print(f"base: {base_code}\nhead: {head_code}")
    for name, r in paired.items():
        print(_line(name, r))
    if "w6_head" in results:
        w6 = results["w6_head"]
        print(f"w6 (head)    per in-process step: {json.dumps(w6.get('per_step', w6))[:200]}")
    if noisy:
        print("WARNING: the load average exceeded the cores during the run; the ratios are not conclusive")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"compare-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    doc = {"started_at": started.isoformat(), "base": args.base, "size": args.size, "sizes": s, "noisy": noisy}
    doc.update(machine=info, results=results)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
