"""Entities under real concurrency: threads with their own database connections.

PostgreSQL: 4 threads x 250 operations on one key are applied one at a time
(1,000 positions without a gap, each result the state its op saw), and
different keys do not wait for each other. Both databases: a call that cannot
take the entity's lock within its timeout raises and writes nothing.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

import durable
from durable.models import Checkpoint, Entity, EntityOp
from durable.testing import run_until_settled
from tests.threads import SETTLE, concurrently, in_other_thread

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 4
OPS = 250
gates: dict[str, threading.Event] = {}


@durable.entity("r_counter", initial={"n": 0})
class RaceCounter:
    def bump(self, who: int) -> int:
        """Count one op; the result is the count this op saw."""
        seen = int(self.state["n"])
        self.state["n"] = seen + 1
        self.state["last"] = who
        return seen

    def hold(self, gate: str) -> str:
        """Keep the entity locked until the test opens ``gate`` (the op is then applied)."""
        gates[f"{gate}:held"].set()
        assert gates[gate].wait(SETTLE)
        return gate


@pytest.mark.postgres
def test_four_threads_of_250_ops_on_one_key_are_applied_one_at_a_time() -> None:
    def bump(thread: int) -> list[int]:
        return [durable.call_entity("r_counter", "hot", "bump", thread, op_id=f"t{thread}-{i}") for i in range(OPS)]

    results = concurrently(THREADS, bump)
    total = THREADS * OPS
    log = list(EntityOp.objects.filter(entity__name="r_counter", entity__key="hot").order_by("seq"))
    assert [op.seq for op in log] == list(range(1, total + 1))  # every op, no gap, no duplicate
    assert [op.result for op in log] == [op.seq - 1 for op in log]  # each saw the state the op before left
    assert all(op.status == "completed" for op in log)
    # Each thread's own calls were applied in its call order, and got the results logged for them.
    for thread, got in enumerate(results):
        assert got == sorted(got)
        mine = [op.result for op in log if op.op_id.startswith(f"t{thread}-")]
        assert mine == got
    entity = Entity.objects.get(name="r_counter", key="hot")
    assert (entity.ops, entity.state["n"]) == (total, total)
    assert sorted({op.arg for op in log}) == list(range(THREADS))  # the threads did interleave in one log


@pytest.mark.postgres
def test_an_op_on_one_key_does_not_wait_for_another_key() -> None:
    gates.update({"slow": threading.Event(), "slow:held": threading.Event()})
    holder = threading.Thread(
        target=lambda: in_other_thread(lambda: durable.call_entity("r_counter", "a", "hold", "slow"))
    )
    holder.start()
    try:
        assert gates["slow:held"].wait(SETTLE)  # key "a" is locked by the op in flight
        # Key "b" goes ahead at once; key "a" itself is locked (its call gives up and writes nothing).
        assert durable.call_entity("r_counter", "b", "bump", 0) == 0
        with pytest.raises(durable.EntityTimeout):
            durable.call_entity("r_counter", "a", "bump", 0, timeout=0.05)
    finally:
        gates["slow"].set()
        holder.join(SETTLE)
    assert [op.op for op in EntityOp.objects.filter(entity__key="a")] == ["hold"]
    assert durable.get_entity_state("r_counter", "a") == {"n": 0}


def test_a_call_that_cannot_take_the_lock_within_its_timeout_raises_and_writes_nothing() -> None:
    durable.call_entity("r_counter", "held", "bump", 0)
    with transaction.atomic():
        # This connection holds the entity's row (PostgreSQL) or the database's write lock (SQLite).
        assert len(Entity.objects.select_for_update().filter(name="r_counter", key="held")) == 1
        with pytest.raises(durable.EntityTimeout, match="stayed locked"):
            in_other_thread(lambda: durable.call_entity("r_counter", "held", "bump", 1, timeout=0.05))
        other_key = lambda: durable.call_entity("r_counter", "new-key", "bump", 1, timeout=0.05)  # noqa: E731
        if connection.vendor == "postgresql":
            assert in_other_thread(other_key) == 0  # a row lock: another key is free
        else:
            with pytest.raises(durable.EntityTimeout):  # SQLite: one writer at a time, for every key
                in_other_thread(other_key)
    assert durable.get_entity_state("r_counter", "held") == {"n": 1, "last": 0}
    assert EntityOp.objects.filter(entity__key="held").count() == 1
    assert Entity.objects.filter(key="new-key").exists() is (connection.vendor == "postgresql")
    # Once the lock is free, the same call goes through.
    assert durable.call_entity("r_counter", "held", "bump", 1, timeout=0.05) == 1


@durable.workflow(name="r_locked_out")
def r_locked_out(ctx: Any) -> str:
    try:
        ctx.call_entity("r_counter", "busy", "bump", 9, timeout=0.05)
    except durable.EntityTimeout:
        outcome = "timed out"
    else:
        outcome = "applied"
    ctx.wait_signal("go")
    return outcome


@pytest.mark.postgres
def test_a_workflow_call_that_times_out_is_recorded_and_raises_again_on_replay() -> None:
    durable.call_entity("r_counter", "busy", "bump", 0)
    run_id = durable.start(r_locked_out, run_id="locked-out")
    with transaction.atomic():
        assert len(Entity.objects.select_for_update().filter(key="busy")) == 1
        assert in_other_thread(lambda: run_until_settled(run_id)).status == "suspended"
    cp = Checkpoint.objects.get(run_id=run_id, seq=1)
    assert (cp.kind, cp.name, cp.status, cp.error["code"]) == ("entity", "r_counter.bump", "failed", "entity_timeout")
    durable.signal(run_id, "go", None)
    run = run_until_settled(run_id)  # the lock is free now: the replay still takes the recorded timeout
    assert (run.status, run.output) == ("completed", "timed out")
    assert Entity.objects.get(key="busy").ops == 1  # the workflow's op was never applied


@pytest.mark.postgres
def test_a_call_inside_a_transaction_gives_the_transaction_its_lock_timeout_back() -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '7s'")
        durable.call_entity("r_counter", "tx", "bump", 0, timeout=0.5)
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "7s"
    with connection.cursor() as cursor:  # and a call of its own leaves the session's setting alone
        durable.call_entity("r_counter", "tx", "bump", 0, timeout=0.5)
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"
