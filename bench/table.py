# ruff: noqa: RUF001
"""The table ``./bench/run`` prints and stores: one row per figure, ours against a peer.

Each row carries both medians, the **paired ratio** (median, min and max of the
per-repetition advantages: ours and the peer measured back to back) and the
ratio of the medians; a target is judged on the paired ratio when there is
one. A SQL count that cannot be true (``bench.pairing.impossible_counts``) is
not printed: the row says ``impossible`` and carries the reasons.
"""

from __future__ import annotations

from typing import Any

from bench.common import summary
from bench.pairing import advantage, impossible_counts, ratios

Stat = dict[str, Any] | float | None
INSERT = "single insert"  # the peer of the per-step baseline rows


def _median(x: Stat) -> float | None:
    if isinstance(x, dict):
        x = x.get("median")
    return float(x) if isinstance(x, (int, float)) else None


def _values(x: Stat) -> list[float | None] | None:
    return x.get("values") if isinstance(x, dict) and x.get("values") else None


def fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "—"
    if abs(x) >= 100:
        s = f"{x:,.0f}"
    elif abs(x) >= 10:
        s = f"{x:.1f}"
    else:
        s = f"{x:.2f}"
    return s + unit


def _spread(x: Stat) -> str:
    if isinstance(x, dict) and x.get("min") is not None and x.get("n", 0) > 1:
        return f" [{fmt(x['min'])}–{fmt(x['max'])}]"
    return ""


def row(
    work: str,
    metric: str,
    ours: Stat,
    peer: Stat,
    *,
    higher: bool,
    target: str = "",
    goal: float | None = None,
    most: float | None = None,
    limit: float | None = None,
    unit: str = "",
    peer_name: str = "DBOS",
    pair: bool = True,
) -> dict[str, Any]:
    """One figure. ``goal``/``most``: the least/most ratio that meets the target; ``limit``: the most ours may be."""
    ov, pv = _values(ours), _values(peer)
    paired = None
    if pair and ov and pv and len(ov) == len(pv):
        paired = ratios(ov, pv, higher_is_better=higher)["paired"]
        paired = paired if paired["n"] else None
    of_medians = advantage(_median(ours), _median(peer), higher_is_better=higher)
    judged = paired["median"] if paired else of_medians
    met = None
    if goal is not None and judged is not None:
        met = judged >= goal
    if most is not None and judged is not None:
        met = judged <= most
    if limit is not None and _median(ours) is not None:
        met = _median(ours) <= limit  # type: ignore[operator]
    return {
        "workload": work,
        "metric": metric,
        "ours": _median(ours),
        "peer": _median(peer),
        "peer_name": peer_name,
        "advantage": judged,
        "advantage_paired": paired,
        "advantage_of_medians": of_medians,
        "higher_is_better": higher,
        "target": target,
        "met": met,
        "unit": unit,
        "ours_spread": _spread(ours),
        "peer_spread": _spread(peer),
        "impossible": [],
    }


def _g(res: dict[str, Any], key: str, metric: str) -> Stat:
    return (res.get(key) or {}).get(metric)


def rows_w1(w1: dict[str, Any]) -> list[dict[str, Any]]:
    work = "1 seq, 3 local steps"
    return [
        row(work, "workflows/s (inline + completion signal vs start_workflow().get_result())",
            _g(w1, "ours_signal", "workflows_per_s"), _g(w1, "dbos_start", "workflows_per_s"),
            higher=True, target="≥5×", goal=5),
        row(work, "ms per step (same runs)", _g(w1, "ours_signal", "ms_per_step"),
            _g(w1, "dbos_start", "ms_per_step"), higher=False, unit=" ms"),
        row(work, "workflows/s, caller's thread (run_turn vs direct call)",
            _g(w1, "ours_caller", "workflows_per_s"), _g(w1, "dbos_direct", "workflows_per_s"), higher=True),
        row(work, "workflows/s, durable.wait_for_run (polling) vs start_workflow().get_result()",
            _g(w1, "ours_wait_for_run", "workflows_per_s"), _g(w1, "dbos_start", "workflows_per_s"),
            higher=True, pair=False),
    ]  # fmt: skip


def rows_w2(w2: dict[str, Any]) -> list[dict[str, Any]]:
    work = "2 eight callers"
    return [
        row(work, "workflows/s (inline + completion signal vs start_workflow().get_result())",
            _g(w2, "ours_signal", "workflows_per_s"), _g(w2, "dbos_start", "workflows_per_s"), higher=True),
        row(work, "ms per step (wall / steps)", _g(w2, "ours_signal", "ms_per_step"),
            _g(w2, "dbos_start", "ms_per_step"), higher=False, unit=" ms"),
        row(work, "workflows/s, callers' threads (run_turn vs direct call)",
            _g(w2, "ours_caller", "workflows_per_s"), _g(w2, "dbos_direct", "workflows_per_s"), higher=True),
    ]  # fmt: skip


def insert_baseline(side: dict[str, Any]) -> Stat:
    """The single-insert commit p50 measured right after each of ``side``'s repetitions."""
    conds = side.get("conditions") or []
    values = [c["commit_p50_ms"] if c else None for c in conds]
    if not any(v is not None for v in values):
        return None
    got = summary([v for v in values if v is not None])
    got["values"] = values
    return got


def rows_w3(w3: dict[str, Any]) -> list[dict[str, Any]]:
    work = "3 one workflow, 100 steps"
    out = [
        row(work, "ms per step (inline vs start_workflow)", _g(w3, "ours_signal", "ms_per_step"),
            _g(w3, "dbos_start", "ms_per_step"), higher=False, unit=" ms"),
        row(work, "ms per step, caller's thread", _g(w3, "ours_caller", "ms_per_step"),
            _g(w3, "dbos_direct", "ms_per_step"), higher=False, unit=" ms"),
    ]  # fmt: skip
    for key, how in (("ours_signal", "inline"), ("ours_caller", "caller's thread")):
        side = w3.get(key) or {}
        # The ratio here is step ÷ insert (a multiple of the baseline), so the target is a maximum.
        out.append(
            row(work, f"ms per in-process step ({how}) ÷ a single-insert transaction (BEGIN; INSERT; COMMIT)",
                side.get("ms_per_step"), insert_baseline(side), higher=True, unit=" ms",
                target="≤1.3×", most=1.3, peer_name=INSERT)
        )  # fmt: skip
    return out


def _per_step_cost(stat: Stat, steps: int) -> Stat:
    """Wall ms per step at saturation from workflows/s, repetition by repetition."""
    vals = _values(stat)
    if not vals:
        return None
    per = [1000 / (steps * v) if v else None for v in vals]
    got = summary([v for v in per if v is not None])
    got["values"] = per
    return got


def rows_w4(w4: dict[str, Any], burst: int) -> list[dict[str, Any]]:
    work, wps = "4 dispatched, 3 steps", "workflows_per_s"
    iso = {k: (w4.get(f"{k}_isolated") or {}) for k in ("ours", "dbos", "dbos_tight", "chain")}

    def first(side: str, pct: str) -> Stat:
        return iso[side].get("first_step_ms", {}).get(pct)

    tight = "DBOS, tight poll"
    return [
        row(work, "workflows/s end to end vs DBOS queue (2 worker processes, default 1 s poll)",
            _g(w4, "ours", wps), _g(w4, "dbos", wps), higher=True, target="≥2.5×", goal=2.5),
        row(work, "workflows/s end to end vs DBOS queue at its tightest poll", _g(w4, "ours", wps),
            _g(w4, "dbos_tight", wps), higher=True, peer_name=tight),
        row(work, "workflows/s end to end vs bare Celery chain", _g(w4, "ours", wps), _g(w4, "chain", wps),
            higher=True, target="≥1.3×", goal=1.3, peer_name="Celery chain"),
        row(work, "start→first step p50, one at a time (vs DBOS queue)", first("ours", "p50"), first("dbos", "p50"),
            higher=False, unit=" ms", target="<10 ms", limit=10),
        row(work, "start→first step p50, one at a time (vs DBOS, tight poll)", first("ours", "p50"),
            first("dbos_tight", "p50"), higher=False, unit=" ms", peer_name=tight),
        row(work, "start→first step p99, one at a time (vs DBOS queue)", first("ours", "p99"), first("dbos", "p99"),
            higher=False, unit=" ms"),
        row(work, "start→first step p50, one at a time (vs Celery chain)", first("ours", "p50"),
            first("chain", "p50"), higher=False, unit=" ms", peer_name="Celery chain"),
        row(work, f"start→first step p50 under the {burst:,}-workflow burst", _g(w4, "ours", "first_step_ms_p50"),
            _g(w4, "dbos_tight", "first_step_ms_p50"), higher=False, unit=" ms", peer_name=tight),
        row(work, f"start→first step p99 under the {burst:,}-workflow burst", _g(w4, "ours", "first_step_ms_p99"),
            _g(w4, "dbos_tight", "first_step_ms_p99"), higher=False, unit=" ms", peer_name=tight),
        row(work, "cost per step at saturation (wall ms / step) vs Celery hop", _per_step_cost(_g(w4, "ours", wps), 3),
            _per_step_cost(_g(w4, "chain", wps), 3), higher=False, unit=" ms", target="≤2× hop", goal=0.5,
            peer_name="Celery chain"),
        row(work, "end to end, one at a time, p50 (vs Celery chain)",
            iso["ours"].get("end_to_end_ms", {}).get("p50"), iso["chain"].get("end_to_end_ms", {}).get("p50"),
            higher=False, unit=" ms", peer_name="Celery chain"),
    ]  # fmt: skip


def rows_sleepers(w: dict[str, Any], work: str, limit_ms: float) -> list[dict[str, Any]]:
    ours = w.get("ours") or {}
    last = row(work, "last wake after due (durable_worker ×2)", ours.get("last_late_ms"), None, higher=False,
               unit=" ms", target=f"≤{limit_ms:,.0f} ms", limit=limit_ms, peer_name="—")  # fmt: skip
    if last["met"] is not None:
        last["met"] = last["met"] and bool(ours.get("all_suspended_before_due"))
    return [
        last,
        row(work, "p50 wake after due", ours.get("p50_late_ms"), None, higher=False, unit=" ms", peer_name="—"),
        row(work, "woken per second", ours.get("woken_per_s"), None, higher=True, peer_name="—"),
        row(work, "CPU per wake, whole machine", ours.get("cpu_ms_per_wake"), None, higher=False, unit=" ms",
            peer_name="—"),
        row(work, "wakes per second the cores allow at that CPU", ours.get("wakes_per_s_cores_allow"), None,
            higher=True, peer_name="—"),
    ]  # fmt: skip


def rows_w7(w7: dict[str, Any], runs: int) -> list[dict[str, Any]]:
    work = f"7 start, {runs:,} finished runs"
    return [
        row(work, "durable.start() p50, full table vs empty", _g(w7, "full", "p50_ms"), _g(w7, "empty", "p50_ms"),
            higher=False, unit=" ms", peer_name="empty table"),
        row(work, "durable.start() p99, full table vs empty", _g(w7, "full", "p99_ms"), _g(w7, "empty", "p99_ms"),
            higher=False, unit=" ms", target="full ≤2× empty", goal=0.5, peer_name="empty table"),
    ]  # fmt: skip


def count_row(work: str, metric: str, ours: dict[str, Any], peer: dict[str, Any] | None, key: str,
              *, peer_name: str = "DBOS", target: str = "", limit: float | None = None) -> dict[str, Any]:  # fmt: skip
    """A SQL count per unit; a side whose counts are impossible is flagged, not printed."""

    def value(counts: dict[str, Any] | None) -> tuple[float | None, list[str]]:
        if not counts:
            return None, []
        why = impossible_counts(counts)
        if "explicit_txns" in counts:
            counts = {**counts, "txns": counts["explicit_txns"] + counts.get("autocommit_txns", 0)}
        sub = counts
        for part in key.split("."):
            sub = sub.get(part) if isinstance(sub, dict) else None  # type: ignore[assignment]
        got = float(sub) if isinstance(sub, (int, float)) else None
        return (None, why) if why else (got, [])

    (o, o_why), (p, p_why) = value(ours), value(peer)
    out = row(work, metric, o, p, higher=False, target=target, limit=limit, peer_name=peer_name)
    out["impossible"] = [f"ours: {w}" for w in o_why] + [f"{peer_name}: {w}" for w in p_why]
    out["flagged"] = [side for side, why in (("ours", o_why), ("peer", p_why)) if why]
    return out


def rows_w6(w6: dict[str, Any]) -> list[dict[str, Any]]:
    o, d = (w6.get("ours_inproc") or {}), (w6.get("dbos_inproc") or {})
    ops, dps = o.get("per_step"), d.get("per_step")
    od = (w6.get("ours_dispatched") or {}).get("per_step")
    step, disp = "6 SQL per in-process step", "6 SQL per dispatched step"
    return [
        count_row(step, "statements", ops, dps, "statements", target="≤3", limit=3),
        count_row(step, "transactions (commits)", ops, dps, "txns", target="≤1", limit=1),
        count_row(step, "round trips (statements + BEGIN/COMMIT)", ops, dps, "round_trips"),
        count_row(step, "server: write transactions (xids assigned)", ops, dps, "server_write_txns"),
        count_row(step, "server: statements (pg_stat_statements, incl. FK checks)", ops, dps, "pgss.statements"),
        count_row(step, "server: COMMITs (pg_stat_statements)", ops, dps, "pgss.commit"),
        count_row("6 SQL per in-process workflow", "fixed statements per workflow (start + turn)",
                  o.get("per_workflow_fixed"), d.get("per_workflow_fixed"), "statements"),
        count_row(disp, "statements (driver + workers)", od, None, "statements", peer_name="—"),
        count_row(disp, "transactions (commits)", od, None, "txns", peer_name="—"),
        count_row(disp, "server: write transactions (xids assigned)", od, None, "server_write_txns", peer_name="—"),
        count_row(disp, "server: statements (pg_stat_statements)", od, None, "pgss.statements", peer_name="—"),
    ]  # fmt: skip


def rows(res: dict[str, Any], sizes: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of the workloads in ``res`` (the table printed and stored in the JSON)."""
    out: list[dict[str, Any]] = []
    builders = {
        "w1": rows_w1,
        "w2": rows_w2,
        "w3": rows_w3,
        "w4": lambda w: rows_w4(w, sizes["w4_workflows"]),
        "w5": lambda w: rows_sleepers(w, f"5 {sizes['w5_runs']:,} sleepers", 2000),
        "w8": lambda w: rows_sleepers(w, f"8 {sizes['w8_runs']:,} sleepers", 3000),
        "w7": lambda w: rows_w7(w, sizes["w7_runs"]),
        "w6": rows_w6,
    }
    for name, build in builders.items():
        if res.get(name):
            out += build(res[name])
    return out


def _cell(r: dict[str, Any], side: str) -> str:
    if side in r.get("flagged", ()):
        return "impossible"
    return fmt(r[side], r["unit"]) + r[f"{side}_spread"]


def _ratio_cells(r: dict[str, Any]) -> tuple[str, str]:
    p, m = r["advantage_paired"], r["advantage_of_medians"]
    paired = "—" if not p else f"{p['median']:.2f}×" + (f" [{p['min']:.2f}–{p['max']:.2f}]" if p["n"] > 1 else "")
    return paired, "—" if m is None else f"{m:.2f}×"


def print_table(table: list[dict[str, Any]]) -> None:
    head = ("workload", "metric", "ours", "peer", "peer value", "paired", "of medians", "target")
    lines = []
    for r in table:
        mark = {True: " ✓", False: " ✗", None: ""}[r["met"]]
        paired, of_medians = _ratio_cells(r)
        lines.append(
            (r["workload"], r["metric"], _cell(r, "ours"), r["peer_name"], _cell(r, "peer"), paired, of_medians,
             r["target"] + (mark if r["target"] else ""))
        )  # fmt: skip
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=True)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for line in lines:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)))
    print(
        "advantage: ours ÷ peer for rates, peer ÷ ours for times and counts (>1 means we are ahead; "
        "except the single-insert rows: step ÷ insert); "
        "paired: median [min–max] of the per-repetition ratios (targets are judged on it); "
        "of medians: the ratio of the two medians; [min–max] of values over repetitions"
    )
    for r in table:
        if r["peer_name"] == INSERT and r["advantage"]:
            print(f"{r['metric']}: the step costs {r['advantage']:.2f}× the insert (target ≤1.3×)")
    for r in table:
        if r["impossible"]:
            print(f"IMPOSSIBLE COUNT ({r['workload']}, {r['metric']}): {'; '.join(r['impossible'])}")


def print_sql(res: dict[str, Any]) -> None:
    w6 = res.get("w6") or {}
    for key, title in (
        ("ours_inproc", "django-durable, per in-process step"),
        ("ours_dispatched", "django-durable, per dispatched step (driver + workers)"),
        ("dbos_inproc", "DBOS, per @DBOS.step"),
    ):
        d = w6.get(key)
        if not d:
            continue
        print(f"\n{title}:")
        for sql, n in d["per_step"]["sql"].items():
            print(f"  {n:>6.2f}  {sql[:160]}")
        print("  fixed per workflow:")
        for sql, n in d["per_workflow_fixed"]["sql"].items():
            print(f"  {n:>6.2f}  {sql[:160]}")
