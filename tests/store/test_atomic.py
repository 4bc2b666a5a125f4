"""Store contract: atomic() is commit-or-nothing, with nested blocks as savepoints."""

from __future__ import annotations

from typing import Any

import pytest

from tests.store.conftest import OWNER, at, fields, running


class Boom(Exception):
    pass


def test_atomic_rolls_back_every_write_of_the_block(store: Any) -> None:
    running(store, "r1")
    with pytest.raises(Boom), store.atomic():
        store.create_run(fields("r2"))
        store.signal("r1", "go", 1, at(1))
        store.release("r1", OWNER, at(1), at(2), True)
        raise Boom()
    assert store.get_run("r2") is None
    assert store.next_signal("r1", "go", []) is None
    run = store.get_run("r1")
    assert (run.status, run.locked_by, run.recovery_attempts) == ("running", OWNER, 0)


def test_atomic_keeps_the_writes_of_a_block_that_ends_normally(store: Any) -> None:
    with store.atomic():
        store.create_run(fields("r1"))
    assert store.get_run("r1").status == "pending"


def test_a_failed_inner_block_rolls_back_only_itself(store: Any) -> None:
    with store.atomic():
        store.create_run(fields("outer"))
        with pytest.raises(Boom), store.atomic():
            store.create_run(fields("inner"))
            raise Boom()
        store.create_run(fields("after"))
    assert (store.get_run("outer") is not None, store.get_run("inner"), store.get_run("after") is not None) == (
        True,
        None,
        True,
    )


def test_transaction_depth_counts_the_open_atomic_blocks(store: Any) -> None:
    outside = store.transaction_depth()
    with store.atomic():
        assert store.transaction_depth() == outside + 1
        with store.atomic():
            assert store.transaction_depth() == outside + 2
        assert store.transaction_depth() == outside + 1
    assert store.transaction_depth() == outside
