"""The benchmark's arithmetic: paired ratios, the noisy flag, impossible SQL counts (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.pairing import advantage, alternate, impossible_counts, noisy, ratios
from bench.sizes import SIZES, parse_overrides
from bench.table import count_row, row


def test_advantage_is_ours_over_peer_for_rates_and_peer_over_ours_for_times() -> None:
    assert advantage(300.0, 100.0, higher_is_better=True) == 3.0
    assert advantage(2.0, 8.0, higher_is_better=False) == 4.0
    assert advantage(None, 1.0, higher_is_better=True) is None
    assert advantage(1.0, 0.0, higher_is_better=True) is None
    assert advantage(0.0, 1.0, higher_is_better=False) is None


def test_paired_ratio_is_the_median_of_per_repetition_ratios_not_the_ratio_of_medians() -> None:
    # The machine slows down over the run; each repetition pairs ours with the peer's, measured beside it.
    ours = [100.0, 200.0, 400.0]
    peer = [40.0, 50.0, 200.0]
    got = ratios(ours, peer, higher_is_better=True)
    assert got["paired"]["values"] == [2.5, 4.0, 2.0]
    assert got["paired"]["median"] == 2.5
    assert got["paired"]["min"] == 2.0 and got["paired"]["max"] == 4.0
    assert got["of_medians"] == 4.0  # 200 / 50: what the medians alone would have claimed
    assert got["ours"]["median"] == 200.0 and got["peer"]["median"] == 50.0


def test_paired_ratio_of_times_inverts_and_skips_a_repetition_missing_a_side() -> None:
    got = ratios([1.0, None, 2.0], [3.0, 5.0, 2.0], higher_is_better=False)
    assert got["paired"]["values"] == [3.0, 1.0]
    assert got["paired"]["n"] == 2
    assert got["of_medians"] == 2.0  # medians of every repetition of each side: 3 / 1.5


def test_paired_ratio_refuses_unaligned_repetitions() -> None:
    with pytest.raises(ValueError):
        ratios([1.0, 2.0], [1.0], higher_is_better=True)


def test_noisy_when_any_sample_exceeds_the_cores() -> None:
    assert noisy([0.5, 1.9, 2.0], cores=2) is False
    assert noisy([0.5, 2.01], cores=2) is True
    assert noisy([], cores=2) is False


def test_alternate_swaps_the_order_every_other_repetition_and_attaches_the_conditions() -> None:
    calls: list[tuple[str, int]] = []
    loads = iter([1.0, 2.0, 3.0])

    def measure(key: str, rep: int) -> dict[str, Any]:
        calls.append((key, rep))
        return {"value": len(calls)}

    raw, samples = alternate(3, ["a", "b"], measure, lambda: {"loadavg_1m": next(loads)})
    assert calls == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert [r["value"] for r in raw["a"]] == [1, 4, 5]
    assert [r["value"] for r in raw["b"]] == [2, 3, 6]
    assert [r["conditions"]["loadavg_1m"] for r in raw["b"]] == [1.0, 2.0, 3.0]
    assert samples == [{"loadavg_1m": 1.0}, {"loadavg_1m": 2.0}, {"loadavg_1m": 3.0}]


def test_possible_counts_pass() -> None:
    counts = {"statements": 1.0, "explicit_txns": 1.0, "autocommit_txns": 0.0, "write_txns": 1.0}
    counts["pgss"] = {"statements": 2.0, "begin": 1.0, "commit": 1.0, "calls": 4.0, "sql": {"x": -1.0}}
    assert impossible_counts(counts) == []
    assert impossible_counts({"statements": -0.01}) == []  # rounding of prorated background


def test_negative_and_contradictory_counts_are_impossible() -> None:
    # The shape of the JSON behind "0.75 statements per dispatched step".
    counts = {
        "statements": 0.725,
        "explicit_txns": 0.0,
        "autocommit_txns": 0.725,
        "write_txns": -0.05,
        "server_write_txns": -0.325,
    }
    why = impossible_counts(counts)
    assert why == ["write_txns is negative (-0.050)", "server_write_txns is negative (-0.325)"]
    assert impossible_counts({"explicit_txns": 1.0, "autocommit_txns": 0.0, "write_txns": 2.0}) == [
        "more write transactions than transactions"
    ]
    assert impossible_counts({"pgss": {"statements": 1.0, "commit": 3.0}}) == ["pgss: more COMMITs than statements"]


def test_an_impossible_count_is_flagged_in_the_table_not_printed() -> None:
    bad = {"statements": 0.725, "explicit_txns": 0.0, "autocommit_txns": 0.725, "write_txns": -0.05}
    good = {"statements": 1.0, "explicit_txns": 1.0, "autocommit_txns": 0.0, "write_txns": 1.0}
    r = count_row("6", "statements", bad, good, "statements")
    assert r["ours"] is None
    assert r["peer"] == 1.0
    assert r["flagged"] == ["ours"]
    assert r["impossible"] == ["ours: write_txns is negative (-0.050)"]
    assert count_row("6", "transactions", good, None, "txns", limit=1)["met"] is True


def test_a_target_is_judged_on_the_paired_ratio() -> None:
    ours = {"median": 200.0, "values": [100.0, 200.0, 400.0]}
    peer = {"median": 50.0, "values": [40.0, 50.0, 200.0]}
    r = row("w", "m", ours, peer, higher=True, target="at least 3x", goal=3)
    assert r["advantage"] == 2.5 and r["advantage_of_medians"] == 4.0
    assert r["met"] is False


def test_size_overrides_keep_the_type_and_refuse_unknown_keys() -> None:
    base = SIZES["quick"]
    assert parse_overrides(["w7_runs=1_000_000", "w3_min_seconds=0.5"], base) == {
        "w7_runs": 1_000_000,
        "w3_min_seconds": 0.5,
    }
    with pytest.raises(SystemExit):
        parse_overrides(["w99=1"], base)
    with pytest.raises(SystemExit):
        parse_overrides(["w7_runs=many"], base)


def test_the_per_step_baseline_row_is_a_multiple_of_the_insert_with_a_maximum() -> None:
    step = {"median": 1.2, "values": [1.0, 1.2, 1.5]}
    insert = {"median": 1.0, "values": [1.0, 1.0, 1.0]}
    r = row("3", "step ÷ insert", step, insert, higher=True, most=1.3)
    assert r["advantage"] == 1.2 and r["met"] is True
    assert row("3", "step ÷ insert", step, {"median": 0.5, "values": [0.5] * 3}, higher=True, most=1.3)["met"] is False


def test_a_with_statement_counts_as_a_write_when_a_part_writes_not_when_it_only_locks() -> None:
    from bench.sqlcount import SqlCounter

    writes = [
        'WITH lease AS (SELECT 1 FROM "durable_run" FOR SHARE), ins AS (INSERT INTO "t" ("a") SELECT 1) SELECT 1',
        'WITH lease AS (UPDATE "durable_run" SET "status" = %s WHERE "id" = %s RETURNING 1) SELECT 1 FROM lease',
        'WITH old AS (SELECT 1 FROM "r" FOR UPDATE), cp AS (UPDATE "c" SET "s" = %s RETURNING 1) SELECT 1',
        'WITH gone AS (DELETE FROM "w" WHERE "run_id" = %s) SELECT 1',
    ]
    reads = [
        'WITH lk AS (SELECT 1 FROM "q" WHERE "name" = %s FOR UPDATE) SELECT 1 FROM lk',
        'WITH c AS (SELECT 1 FROM "q" FOR NO KEY UPDATE SKIP LOCKED) SELECT 1 FROM c',
        'WITH c AS (SELECT 1 FROM "q" FOR UPDATE OF "q" NOWAIT) SELECT 1 FROM c',
    ]
    counter = SqlCounter()
    for sql in writes + reads:
        counter.statement(sql, conn_key=1, in_txn=False)
    assert (counter.autocommit_txns, counter.write_txns) == (7, 4)
