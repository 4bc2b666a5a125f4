"""Two revisions of durable/, paired: is the work tree as fast as a baseline revision?

    bench/.venv/bin/python -m bench.compare --base 9bc6bb8              # standard sizes
    bench/.venv/bin/python -m bench.compare --base HEAD~5 --only w1,w4 --size quick
    bench/.venv/bin/python -m bench.compare --base 9bc6bb8 --only w4 --reps w4=20   # more pairs

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
import json
import os
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import harness
from bench.common import PrivatePostgres
from bench.conditions import describe, machine, warn_if_noisy, write_result
from bench.harness import Harness
from bench.pairing import alternate, ratios

SIZES = {
    "standard": {"w1": 100, "w1_reps": 7, "w3": 10, "w3_reps": 5, "w4": 200, "w4_reps": 5, "w5": 2000, "w5_reps": 3},
    "quick": {"w1": 20, "w1_reps": 2, "w3": 2, "w3_reps": 2, "w4": 40, "w4_reps": 1, "w5": 200, "w5_reps": 1},
}
SIDES = ("base", "head")


def _harness(tmp: Path, side: str, rev: str | None, private: PrivatePostgres, redis: str) -> tuple[Harness, str]:
    args = argparse.Namespace(rev=rev, pg="private", redis_url=redis, dbos_url=harness.DEFAULT_DBOS_DB)
    args.database_url = f"{private.url}/bench_{side}"
    root = tmp / side
    root.mkdir()
    pythonpath, code = harness.code_under_test(args, root)
    (root / "logs").mkdir()
    h = Harness(args, root / "logs", pythonpath)
    harness.reset_database(args.database_url)
    h.run([harness.PY, "-m", "django", "migrate", "-v0"])
    return h, code


def _alternate(
    hs: dict[str, Harness], reps: int, measure: Callable[[str], dict[str, Any]]
) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
    """Both sides, alternating order; the head's database samples the conditions after every repetition."""
    return alternate(reps, SIDES, lambda side, rep: measure(side), hs["head"].sample)


def _compare(
    raw: dict[str, list[float]], samples: list[dict[str, Any]], higher_is_better: bool = True
) -> dict[str, Any]:
    r = ratios(raw["head"], raw["base"], higher_is_better=higher_is_better)
    cond = describe(samples)
    return {
        "base": r["peer"],
        "head": r["ours"],
        "head_vs_base_paired": r["paired"],
        "head_vs_base_of_medians": r["of_medians"],
        "higher_is_better": higher_is_better,
        "conditions": cond,
        "loadavg_1m": cond["loadavg_1m"],
    }


def run_inproc(hs: dict[str, Harness], mode: str, workflows: int, steps: int, reps: int) -> dict[str, Any]:
    argv = ["inproc", "--mode", mode, "--workflows", workflows, "--steps", steps, "--reps", 1]
    for h in hs.values():
        h.server("ours").call(*argv, "--warmup", max(2, 20 // steps))
    raw, samples = _alternate(hs, reps, lambda side: hs[side].server("ours").call(*argv, "--warmup", 1))
    rates = {side: [r["workflows_per_s"]["median"] for r in raw[side]] for side in SIDES}
    return {**_compare(rates, samples), "workflows": workflows, "steps": steps, "mode": mode}


def run_w4(hs: dict[str, Harness], n: int, reps: int) -> dict[str, Any]:
    def measure(side: str) -> dict[str, Any]:
        return hs[side].burst_on_new_worker(n)

    for h in hs.values():
        h.stop_servers()
    raw, samples = _alternate(hs, reps, measure)
    rates = {side: [r["workflows_per_s"]["median"] for r in raw[side]] for side in SIDES}
    return {**_compare(rates, samples), "workflows": n}


def run_w5(hs: dict[str, Harness], runs: int, reps: int) -> dict[str, Any]:
    def measure(side: str) -> dict[str, Any]:
        h = hs[side]
        workers = h.durable_workers(2)
        try:
            return h.measure("ours", "timers", "--runs", runs, "--lead", 15, BENCH_TRANSPORT="manual")
        finally:
            for w in workers:
                h.stop(w)

    raw, samples = _alternate(hs, reps, measure)
    late = {side: [max(r["last_late_ms"], 1.0) for r in raw[side]] for side in SIDES}
    return {**_compare(late, samples, higher_is_better=False), "runs": runs, "metric": "last_late_ms"}


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
    parser.add_argument(
        "--reps", action="append", default=[], metavar="W=N", help="repetitions of a workload, e.g. w4=20; repeatable"
    )
    parser.add_argument("--out", default=str(harness.BENCH / "results"))
    args = parser.parse_args()
    only, s = [w.strip() for w in args.only.split(",")], dict(SIZES[args.size])
    for item in args.reps:
        name, _, count = item.partition("=")
        if f"{name}_reps" not in s or not count.isdigit() or int(count) < 1:
            parser.error(f"--reps {item!r}: expected W=N with W one of w1, w3, w4, w5 and N a positive integer")
        s[f"{name}_reps"] = int(count)
    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-compare-"))
    private = PrivatePostgres(tmp)
    redis_url, redis = harness.bench_redis(tmp)
    started = datetime.now(UTC)
    results: dict[str, Any] = {}
    try:
        harness.reset_redis(redis_url)
        base, base_code = _harness(tmp, "base", args.base, private, redis_url)
        head, head_code = _harness(tmp, "head", None, private, redis_url)
        hs = {"base": base, "head": head}
        info = machine(head.args.database_url, redis_url, head_code, private=True)
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
        if redis is not None:
            redis.stop()
    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    paired = {k: v for k, v in results.items() if "head_vs_base_paired" in v}
    conditions = head.conditions.report()
    noisy = conditions["noisy"]
    print(f"\nmachine: {info['cpu']}, {info['cores']} cores; commit {info['commit_latency']}")
    print(f"base: {base_code}\nhead: {head_code}")
    for name, r in paired.items():
        print(_line(name, r))
    if "w6_head" in results:
        w6 = results["w6_head"]
        print(f"w6 (head)    per in-process step: {json.dumps(w6.get('per_step', w6))[:200]}")
    warn_if_noisy(conditions)
    doc = {"started_at": started.isoformat(), "base": args.base, "size": args.size, "sizes": s, "noisy": noisy}
    doc.update(machine=info, conditions=conditions, results=results)
    print(f"results: {write_result(args.out, 'compare-', started, doc)}")


if __name__ == "__main__":
    main()
