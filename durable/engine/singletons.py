"""Singleton workflows: at most ``limit`` runs at a time per key, the others waiting in FIFO order.

``@durable.workflow(singleton=durable.Singleton(key="customer_id", limit=1))``
declares it. Every new run of such a workflow (started, a child, an
event-started run, a continue-as-new successor, a scheduled run) records its
key and the key's limit in its own row (:func:`singleton_columns`); the
stores then admit it under the key's slot lock (see
:mod:`durable.engine.plan_singletons`). A run of a workflow without
``singleton=`` carries none of these columns and costs nothing extra.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from durable.exceptions import ConfigurationError, InvalidInput

MAX_KEY_LENGTH = 200


@dataclass(frozen=True)
class Singleton:
    """At most ``limit`` runs of the workflow at a time for one ``key``; the others wait their turn.

    ``key`` is the name of a field of the run's input (a dict), or a callable
    taking the input (as validated, JSON) and returning the key; a key is a
    string or an integer, at most 200 characters. Runs of one key beyond
    ``limit`` are created ``queued`` and admitted in the order they were
    created (FIFO) as runs of that key finish, fail, are cancelled or die.
    ``max_queue_depth=N`` makes :func:`durable.start` raise
    :class:`durable.QueueFull`, writing nothing, once ``limit + N`` runs of the
    key are running or waiting (``0``: refuse every start beyond ``limit``);
    ``None`` lets the queue grow without bound. Admission is decided under a
    row lock per key, so it holds across any number of processes.
    """

    key: str | Callable[[Any], Any]
    limit: int = 1
    max_queue_depth: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.key, str) and self.key) and not callable(self.key):
            raise ConfigurationError("Singleton key must be an input field name or a callable taking the input")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ConfigurationError(f"Singleton limit must be a positive integer, got {self.limit!r}")
        depth = self.max_queue_depth
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
            raise ConfigurationError(f"Singleton max_queue_depth must be None or an integer >= 0, got {depth!r}")

    def key_of(self, workflow: str, value: Any) -> str:
        """The key of a run with input ``value``; :class:`~durable.InvalidInput` when there is none."""
        if callable(self.key):
            try:
                found = self.key(value)
            except Exception as exc:
                what = f"{type(exc).__name__}: {exc}"
                raise InvalidInput(f"singleton key of workflow {workflow!r} raised {what}") from exc
        elif isinstance(value, dict) and self.key in value:
            found = value[self.key]
        else:
            raise InvalidInput(f"workflow {workflow!r} is a singleton on input field {self.key!r}, not in {value!r}")
        return text_key(found, f"singleton key of workflow {workflow!r}")


def text_key(found: Any, what: str) -> str:
    """A key (a singleton's, an entity's) as text: a string or an integer, 1 to 200 characters."""
    if isinstance(found, bool) or not isinstance(found, (str, int)):
        raise InvalidInput(f"{what} must be a string or an integer, got {found!r}")
    key = str(found)
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(f"{what} must have 1 to {MAX_KEY_LENGTH} characters")
    return key


def singleton_columns(spec: Singleton | None, workflow: str, value: Any) -> dict[str, Any]:
    """The run columns of a new run of a singleton workflow (none for any other workflow)."""
    if spec is None:
        return {}
    return {"singleton_key": spec.key_of(workflow, value), "singleton_limit": spec.limit}
