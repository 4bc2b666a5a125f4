"""Thin Celery tasks: each loads ids from its message and calls the engine.

Imported by Celery's autodiscovery; nothing else in durable imports Celery.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_shutdown

from durable import sweeps
from durable.runtime import get_engine


@shared_task(name="durable.run_turn", ignore_result=True)
def run_turn(run_id: str) -> str | None:
    return get_engine().run_turn(run_id)


@shared_task(name="durable.execute_step", ignore_result=True)
def execute_step(run_id: str, seq: int) -> str:
    return get_engine().execute_step(run_id, seq)


@shared_task(name="durable.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """All sweeps, announcing work through the transport (safe on many beats at once)."""
    return sweeps.tick(get_engine(), execute=False)


# -- fleet advertisement: each worker says which queues and steps it serves ---------

_advertiser: Any = None


@celeryd_after_setup.connect
def _advertise(sender: Any = None, instance: Any = None, **kwargs: Any) -> None:
    global _advertiser
    from durable.fleet import Advertiser

    engine = get_engine()
    queues = list(instance.app.amqp.queues.consume_from.keys()) if instance is not None else []
    _advertiser = Advertiser(engine.store, engine.owner, queues, engine.settings.fleet_ttl)
    _advertiser.start()


@worker_shutdown.connect
def _retire(**kwargs: Any) -> None:
    if _advertiser is not None:
        _advertiser.stop()
