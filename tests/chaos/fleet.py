"""The chaos suite's processes: prefork Celery workers, Celery beat and ``durable_worker``.

:class:`ChaosCluster` is the integration suite's :class:`~tests.integration.harness.Cluster`
on the chaos settings (its own PostgreSQL cluster and redis-server), with roles that a
fault can kill and restart by name:

``turns-1``, ``turns-2``  ``celery worker -P prefork`` on queues ``durable`` and ``chaos``
                          (turns, and the ``chaos.*`` steps, mostly run eagerly in the turn);
``remote``                ``celery worker -P prefork`` on queue ``remote`` only, so every
                          ``remote.*`` step travels through Redis;
``beat``                  ``celery beat`` (the sweeps, through Redis);
``dw-1``, ``dw-2``        ``manage.py durable_worker`` (sweeps and due work from the tables).

A supervisor thread starts again any process that exits on its own, as a
deployment's process manager would; those exits are reported.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from django.conf import settings

from durable.conf import DEFAULTS
from durable.transports import celery as celery_transport
from tests.integration.harness import Cluster, Proc, wait_until

TURN_WORKERS = ("turns-1", "turns-2")
REMOTE_WORKERS = ("remote",)
DURABLE_WORKERS = ("dw-1", "dw-2")
BEAT = "beat"
CONCURRENCY = 2


def turn_queues() -> list[str]:
    queues = [celery_transport.DEFAULT_QUEUE, "chaos"]
    # Sweeps may travel on a queue of their own: the turn workers consume it too.
    sweep_queue = settings.DURABLE.get("SWEEP_QUEUE") or DEFAULTS.get("SWEEP_QUEUE")
    if sweep_queue and sweep_queue not in queues:
        queues.append(sweep_queue)
    return queues


class ChaosCluster(Cluster):
    settings_module = "tests.chaos.settings"

    def __init__(self, tmp: Path, broker: str, durable_extra: dict[str, Any]) -> None:
        super().__init__(tmp, broker, durable_extra)
        self.roles: dict[str, Proc] = {}
        self.restarts: dict[str, int] = {}
        self.exits: list[str] = []  # processes that exited on their own (the supervisor restarted them)
        self._down: set[str] = set()  # roles a fault killed and will restart itself
        self._lock = threading.RLock()
        self._halt = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="chaos-supervisor", daemon=True)

    def spawn_role(self, role: str) -> Proc:
        with self._lock:
            self._down.discard(role)
            return self._spawn_role(role)

    def _spawn_role(self, role: str) -> Proc:
        # A restarted process keeps its role's name (its Celery node name too), as a
        # process manager restarts a worker: its log goes on in the same file.
        self.restarts[role] = self.restarts.get(role, -1) + 1
        name = role
        if role in TURN_WORKERS or role in REMOTE_WORKERS:
            queues = turn_queues() if role in TURN_WORKERS else ["remote"]
            proc = self.spawn_worker(name, queues, concurrency=CONCURRENCY, pool="prefork")
        elif role == BEAT:
            proc = self._spawn(
                name, ["beat", "-s", str(self.tmp / "beat-schedule"), "--pidfile=", "-l", "INFO"], ready=False
            )
        else:
            proc = self._spawn(name, ["durable_worker", "--interval", "0.5"], ready=False, module="django")
        self.roles[role] = proc
        return proc

    def start_all(self, fleet: str = "mixed") -> None:
        """``mixed``: every role; ``celery``: no ``durable_worker`` (only Celery and beat serve)."""
        extra = DURABLE_WORKERS if fleet == "mixed" else ()
        for role in (*TURN_WORKERS, *REMOTE_WORKERS, BEAT, *extra):
            self.spawn_role(role)
        self.wait_up(*self.roles)
        self._supervisor.start()

    def _supervise(self) -> None:
        """What systemd or Kubernetes would do: a process that exited on its own is started again."""
        while not self._halt.wait(1.0):
            with self._lock:
                for role, proc in list(self.roles.items()):
                    if role not in self._down and not proc.alive():
                        lines = proc.output(400).strip().splitlines() or ["?"]
                        last = ([line for line in lines if "CRITICAL" in line] or lines)[-1]
                        self.exits.append(f"{proc.name} exited with {proc.popen.returncode}: {last[:200]}")
                        self._spawn_role(role)

    def close(self) -> None:
        self._halt.set()
        if self._supervisor.is_alive():
            self._supervisor.join(timeout=10)
        super().close()

    def wait_up(self, *roles: str, timeout: float = 180) -> None:
        """Until the Celery workers of ``roles`` consume and the ``durable_worker`` ones loop."""
        procs = [self.roles[r] for r in roles]

        def up() -> bool:
            for p in procs:
                if not p.alive():
                    raise AssertionError(f"{p.name} exited with {p.popen.returncode}:\n{p.output(60)}")
            workers = [p for p in procs if p.ready_file is not None]
            loops = [p for p in procs if p.ready_file is None and p.name.startswith("dw-")]
            return all(p.ready_file.exists() for p in workers if p.ready_file) and all(
                "durable_worker: running" in p.output() for p in loops
            )

        wait_until(up, f"processes {list(roles)} to be up", timeout=timeout)

    def kill(self, role: str) -> set[int]:
        """kill -9 the role's whole process tree; returns the pids that died."""
        with self._lock:
            self._down.add(role)
            proc = self.roles[role]
            pids = process_tree(proc.pid)
        proc.kill9()
        return pids

    def pids(self) -> dict[str, set[int]]:
        return {role: process_tree(p.pid) for role, p in self.roles.items() if p.alive()}

    def rss_mb(self) -> dict[str, float]:
        """Resident memory of each live role, its whole process tree (MB)."""
        return {role: round(sum(rss_kb(pid) for pid in pids) / 1024, 1) for role, pids in self.pids().items()}


def process_tree(pid: int) -> set[int]:
    """``pid`` and its descendants (from /proc)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                text = Path(f"/proc/{p}/task/{task}/children").read_text()
                todo.extend(int(c) for c in text.split())
        except OSError:
            continue
    return out


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
