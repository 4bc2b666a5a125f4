"""Namespace-scoped workers: which runs a worker process takes.

A run belongs to one namespace (``start(..., namespace="a")``, ``"default"``
otherwise). A worker started ``durable_worker --namespace a,b`` serves only
those: the sweeps that take work in it (due runs and timers, due steps,
orphaned runs, lapsed steps' next turns) pass its namespaces to the store's
queries, so it never claims another namespace's run; a namespace no worker
serves waits. ``None`` (no flag) serves every namespace. Pure: no Django, no
Celery.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from durable.exceptions import ConfigurationError

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
