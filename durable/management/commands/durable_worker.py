"""``manage.py durable_worker``: run due turns, steps, timers and sweeps from the database."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durable import runtime
from durable.engine.namespaces import check_namespaces
from durable.engine.requirements import check_requires
from durable.exceptions import ConfigurationError
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
        parser.add_argument(
            "--capability",
            action="append",
            default=[],
            metavar="NAME[,NAME]",
            help="what this worker has (repeatable): it runs the steps declared with requires=[...] "
            "that it covers, and advertises them in the fleet",
        )
        parser.add_argument(
            "--namespace",
            action="append",
            default=[],
            metavar="NAME[,NAME]",
            help="serve only these namespaces' runs (repeatable): their turns, timers and steps; "
            "without it the worker serves every namespace",
        )

    def handle(
        self,
        *args: Any,
        interval: float | None,
        once: bool,
        capability: list[str],
        namespace: list[str],
        **options: Any,
    ) -> None:
        if interval is not None and interval <= 0:
            raise CommandError("--interval must be a positive number of seconds")
        names = [name.strip() for given in capability for name in given.split(",") if name.strip()]
        try:
            runtime.serve_capabilities(frozenset(check_requires(names, "--capability")))
            runtime.serve_namespaces(check_namespaces(namespace, "--namespace"))
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from None
        stop = threading.Event()
        # On PostgreSQL it also listens for the notifications of new work (DURABLE["NOTIFY"]).
        loop = WorkerLoop(interval=interval, stop=stop, listen=True)
        if once:
            counts = loop.run_once()
            self.stdout.write(" ".join(f"{k}={v}" for k, v in counts.items()))
            return

        def request_stop(signum: int, frame: Any) -> None:
            self.stderr.write(f"durable_worker: signal {signum}, draining…")
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        # In the fleet (no queues: it polls the tables), so a step's requirements find it.
        runtime.start_advertising([])
        runtime.freeze_startup_heap()
        self.stdout.write("durable_worker: running (Ctrl-C to stop)")
        try:
            loop.run_forever()
        finally:
            runtime.stop_advertising()
        self.stdout.write("durable_worker: stopped")
