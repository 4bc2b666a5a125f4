"""CPU time spent on this machine over a window: in all, and by the processes that matter here.

A throughput on a machine whose cores are all busy is bounded by the CPU
time each unit of work costs: ``cores / cpu_per_unit`` units a second at
best. The sleepers workload records that cost (:func:`per_unit`), so that
its figure says how far it is from what the cores could give.

Read from ``/proc`` (Linux). The machine's busy time is every CPU's time
outside idle and I/O wait, counting processes that ended in the window; the
groups count only processes alive at both ends (a backend that ended in the
window is in the machine's total, not in ``postgres``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


def _machine_busy() -> float:
    """Seconds of CPU time spent outside idle and I/O wait since boot, all cores together."""
    fields = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    # guest time is already counted in user time
    return (sum(ticks[:8]) - idle) / TICK


def _group(pid_dir: Path) -> str | None:
    """The group of one process: ``postgres`` (the server), ``workers`` (durable_worker), else None."""
    try:
        comm = (pid_dir / "comm").read_text().strip()
        if comm == "postgres":
            return "postgres"
        if b"durable_worker" in (pid_dir / "cmdline").read_bytes():
            return "workers"
    except OSError:
        return None  # it ended meanwhile
    return None


def _times() -> dict[int, tuple[str, float]]:
    """Each process of a group: its group and its CPU seconds (user + system) so far."""
    out: dict[int, tuple[str, float]] = {}
    for pid_dir in PROC.iterdir():
        if not pid_dir.name.isdigit():
            continue
        group = _group(pid_dir)
        if group is None:
            continue
        try:
            stat = (pid_dir / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command, which may hold spaces
        out[int(pid_dir.name)] = (group, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def snapshot() -> dict[str, Any]:
    """The machine's busy time and each grouped process's CPU time, now."""
    if not (PROC / "stat").exists():
        return {}
    return {"machine": _machine_busy(), "processes": _times()}


def window(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float] | None:
    """CPU seconds spent between two snapshots: ``machine``, ``postgres`` and ``workers``."""
    if not before or not after:
        return None
    out = {"machine": after["machine"] - before["machine"], "postgres": 0.0, "workers": 0.0}
    for pid, (group, seconds) in after["processes"].items():
        if pid in before["processes"]:
            out[group] += seconds - before["processes"][pid][1]
    return {k: round(v, 3) for k, v in out.items()}


def per_unit(spent: dict[str, float] | None, units: int) -> dict[str, Any] | None:
    """CPU ms per unit of work by group, and the units a second this machine's cores allow at that cost."""
    if spent is None or units <= 0 or spent["machine"] <= 0:
        return None
    cores = os.cpu_count() or 1
    ms = {k: round(v * 1000 / units, 4) for k, v in spent.items()}
    return {
        "cpu_seconds": spent,
        "cpu_ms_per_unit": ms,
        "cores": cores,
        "units_per_s_at_full_cores": round(cores * 1000 / ms["machine"], 1),
    }
