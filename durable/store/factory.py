"""Which store serves a database connection: the only place that looks at its vendor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable.store.portable import PortableStore

if TYPE_CHECKING:
    from durable.engine.ports import Store
    from durable.store.postgres import PostgresStore

    # Both stores implement the whole protocol (checked by mypy, nothing at run time).
    _portable: Store = PortableStore()
    _postgres: Store = PostgresStore()


def for_connection(connection: Any) -> PortableStore:
    """A new store for ``connection``: :class:`PostgresStore` on PostgreSQL, :class:`PortableStore` elsewhere.

    Choose once per connection vendor and keep the store: a PostgreSQL store
    holds its own preparing cursors and column casts.
    """
    if connection.vendor == "postgresql":
        from durable.store.postgres import PostgresStore

        return PostgresStore()
    return PortableStore()
