"""A worker process freezes the objects it loaded at startup out of the cyclic collector's reach."""

from __future__ import annotations

import gc
import signal
from typing import Any

import pytest
from django.core.management import call_command

from durable import runtime
from durable.worker.loop import WorkerLoop


@pytest.fixture
def unfrozen():
    """Start and end with nothing frozen: the test process's own heap stays collectable."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_freezing_takes_what_is_alive_out_of_the_collectors_generations(unfrozen):
    loaded = {"a long-lived": ["container"]}
    assert gc.get_freeze_count() == 0
    runtime.freeze_startup_heap()
    assert gc.get_freeze_count() > 0
    # A full collection no longer walks it: it is in none of the three generations.
    assert all(obj is not loaded for obj in gc.get_objects())
    later = {"created": ["after"]}
    assert any(obj is later for obj in gc.get_objects())


def test_durable_worker_freezes_once_loaded_before_its_loop(monkeypatch, unfrozen, db):
    events: list[str] = []

    def run_forever(self: WorkerLoop) -> None:
        events.append(f"loop, frozen={gc.get_freeze_count() > 0}")

    monkeypatch.setattr(WorkerLoop, "run_forever", run_forever)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # pytest keeps its own handlers
    monkeypatch.setattr(runtime, "stop_advertising", lambda: None)
    monkeypatch.setattr(runtime, "start_advertising", lambda *a, **k: events.append("advertising"))
    call_command("durable_worker")
    assert events == ["advertising", "loop, frozen=True"]


def test_durable_worker_once_leaves_the_heap_alone(unfrozen, db, capsys: Any):
    call_command("durable_worker", "--once")
    assert gc.get_freeze_count() == 0
