"""The ``@durable.workflow``, ``@durable.step`` and ``@durable.entity`` decorators.

They validate their options at decoration time (a malformed option raises
:class:`~durable.ConfigurationError` at import of the user's module), build a
frozen :class:`~durable.engine.registry.WorkflowDef` / ``StepDef`` and add it
to the process's default registry, :data:`durable.runtime.registry`, which the
runtime hands to the engine. The decorated function is returned unchanged,
carrying its definition as ``__durable_workflow__`` / ``__durable_step__``.

Registration happens at import time (the app auto-discovers ``workflows.py`` in
every installed app), so every process that imports the same code has the same
registry.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

from durable import runtime
from durable.engine import retention as retention_policy
from durable.engine.durations import Duration, to_seconds
from durable.engine.entities import HISTORY, entity_def
from durable.engine.namespaces import INFIX
from durable.engine.registry import StepDef, WorkflowDef, qualname
from durable.engine.requirements import check_requires
from durable.engine.retry import BackoffSpec, check_retries, make_backoff
from durable.engine.singletons import Singleton
from durable.exceptions import ConfigurationError, InvalidInput
from durable.schedules.spec import Schedule

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,199}$")


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"{what} name {name!r} is invalid: use letters, digits, '_', '.', ':' or '-' "
            "(at most 200 characters, not starting with a digit)"
        )
    return name


def _takes_input(fn: Callable[..., Any]) -> bool:
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if not params:
        raise ConfigurationError(f"workflow {qualname(fn)} must accept the context as its first argument")
    return len(params) > 1


def _opt_seconds(value: Duration | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = to_seconds(value)
    if seconds <= 0:
        raise ConfigurationError(f"{what} must be positive")
    return seconds


def _retention(value: Any, name: str) -> dict[str, float | None] | None:
    """A workflow's ``retention=`` as ages in seconds per status, refused with a clear message when malformed."""
    if value is None:
        return None
    try:
        return retention_policy.parse_ages(value, f"workflow {name!r} retention")
    except InvalidInput as exc:
        raise ConfigurationError(str(exc)) from None


def _check_workflow_options(
    version: Any,
    tags: Any,
    on_event: Any,
    updates: Any,
    where: Any,
    input: Any,
    debounce: Any,
    batch: Any,
) -> tuple[int, float] | None:
    """Refuse malformed ``@workflow`` options with a clear message; returns the parsed ``batch``."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigurationError(f"workflow version must be a positive integer, got {version!r}")
    if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
        raise ConfigurationError("workflow tags must be a list of strings")
    if isinstance(on_event, str) or not all(isinstance(e, str) and e for e in on_event):
        raise ConfigurationError("on_event must be a list of event names")
    if updates is not None and (
        not isinstance(updates, dict)
        or not all(isinstance(k, str) and k and (v is None or callable(v)) for k, v in updates.items())
    ):
        raise ConfigurationError("updates must map update names to a validator (or None)")
    if where is not None and not callable(where):
        raise ConfigurationError("where must be a callable taking the event")
    if input is not None and not callable(input):
        raise ConfigurationError("input must be a callable mapping the event to the workflow's input")
    if debounce is not None and batch is not None:
        raise ConfigurationError("choose debounce or batch, not both")
    if (debounce is not None or batch is not None) and not on_event:
        raise ConfigurationError("debounce and batch coalesce event-started runs: give on_event=[...] too")
    return _batch_spec(batch)


def _batch_spec(batch: Any) -> tuple[int, float] | None:
    """``batch=(size, window)`` as ``(size, seconds)``; None without batching."""
    if batch is None:
        return None
    if (
        not isinstance(batch, (tuple, list))
        or len(batch) != 2
        or isinstance(batch[0], bool)
        or not isinstance(batch[0], int)
        or batch[0] < 1
    ):
        raise ConfigurationError("batch must be (size, window), e.g. (10, '1m')")
    return (batch[0], _opt_seconds(batch[1], "batch window") or 0.0)


def _schedule_keys(name: str, schedule: Any, schedules: Any) -> list[tuple[str, Any]]:
    """``schedule=`` keyed by the workflow's name, ``schedules=[...]`` by ``name:index``."""
    if schedule is not None and schedules:
        raise ConfigurationError("choose schedule= or schedules=, not both")
    given = [schedule] if schedule is not None else list(schedules)
    if isinstance(schedules, (str, bytes)) or not all(isinstance(s, Schedule) for s in given):
        raise ConfigurationError("schedule must be a durable.Schedule (schedules= a list of them)")
    if schedule is not None:
        return [(name, schedule)]
    return [(f"{name}:{i}", spec) for i, spec in enumerate(given)]


@overload
def workflow(fn: F, /) -> F: ...
@overload
def workflow(
    *,
    name: str | None = None,
    version: int = 1,
    tags: list[str] | tuple[str, ...] = (),
    timeout: Duration | None = None,
    validate: Callable[[Any], Any] | None = None,
    on_event: list[str] | tuple[str, ...] = (),
    updates: dict[str, Callable[[Any], Any] | None] | None = None,
    where: Callable[[dict[str, Any]], Any] | None = None,
    input: Callable[[dict[str, Any]], Any] | None = None,
    debounce: Duration | None = None,
    batch: tuple[int, Duration] | None = None,
    schedule: Any = None,
    schedules: list[Any] | tuple[Any, ...] = (),
    retention: dict[str, Duration | None] | None = None,
    singleton: Singleton | None = None,
) -> Callable[[F], F]: ...


def workflow(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    version: int = 1,
    tags: list[str] | tuple[str, ...] = (),
    timeout: Duration | None = None,
    validate: Callable[[Any], Any] | None = None,
    on_event: list[str] | tuple[str, ...] = (),
    updates: dict[str, Callable[[Any], Any] | None] | None = None,
    where: Callable[[dict[str, Any]], Any] | None = None,
    input: Callable[[dict[str, Any]], Any] | None = None,
    debounce: Duration | None = None,
    batch: tuple[int, Duration] | None = None,
    schedule: Any = None,
    schedules: list[Any] | tuple[Any, ...] = (),
    retention: dict[str, Duration | None] | None = None,
    singleton: Singleton | None = None,
) -> Any:
    """Register a workflow function ``fn(ctx, input)`` (or ``fn(ctx)``).

    ``name`` defaults to the function's name; ``version`` is a positive integer
    (new runs take the highest); ``tags`` are copied onto every run; ``timeout``
    bounds the run's whole execution; ``validate(input)`` runs in the caller of
    :func:`durable.start` and may return a cleaned input or raise to refuse it.
    ``on_event`` lists named events that each start a run (input: the payload).
    ``updates`` maps update names the workflow accepts (``ctx.wait_update``) to a
    validator run in the caller of :func:`durable.update` (None: accept as is).
    Lifecycle subscriptions (``on_event=["run.completed:checkout"]``) take
    ``where(event)`` to filter and ``input(event)`` to map the event to this
    workflow's input; any subscription (lifecycle or named event) takes either
    ``debounce="30s"`` (one run with the last event once events stop for that
    long) or ``batch=(size, window)`` (one run with the list of events, when
    ``size`` arrived or ``window`` passed since the first).
    ``schedule=durable.Schedule(...)`` starts it on a schedule keyed by the
    workflow's name (``schedules=[...]``: several, keyed ``name:0``, ``name:1``...),
    synced to the database when a worker or sweep starts.
    ``retention={"completed": "7d", "failed": None}`` overrides
    ``DURABLE["RETENTION"]`` for this workflow's runs, status by status (None:
    keep forever; the newest registered version's value holds for all versions).
    ``singleton=durable.Singleton(key=..., limit=1, max_queue_depth=None)`` runs
    at most ``limit`` runs per key at a time; the others wait ``queued``, FIFO.
    The function is returned unchanged.
    """

    options: dict[str, Any] = dict(
        name=name, version=version, tags=tags, timeout=timeout, validate=validate, on_event=on_event
    )
    options.update(updates=updates, where=where, input=input, debounce=debounce, batch=batch, schedule=schedule)
    options.update(schedules=schedules, retention=retention, singleton=singleton)

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        return _register_workflow(func, **options)

    return register(fn) if fn is not None else register


def _register_workflow(
    func: Callable[..., Any],
    *,
    name: str | None,
    version: int,
    tags: list[str] | tuple[str, ...],
    timeout: Duration | None,
    validate: Callable[[Any], Any] | None,
    on_event: list[str] | tuple[str, ...],
    updates: dict[str, Callable[[Any], Any] | None] | None,
    where: Callable[[dict[str, Any]], Any] | None,
    input: Callable[[dict[str, Any]], Any] | None,
    debounce: Duration | None,
    batch: tuple[int, Duration] | None,
    schedule: Any,
    schedules: list[Any] | tuple[Any, ...],
    retention: dict[str, Duration | None] | None,
    singleton: Singleton | None,
) -> Callable[..., Any]:
    """What :func:`workflow` does with the function: check the options, register it, mark it."""
    batch_spec = _check_workflow_options(version, tags, on_event, updates, where, input, debounce, batch)
    if singleton is not None and not isinstance(singleton, Singleton):
        raise ConfigurationError("singleton must be a durable.Singleton(key=..., limit=..., max_queue_depth=...)")
    wf = WorkflowDef(
        name=_check_name(name or func.__name__, "workflow"),
        version=version,
        fn=func,
        tags=tuple(tags),
        timeout=_opt_seconds(timeout, "workflow timeout"),
        validate=validate,
        takes_input=_takes_input(func),
        on_event=tuple(on_event),
        updates=dict(updates or {}),
        where=where,
        event_input=input,
        debounce=_opt_seconds(debounce, "debounce"),
        batch=batch_spec,
        retention=_retention(retention, name or func.__name__),
        singleton=singleton,
    )
    runtime.registry.add_workflow(wf)
    runtime.registry.set_schedules(wf.name, _schedule_keys(wf.name, schedule, schedules))
    func.__durable_workflow__ = wf  # type: ignore[attr-defined]
    return func


@overload
def step(fn: F, /) -> F: ...
@overload
def step(
    *,
    name: str | None = None,
    queue: str | None = None,
    retries: int = 0,
    backoff: BackoffSpec = None,
    timeout: Duration | None = None,
    compensate: Any = None,
    key: Callable[..., Any] | None = None,
    requires: Iterable[str] | None = None,
) -> Callable[[F], F]: ...


def step(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    retries: int = 0,
    backoff: BackoffSpec = None,
    timeout: Duration | None = None,
    compensate: Any = None,
    key: Callable[..., Any] | None = None,
    requires: Iterable[str] | None = None,
) -> Any:
    """Register a step: a plain function a workflow runs with ``ctx.step(fn, *args)``.

    Its arguments and return value must be JSON. ``queue`` routes it to workers
    serving that queue (default: the transport's default queue);
    ``retries`` and ``backoff`` set the retry policy; ``timeout`` bounds one
    attempt; ``compensate`` (a step, or a function of ``(input, output)``) undoes
    it when a run fails after it completed. ``key`` (a function of the step's
    arguments returning a string) names the key a call counts against for the
    ``key_concurrency`` limit and the round robin of a limited queue
    (``DURABLE["QUEUES"]``); a call can name its own with ``queue_key=``.
    ``requires`` (capability names, e.g. ``["gpu"]``) restricts it to workers
    that have them (``durable_worker --capability gpu``, or a Celery worker
    consuming the queue ``"<queue>@gpu"``); with no live worker that has them,
    its run is parked ``blocked`` with a reason naming the capability. The
    function is returned unchanged and can still be called directly.
    """

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        step_name = _check_name(name or func.__name__, "step")
        if queue is not None:
            _check_name(queue, "queue")
            if INFIX in queue:
                raise ConfigurationError(f"queue name {queue!r} is invalid: {INFIX!r} names a namespace's queues")
        sd = StepDef(
            name=step_name,
            fn=func,
            queue=queue,
            retries=check_retries(retries),
            backoff=make_backoff(backoff),
            timeout=_opt_seconds(timeout, "step timeout"),
            compensate=compensate,
            key=key,
            requires=check_requires(requires, f"step {step_name!r}"),
        )
        if key is not None and not callable(key):
            raise ConfigurationError(f"step {step_name!r}: key must be a function of the step's arguments")
        if compensate is not None and not callable(compensate):
            raise ConfigurationError(f"step {step_name!r}: compensate must be a step or a function")
        runtime.registry.add_step(sd)
        func.__durable_step__ = sd  # type: ignore[attr-defined]
        return func

    return register(fn) if fn is not None else register


def entity(name: str, *, initial: Any = None, history: int = HISTORY) -> Callable[[T], T]:
    """Declare entity ``name`` on a class or on a dict of handlers; returns it unchanged.

    Class form: each public method is an operation, called on a fresh
    instance whose ``self.state`` holds the key's state (reassign it at will).
    Dict form: ``{"op": handler}`` with ``handler(state, arg) -> result``
    changing ``state`` (a dict or a list) in place. ``initial`` is the state
    of a key never operated on (a JSON value, or a callable returning one);
    ``history`` how many applied operations each key's op log keeps (also
    the window in which a repeated op id is recognised). Operations are
    applied with :func:`durable.call_entity`, :func:`durable.signal_entity`,
    ``ctx.call_entity`` and ``ctx.signal_entity``, one at a time per key.
    """

    def register(target: T) -> T:
        found = entity_def(name, target, initial, history)
        runtime.registry.add_entity(found)
        if isinstance(target, type):
            target.__durable_entity__ = found  # type: ignore[attr-defined]
        return target

    return register
