"""NOTIFY on PostgreSQL: which commits announce work, and the worker's listener.

Absence is shown without waiting: after the write under test, a marker is
notified from another connection, and notifications arrive in commit order,
so anything the write announced arrives before the marker.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection, transaction
from django.test import override_settings

import durable
from durable.models import Run
from durable.runtime import get_engine
from durable.store.statements import NOTIFY_CHANNEL
from durable.worker.listen import Listener, wanted
from tests import notify_workflows as _registered  # noqa: F401
from tests.processes import database_url, until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

MARKER = "--marker--"


@pytest.fixture
def heard() -> Iterator[psycopg.Connection]:
    with psycopg.Connection.connect(database_url(), autocommit=True) as conn:
        conn.execute(f'LISTEN "{NOTIFY_CHANNEL}"')
        yield conn


def _notify(payload: str) -> None:
    with psycopg.Connection.connect(database_url(), autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, payload])


def _announced(conn: psycopg.Connection) -> list[str]:
    """The payloads notified before a marker sent now (waits for the marker, at most 60 s)."""
    _notify(MARKER)
    payloads = []
    for note in conn.notifies(timeout=60):
        if note.payload == MARKER:
            return payloads
        payloads.append(note.payload)
    raise AssertionError("the marker notification never arrived")


def test_a_start_on_the_manual_transport_announces_its_namespace_once(heard):
    run_id = durable.start("notify.flow", 1)
    assert _announced(heard) == ["default"]
    durable.start("notify.flow", 1, run_id=run_id)  # exists: nothing inserted, nothing announced
    durable.start("notify.flow", 2, namespace="tenant-a")
    assert _announced(heard) == ["tenant-a"]


def test_a_start_in_a_transaction_is_announced_only_when_it_commits(heard):
    with transaction.atomic():
        durable.start("notify.flow", 1)
        assert _announced(heard) == []
    assert _announced(heard) == ["default"]
    with pytest.raises(RuntimeError), transaction.atomic():
        durable.start("notify.flow", 2)
        raise RuntimeError("rolled back")
    assert _announced(heard) == []
    assert Run.objects.count() == 1


@override_settings(DURABLE={"TRANSPORT": "manual", "NOTIFY": False})
def test_notify_off_announces_nothing(heard):
    durable.start("notify.flow", 1)
    assert _announced(heard) == []


def test_a_singleton_start_announces_a_pending_run_and_a_queued_one_nothing(heard):
    first = durable.start("notify.single", {"k": 1}, namespace="tenant-s")
    assert _announced(heard) == ["tenant-s"]
    queued = durable.start("notify.single", {"k": 1}, namespace="tenant-s")
    assert _announced(heard) == []
    assert Run.objects.get(pk=queued).status == "queued"
    assert get_engine().run_turn(first) == "completed"
    assert Run.objects.get(pk=queued).status == "pending"  # handed the slot by the final commit


def test_a_signal_announces_the_run_it_wakes_and_a_buffered_one_nothing(heard):
    run_id = durable.start("notify.waits", 1)
    assert _announced(heard) == ["default"]
    durable.signal(run_id, "other")  # it does not wait for this one: buffered, not woken
    assert _announced(heard) == []
    get_engine().run_turn(run_id)
    assert Run.objects.get(pk=run_id).status == "suspended"
    durable.signal(run_id, "go", 2)
    assert _announced(heard) == ["default"]
    assert get_engine().run_turn(run_id) == "completed"


def test_a_step_result_announces_the_run_it_wakes(heard):
    run_id = durable.start("notify.dispatched", 4, namespace="tenant-b")
    get_engine().run_turn(run_id)
    assert _announced(heard) == ["tenant-b"]  # the start only: the turn's commit announces nothing
    # A step worker that does not continue the turn itself: the woken run is announced.
    assert get_engine().execute_step(run_id, 1, continue_turn=False) == "completed"
    assert _announced(heard) == ["tenant-b"]
    assert get_engine().run_turn(run_id) == "completed"
    run_id = durable.start("notify.dispatched", 5, namespace="tenant-b")
    get_engine().run_turn(run_id)
    assert _announced(heard) == ["tenant-b"]
    # One that takes the woken run's lease in the result's statement runs it: nothing to announce.
    assert get_engine().execute_step(run_id, 1) == "completed"
    assert _announced(heard) == []
    assert Run.objects.get(pk=run_id).status == "completed"
    assert Run.objects.get(pk=run_id).output == 6


def test_a_scoped_worker_wants_its_namespaces_and_the_unnamed_only():
    assert wanted("a", None) and wanted("", None)
    assert wanted("a", frozenset({"a", "b"})) and wanted("", frozenset({"a"}))
    assert not wanted("c", frozenset({"a", "b"}))


def _listener_pid(conn: psycopg.Connection) -> int:
    row = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE query = %s AND datname = current_database()",
        [f'LISTEN "{NOTIFY_CHANNEL}"'],
    ).fetchone()
    assert row is not None, "no listening connection"
    return int(row[0])


def test_the_listener_wakes_for_its_namespaces_and_once_after_reconnecting():
    wakes: list[int] = []
    lock = threading.Lock()

    def wake() -> None:
        with lock:
            wakes.append(1)

    listener = Listener(wake, frozenset({"a"}), retry=0.01)
    listener.start()
    try:
        assert listener.listening.wait(60)
        _notify("b")  # another namespace's: ignored
        _notify("a")
        until(lambda: len(wakes) == 1, "the wake for namespace a")
        with psycopg.Connection.connect(database_url(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [_listener_pid(admin)])
        # Reconnected: one wake for what may have been missed, then notifications again.
        until(lambda: len(wakes) == 2 and listener.listening.is_set(), "the wake after reconnecting")
        _notify("b")
        _notify("")
        until(lambda: len(wakes) == 3, "the wake for an unnamed notification")
    finally:
        listener.stop()
    assert len(wakes) == 3
    assert not listener.listening.is_set()
    assert connection.vendor == "postgresql"
