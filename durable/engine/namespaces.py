"""Namespace-scoped workers: which runs a worker process takes.

A run belongs to one namespace (``start(..., namespace="a")``, ``"default"``
otherwise). A worker started ``durable_worker --namespace a,b`` serves only
those: the sweeps that take work in it (due runs and timers, due steps,
orphaned runs, lapsed steps' next turns) pass its namespaces to the store's
queries, so it never claims another namespace's run; a namespace no worker
serves waits. ``None`` (no flag) serves every namespace. Pure: no Django, no
Celery.

Queues of a namespace (``DURABLE["NAMESPACE_QUEUES"] = True``, the Celery
transport): a run of a namespace other than the default one sends its turns
to ``"durable.ns.<namespace>"`` and its steps to ``"<queue>.ns.<namespace>"``,
requirements after it (``"durable.ns.acme@gpu"``); the default namespace keeps
the plain names. The name a step is limited by (``DURABLE["QUEUES"]``) and the
route stored with it stay the plain ones: only the broker queue changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from durable.engine.requirements import DEFAULT_ROUTE, SEPARATOR
from durable.exceptions import ConfigurationError

# Between a queue's name and its namespace: "payments.ns.acme". Reserved in queue names.
INFIX = ".ns."

# The column is 100 characters; the route a namespace names (Celery) takes letters, digits, '_', '-', '.'.
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def check_namespaces(given: Iterable[str], where: str) -> frozenset[str] | None:
    """The namespaces ``given`` (each may be a comma list) as a set; None when none are given (serve all).

    Raises ConfigurationError naming the bad one.
    """
    names = [name.strip() for item in given for name in item.split(",")]
    if not names:
        return None
    for name in names:
        if not _NAMESPACE.match(name):
            raise ConfigurationError(
                f"{where}: namespace {name!r} is invalid: use letters, digits, '_', '-' or '.' (at most 100)"
            )
    return frozenset(names)


def serves_namespace(namespaces: frozenset[str] | None, namespace: str) -> bool:
    """Whether a worker scoped to ``namespaces`` (None: all) takes a run of ``namespace``."""
    return namespaces is None or namespace in namespaces


def scope(namespaces: frozenset[str] | None) -> dict[str, frozenset[str]]:
    """The keyword a sweep passes to a store query: ``namespaces=`` for a scoped worker, none otherwise
    (so an unscoped worker makes exactly the calls it made before scoping existed)."""
    return {} if namespaces is None else {"namespaces": namespaces}


def queue_for(route: str | None, namespace: str, *, own_queues: bool, default: str) -> str | None:
    """The broker queue of work on ``route`` (None: the default queue) for a run of ``namespace``.

    ``own_queues`` (``NAMESPACE_QUEUES``) off, or the ``default`` namespace:
    ``route`` itself. Otherwise ``<queue>.ns.<namespace>``, with ``route``'s
    requirements after it (``"durable.ns.acme@gpu"``), so a worker's
    capabilities still read from the queues it consumes.
    """
    if not own_queues or namespace == default:
        return route
    base, sep, needs = (route or DEFAULT_ROUTE).partition(SEPARATOR)
    return f"{base}{INFIX}{namespace}{sep}{needs}"


def namespace_of(queue: str, default: str) -> str:
    """The namespace whose work ``queue`` carries under ``NAMESPACE_QUEUES`` (a plain name: ``default``).

    The inverse of :func:`queue_for`: the text after the first ``.ns.`` of the
    queue's name (before its requirements); queue names cannot contain ``.ns.``.
    """
    base = queue.partition(SEPARATOR)[0]
    return base.partition(INFIX)[2] if INFIX in base else default


def namespaces_of(queues: Iterable[str], default: str) -> frozenset[str]:
    """The namespaces a Celery worker consuming ``queues`` serves, under ``NAMESPACE_QUEUES``."""
    return frozenset(namespace_of(queue, default) for queue in queues)
