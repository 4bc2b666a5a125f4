"""The workloads of ``./bench/run`` that need worker processes or large tables (w4, w5, w7, w8).

- w4: 3 dispatched steps on ``celery worker -c 2`` against a DBOS queue on two
  DBOS processes (at DBOS's default polling interval and at its tightest) and a
  bare Celery chain; repetitions alternate.
- w5 / w8: sleepers all due at one moment, two ``durable_worker`` processes
  (w5: the standard 10,000; w8: 100,000 at the issue's size).
- w7: ``durable.start()`` latency with a table of finished runs against an
  empty one: two databases of their own, repetitions alternating between them.
"""

from __future__ import annotations

from typing import Any

from bench.harness import PY, Harness, reset_database
from bench.pairing import alternate
from bench.workloads import summarise, summary_of

BURST_METRICS = ("workflows_per_s", "first_step_ms_p50", "first_step_ms_p99", "start_seconds")
TIMER_METRICS = ("last_late_ms", "p50_late_ms", "p99_late_ms", "first_late_ms", "woken_per_s")
START_METRICS = ("p50_ms", "p99_ms", "mean_ms")


def run_w4(h: Harness, s: dict[str, Any]) -> dict[str, Any]:
    """Celery worker (-c 2) and two DBOS queue workers run side by side; repetitions alternate."""
    n, tight = s["w4_workflows"], h.args.dbos_tight_poll
    h.stop_servers()  # the in-process measuring processes are done; give their CPU back
    worker = h.celery_worker()
    dbos_workers = h.dbos_workers(2)
    out: dict[str, Any] = {}
    try:
        out["ours_isolated"] = h.measure("ours", "isolated", "--samples", s["w4_iso"], BENCH_TRANSPORT="celery")
        out["chain_isolated"] = h.measure("peer_celery", "isolated", "--samples", s["w4_iso"])
        out["dbos_isolated"] = h.measure("peer_dbos", "isolated", "--samples", s["w4_iso_dbos"])
        out["dbos_tight_isolated"] = h.measure("peer_dbos", "isolated", "--samples", s["w4_iso_dbos"], "--poll", tight)

        def measure(key: str, rep: int) -> dict[str, Any]:
            warm = ["--reps", 1, "--warmup", 20 if rep == 0 else 5, "--workflows", n]
            if key == "ours":
                return h.measure("ours", "dispatched", *warm, BENCH_TRANSPORT="celery")
            if key == "chain":
                return h.measure("peer_celery", "chain", *warm)
            return h.measure("peer_dbos", "queue", *warm, *(["--poll", tight] if key == "dbos_tight" else []))

        raw, _ = alternate(s["w4_reps"], ["ours", "chain", "dbos", "dbos_tight"], measure, h.sample)
        out.update({key: summarise(results, BURST_METRICS) for key, results in raw.items()})
    finally:
        h.stop(worker)
        for w in dbos_workers:
            h.stop(w)
    out["setup"] = (
        "celery -A bench.celery_app worker -c 2 (prefork) on queues durable,bench; "
        "2 DBOS processes (python -m bench.dbos_app worker) on one DBOS queue, no concurrency limit, "
        f"polling every 1 s (DBOS's default) or every {tight} s (dbos_tight: set on the queue for that "
        "repetition only); all started for the whole workload, repetitions alternate"
    )
    return out


def sleepers(h: Harness, runs: int, lead: float, reps: int) -> dict[str, Any]:
    """``reps`` times ``runs`` sleepers due at one moment, two ``durable_worker`` processes waking them."""
    workers = h.durable_workers(2)
    try:

        def measure(key: str, rep: int) -> dict[str, Any]:
            return h.measure("ours", "timers", "--runs", runs, "--lead", lead, BENCH_TRANSPORT="manual")

        raw, _ = alternate(reps, ["ours"], measure, h.sample)
    finally:
        for w in workers:
            h.stop(w)
    ours = summarise(raw["ours"], TIMER_METRICS)
    ours.update(runs=runs, lead_s=lead, raw=raw["ours"])
    # What a wake costs in CPU, all told (server, workers, the rest of the machine), and the wakes a
    # second the machine's cores would allow at that cost: the bound on woken_per_s.
    costs = [r.get("cpu") or {} for r in raw["ours"]]
    ours["cpu_ms_per_wake"] = summary_of([(c.get("cpu_ms_per_unit") or {}).get("machine") for c in costs])
    ours["wakes_per_s_cores_allow"] = summary_of([c.get("units_per_s_at_full_cores") for c in costs])
    ours["all_suspended_before_due"] = all(r["all_suspended_before_due"] for r in raw["ours"])
    return {
        "ours": ours,
        "setup": "2 durable_worker processes (inline transport, default WORKER_INTERVAL 1s, SWEEP_BATCH 100); "
        "runs started by a separate process with the manual transport; each repetition a new set of sleepers",
    }


def run_w5(h: Harness, s: dict[str, Any]) -> dict[str, Any]:
    return sleepers(h, s["w5_runs"], s["w5_lead"], s["w5_reps"])


def run_w8(h: Harness, s: dict[str, Any]) -> dict[str, Any]:
    return sleepers(h, s["w8_runs"], s["w8_lead"], s["w8_reps"])


def run_w7(h: Harness, s: dict[str, Any]) -> dict[str, Any]:
    """Start latency: an empty runs table against one holding ``w7_runs`` finished runs.

    Two databases of their own (``<bench>_w7empty``, ``<bench>_w7full``), both
    migrated; the full one seeded by ``INSERT ... SELECT generate_series`` and
    analysed. Repetitions alternate between them; each is a fresh process
    timing ``w7_samples`` ``durable.start()`` calls (manual transport: the
    start's own statements only), whose runs stay in the table.
    """
    h.stop_servers()
    urls = {"empty": h.args.database_url + "_w7empty", "full": h.args.database_url + "_w7full"}
    for url in urls.values():
        reset_database(url)
        h.run([PY, "-m", "django", "migrate", "-v0"], DATABASE_URL=url)
    seeded = h.measure("scale", "seed", "--runs", s["w7_runs"], DATABASE_URL=urls["full"])

    def measure(key: str, rep: int) -> dict[str, Any]:
        argv = ["starts", "--samples", s["w7_samples"], "--warmup", 50]
        return h.measure("scale", *argv, DATABASE_URL=urls[key], BENCH_TRANSPORT="manual")

    try:
        raw, _ = alternate(s["w7_reps"], ["empty", "full"], measure, h.sample)
    finally:
        for url in urls.values():
            reset_database(url, create=False)
    out = {key: summarise(results, START_METRICS) for key, results in raw.items()}
    out["seed"] = seeded
    out["setup"] = (
        f"durable.start() on the manual transport, {s['w7_samples']} starts per repetition, one at a time; "
        f"'full': {s['w7_runs']:,} completed runs inserted first; the two databases dropped afterwards"
    )
    return out
