"""Step requirements: what a step needs from a worker, and the route that carries it.

A step declared ``@durable.step(requires=["gpu", "pdf"])`` is dispatched on
a route that names its requirements after its queue: ``"<queue>@gpu+pdf"``
(``"durable@gpu+pdf"`` on the default queue). A Celery worker serves it by
consuming that queue (and so advertises those capabilities); a
``durable_worker --capability gpu,pdf`` serves every route whose
requirements it has. A process without them never runs the step: the inline
transport leaves it pending for a capable worker, and the worker loop skips
it. Pure: no Django, no Celery.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from durable.exceptions import ConfigurationError

SEPARATOR = "@"
JOIN = "+"
DEFAULT_ROUTE = "durable"  # the default queue's name (the Celery transport's default)
_CAPABILITY = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def check_requires(requires: Any, where: str) -> tuple[str, ...]:
    """``requires`` as a sorted tuple of capability names; ConfigurationError if it is not one."""
    if requires is None:
        return ()
    if isinstance(requires, str) or not isinstance(requires, Iterable):
        raise ConfigurationError(f"{where}: requires must be a list of capability names, got {requires!r}")
    names = list(requires)
    for name in names:
        if not isinstance(name, str) or not _CAPABILITY.match(name):
            raise ConfigurationError(
                f"{where}: capability {name!r} is invalid: use lowercase letters, digits, '_' or '-' (at most 64)"
            )
    return tuple(sorted(set(names)))


def route_for(base: str | None, requires: tuple[str, ...]) -> str | None:
    """The route of a step on ``base`` (None: the default queue) that needs ``requires``."""
    if not requires:
        return base
    return f"{base or DEFAULT_ROUTE}{SEPARATOR}{JOIN.join(requires)}"


def required_by(route: str | None) -> frozenset[str]:
    """The capabilities a route needs (none for a plain queue)."""
    if not route or SEPARATOR not in route:
        return frozenset()
    return frozenset(route.rpartition(SEPARATOR)[2].split(JOIN))


def serves(capabilities: frozenset[str], route: str | None) -> bool:
    """Whether a process with ``capabilities`` may run a step dispatched on ``route``."""
    return required_by(route) <= capabilities


def capabilities_of(queues: Iterable[str]) -> frozenset[str]:
    """The capabilities a Celery worker has by consuming ``queues`` (each ``<queue>@a+b`` adds a and b)."""
    found: set[str] = set()
    for queue in queues:
        found |= required_by(queue)
    return frozenset(found)
