"""The chaos suite's workload: which runs to start, what each must end as, and its signals.

A seeded plan (:func:`plan`) mixes five shapes (see :mod:`tests.chaos.workflows`):
pipelines (eager, local, timer, routed and fanned-out steps), signal waiters,
parents with children, sagas that must compensate, and runs that only a cancel
ends. The driver starts them at a steady pace while faults are injected;
:class:`Signaller` sends every signal run's payloads ``0..n-1`` in order, some
before the run waits and the rest while it waits, so the FIFO promise is
checked on the recorded output.

Every call into durable from here survives a database restart: a call that
failed is retried, and a call whose outcome is unknown (its commit may have
landed before the connection dropped) is retried only if its effect is absent.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import connections

import durable
from durable.models import BufferedSignal, Checkpoint
from tests.integration.harness import DB_ERRORS

T = TypeVar("T")

SHAPES = (("pipeline", 40), ("signals", 20), ("parent", 15), ("saga", 10), ("cancellable", 15))


@dataclass
class Planned:
    run_id: str
    shape: str
    input: dict[str, Any]
    started_at: float | None = None  # monotonic, when durable.start returned
    cancel_sent: bool = False


@dataclass
class Plan:
    runs: list[Planned]
    by_id: dict[str, Planned] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_id = {p.run_id: p for p in self.runs}

    def add_poisoned(self) -> Planned:
        """One more run, of shape ``poisoned`` (started by the ``poison_step`` fault)."""
        p = Planned(f"{self.runs[0].run_id.rsplit('-', 2)[0]}-{len(self.runs):04d}-poisoned", "poisoned", {"x": 1})
        self.runs.append(p)
        self.by_id[p.run_id] = p
        return p

    def of(self, shape: str) -> list[Planned]:
        return [p for p in self.runs if p.shape == shape]


def plan(n: int, seed: int, prefix: str = "chaos", shapes: tuple[tuple[str, int], ...] = SHAPES) -> Plan:
    """``n`` runs of the ``shapes`` in proportion to their weights, in a seeded order."""
    rng = random.Random(seed)
    total = sum(w for _, w in shapes)
    names = [name for name, w in shapes for _ in range(max(1, round(n * w / total)))]
    names = (names * 2)[:n] if len(names) < n else names[:n]
    rng.shuffle(names)
    runs = []
    for i, shape in enumerate(names):
        x = rng.randint(0, 1000)
        data: dict[str, Any] = {"x": x}
        if shape == "pipeline":
            data["sleep"] = rng.choice([0.5, 1, 2, 3])
        elif shape == "signals":
            data = {"n": rng.randint(6, 12)}
        elif shape == "cancellable":
            data = {"steps": rng.randint(1, 4)}
        runs.append(Planned(f"{prefix}-{seed}-{i:04d}-{shape}", shape, data))
    return Plan(runs)


def retrying(what: str, fn: Callable[[], T], *, done: Callable[[], bool] | None = None, timeout: float = 300) -> T:
    """Call ``fn`` until it succeeds; after a database error, ``done()`` says whether it had landed.

    Returns ``fn``'s value (``None`` if ``done()`` found the effect already there).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except DB_ERRORS as exc:
            connections.close_all()
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: database unavailable for {timeout:.0f}s: {exc!r}") from exc
            time.sleep(0.5)
            try:
                if done is not None and done():
                    return None  # type: ignore[return-value]
            except DB_ERRORS:
                connections.close_all()


def start(p: Planned) -> None:
    # durable.start is idempotent on run_id, so a retry after an unknown outcome is safe.
    retrying(f"start {p.run_id}", lambda: durable.start(f"chaos.{p.shape}", p.input, run_id=p.run_id))
    p.started_at = time.monotonic()


def cancel(p: Planned) -> None:
    retrying(f"cancel {p.run_id}", lambda: durable.cancel(p.run_id))
    p.cancel_sent = True


def _signal_landed(run_id: str, payload: int) -> bool:
    buffered = BufferedSignal.objects.filter(run_id=run_id, name="sig", payload=payload).exists()
    taken = Checkpoint.objects.filter(run_id=run_id, kind="signal", name="sig", output=payload).exists()
    return buffered or taken


class Signaller:
    """One thread sends every signal, in payload order per run; never twice (see :func:`retrying`).

    ``schedule(run, payloads, at)`` queues payloads to be sent, in order, once
    ``time.monotonic() >= at``; batches of one run are scheduled in order.
    """

    def __init__(self) -> None:
        self.sent = 0
        self.errors: list[str] = []
        self._queue: queue.PriorityQueue[tuple[float, int, str, list[int]]] = queue.PriorityQueue()
        self._n = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-signaller", daemon=True)
        self._thread.start()

    def schedule(self, run_id: str, payloads: list[int], at: float) -> None:
        self._n += 1
        self._queue.put((at, self._n, run_id, payloads))

    def pending(self) -> int:
        return self._queue.qsize()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                at, n, run_id, payloads = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if at > time.monotonic():
                self._queue.put((at, n, run_id, payloads))
                self._stop.wait(min(0.1, at - time.monotonic()))
                continue
            for payload in payloads:
                try:
                    retrying(
                        f"signal {run_id} {payload}",
                        lambda: durable.signal(run_id, "sig", payload),
                        done=lambda: _signal_landed(run_id, payload),
                    )
                    self.sent += 1
                except Exception as exc:
                    self.errors.append(f"{run_id} {payload}: {exc!r}")
            connections.close_all()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def schedule_signals(signaller: Signaller, p: Planned, rng: random.Random) -> None:
    """Payloads 0..n-1: some at once (before the run waits), the rest a few seconds later (during)."""
    n = p.input["n"]
    early = rng.randint(1, n - 1)
    now = time.monotonic()
    signaller.schedule(p.run_id, list(range(early)), now)
    signaller.schedule(p.run_id, list(range(early, n)), now + rng.uniform(2, 8))
