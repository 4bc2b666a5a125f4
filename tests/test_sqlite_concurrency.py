"""The embedded default holds with several processes on Django's plain SQLite settings.

Before django-durable set SQLite connections up (durable/sqlite.py), four
processes each starting 30 runs from 30 threads on a plain ``sqlite3``
database saw about a quarter of their starts fail with "database is locked".
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import Warning as CheckWarning
from django.db import connections

from durable.sqlite import sqlite_warnings

REPO = Path(__file__).resolve().parent.parent


def _env(db: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if k != "DATABASE_URL"},
        "DJANGO_SETTINGS_MODULE": "tests.sqlite_plain_settings",
        "DURABLE_SQLITE_PATH": str(db),
    }


@pytest.mark.slow
def test_four_processes_starting_thirty_runs_each_complete_every_run(tmp_path: Path) -> None:
    db = tmp_path / "plain.sqlite3"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=_env(db), check=True, timeout=300)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.sqlite_starter", prefix, "30"],
            cwd=REPO,
            env=_env(db),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for prefix in "abcd"
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["errors"] for r in reports] == [[], [], [], []]
    statuses = Counter(status for r in reports for status in r["statuses"].values())
    assert statuses == {"completed": 120}


@pytest.mark.slow
def test_four_processes_starting_runs_of_one_singleton_key_run_them_one_at_a_time(tmp_path: Path) -> None:
    db = tmp_path / "plain.sqlite3"
    env = _env(db)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=env, check=True, timeout=300)
    starter = [sys.executable, "-m", "tests.sqlite_starter"]
    procs = [
        subprocess.Popen(
            [*starter, prefix, "10", "sqlite_serial", "40"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for prefix in "abcd"
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["errors"] for r in reports] == [[], [], [], []]
    assert Counter(status for r in reports for status in r["statuses"].values()) == {"completed": 40}
    with closing(sqlite3.connect(db)) as conn:
        rows = [
            (seq, datetime.fromisoformat(began), datetime.fromisoformat(ended))
            for seq, began, ended in conn.execute(
                "SELECT singleton_seq, started_at, finished_at FROM durable_run WHERE workflow = 'sqlite_serial' "
                "ORDER BY singleton_seq"
            )
        ]
    assert [seq for seq, _, _ in rows] == list(range(1, 41))  # one queue position each, across processes
    # One at a time, in queue order: each run started after the previous one finished.
    assert [i for i in range(1, 40) if rows[i][1] < rows[i - 1][2]] == []


def _connect(alias: str, settings_dict: dict[str, Any]) -> Any:
    """A new connection of Django's SQLite backend (its connection_created signal fires on connect)."""
    from django.db.backends.sqlite3.base import DatabaseWrapper

    conn = DatabaseWrapper(connections.configure_settings({"default": settings_dict})["default"], alias)
    conn.ensure_connection()
    return conn


@pytest.mark.django_db
def test_a_plain_sqlite_connection_takes_the_write_lock_up_front_and_journals_ahead(tmp_path: Path) -> None:
    conn = _connect("plain", {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "fresh.sqlite3")})
    try:
        with conn.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchone()[0] == "wal"
            cursor.execute("PRAGMA busy_timeout")
            assert cursor.fetchone()[0] == 30_000
        assert conn.transaction_mode == "IMMEDIATE"
    finally:
        conn.close()


@pytest.mark.django_db
def test_an_explicit_transaction_mode_is_respected_and_deferred_is_reported(tmp_path: Path) -> None:
    deferred = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(tmp_path / "d.sqlite3"),
        "OPTIONS": {"transaction_mode": "DEFERRED", "timeout": 1},
    }
    conn = _connect("deferred", deferred)
    try:
        with conn.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout")
            assert cursor.fetchone()[0] == 1000  # the user's timeout, not ours
        assert conn.transaction_mode == "DEFERRED"
    finally:
        conn.close()
    found = sqlite_warnings({"deferred": deferred})
    assert [(type(m), m.id) for m in found] == [(CheckWarning, "durable.W010")]
    assert "deferred" in found[0].msg
    immediate = {**deferred, "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
    assert sqlite_warnings({"immediate": immediate, "plain": {"ENGINE": "django.db.backends.sqlite3"}}) == []
