"""``manage.py durable_workers``: the live worker fleet and what each worker serves."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from durable.runtime import get_engine


class Command(BaseCommand):
    help = "List live workers: queues, steps and workflows they serve, and their last heartbeat."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--steps", action="store_true", help="also list every step each worker serves")

    def handle(self, *args: Any, steps: bool, **options: Any) -> None:
        engine = get_engine()
        now = engine.clock.now()
        workers = engine.store.live_workers(now)
        if not workers:
            self.stdout.write("no live workers")
            return
        for w in workers:
            age = (now - w["heartbeat_at"]).total_seconds()
            self.stdout.write(
                f"{w['id']}  queues={','.join(w['queues']) or '-'}  steps={len(w['steps'])}  "
                f"workflows={len(w['workflows'])}  protocol={w['protocol']}  heartbeat={age:.0f}s ago"
            )
            if steps:
                for name in w["steps"]:
                    self.stdout.write(f"    {name}")
        sweeps = engine.settings.sweep_queue
        if engine.settings.transport == "celery" and not any(sweeps in w["queues"] for w in workers):
            self.stdout.write(
                f"warning: no live worker consumes the sweep queue {sweeps!r}: nothing is recovered "
                f"(add it to a worker's -Q, or run `celery -A <project> worker -Q {sweeps} -c 1`)"
            )
