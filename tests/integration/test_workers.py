"""Real Celery workers: routing across queues, a worker killed mid-step, duplicate
deliveries, operator repairs and lost-dispatch self-heal.

Each test asserts exact counts: runs completed, one checkpoint per (run, seq)
(:func:`~tests.integration.harness.account` fails on any duplicate), and the
executions of every step, read from a log the steps append to.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.utils import timezone

import durable
from durable.models import Checkpoint, Run
from tests.integration.harness import (
    SETTLE,
    account,
    assert_executions_match_attempts,
    assert_pipeline_history,
    lapse_leases_of,
    lapse_step_leases,
    steps_held_by,
    wait_until,
)
from tests.integration.workflows import expected_pipeline

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def statuses(run_ids: list[str]) -> dict[str, str]:
    return dict(Run.objects.filter(id__in=run_ids).values_list("id", "status"))


def wait_status(cluster, run_ids: list[str], status: str = "completed", timeout: float = SETTLE) -> None:
    wait_until(
        lambda: statuses(run_ids) == dict.fromkeys(run_ids, status),
        f"runs {run_ids} to be {status}",
        timeout=timeout,
        diagnostics=cluster.diagnostics,
    )


def test_three_step_workflow_runs_across_two_workers_on_their_own_queues(cluster):
    """alpha.* steps run only on worker A (queues durable+alpha), beta.* only on B (beta).

    No sweeper runs: every hop (turn -> step -> next turn) is pushed through Redis.
    """
    a, b = cluster.workers(("A", ["durable", "alpha"]), ("B", ["beta"]))
    runs = [durable.start("it.pipeline", {"x": x}, run_id=f"three-{x}") for x in (1, 2, 3)]

    wait_status(cluster, runs)

    acc = account(cluster, runs)
    assert acc.completed() == 3
    for x, run in zip((1, 2, 3), runs, strict=True):
        assert acc.output[run] == expected_pipeline(x)
        assert_pipeline_history(acc, run)
        assert acc.step_attempts(run) == {1: 1, 3: 1, 4: 1}
        assert {seq: len(acc.executions[(run, seq)]) for seq in (1, 3, 4)} == {1: 1, 3: 1, 4: 1}
        assert acc.resumes[run] == 1
    pids = {(e["run"], e["name"]): e["pid"] for e in cluster.executions()}
    for run in runs:
        assert pids[(run, "alpha.inc")] == a.pid
        assert pids[(run, "alpha.square")] == a.pid
        assert pids[(run, "beta.double")] == b.pid
    queues = set(Checkpoint.objects.filter(run_id__in=runs, kind="step").values_list("name", "queue"))
    assert queues == {("alpha.inc", "alpha"), ("beta.double", "beta"), ("alpha.square", "alpha")}


def test_worker_killed_mid_step_reruns_only_that_step_and_the_run_completes(cluster, tmp_path):
    """kill -9 of the worker executing step 2 of a run, while other runs are in flight.

    The killed step's execution lease lapses (the test makes it lapse: the
    workers' leases outlast any test), the sweep puts it back to pending under
    the same step id and the surviving worker runs it again (attempt 2); steps
    completed before the kill never run again.
    """
    workers = cluster.workers(("A", ["durable", "alpha", "beta"]), ("B", ["durable", "alpha", "beta"]))
    sweeper = cluster.sweeper()
    victim_run = durable.start("it.pipeline", {"x": 5, "opts": {"2": {"hang_first": True}}}, run_id="kill-victim")
    others = [
        durable.start("it.pipeline", {"x": x, "opts": {k: {"sleep": 0.2} for k in "123"}}, run_id=f"kill-other-{x}")
        for x in range(4)
    ]
    hung = wait_until(
        lambda: cluster.executions(victim_run, name="beta.double"),
        "step beta.double of the victim to start",
        diagnostics=cluster.diagnostics,
    )
    victim = cluster.proc_by_pid(hung[0]["pid"])
    survivor = next(w for w in workers if w is not victim)
    victim.kill9()
    killed = steps_held_by(victim)  # the hung step, and any other it had just claimed
    assert killed[(victim_run, 3)] == 1
    assert lapse_leases_of(victim) >= 1  # at least the hung step's; any turn it was running too

    runs = [victim_run, *others]
    wait_status(cluster, runs)

    acc = account(cluster, runs)
    assert acc.completed() == 5
    assert acc.output[victim_run] == expected_pipeline(5)
    assert_pipeline_history(acc, victim_run)
    # The killed step ran twice (attempts 1 and 2, the second on the survivor); the others once.
    assert acc.step_attempts(victim_run) == {1: 1, 3: 2, 4: 1}
    assert acc.executions[(victim_run, 1)] == [1]
    assert sorted(acc.executions[(victim_run, 3)]) == [1, 2]
    assert acc.executions[(victim_run, 4)] == [1]
    assert acc.resumes[victim_run] == 1
    second = cluster.executions(victim_run, name="beta.double", attempt=2)
    assert [e["pid"] for e in second] == [survivor.pid]
    assert sweeper.counts["steps_recovered"] >= 1
    # Runs that shared the killed worker may have lost a step or a turn too: each
    # execution is still a claimed attempt, and each run completed exactly once.
    for run in others:
        assert acc.output[run] == expected_pipeline(int(run.rsplit("-", 1)[1]))
        assert_pipeline_history(acc, run)
        assert_executions_match_attempts(acc, run, killed)
        # A turn killed between running the local step and committing it runs it again.
        assert acc.resumes[run] in (1, 2)


@pytest.mark.durable_settings(EAGER_STEPS=False)  # every step goes through the broker here
def test_duplicate_step_deliveries_keep_one_checkpoint_and_resume_once(cluster, tmp_path):
    """The same step message delivered again (as Redis does after a lost ack), at three moments.

    * while the step is still running elsewhere: the duplicate finds nothing to claim;
    * after the result landed, while the run waits on its next step: nothing runs
      again, the result is not rewritten, and the run is not woken (it counts the
      one step it waits on, which has no result yet);
    * a second *result* for the settled step (a step that physically ran twice):
      dropped, the first output stays, the run not woken;
    * after the run completed: ignored.
    """
    from durable import runtime
    from durable.store import store
    from durable.tasks import execute_step

    cluster.workers(("A", ["durable", "alpha", "beta"]), ("B", ["durable", "alpha", "beta"]))
    gate1, gate2 = tmp_path / "gate1", tmp_path / "gate2"
    run = durable.start(
        "it.pipeline", {"x": 3, "opts": {"1": {"gate": str(gate1)}, "2": {"gate": str(gate2)}}}, run_id="dup"
    )

    def deliver_duplicates(seq: int, queue: str, n: int) -> None:
        ids = [execute_step.apply_async(args=[run, seq], queue=queue).id for _ in range(n)]
        wait_until(
            lambda: all(cluster.task_log_lines(f"[{tid}] succeeded") for tid in ids),
            f"{n} duplicate deliveries of step #{seq} to be handled",
            diagnostics=cluster.diagnostics,
        )
        handled = [line for tid in ids for line in cluster.task_log_lines(f"[{tid}] succeeded")]
        assert all(line.rstrip().endswith("'skipped'") for line in handled), handled

    wait_until(lambda: cluster.executions(run, name="alpha.inc"), "step 1 to start", diagnostics=cluster.diagnostics)
    deliver_duplicates(1, "alpha", 3)  # step 1 still running on a worker
    gate1.touch()
    wait_until(lambda: cluster.executions(run, name="beta.double"), "step 2 to start", diagnostics=cluster.diagnostics)
    deliver_duplicates(1, "alpha", 3)  # step 1 settled; the run waits on step 2

    # A second result for step 1, as a worker that ran it twice would report it.
    first = Checkpoint.objects.get(run_id=run, seq=1)
    woke = store.finish_step(run, 1, runtime.now(), output=-1)
    assert woke is False  # the run waits on step 2: nothing to re-drive
    assert Run.objects.get(id=run).status == "suspended"
    assert Checkpoint.objects.get(run_id=run, seq=1).output == first.output == 4

    gate2.touch()
    wait_status(cluster, [run])
    deliver_duplicates(1, "alpha", 2)  # after completion
    deliver_duplicates(3, "beta", 2)

    acc = account(cluster, [run])
    assert acc.status[run] == "completed"
    assert acc.output[run] == expected_pipeline(3)
    assert_pipeline_history(acc, run)
    assert acc.step_attempts(run) == {1: 1, 3: 1, 4: 1}
    assert {seq: acc.executions[(run, seq)] for seq in (1, 3, 4)} == {1: [1], 3: [1], 4: [1]}
    assert acc.resumes[run] == 1
    assert Checkpoint.objects.get(run_id=run, seq=1).output == 4


def test_requeue_of_a_failed_run_reexecutes_only_the_failed_step(cluster, tmp_path):
    cluster.workers(("A", ["durable", "alpha", "beta"]))
    fix = tmp_path / "fixed"
    run = durable.start("it.pipeline", {"x": 2, "opts": {"2": {"fail_unless": str(fix)}}}, run_id="requeue-me")
    wait_status(cluster, [run], "failed")
    failed = Run.objects.get(id=run)
    assert failed.error["code"] == "step_failed"
    assert failed.error["step"]["name"] == "beta.double"
    assert [len(cluster.executions(run, seq=s)) for s in (1, 3, 4)] == [1, 1, 0]

    fix.touch()
    durable.requeue(run)
    wait_status(cluster, [run])

    acc = account(cluster, [run])
    assert acc.output[run] == expected_pipeline(2)
    assert_pipeline_history(acc, run)
    # Step 1 and the resume before the failure are kept; the failed step ran again, then step 3.
    assert {seq: len(acc.executions[(run, seq)]) for seq in (1, 3, 4)} == {1: 1, 3: 2, 4: 1}
    assert acc.resumes[run] == 1
    assert acc.step_attempts(run) == {1: 1, 3: 1, 4: 1}
    assert Run.objects.get(id=run).recovery_attempts == 0


def test_retry_with_input_of_a_failed_run_starts_a_clean_run(cluster, tmp_path):
    cluster.workers(("A", ["durable", "alpha", "beta"]))
    opts = {"2": {"fail_if_negative": True}}
    run = durable.start("it.pipeline", {"x": -3, "opts": opts}, run_id="bad-input")
    wait_status(cluster, [run], "failed")
    assert [len(cluster.executions(run, seq=s)) for s in (1, 3, 4)] == [1, 1, 0]

    retry = durable.retry_with_input(run, {"x": 4, "opts": opts})
    assert retry.startswith(f"{run}~retry~")
    wait_status(cluster, [retry])

    acc = account(cluster, [run, retry])
    assert acc.status == {run: "failed", retry: "completed"}
    assert acc.output[retry] == expected_pipeline(4)
    assert_pipeline_history(acc, retry)
    assert {seq: acc.executions[(retry, seq)] for seq in (1, 3, 4)} == {1: [1], 3: [1], 4: [1]}
    assert acc.resumes == {run: 1, retry: 1}
    # The original is untouched: its failed step did not run again.
    assert [len(acc.executions.get((run, s), [])) for s in (1, 3, 4)] == [1, 1, 0]
    assert Run.objects.get(id=retry).retry_of == run


def dead_worker_advertising(queue: str) -> None:
    """What a worker on ``queue`` leaves behind when it is killed -9: its fleet descriptor.

    The descriptor stays live until it expires (FLEET_TTL), so turns keep
    dispatching steps into a queue that nobody reads any more.
    """
    from datetime import timedelta

    from durable import runtime
    from durable.fleet import descriptor
    from durable.store import store

    now = runtime.now()
    dead = descriptor(f"dead-{queue}-worker", [queue], registry=runtime.registry)
    store.advertise(dead, now, now + timedelta(seconds=30))


@pytest.mark.durable_settings(STEP_REDISPATCH_MAX=5)
def test_lost_step_dispatch_is_redriven_by_the_self_heal(cluster):
    """Step 2's message is lost with its worker; the sweep re-dispatches the same step id to a new one."""
    cluster.workers(("A", ["durable", "alpha"]))
    dead_worker_advertising("beta")
    run = durable.start("it.pipeline", {"x": 6}, run_id="lost-dispatch")
    wait_until(
        lambda: cluster.queue_length("beta") == 1,
        "step 2's message to wait in queue beta",
        diagnostics=cluster.diagnostics,
    )
    assert Checkpoint.objects.get(run_id=run, seq=3).status == "pending"
    assert cluster.drop_queue("beta") == 1  # the message is gone for good
    cluster.workers(("B", ["beta"]))
    # Nobody claimed the step within its dispatch lease (STEP_LEASE): it lapses.
    assert lapse_step_leases([run], "pending", seq=3) == 1
    sweeper = cluster.sweeper()

    wait_status(cluster, [run])

    acc = account(cluster, [run])
    assert acc.output[run] == expected_pipeline(6)
    assert_pipeline_history(acc, run)
    assert acc.step_attempts(run) == {1: 1, 3: 1, 4: 1}
    assert {seq: acc.executions[(run, seq)] for seq in (1, 3, 4)} == {1: [1], 3: [1], 4: [1]}
    assert sweeper.counts["redispatched"] >= 1  # the lost step
    assert sweeper.counts["lost"] == 0


@pytest.mark.durable_settings(STEP_REDISPATCH_MAX=2)
def test_long_step_with_heartbeats_is_never_redispatched(cluster, tmp_path):
    """A long step (five lease windows) that heartbeats keeps its lease: one execution, no re-dispatch.

    Each window passes explicitly: the test writes the step's lease into the
    past, as if the window had gone by, waits until the step's heartbeat has
    renewed it, and only then lets the sweeps look (twice a window). The step
    ends when the test opens its gate.
    """
    from durable.runtime import get_engine
    from durable.worker.tick import tick

    cluster.workers(("A", ["durable", "alpha", "beta"]))
    gate = tmp_path / "gate"
    opts = {"2": {"heartbeat": True, "gate": str(gate)}}
    run = durable.start("it.pipeline", {"x": 1, "opts": opts}, run_id="long")
    wait_until(lambda: cluster.executions(run, seq=3), "the long step to start", diagnostics=cluster.diagnostics)
    counts: Counter[str] = Counter()
    ticks_while_running = 0
    for window in range(5):
        lapsed = lapse_step_leases([run], "running", seq=3)
        assert lapsed == 1, f"window {window}: the step is no longer running"
        wait_until(
            lambda: Checkpoint.objects.get(run_id=run, seq=3).wake_at > timezone.now(),
            f"a heartbeat to renew the step's lease (window {window})",
            diagnostics=cluster.diagnostics,
        )
        for _ in range(2):
            counts.update(tick(get_engine(), execute=False))
            ticks_while_running += 1
    assert not cluster.executions(run, kind="step_done", seq=3)  # it ran through all five windows
    gate.touch()
    wait_until(
        lambda: cluster.executions(run, kind="step_done", seq=3),
        "the long step to finish",
        diagnostics=cluster.diagnostics,
    )
    wait_status(cluster, [run])

    acc = account(cluster, [run])
    assert acc.output[run] == expected_pipeline(1)
    assert acc.step_attempts(run) == {1: 1, 3: 1, 4: 1}
    assert {seq: acc.executions[(run, seq)] for seq in (1, 3, 4)} == {1: [1], 3: [1], 4: [1]}
    assert ticks_while_running >= 10  # the sweeps kept looking at the step while it ran
    assert counts["redispatched"] == 0
    assert counts["steps_recovered"] == 0
    assert counts["lost"] == 0
    long_step = Checkpoint.objects.get(run_id=run, seq=3)
    assert long_step.heartbeat_at is not None
    assert long_step.progress is not None and long_step.progress["left"] < 1


@pytest.mark.durable_settings(STEP_REDISPATCH_MAX=2)
def test_step_no_worker_takes_fails_with_remote_step_lost(cluster):
    """Queue beta's only worker died: after STEP_REDISPATCH_MAX re-dispatches the step fails into the workflow.

    Each dispatch lease lapses explicitly (the test writes it into the past) once
    the step's latest dispatch is recorded; the sweeper then re-dispatches it, or
    gives it up as lost after the last one.
    """
    cluster.workers(("A", ["durable", "alpha"]))
    dead_worker_advertising("beta")
    sweeper = cluster.sweeper(interval=0.1)
    run = durable.start("it.pipeline", {"x": 1}, run_id="nobody-takes-beta")

    def lapse_until_settled() -> bool:
        if Run.objects.get(id=run).status in ("failed", "completed"):
            return True
        lapse_step_leases([run], "pending", seq=3)  # nobody claims it: each dispatch lease lapses
        return False

    wait_until(lapse_until_settled, f"run {run} to fail", diagnostics=cluster.diagnostics)
    wait_status(cluster, [run], "failed")

    failed = Run.objects.get(id=run)
    assert failed.error["code"] == "step_failed"
    assert failed.error["step"]["error"]["code"] == "remote_step_lost"
    assert sweeper.counts["lost"] == 1
    assert [len(cluster.executions(run, seq=s)) for s in (1, 3, 4)] == [1, 0, 0]
    # Exactly the first dispatch and STEP_REDISPATCH_MAX re-dispatches went to beta, none taken.
    assert cluster.queue_length("beta") == 3


def test_step_no_live_worker_serves_parks_the_run_blocked_until_one_appears(cluster):
    """Without any worker advertising queue beta, step 2 is never dispatched: the run is ``blocked``."""
    cluster.workers(("A", ["durable", "alpha"]))
    sweeper = cluster.sweeper()
    run = durable.start("it.pipeline", {"x": 2}, run_id="blocked-on-beta")
    wait_status(cluster, [run], "blocked")
    assert Run.objects.get(id=run).error["code"] == "no_capable_worker"
    assert not Checkpoint.objects.filter(run_id=run, seq=3).exists()  # checked before the pending write
    assert cluster.queue_length("beta") == 0

    cluster.workers(("B", ["beta"]))
    wait_status(cluster, [run])
    acc = account(cluster, [run])
    assert acc.output[run] == expected_pipeline(2)
    assert_pipeline_history(acc, run)
    assert {seq: acc.executions[(run, seq)] for seq in (1, 3, 4)} == {1: [1], 3: [1], 4: [1]}
    assert acc.resumes[run] == 1
    assert sweeper.counts["unblocked"] == 1
