"""Logs: an idle beat writes nothing at INFO, and records about a run carry its fields."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery

import durable
from durable import conf, runtime
from durable.client import Client
from durable.engine.core import Engine
from durable.engine.registry import Registry, WorkflowDef
from durable.models import Run
from durable.runtime import get_engine
from durable.store.memory import MemoryStore
from durable.testing import FakeClock, fake_clock
from durable.transports.celery import configure
from durable.transports.celery_logs import CELERY_LOGGERS, SWEEP_TASK
from durable.transports.manual import ManualTransport
from durable.worker.tick import tick

pytestmark = pytest.mark.django_db

SWEEP_EVERY = conf.DEFAULTS["SWEEP_INTERVAL"]  # what beat uses by default
HOUR_OF_BEATS = int(3600 / SWEEP_EVERY)


@durable.workflow(name="log_sleeper")
def log_sleeper(ctx):
    ctx.sleep("2h")


@pytest.fixture
def celery_app() -> Celery:
    app = Celery("durable_logs_test")
    configure(app)
    app.conf.task_always_eager = True
    return app


def info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.INFO]


def test_an_idle_hour_of_beat_sweeps_writes_no_info_line(caplog):
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    registry = Registry()
    registry.add_workflow(WorkflowDef(name="log_sleeper", version=1, fn=log_sleeper, takes_input=False))
    engine = Engine(MemoryStore(clock=clock), ManualTransport(), runtime.settings(), registry=registry, clock=clock)
    run_id = Client(engine).start("log_sleeper")
    tick(engine)  # the run goes to sleep for two hours: nothing is due within the hour
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="durable")
    for _ in range(HOUR_OF_BEATS):
        clock.advance(timedelta(seconds=SWEEP_EVERY))
        tick(engine, execute=False)  # what the beat's sweep task runs
    assert info_lines(caplog) == []
    assert engine.store.get_run(run_id).status == "suspended"
    debug = [r for r in caplog.records if r.name == "durable.sweeps"]
    assert len(debug) == HOUR_OF_BEATS and {r.getMessage() for r in debug} == {"sweep: nothing to do"}


def test_celery_lines_about_an_idle_sweep_are_debug(caplog, celery_app):
    from durable.tasks import sweep

    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="durable")
    for _ in range(3):
        # What beat logs when it sends the task, then the task as a Celery worker runs it.
        logging.getLogger("celery.beat").info("Scheduler: Sending due task %s (%s)", "durable-sweep", SWEEP_TASK)
        sweep.apply()
    assert info_lines(caplog) == []
    demoted = [r for r in caplog.records if r.name in CELERY_LOGGERS]
    assert len(demoted) == 6 and {r.levelname for r in demoted} == {"DEBUG"}


def test_a_sweep_that_did_something_logs_its_counts_at_info(caplog):
    with fake_clock() as clock:
        run_id = durable.start(log_sleeper)
        tick(get_engine())
        clock.advance(timedelta(hours=3))
        caplog.clear()
        caplog.set_level(logging.INFO, logger="durable")
        counts = tick(get_engine())
    assert durable.get_run(run_id).status == "completed"
    summaries = [r for r in caplog.records if r.name == "durable.sweeps"]
    assert [(r.levelname, r.getMessage()) for r in summaries] == [("INFO", "sweep: turns=1")]
    assert summaries[0].counts == counts


def test_celerys_line_of_a_sweep_that_did_something_stays_info(caplog, celery_app):
    caplog.set_level(logging.INFO)
    trace_logger = logging.getLogger("celery.app.trace")
    for counts in ("{'timeouts': 0, 'recovered': 0}", "{'timeouts': 0, 'recovered': 1}"):
        context = {"id": "x", "name": SWEEP_TASK, "return_value": counts, "runtime": 0.01}
        trace_logger.info(
            "Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s", context, extra={"data": context}
        )
    assert info_lines(caplog) == [
        "celery.app.trace: Task durable.sweep[x] succeeded in 0.01s: {'timeouts': 0, 'recovered': 1}"
    ]


def test_other_celery_tasks_keep_their_info_lines(caplog, celery_app):
    caplog.set_level(logging.INFO)
    logging.getLogger("celery.beat").info("Scheduler: Sending due task %s (%s)", "nightly", "reports.nightly")
    assert info_lines(caplog) == ["celery.beat: Scheduler: Sending due task nightly (reports.nightly)"]


def test_records_about_a_run_carry_its_fields(caplog):
    run_id = durable.start(log_sleeper)
    Run.objects.filter(id=run_id).update(
        status="running", locked_by="gone", locked_until=runtime.now() - timedelta(seconds=1), recovery_attempts=5
    )
    caplog.set_level(logging.INFO, logger="durable")
    tick(get_engine())
    dead = [r for r in caplog.records if "dead-lettered" in r.getMessage()]
    assert [(r.name, r.levelname, r.run_id) for r in dead] == [("durable.sweeps", "ERROR", run_id)]


def test_a_turn_given_back_after_a_fault_says_which_run(caplog, monkeypatch):
    with fake_clock() as clock:
        run_id = durable.start(log_sleeper)
        tick(get_engine())
        clock.advance(timedelta(hours=3))

        def broken(*args, **kwargs):
            raise ConnectionError("the database went away")

        # Both history reads: the whole history, and the changes since (the process's history cache).
        monkeypatch.setattr(get_engine().store, "load_checkpoints", broken)
        monkeypatch.setattr(get_engine().store, "load_delta", broken)
        caplog.set_level(logging.WARNING, logger="durable")
        get_engine().run_turn(run_id)
    abandoned = [r for r in caplog.records if "abandoned" in r.getMessage()]
    assert [(r.name, r.run_id) for r in abandoned] == [("durable.turn", run_id)]
