"""Composition operations of ``ctx``: children, fan-out, continue-as-new, waiting on
runs, named events, updates, queries, search attributes, patches and database
transactions.

Every operation here is durable the same way steps are: it takes a position,
its outcome is recorded once, and replay returns the recorded outcome.
Children are created in the same transaction as the parent's checkpoint that
records them, with a deterministic id (``<parent>.child.<seq>``), so a crash at
any point leaves exactly one child.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from durable.engine.context_base import (
    COMPLETED,
    EVENT_TOKEN,
    FAILED,
    PENDING,
    RUN_TOKEN,
    RUNNING,
    UPDATE_TOKEN,
    ContextBase,
)
from durable.engine.durations import Duration, parse_duration
from durable.engine.ports import CheckpointRecord, CheckpointWrite, RunRecord
from durable.engine.registry import WorkflowDef
from durable.engine.runs import clean_input, run_fields
from durable.engine.serialization import error_record, to_json
from durable.exceptions import (
    ChildFailed,
    ContinueAsNew,
    DurableError,
    GatherFailed,
    InvalidInput,
    RunFailed,
    RunNotFound,
    SignalTimeout,
    StepFailed,
)

SETTLED_OK = ("completed",)
SETTLED_BAD = ("failed", "dead", "cancelled")


@dataclass(frozen=True)
class Call:
    """A dispatched step to run inside :meth:`CompositionOps.gather` (see :func:`durable.call`)."""

    step: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    compensate: Any = None


@dataclass(frozen=True)
class ChildCall:
    """A child workflow to run inside :meth:`CompositionOps.gather` (see :func:`durable.child_call`)."""

    workflow: Any
    input: Any = None
    run_id: str | None = None


def call(step: Any, *args: Any, compensate: Any = None, **kwargs: Any) -> Call:
    """Describe ``ctx.step(step, *args, **kwargs)`` for ``ctx.gather`` without running it.

    ``compensate`` is reserved, as in ``ctx.step``: the undo of this call (default:
    the step's own ``compensate=``).
    """
    return Call(step, args, kwargs, compensate)


def child_call(workflow: Any, input: Any = None, *, run_id: str | None = None) -> ChildCall:
    """Describe ``ctx.child(workflow, input)`` for ``ctx.gather`` without running it."""
    return ChildCall(workflow, input, run_id)


def _workflow_name(ref: Any) -> str:
    wf = getattr(ref, "__durable_workflow__", None)
    if isinstance(wf, WorkflowDef):
        return wf.name
    return ref if isinstance(ref, str) else repr(ref)


class CompositionOps(ContextBase):
    # -- children ----------------------------------------------------------
    def child(self, workflow: Any, input: Any = None, *, run_id: str | None = None) -> Any:
        """Start a child workflow (or join the run ``run_id``) and return its output.

        Raises :class:`~durable.ChildFailed` if the child fails, is cancelled or
        cannot start at all (unknown workflow, refused input). The child id is
        ``<parent>.child.<position>`` unless given; it inherits the namespace,
        and cancelling the parent cancels it. Follows continue-as-new chains; a
        successful retry-with-input of a failed child also counts as its success.
        """
        state, value = self._child(ChildCall(workflow, input, run_id))
        if state == "done":
            return value
        if state == "failed":
            raise value
        raise self._suspend(event=True)

    def start_child(self, workflow: Any, input: Any = None, *, run_id: str | None = None) -> str:
        """Start a child workflow without waiting; return its id (join later with
        ``ctx.child(..., run_id=id)`` or ``ctx.wait_for_run(id)``)."""
        name = _workflow_name(workflow)
        seq, cp = self._next(name, "start_child")
        if cp is not None:
            if cp.status == FAILED:
                raise ChildFailed(str((cp.input or {}).get("run_id")), "not_started", cp.error)
            return str(cp.output)
        child_id = run_id or f"{self.run_id}.child.{seq}"
        error = self._create_child(workflow, input, child_id)
        if error is not None:
            self._turn.defer(
                CheckpointWrite(
                    CheckpointRecord(
                        seq=seq, name=name, kind="start_child", status=FAILED, input={"run_id": child_id}, error=error
                    ),
                    create=True,
                )
            )
            raise ChildFailed(child_id, "not_started", error)
        self._turn.defer(
            CheckpointWrite(
                CheckpointRecord(
                    seq=seq,
                    name=name,
                    kind="start_child",
                    status=COMPLETED,
                    input={"run_id": child_id},
                    output=child_id,
                ),
                create=True,
            )
        )
        return child_id

    def _create_child(self, workflow: Any, input: Any, child_id: str) -> dict[str, Any] | None:
        """Queue the child's creation in the turn's next commit; an error record if it cannot start."""
        turn = self._turn
        if turn.creating(child_id):
            return None  # started earlier in this turn (start_child, then joined)
        try:
            wf = turn.engine.registry.resolve_workflow(workflow)
            value = clean_input(wf, input, turn.engine.settings.max_payload_bytes)
            if not isinstance(child_id, str) or not child_id or len(child_id) > 255 or " " in child_id:
                raise InvalidInput(f"invalid child run id {child_id!r}")
        except DurableError as exc:
            return error_record(exc, code="child_start_failed", retryable=False)
        fields = run_fields(wf, child_id, value, now=self._clock.now(), namespace=self.namespace, parent_id=self.run_id)
        turn.writes.new_runs.append(fields)
        turn.after_commit(lambda: turn.engine.transport.dispatch_turn(child_id))
        return None

    def _child(self, spec: ChildCall) -> tuple[Literal["done", "failed", "pending"], Any]:
        name = _workflow_name(spec.workflow)
        seq, cp = self._next(name, "child")
        turn = self._turn
        if cp is None:
            child_id = spec.run_id or f"{self.run_id}.child.{seq}"
            error = self._create_child(spec.workflow, spec.input, child_id)
            if error is not None:
                rec = CheckpointRecord(
                    seq=seq,
                    name=name,
                    kind="child",
                    status=FAILED,
                    input={"run_id": child_id},
                    error=error,
                    finished_at=self._clock.now(),
                )
                turn.defer(CheckpointWrite(rec, create=True))
                return "failed", ChildFailed(child_id, "not_started", error)
            rec = CheckpointRecord(
                seq=seq,
                name=name,
                kind="child",
                status=PENDING,
                input={"run_id": child_id},
                started_at=self._clock.now(),
            )
            turn.defer(CheckpointWrite(rec, create=True))
            turn.wait_on(RUN_TOKEN + child_id, seq)
            return "pending", child_id
        child_id = str((cp.input or {}).get("run_id"))
        if cp.status == COMPLETED:
            return "done", cp.output
        if cp.status == FAILED:
            status = (cp.error or {}).get("child_status", "failed")
            return "failed", ChildFailed(child_id, status, cp.error)
        state, value = self._settled(seq, name, "child", child_id)
        if state == "failed":
            return "failed", ChildFailed(child_id, value.get("child_status", "failed"), value)
        return state, value

    def _settled(self, seq: int, name: str, kind: str, run_id: str) -> tuple[Literal["done", "failed", "pending"], Any]:
        """Look at the run a pending checkpoint waits for; record its outcome once it has one."""
        turn = self._turn
        if turn.creating(run_id):
            # Started in this very turn: it exists once this turn commits, and cannot be done yet.
            turn.wait_on(RUN_TOKEN + run_id, seq)
            return "pending", run_id
        final = turn.resolve_run(run_id)
        if final is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        if final.status in SETTLED_OK:
            rec = CheckpointRecord(
                seq=seq, name=name, kind=kind, status=COMPLETED, output=final.output, finished_at=self._clock.now()
            )
            turn.defer(CheckpointWrite(rec, create=False, expect=(PENDING,)))
            return "done", final.output
        if final.status in SETTLED_BAD:
            error = dict(final.error or {"message": f"run {final.id!r} was {final.status}"})
            error["child_status"] = final.status
            error.setdefault("code", f"run_{final.status}")
            rec = CheckpointRecord(
                seq=seq, name=name, kind=kind, status=FAILED, error=error, finished_at=self._clock.now()
            )
            turn.defer(CheckpointWrite(rec, create=False, expect=(PENDING,)))
            return "failed", error
        turn.wait_on(RUN_TOKEN + final.id, seq)
        return "pending", final.id

    def wait_for_run(self, run_id: str) -> Any:
        """Wait for any run to settle and return its output (follows continue-as-new).

        Raises :class:`~durable.RunFailed` if it fails or is cancelled, and
        :class:`~durable.RunNotFound` if there is no such run.
        """
        if not isinstance(run_id, str) or not run_id:
            raise InvalidInput("wait_for_run needs a run id")
        seq, cp = self._next(run_id, "wait_run")
        if cp is not None and cp.status == COMPLETED:
            return cp.output
        if cp is not None and cp.status == FAILED:
            raise RunFailed(run_id, (cp.error or {}).get("child_status", "failed"), cp.error)
        if cp is None:
            rec = CheckpointRecord(
                seq=seq,
                name=run_id,
                kind="wait_run",
                status=PENDING,
                input={"run_id": run_id},
                started_at=self._clock.now(),
            )
            self._turn.defer(CheckpointWrite(rec, create=True))
        state, value = self._settled(seq, run_id, "wait_run", run_id)
        if state == "done":
            return value
        if state == "failed":
            raise RunFailed(run_id, value.get("child_status", "failed"), value)
        raise self._suspend(event=True)

    # -- fan-out -----------------------------------------------------------
    def gather(self, *ops: Call | ChildCall, mode: Literal["all", "fail_fast"] = "all") -> list[Any]:
        """Run dispatched steps and/or children concurrently; return results in input order.

        All of them are dispatched in one turn. ``mode="all"`` waits for every
        one, then raises :class:`~durable.GatherFailed` listing each failure
        with its index; ``mode="fail_fast"`` raises at the first failure and
        cancels the unfinished ones.
        """
        if mode not in ("all", "fail_fast"):
            raise InvalidInput(f"gather mode must be 'all' or 'fail_fast', got {mode!r}")
        results: list[Any] = [None] * len(ops)
        failures: list[tuple[int, dict[str, Any]]] = []
        unfinished: list[tuple[int, str, str, str | None]] = []  # (seq, kind, name, child id)
        for index, op in enumerate(ops):
            if isinstance(op, Call):
                sd = self._turn.engine.registry.resolve_step(op.step)
                seq, cp = self._next(sd.name, "step")
                if cp is None:
                    self._dispatch_step(seq, sd, op.args, op.kwargs)
                    unfinished.append((seq, "step", sd.name, None))
                elif cp.status == COMPLETED:
                    results[index] = cp.output
                    undo = op.compensate if op.compensate is not None else sd.compensate
                    self._remember_undo(seq, sd.name, undo, cp.input, cp.output)
                elif cp.status == FAILED:
                    failures.append((index, cp.error or {}))
                else:
                    self._turn.step_seqs.append(seq)
                    unfinished.append((seq, "step", sd.name, None))
            elif isinstance(op, ChildCall):
                state, value = self._child(op)
                if state == "done":
                    results[index] = value
                elif state == "failed":
                    failures.append((index, {**value.error, "message": str(value), "child_id": value.child_id}))
                else:
                    unfinished.append((self._seq, "child", _workflow_name(op.workflow), value))
            else:
                raise InvalidInput(f"gather takes durable.call(...) or durable.child_call(...), got {op!r}")
        if failures and mode == "fail_fast" and unfinished:
            self._cancel_unfinished(unfinished)
            raise GatherFailed(failures, results)
        if unfinished:
            raise self._suspend(event=True)
        if failures:
            raise GatherFailed(failures, results)
        return results

    def _cancel_unfinished(self, unfinished: list[tuple[int, str, str, str | None]]) -> None:
        turn = self._turn
        error = {
            "message": "cancelled: a sibling failed (fail_fast)",
            "code": "cancelled",
            "retryable": False,
            "type": "Cancelled",
            "traceback": None,
        }
        for seq, kind, name, child_id in unfinished:
            rec = CheckpointRecord(
                seq=seq, name=name, kind=kind, status=FAILED, error=error, finished_at=self._clock.now()
            )
            turn.defer(CheckpointWrite(rec, create=False, expect=(PENDING, RUNNING)))
            if child_id is not None:
                turn.writes.cancel_runs.append(child_id)
        turn.waiters.clear()

    # -- continue-as-new ---------------------------------------------------
    def continue_as_new(self, input: Any = None) -> None:
        """End this run and carry on as a fresh run (``<id>~1``, ``~2``...) with ``input``.

        The next run is written in the same transaction that completes this one,
        so the chain never breaks. ``durable.get_run(id, follow=True)`` and
        ``wait_for_run`` follow it to its latest run.
        """
        raise ContinueAsNew(input)

    # -- versioning --------------------------------------------------------
    def patched(self, change_id: str) -> bool:
        """True if this run takes the new code path guarded by ``change_id``.

        New runs, and runs that had not reached this point when the code
        changed, get True (and keep getting it on replay); runs whose recorded
        history already went past this point get False. Takes no position.
        """
        if not isinstance(change_id, str) or not change_id:
            raise InvalidInput("patched needs a non-empty change id")
        turn = self._turn
        patches = list(turn.run.patches or [])
        if change_id in patches:
            return True
        if not self._at_frontier():
            return False
        patches.append(change_id)
        turn.run.patches = patches
        turn.writes.run_fields["patches"] = patches
        return True

    # -- search attributes and queries --------------------------------------
    def upsert_search_attributes(self, attributes: dict[str, Any]) -> None:
        """Merge ``attributes`` into the run's search attributes (recorded once)."""
        if not isinstance(attributes, dict) or not all(isinstance(k, str) and k for k in attributes):
            raise InvalidInput("search attributes must be a dict with non-empty string keys")
        seq, cp = self._next("search_attributes", "attributes")
        if cp is not None:
            return
        value = to_json(attributes, "search attributes", max_bytes=64 * 1024)
        turn = self._turn
        merged = {**(turn.run.search_attributes or {}), **value}
        turn.run.search_attributes = merged
        turn.writes.run_fields["search_attributes"] = merged
        self._record(seq, "search_attributes", "attributes", value)

    def set_event(self, key: str, value: Any) -> None:
        """Publish a value that callers read with ``durable.get_event(run_id, key)``.

        Visible once the turn's next commit lands; kept after the run ends.
        """
        if not isinstance(key, str) or not key:
            raise InvalidInput("set_event needs a non-empty key")
        turn = self._turn
        values = dict(turn.run.query_values or {})
        values[key] = to_json(value, f"event {key!r}", max_bytes=turn.engine.settings.max_payload_bytes)
        turn.run.query_values = values
        turn.writes.run_fields["query_values"] = values

    # -- updates -----------------------------------------------------------
    def wait_update(self, name: str, timeout: Duration | None = None) -> Any:
        """Wait for an accepted ``durable.update(run_id, name, arg)`` and return its argument.

        Updates are validated in the caller by the validator declared with
        ``@durable.workflow(updates={name: validator})``; only accepted ones
        arrive here, in order.
        """
        if not isinstance(name, str) or not name:
            raise InvalidInput("wait_update needs a non-empty update name")
        return self._wait_buffered(UPDATE_TOKEN + name, name, "update", timeout)

    # -- named events ------------------------------------------------------
    def wait_event(self, name: str, match: dict[str, Any] | None = None, timeout: Duration | None = None) -> Any:
        """Wait for ``durable.publish_event(name, payload)`` with ``match`` ⊆ payload.

        An event published before anyone waited is buffered once and taken by
        the first waiter it matches. Raises :class:`~durable.SignalTimeout` when
        ``timeout`` expires first.
        """
        if not isinstance(name, str) or not name:
            raise InvalidInput("wait_event needs a non-empty event name")
        if match is not None:
            match = to_json(match, "event match")
            if not isinstance(match, dict):
                raise InvalidInput("wait_event match must be a dict")
        seq, cp = self._next(name, "event")
        if cp is not None and cp.status == COMPLETED:
            return cp.output
        if cp is not None and cp.status == FAILED:
            raise SignalTimeout(name, seq)
        turn = self._turn
        now = self._clock.now()
        deadline = cp.wake_at if cp is not None else (now + parse_duration(timeout) if timeout is not None else None)
        got = turn.take_event(seq, name, match, deadline, create=cp is None)
        if got is not None:
            return got[0]
        if deadline is not None and deadline <= now:
            rec = CheckpointRecord(
                seq=seq,
                name=name,
                kind="event",
                status=FAILED,
                wake_at=deadline,
                finished_at=now,
                error=error_record(SignalTimeout(name, seq), code="event_timeout", retryable=False),
            )
            turn.defer(CheckpointWrite(rec, create=cp is None, expect=(PENDING,)))
            raise SignalTimeout(name, seq)
        if cp is None:
            rec = CheckpointRecord(
                seq=seq,
                name=name,
                kind="event",
                status=PENDING,
                wake_at=deadline,
                input={"match": match},
                started_at=now,
            )
            turn.defer(CheckpointWrite(rec, create=True))
        turn.wait_on(EVENT_TOKEN + name, seq, match)
        raise self._suspend(deadline, event=True)

    # -- exactly-once database work -----------------------------------------
    def transaction(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` inside ``transaction.atomic()`` together with its checkpoint.

        The business writes of ``fn`` and the record that it ran commit or roll
        back together, so ``fn`` takes effect exactly once even across crashes.
        An exception rolls everything back and raises
        :class:`~durable.StepFailed` (the failure is recorded).
        """
        if not isinstance(name, str) or not name:
            raise InvalidInput("transaction needs a non-empty name")
        seq, cp = self._next(name, "transaction")
        if cp is not None:
            if cp.status == COMPLETED:
                return cp.output
            raise StepFailed(name, seq, cp.error or {}, cp.attempts)
        turn = self._turn
        turn.flush()
        started = self._clock.now()
        try:
            with turn.engine.store.atomic():
                value = to_json(fn(*args, **kwargs), f"transaction {name!r} result")
                rec = CheckpointRecord(
                    seq=seq,
                    name=name,
                    kind="transaction",
                    status=COMPLETED,
                    output=value,
                    attempts=1,
                    started_at=started,
                    finished_at=self._clock.now(),
                )
                turn.defer(CheckpointWrite(rec, create=True))
                turn.flush()
        except Exception as exc:
            turn.writes.checkpoints = [w for w in turn.writes.checkpoints if w.record.seq != seq]
            err = error_record(exc, retryable=False)
            rec = CheckpointRecord(
                seq=seq,
                name=name,
                kind="transaction",
                status=FAILED,
                error=err,
                attempts=1,
                started_at=started,
                finished_at=self._clock.now(),
            )
            turn.defer(CheckpointWrite(rec, create=True))
            turn.flush()
            raise StepFailed(name, seq, err, 1) from exc
        return value


__all__ = ["Call", "ChildCall", "CompositionOps", "RunRecord", "call", "child_call"]
