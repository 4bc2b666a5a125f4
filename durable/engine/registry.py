"""Workflow and step definitions and the registry that holds them (pure types).

A :class:`Registry` is an object, not a module global: the runtime builds the
process's default one (the ``@durable.workflow`` / ``@durable.step``
decorators of :mod:`durable.decorators` register into it) and passes it to
the engine, and a test may build its own.

Workflows are keyed by ``(name, version)``; several versions live side by
side, new runs take the highest version and a run always resumes on the
version it started with. Steps are keyed by name, which is also how a
dispatched step is routed to a worker that has it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any

from durable.engine.entities import EntityDef
from durable.engine.requirements import route_for
from durable.engine.retry import Backoff
from durable.engine.singletons import Singleton
from durable.exceptions import ConfigurationError, EntityNotFound, StepNotFound, WorkflowNotFound


def qualname(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a function: how a registration names the code behind it."""
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
    # Ages in seconds per terminal status overriding DURABLE["RETENTION"] (None: no override).
    retention: dict[str, float | None] | None = None
    # At most ``limit`` runs at a time per key (@workflow(singleton=durable.Singleton(...))).
    singleton: Singleton | None = None

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
    # A limited queue's key of a call: a function of the step's arguments (DURABLE["QUEUES"]).
    key: Callable[..., Any] | None = None
    # Capabilities a worker needs to run it (@step(requires=[...])); they are part of its route.
    requires: tuple[str, ...] = ()

    @cached_property
    def route(self) -> str | None:
        """Where the step is dispatched: its ``queue``, else its name's prefix before a dot; with
        ``requires``, that queue named with its requirements (``"<queue>@gpu+pdf"``).

        Computed once per definition (read several times for every step a turn runs).
        """
        base = self.queue or (self.name.split(".", 1)[0] if "." in self.name else None)
        return route_for(base, self.requires)


class Registry:
    """Thread-safe map of workflow and step definitions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workflows: dict[str, dict[int, WorkflowDef]] = {}
        self._steps: dict[str, StepDef] = {}
        self._entities: dict[str, EntityDef] = {}
        # Code schedules by key: (workflow name, the durable.Schedule declared for it).
        self._schedules: dict[str, tuple[str, Any]] = {}
        # Grows whenever a workflow's declared schedules change (sync compares it).
        self.schedules_revision = 0
        # subscribers() by event, asked at every run's end; emptied by every registration.
        self._subscribers: dict[str, list[WorkflowDef]] = {}

    # -- workflows ---------------------------------------------------------
    def add_workflow(self, wf: WorkflowDef) -> None:
        with self._lock:
            versions = self._workflows.setdefault(wf.name, {})
            existing = versions.get(wf.version)
            # Re-importing the same module (autoreload, tests) re-registers the
            # same function; two different functions under one key is a bug.
            if existing is not None and qualname(existing.fn) != qualname(wf.fn):
                raise ConfigurationError(
                    f"workflow {wf.name!r} version {wf.version} is already registered by "
                    f"{qualname(existing.fn)}; give {qualname(wf.fn)} another name or version"
                )
            versions[wf.version] = wf
            self._subscribers = {}

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

    def retention_overrides(self) -> dict[str, dict[str, float | None]]:
        """``retention={...}`` of each workflow that declares one, as its newest version declares it."""
        with self._lock:
            latest = self._latest()
        return {wf.name: dict(wf.retention) for wf in latest if wf.retention is not None}

    def _latest(self) -> list[WorkflowDef]:
        """The newest version of every workflow (the caller holds the lock)."""
        return [versions[max(versions)] for versions in self._workflows.values() if versions]

    def subscribers(self, event: str) -> list[WorkflowDef]:
        """The newest version of every workflow started by ``event`` (``on_event=[...]``).

        Cached per event until the next registration (a copy is returned, so callers may keep it).
        """
        cached = self._subscribers.get(event)
        if cached is None:
            # Filled under the lock that registrations empty it under: never a stale answer.
            with self._lock:
                cached = [wf for wf in self._latest() if event in wf.on_event]
                self._subscribers[event] = cached
        return list(cached)

    # -- steps -------------------------------------------------------------
    def add_step(self, step: StepDef) -> None:
        with self._lock:
            existing = self._steps.get(step.name)
            if existing is not None and qualname(existing.fn) != qualname(step.fn):
                raise ConfigurationError(f"step {step.name!r} is already registered by {qualname(existing.fn)}")
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

    # -- entities ------------------------------------------------------------
    def add_entity(self, entity: EntityDef) -> None:
        with self._lock:
            existing = self._entities.get(entity.name)
            if existing is not None and existing.source != entity.source:
                raise ConfigurationError(f"entity {entity.name!r} is already registered by {existing.source}")
            self._entities[entity.name] = entity

    def get_entity(self, ref: Any) -> EntityDef:
        """An entity definition from its name or its decorated class (:class:`~durable.EntityNotFound`)."""
        found = getattr(ref, "__durable_entity__", None)
        name = found.name if isinstance(found, EntityDef) else ref
        entity = self._entities.get(name) if isinstance(name, str) else None
        if entity is None:
            raise EntityNotFound(f"no entity named {ref!r} is registered in this process")
        return entity

    def entities(self) -> list[EntityDef]:
        with self._lock:
            return list(self._entities.values())

    # -- code schedules ------------------------------------------------------
    def set_schedules(self, workflow: str, schedules: list[tuple[str, Any]]) -> None:
        """The schedules ``workflow`` declares now, by key (replacing what it declared before)."""
        with self._lock:
            for key in [k for k, (wf, _) in self._schedules.items() if wf == workflow]:
                del self._schedules[key]
            for key, spec in schedules:
                owner = self._schedules.get(key)
                if owner is not None and owner[0] != workflow:
                    raise ConfigurationError(f"schedule key {key!r} is already declared by workflow {owner[0]!r}")
                self._schedules[key] = (workflow, spec)
            self.schedules_revision += 1

    def schedules(self) -> dict[str, tuple[str, Any]]:
        """Every code schedule: key -> (workflow name, schedule)."""
        with self._lock:
            return dict(self._schedules)

    def remove(self, name: str) -> None:
        """Forget a workflow (all versions, and its schedules), step or entity by name. Meant for tests."""
        with self._lock:
            self._workflows.pop(name, None)
            self._subscribers = {}
            self._steps.pop(name, None)
            self._entities.pop(name, None)
            for key in [k for k, (wf, _) in self._schedules.items() if wf == name]:
                del self._schedules[key]
                self.schedules_revision += 1


def timeout_delta(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)
