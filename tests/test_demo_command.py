"""``manage.py durable_demo`` says what it did: runs started the first time, nothing new after."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

import durable
from durable.models import Run

pytestmark = pytest.mark.django_db


def _demo() -> str:
    out = StringIO()
    call_command("durable_demo", stdout=out)
    return out.getvalue()


def test_the_demo_starts_its_runs_once_and_then_says_nothing_new_was_started() -> None:
    first = _demo()
    assert "demo superuser: admin / admin" in first
    assert "6 example runs started;" in first
    assert Run.objects.filter(id__startswith="demo-").count() == 6
    second = _demo()
    assert second.strip() == "nothing new started: the 6 example runs exist already"
    assert Run.objects.filter(id__startswith="demo-").count() == 6


def test_a_partly_missing_demo_starts_only_what_is_missing() -> None:
    durable.start("countdown", 1, run_id="demo-countdown-1")
    out = _demo()
    assert "5 example runs started (1 existed already);" in out
    assert Run.objects.get(id="demo-countdown-1").input == 1  # the existing run was not replaced
