"""Thread helpers for race tests: each thread has its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

SETTLE = 60.0  # real seconds a helper thread may take before the test fails (only a hung one does)


def in_other_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` to completion in a new thread (its own DB connection); return or re-raise."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(SETTLE)
    assert not thread.is_alive(), "helper thread hung"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def concurrently(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Call ``fn(i)`` for i in range(n) in n threads released together by a barrier."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException | None] = [None] * n

    def body(i: int) -> None:
        try:
            barrier.wait(SETTLE)
            results[i] = fn(i)
        except BaseException as exc:
            errors[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(3 * SETTLE)
    assert not any(t.is_alive() for t in threads), "a racing thread hung"
    for error in errors:
        if error is not None:
            raise error
    return results
