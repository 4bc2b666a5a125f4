"""Service functions on runs: the one way user code, the admin and the REST API act on them.

Each function is a thin wrapper over the default :class:`~durable.client.Client`
(``durable.runtime.client()``), with the same arguments and behaviour; an app
or a test that wants an engine of its own builds its own ``Client``.

Every function validates its arguments before touching the database and
raises a :class:`~durable.DurableError` subclass with a clear message on bad
input; nothing is written in that case. Work is announced to the transport
only after the caller's transaction commits (``transaction.on_commit``), so
``start()`` inside ``transaction.atomic()`` creates a run only if the caller's
own writes commit.
"""

from __future__ import annotations

from typing import Any

from durable import runtime
from durable.engine.current_step import StepInfo
from durable.engine.current_step import current_step as _current_step
from durable.results import RunInfo as RunInfo


def start(
    workflow: Any,
    input: Any = None,
    *,
    run_id: str | None = None,
    tags: list[str] | None = None,
    namespace: str | None = None,
    search_attributes: dict[str, Any] | None = None,
    priority: int = 0,
) -> str:
    """Start ``workflow`` (a decorated function or a registered name) and return the run id.

    Idempotent on ``run_id``: starting an id that exists returns it and creates
    nothing. The run is created ``pending`` on the newest registered version and
    dispatched once the surrounding transaction (if any) commits.
    """
    return runtime.client().start(
        workflow,
        input,
        run_id=run_id,
        tags=tags,
        namespace=namespace,
        search_attributes=search_attributes,
        priority=priority,
    )


def get_run(run_id: str, *, follow: bool = False) -> RunInfo:
    """The run's current state; raises :class:`~durable.RunNotFound` for an unknown id.

    With ``follow=True``, a run that continued as new is followed to the
    latest run of its chain.
    """
    return runtime.client().get_run(run_id, follow=follow)


def signal(run_id: str, name: str, payload: Any = None) -> None:
    """Send signal ``name`` with a JSON ``payload`` to a run.

    A run already waiting for it wakes up; otherwise the signal is buffered
    (first in, first out per name) until the run waits for it. Raises
    :class:`~durable.RunNotFound` for an unknown run and
    :class:`~durable.InvalidRunState` for a finished one.
    """
    runtime.client().signal(run_id, name, payload)


def cancel(run_id: str, *, compensate: bool = False) -> bool:
    """Cancel a run and its children. True if this call cancelled it, False if it had ended.

    Idempotent. A cancelled run never starts another step: its pending steps
    are refused by workers, and a turn in progress loses its lease and writes
    nothing more. With ``compensate=True`` the run (and its children) first
    undo their completed steps that declared a compensation, newest first,
    then end ``cancelled``.
    """
    return runtime.client().cancel(run_id, compensate=compensate)


def heartbeat(progress: Any = None) -> bool:
    """From inside a dispatched step: record liveness and optional JSON ``progress``.

    Throttled to one write per ``DURABLE["HEARTBEAT_INTERVAL"]`` per step and
    renews the step's execution lease. Never raises; returns True if written.
    """
    return runtime.client().heartbeat(progress)


def current_step() -> StepInfo | None:
    """Inside a dispatched step: its run id, position, attempt and stable ``step_id``."""
    return _current_step()


def requeue(run_id: str) -> None:
    """Put a ``failed`` or ``dead`` run back to ``pending`` so it runs again.

    Failed steps really execute again (their failure is not replayed), the
    recovery count is reset and the execution timeout starts over. Raises
    :class:`~durable.InvalidRunState` for a run in any other status.
    """
    runtime.client().requeue(run_id)


def redispatch_pending(run_id: str) -> int:
    """Dispatch again every pending step of an active run (same step ids); returns how many.

    Safe to call at any time: a worker that already has the step settles it
    first and the re-delivery then finds nothing to do.
    """
    return runtime.client().redispatch_pending(run_id)


def retry_with_input(run_id: str, input: Any) -> str:
    """Start a new run of a failed (or dead) run's workflow with corrected ``input``.

    The new run is ``<run_id>~retry~<hex>``, with a clean history, the same
    namespace, tags and parent, on the newest version of the workflow; it
    records the original in ``retry_of``. Returns the new run id.
    """
    return runtime.client().retry_with_input(run_id, input)


def fork(run_id: str, /, from_seq: int, *, input: Any = None, **options: Any) -> str:
    """Start a new run of ``run_id``'s workflow that keeps its history before position ``from_seq``.

    Called as ``fork(run_id, from_seq, *, input=None, run_id=None)``: the
    keyword ``run_id`` is the new run's id (default ``<run_id>~fork~<hex>``;
    idempotent, like :func:`start`: forking again with the same new id and
    position returns it). The new run is on the newest version of the
    workflow, with the original's namespace, tags, search attributes and
    priority; it replays the settled checkpoints before ``from_seq`` and
    executes from there. ``input`` replaces the input (``None`` keeps the
    original's): the positions before ``from_seq`` must still replay with it,
    or the new run fails with :class:`~durable.NonDeterminismError`. It records
    ``forked_from`` and ``forked_at_seq``; the original is not touched.

    Only a finished run (completed, failed, cancelled, dead) can be forked
    (:class:`~durable.InvalidRunState` otherwise). ``from_seq`` is a position
    from 1 (keep nothing) to one past the last recorded one (keep everything);
    anything else raises :class:`~durable.InvalidInput`. Nothing is written
    when an argument is refused. The new run is created in one transaction
    with its copied history, and dispatched once that transaction commits.
    """
    unknown = sorted(set(options) - {"run_id"})
    if unknown:
        raise TypeError(f"fork() got an unexpected keyword argument {unknown[0]!r}")
    return runtime.client().fork(run_id, from_seq, input=input, new_run_id=options.get("run_id"))


def signal_with_start(
    workflow: Any, run_id: str, name: str, payload: Any = None, *, input: Any = None, **start_options: Any
) -> str:
    """Send signal ``name`` to run ``run_id``, starting it first (as :func:`start`) if it does not exist.

    The start and the signal are one transaction: the run never exists
    without the signal, and of concurrent callers on one id exactly one
    creates the run while every caller's signal is delivered, in the order
    their transactions commit (first in, first out per name, as
    :func:`signal`). ``input`` and ``start_options`` (``tags``,
    ``namespace``, ``search_attributes``, ``priority``) apply only when this
    call creates the run. Returns ``run_id``.

    Raises :class:`~durable.InvalidRunState` if the run exists and has ended
    (it takes no more signals), :class:`~durable.InvalidInput` if it is a run
    of another workflow or an argument is refused; nothing is written then.
    """
    return runtime.client().signal_with_start(workflow, run_id, name, payload, input=input, **start_options)


def complete_callback(token: str, payload: Any = None) -> None:
    """Complete the callback ``token`` names (``ctx.wait_for_callback``) with a JSON ``payload``.

    Kept if the run is not waiting on it yet: ``handle.wait()`` returns it
    when the run gets there. Exactly one completion or failure of a callback
    is written: a second one, one after its timeout, or one after its run
    ended raises :class:`~durable.CallbackAlreadyCompleted` and writes
    nothing. A token this deployment did not sign raises
    :class:`~durable.InvalidCallbackToken`; a run or callback that does not
    exist, :class:`~durable.CallbackNotFound`. The run is woken once the
    caller's transaction commits.
    """
    runtime.client().complete_callback(token, payload)


def fail_callback(token: str, error: Any) -> None:
    """Fail the callback ``token`` names: ``handle.wait()`` raises :class:`~durable.CallbackFailed`.

    ``error`` is a message, a dict with a ``"message"``, or an exception
    (recorded as the run's errors are, without its traceback). Refused as
    :func:`complete_callback` refuses.
    """
    runtime.client().fail_callback(token, error)


def resume_breakpoint(run_id: str) -> str:
    """Let a run paused at ``ctx.breakpoint(label)`` go on past it; returns the label.

    Raises :class:`~durable.BreakpointNotFound` when the run is not paused at
    a breakpoint (never got there, already resumed, or ended) and
    :class:`~durable.RunNotFound` for an unknown run; nothing is written then.
    The run's next turn is dispatched once the caller's transaction commits.
    """
    return runtime.client().resume_breakpoint(run_id)
