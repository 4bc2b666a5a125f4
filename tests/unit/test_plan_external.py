"""Callback tokens and the plans of writes made from outside a run (durable.engine.callbacks, plan_external)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durable.engine import callbacks
from durable.engine.plan_external import breakpoint_refusal, callback_refusal, paused_at, plan_callback
from durable.engine.ports import CheckpointRecord
from durable.engine.vocab import CALLBACK_TOKEN, CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import (
    BreakpointNotFound,
    CallbackAlreadyCompleted,
    CallbackNotFound,
    ConfigurationError,
    InvalidCallbackToken,
    RunNotFound,
)

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
KEY = b"k" * 32


def test_a_token_is_deterministic_names_its_run_and_position_and_depends_on_the_key() -> None:
    token = callbacks.make_token(KEY, "order/42 é", 7)
    assert token == callbacks.make_token(KEY, "order/42 é", 7)
    assert callbacks.read_token(KEY, token) == ("order/42 é", 7)
    assert token != callbacks.make_token(KEY, "order/42 é", 8)
    assert token != callbacks.make_token(b"other", "order/42 é", 7)
    assert all(c.isalnum() or c in "-_." for c in token)  # safe in a URL path


@pytest.mark.parametrize("mangle", [lambda t: t + "A", lambda t: "A" + t, lambda t: t.replace(".", ""), lambda t: 7])
def test_a_token_not_signed_with_the_key_is_refused(mangle) -> None:
    with pytest.raises(InvalidCallbackToken):
        callbacks.read_token(KEY, mangle(callbacks.make_token(KEY, "r", 1)))
    with pytest.raises(InvalidCallbackToken, match="signature"):
        callbacks.read_token(b"other", callbacks.make_token(KEY, "r", 1))


def test_no_key_no_token() -> None:
    with pytest.raises(ConfigurationError, match="SECRET_KEY"):
        callbacks.make_token(b"", "r", 1)


def _cb(
    status: str = CheckpointStatus.PENDING, kind: str = CheckpointKind.CALLBACK, **extra: object
) -> CheckpointRecord:
    return CheckpointRecord(seq=1, name="approval", kind=kind, status=status, **extra)  # type: ignore[arg-type]


def test_plan_callback_buffers_an_envelope_under_the_token() -> None:
    done = plan_callback("r", 1, "tok", NOW, payload={"a": 1})
    assert (done.signal, done.envelope, done.status, done.output) == (
        CALLBACK_TOKEN + "tok",
        {"payload": {"a": 1}},
        "completed",
        {"a": 1},
    )
    failed = plan_callback("r", 1, "tok", NOW, error={"message": "no"})
    assert (failed.envelope, failed.status, failed.error) == ({"error": {"message": "no"}}, "failed", {"message": "no"})


@pytest.mark.parametrize(
    "status,cp,error,match",
    [
        (None, None, CallbackNotFound, "no such run"),
        (RunStatus.SUSPENDED, None, CallbackNotFound, "no callback"),
        (RunStatus.SUSPENDED, _cb(kind=CheckpointKind.SIGNAL), CallbackNotFound, "no callback"),
        (RunStatus.COMPLETED, _cb(CheckpointStatus.COMPLETED), CallbackAlreadyCompleted, "already completed"),
        (RunStatus.SUSPENDED, _cb(CheckpointStatus.FAILED), CallbackAlreadyCompleted, "already failed"),
        (RunStatus.FAILED, _cb(), CallbackAlreadyCompleted, "the run has ended"),
        (RunStatus.SUSPENDED, _cb(wake_at=NOW), CallbackAlreadyCompleted, "timed out"),
    ],
)
def test_callback_refusals(status, cp, error, match) -> None:
    refusal = callback_refusal(plan_callback("r", 1, "tok", NOW), status, cp)
    assert isinstance(refusal, error) and match in str(refusal)


def test_a_pending_callback_before_its_deadline_is_written() -> None:
    plan = plan_callback("r", 1, "tok", NOW)
    assert callback_refusal(plan, RunStatus.RUNNING, _cb(wake_at=NOW + timedelta(seconds=1))) is None
    assert callback_refusal(plan, RunStatus.SUSPENDED, _cb()) is None


def test_breakpoint_refusals_and_where_a_run_is_paused() -> None:
    bp = [
        CheckpointRecord(seq=s, name=f"b{s}", kind=CheckpointKind.BREAKPOINT, status=st)
        for s, st in ((1, CheckpointStatus.COMPLETED), (3, CheckpointStatus.PENDING))
    ]
    history = {cp.seq: cp for cp in bp}
    assert paused_at(history) == bp[1]
    assert paused_at({1: bp[0]}) is None
    assert isinstance(breakpoint_refusal("r", None, None), RunNotFound)
    assert isinstance(breakpoint_refusal("r", RunStatus.SUSPENDED, None), BreakpointNotFound)
    assert isinstance(breakpoint_refusal("r", RunStatus.CANCELLED, bp[1]), BreakpointNotFound)
    assert breakpoint_refusal("r", RunStatus.SUSPENDED, bp[1]) is None
