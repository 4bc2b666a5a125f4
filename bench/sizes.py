"""The sizes of ``./bench/run``'s workloads (``--size``), and ``--set KEY=VALUE`` overrides."""

from __future__ import annotations

from typing import Any

# Every workload, in the order a run measures them (w7 last: it builds large tables of its own).
WORKLOADS = ("w1", "w2", "w3", "w6", "w4", "w5", "w8", "w7")

# One row per size: (quick, standard, issue). quick tries the harness in a few minutes; standard
# takes about a quarter of an hour on 2 cores; issue has the sizes (1,000 workflows per
# repetition, 10,000 timers, 1,000,000 finished runs, 100,000 sleepers: about an hour here).
_TABLE: dict[str, tuple[Any, Any, Any]] = {
    "w1_workflows": (30, 50, 1000),
    "w1_reps": (3, 5, 5),
    "w1_alt_workflows": (20, 30, 1000),  # caller-thread, direct call and wait_for_run modes
    "w1_alt_reps": (2, 3, 5),
    "w2_workflows": (40, 80, 1000),
    "w2_reps": (3, 5, 5),
    "w2_alt_reps": (2, 3, 5),
    "w3_min_seconds": (2.0, 2.0, 2.0),  # each repetition of 100-step workflows lasts at least this
    "w3_reps": (3, 5, 5),
    "w3_alt_reps": (2, 3, 5),
    "w4_workflows": (60, 100, 1000),
    "w4_reps": (2, 5, 5),
    "w4_iso": (20, 50, 100),
    "w4_iso_dbos": (5, 10, 20),
    "w5_runs": (500, 1000, 10000),
    "w5_lead": (10, 15, 60),
    "w5_reps": (2, 5, 5),
    "w6_workflows": (10, 30, 30),
    "w6_dispatched": (5, 10, 15),
    "w7_runs": (20_000, 200_000, 1_000_000),  # finished runs in the full table
    "w7_samples": (300, 1000, 2000),  # starts timed per repetition
    "w7_reps": (2, 3, 5),
    "w8_runs": (2000, 20_000, 100_000),  # sleepers due at the same moment
    "w8_lead": (40, 90, 400),  # seconds from the first start to the due time
    "w8_reps": (1, 1, 1),
}
SIZES: dict[str, dict[str, Any]] = {
    name: {key: values[i] for key, values in _TABLE.items()} for i, name in enumerate(("quick", "standard", "issue"))
}


def parse_overrides(pairs: list[str], base: dict[str, Any]) -> dict[str, Any]:
    """``["w7_runs=50000", ...]`` as sizes, each of the type the chosen size has; unknown keys refused."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in base:
            raise SystemExit(f"--set {pair!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(base))}")
        try:
            out[key] = type(base[key])(raw.replace("_", ""))
        except ValueError:
            raise SystemExit(f"--set {pair!r}: {raw!r} is not a {type(base[key]).__name__}") from None
    return out
