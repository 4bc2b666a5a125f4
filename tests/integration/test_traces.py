"""One trace per run across real Celery worker processes (OpenTelemetry SDK in every process).

The test process starts the run (its span is the root of the trace); the turns
run on worker T (queue ``durable``), the three dispatched steps on worker S
(queues ``alpha``, ``beta``), which also runs the turn each step result
continues. The workers export their spans to a file; the test reads them with
its own in-memory exporter's and checks every relation.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

import durable
from durable.models import Run
from tests.integration.harness import wait_until
from tests.otel_kit import SPANS_ENV, as_dict, install

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.durable_settings(OPENTELEMETRY=True)
def test_a_run_is_one_trace_across_the_processes_that_ran_it(cluster, tmp_path):
    exporter, _ = install()
    exporter.clear()
    spans_file = tmp_path / "spans.jsonl"
    env = {SPANS_ENV: str(spans_file)}
    turns_worker = cluster.spawn_worker("T", ["durable"], env=env)
    steps_worker = cluster.spawn_worker("S", ["alpha", "beta"], env=env)
    cluster.wait_ready(turns_worker, steps_worker)
    cluster.beat()  # wakes the sleep when due

    run_id = durable.start("it.traced", 2, run_id="traced-1")
    wait_until(
        lambda: Run.objects.filter(id=run_id, status="suspended").exists() and _waits_signal(run_id), "signal wait"
    )
    durable.signal(run_id, "go", True)
    wait_until(
        lambda: Run.objects.get(id=run_id).status == "completed", "the run to complete", diagnostics=cluster.diagnostics
    )
    assert Run.objects.get(id=run_id).output == ((2 + 1) * 2) ** 2

    def all_turns_exported() -> list[dict] | None:
        mine = _spans(spans_file, exporter, run_id)
        done = [
            s for s in mine if s["name"] == "durable.turn" and s["attributes"].get("durable.outcome") == "completed"
        ]
        # The eager steps' spans are built off the worker's engine thread, so they may come later.
        steps = [s for s in mine if s["name"] == "durable.step"]
        return mine if done and len(steps) == 3 else None

    spans = wait_until(all_turns_exported, "the final turn's and every step's span to be exported")
    assert len({s["trace_id"] for s in spans}) == 1
    by_id = {s["span_id"]: s for s in spans}
    (start,) = [s for s in spans if s["name"] == "durable.start"]
    turns = [s for s in spans if s["name"] == "durable.turn"]
    steps = [s for s in spans if s["name"] == "durable.step"]
    assert {s["parent_id"] for s in turns} == {start["span_id"]}
    assert Counter(s["attributes"]["durable.outcome"] for s in turns)["completed"] == 1
    assert sorted((s["attributes"]["durable.seq"], s["attributes"]["durable.step"]) for s in steps) == [
        (1, "alpha.inc"),
        (4, "beta.double"),
        (5, "alpha.square"),
    ]
    modes = Counter()
    for step in steps:
        parent = by_id[step["parent_id"]]
        attributes = step["attributes"]
        assert parent["name"] == "durable.turn" and attributes["durable.outcome"] == "completed"
        assert step["pid"] == steps_worker.pid and attributes["durable.queue"] in ("alpha", "beta")
        modes[attributes["durable.mode"]] += 1
        if attributes["durable.mode"] == "dispatched":
            # Dispatched by a turn of another process: the context came in the message headers.
            assert parent["pid"] == turns_worker.pid
        else:
            # Run by worker S's own turn (continued after the previous step), as an eager step.
            assert (attributes["durable.mode"], parent["pid"]) == ("eager", steps_worker.pid)
    assert modes["dispatched"] >= 1
    assert {s["pid"] for s in spans} >= {start["pid"], turns_worker.pid, steps_worker.pid}
    outcomes = [s["attributes"]["durable.outcome"] for s in sorted(turns, key=lambda s: s["start"])]
    assert outcomes[-1] == "completed" and set(outcomes[:-1]) <= {"suspended"}


def _waits_signal(run_id: str) -> bool:
    from durable.models import SignalWaiter

    return SignalWaiter.objects.filter(run_id=run_id, name="go").exists()


def _spans(path, exporter, run_id: str) -> list[dict]:
    found = [as_dict(s) for s in exporter.get_finished_spans()]
    if path.exists():
        found += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [s for s in found if s["attributes"].get("durable.run_id") == run_id]
