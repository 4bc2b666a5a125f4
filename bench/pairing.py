"""Pure arithmetic of the benchmarks: paired ratios, noise, impossible counts.

Every comparison the benchmarks print is an *advantage*: ours ÷ peer for a rate
(higher is better), peer ÷ ours for a time or a count (lower is better), so
above 1.0 always means "ours is ahead". Repetitions of the two sides alternate,
so the honest figure is the **paired ratio**: the median of the per-repetition
advantages (a load spike moves both sides of a pair alike). The ratio of the
two medians is reported beside it; when the two disagree, the run was noisy.

Nothing here reads a clock or a database: the driver passes measurements in.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from bench.common import summary

# A per-step count may come out slightly below zero from rounding of prorated
# background; anything beyond this is a broken measurement, not noise.
COUNT_TOLERANCE = 0.02


def advantage(ours: float | None, peer: float | None, *, higher_is_better: bool) -> float | None:
    """ours ÷ peer (rates) or peer ÷ ours (times, counts); None when either side is missing or zero."""
    if ours is None or peer is None or ours <= 0 or peer <= 0:
        return None
    return ours / peer if higher_is_better else peer / ours


def ratios(ours: Sequence[float | None], peer: Sequence[float | None], *, higher_is_better: bool) -> dict[str, Any]:
    """The paired ratio (median of per-repetition advantages) and the ratio of the medians.

    ``ours[i]`` and ``peer[i]`` are the same repetition (measured back to back).
    A repetition with a missing side is left out of the pairs, never padded.
    """
    per_rep = [advantage(o, p, higher_is_better=higher_is_better) for o, p in zip(ours, peer, strict=True)]
    pairs = [r for r in per_rep if r is not None]
    ours_ok = [float(o) for o in ours if o is not None]
    peer_ok = [float(p) for p in peer if p is not None]
    of_medians = None
    if ours_ok and peer_ok:
        of_medians = advantage(
            statistics.median(ours_ok), statistics.median(peer_ok), higher_is_better=higher_is_better
        )
    return {
        "paired": summary(pairs),
        "of_medians": of_medians,
        "higher_is_better": higher_is_better,
        "ours": summary(ours_ok),
        "peer": summary(peer_ok),
    }


def noisy(loads: Iterable[float], cores: int) -> bool:
    """True when the 1-minute load average exceeded the cores at any sample: figures are not conclusive."""
    return any(load > cores for load in loads)


def alternate(
    reps: int,
    keys: Sequence[str],
    measure: Callable[[str, int], dict[str, Any]],
    sample: Callable[[], dict[str, Any]] | None = None,
    *,
    swap: bool = True,
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Run ``measure(key, rep)`` for every key, ``reps`` times, in alternating order.

    With ``swap`` the order is reversed on every other repetition (A B, B A, ...),
    so neither side always runs first on a warming or cooling machine.
    ``sample()`` (machine conditions: load, commit latency) runs after every
    repetition; its result is stored with each measurement of that repetition
    (``"conditions"``) and returned in order.
    """
    raw: dict[str, list[dict[str, Any]]] = {key: [] for key in keys}
    samples: list[dict[str, Any]] = []
    for rep in range(reps):
        order = list(keys) if not swap or rep % 2 == 0 else list(reversed(keys))
        got = {key: measure(key, rep) for key in order}
        cond = sample() if sample is not None else None
        for key in keys:
            if cond is not None:
                got[key]["conditions"] = cond
            raw[key].append(got[key])
        if cond is not None:
            samples.append(cond)
    return raw, samples


def impossible_counts(counts: Mapping[str, Any]) -> list[str]:
    """Why a set of per-unit SQL counts cannot be true (empty when they can).

    A count below zero is impossible (the later batch cannot have run fewer
    statements than the earlier); so are more write transactions than
    transactions, and more server-side COMMITs than server-side statements.
    """
    why: list[str] = []
    for key, value in counts.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < -COUNT_TOLERANCE:
            why.append(f"{key} is negative ({value:.3f})")
    txns = _num(counts, "explicit_txns") + _num(counts, "autocommit_txns")
    if _num(counts, "write_txns") > txns + COUNT_TOLERANCE:
        why.append("more write transactions than transactions")
    pgss = counts.get("pgss")
    if isinstance(pgss, Mapping):
        why += [f"pgss {w}" for w in impossible_counts({k: v for k, v in pgss.items() if k != "sql"})]
        if _num(pgss, "commit") > _num(pgss, "statements") + COUNT_TOLERANCE:
            why.append("pgss: more COMMITs than statements")
    return why


def _num(d: Mapping[str, Any], key: str) -> float:
    value = d.get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0
