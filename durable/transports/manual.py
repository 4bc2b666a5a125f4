"""A transport that pushes nothing: work is found by polling (worker loop, test kit)."""

from __future__ import annotations

from durable.engine.ports import Transport


class ManualTransport(Transport):
    def dispatch_turn(self, run_id: str, *, delay: float = 0.0, namespace: str | None = None) -> None:
        return None

    def dispatch_step(
        self, run_id: str, seq: int, queue: str | None, *, delay: float = 0.0, namespace: str | None = None
    ) -> None:
        return None
