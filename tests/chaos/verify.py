"""What the chaos suite asserts at the end, read from the tables: exact counts, no thresholds.

:func:`verify` returns ``(failures, figures)``: every failure is one sentence naming
the run and what is wrong; the figures go into the report.

* every planned run ended as its shape says (completed with the expected output,
  a saga failed with its three undos completed, a cancellable run cancelled),
  and every child of a parent completed;
* one checkpoint per position;
* every completed step, local step and undo has its side effect recorded
  (a row in ``chaos_execution``), and no attempt executed twice;
* every recorded step result is the one its arguments give (no late or
  duplicated result was taken);
* every signal run took its payloads in the order they were sent.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db import connection
from django.db.models import Count

from durable.engine.vocab import CheckpointKind, CheckpointStatus, RunStatus
from durable.models import Checkpoint, Run
from tests.chaos.workflows import POISON_RETRIES, STEP_RESULTS, expected_parent, expected_pipeline
from tests.chaos.workload import Plan, Planned


def expected(p: Planned) -> tuple[str, Any]:
    if p.shape == "pipeline":
        return RunStatus.COMPLETED, expected_pipeline(p.input["x"])
    if p.shape == "parent":
        return RunStatus.COMPLETED, expected_parent(p.input["x"])
    if p.shape == "signals":
        return RunStatus.COMPLETED, list(range(p.input["n"]))
    if p.shape == "saga":
        return RunStatus.FAILED, None
    if p.shape == "poisoned":
        return RunStatus.COMPLETED, "worker_lost"
    return RunStatus.CANCELLED, None


def executions(run_ids: set[str]) -> list[tuple[str, int | None, str, int | None, str]]:
    with connection.cursor() as cur:
        cur.execute("SELECT run_id, seq, name, attempt, kind FROM chaos_execution")
        return [row for row in cur.fetchall() if row[0] in run_ids]


def _check_runs(plan: Plan, runs: dict[str, Run], failures: list[str]) -> None:
    for p in plan.runs:
        run = runs.get(p.run_id)
        if run is None:
            failures.append(f"{p.run_id}: no such run")
            continue
        status, output = expected(p)
        if run.status != status:
            failures.append(f"{p.run_id} ({p.shape}): {run.status}, expected {status}; error={run.error}")
        elif output is not None and run.output != output:
            failures.append(f"{p.run_id} ({p.shape}): output {run.output!r}, expected {output!r}")
        elif p.shape == "saga":
            report = (run.error or {}).get("compensation") or []
            undone = [(u.get("step"), u.get("status")) for u in report]
            want = [("chaos.reserve", "completed"), ("hold", "completed"), ("chaos.reserve", "completed")]
            if undone != want:
                failures.append(f"{p.run_id} (saga): compensation {report}, expected {want}")
    for child in Run.objects.filter(parent_id__in=[p.run_id for p in plan.of("parent")]):
        if child.status != RunStatus.COMPLETED or child.output != child.input["x"] + 10:
            failures.append(f"child {child.id}: {child.status} output={child.output!r}")


def _check_checkpoints(run_ids: set[str], failures: list[str]) -> list[Checkpoint]:
    dupes = list(
        Checkpoint.objects.filter(run_id__in=run_ids).values("run_id", "seq").annotate(n=Count("id")).filter(n__gt=1)
    )
    failures.extend(f"{d['run_id']}#{d['seq']}: {d['n']} checkpoints at one position" for d in dupes)
    cps = list(Checkpoint.objects.filter(run_id__in=run_ids, status=CheckpointStatus.COMPLETED))
    for cp in cps:
        fn = STEP_RESULTS.get(cp.name)
        if cp.kind == CheckpointKind.STEP and fn is not None and cp.output != fn(cp.input["args"]):
            failures.append(f"{cp.run_id}#{cp.seq} {cp.name}{cp.input['args']}: recorded result {cp.output!r}")
    return cps


def verify(plan: Plan) -> tuple[list[str], dict[str, Any]]:
    failures: list[str] = []
    planned = set(plan.by_id)
    runs = {r.id: r for r in Run.objects.filter(id__in=planned)}
    children = set(Run.objects.filter(parent_id__in=planned).values_list("id", flat=True))
    run_ids = planned | children
    _check_runs(plan, runs, failures)
    cps = _check_checkpoints(run_ids, failures)
    rows = executions(run_ids)
    by_seq = Counter((r, s) for r, s, _, _, kind in rows if kind in ("step", "undo") and s is not None)
    by_attempt = Counter((r, s, a) for r, s, _, a, kind in rows if kind in ("step", "undo") and s is not None)
    by_name = Counter((r, name) for r, s, name, _, kind in rows if s is None)
    for cp in cps:
        if cp.kind == CheckpointKind.STEP:  # dispatched steps and dispatched undos
            seen = by_seq[(cp.run_id, cp.seq)]
        elif cp.kind == CheckpointKind.LOCAL:
            seen = by_name[(cp.run_id, cp.name)]
        elif cp.kind == CheckpointKind.COMPENSATION and cp.name == "undo:hold":
            seen = by_name[(cp.run_id, "unhold")]
        else:
            continue
        if seen == 0:
            failures.append(f"{cp.run_id}#{cp.seq} {cp.kind} {cp.name}: completed, but no execution recorded")
    for p in plan.of("poisoned"):
        n = sum(1 for r, _, name, _, _ in rows if r == p.run_id and name == "remote.poison")
        if n > POISON_RETRIES + 1:
            failures.append(f"{p.run_id}: the poison step ran {n} times, more than its retries + 1")
    twice = [(r, s, a) for (r, s, a), n in by_attempt.items() if n > 1]
    failures.extend(f"{r}#{s}: attempt {a} executed more than once" for r, s, a in twice[:20])
    figures = {
        "runs": len(planned),
        "child_runs": len(children),
        "statuses": dict(Counter(r.status for r in runs.values())),
        "checkpoints": len(cps),
        "executions": len(rows),
        "steps_run_twice": sum(1 for n in by_seq.values() if n > 1) + sum(1 for n in by_name.values() if n > 1),
        "most_executions_of_one_step": max([*by_seq.values(), *by_name.values(), 0]),
        "slowest_runs_s": slowest(run_ids - {p.run_id for p in plan.of("cancellable")}),  # those wait for the end
    }
    return failures, figures


def slowest(run_ids: set[str], n: int = 5) -> dict[str, Any]:
    """The ``n`` runs that took longest from creation to their end, with their history's times
    (a wake lost and left to the reconcile shows here)."""
    ended = Run.objects.filter(id__in=run_ids, finished_at__isnull=False).values_list("id", "created_at", "finished_at")
    took = sorted(((f - c).total_seconds(), rid, c) for rid, c, f in ended)[-n:]
    out: dict[str, Any] = {}
    for seconds, rid, created in reversed(took):
        history = Checkpoint.objects.filter(run_id=rid).order_by("seq")
        out[rid] = {
            "seconds": round(seconds, 1),
            "history": [
                f"#{cp.seq} {cp.kind} {cp.name} {cp.status} attempts={cp.attempts} "
                f"ended=+{(cp.finished_at - created).total_seconds():.1f}s"
                if cp.finished_at
                else f"#{cp.seq} {cp.kind} {cp.name} {cp.status}"
                for cp in history
            ],
        }
    return out
