"""Celery beat's sweeps get a queue of their own; ``durable.W020`` warns when they share one with work."""

from __future__ import annotations

import pytest
from celery import Celery
from django.test import override_settings

import durable
from durable.checks import check_sweep_queue
from durable.runtime import registry
from durable.transports.celery import SWEEP_ENTRY, SWEEP_TASK, configure


def configured(**durable_options: object) -> Celery:
    app = Celery("sweep-queue-test", set_as_current=False)
    with override_settings(DURABLE={"TRANSPORT": "celery", **durable_options}):
        configure(app)
    return app


def test_beat_sends_the_sweeps_to_their_own_queue_with_an_expiry_of_two_intervals():
    app = configured()
    entry = app.conf.beat_schedule[SWEEP_ENTRY]
    assert entry["task"] == SWEEP_TASK
    assert entry["schedule"] == 2.0
    assert entry["options"] == {"queue": "durable.sweeps", "expires": 4.0}
    # Sent by hand (not by beat), the task goes to the same queue.
    assert app.conf.task_routes[SWEEP_TASK] == {"queue": "durable.sweeps"}
    assert app.amqp.router.route({}, SWEEP_TASK)["queue"].name == "durable.sweeps"


def test_the_sweep_queue_and_interval_are_settings():
    app = configured(SWEEP_QUEUE="ops.sweeps", SWEEP_INTERVAL="500ms")
    entry = app.conf.beat_schedule[SWEEP_ENTRY]
    assert (entry["schedule"], entry["options"]) == (0.5, {"queue": "ops.sweeps", "expires": 1.0})


def test_an_entry_of_the_projects_own_is_kept():
    app = Celery("sweep-queue-test", set_as_current=False)
    own = {"task": SWEEP_TASK, "schedule": 10.0, "options": {"queue": "mine"}}
    app.conf.beat_schedule = {SWEEP_ENTRY: own}
    app.conf.task_routes = {"other.task": {"queue": "x"}}
    with override_settings(DURABLE={"TRANSPORT": "celery"}):
        configure(app)
    assert app.conf.beat_schedule[SWEEP_ENTRY] == own
    assert app.conf.task_routes == {SWEEP_TASK: {"queue": "durable.sweeps"}, "other.task": {"queue": "x"}}


def ids(found: list[object]) -> list[str]:
    return [getattr(m, "id", "") for m in found]


def test_no_warning_with_the_default_queue_or_without_celery():
    with override_settings(DURABLE={"TRANSPORT": "celery"}):
        assert "durable.W020" not in ids(check_sweep_queue())
    with override_settings(DURABLE={"TRANSPORT": "inline", "SWEEP_QUEUE": "durable"}):
        assert check_sweep_queue() == []


def test_warns_when_the_sweeps_share_the_turns_queue():
    with override_settings(DURABLE={"TRANSPORT": "celery", "SWEEP_QUEUE": "durable"}):
        found = check_sweep_queue()
    assert ids(found) == ["durable.W020"]
    assert "['durable']" in found[0].msg


@pytest.fixture
def reports_step():
    @durable.step(name="reports.build")
    def build() -> None:
        return None

    yield
    registry._steps.pop("reports.build", None)


def test_warns_when_the_sweeps_share_a_steps_queue(reports_step):
    with override_settings(DURABLE={"TRANSPORT": "celery", "SWEEP_QUEUE": "reports"}):
        assert ids(check_sweep_queue()) == ["durable.W020"]


def test_warns_when_the_loaded_apps_beat_entry_sends_the_sweeps_to_the_work_queue():
    app = Celery("sweep-queue-test", set_as_current=False)
    app.conf.beat_schedule = {SWEEP_ENTRY: {"task": SWEEP_TASK, "schedule": 2.0, "options": {"queue": "durable"}}}
    previous = durable_current_app()
    app.set_current()
    try:
        with override_settings(DURABLE={"TRANSPORT": "celery"}):
            found = check_sweep_queue()
    finally:
        previous.set_current()
    assert ids(found) == ["durable.W020"]


def durable_current_app() -> Celery:
    from celery import current_app

    return current_app._get_current_object()  # type: ignore[no-any-return]
