"""One write-triggered admission pass per queue at a time (durable.engine.admission.Admitters)."""

from __future__ import annotations

import threading

import pytest

from durable.engine.admission import Admitters


def test_a_request_during_a_pass_returns_at_once_and_the_pass_runs_again() -> None:
    admitters = Admitters()
    inside, release = threading.Event(), threading.Event()
    passes: list[str] = []

    def first() -> None:
        passes.append("first")
        if len(passes) == 1:
            inside.set()
            release.wait()

    runner = threading.Thread(target=admitters.run, args=("q", first))
    runner.start()
    assert inside.wait(30)
    asked: list[str] = []
    # Served by the running pass's next round: this call runs nothing itself.
    admitters.run("q", lambda: asked.append("second"))
    admitters.run("q", lambda: asked.append("third"))
    assert asked == []
    release.set()
    runner.join(30)
    assert passes == ["first", "first"]  # two requests meanwhile, one more pass
    admitters.run("q", lambda: passes.append("later"))
    assert passes == ["first", "first", "later"]


def test_other_queues_do_not_wait() -> None:
    admitters = Admitters()
    inside, release = threading.Event(), threading.Event()
    runner = threading.Thread(target=admitters.run, args=("a", lambda: (inside.set(), release.wait())))
    runner.start()
    assert inside.wait(30)
    ran: list[str] = []
    admitters.run("b", lambda: ran.append("b"))
    assert ran == ["b"]
    release.set()
    runner.join(30)


def test_a_failed_pass_frees_the_queue_for_the_next_request() -> None:
    admitters = Admitters()

    def broken() -> None:
        raise RuntimeError("database away")

    with pytest.raises(RuntimeError):
        admitters.run("q", broken)
    ran: list[str] = []
    admitters.run("q", lambda: ran.append("next"))
    assert ran == ["next"]
