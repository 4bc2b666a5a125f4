"""Limited step queues through the engine: waiting, admission, keys, retries, settings (one process)."""

from __future__ import annotations

from collections import Counter

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import durable
from durable.conf import parse
from durable.engine.vocab import Admission, CheckpointStatus
from durable.models import Checkpoint
from durable.testing import drive, run_until_settled

pytestmark = pytest.mark.django_db

QUEUES = {"q_lim": {"concurrency": 2}, "q_keyed": {"key_concurrency": 1}, "q_paused": {}}
SETTINGS = {"TRANSPORT": "manual", "LEASE": 30, "QUEUES": QUEUES}
seen: list[int] = []
attempts: Counter[str] = Counter()


def _held(queue: str) -> int:
    return Checkpoint.objects.filter(
        queue=queue, admission=Admission.ADMITTED, status__in=[CheckpointStatus.PENDING, CheckpointStatus.RUNNING]
    ).count()


@durable.step(queue="q_lim")
def q_work(i: int) -> int:
    seen.append(_held("q_lim"))
    return i * 10


@durable.step(queue="q_keyed", key=lambda customer, amount: customer)
def q_charge(customer: str, amount: int) -> int:
    return amount


@durable.step(queue="q_lim", retries=1, backoff=0)
def q_flaky() -> str:
    attempts["q_flaky"] += 1
    if attempts["q_flaky"] == 1:
        raise ConnectionError("down")
    return "ok"


@durable.workflow(name="q_fan")
def q_fan(ctx, n):
    return ctx.gather(*(durable.call(q_work, i) for i in range(n)))


@durable.workflow(name="q_keys")
def q_keys(ctx, _):
    return ctx.gather(
        durable.call(q_charge, "c1", 1),
        durable.call(q_charge, "c1", 2),
        durable.call(q_charge, "c2", 3),
        durable.call(q_charge, "c1", 4, queue_key="override"),
    )


@durable.workflow(name="q_retry")
def q_retry(ctx, _):
    return ctx.step(q_flaky)


@pytest.fixture(autouse=True)
def _settings():
    seen.clear()
    attempts.clear()
    with override_settings(DURABLE=SETTINGS):
        yield


def test_a_limited_queue_runs_every_step_with_at_most_its_concurrency_admitted():
    run_id = durable.start(q_fan, 7)
    info = run_until_settled(run_id)
    assert info.status == "completed" and info.output == [i * 10 for i in range(7)]
    assert len(seen) == 7 and max(seen) == 2
    assert set(Checkpoint.objects.filter(run_id=run_id, queue="q_lim").values_list("admission", flat=True)) == {
        Admission.ADMITTED
    }


def test_a_waiting_step_stays_pending_until_admitted():
    run_id = durable.start(q_fan, 3)
    drive()  # the turn dispatches three steps; the sweep's admission grants two
    rows = dict(Checkpoint.objects.filter(run_id=run_id).values_list("seq", "admission"))
    assert sorted(rows.values()) == [Admission.ADMITTED, Admission.ADMITTED, Admission.WAITING]
    waiting = Checkpoint.objects.get(run_id=run_id, admission=Admission.WAITING)
    assert waiting.status == CheckpointStatus.PENDING and waiting.wake_at is None


def test_the_key_comes_from_the_declaration_or_the_call_and_is_limited_per_key():
    run_id = durable.start(q_keys, None)
    info = run_until_settled(run_id)
    assert info.output == [1, 2, 3, 4]
    keys = list(Checkpoint.objects.filter(run_id=run_id).order_by("seq").values_list("queue_key", flat=True))
    assert keys == ["c1", "c1", "c2", "override"]


def test_a_retry_in_a_limited_queue_gives_its_slot_back_and_is_admitted_again():
    run_id = durable.start(q_retry, None)
    info = run_until_settled(run_id)
    assert (info.status, info.output, attempts["q_flaky"]) == ("completed", "ok", 2)


def test_a_paused_queue_admits_nothing_until_resumed():
    from durable.runtime import get_engine, now

    engine = get_engine()
    engine.store.configure_queue("q_lim", now(), paused=True)
    run_id = durable.start(q_fan, 2)
    for _ in range(3):
        drive()
    assert _held("q_lim") == 0
    assert Checkpoint.objects.filter(run_id=run_id, admission=Admission.WAITING).count() == 2
    engine.store.configure_queue("q_lim", now(), paused=False)
    assert run_until_settled(run_id).status == "completed"


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ([], "must be a dict of queue name to limits"),
        ({"q": {"concurrency": 0}}, "concurrency must be a positive integer"),
        ({"q": {"rate": "20 per second"}}, "rate must be a string like '20/s'"),
        ({"q": {"rate": "0/s"}}, "rate must be a string like '20/s'"),
        ({"q": {"burst": 3}}, "unknown limit(s) ['burst']"),
        ({"q": 5}, "must be a dict of concurrency, rate, key_concurrency"),
        ({"": {}}, "a queue name must be a non-empty string"),
    ],
)
def test_bad_queue_settings_are_refused_with_a_clear_message(queues, message):
    with pytest.raises(ImproperlyConfigured) as info:
        parse({"QUEUES": queues})
    assert message in str(info.value)


def test_queue_settings_parse_every_limit():
    limits = parse({"QUEUES": {"p": {"concurrency": 5, "rate": "100/m", "key_concurrency": 1}}}).queues["p"]
    assert limits.as_json() == {"concurrency": 5, "rate": "100/m", "key_concurrency": 1}
    assert limits.rate is not None and limits.rate.interval.total_seconds() == 0.6


def test_durable_run_shows_why_a_step_waits():
    from io import StringIO

    from django.core.management import call_command

    from durable.runtime import get_engine, now

    get_engine().store.configure_queue("q_lim", now(), paused=True)
    run_id = durable.start(q_fan, 1)
    drive()
    out = StringIO()
    call_command("durable_run", run_id, stdout=out)
    assert "pending (waiting: queue 'q_lim' is paused)" in out.getvalue()


def test_an_admission_with_nothing_waiting_is_one_statement():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from durable.engine import admission
    from durable.runtime import get_engine

    engine = get_engine()
    admission.admit(engine, "q_lim")  # creates the queue's row
    with CaptureQueriesContext(connection) as queries:
        assert admission.admit(engine, "q_lim").grants == ()
    statements = [
        q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in (q["sql"] or "")
    ]  # the test's transaction
    assert len(statements) == 1, statements
