"""Namespace queues (``NAMESPACE_QUEUES``, the Celery transport) and the inline transport of a scoped process.

The queue names are a contract (docs: Tenancy): the default namespace keeps
today's names, another namespace's turns go to ``durable.ns.<namespace>`` and
its steps to ``<queue>.ns.<namespace>``, requirements after it. The real-process
test with two Celery workers is tests/integration/test_namespaces.py.
"""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import durable
from durable import conf, runtime, tasks
from durable.engine.namespaces import namespace_of, namespaces_of, queue_for
from durable.fleet import descriptor
from durable.models import Checkpoint, Run
from durable.observability import snapshot
from durable.runtime import get_engine, serve_routes_eagerly
from durable.testing import run_until_settled
from durable.transports.celery import CeleryTransport
from tests.threads import SETTLE

pytestmark = pytest.mark.django_db(transaction=True)


@durable.step(name="nsr.work")
def nsr_work(x: int) -> int:
    return x + 1


@durable.workflow(name="nsr.stepped")
def nsr_stepped(ctx: durable.WorkflowContext, x: int) -> int:
    return int(ctx.step(nsr_work, x))


@durable.workflow(name="nsr.signalled")
def nsr_signalled(ctx: durable.WorkflowContext) -> Any:
    return ctx.wait_signal("go")


@pytest.fixture(autouse=True)
def _unscoped():
    yield
    runtime.serve_namespaces(None)
    serve_routes_eagerly(frozenset())


def test_queue_names_per_namespace_compose_with_requirements():
    own = {"own_queues": True, "default": "default"}
    assert queue_for(None, "default", **own) is None and queue_for("payments", "default", **own) == "payments"
    assert queue_for(None, "acme", **own) == "durable.ns.acme"
    assert queue_for("payments", "acme", **own) == "payments.ns.acme"
    assert queue_for("payments@gpu+pdf", "acme", **own) == "payments.ns.acme@gpu+pdf"
    assert queue_for("payments", "acme", own_queues=False, default="default") == "payments"
    assert queue_for(None, "main", own_queues=True, default="main") is None
    assert (
        namespace_of("payments.ns.acme@gpu", "default") == "acme" and namespace_of("payments", "default") == "default"
    )
    assert namespace_of("durable.ns.a.ns.b", "default") == "a.ns.b"  # a queue's own name has no ".ns."
    assert namespaces_of(["durable.ns.a", "nsr.ns.a@gpu", "nsr.ns.b"], "default") == {"a", "b"}


def test_bad_settings_and_reserved_queue_names_are_refused():
    with pytest.raises(ImproperlyConfigured, match="NAMESPACE_QUEUES'] must be True or False, got 'yes'"):
        conf.parse({"NAMESPACE_QUEUES": "yes"})
    with pytest.raises(
        durable.ConfigurationError, match=r"'pay\.ns\.x' is invalid: '\.ns\.' names a namespace's queues"
    ):
        durable.step(name="nsr.bad", queue="pay.ns.x")(lambda: None)


class _Store:
    """Answers get_run for the namespaces it was given, counting the reads."""

    def __init__(self, namespaces: dict[str, str]) -> None:
        self.namespaces = namespaces
        self.reads = 0

    def get_run(self, run_id: str) -> Any:
        self.reads += 1
        found = self.namespaces.get(run_id)
        return None if found is None else SimpleNamespace(namespace=found)


def _sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    sent: list[tuple[str, str]] = []
    for task in (tasks.run_turn, tasks.execute_step):
        monkeypatch.setattr(task, "apply_async", lambda *a, _t=task, **kw: sent.append((_t.name, kw["queue"])))
    return sent


def test_the_celery_transport_sends_each_namespace_to_its_queues(monkeypatch):
    sent = _sent(monkeypatch)
    store = _Store({"r-acme": "acme", "r-default": "default"})
    engine = SimpleNamespace(settings=conf.parse({"NAMESPACE_QUEUES": True}), store=store)
    transport = CeleryTransport(lambda: engine)  # type: ignore[arg-type,return-value]
    transport.dispatch_turn("r-acme", namespace="acme")
    transport.dispatch_step("r-acme", 1, "payments@gpu", namespace="acme")
    transport.dispatch_turn("r-default", namespace="default")
    transport.dispatch_step("r-default", 1, "payments@gpu", namespace="default")
    assert store.reads == 0  # the callers said which namespace
    transport.dispatch_turn("r-acme")  # a signal, a woken waiter: the run's row says
    transport.dispatch_step("r-acme", 2, None)
    transport.dispatch_turn("r-default")
    assert store.reads == 0  # remembered from the dispatches above (a run's namespace never changes)
    store.namespaces["r-other"] = "globex"
    transport.dispatch_step("r-other", 1, "payments")
    transport.dispatch_turn("r-other")
    assert store.reads == 1
    turn, step = "durable.run_turn", "durable.execute_step"
    assert sent == [
        (turn, "durable.ns.acme"),
        (step, "payments.ns.acme@gpu"),
        (turn, "durable"),
        (step, "payments@gpu"),
        (turn, "durable.ns.acme"),
        (step, "durable.ns.acme"),
        (turn, "durable"),
        (step, "payments.ns.globex"),
        (turn, "durable.ns.globex"),
    ]


def test_without_namespace_queues_every_namespace_keeps_the_plain_queues_and_nothing_is_read(monkeypatch):
    sent = _sent(monkeypatch)
    store = _Store({"r-acme": "acme"})
    engine = SimpleNamespace(settings=conf.parse({}), store=store)
    transport = CeleryTransport(lambda: engine)  # type: ignore[arg-type,return-value]
    transport.dispatch_turn("r-acme")
    transport.dispatch_step("r-acme", 1, "payments")
    transport.dispatch_step("r-acme", 2, None)
    step = "durable.execute_step"
    assert sent == [("durable.run_turn", "durable"), (step, "payments"), (step, "durable")]
    assert store.reads == 0


def test_a_worker_consuming_a_namespaces_step_queue_runs_only_that_namespaces_steps_eagerly():
    with override_settings(DURABLE={"TRANSPORT": "manual", "NAMESPACE_QUEUES": True}):
        serve_routes_eagerly(frozenset(["durable.ns.acme", "nsr.ns.acme"]))
        acme = durable.start(nsr_stepped, 1, namespace="acme")
        plain = durable.start(nsr_stepped, 1)
        engine = get_engine()
        assert engine.run_turn(acme) == "completed"  # its step ran in the turn
        assert engine.run_turn(plain) == "suspended"  # the default namespace's "nsr" is not consumed here
        assert Checkpoint.objects.get(run_id=plain).status == "pending"


def _wait(predicate: Any) -> None:
    deadline = time.monotonic() + SETTLE
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_an_inline_process_scoped_to_a_namespace_leaves_other_namespaces_work_in_the_tables():
    inline = {"TRANSPORT": "inline", "EMBEDDED_WORKER": False, "WORKER_THREADS": 2}
    with override_settings(DURABLE=inline):
        runtime.serve_namespaces(frozenset({"a"}))
        other = durable.start(nsr_signalled, namespace="b")  # not run here, not even leased
        durable.signal(other, "go", "b's payload")  # its announcement reads the run: namespace b
        mine = durable.start(nsr_signalled, namespace="a")
        durable.signal(mine, "go", "a's payload")
        _wait(lambda: Run.objects.get(id=mine).status == "completed")
        assert durable.get_run(mine).output == "a's payload"
        left = Run.objects.get(id=other)
        assert (left.status, left.turns, left.locked_by) == ("pending", 0, None)
        runtime.serve_namespaces(frozenset({"b"}))  # the worker of b, scoped the same way, takes it
        done = run_until_settled(other)
    assert (done.status, done.output) == ("completed", "b's payload")


def test_the_health_snapshot_counts_a_namespaces_ready_steps_on_its_own_queue():
    with override_settings(DURABLE={"TRANSPORT": "manual", "NAMESPACE_QUEUES": True}):
        acme = durable.start(nsr_stepped, 1, namespace="acme")
        assert get_engine().run_turn(acme) == "suspended"  # its step is pending, stored on the plain "nsr"
        assert Checkpoint.objects.get(run_id=acme).queue == "nsr"
    with override_settings(DURABLE={"TRANSPORT": "celery", "NAMESPACE_QUEUES": True}):
        engine = get_engine()
        now = engine.clock.now()
        worker = descriptor("acme-worker", ["durable.ns.acme", "nsr.ns.acme"], registry=runtime.registry)
        engine.store.advertise(worker, now, now + timedelta(hours=1))
        queues = snapshot._queues(engine, now)
    assert (queues["nsr.ns.acme"].pending_steps, queues["nsr.ns.acme"].live_workers) == (1, 1)
    assert "nsr" not in queues  # no false "queue 'nsr' has pending steps and no live worker"
