"""``manage.py durable_worker``: run due turns, steps, timers and sweeps from the database."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durable.worker import WorkerLoop


class Command(BaseCommand):
    help = (
        "Run the durable worker loop: pending runs, due timers, dispatched steps, orphan "
        "recovery, reconcile and timeouts. Stops gracefully on SIGTERM/SIGINT after the "
        "item in progress commits."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=None, help="seconds to wait when idle")
        parser.add_argument("--once", action="store_true", help="run one pass of every sweep and exit")

    def handle(self, *args: Any, interval: float | None, once: bool, **options: Any) -> None:
        if interval is not None and interval <= 0:
            raise CommandError("--interval must be a positive number of seconds")
        stop = threading.Event()
        loop = WorkerLoop(interval=interval, stop=stop)
        if once:
            counts = loop.run_once()
            self.stdout.write(" ".join(f"{k}={v}" for k, v in counts.items()))
            return

        def request_stop(signum: int, frame: Any) -> None:
            self.stderr.write(f"durable_worker: signal {signum}, draining…")
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        self.stdout.write("durable_worker: running (Ctrl-C to stop)")
        loop.run_forever()
        self.stdout.write("durable_worker: stopped")
