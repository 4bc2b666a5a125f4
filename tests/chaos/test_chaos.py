"""The chaos and soak suite under pytest: each test runs :mod:`tests.chaos.driver` once and asserts its report.

The driver does the exact accounting (see :mod:`tests.chaos.verify`); here every
failure it found fails the test, the figures are printed whether the test passes
or not, and the report is kept as JSON. ``scripts/chaos`` picks what runs:

* the short run (about 2 minutes, seed ``$CHAOS_SEED``, default 1) always runs with the
  ``chaos`` tests, and in ``scripts/test``'s PostgreSQL pass;
* the long run, once per seed of ``$CHAOS_SEEDS`` (``1,2,3``), only with ``CHAOS_LONG=1``;
* the soak only with ``CHAOS_SOAK_MINUTES`` set (``CHAOS_SOAK_RATE`` runs a second, default 2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.kinds import KINDS

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results" / "chaos"
EXCLUDE = os.environ.get("CHAOS_EXCLUDE", "")
SEEDS = [int(s) for s in os.environ.get("CHAOS_SEEDS", "1,2,3").split(",") if s.strip()]
SOAK_MINUTES = os.environ.get("CHAOS_SOAK_MINUTES")

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow]


def drive(capsys: pytest.CaptureFixture[str], out: Path, *args: str, timeout: float) -> dict[str, Any]:
    """Run the driver in a process of its own (its own Django settings and database); return its report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_SETTINGS", "DATABASE_URL"))}
    cmd = [sys.executable, "-m", "tests.chaos.driver", *args, "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO, env=env, timeout=timeout, capture_output=True, text=True)
    with capsys.disabled():
        print(f"\n{done.stdout[-20000:]}{done.stderr[-5000:]}")
    assert out.exists(), f"the driver wrote no report (exit {done.returncode})"
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def assert_chaos_report(report: dict[str, Any], planned: int) -> None:
    assert report.get("failures") == [], "\n".join(report.get("failures", []))
    runs = planned + report["faults_injected"].get("poison_step", 0)  # each starts one poisoned run
    assert report["runs"] == runs
    assert sum(report["statuses"].values()) == runs
    assert report["late_results_accepted"] == 0
    assert set(report["faults_injected"]) == set(KINDS) - set(report["excluded_fault_kinds"])
    assert set(report["excluded_fault_kinds"]) <= {k for k in EXCLUDE.split(",") if k} | {"kill_durable_worker"}


@pytest.mark.timeout(1200)
def test_short_chaos_run(capsys):
    seed = os.environ.get("CHAOS_SEED", "1")
    out = REPO / "test-output" / f"chaos-short-seed{seed}.json"
    report = drive(capsys, out, "chaos", "--mode", "short", "--seed", seed, "--exclude", EXCLUDE, timeout=1100)
    assert_chaos_report(report, 120)


@pytest.mark.skipif(os.environ.get("CHAOS_LONG") != "1", reason="on demand: ./scripts/chaos --long")
@pytest.mark.timeout(3000)
@pytest.mark.parametrize("seed", SEEDS)
def test_long_chaos_run(capsys, seed):
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"long-seed{seed}-{stamp}.json"
    fleet = "celery" if seed % 2 == 0 else "mixed"  # even seeds: Celery alone must recover everything
    args = ("--mode", "long", "--seed", str(seed), "--fleet", fleet, "--exclude", EXCLUDE)
    report = drive(capsys, out, "chaos", *args, timeout=2900)
    assert_chaos_report(report, 500)


@pytest.mark.skipif(not SOAK_MINUTES, reason="on demand: ./scripts/chaos --soak MINUTES")
@pytest.mark.timeout(7200)
def test_soak(capsys):
    minutes = float(SOAK_MINUTES or 0)
    rate = os.environ.get("CHAOS_SOAK_RATE", "2")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"soak-{minutes:g}min-{stamp}.json"
    report = drive(capsys, out, "soak", "--minutes", str(minutes), "--rate", rate, timeout=minutes * 60 + 1800)
    assert report.get("failures") == [], "\n".join(report.get("failures", []))
    assert len(report["samples"]) >= int(minutes * 2)
