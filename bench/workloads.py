"""The in-process workloads of ``./bench/run`` (w1, w2, w3, w6), ours and DBOS's, alternating.

Each function takes the :class:`~bench.harness.Harness` and the sizes, runs
its repetitions through long-lived measuring processes (``bench.ours serve``,
``bench.peer_dbos serve``), one repetition of each configuration after
another (the order swapped every other repetition), and records the machine's
conditions (load, commit latency) after every repetition.
"""

from __future__ import annotations

import math
from typing import Any

from bench.harness import Harness
from bench.pairing import alternate

INPROC_METRICS = ("seconds", "workflows_per_s", "ms_per_step")


def summarise(results: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    """One configuration's repetitions: each metric's median/min/max/values, in repetition order.

    A measuring process reports a metric either as a number or as a summary of
    its own repetitions (one here): the repetition's figure is its median.
    """
    out = dict(results[0])
    for metric in metrics:
        values = [r[metric]["median"] if isinstance(r[metric], dict) else r[metric] for r in results]
        out[metric] = summary_of(values)
    out["reps"] = len(results)
    out["conditions"] = [r.get("conditions") for r in results]
    out.pop("wall_s", None)
    return out


def summary_of(values: list[float | None]) -> dict[str, Any]:
    from bench.common import summary

    got = summary([v for v in values if v is not None])
    got["values"] = values  # keep the repetitions aligned with the other side's
    return got


def paired(
    h: Harness,
    reps: int,
    configs: dict[str, tuple[str, list[Any]]],
    warm: tuple[int, int] = (10, 3),
) -> dict[str, Any]:
    """Alternate one repetition of each configuration, ``reps`` times; summarise each.

    ``warm``: workflows run before the measured ones, in the first repetition and in later ones.
    """

    def measure(key: str, rep: int) -> dict[str, Any]:
        module, argv = configs[key]
        return h.server(module).call(*argv, "--reps", 1, "--warmup", warm[0] if rep == 0 else warm[1])

    raw, _ = alternate(reps, list(configs), measure, h.sample)
    return {key: summarise(results, INPROC_METRICS) for key, results in raw.items()}


def run_w1(h: Harness, s: dict[str, Any]) -> dict[str, Any]:
    n, alt = ["--workflows", s["w1_workflows"]], ["--workflows", s["w1_alt_workflows"]]
    out = paired(
        h,
        s["w1_reps"],
        {
            "ours_signal": ("ours", ["inproc", "--mode", "signal", *n]),
            "dbos_start": ("peer_dbos", ["inproc", "--mode", "start", *n]),
        },
    )
    out.update(
        paired(
            h,
            s["w1_alt_reps"],
            {
                "ours_caller": ("ours", ["inproc", "--mode", "caller", *alt]),
                "dbos_direct": ("peer_dbos", ["inproc", "--mode", "direct", *alt]),
                "ours_wait_for_run": ("ours", ["inproc", "--mode", "wait_for_run", *alt]),
            },
        )
    )
    return out


def run_w2(h: Harness, s: dict[str, Any]) -> dict[str, Any]:
    common = ["--workflows", s["w2_workflows"], "--threads", 8]
    out = paired(
        h,
        s["w2_reps"],
        {
            "ours_signal": ("ours", ["inproc", "--mode", "signal", *common]),
            "dbos_start": ("peer_dbos", ["inproc", "--mode", "start", *common]),
        },
        warm=(16, 8),
    )
    out.update(
        paired(
            h,
            s["w2_alt_reps"],
            {
                "ours_caller": ("ours", ["inproc", "--mode", "caller", *common]),
                "dbos_direct": ("peer_dbos", ["inproc", "--mode", "direct", *common]),
            },
            warm=(16, 8),
        )
    )
    return out


def calibrate(h: Harness, module: str, argv: list[Any], min_seconds: float) -> int:
    """How many workflows of ``argv`` (one at a time) last at least ``min_seconds``, from one timed workflow.

    A repetition shorter than a few scheduler slices measures the scheduler:
    workload 3 times whole batches of 100-step workflows instead of one.
    """
    probe = h.server(module).call(*argv, "--workflows", 2, "--reps", 1, "--warmup", 1)
    per_workflow = probe["seconds"]["median"] / 2
    return max(1, math.ceil(min_seconds * 1.15 / max(per_workflow, 1e-6)))


def run_w3(h: Harness, s: dict[str, Any]) -> dict[str, Any]:
    steps = ["--steps", 100]
    modes = {
        "ours_signal": ("ours", ["inproc", "--mode", "signal", *steps]),
        "dbos_start": ("peer_dbos", ["inproc", "--mode", "start", *steps]),
        "ours_caller": ("ours", ["inproc", "--mode", "caller", *steps]),
        "dbos_direct": ("peer_dbos", ["inproc", "--mode", "direct", *steps]),
    }
    sized = {
        key: (module, [*argv, "--workflows", calibrate(h, module, argv, s["w3_min_seconds"])])
        for key, (module, argv) in modes.items()
    }
    out = paired(h, s["w3_reps"], {k: sized[k] for k in ("ours_signal", "dbos_start")}, warm=(1, 0))
    out.update(paired(h, s["w3_alt_reps"], {k: sized[k] for k in ("ours_caller", "dbos_direct")}, warm=(1, 0)))
    out["setup"] = (
        f"workflows of 100 local steps, one after another; each repetition of each side sized to last at "
        f"least {s['w3_min_seconds']} s (workflows per repetition: "
        + ", ".join(f"{k} {v[1][-1]}" for k, v in sized.items())
        + ")"
    )
    return out


def run_w6(h: Harness, s: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    n = s["w6_workflows"]
    out["ours_inproc"] = h.server("ours").call("counts-inproc", "--workflows", n)
    out["dbos_inproc"] = h.server("peer_dbos").call("counts-inproc", "--workflows", n)
    h.stop_servers()  # DBOS's background threads write too: none may run beside the dispatched count
    worker = h.celery_worker(count_sql=True)
    try:
        out["ours_dispatched"] = h.measure(
            "ours", "counts-dispatched", "--workflows", s["w6_dispatched"], BENCH_TRANSPORT="celery"
        )
    finally:
        h.stop(worker)
    return out
