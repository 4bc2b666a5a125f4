"""All database access for runs, checkpoints, leases and signals.

Nothing else in django-durable queries or writes these tables. Every status
write is compare-and-set (``UPDATE ... WHERE status IN (...)``) and every
write made on behalf of a lease holder also checks ``locked_by``. Locks are
always taken run row first, then its checkpoints and signals, so concurrent
writers (a turn's commit, a step result, a signal, a cancel) serialise on the
run row and cannot deadlock each other.

Timestamps come from the engine clock (passed in as ``now``), never from the
database, so fake clocks in tests see consistent time everywhere.

What a write changes is planned once (:mod:`durable.engine.plan`) and
executed by the store :mod:`durable.store.factory` picks per connection
vendor: :mod:`durable.store.portable` (the ORM) or :mod:`durable.store.postgres`
(single prepared statements); :mod:`durable.store.statements` holds every SQL
text. :data:`store` is the store picked for the default connection.
"""

from __future__ import annotations

from typing import Any, cast

from durable.store import factory
from durable.store.portable import PortableStore

# The portable store under its former name (tests patch its methods on the class).
DjangoStore = PortableStore


class _DefaultStore:
    """A thin, stateless proxy to the store picked for the default connection (``runtime.default_store()``).

    Attribute writes go to that store too (a test's ``monkeypatch`` then
    patches the store the engine calls).
    """

    def _target(self) -> PortableStore:
        # The choice is process-wide state: it is kept by durable.runtime.
        from durable import runtime

        return runtime.default_store()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target(), name, value)

    def __delattr__(self, name: str) -> None:
        # Undoing a patch removes the store's own attribute, if it still has one: the proxy
        # holds none itself, so a tool that restores by deleting may delete more than once.
        target = self._target()
        if name in vars(target):
            delattr(target, name)


store: PortableStore = cast(PortableStore, _DefaultStore())

__all__ = ["DjangoStore", "PortableStore", "factory", "store"]
