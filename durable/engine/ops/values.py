"""The small operations of ``ctx``: recorded values, run attributes, patches, transactions.

``now``, ``uuid`` and ``side_effect`` record a value once and replay it;
``patched``, ``upsert_search_attributes`` and ``set_event`` write columns of
the run itself with the turn's next commit; ``transaction`` runs a function
inside the transaction that records it (exactly once); ``continue_as_new``
ends the run and carries on as a fresh one.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from durable.engine.history import COMPLETED
from durable.engine.ops.base import OpsBase
from durable.engine.serialization import error_record, to_json
from durable.engine.vocab import CheckpointKind
from durable.exceptions import ContinueAsNew, InvalidInput, StepFailed

TRANSACTION = CheckpointKind.TRANSACTION


class ValueOps(OpsBase):
    # -- recorded values -----------------------------------------------------
    def now(self) -> datetime:
        """The current time, recorded on first execution and replayed after."""
        seq, cp = self._next("now", CheckpointKind.NOW)
        if cp is not None:
            return datetime.fromisoformat(cp.output)
        value = self._clock.now().astimezone(UTC)
        self._port.defer(self._history.recorded(seq, "now", CheckpointKind.NOW, value.isoformat()))
        return value

    def uuid(self) -> str:
        """A random UUID (string), recorded once."""
        seq, cp = self._next("uuid", CheckpointKind.UUID)
        if cp is not None:
            return str(cp.output)
        value = str(uuid_module.uuid4())
        self._port.defer(self._history.recorded(seq, "uuid", CheckpointKind.UUID, value))
        return value

    def side_effect(self, fn: Callable[[], Any], *, name: str = "side_effect") -> Any:
        """Call ``fn()`` once; its (JSON) result is recorded and replayed.

        Use it for small non-deterministic reads (a random choice, a config
        value). The value is committed before the workflow goes on.
        """
        seq, cp = self._next(name, CheckpointKind.SIDE_EFFECT)
        if cp is not None:
            return cp.output
        value = to_json(fn(), f"side_effect {name!r} result")
        self._port.defer(self._history.recorded(seq, name, CheckpointKind.SIDE_EFFECT, value))
        self._port.flush()
        return value

    # -- continue-as-new -------------------------------------------------------
    def continue_as_new(self, input: Any = None) -> None:
        """End this run and carry on as a fresh run (``<id>~1``, ``~2``...) with ``input``.

        The next run is written in the same transaction that completes this one,
        so the chain never breaks. ``durable.get_run(id, follow=True)`` and
        ``wait_for_run`` follow it to its latest run.
        """
        raise ContinueAsNew(input)

    # -- versioning ------------------------------------------------------------
    def patched(self, change_id: str) -> bool:
        """True if this run takes the new code path guarded by ``change_id``.

        New runs, and runs that had not reached this point when the code
        changed, get True (and keep getting it on replay); runs whose recorded
        history already went past this point get False. Takes no position.
        """
        if not isinstance(change_id, str) or not change_id:
            raise InvalidInput("patched needs a non-empty change id")
        run = self._port.run
        patches = list(run.patches or [])
        if change_id in patches:
            return True
        if not self._history.at_frontier():
            return False
        patches.append(change_id)
        run.patches = patches
        self._port.set_run_field("patches", patches)
        return True

    # -- search attributes and queries -----------------------------------------
    def upsert_search_attributes(self, attributes: dict[str, Any]) -> None:
        """Merge ``attributes`` into the run's search attributes (recorded once)."""
        if not isinstance(attributes, dict) or not all(isinstance(k, str) and k for k in attributes):
            raise InvalidInput("search attributes must be a dict with non-empty string keys")
        kind = CheckpointKind.ATTRIBUTES
        seq, cp = self._next("search_attributes", kind)
        if cp is not None:
            return
        value = to_json(attributes, "search attributes", max_bytes=64 * 1024)
        run = self._port.run
        merged = {**(run.search_attributes or {}), **value}
        run.search_attributes = merged
        self._port.set_run_field("search_attributes", merged)
        self._port.defer(self._history.recorded(seq, "search_attributes", kind, value))

    def set_event(self, key: str, value: Any) -> None:
        """Publish a value that callers read with ``durable.get_event(run_id, key)``.

        Visible once the turn's next commit lands; kept after the run ends.
        """
        if not isinstance(key, str) or not key:
            raise InvalidInput("set_event needs a non-empty key")
        run = self._port.run
        values = dict(run.query_values or {})
        values[key] = to_json(value, f"event {key!r}", max_bytes=self._engine.settings.max_payload_bytes)
        run.query_values = values
        self._port.set_run_field("query_values", values)

    # -- exactly-once database work --------------------------------------------
    def transaction(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` inside ``transaction.atomic()`` together with its checkpoint.

        The business writes of ``fn`` and the record that it ran commit or roll
        back together, so ``fn`` takes effect exactly once even across crashes.
        An exception rolls everything back and raises
        :class:`~durable.StepFailed` (the failure is recorded).
        """
        if not isinstance(name, str) or not name:
            raise InvalidInput("transaction needs a non-empty name")
        seq, cp = self._next(name, TRANSACTION)
        if cp is not None:
            if cp.status == COMPLETED:
                return cp.output
            raise StepFailed(name, seq, cp.error or {}, cp.attempts)
        port, history = self._port, self._history
        port.flush()
        started = self._clock.now()
        try:
            with self._engine.store.atomic():
                value = to_json(fn(*args, **kwargs), f"transaction {name!r} result")
                port.defer(
                    history.completed(seq, name, TRANSACTION, create=True, output=value, attempts=1, started_at=started)
                )
                port.flush()
        except Exception as exc:
            port.discard(seq)
            err = error_record(exc, retryable=False)
            port.defer(history.failed(seq, name, TRANSACTION, err, create=True, attempts=1, started_at=started))
            port.flush()
            raise StepFailed(name, seq, err, 1) from exc
        return value
