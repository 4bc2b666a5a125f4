"""Children and fan-out: ``ctx.child``, ``ctx.start_child`` and ``ctx.gather``.

Children are created in the same transaction as the parent's checkpoint that
records them, with a deterministic id (``<parent>.child.<seq>``), so a crash at
any point leaves exactly one child. ``gather`` dispatches every step and child
it is given in one turn (one commit) and replays their outcomes in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from durable.engine import observe
from durable.engine.history import COMPLETED, FAILED, IN_FLIGHT, cancelled_error
from durable.engine.new_runs import clean_input, run_fields
from durable.engine.ops.steps import StepOps
from durable.engine.ops.waits import Settled, WaitOps
from durable.engine.registry import WorkflowDef
from durable.engine.serialization import error_record
from durable.engine.vocab import RUN_TOKEN, CheckpointKind, RunStatus
from durable.exceptions import ChildFailed, DurableError, GatherFailed, InvalidInput

CHILD = CheckpointKind.CHILD
STEP = CheckpointKind.STEP
# (seq, kind, name, child id) of an operation of a gather without an outcome yet.
Unfinished = tuple[int, str, str, str | None]


@dataclass(frozen=True)
class Call:
    """A dispatched step to run inside :meth:`ChildOps.gather` (see :func:`durable.call`)."""

    step: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    compensate: Any = None
    queue_key: Any = None


@dataclass(frozen=True)
class ChildCall:
    """A child workflow to run inside :meth:`ChildOps.gather` (see :func:`durable.child_call`)."""

    workflow: Any
    input: Any = None
    run_id: str | None = None


def call(step: Any, *args: Any, compensate: Any = None, queue_key: Any = None, **kwargs: Any) -> Call:
    """Describe ``ctx.step(step, *args, **kwargs)`` for ``ctx.gather`` without running it.

    ``compensate`` and ``queue_key`` are reserved, as in ``ctx.step``: the undo of
    this call (default: the step's own ``compensate=``) and its key in a limited queue.
    """
    return Call(step, args, kwargs, compensate, queue_key)


def child_call(workflow: Any, input: Any = None, *, run_id: str | None = None) -> ChildCall:
    """Describe ``ctx.child(workflow, input)`` for ``ctx.gather`` without running it."""
    return ChildCall(workflow, input, run_id)


def _workflow_name(ref: Any) -> str:
    wf = getattr(ref, "__durable_workflow__", None)
    if isinstance(wf, WorkflowDef):
        return wf.name
    return ref if isinstance(ref, str) else repr(ref)


class ChildOps(StepOps, WaitOps):
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
        kind = CheckpointKind.START_CHILD
        seq, cp = self._next(name, kind)
        if cp is not None:
            if cp.status == FAILED:
                raise ChildFailed(str((cp.input or {}).get("run_id")), "not_started", cp.error)
            return str(cp.output)
        child_id = run_id or f"{self.run_id}.child.{seq}"
        error = self._create_child(workflow, input, child_id)
        history = self._history
        if error is not None:
            # A start takes no time: its record has no finished_at.
            self._port.defer(
                history.failed(seq, name, kind, error, create=True, input={"run_id": child_id}, finished_at=None)
            )
            raise ChildFailed(child_id, "not_started", error)
        self._port.defer(
            history.completed(
                seq, name, kind, create=True, input={"run_id": child_id}, output=child_id, finished_at=None
            )
        )
        return child_id

    def _create_child(self, workflow: Any, input: Any, child_id: str) -> dict[str, Any] | None:
        """Queue the child's creation in the turn's next commit; an error record if it cannot start."""
        port, engine = self._port, self._engine
        if port.creating(child_id):
            return None  # started earlier in this turn (start_child, then joined)
        try:
            wf = engine.registry.resolve_workflow(workflow)
            value = clean_input(wf, input, engine.settings.max_payload_bytes)
            if not isinstance(child_id, str) or not child_id or len(child_id) > 255 or " " in child_id:
                raise InvalidInput(f"invalid child run id {child_id!r}")
            now = self._clock.now()
            fields = run_fields(wf, child_id, value, now=now, namespace=self.namespace, parent_id=self.run_id)
        except DurableError as exc:
            return error_record(exc, code="child_start_failed", retryable=False)
        if engine.observer.enabled:
            # The child's start: a span of its parent's turn, so the child's spans join the parent's trace.
            attributes = {"run_id": child_id, "workflow": wf.name, "version": wf.version, "parent_id": self.run_id}
            span = engine.observer.begin(observe.START, attributes, parent=port.span)
            fields["trace_context"] = span.context()
            span.end("started")
        port.create_run(fields)
        namespace = self.namespace  # a child runs in its parent's namespace
        port.after_commit(lambda: engine.transport.dispatch_turn(child_id, namespace=namespace))
        return None

    def _child(self, spec: ChildCall) -> Settled:
        name = _workflow_name(spec.workflow)
        seq, cp = self._next(name, CHILD)
        port, history = self._port, self._history
        if cp is None:
            child_id = spec.run_id or f"{self.run_id}.child.{seq}"
            error = self._create_child(spec.workflow, spec.input, child_id)
            if error is not None:
                port.defer(history.failed(seq, name, CHILD, error, create=True, input={"run_id": child_id}))
                return "failed", ChildFailed(child_id, "not_started", error)
            port.defer(history.pending(seq, name, CHILD, input={"run_id": child_id}))
            port.wait_on(RUN_TOKEN + child_id, seq)
            return "pending", child_id
        child_id = str((cp.input or {}).get("run_id"))
        if cp.status == COMPLETED:
            return "done", cp.output
        if cp.status == FAILED:
            status = (cp.error or {}).get("child_status", RunStatus.FAILED)
            return "failed", ChildFailed(child_id, status, cp.error)
        state, value = self._settled(seq, name, CHILD, child_id)
        if state == "failed":
            return "failed", ChildFailed(child_id, value.get("child_status", RunStatus.FAILED), value)
        return state, value

    # -- fan-out -----------------------------------------------------------------
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
        unfinished: list[Unfinished] = []
        for index, op in enumerate(ops):
            if isinstance(op, Call):
                self._gather_step(index, op, results, failures, unfinished)
            elif isinstance(op, ChildCall):
                state, value = self._child(op)
                if state == "done":
                    results[index] = value
                elif state == "failed":
                    failures.append((index, {**value.error, "message": str(value), "child_id": value.child_id}))
                else:
                    unfinished.append((self._history.seq, CHILD, _workflow_name(op.workflow), value))
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

    def _gather_step(
        self,
        index: int,
        op: Call,
        results: list[Any],
        failures: list[tuple[int, dict[str, Any]]],
        unfinished: list[Unfinished],
    ) -> None:
        sd = self._engine.registry.resolve_step(op.step)
        seq, cp = self._next(sd.name, STEP)
        if cp is None:
            self._dispatch_step(seq, sd, op.args, op.kwargs, op.queue_key)
            unfinished.append((seq, STEP, sd.name, None))
        elif cp.status == COMPLETED:
            results[index] = cp.output
            undo = op.compensate if op.compensate is not None else sd.compensate
            self._remember_undo(seq, sd.name, undo, cp.input, cp.output)
        elif cp.status == FAILED:
            failures.append((index, cp.error or {}))
        else:
            self._port.await_step(seq)
            unfinished.append((seq, STEP, sd.name, None))

    def _cancel_unfinished(self, unfinished: list[Unfinished]) -> None:
        port = self._port
        error = cancelled_error("cancelled: a sibling failed (fail_fast)")
        for seq, kind, name, child_id in unfinished:
            port.defer(self._history.failed(seq, name, kind, error, expect=IN_FLIGHT))
            if child_id is not None:
                port.cancel_run(child_id)
        port.clear_waiters()
