"""Django's Tasks framework on the durable backend: enqueue, results, retries, context, run_after."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail

import durable
from durable.models import Checkpoint, Run
from durable.testing import fake_clock, run_until_settled
from tests import task_examples as ex

try:
    from django.tasks import TaskResultStatus, default_task_backend
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:
    from django_tasks import TaskResultStatus, default_task_backend  # type: ignore[no-redef]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef]

pytestmark = pytest.mark.django_db


def test_an_enqueued_task_is_a_durable_run_whose_result_reads_back() -> None:
    result = ex.email_users.enqueue(emails=["ada@example.com"], subject="Hi", message="Hello")
    assert result.status == TaskResultStatus.READY
    assert not result.is_finished
    run = Run.objects.get(id=result.id)
    assert (run.workflow, run.status) == ("django.task", "pending")
    assert set(run.tags) >= {"django.task", "email_users"}

    assert run_until_settled(result.id).status == "completed"
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 1
    assert result.attempts == 1
    assert [m.subject for m in mail.outbox] == ["Hi"]
    again = ex.email_users.get_result(result.id)
    assert (again.status, again.return_value, again.args, again.kwargs) == (
        TaskResultStatus.SUCCESSFUL,
        1,
        [],
        {"emails": ["ada@example.com"], "subject": "Hi", "message": "Hello"},
    )
    # The task function ran as a dispatched step, once.
    steps = list(Checkpoint.objects.filter(run_id=result.id, kind="step").values_list("name", "attempts", "status"))
    # Django's default queue is durable's default queue (route None), as for any step without one.
    from durable.runtime import get_engine

    assert get_engine().registry.get_step("django_task").route is None
    assert steps == [("django_task", 1, "completed")]


def test_a_task_that_takes_context_sees_its_attempt() -> None:
    ex.SEEN.clear()
    result = ex.email_users_with_context.enqueue(["bob@example.com"], "Subject", "Body")
    assert run_until_settled(result.id).status == "completed"
    assert ex.SEEN == [1]
    assert ex.email_users_with_context.get_result(result.id).return_value == 1


def test_a_raising_task_is_retried_then_fails_with_its_errors(tmp_path) -> None:
    marker = str(tmp_path / "runs")
    with fake_clock() as clock:
        result = ex.flaky.enqueue(marker, 99)
        for _ in range(3):
            run_until_settled(result.id)
            clock.advance("1m")
        assert run_until_settled(result.id).status == "failed"
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3  # retries=2: three attempts, then it gives up
    assert len((tmp_path / "runs").read_text().splitlines()) == 3
    assert [e.exception_class for e in result.errors] == [ex.Flaky, ex.Flaky, ex.Flaky]
    assert "attempt 3 fails" in result.errors[-1].traceback
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_a_retried_task_that_succeeds_keeps_the_errors_of_its_failed_attempts(tmp_path) -> None:
    marker = str(tmp_path / "runs")
    with fake_clock() as clock:
        result = ex.flaky.enqueue(marker, 2)
        run_until_settled(result.id)
        clock.advance("1m")
        assert run_until_settled(result.id).status == "completed"
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (TaskResultStatus.SUCCESSFUL, "ok after 2", 2)
    assert [e.exception_class for e in result.errors] == [ex.Flaky]


def test_run_after_is_a_durable_timer() -> None:
    with fake_clock() as clock:
        later = clock.now() + timedelta(hours=2)
        result = ex.add.using(run_after=later).enqueue(2, 3)
        assert run_until_settled(result.id).status == "suspended"
        assert ex.add.get_result(result.id).status == TaskResultStatus.READY
        clock.advance("2h")
        assert run_until_settled(result.id).status == "completed"
    assert ex.add.get_result(result.id).return_value == 5


def test_priority_and_queue_name_reach_the_run_and_its_step() -> None:
    result = ex.urgent_email.enqueue("carol@example.com")
    assert Run.objects.get(id=result.id).priority == 10
    assert run_until_settled(result.id).status == "completed"
    step = Checkpoint.objects.get(run_id=result.id, kind="step")
    assert (step.name, step.queue) == ("django_task:emails", "emails")


def test_unknown_results_and_runs_of_other_workflows_do_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("no-such-result")
    other = durable.start(_plain_workflow(), {"x": 1})
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(other)


def _plain_workflow() -> str:
    @durable.workflow(name="tasks_backend_plain")
    def plain(ctx: object, data: object) -> object:
        return data

    return "tasks_backend_plain"


def test_the_retries_option_of_task_where_django_passes_it_on() -> None:
    import django

    try:
        from django.tasks import task
    except ImportError:
        from django_tasks import task  # type: ignore[no-redef]
    from durable.tasks_backend import _retries_of

    if django.VERSION[:2] == (6, 0):
        # Django 6.0's task() takes no backend options: durable.tasks_backend.retries() is the way there.
        with pytest.raises(TypeError):
            task(retries=1)(ex.double)
        return
    assert _retries_of(task(retries=4)(ex.double), 0) == 4
    assert _retries_of(task(ex.double), 2) == 2  # no option: the backend's default
    assert _retries_of(ex.flaky, 0) == 2  # @retries(2) under @task
