"""Transports push work (a run's next turn, a dispatched step) to an executor.

They are doorbells, not queues of record: a lost message delays work, and the
sweeps find it again in the database.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durable.engine.core import Engine
    from durable.engine.ports import Transport


def build(name: str, get_engine: Callable[[], Engine], threads: int) -> Transport:
    if name == "manual":
        from durable.transports.manual import ManualTransport

        return ManualTransport()
    if name == "inline":
        from durable.transports.inline import InlineTransport

        return InlineTransport(get_engine, threads)
    if name == "celery":
        from durable.transports.celery import CeleryTransport

        return CeleryTransport(get_engine)
    raise ValueError(f"unknown transport {name!r}")
