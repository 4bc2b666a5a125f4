"""A busy limited queue is admitted in batches: a result leaves its slot while granted steps wait to start.

On PostgreSQL a step's result reads its queue in its own statement
(:class:`durable.engine.plan_queues.QueueSeen`); while at least a quarter of
the concurrency is granted to steps no worker has started, the result grants
nothing (:meth:`~durable.engine.plan_queues.QueueSeen.leaves_slot`) and the
first result that sees fewer grants every free slot in one statement.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

import durable
from durable.engine.plan_queues import QueueLimits, QueueSeen, plan_queue_admission
from durable.engine.vocab import Admission
from durable.models import Checkpoint
from durable.runtime import get_engine, now
from tests.test_hot_path import _statements

QUEUES = {"q_batch": {"concurrency": 8}}
GRANT = "SET \"admission\" = 'admitted'"


@durable.step(queue="q_batch")
def qb_work(i: int) -> int:
    return i


@durable.workflow(name="qb_fan")
def qb_fan(ctx, n):
    return ctx.gather(*(durable.call(qb_work, i) for i in range(n)))


def _seen(
    unstarted: int, concurrency: int | None, paused: bool = False, overrides: dict[str, object] | None = None
) -> bool:
    plan = plan_queue_admission("q", now(), QueueLimits(concurrency=concurrency), 60.0, 100)
    seen = QueueSeen("1", paused, overrides or {}, None, {None: unstarted}, 0, (), True, unstarted)
    return seen.leaves_slot(plan)


@pytest.mark.parametrize(
    ("unstarted", "concurrency", "overrides", "leaves"),
    [
        (13, 50, {}, True),  # a quarter of 50, rounded up
        (12, 50, {}, False),
        (2, 3, {}, True),  # never fewer than two
        (1, 3, {}, False),
        (1, 1, {}, False),
        (100, None, {}, False),  # no concurrency limit: nothing to batch
        (3, 50, {"concurrency": 8}, True),  # the stored override is the limit in force
        (13, 8, {"concurrency": None}, False),
    ],
)
def test_a_result_leaves_its_slot_only_while_a_quarter_of_the_slots_wait_to_start(
    unstarted: int, concurrency: int | None, overrides: dict[str, object], leaves: bool
) -> None:
    assert _seen(unstarted, concurrency, overrides=overrides) is leaves


def test_a_paused_queue_never_leaves_a_slot() -> None:
    assert _seen(20, 8, paused=True) is False
    assert _seen(20, 8) is True


@pytest.mark.postgres
@pytest.mark.django_db
def test_results_grant_nothing_while_granted_steps_wait_then_one_statement_grants_every_free_slot() -> None:
    with override_settings(DURABLE={"TRANSPORT": "manual", "LEASE": 30, "QUEUES": QUEUES}):
        engine = get_engine()
        run_id = durable.start(qb_fan, 12)
        engine.run_turn(run_id)  # writes 12 waiting steps; its admission grants 8

        def granted() -> list[int]:
            steps = Checkpoint.objects.filter(run_id=run_id, queue="q_batch", admission=Admission.ADMITTED)
            return sorted(steps.values_list("seq", flat=True))

        first = granted()
        assert len(first) == 8
        grants_after: list[tuple[int, int]] = []
        reads: list[str] = []
        for seq in first:
            with _statements() as statements:
                engine.execute_step(run_id, seq)  # as a worker runs the delivered message
            grants_after.append((len(granted()), sum(GRANT in sql for sql, _ in statements)))
            (result,) = [sql for sql, _ in statements if sql.startswith("WITH RECURSIVE old")]
            reads.append("backlog" if "grp AS (" in result else "count")
        # Results 1-6 leave 7, 6... 2 granted steps unstarted: no grant. The 7th sees one: it grants
        # the 4 steps still waiting (room for 7) in one statement; the 8th finds nothing waiting.
        assert grants_after == [(8, 0)] * 6 + [(12, 1), (12, 0)]
        # The turn's admission granted 8 steps, at least the threshold of 2: they wait to start, so
        # each result reads the count alone. The 7th finds too few waiting to start and admits a
        # batch of 4, which wait to start in turn: the 8th counts too.
        assert reads == ["count"] * 8
        rest = sorted(set(granted()) - set(first))
        for seq in rest:
            engine.execute_step(run_id, seq)
        engine.run_turn(run_id)
    info = durable.get_run(run_id)
    assert (info.status, info.output) == ("completed", list(range(12)))
    counts = Checkpoint.objects.filter(run_id=run_id, queue="q_batch").values_list("attempts", flat=True)
    assert sorted(counts) == [1] * 12  # every step ran once
