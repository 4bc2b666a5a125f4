"""A bare Celery chain of three no-op tasks: the peer of three dispatched durable steps.

Found by ``app.autodiscover_tasks()``. Same probes as the durable steps.
"""

from __future__ import annotations

import time

from celery import shared_task

from bench import probe

QUEUE = "bench"


@shared_task(name="bench.chain_first", ignore_result=True)
def chain_first(key: str, notify: bool) -> list:
    probe.first(key)
    return [key, notify]


@shared_task(name="bench.chain_mid", ignore_result=True)
def chain_mid(prev: list) -> list:
    return prev


@shared_task(name="bench.chain_last", ignore_result=True)
def chain_last(prev: list) -> None:
    key, notify = prev
    probe.client().hset("bench:t3", key, repr(time.time()))
    probe.last(key, notify)


def start_chain(key: str, notify: bool) -> None:
    from celery import chain

    chain(chain_first.s(key, notify), chain_mid.s(), chain_last.s()).apply_async(queue=QUEUE)
