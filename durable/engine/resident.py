"""Resident workflows: a suspended run's workflow kept paused in memory and resumed without a replay.

A turn replays its workflow function from the top (Principle 5), so a run of
``n`` dispatched steps one after another replays ``n²/2`` positions in all.
With ``RESIDENT_WORKFLOWS`` on (and the optional ``greenlet`` package
installed), a turn runs the workflow function in a greenlet of its own; when
the workflow waits on one thing (a dispatched step, a timer, a signal, an
update or a named event) and nothing else, the greenlet is
*parked* instead of unwinding, and the history cache's entry for the run
(:mod:`durable.engine.history_cache`) keeps it. The run's next turn, when it
takes that entry in the same thread, *resumes* the parked greenlet: the
waiting operation reads its position again from the turn's history and the
workflow goes on from there. Nothing before the position runs again.

Correctness rests on the history cache's rules (an entry is used only by the
lease holder whose final commit suspended the run, with no other turn of the
run since and no cancel pending) plus these:

* a workflow parks only where a replay would stop and resume the same way:
  inside one waiting operation, after it registered its wait, in a turn that
  had registered no other and is not cancelling, compensating or replaying a
  non-determinism; resumed, that operation reads its position again and goes
  on exactly as its replay would;
* a parked workflow is kept only once the final commit that suspended it is
  written (a refused or failed commit ends it), and is resumed only by the
  same engine, in the thread that parked it (a greenlet cannot change
  threads), for the same workflow function; any doubt ends it and the turn
  replays from the top, as without residency;
* ending a parked workflow (:meth:`Parked.end`) raises the internal
  ``Suspend`` at its waiting operation, so its frames unwind exactly as a
  suspension of the replaying engine would (``finally`` blocks run, every
  ``ctx`` operation in them raises ``Suspend`` again). Ended from another
  thread, it is only dropped; greenlet ends it in its own thread later.

Thread-safety: a parked workflow is touched only by the thread that parked it;
the history cache hands its entry to one turn at a time.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable.exceptions import Suspend

if TYPE_CHECKING:
    from durable.engine.core import Engine

try:  # the optional extra django-durable[resident]
    import greenlet as _greenlet
except ImportError:  # pragma: no cover - an installation without the extra
    _greenlet = None

# What a parked workflow sends its driver, and what the driver sends back.
_PARKED = object()
_RESUME = object()
_END = object()


def available() -> bool:
    """Whether greenlet is installed (without it, every turn replays)."""
    return _greenlet is not None


@dataclass(eq=False)
class Parked:
    """A workflow paused in ``glet`` at one of its waiting operations, with its ``ctx``.

    ``thread``: the thread that parked it (the only one that may resume or end it).
    """

    glet: Any
    ctx: Any
    fn: Callable[..., Any]
    engine: Engine
    thread: int

    def resumable(self, engine: Engine, fn: Callable[..., Any]) -> bool:
        """May a turn of ``engine`` in this thread, for workflow function ``fn``, resume it?"""
        return engine is self.engine and fn is self.fn and self.thread == threading.get_ident() and not self.glet.dead

    def end(self) -> None:
        """Unwind the workflow as a suspension would; from another thread it is only dropped."""
        if self.glet.dead or self.thread != threading.get_ident():
            return
        self.glet.parent = _greenlet.getcurrent()
        self.glet.switch(_END)


class _Workflow(_greenlet.greenlet if _greenlet is not None else object):  # type: ignore[misc]
    """The greenlet a workflow function runs in; ``ending``: being ended."""

    ending = False


def _run(body: Callable[[], Any]) -> tuple[bool, Any]:
    """The greenlet's function: (True, what ``body`` returned), or (False, None) once ended."""
    try:
        return True, body()
    except BaseException:
        if _greenlet.getcurrent().ending:
            # Whatever its frames raised while unwinding: nobody waits for this workflow any more.
            return False, None
        raise


def start(body: Callable[[], Any]) -> tuple[Any, Any]:
    """Run ``body`` (the workflow function's call) until it returns, raises or parks.

    Returns ``(result, None)`` when it returned, and ``(None, glet)`` when it
    parked (the caller makes it a :class:`Parked`); its exceptions propagate.
    """
    glet = _Workflow(lambda: _run(body))
    glet.gr_context = contextvars.copy_context()
    return _drive(glet)


def resume(parked: Parked) -> tuple[Any, Any]:
    """Resume a parked workflow in this turn: as :func:`start`."""
    glet = parked.glet
    glet.parent = _greenlet.getcurrent()
    glet.gr_context = contextvars.copy_context()
    return _drive(glet, _RESUME)


def _drive(glet: Any, *value: Any) -> tuple[Any, Any]:
    got = glet.switch(*value)
    if got is _PARKED:
        return None, glet
    return got[1], None


def parkable() -> bool:
    """Is the calling code a workflow running in its own greenlet (so that it may park)?"""
    return _greenlet is not None and isinstance(_greenlet.getcurrent(), _Workflow)


def park() -> None:
    """Park the calling workflow (see :func:`parkable`); returns in a later turn.

    Raises ``Suspend`` when the workflow is ended instead of resumed.
    """
    glet = _greenlet.getcurrent()
    try:
        answer = glet.parent.switch(_PARKED)
    except _greenlet.GreenletExit:
        # Dropped in another thread and collected: end it as a suspension would.
        answer = _END
    if answer is _END:
        glet.ending = True
        raise Suspend()
