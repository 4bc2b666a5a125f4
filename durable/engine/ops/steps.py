"""Step operations of ``ctx``: dispatched steps (``ctx.step``) and in-process ones (``ctx.local_step``).

A dispatched step is recorded ``pending`` and announced after that commit;
the run suspends until its result lands. With ``EAGER_STEPS`` on a worker
that consumes the step's queue, the turn claims the step in its own commit
and runs it at once. A local step runs in the turn and its result rides with
the next commit, which always precedes the next side effect: one commit per
step either way.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from durable.engine import admission, observe
from durable.engine.current_step import StepInfo, running
from durable.engine.history import COMPLETED, FAILED, PENDING, RUNNING, copied
from durable.engine.namespaces import queue_for
from durable.engine.observe import NOOP_SPAN, Span
from durable.engine.ops.base import OpsBase
from durable.engine.plan_queues import step_key
from durable.engine.ports import CheckpointRecord
from durable.engine.registry import StepDef
from durable.engine.retry import Backoff, BackoffSpec, check_retries, make_backoff, retry_delay
from durable.engine.serialization import error_record, to_json
from durable.engine.vocab import Admission, CheckpointKind, StepResult
from durable.exceptions import Blocked, InvalidInput, StepFailed

LOCAL = CheckpointKind.LOCAL
STEP = CheckpointKind.STEP


def _call_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The JSON record of a call's arguments, or None when they are not JSON."""
    try:
        return to_json({"args": list(args), "kwargs": kwargs})
    except InvalidInput:
        return None


class StepOps(OpsBase):
    def local_step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retries: int = 0,
        backoff: BackoffSpec = None,
        compensate: Callable[[Any, Any], Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` in this process, once, and record its JSON result.

        A failing call is retried ``retries`` times with ``backoff`` (each retry is
        a durable timer, so it survives a restart); a :class:`~durable.FatalError`
        stops at once. When retries are spent the workflow gets
        :class:`~durable.StepFailed` here. The result is committed (one commit)
        before the next operation; a crash between the call and the commit runs
        it again (at-least-once; the record rides with the next commit, which
        precedes any further side effect). ``compensate(input, output)`` undoes it if the
        run later fails (a saga); ``input`` is ``{"args": [...], "kwargs": {...}}``.
        """
        if not isinstance(name, str) or not name:
            raise InvalidInput("local_step needs a non-empty name")
        if not callable(fn):
            raise InvalidInput(f"local_step {name!r}: {fn!r} is not callable")
        if compensate is not None and not callable(compensate):
            raise InvalidInput(f"local_step {name!r}: compensate must be callable")
        retries = check_retries(retries)
        policy = make_backoff(backoff)
        seq, cp = self._next(name, LOCAL)
        if cp is not None:
            if cp.status == COMPLETED:
                if compensate is not None:
                    self._remember_undo(seq, name, compensate, _call_input(args, kwargs), cp.output)
                return cp.output
            if cp.status == FAILED:
                raise StepFailed(name, seq, cp.error or {}, cp.attempts)
            if cp.wake_at is not None and cp.wake_at > self._clock.now():
                raise self._suspend(cp.wake_at)
        call_input = _call_input(args, kwargs)
        value = self._attempt_local(seq, cp, name, lambda: fn(*args, **kwargs), retries, policy, call_input)
        self._remember_undo(seq, name, compensate, call_input, value)
        # The record is committed later (with the next commit): the code gets a copy of its own.
        return copied(value)

    def _attempt_local(
        self,
        seq: int,
        cp: CheckpointRecord | None,
        name: str,
        call: Callable[[], Any],
        retries: int,
        policy: Backoff,
        call_input: Any,
    ) -> Any:
        """One attempt of a local step at ``seq`` (``cp``: its pending retry, if any)."""
        port, history, clock = self._port, self._history, self._clock
        # Values recorded so far in this turn must be durable before a side effect uses them,
        # and the run must still be ours (not cancelled meanwhile).
        port.confirm_lease()
        attempt = (cp.attempts if cp is not None else 0) + 1
        started = clock.now()
        create = cp is None
        span = self._step_span(seq, name, attempt, None, observe.LOCAL)
        try:
            value = to_json(self._engine.faults.run(name, call), f"local_step {name!r} result")
        except Exception as exc:
            span.fail(exc)
            span.end(StepResult.FAILED)
            err = error_record(exc)
            if err["retryable"] and attempt <= retries:
                retry_at = clock.now() + timedelta(seconds=policy.delay(attempt))
                retry = {"error": err, "attempts": attempt, "wake_at": retry_at, "started_at": started}
                port.defer(history.pending(seq, name, LOCAL, create=create, input=call_input, **retry))
                raise self._suspend(retry_at) from None
            port.defer(
                history.failed(
                    seq, name, LOCAL, err, create=create, input=call_input, attempts=attempt, started_at=started
                )
            )
            port.flush()
            raise StepFailed(name, seq, err, attempt) from exc
        span.end(StepResult.COMPLETED)
        # Not committed yet: it rides with the next commit, which always comes before the
        # next side effect (the flush above the next step) or ends the turn. One commit per step.
        port.defer(
            history.completed(
                seq, name, LOCAL, create=create, input=call_input, output=value, attempts=attempt, started_at=started
            )
        )
        return value

    def step(self, step: Any, *args: Any, compensate: Any = None, queue_key: Any = None, **kwargs: Any) -> Any:
        """Dispatch a registered step to a worker and return its result.

        The first time, a ``pending`` checkpoint is written and the step is
        dispatched after that commit; the run suspends. When the result lands,
        any worker resumes the run and this call returns the recorded output (or
        raises :class:`~durable.StepFailed`). Arguments must be JSON.
        ``compensate`` (a step or a function of ``(input, output)``; default:
        the step's own ``compensate=``) undoes it if the run later fails.
        ``queue_key`` names the key this call counts against in a limited
        queue (``key_concurrency`` and the round robin; default: the step's
        own ``key=`` applied to the arguments). ``compensate`` and
        ``queue_key`` are therefore reserved keywords for step arguments.
        """
        engine = self._engine
        sd = engine.registry.resolve_step(step)
        undo = compensate if compensate is not None else sd.compensate
        seq, cp = self._next(sd.name, STEP)
        if cp is None:
            # A step of a limited queue always waits for its admission (never run eagerly).
            eager = engine.settings.eager_steps and self._broker_queue(sd) in engine.eager_routes and not sd.timeout
            if eager and not admission.limited(engine, sd.route):
                return self._run_here(seq, sd, args, kwargs, undo)
            self._dispatch_step(seq, sd, args, kwargs, queue_key)
            cp = self._wait_for_step(seq, in_flight=False)
        # Parked, this loop goes on in the turn that resumed the workflow (a replay would take it here).
        while True:
            if cp.status == COMPLETED:
                self._remember_undo(seq, sd.name, undo, cp.input, cp.output)
                return cp.output
            if cp.status == FAILED:
                raise StepFailed(sd.name, seq, cp.error or {}, cp.attempts)
            cp = self._wait_for_step(seq, in_flight=True)

    def _step_span(self, seq: int, name: str, attempt: int, queue: str | None, mode: str) -> Span:
        """The span of a step this turn runs itself (local or eager), a child of the turn's span."""
        if not self._engine.observer.enabled:
            return NOOP_SPAN
        attributes = {"run_id": self.run_id, "workflow": self._port.run.workflow, "seq": seq, "step": name}
        attributes.update(attempt=attempt, queue=queue, mode=mode)
        return self._engine.observer.begin(observe.STEP, attributes, parent=self._port.span)

    def _dispatch_step(
        self, seq: int, sd: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any], queue_key: Any = None
    ) -> None:
        """Write the pending checkpoint of a dispatched step and announce it after commit.

        A step of a limited queue is written ``waiting`` with its key, and its
        queue's admission is asked after that commit instead.
        """
        payload = to_json({"args": list(args), "kwargs": kwargs}, f"arguments of step {sd.name!r}")
        port = self._port
        # Checked before the pending write: a step nobody can run parks the run.
        queue = self._broker_queue(sd)
        if not port.can_serve(sd.name, queue):
            raise Blocked(_unserved(sd, queue))
        now = self._clock.now()
        engine = self._engine
        if admission.limited(engine, sd.route):
            self._enqueue_limited(seq, sd, payload, now, self._call_key(sd, args, kwargs, queue_key))
            return
        step_lease = engine.settings.step_lease
        # With lost-dispatch self-heal on, a sweep re-dispatches the step if no
        # worker has taken it by then.
        wake_at = now + timedelta(seconds=step_lease) if step_lease else None
        port.defer(
            self._history.step_record(
                seq, sd.name, PENDING, create=True, input=payload, queue=sd.route, enqueued_at=now, wake_at=wake_at
            )
        )
        run_id, namespace = self.run_id, self.namespace
        port.after_commit(lambda: engine.transport.dispatch_step(run_id, seq, sd.route, namespace=namespace))

    def _broker_queue(self, sd: StepDef) -> str | None:
        """The queue this run's step is sent on: its route, in the run's namespace's queues under
        ``NAMESPACE_QUEUES`` (what a Celery worker consumes; the route stays the name it is limited by)."""
        settings = self._engine.settings
        own = settings.namespace_queues
        return queue_for(sd.route, self.namespace, own_queues=own, default=settings.default_namespace)

    def _call_key(self, sd: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any], queue_key: Any) -> str | None:
        """The key a call of a limited queue's step counts against: ``queue_key=``, else the step's ``key``."""
        where = f"step {sd.name!r}"
        if queue_key is not None or sd.key is None:
            return step_key(queue_key, where)
        try:
            value = sd.key(*args, **kwargs)
        except Exception as exc:
            raise InvalidInput(f"{where}: its key function raised {exc!r}") from exc
        return step_key(value, where)

    def _enqueue_limited(self, seq: int, sd: StepDef, payload: Any, now: Any, key: str | None) -> None:
        """The step waits in its queue (no wake: only an admission sends it); admission is asked after commit."""
        engine = self._engine
        fields = {"input": payload, "queue": sd.route, "enqueued_at": now, "queue_key": key}
        fields["priority"] = self._port.run.priority  # admission ranks by it without reading the run
        self._port.defer(
            self._history.step_record(seq, sd.name, PENDING, create=True, admission=Admission.WAITING, **fields)
        )
        queue = sd.route
        if queue is not None and queue not in self._to_admit:
            self._to_admit.add(queue)
            self._port.after_commit(lambda: admission.admit_next(engine, [queue]))

    def _hold_step_lease(self, seq: int, lease: timedelta) -> Any:
        """Renew the execution lease of the step at ``seq`` (run here) every third of it, until released."""
        engine, run_id, owner = self._engine, self.run_id, self._engine.owner
        return engine.keeper.hold(
            lease.total_seconds() / 3,
            lambda: engine.store.renew_step(run_id, seq, owner, engine.clock.now() + lease),
            lambda: None,  # the commit that settles it finds out
        )

    def _redispatch_after_commit(self, seq: int, route: str | None, delay: float) -> None:
        """Hand the retry of the step at ``seq`` to the broker once the commit that schedules it is done."""
        engine, run_id, namespace = self._engine, self.run_id, self.namespace
        self._port.after_commit(
            lambda: engine.transport.dispatch_step(run_id, seq, route, delay=delay, namespace=namespace)
        )

    def _run_here(self, seq: int, sd: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any], undo: Any) -> Any:
        """Run a dispatched step in this worker, during the turn (``EAGER_STEPS``).

        This process consumes the step's queue, so the broker round trip, the
        separate claim and the wake would only hand the step to a process like
        this one. The claim is still durable before the step runs (it rides
        with the commit that flushes what the turn recorded so far), with the
        usual execution lease, so attempts count executions exactly and a
        worker lost mid-step is recovered by the expired-step sweep. The result
        settles that claim in the next commit, which fails as a whole if the
        claim was taken away meanwhile. One commit per step, as a local step.
        A retryable failure with retries left goes back to the broker.
        """
        payload = to_json({"args": list(args), "kwargs": kwargs}, f"arguments of step {sd.name!r}")
        engine, port = self._engine, self._port
        owner = engine.owner
        lease = timedelta(seconds=engine.settings.step_execution_lease)
        started = self._clock.now()
        base = {"input": payload, "queue": sd.route, "enqueued_at": started, "started_at": started, "attempts": 1}

        def settle(status: str, **fields: Any) -> None:
            port.defer(
                self._history.step_record(seq, sd.name, status, create=False, claimed_by=owner, **base, **fields)
            )

        port.defer(
            self._history.step_record(
                seq, sd.name, RUNNING, create=True, locked_by=owner, wake_at=started + lease, **base
            )
        )
        port.flush()
        run_id = self.run_id
        hold = self._hold_step_lease(seq, lease)
        span = self._step_span(seq, sd.name, 1, sd.route, observe.EAGER)
        try:
            with running(StepInfo(run_id, seq, sd.name, 1)):
                value = engine.faults.run(sd.name, lambda: sd.fn(*args, **kwargs))
                output = to_json(value, f"result of step {sd.name!r}")
        except Exception as exc:
            err = error_record(exc)
            delay = retry_delay(sd, err, 1)
            span.fail(exc)
            span.end(StepResult.FAILED if delay is None else StepResult.RETRYING)
            if delay is not None:
                retry_at = self._clock.now() + timedelta(seconds=delay)
                settle(PENDING, error=err, retry_at=retry_at, wake_at=retry_at)
                self._redispatch_after_commit(seq, sd.route, delay)
                raise self._suspend(event=True) from None
            settle(FAILED, error=err, finished_at=self._clock.now())
            port.flush()
            raise StepFailed(sd.name, seq, err, 1) from exc
        finally:
            hold.release()
        span.end(StepResult.COMPLETED)
        settle(COMPLETED, output=output, finished_at=self._clock.now())
        self._remember_undo(seq, sd.name, undo, payload, output)
        return copied(output)  # as for a local step: its record rides with the next commit


def _unserved(sd: StepDef, queue: str | None) -> dict[str, Any]:
    """Why a run waits (``blocked``): no live worker serves step ``sd`` on ``queue`` (or has what it requires)."""
    if sd.requires:
        needs = ", ".join(sd.requires)
        message = f"no live worker with capability {needs} serves step {sd.name!r} (queue {queue!r})"
    else:
        message = f"no live worker serves step {sd.name!r} on queue {queue or 'default'!r}"
    reason = {"message": message, "code": "no_capable_worker", "retryable": True, "type": "Blocked"}
    return {**reason, "traceback": None, "step": sd.name, "queue": queue, "requires": list(sd.requires)}
