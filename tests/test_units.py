"""Unit tests that need no database: durations, backoff, registry, serialisation, settings."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import durable
from durable import conf
from durable.engine.durations import parse_duration
from durable.engine.leases import LeaseKeeper
from durable.engine.registry import Registry, WorkflowDef
from durable.engine.retry import Backoff, make_backoff
from durable.engine.serialization import error_record, to_json
from durable.exceptions import ConfigurationError, InvalidInput, Suspend
from durable.runtime import registry


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30),
        ("2h", 7200),
        ("7d", 604800),
        ("1h30m", 5400),
        ("1w", 604800),
        (12, 12),
        (1.5, 1.5),
        (timedelta(minutes=2), 120),
        (" 5 m ", 300),
    ],
)
def test_parse_duration_accepts(text, seconds):
    assert parse_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "abc", "5 parsecs", "-1s", -3, float("nan"), float("inf"), True, None, [1]])
def test_parse_duration_refuses(bad):
    with pytest.raises(InvalidInput):
        parse_duration(bad)


def test_backoff_fixed_and_exponential_with_cap():
    assert [Backoff(kind="fixed", initial=2).delay(n) for n in (1, 2, 5)] == [2, 2, 2]
    exp = Backoff(kind="exponential", initial=1, factor=2, max=5)
    assert [exp.delay(n) for n in (1, 2, 3, 4, 10)] == [1, 2, 4, 5, 5]


def test_backoff_jitter_stays_within_bounds_and_varies():
    b = Backoff(kind="fixed", initial=10, jitter=0.2)
    rng = random.Random(7)
    delays = [b.delay(1, rng) for _ in range(200)]
    assert all(8 <= d <= 12 for d in delays)
    assert len({round(d, 6) for d in delays}) > 100


@pytest.mark.parametrize("spec", [{"kind": "linear"}, {"initial": -1}, {"jitter": 2}, {"max": "x"}])
def test_backoff_refuses_bad_values(spec):
    with pytest.raises(InvalidInput):
        Backoff(**spec)


def test_make_backoff_forms():
    assert make_backoff(None) == Backoff()
    assert make_backoff("fixed").kind == "fixed"
    assert make_backoff("2s") == Backoff(kind="fixed", initial=2.0)
    assert make_backoff(timedelta(seconds=3)).initial == 3.0


def test_to_json_normalises_and_refuses():
    assert to_json((1, 2)) == [1, 2]
    assert to_json({"a": (1,)}) == {"a": [1]}
    with pytest.raises(InvalidInput, match="JSON"):
        to_json({"a": object()})
    with pytest.raises(InvalidInput):
        to_json(float("nan"))
    with pytest.raises(InvalidInput, match="limit"):
        to_json("x" * 100, max_bytes=10)


def test_error_record_marks_fatal_errors_not_retryable():
    err = error_record(durable.FatalError("nope", code="bad_card"))
    assert err["retryable"] is False and err["code"] == "bad_card" and err["type"] == "FatalError"
    err = error_record(ValueError("boom"))
    assert err["retryable"] is True and err["message"] == "boom" and "ValueError" in err["traceback"]


def test_suspend_is_not_an_exception():
    # A user's `except Exception` must never swallow the engine's suspension.
    assert not issubclass(Suspend, Exception)
    assert issubclass(Suspend, BaseException)


def test_registry_versions_side_by_side_newest_wins():
    reg = Registry()

    def v1(ctx):
        return 1

    def v2(ctx):
        return 2

    reg.add_workflow(WorkflowDef("w", 1, v1))
    reg.add_workflow(WorkflowDef("w", 2, v2))
    assert reg.get_workflow("w").version == 2
    assert reg.get_workflow("w", 1).fn is v1
    with pytest.raises(durable.WorkflowNotFound, match="no version 3"):
        reg.get_workflow("w", 3)
    with pytest.raises(durable.WorkflowNotFound):
        reg.get_workflow("nope")


def test_registry_refuses_two_functions_under_one_key():
    reg = Registry()

    def a(ctx):
        pass

    def b(ctx):
        pass

    reg.add_workflow(WorkflowDef("same", 1, a))
    reg.add_workflow(WorkflowDef("same", 1, a))  # re-import of the same function is fine
    with pytest.raises(ConfigurationError, match="already registered"):
        reg.add_workflow(WorkflowDef("same", 1, b))


@pytest.mark.parametrize(
    "kwargs",
    [{"name": "has space"}, {"version": 0}, {"version": "2"}, {"tags": "single"}, {"timeout": "soon"}, {"timeout": 0}],
)
def test_workflow_decorator_refuses_bad_options(kwargs):
    with pytest.raises((ConfigurationError, InvalidInput)):

        @durable.workflow(**kwargs)
        def bad(ctx):
            pass


def test_workflow_needs_a_context_parameter():
    with pytest.raises(ConfigurationError, match="context"):

        @durable.workflow(name="t_unit_noctx")
        def noctx():
            pass


@pytest.mark.parametrize("kwargs", [{"retries": -1}, {"retries": 1.5}, {"backoff": "sometimes"}, {"queue": "a b"}])
def test_step_decorator_refuses_bad_options(kwargs):
    with pytest.raises((ConfigurationError, InvalidInput)):

        @durable.step(name="t_unit_badstep", **kwargs)
        def bad():
            pass


def test_decorators_work_bare_and_with_options():
    @durable.step
    def t_unit_bare_step(x):
        return x

    @durable.workflow(name="t_unit_opts", version=3, tags=["a"], timeout="1h")
    def opts(ctx, data):
        return data

    try:
        assert t_unit_bare_step(4) == 4  # still callable directly
        wf = registry.get_workflow("t_unit_opts")
        assert (wf.version, wf.tags, wf.timeout, wf.takes_input) == (3, ("a",), 3600.0, True)
        assert registry.get_step("t_unit_bare_step").retries == 0
    finally:
        registry.remove("t_unit_opts")
        registry.remove("t_unit_bare_step")


def test_settings_defaults_and_overrides():
    with override_settings(DURABLE={}):
        s = conf.get()
        assert (s.lease, s.reconcile_after, s.max_recovery_attempts, s.step_lease) == (30.0, 300.0, 5, 60.0)
    with override_settings(DURABLE={"LEASE": "2m", "TRANSPORT": "manual"}):
        assert conf.get().lease == 120.0


@pytest.mark.parametrize(
    "bad",
    [
        {"LEASE": "abc"},
        {"LEASE": 0},
        {"NOPE": 1},
        {"TRANSPORT": "carrier-pigeon"},
        {"MAX_RECOVERY_ATTEMPTS": 0},
        {"DEFAULT_NAMESPACE": ""},
        {"STEP_LEASE": -1},
        {"SWEEP_QUEUE": ""},
        {"SWEEP_INTERVAL": 0},
    ],
)
def test_settings_are_validated(bad):
    with override_settings(DURABLE=bad):
        with pytest.raises(ImproperlyConfigured):
            conf.get()
        from durable.checks import check_settings

        assert [e.id for e in check_settings()] == ["durable.E001"]


def test_every_settings_problem_is_reported_at_once():
    from durable.checks import check_settings

    bad = {"NOPE": 1, "LEASE": 0, "TRANSPORT": "carrier-pigeon", "SWEEP_BATCH": "many", "STEP_LEASE": "soon"}
    with override_settings(DURABLE=bad):
        found = check_settings()
        with pytest.raises(ImproperlyConfigured) as raised:
            conf.get()
    assert [e.id for e in found] == ["durable.E001"] * 5
    text = " | ".join(e.msg for e in found)
    for name in ("NOPE", "LEASE", "carrier-pigeon", "SWEEP_BATCH", "STEP_LEASE"):
        assert name in text and name in str(raised.value)


@pytest.mark.parametrize(
    ("durable_setting", "warned"),
    [
        ({}, False),
        ({"STEP_LEASE": "5m"}, False),
        ({"STEP_LEASE": "5m", "STEP_REDISPATCH_MAX": 3}, False),
        ({"STEP_LEASE": None}, True),
        ({"STEP_LEASE": None, "LEASE": 0}, False),  # E001 says what is wrong first
    ],
)
def test_a_setting_that_strands_runs_after_a_lost_message_is_warned(durable_setting, warned):
    from django.core.management import call_command

    from durable.checks import check_recovery

    with override_settings(DURABLE=durable_setting):
        found = check_recovery()
        assert [w.id for w in found] == (["durable.W001"] if warned else [])
        if warned:
            assert "STEP_LEASE" in found[0].msg and found[0].level == checks.WARNING
            call_command("check")  # a warning, not an error: the project still starts


def test_the_redispatch_limit_may_be_none_or_a_positive_count():
    with override_settings(DURABLE={"STEP_REDISPATCH_MAX": None}):
        assert conf.get().step_redispatch_max is None
    with override_settings(DURABLE={"STEP_REDISPATCH_MAX": 3}):
        assert conf.get().step_redispatch_max == 3
    with override_settings(DURABLE={"STEP_REDISPATCH_MAX": 0}):
        with pytest.raises(ImproperlyConfigured, match="positive integer or None"):
            conf.get()


def test_transport_auto_selects_celery_with_a_broker():
    with override_settings(DURABLE={}, CELERY_BROKER_URL="redis://127.0.0.1:6379/0"):
        assert conf.get().transport == "celery"
    with override_settings(DURABLE={}, CELERY_BROKER_URL=None):
        assert conf.get().transport == "inline"


def test_to_json_refuses_what_no_database_can_store():
    with pytest.raises(InvalidInput, match="NUL"):
        to_json({"a": "x\x00y"})
    with pytest.raises(InvalidInput, match="surrogate"):
        to_json(["\ud800"])
    assert to_json({"emoji": "😀", "text": "a literal \\u0000 is fine"}) == {
        "emoji": "😀",
        "text": "a literal \\u0000 is fine",
    }


def test_lease_keeper_renews_each_hold_at_its_beat_until_released_or_lost():
    """The keeper's own thread, on the real clock: events and generous deadlines, no timing asserts.

    Tests elsewhere stand in a manual keeper (tests/timing.py) and move a fake clock instead.
    """
    keeper = LeaseKeeper()
    renewals: Counter[str] = Counter()
    seen = {name: threading.Semaphore(0) for name in ("kept", "later")}
    lost = threading.Event()

    def renewing(name: str) -> Callable[[], bool]:
        def renew() -> bool:
            renewals[name] += 1
            seen[name].release()
            return True

        return renew

    kept = keeper.hold(0.001, renewing("kept"), lambda: pytest.fail("a renewed lease reported lost"))
    keeper.hold(0.001, lambda: False, lost.set)
    for _ in range(3):  # renewed again and again while held
        assert seen["kept"].acquire(timeout=60)
    assert lost.wait(60)  # a renewal that finds the lease gone tells its holder

    kept.release()
    later = keeper.hold(0.001, renewing("later"), lambda: None)
    # A beat that renews the later hold began after the release: from here on, the released
    # hold's count is final; another beat later, it still has not moved.
    assert seen["later"].acquire(timeout=60)
    final = renewals["kept"]
    assert seen["later"].acquire(timeout=60)
    later.release()  # (the thread then idles: nothing is held)
    assert renewals["kept"] == final
