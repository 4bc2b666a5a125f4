"""Workflow and step registry, and the ``@workflow`` / ``@step`` decorators.

The registry is per process. Workflows are keyed by ``(name, version)``; several
versions live side by side, new runs take the highest version and a run always
resumes on the version it started with. Steps are keyed by name, which is also
how a dispatched step is routed to a worker that has it.

Registration happens at import time (the app auto-discovers ``workflows.py`` in
every installed app), so every process that imports the same code has the same
registry.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar, overload

from durable.engine.durations import Duration, to_seconds
from durable.engine.retry import Backoff, BackoffSpec, check_retries, make_backoff
from durable.exceptions import ConfigurationError, StepNotFound, WorkflowNotFound

F = TypeVar("F", bound=Callable[..., Any])

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,199}$")


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"{what} name {name!r} is invalid: use letters, digits, '_', '.', ':' or '-' "
            "(at most 200 characters, not starting with a digit)"
        )
    return name


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


@dataclass(frozen=True)
class WorkflowDef:
    name: str
    version: int
    fn: Callable[..., Any]
    tags: tuple[str, ...] = ()
    timeout: float | None = None
    validate: Callable[[Any], Any] | None = None
    takes_input: bool = True
    on_event: tuple[str, ...] = ()
    updates: dict[str, Callable[[Any], Any] | None] = field(default_factory=dict)
    # Lifecycle subscriptions (on_event=["run.completed:<workflow>", ...]):
    where: Callable[[dict[str, Any]], Any] | None = None
    event_input: Callable[[dict[str, Any]], Any] | None = None
    debounce: float | None = None
    batch: tuple[int, float] | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.name, self.version)


@dataclass(frozen=True)
class StepDef:
    name: str
    fn: Callable[..., Any]
    queue: str | None = None
    retries: int = 0
    backoff: Backoff = field(default_factory=Backoff)
    timeout: float | None = None
    compensate: Any = None

    @property
    def route(self) -> str | None:
        """Where the step is dispatched: its ``queue``, else its name's prefix before a dot."""
        if self.queue:
            return self.queue
        return self.name.split(".", 1)[0] if "." in self.name else None


class Registry:
    """Thread-safe map of workflow and step definitions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workflows: dict[str, dict[int, WorkflowDef]] = {}
        self._steps: dict[str, StepDef] = {}

    # -- workflows ---------------------------------------------------------
    def add_workflow(self, wf: WorkflowDef) -> None:
        with self._lock:
            versions = self._workflows.setdefault(wf.name, {})
            existing = versions.get(wf.version)
            # Re-importing the same module (autoreload, tests) re-registers the
            # same function; two different functions under one key is a bug.
            if existing is not None and _qualname(existing.fn) != _qualname(wf.fn):
                raise ConfigurationError(
                    f"workflow {wf.name!r} version {wf.version} is already registered by "
                    f"{_qualname(existing.fn)}; give {_qualname(wf.fn)} another name or version"
                )
            versions[wf.version] = wf

    def get_workflow(self, name: str, version: int | None = None) -> WorkflowDef:
        versions = self._workflows.get(name)
        if not versions:
            raise WorkflowNotFound(f"no workflow named {name!r} is registered")
        if version is None:
            return versions[max(versions)]
        try:
            return versions[version]
        except KeyError:
            raise WorkflowNotFound(
                f"workflow {name!r} has no version {version} in this process (registered: {sorted(versions)})"
            ) from None

    def workflows(self) -> list[WorkflowDef]:
        with self._lock:
            return [wf for versions in self._workflows.values() for wf in versions.values()]

    def subscribers(self, event: str) -> list[WorkflowDef]:
        """The newest version of every workflow started by ``event`` (``on_event=[...]``)."""
        with self._lock:
            latest = [versions[max(versions)] for versions in self._workflows.values() if versions]
        return [wf for wf in latest if event in wf.on_event]

    # -- steps -------------------------------------------------------------
    def add_step(self, step: StepDef) -> None:
        with self._lock:
            existing = self._steps.get(step.name)
            if existing is not None and _qualname(existing.fn) != _qualname(step.fn):
                raise ConfigurationError(f"step {step.name!r} is already registered by {_qualname(existing.fn)}")
            self._steps[step.name] = step

    def get_step(self, name: str) -> StepDef:
        try:
            return self._steps[name]
        except KeyError:
            raise StepNotFound(f"no step named {name!r} is registered in this process") from None

    def step_timeout(self, name: str) -> float | None:
        """Seconds one attempt of step ``name`` may take (None: no timeout, or not registered here)."""
        found = self._steps.get(name)
        return found.timeout if found is not None else None

    def steps(self) -> list[StepDef]:
        with self._lock:
            return list(self._steps.values())

    def resolve_workflow(self, ref: Any) -> WorkflowDef:
        """A workflow definition from a decorated function or a registered name (newest version)."""
        wf = getattr(ref, "__durable_workflow__", None)
        if isinstance(wf, WorkflowDef):
            return self.get_workflow(wf.name)
        if isinstance(ref, str):
            return self.get_workflow(ref)
        raise WorkflowNotFound(f"{ref!r} is neither a registered workflow function nor a workflow name")

    def resolve_step(self, ref: Any) -> StepDef:
        """A step definition from a decorated function (its own) or a registered name."""
        sd = getattr(ref, "__durable_step__", None)
        if isinstance(sd, StepDef):
            return sd
        if isinstance(ref, str):
            return self.get_step(ref)
        raise StepNotFound(
            f"{ref!r} is not a registered step: decorate it with @durable.step, "
            "or use ctx.local_step(name, fn) for an in-process step"
        )

    def remove(self, name: str) -> None:
        """Forget a workflow (all versions) or step by name. Meant for tests."""
        with self._lock:
            self._workflows.pop(name, None)
            self._steps.pop(name, None)


registry = Registry()


def _takes_input(fn: Callable[..., Any]) -> bool:
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if not params:
        raise ConfigurationError(f"workflow {_qualname(fn)} must accept the context as its first argument")
    return len(params) > 1


def _opt_seconds(value: Duration | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = to_seconds(value)
    if seconds <= 0:
        raise ConfigurationError(f"{what} must be positive")
    return seconds


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
    ``where(event)`` to filter, ``input(event)`` to map the event to this
    workflow's input, and either ``debounce="30s"`` (one run with the last event
    once the source is quiet) or ``batch=(size, window)`` (one run with a list).
    The function is returned unchanged.
    """

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
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
        batch_spec = None
        if batch is not None:
            if (
                not isinstance(batch, (tuple, list))
                or len(batch) != 2
                or isinstance(batch[0], bool)
                or not isinstance(batch[0], int)
                or batch[0] < 1
            ):
                raise ConfigurationError("batch must be (size, window), e.g. (10, '1m')")
            batch_spec = (batch[0], _opt_seconds(batch[1], "batch window") or 0.0)
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
        )
        registry.add_workflow(wf)
        func.__durable_workflow__ = wf  # type: ignore[attr-defined]
        return func

    return register(fn) if fn is not None else register


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
) -> Any:
    """Register a step: a plain function a workflow runs with ``ctx.step(fn, *args)``.

    Its arguments and return value must be JSON. ``queue`` routes it to workers
    serving that queue (default: the transport's default queue);
    ``retries`` and ``backoff`` set the retry policy; ``timeout`` bounds one
    attempt; ``compensate`` (a step, or a function of ``(input, output)``) undoes
    it when a run fails after it completed. The function is returned unchanged
    and can still be called directly.
    """

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        step_name = _check_name(name or func.__name__, "step")
        if queue is not None:
            _check_name(queue, "queue")
        sd = StepDef(
            name=step_name,
            fn=func,
            queue=queue,
            retries=check_retries(retries),
            backoff=make_backoff(backoff),
            timeout=_opt_seconds(timeout, "step timeout"),
            compensate=compensate,
        )
        if compensate is not None and not callable(compensate):
            raise ConfigurationError(f"step {step_name!r}: compensate must be a step or a function")
        registry.add_step(sd)
        func.__durable_step__ = sd  # type: ignore[attr-defined]
        return func

    return register(fn) if fn is not None else register


def resolve_workflow(ref: Any) -> WorkflowDef:
    """:meth:`Registry.resolve_workflow` on the default registry."""
    return registry.resolve_workflow(ref)


def resolve_step(ref: Any) -> StepDef:
    """:meth:`Registry.resolve_step` on the default registry."""
    return registry.resolve_step(ref)


def timeout_delta(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)
