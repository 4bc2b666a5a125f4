"""Django's Tasks framework on django-durable: every enqueued task is a durable run.

    TASKS = {"default": {"BACKEND": "durable.tasks_backend.DurableBackend"}}

On Django 6 this is ``django.tasks``; on Django 5.2 the ``django-tasks`` backport
package provides the same API (``pip install django-durable[tasks]``), and this
backend works with either.

Guarantees:

* ``enqueue()`` writes one run of the workflow ``django.task`` (in the caller's
  transaction if there is one) and returns its :class:`TaskResult`; the result id
  is the run id, so ``get_result()`` works from any process.
* The task function runs as a dispatched durable step, routed to the task's
  queue (Django's ``"default"`` queue is durable's default queue). A task
  that raises, or whose worker dies mid-task (once its execution lease lapses:
  error code ``worker_lost``), is attempted again after a back-off, up to the
  task's ``retries`` (``@task(retries=3)``, or :func:`retries` under ``@task`` on
  Django 6.0; default ``OPTIONS["retries"]``, 0): a task that kills its worker
  every time ends ``FAILED`` after ``retries + 1`` attempts.
  A task may therefore run more than once; its result is recorded once.
* ``run_after`` is a durable timer; ``priority`` is the run's priority.
* Arguments and return values are JSON, as Django's Tasks framework requires.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.utils.module_loading import import_string

import durable
from durable.engine.vocab import CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import InvalidInput, RunNotFound, StepFailed

try:  # Django 6 and later
    import django.tasks.backends.base as _backends
    import django.tasks.base as _base
    import django.tasks.exceptions as _exceptions
except ImportError:  # Django 5.2 with the django-tasks backport
    import django_tasks.backends.base as _backends  # type: ignore[no-redef]
    import django_tasks.base as _base  # type: ignore[no-redef]
    import django_tasks.exceptions as _exceptions  # type: ignore[no-redef]

# Typed loosely on purpose: the two packages define the same API under different stubs.
BaseTaskBackend: Any = _backends.BaseTaskBackend
Task: Any = _base.Task
TaskContext: Any = _base.TaskContext
TaskError: Any = _base.TaskError
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
TaskResultDoesNotExist: Any = _exceptions.TaskResultDoesNotExist

_F = TypeVar("_F")

WORKFLOW = "django.task"
DEFAULT_QUEUE = "default"
# Back-off between attempts of a task that raised: 1 s, 2 s, 4 s... at most a minute.
_BACKOFF_CAP = 60.0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DurableTask(Task):  # type: ignore[misc]
    """A Django task with a retry count: ``@task(retries=3)`` (None: the backend's default)."""

    retries: int | None = None


def retries(count: int) -> Callable[[_F], _F]:
    """Give a task function its retry count, under ``@task``: works on every Django version.

    ``@task(retries=3)`` says the same where Django's ``task()`` passes options on
    to the backend's task class (Django 6.1, the backport); Django 6.0's does not.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidInput(f"retries must be a non-negative integer, got {count!r}")

    def mark(fn: _F) -> _F:
        setattr(fn, "__durable_retries__", count)  # noqa: B010 - a marker read by the backend
        return fn

    return mark


def _retries_of(task: Any, default: int) -> int:
    declared = getattr(task, "retries", None)
    if declared is None:
        declared = getattr(task.func, "__durable_retries__", None)
    return default if declared is None else int(declared)


def _step_name(queue: str) -> str:
    # No dot in the name: a dotted step name would be routed to the queue named by its prefix.
    return "django_task" if queue == DEFAULT_QUEUE else f"django_task:{queue}"


def execute_task(path: str, args: list[Any], kwargs: dict[str, Any], takes_context: bool, run_id: str) -> Any:
    """Run the task found at ``path`` (a module-level :class:`Task`); the body of every task step."""
    task = import_string(path)
    if not takes_context:
        return task.call(*args, **kwargs)
    # The attempt number counts every execution the database recorded, a crashed one too.
    attempts, _ = _attempts(run_id)
    result = _result(task, durable.get_run(run_id), attempts, running=True)
    return task.call(TaskContext(task_result=result), *args, **kwargs)


def _register_queue(queue: str) -> None:
    """Declare the step that runs tasks of ``queue`` (idempotent; the same in every process)."""
    name = _step_name(queue)
    durable.step(name=name, queue=None if queue == DEFAULT_QUEUE else queue)(_task_step(name))


def _task_step(name: str) -> Any:
    def run(path: str, args: list[Any], kwargs: dict[str, Any], takes_context: bool, run_id: str) -> Any:
        return execute_task(path, args, kwargs, takes_context, run_id)

    run.__name__ = run.__qualname__ = name.replace(".", "_").replace(":", "_")
    return run


@durable.workflow(name=WORKFLOW)
def run_task(ctx: Any, data: dict[str, Any]) -> Any:
    """One task: wait for ``run_after``, then attempt the step up to ``retries + 1`` times."""
    if data.get("run_after"):
        ctx.sleep_until(datetime.fromisoformat(data["run_after"]))
    errors: list[dict[str, Any]] = []
    for attempt in range(data["retries"] + 1):
        try:
            return ctx.step(
                _step_name(data["queue"]), data["task"], data["args"], data["kwargs"], data["takes_context"], ctx.run_id
            )
        except StepFailed as failed:
            errors.append({"traceback": failed.error.get("traceback") or "", "type": failed.error.get("type")})
            ctx.set_event("errors", errors)
            if attempt == data["retries"]:
                raise
            ctx.sleep(timedelta(seconds=min(2.0**attempt, _BACKOFF_CAP)))
    return None


class DurableBackend(BaseTaskBackend):  # type: ignore[misc]
    """A Tasks backend whose every task is a durable run (see the module docstring)."""

    task_class = DurableTask
    supports_defer = True
    supports_get_result = True
    supports_priority = True
    supports_async_task = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        retries = self.options.get("retries", 0)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidInput(f"TASKS[{alias!r}]['OPTIONS']['retries'] must be a non-negative integer")
        self.default_retries = retries
        for queue in self.queues or {DEFAULT_QUEUE}:
            _register_queue(queue)

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Start the run of ``task(*args, **kwargs)`` and return its :class:`TaskResult` (status READY).

        Idempotent per result id (a new id each call); inside ``transaction.atomic()``
        the run exists only if the transaction commits.
        """
        self.validate_task(task)
        result_id = uuid.uuid4().hex
        data = {
            "task": task.module_path,
            "args": list(args),
            "kwargs": dict(kwargs),
            "takes_context": task.takes_context,
            "queue": task.queue_name,
            "retries": _retries_of(task, self.default_retries),
            "run_after": task.run_after.isoformat() if task.run_after is not None else None,
        }
        _register_queue(task.queue_name)
        durable.start(WORKFLOW, data, run_id=result_id, priority=task.priority, tags=["django.task", task.name])
        return self.get_result(result_id)

    def get_result(self, result_id: str) -> Any:
        """The :class:`TaskResult` of ``result_id``, read from its run (any process; raises TaskResultDoesNotExist)."""
        try:
            run = durable.get_run(result_id)
        except (RunNotFound, InvalidInput):
            raise TaskResultDoesNotExist(result_id) from None
        if run.workflow != WORKFLOW:
            raise TaskResultDoesNotExist(result_id)
        task = import_string(run.input["task"])
        attempts, running = _attempts(run.id)
        return _result(task, run, attempts, running=running)


_STATUS = {
    RunStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
    RunStatus.FAILED: TaskResultStatus.FAILED,
    RunStatus.DEAD: TaskResultStatus.FAILED,
    RunStatus.CANCELLED: TaskResultStatus.FAILED,
}


def _attempts(run_id: str) -> tuple[int, bool]:
    """Executions of the run's task so far (claims of its steps), and whether one is running now."""
    from durable.runtime import get_engine

    steps = [cp for cp in get_engine().store.load_checkpoints(run_id).values() if cp.kind == CheckpointKind.STEP]
    return sum(cp.attempts for cp in steps), any(cp.status == CheckpointStatus.RUNNING for cp in steps)


def _result(task: Any, run: Any, attempts: int, *, running: bool) -> Any:
    """The :class:`TaskResult` of the run ``run``: its status, return value, errors and attempts."""
    status = _STATUS.get(run.status, TaskResultStatus.RUNNING if running else TaskResultStatus.READY)
    errors = [
        TaskError(exception_class_path=_exception_path(e["traceback"], e.get("type")), traceback=e["traceback"])
        for e in durable.get_event(run.id, "errors", [])
    ]
    if status == TaskResultStatus.FAILED and not errors and run.error:
        errors.append(TaskError(exception_class_path="durable.exceptions.RunFailed", traceback=str(run.error)))
    result = TaskResult(
        task=task,
        id=run.id,
        status=status,
        enqueued_at=run.created_at,
        started_at=run.started_at if attempts else None,
        finished_at=run.finished_at,
        last_attempted_at=run.updated_at if attempts else None,
        args=run.input["args"],
        kwargs=run.input["kwargs"],
        backend=task.backend,
        errors=errors,
        # Which process ran an attempt is not recorded: one entry per attempt, named after the run.
        worker_ids=[f"{run.id}:attempt-{n}" for n in range(1, attempts + 1)],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", run.output)
    return result


def _exception_path(traceback_text: str, type_name: str | None) -> str:
    """The dotted path of the exception a traceback ends with (``builtins.X`` for built-in ones)."""
    last = traceback_text.strip().splitlines()[-1] if traceback_text.strip() else ""
    name = last.split(":", 1)[0].strip() if last else ""
    if not name or " " in name:
        name = type_name or "Exception"
    return name if "." in name else f"builtins.{name}"


def register_configured_backends(tasks_setting: Any) -> None:
    """Build every backend of ``settings.TASKS`` that is this one, so each process declares the same steps.

    Called from the app's ``ready()``: a worker that never enqueued a task must
    still know the step of every queue a task may be routed to.
    """
    try:
        from django.tasks import task_backends
    except ImportError:
        from django_tasks import task_backends  # type: ignore[assignment]
    for alias, params in (tasks_setting or {}).items():
        if isinstance(params, dict) and params.get("BACKEND") == f"{__name__}.DurableBackend":
            task_backends[alias]
