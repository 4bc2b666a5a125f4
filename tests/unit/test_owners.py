"""Owner ids and the proof of a holder's death that lets a starting worker release its leases."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from durable.engine import owners
from durable.engine.clock import FakeClock
from durable.engine.core import AnyFleet, Engine
from durable.engine.leases import LeaseKeeper
from durable.engine.registry import Registry
from durable.engine.vocab import RunStatus
from durable.store.memory import MemoryStore
from durable.transports.manual import ManualTransport
from durable.worker.predecessors import release_dead_holders
from durable.worker.repair import recover_orphans

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="owner ids are verifiable on Linux only")


def child_owner(proc: subprocess.Popen[bytes]) -> str:
    """The owner id the child process ``proc`` would have made (same host, boot and namespace)."""
    state = owners._start_ticks(proc.pid)
    assert state is not None
    mine = owners.make_owner_id().split(":")
    return f"{mine[0]}:{proc.pid}:feedbeef:{state[1]}.{mine[3].split('.')[1]}"


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_this_process_and_a_running_child_are_alive():
    assert not owners.is_dead(owners.make_owner_id())
    proc = sleeper()
    try:
        assert not owners.is_dead(child_owner(proc))
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_process_is_dead_whether_reaped_or_a_zombie():
    proc = sleeper()
    owner = child_owner(proc)
    proc.kill()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert owners.is_dead(owner)
    proc.wait()
    assert owners.is_dead(owner)


def test_a_pid_now_used_by_a_process_started_at_another_time_is_dead():
    host, pid, suffix, tail = owners.make_owner_id().split(":")
    start, place = tail.split(".")
    assert owners.is_dead(f"{host}:{pid}:{suffix}:{int(start) - 1}.{place}")


@pytest.mark.parametrize(
    "owner",
    [
        "another-host:1:abcd:1.0123456789ab",  # another machine: its pids are not ours to look up
        "{host}:999999999:abcd:1.0123456789ab",  # another boot or PID namespace
        "{host}:999999999:abcd",  # no proof at all (an id of an earlier version, no /proc)
        "{host}:x:abcd:1.{place}",
        "{host}:999999999:abcd:x.{place}",
        "",
    ],
)
def test_holders_that_cannot_be_proven_dead_are_alive(owner):
    place = owners.make_owner_id().rsplit(".", 1)[1]
    assert not owners.is_dead(owner.format(host=owners.host(), place=place))


def engine_on(store: MemoryStore, clock: FakeClock, owner: str) -> Engine:
    settings: Any = SimpleNamespace(lease=30.0, max_recovery_attempts=5, sweep_batch=100)
    return Engine(
        store,
        ManualTransport(),
        settings,
        registry=Registry(),
        clock=clock,
        owner=owner,
        keeper=LeaseKeeper(),
        fleet=AnyFleet(),
    )


def test_release_ends_only_the_dead_holders_leases_and_the_orphan_sweep_takes_over():
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    store = MemoryStore()
    proc = sleeper()
    dead = child_owner(proc)
    proc.kill()
    proc.wait()
    live = owners.make_owner_id()
    until = clock.now() + timedelta(hours=1)
    for run_id, holder in (("dead-run", dead), ("live-run", live), ("elsewhere", "another-host:1:abcd:1.x")):
        store.create_run({"id": run_id, "workflow": "wf", "version": 1, "status": RunStatus.PENDING, "input": None})
        assert store.acquire(run_id, holder, clock.now(), until) is not None
    engine = engine_on(store, clock, owner=owners.make_owner_id())

    assert release_dead_holders(engine) == {"holders": 1, "runs": 1, "steps": 0}
    assert release_dead_holders(engine) == {"holders": 1, "runs": 0, "steps": 0}  # nothing left to end
    # The same clock reading: the released lease has already run out, the others have not.
    assert store.orphans(clock.now(), 10) == ["dead-run"]
    assert recover_orphans(engine, execute=False) == {"recovered": 1, "dead": 0}
    assert [store.get_run(r).locked_until for r in ("live-run", "elsewhere")] == [until, until]
