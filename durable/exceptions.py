"""Exceptions raised by django-durable.

Every public error derives from :class:`DurableError`, so callers can catch the
whole family at once. Errors about bad arguments also derive from the matching
builtin (``ValueError``, ``LookupError``) so generic handlers keep working.

Control flow inside a workflow turn (:class:`Suspend`, :class:`LeaseLost`,
:class:`EngineFault`) derives from ``BaseException``: a user's
``except Exception:`` around a durable operation must never swallow the
engine's decision to park the run or abandon a turn it no longer owns.
"""

from __future__ import annotations

from typing import Any


class DurableError(Exception):
    """Root of every error django-durable raises on purpose."""


class ConfigurationError(DurableError):
    """A workflow or step was declared in a way the engine cannot run."""


class InvalidInput(DurableError, ValueError):
    """An argument was refused before anything was written."""


class WorkflowNotFound(DurableError, LookupError):
    """No workflow with that name (or version) is registered in this process."""


class StepNotFound(DurableError, LookupError):
    """No step with that name is registered in this process."""


class RunNotFound(DurableError, LookupError):
    """No run with that id exists."""


class InvalidRunState(DurableError):
    """The run's status does not allow the requested operation."""


class NonDeterminismError(DurableError):
    """Replay met a different durable operation than the one recorded.

    Raised when the workflow code asks for operation ``name`` at position
    ``seq`` but the history holds another operation there: the code changed
    under a run in flight without a ``ctx.patched(...)`` guard.
    """


class FatalError(DurableError):
    """Raise from a step to fail it at once, without further retries."""

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class StepFailed(DurableError):
    """A step failed for good (retries exhausted or a fatal error).

    Raised inside the workflow at the step's call site; catch it to handle the
    failure, or let it propagate to fail the run.
    """

    def __init__(self, step: str, seq: int, error: dict[str, Any], attempts: int) -> None:
        self.step = step
        self.seq = seq
        self.error = error
        self.attempts = attempts
        message = error.get("message") or error.get("type") or "error"
        super().__init__(f"step {step!r} (#{seq}) failed after {attempts} attempt(s): {message}")


class SignalTimeout(DurableError):
    """``ctx.wait_signal(name, timeout=...)`` expired before a signal arrived."""

    def __init__(self, name: str, seq: int) -> None:
        self.name = name
        self.seq = seq
        super().__init__(f"no signal {name!r} arrived before the timeout (#{seq})")


# ---------------------------------------------------------------------------
# Internal control flow. Not part of the public API.


class Suspend(BaseException):
    """The turn cannot continue until something happens; park the run."""


class LeaseLost(BaseException):
    """This process no longer holds the run's lease; abandon the turn, write nothing."""


class EngineFault(BaseException):
    """An infrastructure error (database down, conflict) during a durable operation.

    Wraps the original exception so user ``except Exception:`` blocks cannot turn
    an engine failure into a workflow decision. The turn is abandoned and retried.
    """

    def __init__(self, original: BaseException) -> None:
        self.original = original
        super().__init__(f"{type(original).__name__}: {original}")


class CodecError(BaseException):
    """A stored payload did not decode (tampered, or under a key no longer configured).

    The turn that meets it fails its run with code ``codec_error`` and this
    message; derived from ``BaseException`` so that a workflow's ``except
    Exception:`` cannot swallow it into a crash loop of retries.
    """


class Blocked(BaseException):
    """The run cannot go on in this deployment (no capable worker); park it ``blocked``."""

    def __init__(self, reason: dict[str, Any]) -> None:
        self.reason = reason
        super().__init__(reason.get("message", "blocked"))


class RunFailed(DurableError):
    """A run waited on ended without completing (failed, dead or cancelled)."""

    what = "run"

    def __init__(self, run_id: str, status: str, error: dict[str, Any] | None) -> None:
        self.run_id = run_id
        self.status = status
        self.error = error or {}
        detail = self.error.get("message") or status
        super().__init__(f"{self.what} {run_id!r} {status}: {detail}")


class ChildFailed(RunFailed):
    """A child workflow ended without completing, or could not even start (``not_started``)."""

    what = "child run"

    @property
    def child_id(self) -> str:
        return self.run_id


class GatherFailed(DurableError):
    """One or more operations of ``ctx.gather`` failed.

    ``failures`` lists ``(index, error)`` pairs in input order; ``results``
    holds the values of the operations that completed (None elsewhere).
    """

    def __init__(self, failures: list[tuple[int, dict[str, Any]]], results: list[Any]) -> None:
        self.failures = failures
        self.results = results
        parts = "; ".join(f"#{i}: {err.get('message') or err.get('type')}" for i, err in failures)
        super().__init__(f"{len(failures)} of {len(results)} gathered operation(s) failed: {parts}")


class ContinueAsNew(BaseException):
    """Internal: end this run and carry on as a new run with ``input``."""

    def __init__(self, input: Any) -> None:
        self.input = input
        super().__init__("continue as new")


class CancelRequested(BaseException):
    """Internal: ``cancel(compensate=True)`` reached the run; undo and stop."""


class EventNotSet(DurableError, LookupError):
    """``durable.get_event(run_id, key)``: the run never set that key."""


class InvalidCallbackToken(DurableError):
    """A callback token that this deployment did not sign (wrong signature, or not a token at all)."""


class CallbackNotFound(DurableError, LookupError):
    """A validly signed token whose run, or whose ``ctx.wait_for_callback``, does not exist (any more)."""


class CallbackAlreadyCompleted(DurableError):
    """The callback was already completed or failed, timed out, or its run has ended: nothing was written."""


class CallbackFailed(DurableError):
    """``handle.wait()``: the third party reported a failure with ``durable.fail_callback(token, error)``."""

    def __init__(self, name: str, seq: int, error: object) -> None:
        self.name = name
        self.seq = seq
        self.error = error
        message = error.get("message") if isinstance(error, dict) else error
        super().__init__(f"callback {name!r} (#{seq}) failed: {message}")


class CallbackTimeout(DurableError, TimeoutError):
    """``handle.wait()``: the callback's ``timeout`` passed before it was completed."""

    def __init__(self, name: str, seq: int) -> None:
        self.name = name
        self.seq = seq
        super().__init__(f"callback {name!r} (#{seq}) was not completed before its timeout")


class BreakpointNotFound(DurableError, LookupError):
    """``durable.resume_breakpoint(run_id)``: the run is not paused at a breakpoint."""


class WaitTimeout(DurableError, TimeoutError):
    """``durable.wait_for_run(...)`` gave up before the run settled."""


class ScheduleNotFound(DurableError, LookupError):
    """No schedule with that key exists."""


class ScheduleExists(DurableError):
    """A schedule with that key exists already (``create_schedule``); change it with ``update_schedule``."""


class QueueFull(DurableError):
    """``durable.start()`` of a singleton workflow whose key's queue is full; nothing was written.

    Raised when the runs of ``key`` holding a slot plus those waiting for one
    reach ``limit + max_queue_depth`` (``@workflow(singleton=durable.Singleton(...))``).
    A start with the id of a run that already exists never raises it (it is
    idempotent and returns that run).
    """

    def __init__(self, workflow: str, key: str, limit: int, max_queue_depth: int) -> None:
        self.workflow = workflow
        self.key = key
        self.limit = limit
        self.max_queue_depth = max_queue_depth
        super().__init__(
            f"workflow {workflow!r} already has {limit + max_queue_depth} runs for singleton key {key!r} "
            f"({limit} running at most, {max_queue_depth} waiting at most); try again later"
        )


class QueueNotFound(DurableError, LookupError):
    """No limited step queue of that name: ``DURABLE["QUEUES"]`` does not name it."""


class EntityNotFound(DurableError, LookupError):
    """No entity with that name (or no operation with that name on it) is registered in this process."""


class EntityTimeout(DurableError, TimeoutError):
    """An entity operation waited longer than its ``timeout`` for the entity's lock; nothing was written."""

    def __init__(self, name: str, key: str, timeout: float | None) -> None:
        self.name = name
        self.key = key
        self.timeout = timeout
        super().__init__(f"entity {name!r} key {key!r} stayed locked longer than the timeout ({timeout} s)")


class EntityOpFailed(DurableError):
    """The handler of an entity operation raised: that operation failed, the entity did not.

    The entity's state is unchanged and the failure is recorded on the
    operation's log row (so a repeat of the same op id raises this again).
    ``error`` is the recorded JSON error (``type``, ``message``, ``code``,
    ``traceback``); ``error_type`` and ``message`` are its handy parts.
    """

    def __init__(self, name: str, key: str, op: str, error: dict[str, Any]) -> None:
        self.name = name
        self.key = key
        self.op = op
        self.error = error
        self.error_type = str(error.get("type") or "Error")
        self.message = str(error.get("message") or "")
        super().__init__(f"entity {name!r} key {key!r} operation {op!r} failed: {self.error_type}: {self.message}")
